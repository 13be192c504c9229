//! Rankings to be scored: `query id → [(document id, score)]`.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Location, Result};

/// One retrieved document and its score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredDoc {
    /// Document (skill) id.
    pub id: String,
    /// Retrieval score; higher is better.
    pub score: f64,
}

/// trec_eval's ranking order: score descending, ties broken by document id
/// descending (byte order). Every ranking this project writes uses it, so runs
/// are byte-stable.
pub fn trec_order(a: &ScoredDoc, b: &ScoredDoc) -> Ordering {
    b.score
        .partial_cmp(&a.score)
        .unwrap_or(Ordering::Equal)
        .then_with(|| b.id.cmp(&a.id))
}

/// Sorts documents into [`trec_order`].
pub fn sort_trec(docs: &mut [ScoredDoc]) {
    docs.sort_unstable_by(trec_order);
}

/// A run: the documents retrieved for each query, in any order (scoring
/// ranks them by [`trec_order`]; the rank column of a TREC file is ignored, as
/// trec_eval ignores it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    by_query: HashMap<String, Vec<ScoredDoc>>,
}

impl Run {
    /// Sets the documents of one query.
    pub fn insert(&mut self, query: String, docs: Vec<ScoredDoc>) {
        self.by_query.insert(query, docs);
    }

    /// The documents retrieved for one query.
    pub fn get(&self, query: &str) -> Option<&[ScoredDoc]> {
        self.by_query.get(query).map(Vec::as_slice)
    }

    /// Number of queries.
    pub fn len(&self) -> usize {
        self.by_query.len()
    }

    /// Whether the run has no queries.
    pub fn is_empty(&self) -> bool {
        self.by_query.is_empty()
    }

    /// Query ids in byte order.
    pub fn query_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.by_query.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// Reads a TREC run file, or the official SkillRet output JSON
    /// (`{"retrieval": {split: {query: {doc: score}}}}`) when the file starts
    /// with `{`.
    pub fn read(path: &Path, split: &str) -> Result<Self> {
        if crate::qrels::starts_with_brace(path)? {
            Self::read_skillret_json(path, split)
        } else {
            Self::read_trec(path)
        }
    }

    /// Reads a TREC run file (`query Q0 doc rank score tag`). A document
    /// listed twice for a query is an error, as it is for trec_eval; a score
    /// that is not a number is an error.
    pub fn read_trec(path: &Path) -> Result<Self> {
        let bytes = crate::trec::read_bytes(path)?;
        // (query, documents, line of each document), in first-seen order.
        let mut queries: Vec<(&str, Vec<ScoredDoc>, Vec<usize>)> = Vec::new();
        let mut slot: HashMap<&str, usize> = HashMap::new();
        crate::trec::for_each_line(
            path,
            &bytes,
            [
                "query_id",
                "iteration",
                "doc_id",
                "rank",
                "score",
                "run_tag",
            ],
            |line, [query, _, doc, _, score, _]| {
                let score: f64 = match score.parse() {
                    Ok(s) if !f64::is_nan(s) => s,
                    _ => {
                        return Err(Error::input(
                            Location::line(path, line),
                            Some("score"),
                            format!("{score:?} is not a number"),
                        ));
                    }
                };
                let i = match queries.last() {
                    Some((last, ..)) if *last == query => queries.len() - 1,
                    _ => *slot.entry(query).or_insert_with(|| {
                        queries.push((query, Vec::new(), Vec::new()));
                        queries.len() - 1
                    }),
                };
                let (_, docs, lines) = &mut queries[i];
                docs.push(ScoredDoc {
                    id: doc.to_owned(),
                    score,
                });
                lines.push(line);
                Ok(())
            },
        )?;
        let mut run = Self::default();
        for (query, docs, lines) in queries {
            if let Some((first, again)) = first_duplicate(&docs) {
                return Err(Error::input(
                    Location::line(path, lines[again]),
                    Some("doc_id"),
                    format!(
                        "{} is listed twice for query {query} (first on line {})",
                        docs[again].id, lines[first]
                    ),
                ));
            }
            run.insert(query.to_owned(), docs);
        }
        Ok(run)
    }

    /// Reads the `retrieval` section of the official SkillRet output JSON for
    /// `split`.
    pub fn read_skillret_json(path: &Path, split: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Output {
            retrieval: HashMap<String, HashMap<String, HashMap<String, f64>>>,
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                Error::input(
                    Location::file(path),
                    None,
                    "invalid UTF-8 (the file must be UTF-8)",
                )
            } else {
                Error::io(path, e)
            }
        })?;
        let mut de = serde_json::Deserializer::from_str(&text);
        let output: Output = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let inner = e.inner();
            let location = match inner.line() {
                0 => Location::file(path),
                line => Location::line(path, line),
            };
            let field = e.path().to_string();
            let message = inner.to_string();
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(head, _)| head);
            let field = match message.strip_prefix("missing field `") {
                Some(rest) => rest.split('`').next().map(str::to_owned),
                None => (field != ".").then_some(field),
            };
            Error::input(location, field.as_deref(), message.to_owned())
        })?;
        let mut splits = output.retrieval;
        let Some(results) = splits.remove(split) else {
            let mut found: Vec<&String> = splits.keys().collect();
            found.sort();
            return Err(Error::input(
                Location::file(path),
                Some("retrieval"),
                format!("has no split {split:?} (found: {found:?}); choose one with --split"),
            ));
        };
        let mut run = Self::default();
        for (query, docs) in results {
            let docs = docs
                .into_iter()
                .map(|(id, score)| ScoredDoc { id, score })
                .collect();
            run.insert(query, docs);
        }
        Ok(run)
    }

    /// Writes a TREC run file: queries in byte order, each ranking in
    /// [`trec_order`] with ranks from 1 and scores at full precision.
    pub fn write_trec(&self, path: &Path, tag: &str) -> Result<()> {
        if tag.is_empty() || tag.contains(char::is_whitespace) {
            return Err(Error::Invalid(format!(
                "run tag {tag:?} must be one word without whitespace"
            )));
        }
        crate::io::write_atomically(path, |out| {
            for query in self.query_ids() {
                let mut docs = self.by_query[query].clone();
                sort_trec(&mut docs);
                for (rank, doc) in docs.iter().enumerate() {
                    writeln!(
                        out,
                        "{query} Q0 {} {} {} {tag}",
                        doc.id,
                        rank + 1,
                        doc.score
                    )?;
                }
            }
            Ok(())
        })
    }
}

/// The positions (first, repeat) of the earliest repeated document, if any.
fn first_duplicate(docs: &[ScoredDoc]) -> Option<(usize, usize)> {
    let mut order: Vec<usize> = (0..docs.len()).collect();
    order.sort_unstable_by(|&a, &b| docs[a].id.cmp(&docs[b].id).then(a.cmp(&b)));
    order
        .windows(2)
        .filter(|w| docs[w[0]].id == docs[w[1]].id)
        .map(|w| (w[0], w[1]))
        .min_by_key(|&(_, again)| again)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, score: f64) -> ScoredDoc {
        ScoredDoc {
            id: id.to_owned(),
            score,
        }
    }

    #[test]
    fn ties_break_by_id_descending() {
        let mut docs = vec![doc("a", 1.0), doc("c", 0.5), doc("b", 1.0), doc("d", 2.0)];
        sort_trec(&mut docs);
        let ids: Vec<&str> = docs.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["d", "b", "a", "c"]);
    }

    #[test]
    fn negative_zero_ties_with_zero() {
        let mut docs = vec![doc("a", 0.0), doc("b", -0.0)];
        sort_trec(&mut docs);
        assert_eq!(docs[0].id, "b");
    }
}
