//! `Transition<S, P, N>`: one named move, and `apply`, the compare-and-set
//! that runs it, with what it binds (`bind.rs`), how it reads the row back
//! (`row.rs`) and the note it carries into history (`note.rs`).
//!
//! **Architecture Invariant:** one builder. The values a call binds (`P`),
//! its note (`N`), the occurrence it expects and its deadline are options
//! of the one `Transition` type, so each entry point (`apply` here,
//! `apply_many` and the claims in `batch/`) is written once, for every
//! `P` and `N`; what a type cannot take (a note without history, an
//! occurrence without a version column) is a method its impl lacks.
//!
//! **Architecture Invariant:** the winning path of `apply` is one
//! `UPDATE … WHERE key = ? AND status IN (sources)` (`apply.rs`); the
//! losing path is one fresh read. There is no read-then-write anywhere.
//!
//! **Architecture Invariant:** the body of `apply` knows neither the
//! machine nor the types of the key and the values: `CasPlan::run`
//! (`apply.rs`) takes the transition's statements and names, the values
//! erased for binding, and a closure that places a status text, and is
//! generic over the executor only. What is generic over the machine is a
//! thin wrapper, so a binary carries the compare-and-set once per
//! executor, not once per machine and bind tuple.
//!
//! **Architecture Invariant:** this folder reads the metadata, the
//! deadlines and the executors and knows nothing of what is built on it:
//! batches, claims, history, leases, effects and the stores call in, never
//! the other way round. `Note` lives here, not with history, so that the
//! compare-and-set need not depend on the module that reads notes back.

use core::fmt;
use core::time::Duration;

use crate::deadline::call::Call;
use crate::deadline::retry::DEFAULT_DEADLINE;

pub use self::bind::Binds;
use crate::StateMachine;
use crate::error::{Error, Misuse};
use crate::executor::Runner;
use crate::machine::key::KeyOf;
use crate::machine::{HasVersion, InFlightDef, TransitionDef};
use crate::outcome::Outcome;

mod apply;
pub(crate) mod available;
pub(crate) mod bind;
mod cas;
pub(crate) mod counts;
mod failure;
mod load;
pub(crate) mod note;
pub(crate) mod row;
pub(crate) mod rows;

pub(crate) use self::apply::{Class, classify, key_arguments, outcome_label};
pub(crate) use self::failure::Names;
use self::note::{Note, NoteSlot};

/// One named transition of a machine, e.g. `PayoutStatus::start()`, with
/// what a call of it carries: the values it binds (`P`), the note for its
/// history row (`N`), the occurrence it expects and its deadline.
///
/// `PayoutStatus::start()` is a `Transition<PayoutStatus>`: a small `Copy`
/// value pointing at compile-time metadata and SQL text. A transition with
/// `set(bank_ref = bind(String))` is made with its values,
/// `PayoutStatus::confirm(bank_ref)`, a [`Bound`]`<PayoutStatus,
/// (String,)>`; [`noted`](Transition::noted) adds a [`Note`], making a
/// [`Noted`](crate::Noted). Each is the same type, with the same calls:
/// [`apply`](Transition::apply), [`apply_many`](Transition::apply_many),
/// [`claim`](Transition::claim),
/// [`claim_older_than`](Transition::claim_older_than) and
/// [`claim_timed_out`](Transition::claim_timed_out). The values go into the
/// one compare-and-set statement as bound parameters, never into its text.
pub struct Transition<S: 'static, P = (), N = ()> {
    pub(crate) def: &'static TransitionDef<S>,
    pub(crate) deadline: Duration,
    pub(crate) expected: Option<i64>,
    pub(crate) params: P,
    pub(crate) note: N,
}

/// A transition with values bound per call:
/// `PayoutStatus::confirm(bank_ref)` for
/// `#[transition(confirm -> Sent, set(bank_ref = bind(String)))]`.
///
/// A [`Transition`] whose `P` holds the values, in declaration order; it
/// applies as every transition does.
pub type Bound<S, P> = Transition<S, P>;

impl<S: StateMachine> Transition<S> {
    pub(crate) const fn from_def(def: &'static TransitionDef<S>) -> Self {
        Transition {
            def,
            deadline: DEFAULT_DEADLINE,
            expected: None,
            params: (),
            note: (),
        }
    }

    /// This transition, binding `params` into its `set(column =
    /// bind(Type))` assignments.
    pub(crate) const fn bind<P>(self, params: P) -> Transition<S, P> {
        Transition {
            def: self.def,
            deadline: self.deadline,
            expected: self.expected,
            params,
            note: (),
        }
    }
}

impl<S: StateMachine, P, N> Transition<S, P, N> {
    /// The occurrence [`Transition::expecting`] set, if any.
    pub const fn expected(&self) -> Option<i64> {
        self.expected
    }

    /// The same transition, with `deadline` for its calls instead of
    /// [`DEFAULT_DEADLINE`]:
    /// `PayoutStatus::start().within(Duration::from_secs(2)).apply(&pool, id)`.
    ///
    /// A call that runs out of time ends in [`Error::Timeout`](crate::Error::Timeout), which says
    /// whether the outcome is known. A win of this transition keeps the
    /// same deadline for [`Won::finish`](crate::Won::finish). Set before or
    /// after [`noted`](Transition::noted) or
    /// [`expecting`](Transition::expecting), the same.
    pub fn within(self, deadline: Duration) -> Self {
        Transition { deadline, ..self }
    }

    /// The deadline its calls keep.
    pub const fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The transition's name, e.g. `start`.
    pub const fn name(&self) -> &'static str {
        self.def.name()
    }

    /// The state a win moves the row to.
    pub const fn target(&self) -> S {
        self.def.target()
    }

    /// The states it may start from.
    pub const fn sources(&self) -> &'static [S] {
        self.def.sources()
    }

    /// The full metadata, including the SQL text for each dialect.
    pub const fn def(&self) -> &'static TransitionDef<S> {
        self.def
    }

    /// The transition, without its values or note (with its deadline and
    /// expected occurrence).
    pub const fn transition(&self) -> Transition<S> {
        Transition {
            def: self.def,
            deadline: self.deadline,
            expected: self.expected,
            params: (),
            note: (),
        }
    }

    /// The values it binds.
    pub const fn params(&self) -> &P {
        &self.params
    }

    /// The values it binds, by value.
    pub fn into_params(self) -> P {
        self.params
    }
}

impl<S: StateMachine, P, N: NoteSlot> Transition<S, P, N> {
    /// The note the history row of its move records, if it was
    /// [`noted`](Transition::noted).
    pub fn note(&self) -> Option<&Note> {
        self.note.note_slot()
    }

    /// The note to bind: NULLs without one.
    pub(crate) fn note_or_none(&self) -> &Note {
        self.note.note_slot().unwrap_or(&Note::NONE)
    }

    /// [`Misuse::NoHistory`](crate::Misuse::NoHistory) for a noted call on a
    /// machine without a history table to record the note in (one that
    /// implements [`HasHistory`](crate::HasHistory) by hand), and
    /// [`Error::NoteDetails`](crate::Error::NoteDetails) for a note whose
    /// details are not JSON: every call that takes a note asks before it
    /// sends anything.
    pub(crate) fn recorded(&self) -> Result<(), Error> {
        match (self.note.note_slot(), S::MACHINE.history_table()) {
            (Some(_), None) => Err(Error::Misuse(Misuse::NoHistory {
                machine: S::MACHINE.name(),
            })),
            (Some(note), Some(_)) => note.checked(S::MACHINE.table(), self.def.name()),
            (None, _) => Ok(()),
        }
    }
}

impl<S: StateMachine, P: Send + Sync + 'static, N: NoteSlot> Transition<S, P, N> {
    /// Runs the compare-and-set on the row whose key is `key`.
    ///
    /// One `UPDATE … WHERE key = ? AND status IN (sources)` on the winning
    /// path. If it changed no row, a fresh `SELECT` of the status tells why:
    /// the row is already in the target ([`Outcome::AlreadyInState`]),
    /// somewhere this transition cannot start from ([`Outcome::Conflict`]),
    /// or absent ([`Outcome::NotFound`]). The values a [`Bound`] carries
    /// are bound into the `set` assignments of the same statement; the
    /// note of a [`Noted`](crate::Noted) goes into the history row of the
    /// move.
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
    /// The call keeps a deadline ([`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE),
    /// [`Transition::within`], or `.within(d)` on the [`Call`] it returns):
    /// a lock held elsewhere, or retries that do
    /// not settle, end in [`Error::Timeout`]. If time ran out while the
    /// `UPDATE` was in flight, the change may still commit without a win
    /// (`outcome_known: false`); inside a [`Tx`](crate::Tx) the transaction
    /// then refuses to commit. The same holds when the caller drops the
    /// future mid-statement: the `UPDATE` may commit, and no `Won` comes
    /// out. A row moved into an in-flight state that way is taken over by
    /// [`recover`](crate::recover) once its lease runs out; any other
    /// effect is lost unless the caller treats such an error, or a later
    /// `AlreadyInState`, as an effect possibly owed.
    ///
    /// The winning path is one statement, except on MySQL into an
    /// in-flight state (or on a versioned table with a trigger), where the
    /// same connection reads the lease and version back after the move.
    /// If that read fails, the move stands without its win: on a pool the
    /// error is [`Error::Unreported`], whose outcome is unknown, and inside
    /// a transaction the transaction can no longer commit. With history or
    /// `emit` on SQLite and MySQL, the inserts and the move run in one
    /// transaction of their own (a savepoint in the caller's): a failure
    /// before its `COMMIT` leaves nothing behind, and a `COMMIT` whose
    /// answer is lost is outcome-unknown.
    ///
    /// ```
    /// # use stateguard::{Outcome, StateMachine};
    /// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// # #[state_machine(table = "payouts", column = "status", key = "id")]
    /// # enum PayoutStatus {
    /// #     #[state(initial)]
    /// #     #[transition(start -> Sending)]
    /// #     Pending,
    /// #     Sending,
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
    /// #     .execute(&pool).await?;
    /// # sqlx::query("INSERT INTO payouts VALUES (1, 'pending'), (2, 'pending'), (3, 'pending')")
    /// #     .execute(&pool).await?;
    /// // The same job delivered twice: the first attempt wins, the replay learns
    /// // the row's state.
    /// let first = PayoutStatus::start().apply(&pool, 1_i64).await?;
    /// assert!(first.is_applied()); // the one attempt that may call the bank
    /// let replay = PayoutStatus::start().apply(&pool, 1_i64).await?;
    /// assert_eq!(replay, Outcome::AlreadyInState(PayoutStatus::Sending));
    /// # Ok(()) }
    /// ```
    pub fn apply<'a, E, K>(self, mut executor: E, key: K) -> Call<'a, Outcome<S, K, E::Commit>>
    where
        E: Runner<Database: Binds<P>> + 'a,
        K: KeyOf<S, E::Database> + 'a,
    {
        self.call(move |this| async move {
            this.recorded()?;
            let values = bind::values(&this.params);
            this.transition()
                .apply_with(&mut executor, key, &values, this.note_or_none())
                .await
        })
    }

    /// The call `run` makes of this transition: a [`Call`] that starts
    /// with the transition's deadline, and hands `run` the transition with
    /// the deadline the call ends up keeping (a `.within(d)` on the call
    /// sets both).
    pub(crate) fn call<'a, T, F, Fut>(self, run: F) -> Call<'a, T>
    where
        Self: Send + 'a,
        F: FnOnce(Self) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, Error>> + Send + 'a,
    {
        let deadline = self.deadline;
        Call::new(move |deadline| run(self.within(deadline))).within(deadline)
    }
}

impl<S: HasVersion, P, N> Transition<S, P, N> {
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
    pub fn expecting(self, occurrence: i64) -> Self {
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

impl<S: StateMachine, P: Clone, N: Clone> Clone for Transition<S, P, N> {
    fn clone(&self) -> Self {
        Transition {
            def: self.def,
            deadline: self.deadline,
            expected: self.expected,
            params: self.params.clone(),
            note: self.note.clone(),
        }
    }
}

impl<S: StateMachine, P: Copy, N: Copy> Copy for Transition<S, P, N> {}

impl<S: StateMachine, P: PartialEq, N: PartialEq> PartialEq for Transition<S, P, N> {
    fn eq(&self, other: &Self) -> bool {
        (core::ptr::eq(self.def, other.def) || self.def.name() == other.def.name())
            && self.deadline == other.deadline
            && self.expected == other.expected
            && self.params == other.params
            && self.note == other.note
    }
}

impl<S: StateMachine, P: Eq, N: Eq> Eq for Transition<S, P, N> {}

impl<S: StateMachine, P: fmt::Debug, N: NoteSlot> fmt::Debug for Transition<S, P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Transition");
        out.field("name", &self.name())
            .field("sources", &self.sources())
            .field("target", &self.target());
        // A transition without values shows none.
        if core::mem::size_of::<P>() != 0 {
            out.field("params", &self.params);
        }
        if let Some(note) = self.note() {
            out.field("note", note);
        }
        out.finish()
    }
}

impl<S: StateMachine, P, N> fmt::Display for Transition<S, P, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
