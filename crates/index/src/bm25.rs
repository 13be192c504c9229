//! BM25 exactly as the official SkillRet baseline computes it with bm25s
//! (`bm25s.tokenize(texts, stopwords="en")`, default `BM25()`).
//!
//! - Tokens: the text lower-cased (Python's `str.lower`), then every maximal
//!   run of at least two word characters (the regex `(?u)\b\w\w+\b`, where a
//!   word character is a letter, a number or `_` by Unicode general category,
//!   as in Python's `re`), minus the 33 English stop words of Lucene's
//!   classic list.
//! - Scores: the "lucene" variant, k1 = 1.5, b = 0.75:
//!   idf = ln(1 + (N − df + 0.5)/(df + 0.5)), and each query token occurrence
//!   adds idf · tf / (tf + k1 · (1 − b + b · |d| / avgdl)). As in bm25s, each
//!   term's contribution is stored in f32 and a document's score is summed in
//!   f32 in query-token order, so scores match to the last bits.
//! - A query with no token at all (all stop words) is searched as `none`,
//!   as the official code does; tokens unknown to the corpus are dropped.

use std::collections::HashMap;
use std::sync::Arc;

use eval::ScoredDoc;
use rayon::prelude::*;
use unicode_general_category::{GeneralCategory, get_general_category};

/// Lucene's classic English stop words (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`),
/// the list bm25s uses for `stopwords="en"`.
pub const ENGLISH_STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// BM25 parameters (bm25s defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalisation.
    pub b: f64,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 1.5, b: 0.75 }
    }
}

/// Python's `\w` for `str` patterns: letters, numbers, or `_`.
fn is_word_char(c: char) -> bool {
    use GeneralCategory as G;
    c == '_'
        || matches!(
            get_general_category(c),
            G::UppercaseLetter
                | G::LowercaseLetter
                | G::TitlecaseLetter
                | G::ModifierLetter
                | G::OtherLetter
                | G::DecimalNumber
                | G::LetterNumber
                | G::OtherNumber
        )
}

/// bm25s's tokens of a text (stop words removed).
pub fn tokenize(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut tokens = Vec::new();
    let mut start = None;
    let mut chars = 0;
    let push = |from: usize, to: usize, n: usize, tokens: &mut Vec<String>| {
        let token = &lower[from..to];
        if n >= 2 && !ENGLISH_STOP_WORDS.contains(&token) {
            tokens.push(token.to_owned());
        }
    };
    for (i, c) in lower.char_indices() {
        if is_word_char(c) {
            if start.is_none() {
                start = Some(i);
                chars = 0;
            }
            chars += 1;
        } else if let Some(s) = start.take() {
            push(s, i, chars, &mut tokens);
        }
    }
    if let Some(s) = start {
        push(s, lower.len(), chars, &mut tokens);
    }
    tokens
}

/// A BM25 index over a corpus.
#[derive(Debug)]
pub struct Bm25 {
    ids: Vec<Arc<str>>,
    vocab: HashMap<String, usize>,
    /// Per term: (document, f32 contribution of one query occurrence).
    postings: Vec<Vec<(u32, f32)>>,
}

impl Bm25 {
    /// Indexes `texts` (one per document, ids alike).
    pub fn new(ids: Vec<Arc<str>>, texts: &[String], params: Bm25Params) -> Self {
        assert_eq!(ids.len(), texts.len(), "one id per text");
        let docs: Vec<Vec<String>> = texts.par_iter().map(|t| tokenize(t)).collect();
        let mut vocab: HashMap<String, usize> = HashMap::new();
        let mut counts: Vec<HashMap<usize, u32>> = Vec::with_capacity(docs.len());
        for doc in &docs {
            let mut tf: HashMap<usize, u32> = HashMap::new();
            for token in doc {
                let next = vocab.len();
                let id = *vocab.entry(token.clone()).or_insert(next);
                *tf.entry(id).or_default() += 1;
            }
            counts.push(tf);
        }
        let n = docs.len() as f64;
        let avgdl = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
        let mut df = vec![0u32; vocab.len()];
        for tf in &counts {
            for &t in tf.keys() {
                df[t] += 1;
            }
        }
        // bm25s keeps idf in f32.
        let idf: Vec<f32> = df
            .iter()
            .map(|&d| {
                let d = f64::from(d);
                (1.0 + (n - d + 0.5) / (d + 0.5)).ln() as f32
            })
            .collect();
        let mut postings: Vec<Vec<(u32, f32)>> = vec![Vec::new(); vocab.len()];
        for (doc, (tf, tokens)) in counts.iter().zip(&docs).enumerate() {
            let dl = tokens.len() as f64;
            let norm = params.k1 * ((1.0 - params.b) + params.b * dl / avgdl);
            let mut terms: Vec<(&usize, &u32)> = tf.iter().collect();
            terms.sort_unstable();
            for (&t, &f) in terms {
                let f = f64::from(f);
                let score = f64::from(idf[t]) * (f / (norm + f));
                postings[t].push((doc as u32, score as f32));
            }
        }
        Self {
            ids,
            vocab,
            postings,
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every document's score for `query` (f32, summed in query-token order).
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let mut tokens = tokenize(query);
        if tokens.is_empty() {
            tokens = vec!["none".to_owned()];
        }
        let mut scores = vec![0.0f32; self.ids.len()];
        for token in &tokens {
            if let Some(&t) = self.vocab.get(token) {
                for &(doc, s) in &self.postings[t] {
                    scores[doc as usize] += s;
                }
            }
        }
        scores
    }

    /// The `k` best documents with a positive score, in trec_eval order
    /// (score descending, ties by id descending), as the official baseline keeps them.
    pub fn search(&self, query: &str, k: usize) -> Vec<ScoredDoc> {
        let scores = self.scores(query);
        let mut hits: Vec<ScoredDoc> = scores
            .iter()
            .enumerate()
            .filter(|(_, s)| **s > 0.0)
            .map(|(i, &s)| ScoredDoc {
                id: Arc::clone(&self.ids[i]),
                score: f64::from(s),
            })
            .collect();
        let k = k.min(hits.len());
        if k == 0 {
            return Vec::new();
        }
        if k < hits.len() {
            hits.select_nth_unstable_by(k - 1, eval::trec_order);
            hits.truncate(k);
        }
        eval::sort_trec(&mut hits);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_bm25s() {
        assert_eq!(
            tokenize("The PDF-Extractor reads a_b tables, x y 42 and ÉTÉ²!"),
            ["pdf", "extractor", "reads", "a_b", "tables", "42", "été²"]
        );
        // Marks are not word characters in Python's re: they split tokens.
        assert_eq!(tokenize("cafe\u{301}s"), ["cafe"]);
        assert!(tokenize("it is to be").is_empty());
    }

    #[test]
    fn scores_by_hand() {
        let ids: Vec<Arc<str>> = ["d0", "d1", "d2"].iter().map(|s| Arc::from(*s)).collect();
        let texts = vec![
            "apple apple pie".to_owned(),
            "apple tart".to_owned(),
            "cherry".to_owned(),
        ];
        let bm25 = Bm25::new(ids, &texts, Bm25Params::default());
        let s = bm25.scores("apple apple");
        // N = 3, df(apple) = 2: idf = ln(1 + 1.5/2.5); avgdl = 2.
        let idf = (1.0f64 + 1.5 / 2.5).ln() as f32;
        let d0 = (f64::from(idf) * (2.0 / (1.5 * (0.25 + 0.75 * 3.0 / 2.0) + 2.0))) as f32;
        let d1 = (f64::from(idf) * (1.0 / (1.5 * (0.25 + 0.75 * 2.0 / 2.0) + 1.0))) as f32;
        assert_eq!(s, [d0 + d0, d1 + d1, 0.0]);
        let hits = bm25.search("apple", 10);
        assert_eq!(hits.len(), 2, "zero scores are dropped");
        assert_eq!(&*hits[0].id, "d0");
        // All stop words: searched as "none", which no document has.
        assert!(bm25.search("the and of", 10).is_empty());
    }
}
