//! Mermaid `stateDiagram-v2`.

use core::fmt::Write as _;

use super::*;

// ---------------------------------------------------------------------------
// Mermaid

/// The machine as a Mermaid `stateDiagram-v2`.
///
/// Node ids are the variant names and each state shows its database string
/// (`state "pending" as Pending`). The initial state is entered from `[*]`, every
/// terminal state (no transition starts from it) leads to `[*]`, and every
/// in-flight state carries a note with its lease and `since` column and the
/// class `inFlight`. Each edge is labelled with its transition's name.
///
/// A variant name that Mermaid would read as a keyword (`State`, `Note`,
/// `Class`, …) gets a trailing `_` as its id, and characters outside
/// `[A-Za-z0-9_]` are written as `_u<hex>_`; the variant is then shown above
/// the database string (`state "State" as State_` and `State_ : …`). The
/// result ends with a newline.
///
/// # Names as written
///
/// Every database string, transition name and guard is drawn exactly as
/// written by Mermaid 11 with its default (HTML) labels, as GitHub, GitLab
/// and Mermaid in rustdoc draw it: `on-hold: customer`, `50% paid`,
/// `#1 closed (A/B)`, `**not bold**`, `<b>not markup</b>`. Most characters
/// are written as they are (a state's `:` too, where a space or the end
/// follows it: the quoted form takes it); a character that Mermaid would read
/// as syntax (`;`, another `:`, `"` in a state, `{`, `}`, `%%`,
/// `direction`), as HTML (`<`, `>`, `&`) or as Markdown or math (`` ` ``,
/// `*`, `_`, `~`, `$`, links, headings, lists) is written as a `#<code>;`
/// entity, which Mermaid decodes after it has parsed the diagram and the
/// label.
///
/// Two things cannot be drawn as written, and get their closest form:
///
/// - a space at either end of a name, or after another space, which HTML
///   drops, is drawn as a no-break space (U+00A0), as wide as a space;
/// - a line break or tab (only a guard can hold one) is drawn as one space.
///
/// With `htmlLabels: false` in the Mermaid configuration, labels are SVG
/// text, which does not decode entities: those characters then show as their
/// codes (`#58;`). CI draws every golden diagram, the README's, and a machine
/// built to break renderers with real Mermaid and checks the drawn text.
///
/// For a payout machine whose `Sending` is marked
/// `#[state(in_flight(lease = "30s", since = "sending_since", …))]`:
///
/// ```text
/// stateDiagram-v2
///     state "pending" as Pending
///     state "sending" as Sending
///     ...
///     [*] --> Pending
///     Pending --> Sending : start
///     ...
///     Sent --> [*]
///     note right of Sending : in flight (lease 30s, since column sending_since)
///     classDef inFlight fill:#fff3bf,stroke:#e8590c,stroke-width:2px,color:#000
///     class Sending inFlight
/// ```
#[must_use]
pub fn mermaid<T: StateMachine>() -> String {
    let machine = T::MACHINE;
    let states = machine.states();
    let ids = mermaid_ids(states);
    let id = |state: T| ids[index_of(states, state)].as_str();

    let mut out = String::from("stateDiagram-v2\n");
    for (state, state_id) in states.iter().zip(&ids) {
        if *state_id == state.variant() {
            let _ = writeln!(
                out,
                "    state \"{}\" as {state_id}",
                mermaid_quoted(state.db_str())
            );
        } else {
            // The id had to change: keep the Rust name visible, above the
            // database string.
            let _ = writeln!(
                out,
                "    state \"{}\" as {state_id}",
                mermaid_quoted(state.variant())
            );
            let _ = writeln!(out, "    {state_id} : {}", mermaid_text(state.db_str()));
        }
    }
    let _ = writeln!(out, "    [*] --> {}", id(machine.initial()));
    for transition in machine.transitions() {
        for &source in transition.sources() {
            let _ = writeln!(
                out,
                "    {} --> {} : {}",
                id(source),
                id(transition.target()),
                mermaid_text(&super::edge_label(transition)),
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
    for (state, state_id) in states.iter().zip(&ids) {
        let (None, Some(since), Some(timeout)) =
            (state.in_flight(), state.since_column(), state.timeout())
        else {
            continue;
        };
        let _ = writeln!(
            out,
            "    note right of {state_id} : {}",
            mermaid_text(&format!(
                "times out after {} (since column {since})",
                lease(timeout)
            )),
        );
    }
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
#[must_use]
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

/// Text for a description, an edge label or a note, written so that Mermaid
/// draws it as written.
///
/// Most characters go through as they are. A character is written as a
/// `#<code>;` entity, which Mermaid decodes only after it has parsed the
/// diagram and the label's Markdown, where it would otherwise
///
/// - end or change the statement: `;`, `:` (older Mermaid 11 releases end a
///   description there, and `:::` names a class), `{`, `}`, the space after
///   `direction`, and a `%` next to another (`%%` starts a comment or a
///   directive);
/// - be read as HTML or as an entity: `<`, `>`, `&`;
/// - be read as Markdown or math: `` ` ``, `*`, `~`, `$`, `\` (an escape),
///   `@` and the `.` of `www.` (links), a `]` before `(`, an `_` that is not
///   between two letters or digits, a leading `#`, `-` or `+` (or a run of
///   one) before a space or the end (a heading or a list item), and the `.`
///   or `)` after leading digits before a space or the end (a numbered list);
/// - be dropped as white space: a space at either end or after another space
///   becomes a no-break space (U+00A0), the closest form HTML keeps; white
///   space other than a plain space is written as its entity, and a line
///   break or tab as one space.
///
/// A raw `#` is safe: Mermaid only reads `#…;` as an entity, and a raw `;`
/// never appears.
pub fn mermaid_text(text: &str) -> String {
    encode(text, false)
}

/// [`mermaid_text`] for the quoted description of `state "…" as Id`, which
/// takes a `:` as it is where the description after `Id : ` cannot (before
/// a space or at the end: a `:` before anything else could still start
/// `:::` or the pattern of a `style` line), and cannot hold a `"`.
pub fn mermaid_quoted(text: &str) -> String {
    encode(text, true)
}

fn encode(text: &str, quoted: bool) -> String {
    let one_line: String = text
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect();
    let chars: Vec<char> = keep_spaces(&one_line).chars().collect();
    let mut out = String::with_capacity(text.len());
    // Whether the text before `i` ends with `word`, in any case.
    let ends_with = |i: usize, word: &str| {
        i >= word.len()
            && chars[i - word.len()..]
                .iter()
                .zip(word.chars())
                .all(|(c, w)| c.eq_ignore_ascii_case(&w))
    };
    let entity = |out: &mut String, c: char| {
        let _ = write!(out, "#{};", u32::from(c));
    };
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1).copied();
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        let after_digits = i > 0 && chars[..i].iter().all(char::is_ascii_digit);
        match c {
            ':' if quoted && next.is_none_or(|n| n == ' ') => out.push(c),
            '"' if quoted => entity(&mut out, c),
            ';' | ':' | '{' | '}' | '<' | '>' | '&' | '`' | '*' | '~' | '$' | '@' | '\\' => {
                entity(&mut out, c);
            }
            // A heading or a list item: `#`, `-` or `+` (or a run of one)
            // before a space or the end.
            '#' | '-' | '+'
                if i == 0 && {
                    let run = chars.iter().take_while(|&&r| r == c).count();
                    chars.get(run).is_none_or(|&n| n == ' ')
                } =>
            {
                entity(&mut out, c);
            }
            // A numbered list item: `1.` or `1)` before a space or the end.
            '.' | ')' if after_digits && next.is_none_or(|n| n == ' ') => entity(&mut out, c),
            '.' if ends_with(i, "www") => entity(&mut out, c),
            '_' if !(word(prev) && word(next)) => entity(&mut out, c),
            '%' if prev == Some('%') || next == Some('%') => entity(&mut out, c),
            ']' if next == Some('(') => entity(&mut out, c),
            ' ' if ends_with(i, "direction") => entity(&mut out, c),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => entity(&mut out, c),
            c => out.push(c),
        }
    }
    out
}
