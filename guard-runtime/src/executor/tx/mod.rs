//! `Tx` and `Savepoint`: transactions whose wins are tied to them, and the
//! only way to turn an uncommitted win into a committed one.
//!
//! Every `Tx` and every `Savepoint` has a scope number of its own, and a win
//! inside one carries that number. [`Tx::commit`] accepts only wins of its
//! own scope, and [`Savepoint::release`] hands its wins on to the enclosing
//! scope. A win from a savepoint that was rolled back, from a transaction
//! that was rolled back, or from another transaction therefore never
//! becomes committed.
//!
//! Every call that waits for the database keeps a deadline
//! ([`DEFAULT_DEADLINE`] unless [`Begin::within`] or [`Tx::within`] says
//! otherwise) and ends in [`Error::Timeout`] when it runs out; the field
//! `outcome_known` is false only for a `COMMIT` cut off in flight.

mod begin;
mod health;
mod savepoint;
mod staged;

use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

pub use self::begin::Begin;
pub(crate) use self::begin::begin_in_task;
pub(crate) use self::health::TxHealth;
pub use self::savepoint::Savepoint;
pub use self::staged::Staged;
use self::staged::sealed;
use crate::StateMachine;
use crate::deadline::retry::DEFAULT_DEADLINE;
use crate::dialect::Backend;
use crate::error::{Error, Misuse};
use crate::outcome::{Committed, Uncommitted, Won};

/// Scope numbers; 0 belongs to committed wins.
static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

fn next_scope() -> u64 {
    NEXT_SCOPE.fetch_add(1, Ordering::Relaxed)
}

/// [`Error::Timeout`] for a statement of the transaction itself, which
/// names no table: `statement` is `BEGIN`, `COMMIT`, `SAVEPOINT`, ….
fn timed_out(statement: &'static str, deadline: Duration, outcome_known: bool) -> Error {
    Error::Timeout {
        table: "",
        transition: statement,
        deadline,
        outcome_known,
    }
}

/// A database transaction whose wins wait for its commit.
///
/// Begin one with [`Tx::begin`] (or [`Tx::begin_with`], e.g. for SQLite's
/// `BEGIN IMMEDIATE`), pass `&mut tx` to
/// [`Transition::apply`](crate::Transition::apply), and commit it with
/// [`Tx::commit`], which hands back the committed wins:
///
/// ```text
/// let mut tx = Tx::begin_with(&pool, "BEGIN IMMEDIATE").await?;
/// let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await?;
/// if let Some(won) = tx.commit(outcome.won()).await? {
///     won.run(|effect| async move { /* call the bank */ }).await;
/// }
/// ```
///
/// (The `stateguard` crate documentation runs this example.)
///
/// It dereferences to the connection, so the caller's own statements run
/// in it as with `sqlx::Transaction` (`.execute(&mut *tx)`). Dropping it,
/// or [`Tx::rollback`], rolls the transaction back and takes its wins with
/// it: they can never run their effects.
///
/// [`Tx::commit`] makes sure the transaction really commits: a PostgreSQL
/// transaction that an earlier error aborted (whose `COMMIT` the server
/// answers with a silent `ROLLBACK`), or a MySQL transaction that a
/// deadlock rolled back, ends in [`Error::RolledBack`], not in committed
/// wins.
///
/// # Deadlines
///
/// The transaction's own calls ([`Tx::begin`], [`Tx::commit`],
/// [`Tx::savepoint`], [`Tx::rollback`] and their [`Savepoint`]
/// counterparts) each keep a deadline, [`DEFAULT_DEADLINE`] unless
/// `Tx::begin(&pool).within(d)` or [`Tx::within`] says otherwise, and end
/// in [`Error::Timeout`] when it runs out (with `table` empty and the
/// statement, `BEGIN`, `COMMIT`, …, in `transition`). Only a `COMMIT` cut
/// off in flight leaves the outcome open (`outcome_known: false`): any other
/// cut-off leaves a transaction that can no longer commit. On SQLite, which
/// has no network, the deadline bounds the wait for a lock (`BEGIN
/// IMMEDIATE` behind another writer, a `COMMIT` behind a reader's lock).
/// Statements run through [`Transition::apply`](crate::Transition::apply)
/// keep the transition's own deadline.
pub struct Tx<'c, DB: Backend> {
    inner: sqlx::Transaction<'c, DB>,
    scope: u64,
    health: TxHealth,
    deadline: Duration,
}

impl<'c, DB: Backend> Tx<'c, DB> {
    /// Begins a transaction on a connection of `pool`:
    /// `Tx::begin(&pool).await?`, or, with a deadline other than
    /// [`DEFAULT_DEADLINE`], `Tx::begin(&pool).within(d).await?` (see
    /// [`Begin`]).
    ///
    /// The deadline covers the whole wait: for a connection of the pool
    /// (a new connection included, to a server that may be down) and for
    /// the `BEGIN`. When it runs out the result is [`Error::Timeout`] with
    /// `outcome_known: true`: no transaction is handed out and nothing was
    /// committed. The pool's own `acquire_timeout` still applies; whichever
    /// is shorter ends the wait, the pool's with [`Error::Begin`]
    /// (`sqlx::Error::PoolTimedOut`). The transaction keeps the same
    /// deadline for its later calls.
    ///
    /// On PostgreSQL and MySQL the `BEGIN` runs in a task of its own
    /// (tokio's), which always sees it through (SQLite's driver does that
    /// itself): a caller that stops waiting half-way (a client that hung
    /// up, the deadline, a `select!` that took another branch) leaves a
    /// transaction that the task rolls back once the `BEGIN` answers, never
    /// a connection that went back to the pool inside a transaction sqlx
    /// does not know of, whose later autocommit statements (and wins) would
    /// not commit. Until the `BEGIN` answers (or its connection breaks),
    /// the task keeps the connection out of the pool. On a connection of
    /// your own, wrap the transaction sqlx begins there with [`Tx::new`].
    ///
    /// ```
    /// # use stateguard::{Outcome, StateMachine, Won};
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
    /// use stateguard::Tx;
    ///
    /// // The move and the caller's own statements commit together; the win
    /// // waits for the commit.
    /// let mut tx = Tx::begin(&pool).await?;
    /// let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await?;
    /// sqlx::query("UPDATE payouts SET status = status WHERE id = 1").execute(&mut *tx).await?;
    /// let won = tx.commit(outcome.won()).await?;
    /// assert!(won.is_some());
    /// # Ok(()) }
    /// ```
    pub fn begin(pool: &sqlx::Pool<DB>) -> Begin<'_, DB> {
        Begin::new(pool, None)
    }

    /// [`Tx::begin`], with a statement of the caller's choice:
    /// `"BEGIN IMMEDIATE"` on SQLite, so that a transaction that reads
    /// before it writes does not fail with `SQLITE_BUSY_SNAPSHOT`. Its
    /// deadline is [`Tx::begin`]'s: [`DEFAULT_DEADLINE`], or
    /// `Tx::begin_with(&pool, statement).within(d)`; on SQLite it bounds
    /// the wait for the write lock (then [`Error::Timeout`], before the
    /// connection's `busy_timeout` would end it in [`Error::Begin`]).
    pub fn begin_with<'p>(pool: &'p sqlx::Pool<DB>, statement: &'static str) -> Begin<'p, DB> {
        Begin::new(pool, Some(statement))
    }

    /// Wraps a transaction begun through sqlx. It must be an outermost
    /// transaction: a nested one is a savepoint, whose commit commits
    /// nothing yet ([`Misuse::NestedTransaction`](crate::Misuse::NestedTransaction)). Its calls keep
    /// [`DEFAULT_DEADLINE`] unless [`Tx::within`] says otherwise.
    ///
    /// On a pool, prefer [`Tx::begin`]: sqlx 0.9's own `begin`, dropped
    /// while its `BEGIN` is in flight, can hand the connection back to the
    /// pool inside a transaction it does not know of.
    pub fn new(inner: sqlx::Transaction<'c, DB>) -> Result<Self, Error> {
        let depth = depth::<DB>(&inner);
        if depth != 1 {
            return Err(Error::Misuse(Misuse::NestedTransaction { depth }));
        }
        Ok(Tx {
            inner,
            scope: next_scope(),
            health: TxHealth::default(),
            deadline: DEFAULT_DEADLINE,
        })
    }

    /// The same transaction, whose later calls ([`Tx::commit`],
    /// [`Tx::savepoint`], [`Tx::rollback`], and the savepoints opened from
    /// then on) keep `deadline` instead of the one it began with
    /// ([`DEFAULT_DEADLINE`], or [`Begin::within`]).
    pub fn within(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The deadline the transaction's own calls keep.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Opens a savepoint inside this transaction. Wins inside it belong to
    /// it until [`Savepoint::release`] hands them to this transaction; if
    /// it is rolled back or dropped instead, they are gone.
    ///
    /// The `SAVEPOINT`, and the savepoint's own calls after it, keep the
    /// transaction's deadline ([`Tx::within`], [`Savepoint::within`]).
    /// Cut off, it ends in [`Error::Timeout`] with `outcome_known: true`,
    /// and the transaction can no longer commit ([`Tx::commit`] answers
    /// [`Error::RolledBack`]): the `SAVEPOINT` may still run, and sqlx
    /// rolls back what it cannot account for (on PostgreSQL, the whole
    /// transaction, so that statements run in it afterwards may run in
    /// autocommit). The library sends none: an `apply` or a savepoint in
    /// it is [`Error::RolledBack`] too (the caller's own statements,
    /// through `&mut *tx`, are not seen). Roll the transaction back or drop
    /// it.
    pub async fn savepoint(&mut self) -> Result<Savepoint<'_, DB>, Error> {
        let deadline = self.deadline;
        Savepoint::open(&mut *self.inner, &mut self.health, self.scope, deadline).await
    }

    /// Commits the transaction, and only then hands out the wins that
    /// happened in it, committed: `let (a, b) = tx.commit((a, b)).await?;`.
    ///
    /// `staged` is one [`Won<S, K, Uncommitted>`], a tuple of up to four, a
    /// `Vec` or an `Option` of them, or `()`. Each must have been won in
    /// this transaction (or in a savepoint of it that was released);
    /// otherwise nothing is committed and the error is
    /// [`Misuse::ForeignWin`](crate::Misuse::ForeignWin).
    ///
    /// Before `COMMIT`, the transaction is checked to be still open and not
    /// aborted: PostgreSQL answers the `COMMIT` of an aborted transaction
    /// with a silent `ROLLBACK`, and MySQL rolls a transaction back on a
    /// deadlock and runs later statements outside it. Either way the result
    /// is [`Error::RolledBack`] and no win comes out. Once the library knows
    /// the transaction cannot commit (its own statement hit a deadlock or a
    /// serialization failure, or a call was cut off by a deadline), it
    /// sends nothing more in it: [`Transition::apply`](crate::Transition::apply)
    /// and [`Tx::savepoint`] answer [`Error::RolledBack`] before sending. On PostgreSQL and
    /// MariaDB the check is one extra statement, unless the transaction's
    /// last statement was the library's own (an `apply`, an
    /// `idempotency::Ticket::complete`, an `inbox::receive`) and succeeded,
    /// which shows the transaction open; on MySQL 8, which has no way to
    /// ask, only the deadlocks of the library's own statements are seen.
    ///
    /// The check and the `COMMIT` together keep the transaction's deadline
    /// ([`DEFAULT_DEADLINE`], [`Begin::within`] or [`Tx::within`]). Time
    /// that runs out before the `COMMIT` was sent ends in
    /// [`Error::Timeout`] with `outcome_known: true`: the transaction rolls
    /// back. Time that runs out while the `COMMIT` is in flight ends in
    /// [`Error::Timeout`] with `outcome_known: false`
    /// ([`Error::is_outcome_unknown`]): the transaction may have committed,
    /// and no win comes out. Read the rows to learn what happened; a row
    /// moved into an in-flight state is taken over by
    /// [`recover`](crate::recover) once its lease runs out.
    pub async fn commit<T: Staged + sealed::Convert>(
        mut self,
        staged: T,
    ) -> Result<T::Committed, Error> {
        if !staged.all_in(self.scope) {
            // Dropping `self` rolls the transaction back.
            return Err(Error::Misuse(Misuse::ForeignWin));
        }
        if self.health.rolled_back {
            // Dropped, not rolled back here: a statement cut off by a
            // deadline may still hold the connection, and waiting for it
            // could wait for ever. sqlx rolls back when the connection is
            // next free.
            return Err(Error::RolledBack { source: None });
        }
        let deadline = self.deadline;
        let started = tokio::time::Instant::now();
        let open = match self.health.verified {
            true => Ok(true),
            // Cut off here, nothing was sent that commits: dropping `self`
            // rolls back.
            false => tokio::time::timeout(deadline, DB::transaction_open(&mut self.inner))
                .await
                .map_err(|_| timed_out("COMMIT", deadline, true))?,
        };
        match open {
            Ok(true) => {}
            // Dropping `self` rolls back what is left of the transaction.
            Ok(false) => return Err(Error::RolledBack { source: None }),
            Err(source) => {
                return Err(Error::RolledBack {
                    source: Some(source),
                });
            }
        }
        let left = deadline.saturating_sub(started.elapsed());
        let commit = crate::executor::fault::statement("COMMIT", self.inner.commit());
        tokio::time::timeout(left, commit)
            .await
            .map_err(|_| timed_out("COMMIT", deadline, false))?
            .map_err(|source| Error::Commit { source })?;
        Ok(staged.into_committed())
    }

    pub(crate) fn parts(&mut self) -> (&mut DB::Connection, &mut TxHealth) {
        (&mut self.inner, &mut self.health)
    }
}

impl<S: StateMachine, K> Won<S, K, Uncommitted> {
    /// Commits `tx`, the transaction this win happened in, and only then
    /// hands out the committed `Won` that can run the effect: shorthand for
    /// [`Tx::commit`] with one win, keeping `tx`'s deadline.
    pub async fn commit<DB: Backend>(self, tx: Tx<'_, DB>) -> Result<Won<S, K, Committed>, Error> {
        tx.commit(self).await
    }
}

fn depth<DB: Backend>(conn: &DB::Connection) -> usize {
    <DB::TransactionManager as sqlx_core::transaction::TransactionManager>::get_transaction_depth(
        conn,
    )
}

/// What a transaction and a savepoint have alike: rolling back (which
/// takes their wins with it), their scope, and the connection under them.
macro_rules! scoped {
    ($ty:ident, $what:literal, $rollback:literal, $cut_off:literal) => {
        impl<DB: Backend> $ty<'_, DB> {
            #[doc = concat!("Rolls the ", $what, " back. Its wins are gone.")]
            ///
            #[doc = concat!(
                "The `", $rollback, "` keeps the deadline of [`", stringify!($ty),
                "::within`]. Cut off, it ends in [`Error::Timeout`] with `outcome_known: true`: ",
                $cut_off
            )]
            // `mut` is needed where the health is owned (`Tx`), not where
            // it is borrowed (`Savepoint`).
            #[allow(unused_mut)]
            pub async fn rollback(mut self) -> Result<(), Error> {
                self.health.verified = false;
                let deadline = self.deadline;
                match tokio::time::timeout(deadline, self.inner.rollback()).await {
                    Ok(done) => done.map_err(|source| Error::Commit { source }),
                    Err(_) => {
                        self.health.abandon();
                        Err(timed_out($rollback, deadline, true))
                    }
                }
            }

            pub(crate) fn scope_id(&self) -> u64 {
                self.scope
            }

            pub(crate) fn health(&self) -> &TxHealth {
                &self.health
            }
        }

        impl<DB: Backend> Deref for $ty<'_, DB> {
            type Target = DB::Connection;

            fn deref(&self) -> &DB::Connection {
                &self.inner
            }
        }

        impl<DB: Backend> DerefMut for $ty<'_, DB> {
            fn deref_mut(&mut self) -> &mut DB::Connection {
                // The caller's own statements run here, unseen.
                self.health.verified = false;
                &mut self.inner
            }
        }
    };
}

scoped!(
    Tx,
    "transaction",
    "ROLLBACK",
    "nothing of the transaction commits, and sqlx rolls back once the connection is free."
);
scoped!(
    Savepoint,
    "savepoint (the enclosing transaction goes on)",
    "ROLLBACK TO SAVEPOINT",
    "the enclosing transaction can no longer commit ([`Tx::commit`] answers \
     [`Error::RolledBack`]), so nothing of it commits."
);

impl<DB: Backend> core::fmt::Debug for Tx<'_, DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tx")
            .field("scope", &self.scope)
            .field("deadline", &self.deadline)
            .finish()
    }
}
