//! `Machine::available`: the transitions a row can take now, with their
//! guards evaluated against it, in one `SELECT`.

use crate::StateMachine;
use crate::dialect::Column;
use crate::error::Error;
use crate::executor::Runner;
use crate::machine::key::KeyOf;
use crate::machine::{Machine, TransitionDef};
use crate::outcome::Current;

/// What [`Machine::available`] says of one transition's guard, for the
/// row as it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardNow {
    /// The transition has no guard.
    Unguarded,
    /// The guard passes.
    Passes,
    /// The guard does not pass (a NULL condition counts as not passing,
    /// as in the compare-and-set's `WHERE`).
    Fails,
    /// The guard reads values the call binds (`guard("… :name", name =
    /// bind(T))`): it can only be told with them, by the move itself.
    NeedsValues,
}

impl GuardNow {
    /// Whether the transition may move the row now as far as its guard
    /// goes: `Some(true)` for no guard or one that passes, `Some(false)`
    /// for one that fails, `None` for one that needs the call's values.
    pub fn passes(self) -> Option<bool> {
        match self {
            GuardNow::Unguarded | GuardNow::Passes => Some(true),
            GuardNow::Fails => Some(false),
            GuardNow::NeedsValues => None,
        }
    }
}

/// One transition whose sources include the row's state.
#[derive(Debug, Clone, Copy)]
pub struct Choice<S: 'static> {
    transition: &'static TransitionDef<S>,
    guard: GuardNow,
}

impl<S: StateMachine> Choice<S> {
    /// The transition, e.g. `start`.
    pub fn name(&self) -> &'static str {
        self.transition.name()
    }

    /// The state it moves the row to.
    pub fn target(&self) -> S {
        self.transition.target()
    }

    /// Its metadata: sources, `set` columns, guard text, statements.
    pub fn transition(&self) -> &'static TransitionDef<S> {
        self.transition
    }

    /// What its guard says of the row now.
    pub fn guard(&self) -> GuardNow {
        self.guard
    }

    /// Whether it may move the row now: `guard().passes() == Some(true)`.
    pub fn allowed(&self) -> bool {
        self.guard.passes() == Some(true)
    }
}

/// A row's state and occurrence, and each transition its state allows,
/// with its guard told against the row: what
/// [`Machine::available`] read.
#[derive(Debug, Clone)]
pub struct Available<S: 'static> {
    current: Current<S>,
    choices: Vec<Choice<S>>,
    attempts: Option<i64>,
    next_in: Option<i64>,
    last_error: Option<String>,
}

impl<S: StateMachine> Available<S> {
    /// The row's state and occurrence, as read.
    pub fn current(&self) -> Current<S> {
        self.current
    }

    /// The state the row was in.
    pub fn state(&self) -> S {
        self.current.state()
    }

    /// The row's occurrence: pass it to
    /// [`Transition::expecting`](crate::Transition::expecting) so that a
    /// move chosen from this answer applies only to the row as it was read.
    pub fn occurrence(&self) -> i64 {
        self.current.occurrence()
    }

    /// Every transition whose sources include the row's state, in
    /// declaration order, allowed or not.
    pub fn choices(&self) -> &[Choice<S>] {
        &self.choices
    }

    /// The names of the transitions that may move the row now (no guard,
    /// or one that passes), in declaration order.
    pub fn allowed(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.choices
            .iter()
            .filter(|c| c.allowed())
            .map(Choice::name)
    }

    /// In an in-flight state that counts attempts (`retry(…)`), how many
    /// times the row's effect was started there; `None` elsewhere.
    pub fn attempts(&self) -> Option<i64> {
        self.attempts
    }

    /// In an in-flight state that counts attempts, how long until the
    /// row's next attempt is due, by the database's clock: zero when it
    /// is due already; `None` where no next attempt is set (the effect has
    /// not asked to be tried again) or the state counts none.
    pub fn next_attempt_in(&self) -> Option<core::time::Duration> {
        let ms = self.next_in?;
        Some(core::time::Duration::from_millis(
            u64::try_from(ms).unwrap_or(0),
        ))
    }

    /// In an in-flight state that keeps it (`retry(…, last_error =
    /// "…")`), the reason the row's last retry of this occurrence gave
    /// ([`Retry::because`](crate::Retry::because)); `None` where it gave
    /// none, no retry was asked for yet, or the state keeps no reason.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The choice named `name`, if the row's state allows it at all.
    pub fn choice(&self, name: &str) -> Option<&Choice<S>> {
        self.choices.iter().find(|c| c.name() == name)
    }
}

impl<S: StateMachine> Machine<S> {
    /// The transitions the row whose key is `key` can take now: its state
    /// and occurrence, and for each transition whose sources include that
    /// state whether its guard passes against the row, or `None` if there
    /// is no such row. One `SELECT`: the buttons of an admin page.
    ///
    /// It is a read: by the time a button is pressed, the row may have
    /// moved. Apply the chosen transition with
    /// [`expecting`](crate::Transition::expecting)`(available.occurrence())`,
    /// and a row that moved in between is [`Outcome::Stale`](crate::Outcome::Stale)
    /// instead of moved from a state the page did not show. A guard that
    /// binds values per call is [`GuardNow::NeedsValues`]: the move itself
    /// tells.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `PayoutStatus::available(&pool, id).within(d)` ([`Call`](crate::Call));
    /// cut off, [`Error::Timeout`] (`available`, outcome known: it only
    /// reads).
    pub fn available<'a, E, K>(
        &'static self,
        executor: E,
        key: K,
    ) -> crate::Call<'a, Option<Available<S>>>
    where
        E: Runner + 'a,
        K: KeyOf<S, E::Database> + 'a,
    {
        self.read_row(
            executor,
            key,
            self.available_sql(),
            "available",
            |row, current| {
                let mask = row
                    .int(Column::Meets)
                    .map_err(|source| Error::database(self.table(), "available", source))?;
                let choices = self
                    .transitions()
                    .iter()
                    .filter(|t| t.sources().contains(&current.state()))
                    .map(|transition| {
                        let guard = match (transition.guard(), transition.available_bit()) {
                            (None, _) => GuardNow::Unguarded,
                            (Some(_), None) => GuardNow::NeedsValues,
                            (Some(_), Some(bit)) if mask & (1_i64 << bit) != 0 => GuardNow::Passes,
                            (Some(_), Some(_)) => GuardNow::Fails,
                        };
                        Choice { transition, guard }
                    })
                    .collect();
                let error = |source| Error::database(self.table(), "available", source);
                let attempts = row.int_if(Column::Attempt).map_err(error)?;
                let next_in = row.int_if(Column::NextIn).map_err(error)?;
                let last_error = row.text_if(Column::Reason).map_err(error)?;
                Ok(Available {
                    current,
                    choices,
                    attempts,
                    next_in,
                    last_error,
                })
            },
        )
    }
}
