//! [`Misuse`]: what the calling code asked for that the machine or the
//! call does not allow, the errors of kind [`ErrorKind::Misuse`].

#[cfg(doc)]
use super::{Error, ErrorKind};

/// The calling code asked for something the machine or the call does not
/// allow: [`Error::Misuse`], of kind [`ErrorKind::Misuse`]. The same call
/// fails again until the code changes. Where the derive can see the
/// misuse (`expecting` without a version column, a note without
/// history), it is a compile error instead.
///
/// ```
/// use stateguard::{Error, Misuse};
///
/// fn fix_the_code(error: &Error) -> bool {
///     matches!(error, Error::Misuse(Misuse::NotInFlight { .. }))
/// }
/// # let _ = fix_the_code;
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Misuse {
    /// [`Transition::expecting`](crate::Transition::expecting) was used on a
    /// machine without a `version` column, where a row has no occurrence to
    /// check. Only with a hand-written [`HasVersion`](crate::HasVersion): on
    /// a derived machine such a call does not compile.
    #[error(
        "`{transition}` of {machine} cannot expect an occurrence: the machine declares no \
         `version = \"…\"` column"
    )]
    NoVersionColumn {
        /// The machine.
        machine: &'static str,
        /// The transition.
        transition: &'static str,
    },

    /// [`Tx::commit`](crate::Tx::commit) or
    /// [`Savepoint::release`](crate::Savepoint::release) was given a win
    /// that did not happen in that transaction or savepoint: another
    /// transaction's, or one from a savepoint that was not released (rolled
    /// back, or not yet released into this one). Nothing was committed.
    #[error(
        "a win handed to commit() or release() did not happen in that transaction or savepoint \
         (it belongs to another transaction, or to a savepoint that was rolled back or not \
         released): nothing was committed"
    )]
    ForeignWin,

    /// A connection that is inside a transaction was passed where the
    /// transaction itself belongs (`&mut *tx` instead of `&mut tx`): its
    /// wins would look committed before the commit.
    #[error(
        "this connection is inside a transaction: pass the transaction (`&mut tx`), not the \
         connection under it (`&mut *tx`), so that wins wait for the commit"
    )]
    ConnectionInTransaction,

    /// [`Tx::new`](crate::Tx::new) was given a nested transaction (a
    /// savepoint), whose commit does not commit the wins yet.
    #[error(
        "a stateguard Tx needs an outermost transaction, but this one is nested {depth} deep: \
         committing a savepoint would run effects before the real commit"
    )]
    NestedTransaction {
        /// How deep the transaction is (1 is outermost).
        depth: usize,
    },

    /// An in-flight operation was asked of a state that is not declared
    /// `#[state(in_flight(…))]`.
    #[error("state `{state}` of {machine} is not declared #[state(in_flight(...))]")]
    NotInFlight {
        /// The machine.
        machine: &'static str,
        /// The state's database string.
        state: &'static str,
    },

    /// An in-flight state that declares no `failed` transition was asked
    /// to fail: its attempts ran out. (A derived machine makes
    /// [`Verdict::failed()`](crate::Verdict::failed) a compile error where
    /// a state has no `failed` transition.) The row stays in flight.
    #[error(
        "the effect for state `{state}` of {machine} failed, but the state declares no \
         `failed = transition` in #[state(in_flight(...))]; the row stays in flight"
    )]
    NoFailedTransition {
        /// The machine.
        machine: &'static str,
        /// The state's database string.
        state: &'static str,
    },

    /// An effect asked to be retried at a time of its own
    /// ([`Retry::after`](crate::Retry::after)), but its state declares no
    /// `retry(…)`, so there is no column to keep that time: the row stays
    /// in flight and recovery retries it once its lease runs out.
    #[error(
        "the effect for state `{state}` of {machine} asked to be retried at a time of its own, \
         but the state declares no `retry(…)` in #[state(in_flight(...))] to keep it; the row \
         stays in flight until its lease runs out"
    )]
    RetryNotDeclared {
        /// The machine.
        machine: &'static str,
        /// The state's database string.
        state: &'static str,
    },

    /// A verdict named a transition that is not the in-flight state's
    /// `done` or `failed` follow-up. The row stays in flight.
    #[error(
        "the effect for state `{state}` of {machine} returned a verdict naming `{verdict}`, \
         which is neither its `done` nor its `failed` transition; the row stays in flight"
    )]
    NotAFollowUp {
        /// The machine.
        machine: &'static str,
        /// The in-flight state's database string.
        state: &'static str,
        /// The transition the verdict named.
        verdict: &'static str,
    },

    /// A verdict did not carry the values its follow-up binds: it was
    /// made from a transition without them (one that
    /// [`available`](crate::StateMachine::available) listed, say), not
    /// from the transition's constructor
    /// (`PayoutStatus::confirm(bank_ref).into()`), which takes them. (A
    /// derived machine makes [`Verdict::done()`](crate::Verdict::done)
    /// a compile error where they are needed.) The row stays in flight,
    /// and recovery, which runs the same effect code, fails the same way
    /// until that code returns the constructor.
    #[error(
        "the follow-up `{transition}` of {machine} binds values of type `{expects}`, which the \
         verdict does not carry: return `{machine}::{transition}(…).into()` with those values \
         instead; the row stays in flight, and recovery runs the same code, so it fails the same \
         way until the code is fixed"
    )]
    FollowUpValues {
        /// The machine.
        machine: &'static str,
        /// The follow-up transition.
        transition: &'static str,
        /// The type of the values it binds.
        expects: &'static str,
    },

    /// [`finish_many`](crate::finish_many) was handed wins it cannot
    /// finish as one batch: of more than one state, the same row twice, or
    /// a concurrency of 0. No effect ran; finish each state's wins in a
    /// call of their own.
    #[error("finish_many on {machine} refused its wins before any effect ran: {reason}")]
    BatchOfWins {
        /// The machine.
        machine: &'static str,
        /// What is wrong with the batch.
        reason: &'static str,
    },

    /// [`Transition::claim`](crate::Transition::claim) or
    /// [`Transition::apply_many`](crate::Transition::apply_many) on a
    /// transition with [`expecting`](crate::Transition::expecting): an
    /// occurrence names one row, these take many.
    #[error(
        "`{transition}` on table `{table}` expects an occurrence, which names one row; {call} \
         takes many rows, so drop `expecting`"
    )]
    ExpectingMany {
        /// The table of the machine.
        table: &'static str,
        /// The transition.
        transition: &'static str,
        /// `claim` or `apply_many`.
        call: &'static str,
    },

    /// [`apply_many`](crate::Transition::apply_many) or a claim on SQLite
    /// or MySQL with a key that the batch's JSON cannot carry as a one-row
    /// statement binds it: a value that binds as bytes (`uuid::Uuid`), a
    /// float or a date, or an integer whose `Display` text is not the
    /// integer. Nothing ran. See [`ManyKeys`](crate::ManyKeys).
    #[error(
        "transition `{transition}` on table `{table}` cannot send key `{key}` in a batch: {reason}"
    )]
    BatchKey {
        /// The table of the machine.
        table: &'static str,
        /// The transition.
        transition: &'static str,
        /// The key value's text, or the SQL type it binds as.
        key: String,
        /// Why it cannot travel.
        reason: String,
    },

    /// [`Transition::claim_older_than`](crate::Transition::claim_older_than)
    /// on a transition whose source states do not all stamp one `since`
    /// column.
    #[error(
        "`{transition}` of {machine} starts from a state that records no entry time, or from \
         states that record it in different columns; give its source states \
         #[state(since = \"…\")] (one column) to claim rows by age"
    )]
    NoSinceColumn {
        /// The machine.
        machine: &'static str,
        /// The transition.
        transition: &'static str,
    },

    /// [`Transition::claim_timed_out`](crate::Transition::claim_timed_out)
    /// on a transition none of whose source states declares a timeout.
    #[error(
        "none of the source states of `{transition}` of {machine} declares \
         #[state(timeout = \"…\")]; use claim_older_than with an age instead"
    )]
    NoTimeout {
        /// The machine.
        machine: &'static str,
        /// The transition.
        transition: &'static str,
    },

    /// [`Machine::history`](crate::meta::Machine::history) on a machine
    /// declared without `history = "…"`.
    #[error("{machine} keeps no history; declare #[state_machine(…, history = \"…\")]")]
    NoHistory {
        /// The machine.
        machine: &'static str,
    },
}
