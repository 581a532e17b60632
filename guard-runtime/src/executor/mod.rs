//! What `Transition::apply` accepts: a pool, a connection or a transaction.
//!
//! **Architecture Invariant:** what an executor can do beyond the public
//! [`Runner`] trait is on the sealed supertrait [`sealed::Run`]; no
//! method is hidden on a public type, and no caller outside the crate can
//! implement either.
//!
//! **Architecture Invariant:** a win made inside a transaction waits for
//! it: only a [`Tx`] or [`Savepoint`] (`tx/`) runs statements inside one
//! (a bare connection inside a transaction is refused,
//! [`refuse_open_transaction`]), and its wins are `Uncommitted` until the
//! commit. A `BEGIN` is never abandoned half-way ([`task`]), and a pool
//! connection that met a read-only server is not kept (`impls/pool.rs`).

pub mod fault;
mod impls;
pub(crate) mod marked;
pub(crate) mod proven;
pub(crate) mod seam;
pub(crate) mod task;
pub(crate) mod tx;

use crate::error::Misuse;
#[allow(unused_imports)]
use crate::executor::tx::{Savepoint, Tx};

pub(crate) use crate::dialect::connection::{ExecutedThenFetched, Inserts, When, WithInserts};

/// Something a transition can run on: `&Pool<DB>`, a pooled connection
/// (`&mut conn` after `let mut conn = pool.acquire().await?`), a
/// connection of your own (`&mut PgConnection`, `&mut SqliteConnection`
/// or `&mut MySqlConnection`), or a stateguard transaction,
/// `&mut Tx<'_, DB>` or `&mut Savepoint<'_, DB>`.
///
/// (It is named `Runner`, not `Executor`, so that it imports beside
/// `sqlx::Executor` without an alias.)
///
/// Code generic over the database needs no bound of its own to run a
/// transition on a pool, a pooled connection or a transaction: each is
/// a runner for every [`Backend`](crate::Backend). Only the key's own
/// bound remains:
///
/// ```
/// use sqlx::Pool;
/// use stateguard::{Backend, Error, Outcome, StateMachine, Tx};
/// use stateguard::bounds::{Key};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     Sending,
/// }
///
/// /// Starts payout `id`, on any backend, first on the pool and then, for
/// /// a replay, inside a transaction.
/// async fn start<DB: Backend>(pool: &Pool<DB>, id: i64) -> Result<bool, Error>
/// where
///     i64: Key<DB>,
/// {
///     let first = PayoutStatus::start().apply(pool, id).await?;
///     let mut tx = Tx::begin(pool).await?;
///     let replay = PayoutStatus::start().apply(&mut tx, id).await?;
///     tx.commit(()).await?;
///     Ok(first.is_applied() && matches!(replay, Outcome::AlreadyInState(_)))
/// }
/// ```
///
/// A helper that runs on whatever the caller has, a pool, a connection or
/// a transaction, takes `E: Runner` (with `Database =` the backend it is
/// written for), and hands the outcome back with the runner's
/// [`Commit`](Runner::Commit), so that a win inside a transaction still
/// waits for its commit:
///
/// ```
/// use sqlx::Postgres;
/// use stateguard::{Error, Runner, Outcome, StateMachine};
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
/// /// Cancels payout `id` on `executor`: `&pool`, `&mut conn` or `&mut tx`.
/// async fn cancel<E>(executor: E, id: i64) -> Result<Outcome<PayoutStatus, i64, E::Commit>, Error>
/// where
///     E: Runner<Database = Postgres>,
/// {
///     PayoutStatus::cancel().apply(executor, id).await
/// }
///
/// async fn callers(pool: sqlx::PgPool) -> Result<(), Error> {
///     let on_pool = cancel(&pool, 1).await?; // a committed win
///     let mut tx = stateguard::Tx::begin(&pool).await?;
///     let in_tx = cancel(&mut tx, 2).await?; // an uncommitted one
///     let won = tx.commit(in_tx.won()).await?;
///     # let _ = (on_pool, won);
///     Ok(())
/// }
/// ```
///
/// Inside a transaction, pass the [`Tx`](crate::Tx) itself (`&mut tx`), not
/// the connection under it (`&mut *tx`): only then can the win wait for
/// the commit. `apply` refuses a connection that sqlx knows is inside a
/// transaction ([`Misuse::ConnectionInTransaction`](crate::Misuse::ConnectionInTransaction)),
/// and a plain `sqlx::Transaction` is not a `Runner`: wrap it with
/// [`Tx::new`](crate::Tx::new), so that its wins are tied to it. A
/// transaction opened with a raw `BEGIN` statement, or a savepoint made with
/// a raw `SAVEPOINT` statement, is invisible to sqlx and so to stateguard:
/// open them with [`Tx::begin`](crate::Tx::begin) and
/// [`Tx::savepoint`](crate::Tx::savepoint).
///
/// On a pool, or on a connection that is not inside a transaction, each
/// statement commits on its own, so the library retries serialization
/// failures and deadlocks itself, and a win is [`Committed`](crate::Committed). Inside a
/// transaction it cannot retry, and returns
/// [`Error::RetryTransaction`](crate::Error::RetryTransaction) instead; a
/// win there is [`Uncommitted`](crate::Uncommitted) until [`Won::commit`](crate::Won::commit).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not something stateguard can run a transition on",
    label = "not something stateguard runs on",
    note = "pass `&pool` (a `&sqlx::Pool`), a connection (`&mut conn`), or a stateguard \
            transaction: `let mut tx = stateguard::Tx::begin(&pool).await?;` and then `&mut tx`",
    note = "a `sqlx::Transaction` you already hold becomes one with `stateguard::Tx::new(tx)`, \
            so that a win waits for its commit"
)]
pub trait Runner: sealed::Run<Db = Self::Database> {
    /// The database the statements run on: `Postgres`, `Sqlite` or
    /// `MySql`.
    type Database: crate::Backend;

    /// [`Committed`](crate::Committed) for a pool or connection, [`Uncommitted`](crate::Uncommitted) for a
    /// transaction: whether a win can run its effect at once.
    type Commit;

    /// Whether the statements run inside a transaction the caller owns.
    fn in_transaction(&self) -> bool;
}

pub(crate) mod sealed {
    use super::{ExecutedThenFetched, Inserts, When, WithInserts};
    use crate::dialect::sealed::Driver;
    use crate::dialect::{Backend, BoxFuture};

    /// How the library runs its statements on an executor, out of callers'
    /// reach.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not something stateguard can run a transition on",
        label = "not something stateguard runs on",
        note = "pass `&pool` (a `&sqlx::Pool`), a connection (`&mut conn`), or a stateguard \
                transaction: `let mut tx = stateguard::Tx::begin(&pool).await?;` and then \
                `&mut tx`",
        note = "a `sqlx::Transaction` you already hold becomes one with \
                `stateguard::Tx::new(tx)`, so that a win waits for its commit"
    )]
    pub trait Run: Send {
        /// The database the statements run on:
        /// [`Runner::Database`](super::Runner::Database), which each
        /// runner's own is.
        type Db: Backend;

        /// A pooled connection of this executor's database, out of any
        /// transaction (each statement commits on its own): what
        /// [`Run::try_idle`] hands out.
        type Idle: Run<Db = Self::Db>;

        /// Whether this executor is itself the caller's transaction, whose
        /// wins are uncommitted.
        const IS_TRANSACTION: bool;

        /// Whether each statement takes a connection of its own from a
        /// pool: a statement that met a read-only server closed its
        /// connection, and a retry gets a fresh one.
        const POOLED: bool = false;

        /// A pool's connection that is idle at this moment, without waiting
        /// for one; `None` for anything but a pool.
        fn try_idle(&self) -> Option<Self::Idle> {
            None
        }

        /// Checks that a pooled connection handed out by `try_idle` is
        /// alive, as the pool's own `acquire` would have; nothing to check
        /// on the others.
        fn ping(&mut self) -> BoxFuture<'_, Result<(), sqlx::Error>> {
            Box::pin(async { Ok(()) })
        }

        fn execute(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
        ) -> BoxFuture<'_, Result<<Self::Db as sqlx::Database>::QueryResult, sqlx::Error>>;

        fn fetch_optional(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
        ) -> BoxFuture<'_, Result<Option<<Self::Db as sqlx::Database>::Row>, sqlx::Error>>;

        fn fetch_all(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
        ) -> BoxFuture<'_, Result<Vec<<Self::Db as sqlx::Database>::Row>, sqlx::Error>>;

        /// Runs `sql`, then `then` on the same connection if `when` says
        /// so of the first one's result (MySQL reads a new lease token,
        /// and `LAST_INSERT_ID()` with it, this way).
        fn execute_then_fetch(
            &mut self,
            sql: &'static str,
            args: <Self::Db as Driver>::Args,
            then: &'static str,
            then_args: <Self::Db as Driver>::Args,
            when: When<Self::Db>,
        ) -> BoxFuture<'_, Result<ExecutedThenFetched<Self::Db>, sqlx::Error>>;

        /// Runs `inserts` (a history row's and an outbox row's `INSERT …
        /// SELECT`), then `update` (fetching its rows when `rows`), then
        /// `then`, on one connection in one transaction, or in a savepoint
        /// inside the caller's: the move and its rows stand or fall
        /// together, and each insert must write as many rows as the move
        /// changed. Where [`Driver::PREPARES_FIRST`], every statement
        /// after the first insert is prepared before the `BEGIN`: a
        /// failure there writes nothing.
        fn with_inserts(
            &mut self,
            inserts: Inserts<Self::Db>,
            update: &'static str,
            args: <Self::Db as Driver>::Args,
            rows: bool,
            then: Option<(&'static str, <Self::Db as Driver>::Args)>,
        ) -> BoxFuture<'_, Result<WithInserts<Self::Db>, sqlx::Error>>;

        /// In a transaction on a database that wants it
        /// ([`Driver::PREPARES_FIRST`]), prepares `statements` on its
        /// connection (or finds them in the connection's cache): called
        /// before the transaction's first write, so that every statement
        /// after it is an execution. Nothing elsewhere.
        fn prepare_first(
            &mut self,
            statements: Vec<&'static str>,
        ) -> BoxFuture<'_, Result<(), sqlx::Error>> {
            let _ = statements;
            Box::pin(async { Ok(()) })
        }

        /// The transaction or savepoint a win here belongs to; 0 outside
        /// one.
        fn scope(&self) -> u64 {
            0
        }

        /// A statement was cut off by a deadline and may still complete: a
        /// transaction must then not commit.
        fn abandoned(&mut self) {}

        /// Whether this is a transaction that can no longer commit, whose
        /// statements are refused.
        fn rolled_back(&self) -> bool {
            false
        }

        /// Whether `pooler::check` (`executor/marked.rs`) found this executor's
        /// pool multiplexed: a pool it marked, a transaction begun on one,
        /// or a connection a marked pool had idle. A server error on a
        /// tagged statement of such an executor may be another client's
        /// statement's (`proven.rs`). `false` for a connection the caller
        /// acquired: nothing ties it to its pool.
        fn multiplexed(&self) -> bool {
            false
        }

        /// Whether this executor's writes that return nothing but their
        /// tag run without it (`Proven::counted`): its pool is one that
        /// `pooler::check` found dedicated, at the caller's request
        /// (`Check::untagged_if_dedicated`), and never multiplexed; or a
        /// transaction begun on one, or a connection such a pool had idle.
        fn untagged(&self) -> bool {
            false
        }
    }
}

/// The error for a connection that is inside a transaction it does not
/// represent (`&mut *tx`): its wins would look committed before the commit;
/// and for a transaction that can no longer commit.
pub(crate) fn refuse_open_transaction<E: Runner>(executor: &E) -> Result<(), crate::Error> {
    if !E::IS_TRANSACTION && executor.in_transaction() {
        return Err(crate::Error::Misuse(Misuse::ConnectionInTransaction));
    }
    if executor.rolled_back() {
        return Err(crate::Error::RolledBack { source: None });
    }
    Ok(())
}
