//! A request cut into sentences, as a reader would cut it: Unicode's sentence boundaries
//! (UAX #29, through `unicode-segmentation`), and also every line break (so each list item and
//! each line of a pasted log is a sentence of its own), except inside code: an inline code
//! span (`` `…` ``) and a fenced block (```` ``` ```` to ```` ``` ````) stay whole. Each sentence
//! is its span of the request without the white space around it, in characters (Unicode scalar
//! values, as Python indexes a `str`), so `text[start:end]` in Python is the sentence.
//! Deterministic: the same text always gives the same spans.

use unicode_segmentation::UnicodeSegmentation;

/// One sentence: its span `[start, end)` of the request, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sentence {
    /// The first character.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
}

/// The sentences of `text`, in order, none empty; none for a text of white space.
pub fn split(text: &str) -> Vec<Sentence> {
    let code = code_spans(text);
    let inside_code = |at: usize| code.iter().any(|&(s, e)| s < at && at < e);
    // Byte offsets where a sentence may begin: UAX #29's, and after each line break.
    let mut cuts: Vec<usize> = text
        .split_sentence_bound_indices()
        .map(|(i, _)| i)
        .collect();
    cuts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
    cuts.push(text.len());
    cuts.retain(|&at| at == 0 || at == text.len() || !inside_code(at));
    cuts.sort_unstable();
    cuts.dedup();
    let mut sentences = Vec::new();
    // Character offsets of byte offsets, walking forwards.
    let mut chars = 0;
    let mut byte = 0;
    let mut to_chars = |at: usize| {
        chars += text[byte..at].chars().count();
        byte = at;
        chars
    };
    for pair in cuts.windows(2) {
        let piece = &text[pair[0]..pair[1]];
        let trimmed = piece.trim();
        if trimmed.is_empty() {
            continue;
        }
        let lead = piece.len() - piece.trim_start().len();
        let start = pair[0] + lead;
        let end = start + trimmed.len();
        let start = to_chars(start);
        let end = to_chars(end);
        sentences.push(Sentence { start, end });
    }
    sentences
}

/// The byte spans of code: fenced blocks (a line opening with three or more backticks to the
/// next line opening with as many, or the end) and, outside them, inline spans (a run of
/// backticks to the next run of the same length on the same line).
fn code_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut fence: Option<(usize, usize)> = None; // (start, backticks)
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let ticks = trimmed.bytes().take_while(|&b| b == b'`').count();
        match fence {
            Some((start, n)) if ticks >= n => {
                spans.push((start, at + line.trim_end().len()));
                fence = None;
            }
            Some(_) => {}
            None if ticks >= 3 => fence = Some((at + line.len() - trimmed.len(), ticks)),
            None => spans.extend(inline_code(line).into_iter().map(|(s, e)| (at + s, at + e))),
        }
        at += line.len();
    }
    if let Some((start, _)) = fence {
        spans.push((start, text.len()));
    }
    spans
}

/// Inline code spans of one line: a run of backticks to the next run of the same length.
fn inline_code(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut closed = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let m = run_at(j);
                if m == n {
                    closed = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match closed {
            Some(end) => {
                spans.push((i, end));
                i = end;
            }
            None => i += n,
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        split(text)
            .iter()
            .map(|s| chars[s.start..s.end].iter().collect())
            .collect()
    }

    #[test]
    fn prose_is_cut_at_its_sentences() {
        assert_eq!(
            texts("I run a bakery. Every Monday I export orders! Can you merge the PDFs?  Thanks"),
            [
                "I run a bakery.",
                "Every Monday I export orders!",
                "Can you merge the PDFs?",
                "Thanks"
            ]
        );
        // Abbreviations and numbers as UAX #29 reads them.
        assert_eq!(
            texts("Version 2.5 broke it, e.g. on macOS. Fix it."),
            ["Version 2.5 broke it, e.g. on macOS.", "Fix it."]
        );
    }

    #[test]
    fn lines_and_list_items_are_sentences_of_their_own() {
        assert_eq!(
            texts("Steps:\n- open the file\n- sort it\n\n1. then mail it"),
            ["Steps:", "- open the file", "- sort it", "1. then mail it"]
        );
    }

    #[test]
    fn code_stays_whole() {
        assert_eq!(
            texts("Run `a. b. c` now. Then:\n```\nx = 1\ny = 2. z\n```\nDone."),
            [
                "Run `a. b. c` now.",
                "Then:",
                "```\nx = 1\ny = 2. z\n```",
                "Done."
            ]
        );
        // An unclosed fence runs to the end; an unclosed backtick is text.
        assert_eq!(texts("A `b. C.\n```\nd. e"), ["A `b.", "C.", "```\nd. e"]);
    }

    #[test]
    fn offsets_are_characters_and_white_space_is_outside() {
        let text = "  Ünïcode résumé. 日本語の文です。 Last one ";
        let spans = split(text);
        let chars: Vec<char> = text.chars().collect();
        assert_eq!(spans[0], Sentence { start: 2, end: 17 });
        for s in &spans {
            assert!(!chars[s.start].is_whitespace() && !chars[s.end - 1].is_whitespace());
        }
        assert_eq!(
            texts(text),
            ["Ünïcode résumé.", "日本語の文です。", "Last one"]
        );
        assert!(split(" \n\t ").is_empty());
        assert!(split("").is_empty());
    }
}
