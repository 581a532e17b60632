//! Graphviz DOT.

use core::fmt::Write as _;

use super::*;

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
#[must_use]
pub fn dot<T: StateMachine>() -> String {
    let machine = T::MACHINE;
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_str(machine.name()));
    out.push_str("    rankdir=LR;\n");
    out.push_str("    node [shape=box, style=rounded];\n");
    out.push_str("    \"[*]\" [shape=point, width=0.15, label=\"\"];\n");
    for state in machine.states() {
        let mut label = format!("{}\n{}", state.variant(), keep_spaces(state.db_str()));
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
        } else if let Some(since) = state.since_column() {
            match state.timeout() {
                Some(timeout) => {
                    let _ = write!(label, "\ntimeout {}\nsince {since}", lease(timeout));
                }
                None => {
                    let _ = write!(label, "\nsince {since}");
                }
            }
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
                dot_str(&keep_spaces(&super::edge_label(transition))),
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
pub(super) fn dot_str(text: &str) -> String {
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
