//! Hub access without the network: the pinned table, verification of cached
//! files, and the fast, helpful failure when the Hub is out of reach.

use std::path::Path;

use eval::Error;
use eval::hub::{self, HubOptions, PinnedFile, Revision};

fn options(cache: &Path, offline: bool) -> HubOptions {
    HubOptions {
        cache_dir: cache.to_path_buf(),
        // Nothing listens on port 9 of the loopback: connections are refused at once.
        endpoint: Some("http://127.0.0.1:9".to_owned()),
        offline,
    }
}

/// Puts `content` where hf-hub's cache keeps `path` of the dataset at `revision`.
fn put_in_cache(
    cache: &Path,
    revision: &Revision,
    path: &str,
    content: &[u8],
) -> std::path::PathBuf {
    let repo = cache.join("datasets--ThakiCloud--SKILLRET");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join(revision.commit), revision.commit).unwrap();
    let file = repo.join("snapshots").join(revision.commit).join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, content).unwrap();
    file
}

#[test]
fn revisions_are_known_by_name_and_commit() {
    let v11 = Revision::find("v1.1").unwrap();
    assert_eq!(v11.commit, "a050ad233a504a43135bafe8cdf45574052b5729");
    assert_eq!(Revision::find(v11.commit).unwrap().name, "v1.1");
    let v10 = Revision::find("v1.0").unwrap();
    assert_eq!(v10.file("data/queries/test.jsonl").unwrap().rows, 4_997);
    assert_eq!(
        v10.file("data/qrels/train.jsonl"),
        v11.file("data/qrels/train.jsonl"),
        "train files are the same in both releases"
    );
    let err = Revision::find("main").unwrap_err().to_string();
    assert!(err.contains("v1.0") && err.contains("--data"), "{err}");
}

#[test]
fn verification_accepts_the_pinned_content_and_refuses_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.jsonl");
    std::fs::write(&path, b"hello\n").unwrap();
    // sha256 of "hello\n".
    let good = PinnedFile {
        path: "f.jsonl",
        rows: 1,
        bytes: 6,
        sha256: "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
    };
    hub::verify(&path, &good, "test file").unwrap();
    let other = PinnedFile {
        sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        ..good
    };
    let err = hub::verify(&path, &other, "test file").unwrap_err();
    assert!(matches!(err, Error::Checksum { .. }), "{err}");
    assert!(err.to_string().contains("5891b5b5"), "{err}");
    let longer = PinnedFile { bytes: 7, ..good };
    assert!(
        hub::verify(&path, &longer, "test file")
            .unwrap_err()
            .to_string()
            .contains("6 bytes instead of 7")
    );
}

#[test]
fn a_corrupt_cached_file_is_refused() {
    let cache = tempfile::tempdir().unwrap();
    let v11 = Revision::find("v1.1").unwrap();
    let file = v11.file("data/qrels/test.jsonl").unwrap();
    let cached = put_in_cache(cache.path(), v11, file.path, b"{\"query_id\": \"q\"}\n");
    let err = hub::fetch_file(v11, file, &options(cache.path(), true)).unwrap_err();
    match &err {
        Error::Checksum { path, expected, .. } => {
            assert_eq!(path, &cached);
            assert_eq!(expected, file.sha256);
        }
        other => panic!("expected a checksum error, got {other}"),
    }
}

#[test]
fn offline_without_cache_fails_fast_and_says_how_to_use_local_data() {
    let cache = tempfile::tempdir().unwrap();
    let v10 = Revision::find("v1.0").unwrap();
    let err = hub::fetch_split(v10, "test", &options(cache.path(), true)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Hub(_)), "{text}");
    assert!(text.contains("HF_HUB_OFFLINE"), "{text}");
    assert!(text.contains("--data <dir>"), "{text}");
    assert!(text.contains("data/skills/test.jsonl"), "{text}");
}

#[test]
fn unreachable_hub_fails_fast_and_says_how_to_use_local_data() {
    let cache = tempfile::tempdir().unwrap();
    let v11 = Revision::find("v1.1").unwrap();
    let err = hub::fetch_split(v11, "test", &options(cache.path(), false)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("could not download"), "{text}");
    assert!(text.contains("--data <dir>"), "{text}");
    let err = hub::fetch_split(v11, "validation", &options(cache.path(), false)).unwrap_err();
    assert!(err.to_string().contains("no pinned file"), "{err}");
}
