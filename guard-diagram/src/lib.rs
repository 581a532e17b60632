//! The state diagram of a stateguard machine, laid out and drawn as SVG.
//!
//! One drawing, two callers: the derive (`stateguard-macros`) puts it into
//! each machine's rustdoc at compile time, and the runtime
//! (`stateguard::docs::svg`) draws the same from the machine's metadata.
//! Both describe the machine as a [`Machine`] and call [`svg`].
//!
//! The layout is layered, top to bottom: each state sits one layer below
//! the lowest state that moves into it, with the moves that lead back up
//! (a retry, a reopen) set aside first; states are ordered within their
//! layers to cross few edges, and placed over the states they come from
//! (`layout.rs`). The drawing (`draw.rs`) is one `<svg>` element with
//! every style inline: no script, no stylesheet, no `id`, so that it can be
//! pasted into any page, and on one line, so that Markdown keeps it whole.
//!
//! Depend on `stateguard`; this crate's API follows the derive's needs.

mod draw;
mod layout;

/// A machine, as the diagram needs it.
#[derive(Debug, Clone, Default)]
pub struct Machine<'a> {
    /// The enum's name, for the drawing's title.
    pub name: &'a str,
    /// The states, in declaration order.
    pub states: Vec<State<'a>>,
    /// The transitions, in declaration order.
    pub transitions: Vec<Transition<'a>>,
}

/// One state.
#[derive(Debug, Clone, Default)]
pub struct State<'a> {
    /// The variant, as written.
    pub name: &'a str,
    /// The string the database holds.
    pub db: &'a str,
    /// Whether rows start here.
    pub initial: bool,
    /// What the state's in-flight declaration says, if it has one.
    pub in_flight: Option<InFlight<'a>>,
}

/// An in-flight state's lease and retries.
#[derive(Debug, Clone, Default)]
pub struct InFlight<'a> {
    /// The lease, in the attribute's syntax (`30s`).
    pub lease: &'a str,
    /// How many attempts its effect gets, where it declares `retry(…)`.
    pub attempts: Option<u32>,
}

/// One transition: an edge from each of its sources to its target.
#[derive(Debug, Clone, Default)]
pub struct Transition<'a> {
    /// The transition's name.
    pub name: &'a str,
    /// Its guard's SQL, if it has one.
    pub guard: Option<&'a str>,
    /// The indexes of its source states.
    pub sources: Vec<usize>,
    /// The index of its target state.
    pub target: usize,
    /// Whether it is an in-flight state's follow-up.
    pub role: Role,
}

/// What a transition is to the in-flight states it leaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    /// A move that callers make.
    #[default]
    Move,
    /// The follow-up that an effect's `Verdict::done` runs.
    Done,
    /// The follow-up that an effect's `Verdict::failed` runs.
    Failed,
}

/// The machine's state diagram: one `<svg>` element, on one line.
///
/// States are boxes with their name and, beneath it, their database
/// string; a dot points at the initial state, a double border marks a
/// state no transition leaves, and a dashed amber border an in-flight
/// state, whose lease and attempts are written in it. Each edge carries
/// its transition's name, with its guard in brackets; the `done` and
/// `failed` follow-ups are drawn green and red. A legend below says so.
///
/// ```
/// use stateguard_diagram::{Machine, State, Transition, svg};
///
/// let machine = Machine {
///     name: "Door",
///     states: vec![
///         State { name: "Closed", db: "closed", initial: true, ..State::default() },
///         State { name: "Open", db: "open", ..State::default() },
///     ],
///     transitions: vec![
///         Transition { name: "open", sources: vec![0], target: 1, ..Transition::default() },
///         Transition { name: "close", sources: vec![1], target: 0, ..Transition::default() },
///     ],
/// };
/// let drawn = svg(&machine);
/// assert!(drawn.starts_with("<svg "));
/// assert!(drawn.contains(">Closed</text>") && drawn.contains(">close</text>"));
/// assert!(!drawn.contains('\n'));
/// ```
#[must_use]
pub fn svg(machine: &Machine) -> String {
    draw::draw(machine, &layout::layout(machine))
}

#[cfg(test)]
mod tests;
