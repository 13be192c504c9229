//! Whitespace-separated TREC text formats (run files and qrels).

use std::path::Path;

use crate::error::{Error, Location, Result};

/// Calls `f` with the 1-based line number and the columns of every non-blank
/// line; a line with another number of columns than `names` is an error.
pub(crate) fn for_each_line<'a, const N: usize>(
    path: &Path,
    bytes: &'a [u8],
    names: [&str; N],
    mut f: impl FnMut(usize, [&'a str; N]) -> Result<()>,
) -> Result<()> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let valid = &bytes[..e.valid_up_to()];
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let before = &valid[line_start..];
        // The invalid byte belongs to the column that starts last before it,
        // or begins a new one after whitespace.
        let started = before
            .split(u8::is_ascii_whitespace)
            .filter(|c| !c.is_empty())
            .count();
        let column = if before.last().is_none_or(u8::is_ascii_whitespace) {
            started
        } else {
            started - 1
        };
        Error::input(
            Location::line(path, valid.iter().filter(|&&b| b == b'\n').count() + 1),
            names.get(column).copied(),
            format!("invalid UTF-8 at byte {} of the line", before.len() + 1),
        )
    })?;
    for (index, line) in text.split('\n').enumerate() {
        let mut columns = [""; N];
        let mut count = 0;
        for column in line.split_ascii_whitespace() {
            if count < N {
                columns[count] = column;
            }
            count += 1;
        }
        if count == 0 {
            continue;
        }
        if count != N {
            return Err(Error::input(
                Location::line(path, index + 1),
                names.get(count.min(N)).copied().or(names.last().copied()),
                format!(
                    "expected {N} whitespace-separated columns ({}), found {count}",
                    names.join(" ")
                ),
            ));
        }
        f(index + 1, columns)?;
    }
    Ok(())
}

pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}
