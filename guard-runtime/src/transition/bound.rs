//! `Bound`: a transition with the values it binds per call.

use core::time::Duration;

use crate::transition::note::Note;

use super::Transition;
use crate::StateMachine;
use crate::error::Error;
use crate::executor::Executor;
use crate::machine::HasVersion;
use crate::machine::key::RowKey;
use crate::outcome::Outcome;
use crate::transition::bind::Params;

/// A transition with values bound per call:
/// `PayoutStatus::confirm(bank_ref)` for
/// `#[transition(confirm -> Sent, set(bank_ref = bind(String)))]`.
///
/// It applies as [`Transition`] does; the values go into the one
/// compare-and-set statement as bound parameters, never into its text.
#[derive(Debug, Clone)]
pub struct Bound<S: StateMachine, P> {
    transition: Transition<S>,
    params: P,
}

impl<S: StateMachine, P> Bound<S, P> {
    pub(crate) const fn new(transition: Transition<S>, params: P) -> Self {
        Bound { transition, params }
    }

    /// The transition, without its values.
    pub const fn transition(&self) -> Transition<S> {
        self.transition
    }

    /// The values it binds.
    pub const fn params(&self) -> &P {
        &self.params
    }

    /// The values it binds, by value.
    pub fn into_params(self) -> P {
        self.params
    }

    /// See [`Transition::within`].
    pub fn within(self, deadline: Duration) -> Self {
        Bound {
            transition: self.transition.within(deadline),
            ..self
        }
    }

    /// See [`Transition::apply`]; the values are bound into the `set`
    /// assignments of the same statement.
    pub async fn apply<E, K>(self, executor: E, key: K) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        self.transition
            .apply_with(executor, key, &self.params, &Note::NONE)
            .await
    }
}

impl<S: HasVersion, P> Bound<S, P> {
    /// See [`Transition::expecting`].
    pub fn expecting(self, occurrence: i64) -> Self {
        Bound {
            transition: self.transition.expecting(occurrence),
            ..self
        }
    }
}
