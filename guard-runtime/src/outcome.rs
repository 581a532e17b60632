use crate::{StateMachine, Transition};

/// What one attempt at a transition found.
///
/// Exactly one of any number of concurrent or replayed attempts gets
/// [`Outcome::Applied`]; only that one may run the side effect.
#[must_use = "only `Outcome::Applied` may run the side effect; match on the outcome"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<S: StateMachine> {
    /// This attempt changed the row. It holds the [`Won`] token.
    Applied(Won<S>),
    /// The row already is in the target state: a replay, or another attempt
    /// won. Nothing to do.
    AlreadyInState(S),
    /// The row is in a state this transition cannot start from.
    Conflict {
        /// The state the row is in.
        current: S,
    },
    /// No row has this key.
    NotFound,
}

impl<S: StateMachine> Outcome<S> {
    /// The winning token, if this attempt changed the row.
    pub fn won(self) -> Option<Won<S>> {
        match self {
            Outcome::Applied(won) => Some(won),
            _ => None,
        }
    }

    /// True for [`Outcome::Applied`].
    pub fn is_applied(&self) -> bool {
        matches!(self, Outcome::Applied(_))
    }

    /// The state the row is in after the attempt, if the row exists.
    pub fn state(&self) -> Option<S> {
        match *self {
            Outcome::Applied(won) => Some(won.state()),
            Outcome::AlreadyInState(state) | Outcome::Conflict { current: state } => Some(state),
            Outcome::NotFound => None,
        }
    }
}

/// Proof that this attempt, and no other, moved the row.
///
/// Only [`Transition::apply`] creates one, and only for the attempt whose
/// compare-and-set changed the row.
#[must_use = "the winning attempt is the one that must run the side effect"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Won<S: StateMachine> {
    transition: Transition<S>,
}

impl<S: StateMachine> Won<S> {
    pub(crate) fn new(transition: Transition<S>) -> Self {
        Won { transition }
    }

    /// The state the row is in now: the transition's target.
    pub fn state(&self) -> S {
        self.transition.target()
    }

    /// The transition that won.
    pub fn transition(&self) -> Transition<S> {
        self.transition
    }
}
