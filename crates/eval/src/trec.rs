//! Whitespace-separated TREC text formats (run files and qrels).

use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Location, Result};

/// A problem with one line: the byte offset of the line, the column to blame
/// and what is wrong.
pub(crate) struct LineError {
    pub(crate) offset: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
}

/// Parses every non-blank line of `bytes` into `N` columns, in parallel over
/// chunks of the file: each chunk folds its lines, in order, into its own
/// accumulator (made by `start`, handed each line's byte offset and columns to
/// `line`). Returns the accumulators in file order; the first bad line (in
/// file order) is an error naming its line and column.
pub(crate) fn fold_lines<'a, const N: usize, C: Send>(
    path: &Path,
    bytes: &'a [u8],
    names: [&str; N],
    start: impl Fn() -> C + Sync,
    line: impl Fn(&mut C, usize, [&'a str; N]) -> Result<(), (usize, String)> + Sync,
) -> Result<Vec<C>> {
    // Chunks end at b'\n', which never falls inside a UTF-8 sequence, so
    // each chunk is validated on its own, in parallel with the others.
    let chunks = chunk_at_lines(bytes, rayon::current_num_threads() * 2);
    let folded: Vec<Result<C, LineError>> = chunks
        .par_iter()
        .map(|&(offset, chunk)| {
            let text = std::str::from_utf8(chunk).map_err(|e| utf8_error(offset, chunk, &e))?;
            let mut acc = start();
            fold_chunk(offset, text, &mut acc, &line).map(|()| acc)
        })
        .collect();
    folded
        .into_iter()
        .map(|part| part.map_err(|e| error_at(path, bytes, e, &names)))
        .collect()
}

/// Where a chunk stops being UTF-8: the line, and the column holding the bad
/// byte (the column that starts last before it, or a new one after whitespace).
fn utf8_error(offset: usize, chunk: &[u8], e: &std::str::Utf8Error) -> LineError {
    let valid = &chunk[..e.valid_up_to()];
    let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let before = &valid[line_start..];
    let started = before
        .split(u8::is_ascii_whitespace)
        .filter(|c| !c.is_empty())
        .count();
    let column = if before.last().is_none_or(u8::is_ascii_whitespace) {
        started
    } else {
        started - 1
    };
    LineError {
        offset: offset + line_start,
        column,
        message: format!("invalid UTF-8 at byte {} of the line", before.len() + 1),
    }
}

fn fold_chunk<'a, const N: usize, C>(
    start: usize,
    chunk: &'a str,
    acc: &mut C,
    fold: &impl Fn(&mut C, usize, [&'a str; N]) -> Result<(), (usize, String)>,
) -> Result<(), LineError> {
    let mut offset = start;
    for line in chunk.split_inclusive('\n') {
        let line_offset = offset;
        offset += line.len();
        let (columns, count) = split_columns::<N>(line);
        if count == 0 {
            continue;
        }
        if count != N {
            return Err(LineError {
                offset: line_offset,
                column: count.min(N - 1),
                message: format!("expected {N} whitespace-separated columns, found {count}"),
            });
        }
        fold(acc, line_offset, columns).map_err(|(column, message)| LineError {
            offset: line_offset,
            column,
            message,
        })?;
    }
    Ok(())
}

/// The first `N` whitespace-separated columns of a line, and how many
/// columns it has (counting stops at `N + 1`).
fn split_columns<const N: usize>(line: &str) -> ([&str; N], usize) {
    // Every ASCII whitespace byte is at most b' ': test that first, and the
    // exact class only for the rare bytes that pass.
    let is_space = |b: u8| b <= b' ' && b.is_ascii_whitespace();
    let bytes = line.as_bytes();
    let mut columns = [""; N];
    let mut count = 0;
    let mut i = 0;
    loop {
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        if i == bytes.len() || count > N {
            return (columns, count);
        }
        let start = i;
        while i < bytes.len() && !is_space(bytes[i]) {
            i += 1;
        }
        if count < N {
            // Both ends are at ASCII bytes or the ends of the line, so they
            // are character boundaries.
            columns[count] = &line[start..i];
        }
        count += 1;
    }
}

/// Splits `text` into about `n` pieces that end at line ends, each with its
/// byte offset.
fn chunk_at_lines(bytes: &[u8], n: usize) -> Vec<(usize, &[u8])> {
    let target = (bytes.len() / n.max(1)).max(1 << 16);
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = (start + target).min(bytes.len());
        end = match bytes[end..].iter().position(|&b| b == b'\n') {
            Some(p) => end + p + 1,
            None => bytes.len(),
        };
        chunks.push((start, &bytes[start..end]));
        start = end;
    }
    chunks
}

/// The 1-based line that starts at or contains byte `offset`.
pub(crate) fn line_of(bytes: &[u8], offset: usize) -> usize {
    bytes[..offset].iter().filter(|&&b| b == b'\n').count() + 1
}

fn error_at<const N: usize>(path: &Path, bytes: &[u8], e: LineError, names: &[&str; N]) -> Error {
    let message = if e.message.starts_with("expected ") {
        format!("{} ({})", e.message, names.join(" "))
    } else {
        e.message
    };
    Error::input(
        Location::line(path, line_of(bytes, e.offset)),
        names.get(e.column).copied(),
        message,
    )
}

/// A whole input file in memory: mapped when it is a regular file (no copy,
/// the page cache is read in place), else read.
pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Read(v) => v,
        }
    }
}

pub(crate) fn read_bytes(path: &Path) -> Result<Bytes> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_file() && meta.len() > 0 {
        // SAFETY: `Mmap::map` is unsafe because another process may change
        // the file while it is mapped. The bytes are only read, and every
        // bit pattern is a valid `u8`; a file truncated meanwhile would end
        // the process with SIGBUS. Like other command-line tools that map
        // their inputs, this one accepts that to avoid copying large runs.
        if let Ok(map) = unsafe { memmap2::Mmap::map(&file) } {
            return Ok(Bytes::Mapped(map));
        }
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(|e| Error::io(path, e))?;
    Ok(Bytes::Read(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_text_and_end_at_line_ends() {
        let text: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        let chunks = chunk_at_lines(text.as_bytes(), 7);
        assert!(chunks.len() > 1);
        let mut next = 0;
        for (start, chunk) in &chunks {
            assert_eq!(*start, next);
            assert!(chunk.ends_with(b"\n"));
            next += chunk.len();
        }
        assert_eq!(next, text.len());
        assert_eq!(chunk_at_lines(b"a\nb", 3), [(0, &b"a\nb"[..])]);
        assert!(chunk_at_lines(b"", 3).is_empty());
    }
}
