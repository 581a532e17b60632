//! The machine's state diagram as SVG: the drawing the derive puts into
//! the machine's rustdoc, drawn from its metadata.

use super::diagram;
use super::lease;
use crate::machine::StateMachine;

/// The state diagram of `T`, as one `<svg>` element on one line: the
/// drawing the derive puts into `T`'s rustdoc (above its transition
/// constructors), drawn from [`StateMachine::MACHINE`].
///
/// Each state is a box with its name and, beneath it, its database
/// string; a dot points at the initial state, a double border marks a
/// state that no transition leaves, and a dashed border an in-flight
/// state, whose lease and attempts are written in it. Each edge carries
/// its transition's name, with its guard in brackets; an in-flight state's
/// `done` and `failed` follow-ups are drawn green and red. A legend under
/// the drawing says so. The drawing has no script, stylesheet or `id`:
/// every style is inline, and every name is escaped, so it can be put
/// into any HTML page as it is.
///
/// ```
/// use stateguard::StateMachine;
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "doors", column = "status", key = "id", version = "version")]
/// enum Door {
///     #[state(initial)]
///     #[transition(open -> Open)]
///     Closed,
///     #[transition(close -> Closed)]
///     Open,
/// }
///
/// let drawn = stateguard::docs::svg::<Door>();
/// assert!(drawn.starts_with("<svg "));
/// assert!(drawn.contains(">Closed</text>") && drawn.contains(">open</text>"));
/// ```
#[must_use]
pub fn svg<T: StateMachine>() -> String {
    let machine = T::MACHINE;
    let states = machine.states();
    let leases: Vec<Option<String>> = states
        .iter()
        .map(|s| s.in_flight().map(|f| lease(f.lease())))
        .collect();
    // What transition `name` is to its source `state`: a follow-up of it,
    // if it is in flight, or a move.
    let role = |name: &str, state: T| match states[super::index_of(states, state)].in_flight() {
        Some(f) if f.done().name() == name => diagram::Role::Done,
        Some(f) if f.failed().is_some_and(|failed| failed.name() == name) => diagram::Role::Failed,
        _ => diagram::Role::Move,
    };
    let index = |state: T| super::index_of(states, state);
    let drawn = diagram::Diagram {
        name: core::any::type_name::<T>()
            .rsplit("::")
            .next()
            .unwrap_or_default(),
        states: states
            .iter()
            .enumerate()
            .map(|(i, s)| diagram::State {
                name: s.variant(),
                db: s.db_str(),
                initial: s.is_initial(),
                in_flight: s.in_flight().map(|f| diagram::InFlight {
                    lease: leases[i].as_deref().unwrap_or_default(),
                    attempts: f.retry().map(|r| r.max_attempts()),
                }),
            })
            .collect(),
        transitions: machine
            .transitions()
            .iter()
            .map(|t| diagram::Arrow {
                name: t.name(),
                guard: t.guard(),
                sources: t
                    .sources()
                    .iter()
                    .map(|&s| (index(s), role(t.name(), s)))
                    .collect(),
                target: index(t.target()),
            })
            .collect(),
    };
    diagram::svg(&drawn)
}
