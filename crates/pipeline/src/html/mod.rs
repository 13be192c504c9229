//! `report.html` and `leaderboard.html`: one self-contained file each, a
//! view of what the run (or the sweep) already computed. The figures are
//! computed here ([`data`]) and embedded as JSON in a
//! `<script type="application/json">` block; a small hand-written script
//! draws the page from it (tables, SVG charts, the query view). No network:
//! the page's Content-Security-Policy allows nothing but its own inline
//! style and its one script (by hash), so a skill body that holds HTML or a
//! script shows as text and runs nothing. The same inputs give the same bytes.

mod data;

use anyhow::Result;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) use data::RunReport;

const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");

/// The run's report page.
pub(crate) fn run_page(report: &RunReport<'_>) -> Result<String> {
    let data = data::build(report)?;
    Ok(page(&report.title, &data))
}

/// A sweep's leaderboard page: `data` as [`leaderboard`] builds it.
pub(crate) fn leaderboard_page(title: &str, data: &Value) -> String {
    page(title, data)
}

/// The page around `data` (`data.kind` picks the view the script draws).
fn page(title: &str, data: &Value) -> String {
    let hash = base64_sha256(JS);
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'sha256-{hash}'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n\
         <noscript>This report is drawn by its script; open it in a browser with JavaScript on.</noscript>\n\
         <div id=\"app\"></div>\n\
         <script type=\"application/json\" id=\"data\">{}</script>\n\
         <script>{JS}</script>\n</body>\n</html>\n",
        escape_html(title),
        embed_json(data)
    )
}

/// JSON that can stand inside a `<script>` element: `<`, `>` and `&`
/// escaped as `\u003c` etc. (so that no `</script>` or `<!--` in a skill
/// body ends or bends the block), and U+2028 and U+2029 too (line breaks
/// to older JavaScript parsers). Each escape is valid JSON inside a string,
/// and these characters occur nowhere else in JSON.
pub(crate) fn embed_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len() + text.len() / 64);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Text for HTML content and attributes.
fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn base64_sha256(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn embedded_json_cannot_close_its_script_and_reads_back_the_same() {
        let hostile = "</script><img src=x onerror=alert(1)> <!-- & \u{2028}\u{2029}";
        let value = json!({"body": hostile, "list": [1, "a<b"]});
        let text = embed_json(&value);
        for bad in ["<", ">", "&", "\u{2028}", "\u{2029}"] {
            assert!(!text.contains(bad), "{bad:?} in {text}");
        }
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn the_page_allows_only_its_own_script() {
        let page = page("a <title> & more", &json!({"kind": "run"}));
        assert!(page.contains("<title>a &lt;title&gt; &amp; more</title>"));
        assert!(page.contains(&format!("script-src 'sha256-{}'", base64_sha256(JS))));
        assert!(page.contains("default-src 'none'"));
        // The script is embedded byte for byte, so the hash matches it.
        assert!(page.contains(&format!("<script>{JS}</script>")));
        // Nothing is loaded from elsewhere.
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
    }
}
