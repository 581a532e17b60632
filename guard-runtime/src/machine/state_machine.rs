//! The `StateMachine` trait a derived enum implements, and the error a
//! status string that is not one of its states makes.

use super::Machine;
use core::fmt::Debug;

/// An enum whose variants are the states of a row, with the transitions
/// between them.
///
/// Implemented by `#[derive(StateMachine)]`; see the crate documentation for
/// the attributes. Implementing it by hand is not supported: the SQL text in
/// the metadata is generated and validated by the derive.
pub trait StateMachine: Copy + Eq + Debug + Send + Sync + 'static {
    /// The table, columns, states and transitions of this machine.
    const MACHINE: &'static Machine<Self>;

    /// How many columns the key has ([`shape::One`](crate::machine::key::shape::One)
    /// for `key = "id"`, [`shape::Two`](crate::machine::key::shape::Two) for
    /// `key = "tenant_id, id"`, …): what [`RowKey`](crate::RowKey) a key
    /// must be.
    type KeyShape: crate::machine::key::KeyShape;

    /// The string stored in the status column for this state.
    fn as_str(self) -> &'static str;

    /// The state stored as `value` in the status column, if there is one.
    fn from_db_str(value: &str) -> Option<Self>;

    /// Parses a status string, or says which string was not a state.
    fn parse_db_str(value: &str) -> Result<Self, UnknownState> {
        Self::from_db_str(value).ok_or_else(|| UnknownState::new::<Self>(value))
    }

    /// The history of the row whose key is `key`, oldest first:
    /// `PayoutStatus::history(&pool, 42)`, the same as
    /// [`Machine::history`](crate::meta::Machine::history) on
    /// [`Self::MACHINE`], and with the same deadline:
    /// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `PayoutStatus::history(&pool, 42).within(d)`.
    fn history<'a, E, K>(executor: E, key: K) -> crate::Call<'a, Vec<crate::HistoryRow<Self>>>
    where
        E: crate::Runner + 'a,
        K: crate::KeyOf<Self, E::Database> + 'a,
    {
        Self::MACHINE.history(executor, key)
    }

    /// The transitions the row whose key is `key` can take now, with its
    /// guards told against the row: `PayoutStatus::available(&pool, 42)`,
    /// the same as [`Machine::available`](crate::meta::Machine::available)
    /// on [`Self::MACHINE`], with the same deadline.
    fn available<'a, E, K>(executor: E, key: K) -> crate::Call<'a, Option<crate::Available<Self>>>
    where
        E: crate::Runner + 'a,
        K: crate::KeyOf<Self, E::Database> + 'a,
    {
        Self::MACHINE.available(executor, key)
    }

    /// Every way the database's schema does not fit this machine, read
    /// from its catalog: `PayoutStatus::verify(&pool)`, the same as
    /// [`Machine::verify`](crate::meta::Machine::verify) on
    /// [`Self::MACHINE`], with the same deadline.
    fn verify<DB: crate::Backend>(
        pool: &sqlx::Pool<DB>,
    ) -> crate::Call<'_, Vec<crate::SchemaProblem>> {
        Self::MACHINE.verify(pool)
    }
}

/// A machine declared with `version = "…"`, whose rows carry an
/// occurrence a call can expect: the derive implements it for such
/// machines only, so that [`Transition::expecting`](crate::Transition::expecting)
/// on a machine without a version column does not compile (rather than
/// fail at run time).
///
/// ```compile_fail
/// use stateguard::StateMachine;
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(cancel -> Cancelled)]
///     Pending,
///     Cancelled,
/// }
///
/// let _ = PayoutStatus::cancel().expecting(3); // no version column
/// ```
///
/// Implemented by hand on a machine without one, it lets an expecting
/// call compile, and the call is refused with
/// [`Misuse::NoVersionColumn`](crate::Misuse::NoVersionColumn).
pub trait HasVersion: StateMachine {}

/// A status string that is not a state of the machine.
///
/// Returned by `FromStr` on a derived enum, and inside `Error::UnknownState`
/// when a row holds such a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a state of {machine} (column `{column}` of table `{table}`)")]
pub struct UnknownState {
    machine: &'static str,
    table: &'static str,
    column: &'static str,
    value: String,
}

impl UnknownState {
    pub(crate) fn new<S: StateMachine>(value: &str) -> Self {
        let machine = S::MACHINE;
        UnknownState {
            machine: machine.name(),
            table: machine.table(),
            column: machine.column(),
            value: value.to_owned(),
        }
    }

    /// The string that was not recognised.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The enum that did not recognise it.
    pub fn machine(&self) -> &'static str {
        self.machine
    }
}
