//! Transition docs generated from a machine: Mermaid, Graphviz DOT and
//! Markdown.
//!
//! Each renderer reads only [`StateMachine::MACHINE`], so the diagram can
//! never disagree with the enum. The output is deterministic: states in
//! declaration order, transitions in order of first declaration, and each
//! transition with several sources drawn as one edge per source.
//!
//! For the derive's example machine,
//!
//! ```text
//! #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! #[state_machine(table = "payouts", column = "status", key = "id")]
//! pub enum PayoutStatus {
//!     #[state(initial)]
//!     #[transition(start -> Sending)]
//!     #[transition(cancel -> Cancelled)]
//!     Pending,
//!     #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
//!     #[transition(fail -> Failed)]
//!     #[transition(cancel -> Cancelled)]
//!     Sending,
//!     Sent,
//!     Failed,
//!     Cancelled,
//! }
//! ```
//!
//! `stateguard::docs::mermaid::<PayoutStatus>()` returns
//!
//! ```text
//! stateDiagram-v2
//!     Pending : pending
//!     Sending : sending
//!     Sent : sent
//!     Failed : failed
//!     Cancelled : cancelled
//!     [*] --> Pending
//!     Pending --> Sending : start
//!     Pending --> Cancelled : cancel
//!     Sending --> Cancelled : cancel
//!     Sending --> Sent : confirm
//!     Sending --> Failed : fail
//!     Sent --> [*]
//!     Failed --> [*]
//!     Cancelled --> [*]
//! ```
//!
//! # Keeping generated files fresh
//!
//! Commit the rendered docs and let a test compare them with the enum:
//!
//! ```text
//! #[test]
//! fn docs_are_fresh() {
//!     stateguard::docs::assert_fresh::<PayoutStatus>("docs/payouts.md");
//!     stateguard::docs::assert_fresh_diagram::<PayoutStatus>("README.md");
//! }
//! ```
//!
//! When the enum changes the test fails with a line diff; running it again
//! with `STATEGUARD_BLESS=1` rewrites the files, and the change is reviewed in
//! version control like any other.

use core::fmt::Write as _;
use std::path::Path;

use crate::machine::{StateDef, StateMachine};

/// The line that opens the generated diagram in a README:
/// see [`assert_fresh_diagram`].
pub const DIAGRAM_START: &str = "<!-- stateguard:diagram:start -->";

/// The line that closes the generated diagram in a README:
/// see [`assert_fresh_diagram`].
pub const DIAGRAM_END: &str = "<!-- stateguard:diagram:end -->";

/// The environment variable that makes the `assert_fresh*` functions write
/// the expected content instead of failing, when set to `1`.
pub const BLESS_VAR: &str = "STATEGUARD_BLESS";

// ---------------------------------------------------------------------------
// Mermaid

/// The machine as a Mermaid `stateDiagram-v2`.
///
/// Node ids are the variant names and each state shows its database string
/// as its description. The initial state is entered from `[*]`, every
/// terminal state (no transition starts from it) leads to `[*]`, and every
/// in-flight state carries a note with its lease and `since` column and the
/// class `inFlight`. Each edge is labelled with its transition's name.
///
/// A variant name that Mermaid would read as a keyword (`State`, `Note`,
/// `Class`, …) gets a trailing `_` as its id, and characters outside
/// `[A-Za-z0-9_]` are written as `_u<hex>_`; text is escaped with Mermaid's
/// `#<code>;` entities wherever it could end a statement. The result ends with
/// a newline.
///
/// For a payout machine whose `Sending` is marked
/// `#[state(in_flight(lease = "30s", since = "sending_since", …))]`:
///
/// ```text
/// stateDiagram-v2
///     Pending : pending
///     Sending : sending
///     ...
///     [*] --> Pending
///     Pending --> Sending : start
///     ...
///     Sent --> [*]
///     note right of Sending : in flight (lease 30s, since column sending_since)
///     classDef inFlight fill:#fff3bf,stroke:#e8590c,stroke-width:2px,color:#000
///     class Sending inFlight
/// ```
pub fn mermaid<T: StateMachine>() -> String {
    let machine = T::MACHINE;
    let states = machine.states();
    let ids = mermaid_ids(states);
    let id = |state: T| ids[index_of(states, state)].as_str();

    let mut out = String::from("stateDiagram-v2\n");
    for (state, state_id) in states.iter().zip(&ids) {
        if *state_id != state.variant() {
            // The id had to change: keep the Rust name visible.
            let _ = writeln!(out, "    {state_id} : {}", mermaid_text(state.variant()));
        }
        let _ = writeln!(out, "    {state_id} : {}", mermaid_text(state.db_str()));
    }
    let _ = writeln!(out, "    [*] --> {}", id(machine.initial()));
    for transition in machine.transitions() {
        for &source in transition.sources() {
            let _ = writeln!(
                out,
                "    {} --> {} : {}",
                id(source),
                id(transition.target()),
                mermaid_text(transition.name()),
            );
        }
    }
    for state in states.iter().filter(|s| machine.is_terminal(s.value())) {
        let _ = writeln!(out, "    {} --> [*]", id(state.value()));
    }
    let in_flight: Vec<&str> = states
        .iter()
        .zip(&ids)
        .filter_map(|(state, state_id)| {
            let def = state.in_flight()?;
            let _ = writeln!(
                out,
                "    note right of {state_id} : {}",
                mermaid_text(&format!(
                    "in flight (lease {}, since column {})",
                    lease(def.lease()),
                    def.since_column(),
                )),
            );
            Some(state_id.as_str())
        })
        .collect();
    if !in_flight.is_empty() {
        out.push_str(
            "    classDef inFlight fill:#fff3bf,stroke:#e8590c,stroke-width:2px,color:#000\n",
        );
        let _ = writeln!(out, "    class {} inFlight", in_flight.join(","));
    }
    out
}

/// [`mermaid`] inside a fenced ```` ```mermaid ```` block, as GitHub, GitLab
/// and most Markdown renderers draw it. Ends with a newline.
pub fn mermaid_block<T: StateMachine>() -> String {
    format!("```mermaid\n{}```\n", mermaid::<T>())
}

/// Words Mermaid's state-diagram lexer reads as statements whatever their
/// case, and the ids it gives `[*]` itself: a state id must be none of them.
const MERMAID_KEYWORDS: &[&str] = &[
    "accdescr",
    "acctitle",
    "as",
    "class",
    "classdef",
    "click",
    "default",
    "direction",
    "end",
    "hide",
    "href",
    "left",
    "note",
    "of",
    "right",
    "root_end",
    "root_start",
    "scale",
    "state",
    "statediagram",
    "style",
    "width",
];

/// One id per state, in declaration order: the variant name, made safe for
/// Mermaid and unique.
fn mermaid_ids<S: Copy>(states: &[StateDef<S>]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::with_capacity(states.len());
    for state in states {
        let mut id = String::new();
        for c in state.variant().chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                id.push(c);
            } else {
                let _ = write!(id, "_u{:x}_", u32::from(c));
            }
        }
        if MERMAID_KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(&id)) {
            id.push('_');
        }
        while ids.contains(&id) {
            id.push('_');
        }
        ids.push(id);
    }
    ids
}

/// Text for a description, an edge label or a note: characters that could
/// end the statement or be read as markup become `#<code>;` entities, which
/// Mermaid decodes when it draws.
fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let lower = text.to_ascii_lowercase();
    for (i, c) in text.char_indices() {
        let entity = match c {
            '#' | '"' | ';' | ':' | '<' | '>' | '&' | '`' | '%' | '{' | '}' | '|' => true,
            // The lexer reads `…direction TB…` anywhere as a statement.
            c if c.is_whitespace() => lower[..i].ends_with("direction"),
            c => c.is_control(),
        };
        if entity {
            let _ = write!(out, "#{};", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Graphviz DOT

/// The machine as a Graphviz `digraph`, laid out left to right.
///
/// Every id is quoted: states are named by their variant and labelled with
/// the variant and the database string. The initial state has a bold border
/// and is entered from a point node `"[*]"`; terminal states have a double
/// border; in-flight states are dashed, filled, and show their lease and
/// `since` column. Each edge is labelled with its transition's name. Render it
/// with `dot -Tsvg machine.dot > machine.svg`. The result ends with a newline.
///
/// ```text
/// digraph "PayoutStatus" {
///     rankdir=LR;
///     node [shape=box, style=rounded];
///     "[*]" [shape=point, width=0.15, label=""];
///     "Pending" [label="Pending\npending", penwidth=2];
///     ...
///     "[*]" -> "Pending";
///     "Pending" -> "Sending" [label="start"];
///     ...
/// }
/// ```
pub fn dot<T: StateMachine>() -> String {
    let machine = T::MACHINE;
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_str(machine.name()));
    out.push_str("    rankdir=LR;\n");
    out.push_str("    node [shape=box, style=rounded];\n");
    out.push_str("    \"[*]\" [shape=point, width=0.15, label=\"\"];\n");
    for state in machine.states() {
        let mut label = format!("{}\n{}", state.variant(), state.db_str());
        let mut attrs = Vec::new();
        if state.is_initial() {
            attrs.push("penwidth=2".to_owned());
        }
        if machine.is_terminal(state.value()) {
            attrs.push("peripheries=2".to_owned());
        }
        if let Some(def) = state.in_flight() {
            let _ = write!(
                label,
                "\nin flight, lease {}\nsince {}",
                lease(def.lease()),
                def.since_column()
            );
            attrs.push("style=\"rounded,filled,dashed\"".to_owned());
            attrs.push("fillcolor=\"#fff3bf\"".to_owned());
        }
        attrs.insert(0, format!("label={}", dot_str(&label)));
        let _ = writeln!(
            out,
            "    {} [{}];",
            dot_str(state.variant()),
            attrs.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "    \"[*]\" -> {};",
        dot_variant::<T>(machine.initial())
    );
    for transition in machine.transitions() {
        for &source in transition.sources() {
            let _ = writeln!(
                out,
                "    {} -> {} [label={}];",
                dot_variant::<T>(source),
                dot_variant::<T>(transition.target()),
                dot_str(transition.name()),
            );
        }
    }
    out.push_str("}\n");
    out
}

fn dot_variant<T: StateMachine>(state: T) -> String {
    dot_str(variant::<T>(state))
}

/// A DOT quoted string. Inside one `"` and `\` are special (and `\n`, `\l`,
/// `\N`… after a backslash), and Graphviz decodes HTML entities such as
/// `&amp;` in labels, so escaping these three keeps the text literal.
fn dot_str(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '&' => out.push_str("&amp;"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// Markdown

/// A Markdown page for the machine: a heading, where it is stored, the
/// [`mermaid`] diagram in a ```` ```mermaid ```` block, a table of states
/// (database string; initial, terminal, in flight with its lease and `since`
/// column) and a table of transitions (sources, target, and the columns the
/// same `UPDATE` writes: `set(…)` columns, the `since` column of an in-flight
/// target and the version column). The result ends with a newline.
///
/// ```text
/// # PayoutStatus
///
/// `PayoutStatus` is stored in the column `status` of `payouts`, keyed by `id`.
/// ...
/// ## States
///
/// | state | database string | kind | lease | since column |
/// | --- | --- | --- | --- | --- |
/// | `Pending` | `pending` | initial | | |
/// ...
/// ## Transitions
///
/// | transition | from | to | also sets |
/// | --- | --- | --- | --- |
/// | `start` | `Pending` | `Sending` | |
/// | `cancel` | `Pending`, `Sending` | `Cancelled` | |
/// | `confirm` | `Sending` | `Sent` | `sent_at = CURRENT_TIMESTAMP` |
/// ...
/// ```
pub fn markdown<T: StateMachine>() -> String {
    let machine = T::MACHINE;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!-- Generated by stateguard::docs::markdown from `{}`; do not edit by hand. -->\n",
        machine.name()
    );
    let _ = writeln!(out, "# {}\n", machine.name());
    let _ = write!(
        out,
        "{} is stored in the column {} of {}, keyed by {}.",
        code(machine.name()),
        code(machine.column()),
        code(machine.table()),
        code(machine.key()),
    );
    if let Some(version) = machine.version() {
        let _ = write!(
            out,
            " Every transition increments the version column {}.",
            code(version)
        );
    }
    let _ = write!(
        out,
        " Each transition is one `UPDATE` that sets {} to the target's database \
         string only if the row is in one of the transition's source states.\n\n",
        code(machine.column())
    );
    out.push_str(&mermaid_block::<T>());

    out.push_str("\n## States\n\n");
    out.push_str("| state | database string | kind | lease | since column |\n");
    out.push_str("| --- | --- | --- | --- | --- |\n");
    for state in machine.states() {
        let mut kind = Vec::new();
        if state.is_initial() {
            kind.push("initial".to_owned());
        }
        let (lease_cell, since_cell) = match state.in_flight() {
            Some(def) => {
                let mut text = format!("in flight: done by {}", code(def.done::<T>().name()));
                if let Some(failed) = def.failed::<T>() {
                    let _ = write!(text, ", failed by {}", code(failed.name()));
                }
                kind.push(text);
                (lease(def.lease()), code(def.since_column()))
            }
            None => (String::new(), String::new()),
        };
        if machine.is_terminal(state.value()) {
            kind.push("terminal".to_owned());
        }
        row(
            &mut out,
            &[
                code(state.variant()),
                code(state.db_str()),
                kind.join("; "),
                lease_cell,
                since_cell,
            ],
        );
    }

    out.push_str("\n## Transitions\n\n");
    out.push_str("| transition | from | to | also sets |\n");
    out.push_str("| --- | --- | --- | --- |\n");
    for transition in machine.transitions() {
        let from: Vec<String> = transition
            .sources()
            .iter()
            .map(|&s| code(variant::<T>(s)))
            .collect();
        let mut sets: Vec<String> = transition
            .set_columns()
            .iter()
            .map(|c| code(&format!("{} = {}", c.column(), c.expr())))
            .collect();
        let target = machine.state(transition.target());
        if let Some(def) = target.and_then(|s| s.in_flight()) {
            sets.push(format!(
                "{} to the current time (lease start)",
                code(def.since_column())
            ));
        }
        if let Some(version) = machine.version() {
            sets.push(code(&format!("{version} = {version} + 1")));
        }
        row(
            &mut out,
            &[
                code(transition.name()),
                from.join(", "),
                code(variant::<T>(transition.target())),
                sets.join(", "),
            ],
        );
    }
    out
}

/// A table row; an empty cell is written `| |`.
fn row(out: &mut String, cells: &[String]) {
    out.push('|');
    for cell in cells {
        if !cell.is_empty() {
            out.push(' ');
            out.push_str(cell);
        }
        out.push_str(" |");
    }
    out.push('\n');
}

/// `text` as an inline code span that is safe in a GFM table cell: the
/// fence is longer than any run of backticks inside, `|` is escaped (GFM
/// splits cells before it parses code spans) and line breaks become spaces.
fn code(text: &str) -> String {
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    let body: String = text
        .chars()
        .map(|c| match c {
            '\r' | '\n' => " ".to_owned(),
            '|' => "\\|".to_owned(),
            c => c.to_string(),
        })
        .collect();
    format!("{fence}{pad}{body}{pad}{fence}")
}

// ---------------------------------------------------------------------------
// Shared helpers

fn index_of<S: StateMachine>(states: &[StateDef<S>], state: S) -> usize {
    states
        .iter()
        .position(|s| s.value() == state)
        .unwrap_or_else(|| unreachable!("{state:?} is not among the machine's states"))
}

fn variant<S: StateMachine>(state: S) -> &'static str {
    let states = S::MACHINE.states();
    states[index_of(states, state)].variant()
}

/// A lease in the attribute's own syntax: `150ms`, `30s`, `5m`, `1h`.
fn lease(lease: core::time::Duration) -> String {
    let ms = lease.as_millis();
    for (unit, scale) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms.is_multiple_of(scale) {
            return format!("{}{unit}", ms / scale);
        }
    }
    format!("{ms}ms")
}

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
fn section(text: &str, start: &str, end: &str) -> Result<core::ops::Range<usize>, String> {
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

// ---------------------------------------------------------------------------
// Line diff

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Above this many cells the LCS table is not built; the changed middle is
/// shown as removed, then added.
const MAX_TABLE: usize = 4_000_000;
/// Diff lines shown before the rest is summarized.
const MAX_SHOWN: usize = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Removed(usize),
    Added(usize),
}

/// A unified diff, `-` for `actual` (the file) and `+` for `expected`.
fn diff(actual: &str, expected: &str, label: &str) -> String {
    let old: Vec<&str> = actual.split_inclusive('\n').collect();
    let new: Vec<&str> = expected.split_inclusive('\n').collect();
    let ops = diff_ops(&old, &new);

    let mut out = format!("--- {label} (on disk)\n+++ generated\n");
    let mut shown = 0;
    let mut i = 0;
    while i < ops.len() {
        if matches!(ops[i], Op::Same(..)) {
            i += 1;
            continue;
        }
        // A hunk: from CONTEXT lines before this change to CONTEXT lines
        // after the last change that is at most 2 * CONTEXT lines further.
        let first = i.saturating_sub(CONTEXT);
        let mut last = i;
        let mut j = i;
        while j < ops.len() {
            if !matches!(ops[j], Op::Same(..)) {
                last = j;
            } else if j - last > 2 * CONTEXT {
                break;
            }
            j += 1;
        }
        let stop = (last + 1 + CONTEXT).min(ops.len());
        let hunk = &ops[first..stop];
        let (old_start, new_start) = position(&ops[first..], old.len(), new.len());
        let old_count = hunk.iter().filter(|o| !matches!(o, Op::Added(_))).count();
        let new_count = hunk.iter().filter(|o| !matches!(o, Op::Removed(_))).count();
        let _ = writeln!(
            out,
            "@@ -{},{old_count} +{},{new_count} @@",
            old_start + usize::from(old_count > 0),
            new_start + usize::from(new_count > 0),
        );
        for op in hunk {
            if shown == MAX_SHOWN {
                out.push_str("… (the rest of the diff is not shown)\n");
                return out;
            }
            shown += 1;
            let (sign, line) = match *op {
                Op::Same(o, _) => (' ', old[o]),
                Op::Removed(o) => ('-', old[o]),
                Op::Added(n) => ('+', new[n]),
            };
            match line.strip_suffix('\n') {
                Some(line) => {
                    let _ = writeln!(out, "{sign}{line}");
                }
                None => {
                    let _ = writeln!(out, "{sign}{line}\n\\ No newline at end of file");
                }
            }
        }
        i = stop;
    }
    out
}

/// The 0-based line numbers in `old` and `new` where `ops` begins.
fn position(ops: &[Op], old_len: usize, new_len: usize) -> (usize, usize) {
    let mut old_end = old_len;
    let mut new_end = new_len;
    for op in ops {
        match *op {
            Op::Same(..) => {
                old_end -= 1;
                new_end -= 1;
            }
            Op::Removed(_) => old_end -= 1,
            Op::Added(_) => new_end -= 1,
        }
    }
    (old_end, new_end)
}

/// The edit script from `old` to `new`: common prefix and suffix, and a
/// longest common subsequence of the middle.
fn diff_ops(old: &[&str], new: &[&str]) -> Vec<Op> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_mid, new_mid) = (
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
    );

    let mut ops: Vec<Op> = (0..prefix).map(|i| Op::Same(i, i)).collect();
    let (n, m) = (old_mid.len(), new_mid.len());
    if (n + 1).saturating_mul(m + 1) > MAX_TABLE {
        ops.extend((0..n).map(|i| Op::Removed(prefix + i)));
        ops.extend((0..m).map(|j| Op::Added(prefix + j)));
    } else {
        // lcs[i][j]: the LCS length of old_mid[i..] and new_mid[j..].
        let width = m + 1;
        let mut lcs = vec![0u32; (n + 1) * width];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i * width + j] = if old_mid[i] == new_mid[j] {
                    lcs[(i + 1) * width + j + 1] + 1
                } else {
                    lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && old_mid[i] == new_mid[j] {
                ops.push(Op::Same(prefix + i, prefix + j));
                i += 1;
                j += 1;
            } else if j == m || (i < n && lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
                ops.push(Op::Removed(prefix + i));
                i += 1;
            } else {
                ops.push(Op::Added(prefix + j));
                j += 1;
            }
        }
    }
    let (old_tail, new_tail) = (old.len() - suffix, new.len() - suffix);
    ops.extend((0..suffix).map(|k| Op::Same(old_tail + k, new_tail + k)));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_survive_tables() {
        assert_eq!(code("pending"), "`pending`");
        assert_eq!(code("a || b"), "`a \\|\\| b`");
        assert_eq!(code("`ops`"), "`` `ops` ``");
        assert_eq!(code("x``y"), "```x``y```");
        assert_eq!(code("a\nb"), "`a b`");
    }

    #[test]
    fn mermaid_text_escapes_statement_breakers() {
        assert_eq!(mermaid_text("pending"), "pending");
        assert_eq!(mermaid_text("a;b:c"), "a#59;b#58;c");
        assert_eq!(mermaid_text("#1"), "#35;1");
        assert_eq!(mermaid_text("\"x\""), "#34;x#34;");
        assert_eq!(mermaid_text("Direction tb"), "Direction#32;tb");
        assert_eq!(mermaid_text("a b"), "a b");
    }

    #[test]
    fn dot_strings_are_quoted_and_escaped() {
        assert_eq!(dot_str("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }

    #[test]
    fn leases_use_the_attribute_syntax() {
        use core::time::Duration;
        assert_eq!(lease(Duration::from_millis(150)), "150ms");
        assert_eq!(lease(Duration::from_millis(1500)), "1500ms");
        assert_eq!(lease(Duration::from_secs(30)), "30s");
        assert_eq!(lease(Duration::from_secs(300)), "5m");
        assert_eq!(lease(Duration::from_secs(7200)), "2h");
    }

    #[test]
    fn diff_shows_changed_lines_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nD\ne\nf\ng\nh\ni\n";
        let out = diff(old, new, "x");
        assert_eq!(
            out,
            "--- x (on disk)\n+++ generated\n\
             @@ -1,8 +1,9 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n h\n+i\n"
        );
        let far = diff(
            "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n",
            "1\n2\nX\n4\n5\n6\n7\n8\n9\n10\n11\nY\n",
            "x",
        );
        assert!(far.contains("@@ -1,6 +1,6 @@\n"), "{far}");
        assert!(far.contains("@@ -9,4 +9,4 @@\n"), "{far}");
    }

    #[test]
    fn diff_marks_a_missing_final_newline() {
        let out = diff("a\nb", "a\nb\n", "x");
        assert!(
            out.contains("-b\n\\ No newline at end of file\n+b\n"),
            "{out}"
        );
    }

    #[test]
    fn sections_need_one_pair_of_markers_in_order() {
        let text = "x\n<!-- s -->\nold\n<!-- e -->\ny\n";
        let range = section(text, "<!-- s -->", "<!-- e -->").unwrap();
        assert_eq!(&text[range], "old\n");
        let empty = "<!-- s -->\n<!-- e -->\n";
        assert_eq!(section(empty, "<!-- s -->", "<!-- e -->"), Ok(11..11));
        assert!(section("<!-- e -->\n<!-- s -->\n", "<!-- s -->", "<!-- e -->").is_err());
        assert!(section("<!-- s -->\n", "<!-- s -->", "<!-- e -->").is_err());
        assert!(
            section(
                "<!-- s -->\n<!-- s -->\n<!-- e -->\n",
                "<!-- s -->",
                "<!-- e -->"
            )
            .is_err()
        );
    }
}
