//! The state diagram of a machine, laid out and drawn as SVG.
//!
//! One drawing, two callers, one source: the derive puts it into each
//! machine's rustdoc at compile time, and `docs::svg` draws the same at
//! run time. The runtime owns these files (`guard-runtime/src/docs/diagram/`);
//! `guard-macros/src/diagram/` links to each of them, as the sub-crates
//! link the licence texts, so that each crate ships them and neither
//! depends on the other. They use nothing but `core` and `alloc`. Both
//! callers describe the machine as a [`Diagram`] and call [`svg`].
//!
//! The layout is layered, top to bottom: each state sits one layer below
//! the lowest state that moves into it, with the moves that lead back up
//! (a retry, a reopen) set aside first; states are ordered within their
//! layers to cross few edges, and placed over the states they come from
//! (`layout.rs`, `rank.rs`). The drawing (`draw.rs`) is one `<svg>` element with
//! every style inline: no script, no stylesheet, no `id`, so that it can be
//! pasted into any page, and on one line, so that Markdown keeps it whole.

mod draw;
mod layout;
mod rank;

/// A machine, as the drawing needs it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Diagram<'a> {
    /// The enum's name, for the drawing's title.
    pub(crate) name: &'a str,
    /// The states, in declaration order.
    pub(crate) states: Vec<State<'a>>,
    /// The transitions, in declaration order.
    pub(crate) transitions: Vec<Arrow<'a>>,
}

/// One state.
#[derive(Debug, Clone, Default)]
pub(crate) struct State<'a> {
    /// The variant, as written.
    pub(crate) name: &'a str,
    /// The string the database holds.
    pub(crate) db: &'a str,
    /// Whether rows start here.
    pub(crate) initial: bool,
    /// What the state's in-flight declaration says, if it has one.
    pub(crate) in_flight: Option<InFlight<'a>>,
}

/// An in-flight state's lease and retries.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight<'a> {
    /// The lease, in the attribute's syntax (`30s`).
    pub(crate) lease: &'a str,
    /// How many attempts its effect gets, where it declares `retry(…)`.
    pub(crate) attempts: Option<u32>,
}

/// One transition, as drawn: an arrow from each of its sources to its
/// target.
#[derive(Debug, Clone, Default)]
pub(crate) struct Arrow<'a> {
    /// The transition's name.
    pub(crate) name: &'a str,
    /// Its guard's SQL, if it has one.
    pub(crate) guard: Option<&'a str>,
    /// The indexes of its source states, each with what the transition is
    /// to it: the follow-up of an in-flight source, or a move.
    pub(crate) sources: Vec<(usize, Role)>,
    /// The index of its target state.
    pub(crate) target: usize,
}

/// What a transition is to one state it leaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Role {
    /// A move that callers make.
    #[default]
    Move,
    /// The in-flight state's follow-up that an effect's `Verdict::done`
    /// runs.
    Done,
    /// The in-flight state's follow-up that an effect's `Verdict::failed`
    /// runs.
    Failed,
}

/// A lease of `ms` milliseconds in the attribute's own syntax: `150ms`,
/// `30s`, `5m`, `1h`, `2d`. The drawing writes it so, and so do the other
/// formats of `docs`.
pub(crate) fn lease(ms: u128) -> String {
    for (unit, scale) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(scale) {
            return format!("{}{unit}", ms / scale);
        }
    }
    format!("{ms}ms")
}

/// `text` as the drawing shows it: every character XML 1.0 cannot hold
/// (control characters, U+FFFE, U+FFFF), and DEL, written as Rust escapes
/// it, `\n` or `\u{1b}`, so that a name reads as written in its source.
/// What is measured is what is drawn.
pub(crate) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{fffe}' || c == '\u{ffff}' => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// The machine's state diagram: one `<svg>` element, on one line.
///
/// States are boxes with their name and, beneath it, their database
/// string; a dot points at the initial state, a double border marks a
/// state no transition leaves, and a dashed amber border an in-flight
/// state, whose lease and attempts are written in it. Each edge carries
/// its transition's name, with its guard in brackets; the `done` and
/// `failed` follow-ups are drawn green and red. A legend below says so.
#[must_use]
pub(crate) fn svg(diagram: &Diagram) -> String {
    draw::draw(diagram, &layout::layout(diagram))
}

#[cfg(test)]
mod tests;
