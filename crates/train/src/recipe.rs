//! Training data for skill retrieval: (query, relevant skills, hard
//! negatives) samples, from SkillRet's labelled train split or — where no
//! labelled set is reachable — from a skill corpus alone.
//!
//! The pseudo-labelled recipe reads nothing but the skills:
//! - each skill's *intents* are its frontmatter description (the "what" and
//!   its "Use when …" clause) and the items of its "When to use" / "Use this
//!   skill when" / "Triggers" sections (optionally removed from the text the
//!   model sees for every skill, so a query is never a copy of its positive:
//!   [`DocumentText::WithoutIntents`]);
//! - a *single* query is one skill's description;
//! - the text the model reads for each skill is, by default, the official
//!   `name | description | skill_md` of evaluation time ([`DocumentText`]);
//! - a *composed* query asks for one, two or three related skills at once
//!   (a skill and neighbours the first stage finds for it, near-duplicates
//!   excluded), one or two intents each (up to three when it asks for one
//!   skill), joined as one long request with a little unrelated context, to
//!   resemble SkillRet's requests (most ask for one skill, some for two);
//! - hard negatives are the first stage's best-ranked skills below the best
//!   positive, skipping near-duplicates of any positive (the same skill
//!   copied across repositories would otherwise be taught as irrelevant).
//!
//! Everything is seeded: the same skills, vectors and options give the same
//! samples.

use std::collections::HashSet;

use eval::{Dataset, Skill};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A query and the skills relevant to it (indices into the skills), before
/// negatives are mined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Draft {
    /// The request.
    pub query: String,
    /// Relevant skills.
    pub positives: Vec<usize>,
}

/// A training sample: a query, its relevant skills and mined hard negatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The request.
    pub query: String,
    /// Relevant skills (indices into the skills).
    pub positives: Vec<usize>,
    /// Irrelevant skills the first stage ranks high.
    pub negatives: Vec<usize>,
}

/// How many pseudo-labelled queries to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PseudoOptions {
    /// Single-skill description queries (at most one per skill).
    pub single: usize,
    /// Composed multi-skill requests.
    pub composed: usize,
    /// Fewest and most skills per composed request.
    pub skills_per_query: (usize, usize),
    /// The neighbours (by the first stage's document vectors) a composed
    /// request draws its further skills from.
    pub neighbours: usize,
    /// Cosine at or above which two skills count as near-duplicates.
    pub near_duplicate: f32,
    /// Seed of every choice.
    pub seed: u64,
    /// The text the model reads for every skill, positive or negative.
    #[serde(default)]
    pub documents: DocumentText,
    /// Most body details ([`Intents::details`]) a composed request adds per
    /// skill (0: none; then left out of the serialised options, so the
    /// fingerprints of models trained before the option existed still hold).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub details: usize,
}

/// The text a pseudo-labelled recipe shows the model for each skill.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DocumentText {
    /// The official `name | description | skill_md`, as retrieval and
    /// reranking see it at evaluation time. Queries made from a skill's
    /// intents then overlap its text, as real requests overlap a relevant
    /// skill's description.
    #[default]
    Official,
    /// `name | body` with the frontmatter, the description and the trigger
    /// sections removed ([`Intents::document`]): a query is never a copy of
    /// its positive. Measured on the shared sample, a cross-encoder trained
    /// so ranks worse than chance: it learns that a skill whose text echoes
    /// the request is the negative.
    WithoutIntents,
}

impl DocumentText {
    /// The text of `skill` under this choice.
    pub fn of(self, skill: &Skill) -> String {
        match self {
            Self::Official => skill.text(),
            Self::WithoutIntents => intents(skill).document,
        }
    }
}

/// How hard negatives are mined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MineOptions {
    /// Negatives per sample.
    pub count: usize,
    /// Deepest rank considered.
    pub depth: usize,
    /// Cosine at or above which a skill is a near-duplicate of a positive.
    pub near_duplicate: f32,
    /// The first rank (1-based) negatives may come from: skipping the first
    /// stage's top ranks keeps the skills most like the request out of the
    /// negatives.
    #[serde(default = "first_rank")]
    pub from_rank: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn first_rank() -> usize {
    1
}

/// A skill split into what a user would ask for and what the model reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Intents {
    /// The description, whole.
    pub description: String,
    /// Short statements of use: the description's "what" and "use when"
    /// parts and the items of trigger sections.
    pub intents: Vec<String>,
    /// `name | body`, the body being the skill's Markdown without its
    /// frontmatter and trigger sections.
    pub document: String,
    /// Specifics from the body: its first [`MAX_DETAILS`] list items outside
    /// trigger sections and code blocks (the tools, commands and steps a
    /// skill covers, near enough to its start that a reranker's truncated
    /// view still holds them), as the scenario details of a request written
    /// from the whole skill.
    pub details: Vec<String>,
}

/// The most body list items kept as a skill's details.
pub const MAX_DETAILS: usize = 6;

/// Headings whose sections say when to use a skill.
fn is_trigger_heading(heading: &str) -> bool {
    let h = heading.to_lowercase();
    if h.contains("not use") || h.contains("don't use") || h.contains("when not") {
        return false;
    }
    h.contains("when to use")
        || h.contains("use this skill when")
        || h.contains("use when")
        || h.contains("trigger")
        || h.contains("when to activate")
        || h.contains("when to invoke")
}

/// An intent without its "Use when" lead-in, so that it reads as a need.
fn as_need(text: &str) -> String {
    let lower = text.to_lowercase();
    for lead in [
        "use this skill when ",
        "use this skill for ",
        "use this skill to ",
        "use proactively when ",
        "use when ",
        "use for ",
        "use to ",
        "when ",
    ] {
        if lower.starts_with(lead) {
            return text[lead.len()..].to_owned();
        }
    }
    text.to_owned()
}

fn clean(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Splits a skill into intents and the text the model reads.
pub fn intents(skill: &Skill) -> Intents {
    let description = clean(&skill.description);
    let mut intents = Vec::new();
    let lower = description.to_lowercase();
    match lower.find("use when") {
        Some(at) if at > 0 => {
            intents.push(clean(description[..at].trim_end_matches([' ', '.', ','])));
            intents.push(clean(&description[at..]));
        }
        _ if !description.is_empty() => intents.push(description.clone()),
        _ => {}
    }
    let mut md = skill.skill_md.as_str();
    if let Some(rest) = md.strip_prefix("---")
        && let Some(end) = rest.find("\n---")
    {
        md = rest[end + 4..].trim_start_matches(['-', '\n', '\r']);
    }
    let mut body = String::new();
    let mut details = Vec::new();
    let mut skipping: Option<usize> = None;
    let mut in_code = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        let level = line.chars().take_while(|&c| c == '#').count();
        if level > 0 && line[level..].starts_with(' ') {
            if skipping.is_some_and(|l| level <= l) {
                skipping = None;
            }
            if skipping.is_none() && is_trigger_heading(&line[level..]) {
                skipping = Some(level);
                continue;
            }
        }
        if skipping.is_some() {
            let item = line
                .trim_start()
                .trim_start_matches(['-', '*', '+'])
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start_matches(['.', ')'])
                .trim();
            let item = clean(&item.replace("**", ""));
            if line.trim_start().starts_with(['-', '*', '+']) && item.len() >= 12 {
                intents.push(item);
            }
            continue;
        }
        let trimmed = line.trim_start();
        if !in_code && trimmed.starts_with(['-', '*', '+']) {
            let item = clean(
                &trimmed[1..]
                    .replace("**", "")
                    .replace('`', "")
                    .replace("[ ]", "")
                    .replace("[x]", ""),
            );
            if details.len() < MAX_DETAILS && (20..=160).contains(&item.len()) && item.contains(' ')
            {
                details.push(item.trim_end_matches([':', '.']).to_owned());
            }
        }
        body.push_str(line);
        body.push('\n');
    }
    let document = format!(
        "{} | {}",
        eval::data::py_strip(&skill.name),
        eval::data::py_strip(&body)
    );
    Intents {
        description,
        intents,
        document,
        details,
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Indices of the `n` rows of `vectors` most similar to `query`, best first
/// (ties by index).
fn nearest(query: &[f32], vectors: &[f32], dim: usize, n: usize) -> Vec<(usize, f32)> {
    let mut scored: Vec<(usize, f32)> = vectors
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (i, dot(query, v)))
        .collect();
    let n = n.min(scored.len());
    if n == 0 {
        return Vec::new();
    }
    let by_score = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    scored.select_nth_unstable_by(n - 1, by_score);
    scored.truncate(n);
    scored.sort_by(by_score);
    scored
}

const OPENERS: &[&str] = &[
    "I'm working on a project for a small team and need some help.",
    "We're migrating an internal tool and I want to get this right.",
    "Our startup ships weekly and this came up in the last sprint.",
    "I'm a solo developer maintaining a side project with a few hundred users.",
    "At work we have a deadline on Friday, so I need a solid plan.",
    "My manager asked me to take this over from a colleague who left.",
    "We had an incident last month and want to avoid a repeat.",
    "I'm preparing a demo for a client next week.",
];
const FIRST: &[&str] = &[
    "First, I need",
    "To start, I want",
    "The main task:",
    "I need",
];
const THEN: &[&str] = &["Then", "Also,", "On top of that,", "After that,", "Next,"];
const LAST: &[&str] = &["Finally,", "And lastly,", "Once that's done,"];
const DETAIL: &[&str] = &[
    "It should cover",
    "Specifically:",
    "Make sure it handles",
    "In particular,",
];
const CLOSERS: &[&str] = &[
    "Please walk me through it step by step.",
    "Keep it practical; we don't have much time.",
    "Explain the trade-offs where it matters.",
    "",
];

fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) if chars.clone().next().is_some_and(char::is_lowercase) => {
            c.to_lowercase().chain(chars).collect()
        }
        Some(c) => std::iter::once(c).chain(chars).collect(),
        None => String::new(),
    }
}

/// Pseudo-labelled queries from the skills alone (see the module docs);
/// `doc_vectors` are the first stage's unit vectors of the skills, used to
/// pick related skills and to avoid near-duplicates.
pub fn pseudo_drafts(
    skills: &[Intents],
    doc_vectors: &[f32],
    dim: usize,
    options: &PseudoOptions,
) -> Result<Vec<Draft>> {
    let (lo, hi) = options.skills_per_query;
    if lo < 1 || hi < lo {
        return Err(Error::Invalid(format!(
            "skills_per_query = [{lo}, {hi}]: a composed request needs 1 ≤ fewest ≤ most"
        )));
    }
    if doc_vectors.len() != skills.len() * dim {
        return Err(Error::Invalid(
            "one first-stage vector per skill is needed".to_owned(),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let usable: Vec<usize> = (0..skills.len())
        .filter(|&i| !skills[i].intents.is_empty())
        .collect();
    if usable.is_empty() {
        return Err(Error::Invalid(
            "no skill has a description or a \"when to use\" section to make queries from"
                .to_owned(),
        ));
    }
    let mut drafts = Vec::new();
    let mut singles = usable.clone();
    singles.shuffle(&mut rng);
    for &i in singles.iter().take(options.single) {
        drafts.push(Draft {
            query: skills[i].description.clone(),
            positives: vec![i],
        });
    }
    for _ in 0..options.composed {
        let &first = usable.choose(&mut rng).expect("usable is not empty");
        let want = rng.random_range(lo..=hi);
        let v = |i: usize| &doc_vectors[i * dim..(i + 1) * dim];
        let mut chosen = vec![first];
        let mut pool: Vec<usize> = nearest(v(first), doc_vectors, dim, options.neighbours + 1)
            .into_iter()
            .map(|(i, _)| i)
            .filter(|&i| i != first && !skills[i].intents.is_empty())
            .collect();
        pool.shuffle(&mut rng);
        for candidate in pool {
            if chosen.len() == want {
                break;
            }
            let duplicate = chosen.iter().any(|&c| {
                dot(v(c), v(candidate)) >= options.near_duplicate
                    || skills[c].description == skills[candidate].description
            });
            if !duplicate {
                chosen.push(candidate);
            }
        }
        if chosen.len() < want.min(2) {
            continue;
        }
        // A request about one skill states more of its intents, as
        // SkillRet's single-skill scenarios (most of them) do.
        let most = if chosen.len() == 1 { 3 } else { 2 };
        let mut parts = vec![
            OPENERS
                .choose(&mut rng)
                .copied()
                .unwrap_or_default()
                .to_owned(),
        ];
        for (k, &s) in chosen.iter().enumerate() {
            let lead = match k {
                0 => FIRST,
                _ if k + 1 == chosen.len() => LAST,
                _ => THEN,
            };
            let intents = &skills[s].intents;
            let take = rng.random_range(1..=most.min(intents.len()));
            let picked: Vec<String> = intents
                .choose_multiple(&mut rng, take)
                .map(|t| lower_first(as_need(t).trim_end_matches('.')))
                .collect();
            let mut ask = format!(
                "{} {}.",
                lead.choose(&mut rng).copied().unwrap_or_default(),
                picked.join("; and ")
            );
            let details = &skills[s].details;
            let most_details = options.details.min(details.len());
            let n = match most_details {
                0 => 0,
                m => rng.random_range(0..=m),
            };
            if n > 0 {
                let specifics: Vec<String> = details
                    .choose_multiple(&mut rng, n)
                    .map(|t| lower_first(t))
                    .collect();
                ask.push_str(&format!(
                    " {} {}.",
                    DETAIL.choose(&mut rng).copied().unwrap_or_default(),
                    specifics.join(", ")
                ));
            }
            parts.push(ask);
        }
        parts.push(
            CLOSERS
                .choose(&mut rng)
                .copied()
                .unwrap_or_default()
                .to_owned(),
        );
        drafts.push(Draft {
            query: clean(&parts.join(" ")),
            positives: chosen,
        });
    }
    Ok(drafts)
}

/// The labelled queries of a split (SkillRet's train split): every query
/// needs a positive judgement, and every judged skill must exist.
pub fn labelled_drafts(data: &Dataset) -> Result<Vec<Draft>> {
    if let Some(d) = data.warnings.iter().find(|d| d.unknown_skill.is_some()) {
        return Err(Error::Invalid(format!(
            "{}: field `{}`: skill {:?} is not in the skills file (training needs every judged skill's text)",
            d.location,
            d.field.as_deref().unwrap_or("skill_id"),
            d.unknown_skill.as_deref().unwrap_or_default()
        )));
    }
    let index: std::collections::HashMap<&str, usize> = data
        .skills
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut drafts = Vec::with_capacity(data.queries.len());
    for (q, line) in data.queries.iter().zip(&data.query_lines) {
        let mut positives: Vec<usize> = data
            .qrels
            .get(&q.id)
            .into_iter()
            .flatten()
            .filter(|(_, grade)| **grade > 0)
            .filter_map(|(id, _)| index.get(id.as_str()).copied())
            .collect();
        positives.sort_unstable();
        if positives.is_empty() {
            return Err(Error::Invalid(format!(
                "{}:{line}: query {:?} has no relevant skill (no judgement above 0): a training query needs a positive",
                data.queries_path.display(),
                q.id
            )));
        }
        drafts.push(Draft {
            query: q.text.clone(),
            positives,
        });
    }
    Ok(drafts)
}

/// Hard negatives for each draft from the first stage's vectors: the
/// best-ranked skills below the draft's best-ranked positive (and from rank
/// `from_rank` on), within `depth`, skipping positives and near-duplicates
/// of a positive. Drafts
/// with fewer than `count` such skills are dropped (their number is
/// returned beside the samples).
pub fn mine(
    drafts: &[Draft],
    query_vectors: &[f32],
    doc_vectors: &[f32],
    dim: usize,
    options: &MineOptions,
) -> Result<(Vec<Sample>, usize)> {
    if query_vectors.len() != drafts.len() * dim {
        return Err(Error::Invalid(
            "one first-stage vector per query is needed".to_owned(),
        ));
    }
    let v = |i: usize| &doc_vectors[i * dim..(i + 1) * dim];
    let mut samples = Vec::with_capacity(drafts.len());
    let mut dropped = 0;
    for (draft, q) in drafts.iter().zip(query_vectors.chunks_exact(dim)) {
        if options.count == 0 {
            samples.push(Sample {
                query: draft.query.clone(),
                positives: draft.positives.clone(),
                negatives: Vec::new(),
            });
            continue;
        }
        let ranked = nearest(q, doc_vectors, dim, options.depth);
        let positives: HashSet<usize> = draft.positives.iter().copied().collect();
        let best = ranked
            .iter()
            .position(|(i, _)| positives.contains(i))
            .map_or(0, |p| p + 1);
        let start = best
            .max(options.from_rank.saturating_sub(1))
            .min(ranked.len());
        let negatives: Vec<usize> = ranked[start..]
            .iter()
            .map(|&(i, _)| i)
            .filter(|i| !positives.contains(i))
            .filter(|&i| {
                draft
                    .positives
                    .iter()
                    .all(|&p| dot(v(p), v(i)) < options.near_duplicate)
            })
            .take(options.count)
            .collect();
        if negatives.len() < options.count {
            dropped += 1;
            continue;
        }
        samples.push(Sample {
            query: draft.query.clone(),
            positives: draft.positives.clone(),
            negatives,
        });
    }
    Ok((samples, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str, md: &str) -> Skill {
        Skill {
            id: name.to_owned(),
            name: name.to_owned(),
            description: description.to_owned(),
            skill_md: md.to_owned(),
            major: None,
            sub: None,
        }
    }

    #[test]
    fn intents_leave_the_document() {
        let s = skill(
            "pg-backup",
            "Backs up PostgreSQL clusters. Use when planning disaster recovery.",
            "---\nname: pg-backup\ndescription: Backs up PostgreSQL clusters.\n---\n# PG backup\nBody text.\n## When to Use\n- Scheduling weekly base backups\n- Verifying WAL archive continuity\n## Do not use when\n- Restoring MySQL dumps\n## Steps\nRun pg_basebackup.\n- Archive WAL segments to object storage\n```sh\n- not a list item: inside a code block\n```\n",
        );
        let i = intents(&s);
        assert_eq!(
            i.intents,
            [
                "Backs up PostgreSQL clusters",
                "Use when planning disaster recovery.",
                "Scheduling weekly base backups",
                "Verifying WAL archive continuity"
            ]
        );
        assert!(!i.document.contains("description:"), "{}", i.document);
        assert!(!i.document.contains("weekly base"), "{}", i.document);
        assert!(
            i.document.contains("Restoring MySQL dumps"),
            "{}",
            i.document
        );
        assert!(
            i.document.starts_with("pg-backup | # PG backup"),
            "{}",
            i.document
        );
        assert!(i.document.contains("Run pg_basebackup."));
        assert_eq!(
            i.details,
            [
                "Restoring MySQL dumps",
                "Archive WAL segments to object storage"
            ]
        );
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = dot(v, v).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn composed_requests_are_seeded_and_skip_near_duplicates() {
        let skills: Vec<Intents> = (0..6)
            .map(|k| intents(&skill(&format!("s{k}"), &format!("Does thing {k}."), "")))
            .collect();
        // s1 is a near-duplicate of s0; s2 and s3 are related to s0.
        let vectors: Vec<f32> = [
            [1.0, 0.0, 0.0],
            [1.0, 0.01, 0.0],
            [0.8, 0.6, 0.0],
            [0.7, 0.0, 0.7],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ]
        .iter()
        .flat_map(|v| unit(v))
        .collect();
        let options = PseudoOptions {
            single: 2,
            composed: 40,
            skills_per_query: (2, 3),
            neighbours: 3,
            near_duplicate: 0.99,
            seed: 7,
            documents: DocumentText::Official,
            details: 0,
        };
        let a = pseudo_drafts(&skills, &vectors, 3, &options).unwrap();
        assert_eq!(a, pseudo_drafts(&skills, &vectors, 3, &options).unwrap());
        let other = PseudoOptions {
            seed: 8,
            ..options.clone()
        };
        assert_ne!(a, pseudo_drafts(&skills, &vectors, 3, &other).unwrap());
        assert_eq!(a.iter().filter(|d| d.positives.len() == 1).count(), 2);
        for d in a.iter().filter(|d| d.positives.len() > 1) {
            assert!(
                !(d.positives.contains(&0) && d.positives.contains(&1)),
                "{d:?}"
            );
            for &p in &d.positives {
                let thing = format!("does thing {p}");
                assert!(d.query.to_lowercase().contains(&thing), "{d:?}");
            }
        }
    }

    #[test]
    fn details_come_from_the_positives_bodies() {
        let skills: Vec<Intents> = (0..4)
            .map(|k| {
                intents(&skill(
                    &format!("s{k}"),
                    &format!("Does thing {k}."),
                    &format!("# S{k}\n- configures widget number {k} for you\n- tunes gadget number {k} on request\n"),
                ))
            })
            .collect();
        let vectors: Vec<f32> = [[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]]
            .iter()
            .flat_map(|v| unit(v))
            .collect();
        let mut options = PseudoOptions {
            single: 0,
            composed: 30,
            skills_per_query: (1, 2),
            neighbours: 3,
            near_duplicate: 0.99,
            seed: 3,
            documents: DocumentText::Official,
            details: 0,
        };
        let plain = pseudo_drafts(&skills, &vectors, 2, &options).unwrap();
        assert!(plain.iter().all(|d| !d.query.contains("number")));
        assert!(plain.iter().any(|d| d.positives.len() == 1));
        options.details = 2;
        let detailed = pseudo_drafts(&skills, &vectors, 2, &options).unwrap();
        let mut seen = 0;
        for d in &detailed {
            for k in 0..4 {
                let mentioned = d.query.contains(&format!("number {k}"));
                seen += usize::from(mentioned);
                assert!(!mentioned || d.positives.contains(&k), "{d:?}");
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn negatives_come_from_below_the_best_positive() {
        let docs: Vec<f32> = [
            [1.0, 0.0],
            [0.95, 0.31],
            [0.9, 0.43],
            [0.8, 0.6],
            [0.6, 0.8],
            [0.0, 1.0],
        ]
        .iter()
        .flat_map(|v| unit(v))
        .collect();
        let drafts = vec![Draft {
            query: "q".into(),
            positives: vec![2],
        }];
        let q = unit(&[1.0, 0.0]);
        let options = MineOptions {
            count: 2,
            depth: 6,
            near_duplicate: 0.999,
            from_rank: 1,
        };
        let (samples, dropped) = mine(&drafts, &q, &docs, 2, &options).unwrap();
        assert_eq!((samples[0].negatives.clone(), dropped), (vec![3, 4], 0));
        // Doc 3 is a near-duplicate of the positive at a looser threshold.
        let loose = MineOptions {
            near_duplicate: 0.97,
            ..options.clone()
        };
        let (samples, _) = mine(&drafts, &q, &docs, 2, &loose).unwrap();
        assert_eq!(samples[0].negatives, [4, 5]);
        let deep = MineOptions {
            count: 4,
            ..options
        };
        let (samples, dropped) = mine(&drafts, &q, &docs, 2, &deep).unwrap();
        assert_eq!((samples.len(), dropped), (0, 1));
    }
}
