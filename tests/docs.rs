//! The documentation's own test: every relative link and anchor in README.md, ARCHITECTURE.md and
//! docs/ resolves, and every `pipeline <command>` the pages show exists (`pipeline <command>
//! --help` succeeds, a nested command's too).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use common::root;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What one Markdown page holds that can go stale: its links, its headings' anchors, and the
/// text of its code (spans and blocks), where commands are shown.
#[derive(Debug, Default)]
struct Page {
    /// (destination, the line it is on)
    links: Vec<(String, usize)>,
    anchors: BTreeSet<String>,
    code: Vec<(String, usize)>,
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-` and `_`), spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn parse(text: &str) -> Page {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut page = Page::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    let mut block: Option<(String, usize)> = None;
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                // Repeated headings get -1, -2, ... as on GitHub.
                let n = seen.entry(base.clone()).or_insert(0);
                let anchor = if *n == 0 {
                    base.clone()
                } else {
                    format!("{base}-{n}")
                };
                *n += 1;
                page.anchors.insert(anchor);
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links
                    .push((dest_url.to_string(), line_of(range.start)));
            }
            // A fenced block's text starts on the line after its fence.
            Event::Start(Tag::CodeBlock(_)) => {
                block = Some((String::new(), line_of(range.start) + 1));
            }
            Event::End(TagEnd::CodeBlock) => page.code.extend(block.take()),
            Event::Text(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                if let Some((b, _)) = block.as_mut() {
                    b.push_str(&t);
                }
            }
            Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                page.code.push((t.to_string(), line_of(range.start)));
            }
            _ => {}
        }
    }
    page
}

/// The pages checked: README.md and ARCHITECTURE.md at the top, every Markdown file under docs/.
fn pages(top: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md"]
        .iter()
        .map(|p| top.join(p))
        .filter(|p| p.exists())
        .collect();
    walk(&top.join("docs"), &mut out);
    out.sort();
    out
}

/// Every relative link or anchor that does not resolve, as `file:line: why`.
fn broken_links(top: &Path) -> Vec<String> {
    let mut parsed: BTreeMap<PathBuf, Page> = BTreeMap::new();
    for p in pages(top) {
        let text = fs::read_to_string(&p).unwrap();
        parsed.insert(p.canonicalize().unwrap(), parse(&text));
    }
    let mut problems = Vec::new();
    for (file, page) in &parsed {
        let shown = file
            .strip_prefix(top.canonicalize().unwrap())
            .unwrap_or(file);
        for (dest, line) in &page.links {
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = dest.split_once('#').unwrap_or((dest, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                let joined = file.parent().unwrap().join(path);
                match joined.canonicalize() {
                    Ok(t) => t,
                    Err(_) => {
                        problems.push(format!("{}:{line}: {dest}: no such file", shown.display()));
                        continue;
                    }
                }
            };
            if anchor.is_empty() {
                continue;
            }
            let anchors = match parsed.get(&target) {
                Some(page) => page.anchors.clone(),
                None if target.extension().is_some_and(|e| e == "md") => {
                    parse(&fs::read_to_string(&target).unwrap()).anchors
                }
                None => {
                    problems.push(format!(
                        "{}:{line}: {dest}: an anchor into a file that is not Markdown",
                        shown.display()
                    ));
                    continue;
                }
            };
            if !anchors.contains(anchor) {
                problems.push(format!(
                    "{}:{line}: {dest}: no heading with the anchor #{anchor}",
                    shown.display()
                ));
            }
        }
    }
    problems
}

/// The `pipeline` commands a piece of code shows: `pipeline WORD [WORD]`, also as
/// `…/release/pipeline WORD` and `cargo run … -p pipeline -- WORD`, each with the word after it
/// (a nested command's name, where it has one).
fn commands(code: &str) -> Vec<(usize, String, Option<String>)> {
    let word = |t: &str| {
        t.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && t.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        // A shell comment shows no command.
        let line = line.find(" #").map_or(line, |i| &line[..i]);
        let tokens: Vec<&str> = line.split_whitespace().collect();
        for (i, t) in tokens.iter().enumerate() {
            let program = *t == "pipeline"
                || t.ends_with("/release/pipeline")
                || t.ends_with("/debug/pipeline");
            if !program {
                continue;
            }
            let mut next = i + 1;
            // `-p pipeline -- run`: the command after cargo's separator.
            if i > 0 && tokens[i - 1] == "-p" {
                if tokens.get(next) != Some(&"--") {
                    continue;
                }
                next += 1;
            }
            if let Some(cmd) = tokens.get(next).filter(|t| word(t)) {
                let sub = tokens
                    .get(next + 1)
                    .filter(|t| word(t))
                    .map(|s| (*s).to_string());
                out.push((n, (*cmd).to_string(), sub));
            }
        }
    }
    out
}

/// Whether `pipeline ARGS --help` succeeds, and what it printed.
fn help(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Every command a page shows that `pipeline` does not have, as `file:line: pipeline …`, and
/// the commands shown.
fn missing_commands(top: &Path) -> (Vec<String>, BTreeSet<String>) {
    let mut checked: BTreeMap<Vec<String>, (bool, bool)> = BTreeMap::new();
    let mut problems = Vec::new();
    for file in pages(top) {
        let shown = file.strip_prefix(top).unwrap_or(&file).to_path_buf();
        let page = parse(&fs::read_to_string(&file).unwrap());
        for (code, first) in &page.code {
            for (n, cmd, sub) in commands(code) {
                let line = first + n;
                let (ok, nested) = *checked.entry(vec![cmd.clone()]).or_insert_with(|| {
                    let (ok, text) = help(&[&cmd]);
                    (ok, text.contains("Commands:"))
                });
                if !ok {
                    problems.push(format!("{}:{line}: pipeline {cmd}", shown.display()));
                    continue;
                }
                // A command with commands of its own: the one shown must exist too.
                if let (true, Some(sub)) = (nested, sub) {
                    let key = vec![cmd.clone(), sub.clone()];
                    let (ok, _) = *checked
                        .entry(key)
                        .or_insert_with(|| (help(&[&cmd, &sub]).0, false));
                    if !ok {
                        problems.push(format!("{}:{line}: pipeline {cmd} {sub}", shown.display()));
                    }
                }
            }
        }
    }
    let shown = checked.into_keys().map(|k| k.join(" ")).collect();
    (problems, shown)
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let problems = broken_links(&root());
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_pipeline_command_the_pages_show_exists() {
    let (problems, shown) = missing_commands(&root());
    assert!(
        problems.is_empty(),
        "commands the pages show that `pipeline` lacks:\n{}",
        problems.join("\n")
    );
    // The pages show every command (so the check above has something to check).
    for cmd in [
        "run", "sweep", "compare", "report", "eval", "embed", "rerank", "train", "models",
    ] {
        assert!(
            shown.contains(cmd),
            "no page shows `pipeline {cmd}`: {shown:?}"
        );
    }
}

#[test]
fn the_checks_find_a_planted_broken_link_anchor_and_command() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path();
    fs::create_dir(top.join("docs")).unwrap();
    fs::write(
        top.join("README.md"),
        "# Top\n\nSee [the run](docs/run.md#outputs), [gone](docs/gone.md), [here](#top), \
         [bad](#nowhere), [web](https://example.org/x#y).\n",
    )
    .unwrap();
    fs::write(
        top.join("docs/run.md"),
        "# Run\n\n## Outputs\n\n[back](../README.md#top) [miss](../README.md#run)\n\n\
         ```sh\npipeline run --config x.toml\npipeline frobnicate --now\n\
         cargo run --release -p pipeline -- models convert-e5s1 a\n\
         cargo run -p pipeline -- models convert-nothing\n\
         cargo test -p pipeline --test cli  # then pipeline nothing\n```\n\nThe `pipeline` binary, `pipeline embed`.\n",
    )
    .unwrap();
    let links = broken_links(top);
    assert_eq!(links.len(), 3, "{links:#?}");
    assert!(
        links[0].starts_with("README.md:3: docs/gone.md: no such file"),
        "{links:#?}"
    );
    assert!(
        links[1].contains("README.md:3: #nowhere: no heading"),
        "{links:#?}"
    );
    assert!(
        links[2].contains("docs/run.md:5: ../README.md#run: no heading"),
        "{links:#?}"
    );
    let (cmds, _) = missing_commands(top);
    assert_eq!(
        cmds,
        [
            "docs/run.md:9: pipeline frobnicate",
            "docs/run.md:11: pipeline models convert-nothing"
        ],
        "{cmds:#?}"
    );
}

#[test]
fn anchors_follow_github() {
    let page = parse(
        "# `pipeline run`\n\n## report.html: what each stage contributes, per query\n\n## Notes\n\n## Notes\n\n```\n# not a heading\n```\n",
    );
    let anchors: Vec<&str> = page.anchors.iter().map(String::as_str).collect();
    assert_eq!(
        anchors,
        [
            "notes",
            "notes-1",
            "pipeline-run",
            "reporthtml-what-each-stage-contributes-per-query"
        ]
    );
}
