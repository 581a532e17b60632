//! `Transition<S>`: one named move, and `apply`, the compare-and-set that
//! runs it, with what it binds (`bind.rs`), how it reads the row back
//! (`row.rs`) and the note it carries into history (`note.rs`).
//!
//! **Architecture Invariant:** the winning path of `apply` is one
//! `UPDATE … WHERE key = ? AND status IN (sources)` (`apply.rs`); the
//! losing path is one fresh read. There is no read-then-write anywhere.
//!
//! **Architecture Invariant:** this folder reads the metadata, the
//! deadlines and the executors and knows nothing of what is built on it:
//! batches, claims, history, leases, effects and the stores call in, never
//! the other way round. `Note` lives here, not with history, so that the
//! compare-and-set need not depend on the module that reads notes back.

use core::fmt;
use core::time::Duration;

use crate::deadline::retry::DEFAULT_DEADLINE;

pub use self::bind::Params;
use crate::StateMachine;
use crate::error::Error;
use crate::executor::Executor;
use crate::machine::key::RowKey;
use crate::machine::{HasVersion, InFlightDef, TransitionDef};
use crate::outcome::Outcome;

mod apply;
pub(crate) mod bind;
mod bound;
mod failure;
mod load;
pub(crate) mod note;
pub(crate) mod row;

pub(crate) use self::apply::{key_arguments, outcome_label};
pub use self::bound::Bound;
use self::note::Note;

/// One named transition of a machine, e.g. `PayoutStatus::start()`.
///
/// A small `Copy` value pointing at compile-time metadata and SQL text.
pub struct Transition<S: 'static> {
    def: &'static TransitionDef<S>,
    deadline: Duration,
    expected: Option<i64>,
}

impl<S: StateMachine> Transition<S> {
    pub(crate) const fn from_def(def: &'static TransitionDef<S>) -> Self {
        Transition {
            def,
            deadline: DEFAULT_DEADLINE,
            expected: None,
        }
    }

    /// The occurrence [`Transition::expecting`] set, if any.
    pub const fn expected(self) -> Option<i64> {
        self.expected
    }

    /// The same transition, with `deadline` for [`Transition::apply`]
    /// instead of [`DEFAULT_DEADLINE`]:
    /// `PayoutStatus::start().within(Duration::from_secs(2)).apply(&pool, id)`.
    ///
    /// A call that runs out of time ends in [`Error::Timeout`](crate::Error::Timeout), which says
    /// whether the outcome is known. A win of this transition keeps the
    /// same deadline for [`Won::finish`](crate::Won::finish).
    pub const fn within(self, deadline: Duration) -> Self {
        Transition { deadline, ..self }
    }

    /// The deadline [`Transition::apply`] keeps.
    pub const fn deadline(self) -> Duration {
        self.deadline
    }

    /// The transition's name, e.g. `start`.
    pub const fn name(self) -> &'static str {
        self.def.name()
    }

    /// The state a win moves the row to.
    pub const fn target(self) -> S {
        self.def.target()
    }

    /// The states it may start from.
    pub const fn sources(self) -> &'static [S] {
        self.def.sources()
    }

    /// The full metadata, including the SQL text for each dialect.
    pub const fn def(self) -> &'static TransitionDef<S> {
        self.def
    }

    /// Runs the compare-and-set on the row whose key is `key`.
    ///
    /// One `UPDATE … WHERE key = ? AND status IN (sources)` on the winning
    /// path. If it changed no row, a fresh `SELECT` of the status tells why:
    /// the row is already in the target ([`Outcome::AlreadyInState`]),
    /// somewhere this transition cannot start from ([`Outcome::Conflict`]),
    /// or absent ([`Outcome::NotFound`]).
    ///
    /// `executor` is a `&Pool`, a `&mut` connection, or a `&mut`
    /// [`Tx`](crate::Tx) or [`Savepoint`](crate::Savepoint).
    /// On a pool or a connection outside a transaction, serialization
    /// failures and deadlocks are retried with jittered backoff, and a win
    /// is [`Committed`](crate::Committed). Inside a transaction they end in
    /// [`Error::RetryTransaction`], and a win is
    /// [`Uncommitted`](crate::Uncommitted) until the transaction commits
    /// through [`Tx::commit`](crate::Tx::commit).
    ///
    /// The call keeps a deadline ([`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// [`Transition::within`]): a lock held elsewhere, or retries that do
    /// not settle, end in [`Error::Timeout`]. If time ran out while the
    /// `UPDATE` was in flight, the change may still commit without a win
    /// (`outcome_known: false`); inside a [`Tx`](crate::Tx) the transaction
    /// then refuses to commit. The same holds when the caller drops the
    /// future mid-statement: the `UPDATE` may commit, and no `Won` comes
    /// out. A row moved into an in-flight state that way is taken over by
    /// [`recover`](crate::recover) once its lease runs out; any other
    /// effect is lost unless the caller treats such an error, or a later
    /// `AlreadyInState`, as an effect possibly owed.
    pub async fn apply<E, K>(self, executor: E, key: K) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
    {
        self.apply_with(executor, key, &(), &Note::NONE).await
    }
}

impl<S: HasVersion> Transition<S> {
    /// The same transition, applied only if the row is still at
    /// `occurrence`, the value of the machine's version column that the
    /// caller saw ([`Won::occurrence`](crate::Won::occurrence), [`Current::occurrence`](crate::Current::occurrence) from
    /// [`Machine::load`](crate::meta::Machine::load)):
    /// `PayoutStatus::cancel().expecting(seen).apply(&pool, id)`.
    ///
    /// A row that moved on since is [`Outcome::Stale`](crate::Outcome::Stale), with its state and
    /// occurrence now; the compare-and-set is still one statement. This is
    /// how an operator acting on a page loaded earlier cannot move a row
    /// that changed meanwhile, and how a late replay in a machine with a
    /// cycle (`held → active → held`) is refused instead of winning the
    /// next pass. Only a machine with a `version` column ([`HasVersion`])
    /// has an occurrence to expect: elsewhere the call does not compile.
    pub const fn expecting(self, occurrence: i64) -> Self {
        Transition {
            expected: Some(occurrence),
            ..self
        }
    }
}

impl<S: StateMachine> TransitionDef<S> {
    /// This transition as a value that can be applied.
    pub const fn transition(&'static self) -> Transition<S> {
        Transition::from_def(self)
    }
}

impl<S: StateMachine> InFlightDef<S> {
    /// The transition that ends this state when the effect succeeded.
    pub const fn done(&self) -> Transition<S> {
        Transition::from_def(self.done)
    }

    /// The transition that ends this state when the effect failed for good.
    pub const fn failed(&self) -> Option<Transition<S>> {
        match self.failed {
            Some(def) => Some(Transition::from_def(def)),
            None => None,
        }
    }
}

impl<S: StateMachine> Clone for Transition<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: StateMachine> Copy for Transition<S> {}

impl<S: StateMachine> PartialEq for Transition<S> {
    fn eq(&self, other: &Self) -> bool {
        (core::ptr::eq(self.def, other.def) || self.def.name() == other.def.name())
            && self.deadline == other.deadline
            && self.expected == other.expected
    }
}

impl<S: StateMachine> Eq for Transition<S> {}

impl<S: StateMachine> fmt::Debug for Transition<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transition")
            .field("name", &self.name())
            .field("sources", &self.sources())
            .field("target", &self.target())
            .finish()
    }
}

impl<S: StateMachine> fmt::Display for Transition<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
