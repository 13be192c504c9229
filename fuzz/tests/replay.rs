//! Every fuzz target's corpora replayed as an ordinary test (no libFuzzer, no instrumentation):
//! the seeds of `corpus/TARGET/` and the inputs that once crashed a reader, kept in
//! `regressions/TARGET/` (each named for what it found, with `NAME.expect`: what the error that
//! now refuses it says). A reader that panics on one of them, or reads a regression it must
//! refuse, fails this test with the file's name.

use std::path::Path;

#[test]
fn every_corpus_file_is_read_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut count = 0;
    for target in skillret_fuzz::TARGETS {
        let scratch = tempfile::tempdir().expect("a scratch directory");
        for folder in ["corpus", "regressions"] {
            let dir = root.join(folder).join(target.name);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<_> = entries.map(|e| e.expect("a corpus entry").path()).collect();
            files.sort();
            for file in files {
                if file.extension().is_some_and(|e| e == "expect") {
                    continue;
                }
                let data = std::fs::read(&file).expect("a corpus file");
                count += 1;
                let run = std::panic::catch_unwind(|| target.errors(scratch.path(), &data));
                let Ok(errors) = run else {
                    failures.push(format!("{}: panicked", file.display()));
                    continue;
                };
                // A regression that was read where it must be refused says what its error is.
                let expect = file.with_file_name(format!(
                    "{}.expect",
                    file.file_name().unwrap_or_default().to_string_lossy()
                ));
                if let Ok(want) = std::fs::read_to_string(&expect) {
                    let want = want.trim();
                    if !errors.iter().any(|e| e.contains(want)) {
                        failures.push(format!(
                            "{}: no error says {want:?}; the errors: {errors:?}",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(count > 0, "no corpus files under {}", root.display());
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_target_has_a_fuzz_binary_and_a_seed_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for target in skillret_fuzz::TARGETS {
        let bin = root
            .join("fuzz_targets")
            .join(format!("{}.rs", target.name));
        let source =
            std::fs::read_to_string(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        assert!(
            source.contains(&format!("fuzz(\"{}\"", target.name)),
            "{} runs another target",
            bin.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{}\"", target.name)),
            "fuzz/Cargo.toml has no [[bin]] {}",
            target.name
        );
        let seeds = root.join("corpus").join(target.name);
        let n = std::fs::read_dir(&seeds).map_or(0, Iterator::count);
        assert!(n > 0, "{}: no seed inputs", seeds.display());
    }
}

/// The seeds that are whole, valid files reach the end of their reader without an error (so
/// that the fuzzer starts from inputs that pass every check, and the targets cut their parts
/// as the seeds were written).
#[test]
fn whole_seeds_are_read_without_an_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, seed) in [
        ("hnsw_index", "tiny-minilm"),
        ("cache", "shard-and-probe"),
        ("checkpoint", "step-3-of-10"),
    ] {
        let target = skillret_fuzz::target(name).expect("a target");
        let data = std::fs::read(root.join("corpus").join(name).join(seed)).expect("the seed");
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let errors = target.errors(scratch.path(), &data);
        assert!(errors.is_empty(), "{name}/{seed}: {errors:?}");
    }
    // The other checkpoint seed is refused for its fingerprint, naming state.json.
    let target = skillret_fuzz::target("checkpoint").expect("a target");
    let data = std::fs::read(root.join("corpus/checkpoint/another-fingerprint")).expect("seed");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let errors = target.errors(scratch.path(), &data);
    assert!(
        errors.len() == 1 && errors[0].contains("state.json: fingerprint"),
        "{errors:?}"
    );
}
