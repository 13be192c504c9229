//! Reading JSON Lines with errors that name the file, the line and the field.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{DeserializeOwned, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer};

use crate::error::{Error, Location, Result};

/// Strips leading and trailing whitespace as Python's `str.strip()` does.
///
/// Python's whitespace is Rust's plus the four ASCII separators U+001C..U+001F;
/// the text recipe must match the official one byte for byte.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// A record that must be a JSON object.
///
/// serde's derived structs also accept an array of their fields in order, so
/// `["s1", "a"]` would read as a skill `{id: "s1", name: "a"}`; records are read
/// through this instead, which takes a map or nothing.
pub(crate) struct Object<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Only<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Only(PhantomData)).map(Object)
    }
}

/// Calls `f` with each record of a JSON Lines file and its 1-based line number.
///
/// Blank lines are skipped, as the official loader skips them. A line that is
/// not valid UTF-8, not valid JSON, not an object, or not of the shape `T` is
/// an error naming the line and, where it can be told, the field.
pub(crate) fn for_each_record<T: DeserializeOwned>(
    path: &Path,
    mut f: impl FnMut(usize, T) -> Result<()>,
) -> Result<()> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let text = std::str::from_utf8(raw).map_err(|e| utf8_error(path, line, raw, &e))?;
        if py_strip(text).is_empty() {
            continue;
        }
        let Object(record) = parse_line(text).map_err(|(field, message)| {
            Error::input(Location::line(path, line), field.as_deref(), message)
        })?;
        f(line, record)?;
    }
    Ok(())
}

/// Parses one JSON text into `T`, returning the field path and message on failure.
pub(crate) fn parse_line<T: DeserializeOwned>(text: &str) -> Result<T, (Option<String>, String)> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let mut path = e.path().to_string();
        if path.ends_with('?') {
            // A syntax error between fields: blame the last key read.
            let column = e.inner().column();
            let before = text.get(..column.saturating_sub(1)).unwrap_or(text);
            path = last_key(before).unwrap_or(path);
        }
        let message = without_position(&e.inner().to_string());
        (field_of(&path, &message), message)
    })?;
    de.end()
        .map_err(|e| (None, without_position(&e.to_string())))?;
    Ok(value)
}

/// The field to blame: the JSON path where deserialisation stopped, completed
/// with the name serde gives in a "missing field" message.
fn field_of(path: &str, message: &str) -> Option<String> {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let path = (path != ".").then_some(path);
    match (path, missing) {
        (Some(p), Some(m)) => Some(format!("{p}.{m}")),
        (None, Some(m)) => Some(m.to_owned()),
        (Some(p), None) => Some(p.to_owned()),
        (None, None) => None,
    }
}

/// The last object key in a JSON prefix (a string followed by `:`).
fn last_key(prefix: &str) -> Option<String> {
    let mut key = None;
    let mut chars = prefix.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        if prefix[end + 1..].trim_start().starts_with(':') {
            key = serde_json::from_str::<String>(&prefix[start..=end]).ok();
        }
    }
    key
}

/// serde_json appends " at line 1 column N"; every record is one line, so
/// keep only the column.
fn without_position(message: &str) -> String {
    match message.rsplit_once(" at line ") {
        Some((head, tail)) => match tail.split_once(" column ") {
            Some((_, column)) => format!("{head} (column {column})"),
            None => message.to_owned(),
        },
        None => message.to_owned(),
    }
}

fn utf8_error(path: &Path, line: usize, raw: &[u8], error: &std::str::Utf8Error) -> Error {
    let lossy = String::from_utf8_lossy(raw);
    let field = serde_json::from_str::<serde_json::Value>(&lossy)
        .ok()
        .and_then(|v| find_replacement(&v, String::new()));
    Error::input(
        Location::line(path, line),
        field.as_deref(),
        format!(
            "invalid UTF-8 at byte {} of the line (the file must be UTF-8)",
            error.valid_up_to() + 1
        ),
    )
}

/// The JSON path of the first string that holds U+FFFD (where lossy decoding
/// replaced the invalid bytes).
fn find_replacement(value: &serde_json::Value, path: String) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::String(s) if s.contains('\u{FFFD}') => Some(path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_replacement(v, format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k.contains('\u{FFFD}') {
                return Some(k.clone());
            }
            let child = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            find_replacement(v, child)
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Rec {
        id: String,
        tags: Vec<String>,
    }

    #[test]
    fn missing_field_is_named() {
        let (field, message) = parse_line::<Rec>(r#"{"tags": []}"#).unwrap_err();
        assert_eq!(field.as_deref(), Some("id"));
        assert!(message.contains("missing field"), "{message}");
    }

    #[test]
    fn wrong_type_in_a_list_names_the_element() {
        let (field, message) = parse_line::<Rec>(r#"{"id": "a", "tags": ["x", 3]}"#).unwrap_err();
        assert_eq!(field.as_deref(), Some("tags[1]"));
        assert!(message.contains("invalid type"), "{message}");
        assert!(message.contains("column"), "{message}");
    }

    #[test]
    fn a_record_must_be_an_object_not_an_array_of_its_fields() {
        // Derived, `Rec` alone would take `["a", []]` as {id: "a", tags: []}.
        assert!(parse_line::<Rec>(r#"["a", []]"#).is_ok());
        let Err((field, message)) = parse_line::<Object<Rec>>(r#"["a", []]"#) else {
            panic!("an array read as a record");
        };
        assert_eq!(field, None);
        assert!(
            message.contains("invalid type: sequence, expected a JSON object"),
            "{message}"
        );
        for text in ["\"a\"", "3", "null", "true"] {
            assert!(parse_line::<Object<Rec>>(text).is_err(), "{text}");
        }
        let Ok(Object(rec)) = parse_line::<Object<Rec>>(r#"{"id": "a", "tags": ["x"]}"#) else {
            panic!("an object refused");
        };
        assert_eq!((rec.id.as_str(), rec.tags.len()), ("a", 1));
        // The field of an error inside the object is still named.
        let Err((field, _)) = parse_line::<Object<Rec>>(r#"{"id": "a", "tags": [3]}"#) else {
            panic!("a number read as a tag");
        };
        assert_eq!(field.as_deref(), Some("tags[0]"));
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        assert!(parse_line::<Rec>(r#"{"id": "a", "tags": []} x"#).is_err());
    }
}
