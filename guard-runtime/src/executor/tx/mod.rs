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
mod staged;

use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use sqlx::Connection;

pub use self::begin::Begin;
pub(crate) use self::begin::begin_in_task;
pub use self::staged::Staged;
use self::staged::sealed;
use crate::StateMachine;
use crate::deadline::retry::DEFAULT_DEADLINE;
use crate::dialect::Backend;
use crate::error::Error;
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

/// What the library has seen of a transaction's health.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// A statement of this transaction failed in a way that the database
    /// answers by rolling the whole transaction back (a MySQL deadlock).
    rolled_back: bool,
    /// The last statement on the connection was the library's own, and it
    /// succeeded: the transaction was open and not aborted then, and
    /// nothing has run since. Cleared when the caller takes the connection
    /// (`&mut *tx`), which is how its own statements run, and around
    /// savepoints.
    verified: bool,
    /// The transaction runs on a connection of a pool that
    /// `pooler::check` found multiplexed
    /// ([`Run::multiplexed`](crate::executor::sealed::Run::multiplexed)).
    pub(crate) multiplexed: bool,
}

impl Health {
    /// Records a failed statement. After a serialization failure, deadlock
    /// or busy database the library answers [`Error::RetryTransaction`],
    /// and MySQL has already rolled the whole transaction back: either way
    /// the transaction must not commit.
    pub(crate) fn failed<DB: Backend>(&mut self, error: &sqlx::Error) {
        self.verified = false;
        if DB::is_retryable(error) {
            self.rolled_back = true;
        }
    }

    /// Records a statement of the library's that succeeded.
    pub(crate) fn succeeded(&mut self) {
        self.verified = true;
    }

    /// A statement was cut off and may still complete on the server: what
    /// the transaction holds is unknown, so it must not commit.
    pub(crate) fn abandon(&mut self) {
        self.rolled_back = true;
    }

    /// Whether the transaction can no longer commit.
    pub(crate) fn rolled_back(&self) -> bool {
        self.rolled_back
    }

    /// Refuses a statement of the library's in a transaction that can no
    /// longer commit, before anything is sent: the database or sqlx may
    /// have rolled it back already (a MySQL deadlock, a `SAVEPOINT` cut
    /// off on PostgreSQL), and the statement would run outside it and
    /// commit on its own.
    pub(crate) fn refuse(&self) -> Result<(), sqlx::Error> {
        match self.rolled_back {
            true => Err(sqlx::Error::InvalidArgument(
                crate::error::REFUSED.to_owned(),
            )),
            false => Ok(()),
        }
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
    health: Health,
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
    /// nothing yet ([`Error::NestedTransaction`]). Its calls keep
    /// [`DEFAULT_DEADLINE`] unless [`Tx::within`] says otherwise.
    ///
    /// On a pool, prefer [`Tx::begin`]: sqlx 0.9's own `begin`, dropped
    /// while its `BEGIN` is in flight, can hand the connection back to the
    /// pool inside a transaction it does not know of.
    pub fn new(inner: sqlx::Transaction<'c, DB>) -> Result<Self, Error> {
        let depth = depth::<DB>(&inner);
        if depth != 1 {
            return Err(Error::NestedTransaction { depth });
        }
        Ok(Tx {
            inner,
            scope: next_scope(),
            health: Health::default(),
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
    /// [`Error::ForeignWin`].
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
            return Err(Error::ForeignWin);
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

    pub(crate) fn parts(&mut self) -> (&mut DB::Connection, &mut Health) {
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

/// A savepoint inside a [`Tx`] (or inside another savepoint).
///
/// Wins inside it are its own: [`Savepoint::release`] hands them to the
/// enclosing transaction, and [`Savepoint::rollback`] (or dropping it)
/// rolls its work back and leaves them unable to commit.
///
/// Its calls keep the deadline of the transaction or savepoint it was
/// opened in, unless [`Savepoint::within`] says otherwise. A call cut off
/// by it ends in [`Error::Timeout`] with `outcome_known: true`, and leaves
/// the whole transaction unable to commit ([`Tx::commit`] answers
/// [`Error::RolledBack`]): nothing of it commits.
pub struct Savepoint<'t, DB: Backend> {
    inner: sqlx::Transaction<'t, DB>,
    health: &'t mut Health,
    scope: u64,
    parent: u64,
    deadline: Duration,
}

impl<'t, DB: Backend> Savepoint<'t, DB> {
    async fn open(
        conn: &'t mut DB::Connection,
        health: &'t mut Health,
        parent: u64,
        deadline: Duration,
    ) -> Result<Self, Error> {
        // Nothing to open in a transaction that can no longer commit: the
        // `SAVEPOINT` would run outside it.
        if health.rolled_back {
            return Err(Error::RolledBack { source: None });
        }
        health.verified = false;
        let begin = crate::executor::fault::statement("SAVEPOINT", conn.begin());
        let inner = match tokio::time::timeout(deadline, begin).await {
            Ok(begun) => begun.map_err(|source| Error::Begin { source })?,
            Err(_) => {
                // The `SAVEPOINT` may run yet, and what sqlx rolls back
                // for it may be more than the savepoint.
                health.abandon();
                return Err(timed_out("SAVEPOINT", deadline, true));
            }
        };
        Ok(Savepoint {
            inner,
            health,
            scope: next_scope(),
            parent,
            deadline,
        })
    }

    /// The same savepoint, whose later calls ([`Savepoint::release`],
    /// [`Savepoint::savepoint`], [`Savepoint::rollback`]) keep `deadline`
    /// instead of the enclosing transaction's.
    pub fn within(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The deadline the savepoint's own calls keep.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Opens a savepoint inside this one, keeping this one's deadline; cut
    /// off, as [`Tx::savepoint`].
    pub async fn savepoint(&mut self) -> Result<Savepoint<'_, DB>, Error> {
        let deadline = self.deadline;
        Savepoint::open(&mut *self.inner, &mut *self.health, self.scope, deadline).await
    }

    /// Releases the savepoint and hands its wins to the enclosing
    /// transaction or savepoint `parent`: they commit with it.
    ///
    /// Each win must have been won in this savepoint (or released into it);
    /// otherwise nothing is released and the error is
    /// [`Error::ForeignWin`].
    ///
    /// The `RELEASE SAVEPOINT` keeps the savepoint's deadline. Cut off, it
    /// ends in [`Error::Timeout`] with `outcome_known: true`, the wins are
    /// gone, and the transaction can no longer commit ([`Tx::commit`]
    /// answers [`Error::RolledBack`]).
    pub async fn release<T: Staged + sealed::Convert>(self, staged: T) -> Result<T, Error> {
        if !staged.all_in(self.scope) {
            return Err(Error::ForeignWin);
        }
        self.health.verified = false;
        let deadline = self.deadline;
        let release = crate::executor::fault::statement("RELEASE SAVEPOINT", self.inner.commit());
        match tokio::time::timeout(deadline, release).await {
            Ok(released) => released.map_err(|source| Error::Commit { source })?,
            Err(_) => {
                self.health.abandon();
                return Err(timed_out("RELEASE SAVEPOINT", deadline, true));
            }
        }
        Ok(staged.rescope(self.parent))
    }

    pub(crate) fn parts(&mut self) -> (&mut DB::Connection, &mut Health) {
        (&mut self.inner, &mut *self.health)
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

            pub(crate) fn health(&self) -> &Health {
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

impl<DB: Backend> core::fmt::Debug for Savepoint<'_, DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Savepoint")
            .field("scope", &self.scope)
            .field("parent", &self.parent)
            .field("deadline", &self.deadline)
            .finish()
    }
}
