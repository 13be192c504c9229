//! SkillRet data in the official local layout
//! `<dir>/{skills,queries,qrels}/<split>.jsonl`, and the document text recipe.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Diagnostic, Error, Location, Result};
use crate::jsonl::{Object, for_each_record};
use crate::qrels::Qrels;

pub use crate::jsonl::py_strip;

/// The text every stage sees for a skill: `name | description | skill_md`,
/// each part stripped, `skill_md` falling back to the description when empty.
///
/// This is the official recipe (`build_skill_text` after `load_corpus`).
pub fn document_text(name: &str, description: &str, skill_md: &str) -> String {
    let body = if py_strip(skill_md).is_empty() {
        description
    } else {
        skill_md
    };
    format!(
        "{} | {} | {}",
        py_strip(name),
        py_strip(description),
        py_strip(body)
    )
}

/// One SkillRet skill (a SKILL.md document). Fields the benchmark does not use
/// are not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Unique id (a uuid in SkillRet, `cap.*` or `gh:*` in the sample).
    pub id: String,
    /// Skill name (empty when absent).
    pub name: String,
    /// One-paragraph description (empty when absent).
    pub description: String,
    /// The whole SKILL.md (empty when absent).
    pub skill_md: String,
    /// The dataset card's category (`major`), where the record carries it.
    pub major: Option<String>,
    /// Its subcategory (`sub`), where the record carries it.
    pub sub: Option<String>,
}

impl Skill {
    /// The document text of this skill; see [`document_text`].
    pub fn text(&self) -> String {
        document_text(&self.name, &self.description, &self.skill_md)
    }
}

/// One SkillRet query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Unique id, such as `q-00029`.
    pub id: String,
    /// The user request.
    pub text: String,
    /// Relevance labels carried by the query (`labels`, else `skill_ids` at
    /// relevance 1); `None` when it carries neither.
    pub labels: Option<Vec<(String, i64)>>,
}

/// The three files of one split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitFiles {
    /// `skills/<split>.jsonl`.
    pub skills: PathBuf,
    /// `queries/<split>.jsonl`.
    pub queries: PathBuf,
    /// `qrels/<split>.jsonl`, optional as in the official loader.
    pub qrels: Option<PathBuf>,
}

impl SplitFiles {
    /// The files of `split` in a local directory; skills and queries must exist.
    pub fn in_dir(dir: &Path, split: &str) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Invalid(format!(
                "{}: not a directory (expected a SkillRet data directory with skills/, queries/ and qrels/)",
                dir.display()
            )));
        }
        let file = |kind: &str| dir.join(kind).join(format!("{split}.jsonl"));
        let (skills, queries, qrels) = (file("skills"), file("queries"), file("qrels"));
        for path in [&skills, &queries] {
            if !path.is_file() {
                return Err(Error::Invalid(format!(
                    "{}: missing (a SkillRet data directory holds {{skills,queries,qrels}}/{split}.jsonl)",
                    path.display()
                )));
            }
        }
        Ok(Self {
            skills,
            queries,
            qrels: qrels.is_file().then_some(qrels),
        })
    }
}

/// A loaded split: skills, queries and the relevance judgements that score them.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Skills in file order.
    pub skills: Vec<Skill>,
    /// Queries in file order.
    pub queries: Vec<Query>,
    /// The line of each query in the queries file.
    pub query_lines: Vec<usize>,
    /// The queries file.
    pub queries_path: PathBuf,
    /// Judgements for every query (an empty entry where a query has none), from
    /// the qrels file when present, else from the queries' own labels.
    pub qrels: Qrels,
    /// Problems the official loader tolerates, each counted once.
    pub warnings: Vec<Diagnostic>,
    /// The data set's name where its directory says (`dataset.json`'s
    /// `name`, e.g. "MetaTool" for data converted into this layout), else
    /// `None`: SkillRet.
    pub name: Option<String>,
}

impl Dataset {
    /// What the data is, for every output: its `dataset.json` name, else
    /// "SkillRet".
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or("SkillRet")
    }

    /// Loads `split` from a local directory in the official layout.
    pub fn load(dir: &Path, split: &str) -> Result<Self> {
        Self::from_files(&SplitFiles::in_dir(dir, split)?)
    }

    /// Loads a split from its files.
    pub fn from_files(files: &SplitFiles) -> Result<Self> {
        let mut warnings = Vec::new();
        let skills = read_skills(&files.skills, &mut warnings)?;
        let (queries, query_lines) = read_queries(&files.queries)?;
        let skill_ids: HashSet<&str> = skills.iter().map(|s| s.id.as_str()).collect();
        let qrels = match &files.qrels {
            Some(path) => qrels_from_file(path, &queries, &skill_ids, &mut warnings)?,
            None => qrels_from_queries(
                &files.queries,
                &queries,
                &query_lines,
                &skill_ids,
                &mut warnings,
            )?,
        };
        let name = dataset_name(files)?;
        Ok(Self {
            skills,
            queries,
            query_lines,
            queries_path: files.queries.clone(),
            qrels,
            warnings,
            name,
        })
    }
}

impl Dataset {
    /// Keeps only the skills a filter file names (the official
    /// `skill_ids_filter`: a corpus subset), in file order; queries and
    /// judgements stay whole, as the official evaluation keeps them. The
    /// file holds one skill id a line (blank lines and lines starting with
    /// `#` skipped). An id the library lacks, or one named twice, is an
    /// error naming the file and line; so is a filter that keeps nothing.
    pub fn keep_skills(&mut self, filter: &Path) -> Result<usize> {
        let text = std::fs::read_to_string(filter).map_err(|e| Error::io(filter, e))?;
        let known: HashSet<&str> = self.skills.iter().map(|s| s.id.as_str()).collect();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let id = line.trim();
            if id.is_empty() || id.starts_with('#') {
                continue;
            }
            let here = Location::line(filter, i + 1);
            check_new_id(&mut seen, id, &here, "skill")?;
            if !known.contains(id) {
                return Err(Error::input(
                    here,
                    Some("id"),
                    format!("skill id {id:?} is not in the skill library"),
                ));
            }
        }
        if seen.is_empty() {
            return Err(Error::input(
                Location::file(filter),
                None,
                "names no skill id (one id a line)",
            ));
        }
        self.skills.retain(|s| seen.contains_key(&s.id));
        Ok(self.skills.len())
    }
}

/// `name` of the `dataset.json` beside `skills/`, if there is one.
fn dataset_name(files: &SplitFiles) -> Result<Option<String>> {
    let Some(dir) = files.skills.parent().and_then(Path::parent) else {
        return Ok(None);
    };
    let path = dir.join("dataset.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Invalid(format!("{}: {e}", path.display()))),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Invalid(format!("{}: not JSON ({e})", path.display())))?;
    match value.get("name").and_then(serde_json::Value::as_str) {
        Some(name) if !name.trim().is_empty() => Ok(Some(name.trim().to_owned())),
        _ => Err(Error::Invalid(format!(
            "{}: needs a `name` (what the data is, e.g. \"MetaTool\"); remove the file for SkillRet data",
            path.display()
        ))),
    }
}

/// An id must not be blank nor seen before in its file.
fn check_new_id(
    seen: &mut HashMap<String, usize>,
    id: &str,
    here: &Location,
    what: &str,
) -> Result<()> {
    if py_strip(id).is_empty() {
        return Err(Error::input(
            here.clone(),
            Some("id"),
            format!("empty {what} id"),
        ));
    }
    let line = here.line.unwrap_or(0);
    if let Some(first) = seen.insert(id.to_owned(), line) {
        return Err(Error::input(
            here.clone(),
            Some("id"),
            format!("duplicate {what} id {id:?} (first on line {first})"),
        ));
    }
    Ok(())
}

#[derive(Deserialize)]
struct RawSkill {
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    skill_md: Option<String>,
    #[serde(default)]
    major: Option<String>,
    #[serde(default)]
    sub: Option<String>,
}

/// Reads a skills file alone (`skills/<split>.jsonl`), as [`Dataset`] does;
/// tolerated problems go to `warnings`.
pub fn read_skills(path: &Path, warnings: &mut Vec<Diagnostic>) -> Result<Vec<Skill>> {
    let mut skills = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for_each_record(path, |line, raw: RawSkill| {
        let here = Location::line(path, line);
        check_new_id(&mut seen, &raw.id, &here, "skill")?;
        for (field, value) in [("name", &raw.name), ("description", &raw.description)] {
            if value.is_none() {
                warnings.push(Diagnostic::new(
                    here.clone(),
                    Some(field),
                    "missing or null; read as empty, as the official loader does",
                ));
            }
        }
        skills.push(Skill {
            id: raw.id,
            name: raw.name.unwrap_or_default(),
            description: raw.description.unwrap_or_default(),
            skill_md: raw.skill_md.unwrap_or_default(),
            major: raw.major.filter(|m| !py_strip(m).is_empty()),
            sub: raw.sub.filter(|m| !py_strip(m).is_empty()),
        });
        Ok(())
    })?;
    Ok(skills)
}

#[derive(Deserialize)]
struct RawQuery {
    id: String,
    query: String,
    #[serde(default)]
    skill_ids: Option<Vec<String>>,
    #[serde(default)]
    labels: Option<RawLabels>,
}

/// `labels` is a list of `{id, relevance}`, or that list encoded as a JSON string.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawLabels {
    List(Vec<Object<RawLabel>>),
    Encoded(String),
}

#[derive(Deserialize)]
struct RawLabel {
    id: String,
    relevance: i64,
}

/// Queries in file order, with the line each came from.
fn read_queries(path: &Path) -> Result<(Vec<Query>, Vec<usize>)> {
    let mut queries = Vec::new();
    let mut lines = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for_each_record(path, |line, raw: RawQuery| {
        let here = Location::line(path, line);
        check_new_id(&mut seen, &raw.id, &here, "query")?;
        if py_strip(&raw.query).is_empty() {
            return Err(Error::input(here, Some("query"), "empty query text"));
        }
        let labels = match raw.labels {
            Some(RawLabels::List(list)) => Some(list),
            Some(RawLabels::Encoded(text)) => Some(
                crate::jsonl::parse_line::<Vec<Object<RawLabel>>>(&text).map_err(
                    |(field, message)| {
                        let field = match field {
                            Some(f) => {
                                format!("labels{}{f}", if f.starts_with('[') { "" } else { "." })
                            }
                            None => "labels".to_owned(),
                        };
                        Error::input(here.clone(), Some(&field), message)
                    },
                )?,
            ),
            None => None,
        }
        .map(|list| {
            list.into_iter()
                .map(|Object(l)| (l.id, l.relevance))
                .collect()
        })
        .or_else(|| {
            raw.skill_ids
                .map(|ids| ids.into_iter().map(|id| (id, 1)).collect())
        });
        queries.push(Query {
            id: raw.id,
            text: raw.query,
            labels,
        });
        lines.push(line);
        Ok(())
    })?;
    Ok((queries, lines))
}

#[derive(Deserialize)]
struct RawQrel {
    query_id: String,
    skill_id: String,
    relevance: i64,
}

// Reading judgements from any of their sources needs the data layout, so it
// lives with it (the `Qrels` type itself knows nothing of datasets).
impl Qrels {
    /// Reads judgements from a SkillRet data directory (its qrels, else its
    /// queries' labels, for `split`), a SkillRet qrels JSONL file, or a TREC
    /// qrels file (`query iter doc grade`), telling them apart by what `path` is.
    pub fn read(path: &Path, split: &str, warnings: &mut Vec<Diagnostic>) -> Result<Self> {
        if path.is_dir() {
            let dataset = Dataset::load(path, split)?;
            warnings.extend(dataset.warnings);
            return Ok(dataset.qrels);
        }
        if crate::qrels::starts_with_brace(path)? {
            read_qrels_jsonl(path, warnings)
        } else {
            Qrels::read_trec(path)
        }
    }
}

/// Reads a SkillRet qrels file (`{query_id, skill_id, relevance}` per line).
///
/// A repeated (query, skill) pair keeps the last grade, as the official loader
/// does, and is reported as a warning.
pub fn read_qrels_jsonl(path: &Path, warnings: &mut Vec<Diagnostic>) -> Result<Qrels> {
    let records = read_qrel_records(path)?;
    Ok(collect_qrels(path, &records, warnings))
}

fn read_qrel_records(path: &Path) -> Result<Vec<(usize, RawQrel)>> {
    let mut records = Vec::new();
    for_each_record(path, |line, raw: RawQrel| {
        for (field, value) in [("query_id", &raw.query_id), ("skill_id", &raw.skill_id)] {
            if py_strip(value).is_empty() {
                return Err(Error::input(
                    Location::line(path, line),
                    Some(field),
                    "empty id",
                ));
            }
        }
        records.push((line, raw));
        Ok(())
    })?;
    Ok(records)
}

fn collect_qrels(
    path: &Path,
    records: &[(usize, RawQrel)],
    warnings: &mut Vec<Diagnostic>,
) -> Qrels {
    let mut qrels = Qrels::default();
    let mut lines: HashMap<(&str, &str), usize> = HashMap::new();
    for (line, raw) in records {
        if let Some(first) = lines.insert((&raw.query_id, &raw.skill_id), *line) {
            warnings.push(Diagnostic::new(
                Location::line(path, *line),
                Some("skill_id"),
                format!(
                    "repeats the judgement of line {first} for ({}, {}); the last grade wins, as in the official loader",
                    raw.query_id, raw.skill_id
                ),
            ));
        }
        qrels.insert(raw.query_id.clone(), raw.skill_id.clone(), raw.relevance);
    }
    qrels
}

/// The official rule when a qrels file exists: every query gets the file's
/// judgements for it (none if it has none); judgements of other queries are
/// dropped.
fn qrels_from_file(
    path: &Path,
    queries: &[Query],
    skill_ids: &HashSet<&str>,
    warnings: &mut Vec<Diagnostic>,
) -> Result<Qrels> {
    let records = read_qrel_records(path)?;
    let file_qrels = collect_qrels(path, &records, warnings);
    let query_ids: HashSet<&str> = queries.iter().map(|q| q.id.as_str()).collect();
    for (line, raw) in &records {
        let here = Location::line(path, *line);
        if !query_ids.contains(raw.query_id.as_str()) {
            warnings.push(Diagnostic::new(
                here,
                Some("query_id"),
                format!(
                    "{:?} is not a query of this split; ignored, as in the official loader",
                    raw.query_id
                ),
            ));
        } else if !skill_ids.contains(raw.skill_id.as_str()) {
            warnings.push(unknown_skill(here, "skill_id", &raw.skill_id));
        }
    }
    let mut qrels = Qrels::default();
    for query in queries {
        qrels.ensure_query(&query.id);
        if let Some(judged) = file_qrels.get(&query.id) {
            for (skill, &grade) in judged {
                qrels.insert(query.id.clone(), skill.clone(), grade);
            }
        }
    }
    Ok(qrels)
}

/// Without a qrels file, each query's `labels` (or `skill_ids`) are its judgements.
fn qrels_from_queries(
    path: &Path,
    queries: &[Query],
    lines: &[usize],
    skill_ids: &HashSet<&str>,
    warnings: &mut Vec<Diagnostic>,
) -> Result<Qrels> {
    let mut qrels = Qrels::default();
    for (query, &line) in queries.iter().zip(lines) {
        let here = Location::line(path, line);
        let Some(labels) = &query.labels else {
            return Err(Error::input(
                here,
                Some("skill_ids"),
                "the query has neither `labels` nor `skill_ids`, and there is no qrels file",
            ));
        };
        qrels.ensure_query(&query.id);
        for (i, (skill, grade)) in labels.iter().enumerate() {
            if !skill_ids.contains(skill.as_str()) {
                warnings.push(unknown_skill(
                    here.clone(),
                    &format!("skill_ids[{i}]"),
                    skill,
                ));
            }
            qrels.insert(query.id.clone(), skill.clone(), *grade);
        }
    }
    Ok(qrels)
}

fn unknown_skill(location: Location, field: &str, skill: &str) -> Diagnostic {
    let mut d = Diagnostic::new(
        location,
        Some(field),
        format!(
            "{skill:?} is not in the skills file; kept, as in the official loader, so it counts as relevant but can never be retrieved"
        ),
    );
    d.unknown_skill = Some(skill.to_owned());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_recipe_matches_the_official_one() {
        assert_eq!(document_text(" a ", "b\n", "  c "), "a | b | c");
        assert_eq!(document_text("a", " b ", " \n "), "a | b | b");
        assert_eq!(document_text("", "", ""), " |  | ");
        // Python strips U+001C..U+001F; Rust's trim alone would not.
        assert_eq!(document_text("\u{1f}a\u{1c}", "b", "c"), "a | b | c");
        // A non-breaking space is whitespace to both.
        assert_eq!(py_strip("\u{a0}x\u{3000}"), "x");
    }
}
