//! Relevance judgements: `query id → document id → grade`.

use std::collections::HashMap;
use std::path::Path;

use rustc_hash::FxBuildHasher;

use crate::error::{Error, Location, Result};

/// The judgements of one query: document id → grade.
pub type Judgements = HashMap<String, i64, FxBuildHasher>;

/// Relevance judgements. A grade ≥ 1 is relevant (trec_eval's default
/// relevance level); 0 is judged non-relevant; negative grades are treated as
/// unjudged, as trec_eval does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Qrels {
    by_query: HashMap<String, Judgements, FxBuildHasher>,
}

impl Qrels {
    /// Sets the grade of `doc` for `query` (a later grade replaces an earlier one).
    pub fn insert(&mut self, query: String, doc: String, grade: i64) {
        self.by_query.entry(query).or_default().insert(doc, grade);
    }

    /// Records `query` with no judgements if it has none yet (such a query is
    /// skipped when scoring, as pytrec_eval skips it).
    pub fn ensure_query(&mut self, query: &str) {
        if !self.by_query.contains_key(query) {
            self.by_query
                .insert(query.to_owned(), Judgements::default());
        }
    }

    /// The judgements of one query.
    pub fn get(&self, query: &str) -> Option<&Judgements> {
        self.by_query.get(query)
    }

    /// Number of queries (with or without judgements).
    pub fn len(&self) -> usize {
        self.by_query.len()
    }

    /// Whether there are no queries.
    pub fn is_empty(&self) -> bool {
        self.by_query.is_empty()
    }

    /// Query ids in byte order.
    pub fn query_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.by_query.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// The highest grade anywhere (0 when nothing is judged).
    pub fn max_grade(&self) -> i64 {
        self.by_query
            .values()
            .flat_map(HashMap::values)
            .copied()
            .max()
            .unwrap_or(0)
            .max(0)
    }

    /// Reads a TREC qrels file. A repeated (query, document) pair is an error,
    /// as it is for trec_eval.
    pub fn read_trec(path: &Path) -> Result<Self> {
        let bytes = crate::trec::read_bytes(path)?;
        let chunks = crate::trec::fold_lines(
            path,
            &bytes,
            ["query_id", "iteration", "doc_id", "relevance"],
            Vec::new,
            |rows, offset, [query, _, doc, grade]| match grade.parse::<i64>() {
                Ok(g) => {
                    rows.push((offset, query, doc, g));
                    Ok(())
                }
                Err(_) => Err((3, format!("{grade:?} is not an integer"))),
            },
        )?;
        let mut qrels = Self::default();
        let mut first: HashMap<(&str, &str), usize, FxBuildHasher> = HashMap::default();
        for (offset, query, doc, grade) in chunks.into_iter().flatten() {
            if let Some(earlier) = first.insert((query, doc), offset) {
                return Err(Error::input(
                    Location::line(path, crate::trec::line_of(&bytes, offset)),
                    Some("doc_id"),
                    format!(
                        "({query}, {doc}) is judged twice (first on line {})",
                        crate::trec::line_of(&bytes, earlier)
                    ),
                ));
            }
            qrels.insert(query.to_owned(), doc.to_owned(), grade);
        }
        Ok(qrels)
    }

    /// Writes a TREC qrels file, queries and documents in byte order.
    pub fn write_trec(&self, path: &Path) -> Result<()> {
        crate::io::write_atomically(path, |out| {
            for (query, doc, grade) in self.sorted() {
                writeln!(out, "{query} 0 {doc} {grade}")?;
            }
            Ok(())
        })
    }

    /// Writes a SkillRet qrels JSONL file, queries and documents in byte order.
    pub fn write_jsonl(&self, path: &Path) -> Result<()> {
        crate::io::write_atomically(path, |out| {
            for (query, doc, grade) in self.sorted() {
                let record =
                    serde_json::json!({"query_id": query, "skill_id": doc, "relevance": grade});
                writeln!(out, "{record}")?;
            }
            Ok(())
        })
    }

    fn sorted(&self) -> Vec<(&str, &str, i64)> {
        let mut rows: Vec<(&str, &str, i64)> = self
            .by_query
            .iter()
            .flat_map(|(q, docs)| docs.iter().map(move |(d, &g)| (q.as_str(), d.as_str(), g)))
            .collect();
        rows.sort_unstable();
        rows
    }
}

/// Whether the first non-blank byte of the file is `{` (JSON rather than TREC text).
pub(crate) fn starts_with_brace(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = [0u8; 4096];
    loop {
        let n = file.read(&mut head).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            return Ok(false);
        }
        if let Some(&b) = head[..n].iter().find(|b| !b.is_ascii_whitespace()) {
            return Ok(b == b'{');
        }
    }
}
