//! Mermaid `stateDiagram-v2`.

use core::fmt::Write as _;

use super::*;

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
#[must_use]
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

/// Text for a description, an edge label or a note: characters that could
/// end the statement or be read as markup become `#<code>;` entities, which
/// Mermaid decodes when it draws.
pub(super) fn mermaid_text(text: &str) -> String {
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
