//! Rankings to be scored: `query id → [(document id, score)]`.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use serde::Deserialize;

use crate::error::{Error, Location, Result};

/// One retrieved document and its score.
///
/// Ids are shared (`Arc<str>`): a run mentions the same few thousand skills
/// over and over, and reading or building one need not copy them.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredDoc {
    /// Document (skill) id.
    pub id: Arc<str>,
    /// Retrieval score; higher is better.
    pub score: f64,
}

impl ScoredDoc {
    /// A document and its score.
    pub fn new(id: impl Into<Arc<str>>, score: f64) -> Self {
        Self {
            id: id.into(),
            score,
        }
    }
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

/// One query's `{skill id: score}` object in the file's order: the order
/// in which the official `eval_rerank` meets equal scores at its cut.
struct InOrder(Vec<(String, f64)>);

impl<'de> Deserialize<'de> for InOrder {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = InOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of skill id → score")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<InOrder, A::Error> {
                let mut docs: Vec<(String, f64)> = Vec::with_capacity(map.size_hint().unwrap_or(0));
                let mut seen = std::collections::HashSet::new();
                while let Some((id, score)) = map.next_entry::<String, f64>()? {
                    if !seen.insert(id.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "skill {id:?} listed twice for one query"
                        )));
                    }
                    docs.push((id, score));
                }
                Ok(InOrder(docs))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// A run: the documents retrieved for each query, in any order (scoring
/// ranks them by [`trec_order`]; the rank column of a TREC file is ignored, as
/// trec_eval ignores it). A document appears at most once per query.
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
        let chunks = crate::trec::fold_lines(
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
            Chunk::default,
            |chunk, _, [query, _, doc, _, score, _]| match score.parse::<f64>() {
                Ok(score) if !score.is_nan() => {
                    chunk.push(query, doc, score);
                    Ok(())
                }
                _ => Err((4, format!("{score:?} is not a number"))),
            },
        )?;
        // Join the chunks' groups; a query whose lines are not one block
        // (split between chunks, or interleaved with others) is checked for
        // repeats by sorting, the rest were checked while reading.
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut slot: FxHashMap<&str, usize> = FxHashMap::default();
        for chunk in chunks {
            if let Some((query, doc)) = chunk.duplicate {
                return Err(duplicate_error(path, &bytes, query, doc));
            }
            for group in chunk.groups {
                match slot.get(group.query) {
                    Some(&g) => {
                        let into = &mut groups[g];
                        into.docs.extend(group.docs);
                        into.unchecked = true;
                    }
                    None => {
                        slot.insert(group.query, groups.len());
                        groups.push(group);
                    }
                }
            }
        }
        let mut run = Self::default();
        for group in groups {
            if group.unchecked
                && let Some(doc) = first_duplicate(&group.docs)
            {
                return Err(duplicate_error(path, &bytes, group.query, doc));
            }
            run.insert(group.query.to_owned(), group.docs);
        }
        Ok(run)
    }

    /// Reads the `retrieval` section of the official SkillRet output JSON for
    /// `split`.
    pub fn read_skillret_json(path: &Path, split: &str) -> Result<Self> {
        #[derive(Deserialize)]
        struct Output {
            retrieval: HashMap<String, HashMap<String, InOrder>>,
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
        for (query, InOrder(docs)) in results {
            let docs = docs
                .into_iter()
                .map(|(id, score)| ScoredDoc::new(id, score))
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

/// One query's lines of a TREC run, as read from one chunk of the file.
struct Group<'a> {
    query: &'a str,
    docs: Vec<ScoredDoc>,
    /// Not yet checked for repeated documents.
    unchecked: bool,
}

/// What one chunk of a TREC run file holds: its queries' groups, with one
/// shared copy of each document id, and the first repeat seen in a block.
#[derive(Default)]
struct Chunk<'a> {
    groups: Vec<Group<'a>>,
    /// Query → its first group in this chunk.
    slot: FxHashMap<&'a str, usize>,
    /// Each document id, shared, with the group where it was last seen. Keyed
    /// by the shared copy (compact, so lookups stay in cache), found by `&str`.
    ids: FxHashMap<Arc<str>, Cell<usize>>,
    /// (query, doc) of the first repeat seen.
    duplicate: Option<(&'a str, &'a str)>,
}

impl<'a> Chunk<'a> {
    fn push(&mut self, query: &'a str, doc: &'a str, score: f64) {
        let g = match self.groups.last() {
            Some(last) if last.query == query => self.groups.len() - 1,
            last => {
                // Rankings usually have the same depth: size the next like the last.
                let capacity = last.map_or(0, |g| g.docs.len());
                let g = self.groups.len();
                // A query met again after others is checked when joining.
                if let Some(&earlier) = self.slot.get(query) {
                    self.groups[earlier].unchecked = true;
                } else {
                    self.slot.insert(query, g);
                }
                self.groups.push(Group {
                    query,
                    docs: Vec::with_capacity(capacity),
                    unchecked: false,
                });
                g
            }
        };
        let id = match self.ids.get_key_value(doc) {
            Some((id, last_group)) => {
                // Within one block of a query's lines, a repeat is seen at once.
                if last_group.replace(g) == g && self.duplicate.is_none() {
                    self.duplicate = Some((query, doc));
                }
                Arc::clone(id)
            }
            None => {
                let id: Arc<str> = Arc::from(doc);
                self.ids.insert(Arc::clone(&id), Cell::new(g));
                id
            }
        };
        self.groups[g].docs.push(ScoredDoc { id, score });
    }
}

/// The first document listed twice, if any.
fn first_duplicate(docs: &[ScoredDoc]) -> Option<&str> {
    let mut ids: Vec<&str> = docs.iter().map(|d| &*d.id).collect();
    ids.sort_unstable();
    ids.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// The error for a document listed twice for a query, naming both lines
/// (found by reading the file again: this is the error path only).
fn duplicate_error(path: &Path, bytes: &[u8], query: &str, doc: &str) -> Error {
    let mut lines = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    for (i, line) in text.lines().enumerate() {
        let mut columns = line.split_ascii_whitespace();
        if columns.next() == Some(query) && columns.nth(1) == Some(doc) {
            lines.push(i + 1);
            if lines.len() == 2 {
                break;
            }
        }
    }
    let (first, again) = (lines.first().copied(), lines.get(1).copied());
    Error::input(
        again.map_or_else(|| Location::file(path), |l| Location::line(path, l)),
        Some("doc_id"),
        format!(
            "{doc} is listed twice for query {query}{}",
            first.map_or(String::new(), |l| format!(" (first on line {l})"))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, score: f64) -> ScoredDoc {
        ScoredDoc::new(id, score)
    }

    #[test]
    fn ties_break_by_id_descending() {
        let mut docs = vec![doc("a", 1.0), doc("c", 0.5), doc("b", 1.0), doc("d", 2.0)];
        sort_trec(&mut docs);
        let ids: Vec<&str> = docs.iter().map(|d| &*d.id).collect();
        assert_eq!(ids, ["d", "b", "a", "c"]);
    }

    #[test]
    fn negative_zero_ties_with_zero() {
        let mut docs = vec![doc("a", 0.0), doc("b", -0.0)];
        sort_trec(&mut docs);
        assert_eq!(&*docs[0].id, "b");
    }
}
