//! Text cut where the truncated tokens end (what a client of a server that
//! tokenises for itself sends): tokenising the cut text again gives exactly
//! the tokens the native engine embeds, for single texts and for pairs
//! truncated longest-first, with the real WordPiece and Qwen3 tokenizers.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use embedder::Tokenization;
use tokenizers::PostProcessor;

fn words(n: usize, seed: usize) -> String {
    const WORDS: [&str; 12] = [
        "deploy",
        "kubernetes",
        "embeddings",
        "naïve",
        "résumé",
        "データ",
        "🚀",
        "pipeline",
        "un-tokenisable",
        "x86_64",
        "`git rebase -i`",
        "Übermaß",
    ];
    (0..n)
        .map(|i| WORDS[(i * 7 + seed) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn check(t: &Tokenization, what: &str) {
    let limit = t.max_length();
    // Single texts: shorter than, at, and far beyond the limit.
    let texts: Vec<String> = [10, limit / 2, limit, 3 * limit]
        .iter()
        .enumerate()
        .map(|(i, &n)| words(n, i))
        .collect();
    let cuts = t.cut_text(&texts, limit).unwrap();
    for ((text, cut), i) in texts.iter().zip(&cuts).zip(0..) {
        assert!(cut.exact, "{what} text {i}");
        assert!(text.starts_with(&cut.text));
        assert_eq!(
            t.tokenize(&[cut.text.as_str()]).unwrap(),
            t.tokenize_limited(&[text.as_str()], limit).unwrap(),
            "{what} text {i}"
        );
    }
    // Pairs: the first, the second, or both cut (longest first).
    let pairs = [
        (words(3 * limit, 1), words(20, 2)),
        (words(20, 3), words(3 * limit, 4)),
        (words(2 * limit, 5), words(2 * limit + 7, 6)),
        (words(4, 7), words(6, 8)),
    ];
    let cuts = t.cut_pair(&pairs).unwrap();
    for (i, ((a, b), (ca, cb))) in pairs.iter().zip(&cuts).enumerate() {
        assert!(ca.exact && cb.exact, "{what} pair {i}");
        assert!(a.starts_with(&ca.text) && b.starts_with(&cb.text));
        assert_eq!(
            t.tokenize_pairs(&[(ca.text.as_str(), cb.text.as_str())])
                .unwrap(),
            t.tokenize_pairs(&[(a.as_str(), b.as_str())]).unwrap(),
            "{what} pair {i}"
        );
    }
    // Both sides of the third pair were cut, the short pair not at all.
    assert!(cuts[2].0.text.len() < pairs[2].0.len() && cuts[2].1.text.len() < pairs[2].1.len());
    assert_eq!(
        (&cuts[3].0.text, &cuts[3].1.text),
        (&pairs[3].0, &pairs[3].1)
    );
}

#[test]
fn cut_texts_tokenise_back_to_the_native_tokens() {
    if let Some(dir) = common::model("all-MiniLM-L6-v2", "scripts/fetch-models.sh") {
        check(
            &Tokenization::from_dir(&dir, Some(128), None).unwrap(),
            "WordPiece",
        );
    }
    if let Some(dir) = common::model(
        "test-qwen3-embedding",
        "scripts/fetch-models.sh && python3 scripts/make_qwen3_models.py",
    ) {
        check(
            &Tokenization::from_dir(&dir, Some(96), None).unwrap(),
            "Qwen3 BPE",
        );
    }
}

/// Long texts: a slice of the sample's skills (where the shared sample is present: every
/// sixth skill and the 24 longest, so that the longest bodies and a spread of the others are
/// there; the whole sample showed nothing more and took five times as long) and made-up ones
/// with runs of spaces, tabs and newlines, CJK and emoji.
fn long_texts() -> Vec<String> {
    let mut texts: Vec<String> = (0..40)
        .map(|i| {
            let sep = ["  ", "\t", "\n\n", " \u{3000} ", "   \n  "][i % 5];
            (0..(200 + 97 * i))
                .map(|j| words(1 + j % 3, i + j))
                .collect::<Vec<_>>()
                .join(sep)
        })
        .collect();
    if let Some(sample) = common::sample() {
        let (skills, _) = common::sample_texts(&sample);
        let mut by_length: Vec<usize> = (0..skills.len()).collect();
        by_length.sort_by_key(|&i| std::cmp::Reverse(skills[i].1.len()));
        let mut picked: Vec<usize> = (0..skills.len()).step_by(6).collect();
        picked.extend(by_length.into_iter().take(24).filter(|i| i % 6 != 0));
        texts.extend(picked.into_iter().map(|i| skills[i].1.clone()));
    }
    texts
}

/// The tokenizers the prefix tests run (WordPiece, byte-level BPE), the
/// script that makes each, and the truncation lengths tried.
const PREFIX_MODELS: [(&str, &str, [usize; 2]); 2] = [
    ("all-MiniLM-L6-v2", "scripts/fetch-models.sh", [128, 512]),
    (
        "test-qwen3-embedding",
        "scripts/make_qwen3_models.py",
        [96, 8192],
    ),
];

#[test]
fn truncation_from_a_prefix_gives_the_tokens_of_the_whole_text() {
    for (name, script, limits) in PREFIX_MODELS {
        let Some(dir) = common::model(name, script) else {
            continue;
        };
        let texts = long_texts();
        for limit in limits {
            let ours = Tokenization::from_dir(&dir, Some(limit), None).unwrap();
            let mut whole = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
            whole
                .with_truncation(Some(tokenizers::TruncationParams {
                    max_length: limit,
                    ..Default::default()
                }))
                .unwrap();
            whole.with_padding(None);
            let got = ours.tokenize(&texts).unwrap();
            for (i, (text, tokens)) in texts.iter().zip(&got).enumerate() {
                let want = whole.encode(text.as_str(), true).unwrap();
                assert_eq!(tokens.ids, want.get_ids(), "{name} at {limit}: text {i}");
            }
        }
    }
}

#[test]
fn pair_truncation_from_prefixes_gives_the_tokens_of_the_whole_texts() {
    for (name, script, limits) in PREFIX_MODELS {
        let Some(dir) = common::model(name, script) else {
            continue;
        };
        let texts = long_texts();
        // Each long text against short, mid-length and long partners, both
        // ways round (the longer side in bytes is not always the longer in
        // tokens: emoji and CJK are few tokens for their bytes in WordPiece),
        // and against itself (a tie).
        let partners: Vec<String> = [5, 60, 127, 128, 129, 300, 700]
            .iter()
            .enumerate()
            .map(|(i, &n)| words(n, i))
            .chain(["🚀 ".repeat(900), "データ".repeat(400)])
            .collect();
        let mut pairs = Vec::new();
        for (i, text) in texts.iter().enumerate().step_by(8) {
            let partner = &partners[i % partners.len()];
            pairs.push((text.clone(), partner.clone()));
            pairs.push((partner.clone(), text.clone()));
            pairs.push((text.clone(), text.clone()));
        }
        for limit in limits {
            let ours = Tokenization::from_dir(&dir, Some(limit), None).unwrap();
            // The whole texts, truncated as `post_process` does (its own
            // call would pair every overflowing part of one long text with
            // every part of the other: too much memory for this test).
            // Where both are short enough, also the tokenizer's own call.
            let mut whole = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
            whole.with_truncation(None).unwrap();
            whole.with_padding(None);
            let mut truncating = whole.clone();
            truncating
                .with_truncation(Some(tokenizers::TruncationParams {
                    max_length: limit,
                    ..Default::default()
                }))
                .unwrap();
            let params = tokenizers::TruncationParams {
                max_length: limit - whole.get_post_processor().unwrap().added_tokens(true),
                ..Default::default()
            };
            let got = ours.tokenize_pairs(&pairs).unwrap();
            for (i, ((a, b), tokens)) in pairs.iter().zip(&got).enumerate() {
                let (mut first, second) = tokenizers::utils::truncation::truncate_encodings(
                    whole.encode(a.as_str(), false).unwrap(),
                    Some(whole.encode(b.as_str(), false).unwrap()),
                    &params,
                )
                .unwrap();
                let mut second = second.unwrap();
                first.take_overflowing();
                second.take_overflowing();
                let want = whole.post_process(first, Some(second), true).unwrap();
                if a.len() + b.len() < 12_000 {
                    let direct = truncating
                        .post_process(
                            whole.encode(a.as_str(), false).unwrap(),
                            Some(whole.encode(b.as_str(), false).unwrap()),
                            true,
                        )
                        .unwrap();
                    assert_eq!(
                        direct.get_ids(),
                        want.get_ids(),
                        "{name} at {limit}: pair {i}"
                    );
                }
                assert_eq!(tokens.ids, want.get_ids(), "{name} at {limit}: pair {i}");
                let types = want.get_type_ids();
                if types.iter().any(|&t| t != 0) {
                    assert_eq!(tokens.types, types, "{name} at {limit}: pair {i}");
                }
            }
        }
    }
}
