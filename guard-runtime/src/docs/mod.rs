//! Transition docs generated from a machine: an SVG drawing, Mermaid,
//! Graphviz DOT and Markdown.
//!
//! The derive also puts the drawing ([`svg`]) into each machine's rustdoc,
//! above its transition constructors, so that `cargo doc` and docs.rs show
//! the machine with no script and nothing to install.
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
//!     state "pending" as Pending
//!     state "sending" as Sending
//!     state "sent" as Sent
//!     state "failed" as Failed
//!     state "cancelled" as Cancelled
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

mod checked_in;
/// The drawing's layout and SVG, which the derive shares.
mod diagram;
mod diff;
mod dot;
mod markdown;
pub(crate) mod mermaid;
mod svg;

pub use self::checked_in::{
    assert_fresh, assert_fresh_diagram, assert_fresh_file, assert_fresh_section,
};
pub use self::dot::dot;
pub use self::markdown::{history_markdown, markdown};
pub use self::mermaid::{mermaid, mermaid_block};
pub use self::svg::svg;

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
    diagram::lease(lease.as_millis())
}

/// An edge's label: the transition's name, and its guard in brackets, as
/// UML writes one (`approve [amount_cents <= 100000]`).
/// `line` with every space that HTML and SVG would drop or merge, one at
/// either end or after another space, made a no-break space (U+00A0): the
/// closest form that a browser draws as wide as written.
fn keep_spaces(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut prev = None;
    while let Some(c) = chars.next() {
        let dropped = c == ' ' && (prev.is_none_or(|p| p == ' ') || chars.peek().is_none());
        out.push(if dropped { '\u{a0}' } else { c });
        prev = Some(c);
    }
    out
}

fn edge_label<S: crate::StateMachine>(transition: &crate::machine::TransitionDef<S>) -> String {
    match transition.guard() {
        Some(guard) => format!("{} [{guard}]", transition.name()),
        None => transition.name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::checked_in::section;
    use super::diff::diff;
    use super::dot::dot_str;
    use super::markdown::code;
    use super::mermaid::{mermaid_quoted, mermaid_text};
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
    fn a_quoted_description_keeps_a_colon_before_a_space() {
        assert_eq!(mermaid_quoted("on-hold: customer"), "on-hold: customer");
        assert_eq!(mermaid_quoted("done:"), "done:");
        assert_eq!(mermaid_quoted("a:b x:::y"), "a#58;b x#58;#58;#58;y");
        assert_eq!(mermaid_quoted("say \"hi\": ok"), "say #34;hi#34;: ok");
        // Outside quotes, every `:` is an entity.
        assert_eq!(mermaid_text("on-hold: customer"), "on-hold#58; customer");
    }

    #[test]
    fn mermaid_text_keeps_what_mermaid_draws_as_written() {
        assert_eq!(mermaid_text("pending"), "pending");
        assert_eq!(
            mermaid_text("on_hold (A/B) 50% #1 \"x\""),
            "on_hold (A/B) 50% #1 \"x\""
        );
        // Statement breakers.
        assert_eq!(mermaid_text("a;b:c"), "a#59;b#58;c");
        assert_eq!(mermaid_text("Direction tb"), "Direction#32;tb");
        assert_eq!(mermaid_text("100%%{x}"), "100#37;#37;#123;x#125;");
        // HTML and Markdown.
        assert_eq!(mermaid_text("<b>&"), "#60;b#62;#38;");
        assert_eq!(
            mermaid_text("**b** _i_ a_b $$x$$"),
            "#42;#42;b#42;#42; #95;i#95; a_b #36;#36;x#36;#36;"
        );
        assert_eq!(mermaid_text("#1 closed"), "#1 closed");
        assert_eq!(mermaid_text("# h"), "#35; h");
        assert_eq!(mermaid_text("--- -5 +"), "#45;-- -5 +");
        assert_eq!(mermaid_text("12. x 12.5"), "12#46; x 12.5");
        assert_eq!(mermaid_text("1.5x"), "1.5x");
        assert_eq!(mermaid_text("[a](b) www.x"), "[a#93;(b) www#46;x");
        // White space HTML would drop.
        assert_eq!(mermaid_text(" a  b "), "#160;a #160;b#160;");
        assert_eq!(mermaid_text("a\nb\u{2003}c"), "a b#8195;c");
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
