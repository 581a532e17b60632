//! Assertions that checked-in renderings match the enum.

use std::path::Path;

use super::diff::diff;
use super::*;

// ---------------------------------------------------------------------------
// Freshness assertions

/// Checks that the file at `path` holds [`markdown::<T>()`](markdown).
///
/// With `STATEGUARD_BLESS=1` in the environment it writes the file instead
/// (creating missing directories) and passes. Line endings are compared
/// after turning `\r\n` into `\n`, so a Windows checkout does not fail.
///
/// ```text
/// #[test]
/// fn payout_docs_are_fresh() {
///     stateguard::docs::assert_fresh::<PayoutStatus>(
///         concat!(env!("CARGO_MANIFEST_DIR"), "/docs/payouts.md"),
///     );
/// }
/// ```
///
/// # Panics
///
/// When the file is missing or differs, with a line diff and the command that
/// regenerates it; and when the file cannot be read or (blessing) written.
#[track_caller]
pub fn assert_fresh<T: StateMachine>(path: impl AsRef<Path>) {
    let what = format!("stateguard::docs::markdown::<{}>()", T::MACHINE.name());
    fresh_file(path.as_ref(), &markdown::<T>(), &what);
}

/// Checks that the file at `path` holds exactly `expected`, e.g.
/// [`mermaid::<T>()`](mermaid) or [`dot::<T>()`](dot) for committed
/// `.mmd`/`.dot` files. Blesses like [`assert_fresh`].
///
/// # Panics
///
/// When the file is missing or differs, with a line diff and the command that
/// regenerates it; and when the file cannot be read or (blessing) written.
#[track_caller]
pub fn assert_fresh_file(path: impl AsRef<Path>, expected: &str) {
    fresh_file(path.as_ref(), expected, "the generated text");
}

/// Checks that the lines strictly between the line `start` and the line
/// `end` of the file at `path` are `expected` (a trailing newline is added if
/// missing). The marker lines match after trimming whitespace, and each must
/// occur exactly once, `start` first. With `STATEGUARD_BLESS=1` the section
/// is replaced and the rest of the file kept byte for byte.
///
/// ```text
/// assert_fresh_section(
///     "README.md",
///     "<!-- orders:start -->",
///     "<!-- orders:end -->",
///     &stateguard::docs::mermaid_block::<OrderStatus>(),
/// );
/// ```
///
/// # Panics
///
/// When the section differs, with a line diff and the command that
/// regenerates it; when the file is missing or its markers are missing,
/// repeated or out of order (also when blessing: the markers say where the
/// section goes); and when the file cannot be read or written.
#[track_caller]
pub fn assert_fresh_section(path: impl AsRef<Path>, start: &str, end: &str, expected: &str) {
    fresh_section(path.as_ref(), start, end, expected, "the generated text");
}

/// Checks that the README (or any Markdown file) at `path` shows the
/// machine's diagram, [`mermaid_block::<T>()`](mermaid_block), between the
/// lines [`DIAGRAM_START`] and [`DIAGRAM_END`]:
///
/// ````text
/// <!-- stateguard:diagram:start -->
/// ```mermaid
/// stateDiagram-v2
/// ...
/// ```
/// <!-- stateguard:diagram:end -->
/// ````
///
/// Add the two marker lines where the diagram belongs and run the test once
/// with `STATEGUARD_BLESS=1` to fill them in.
///
/// # Panics
///
/// As [`assert_fresh_section`].
#[track_caller]
pub fn assert_fresh_diagram<T: StateMachine>(path: impl AsRef<Path>) {
    let what = format!("stateguard::docs::mermaid_block::<{}>()", T::MACHINE.name());
    fresh_section(
        path.as_ref(),
        DIAGRAM_START,
        DIAGRAM_END,
        &mermaid_block::<T>(),
        &what,
    );
}

fn blessing() -> bool {
    std::env::var_os(BLESS_VAR).is_some_and(|v| v == "1")
}

fn regenerate_hint() -> String {
    format!(
        "To regenerate it, run the test again with {BLESS_VAR}=1 \
         (e.g. `{BLESS_VAR}=1 cargo test`) and review the change."
    )
}

/// The file's text, or `None` if it does not exist.
#[track_caller]
fn read(path: &Path) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cannot read `{}`: {e}", path.display()),
    }
}

#[track_caller]
fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        panic!("cannot create `{}`: {e}", dir.display());
    }
    if let Err(e) = std::fs::write(path, text) {
        panic!("cannot write `{}`: {e}", path.display());
    }
    eprintln!("stateguard: wrote `{}` ({BLESS_VAR}=1)", path.display());
}

#[track_caller]
fn fresh_file(path: &Path, expected: &str, what: &str) {
    let actual = read(path);
    if actual.as_deref().map(normalize).as_deref() == Some(expected) {
        return;
    }
    if blessing() {
        write(path, expected);
        return;
    }
    match actual {
        None => panic!(
            "`{}` does not exist; it should hold {what}.\n{}",
            path.display(),
            regenerate_hint().replace("regenerate", "create"),
        ),
        Some(actual) => panic!(
            "`{}` is out of date: it differs from {what}.\n{}{}",
            path.display(),
            diff(&normalize(&actual), expected, &path.display().to_string()),
            regenerate_hint(),
        ),
    }
}

#[track_caller]
fn fresh_section(path: &Path, start: &str, end: &str, expected: &str, what: &str) {
    let mut expected = expected.to_owned();
    if !expected.is_empty() && !expected.ends_with('\n') {
        expected.push('\n');
    }
    let Some(text) = read(path) else {
        panic!(
            "`{}` does not exist; it should contain a line `{start}` and a line `{end}` \
             with {what} between them",
            path.display()
        );
    };
    let range = match section(&text, start.trim(), end.trim()) {
        Ok(range) => range,
        Err(why) => panic!(
            "`{}` {why}; put a line `{start}` and a line `{end}` where {what} belongs",
            path.display()
        ),
    };
    let actual = normalize(&text[range.clone()]);
    if actual == expected {
        return;
    }
    if blessing() {
        let crlf = text[..range.start].ends_with("\r\n");
        let body = if crlf {
            expected.replace('\n', "\r\n")
        } else {
            expected
        };
        let mut new = String::with_capacity(text.len() + body.len());
        new.push_str(&text[..range.start]);
        new.push_str(&body);
        new.push_str(&text[range.end..]);
        write(path, &new);
        return;
    }
    let label = format!("{} (between `{start}` and `{end}`)", path.display());
    panic!(
        "`{}`: the section between `{start}` and `{end}` is out of date: it differs from \
         {what}.\n{}{}",
        path.display(),
        diff(&actual, &expected, &label),
        regenerate_hint(),
    );
}

/// The byte range of the lines strictly between the marker lines.
pub(super) fn section(
    text: &str,
    start: &str,
    end: &str,
) -> Result<core::ops::Range<usize>, String> {
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed == start {
            starts.push((offset, offset + line.len()));
        } else if trimmed == end {
            ends.push((offset, offset + line.len()));
        }
        offset += line.len();
    }
    match (starts.as_slice(), ends.as_slice()) {
        ([], _) => Err(format!("has no line `{start}`")),
        (_, []) => Err(format!("has no line `{end}`")),
        ([_, _, ..], _) => Err(format!("has the line `{start}` more than once")),
        (_, [_, _, ..]) => Err(format!("has the line `{end}` more than once")),
        ([(_, after_start)], [(before_end, _)]) if after_start <= before_end => {
            Ok(*after_start..*before_end)
        }
        _ => Err(format!("has the line `{end}` before the line `{start}`")),
    }
}

fn normalize(text: &str) -> String {
    text.replace("\r\n", "\n")
}
