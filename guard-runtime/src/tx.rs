//! `Tx` and `Savepoint`: transactions whose wins are tied to them, and the
//! only way to turn an uncommitted win into a committed one.
//!
//! Every `Tx` and every `Savepoint` has a scope number of its own, and a win
//! inside one carries that number. [`Tx::commit`] accepts only wins of its
//! own scope, and [`Savepoint::release`] hands its wins on to the enclosing
//! scope. A win from a savepoint that was rolled back, from a transaction
//! that was rolled back, or from another transaction therefore never
//! becomes committed.

use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, Ordering};

use sqlx::Connection;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::error::Error;
use crate::outcome::{Committed, Uncommitted, Won};

/// Scope numbers; 0 belongs to committed wins.
static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

fn next_scope() -> u64 {
    NEXT_SCOPE.fetch_add(1, Ordering::Relaxed)
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
}

impl Health {
    /// Records a failed statement. After a serialization failure, deadlock
    /// or busy database the library answers [`Error::RetryTransaction`],
    /// and MySQL has already rolled the whole transaction back: either way
    /// the transaction must not commit.
    pub(crate) fn note<DB: Backend>(&mut self, error: &sqlx::Error) {
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
pub struct Tx<'c, DB: Backend> {
    inner: sqlx::Transaction<'c, DB>,
    scope: u64,
    health: Health,
}

impl<'c, DB: Backend> Tx<'c, DB> {
    /// Begins a transaction on a connection of `pool`.
    ///
    /// On PostgreSQL and MySQL the `BEGIN` runs in a task of its own
    /// (tokio's), which always sees it through (SQLite's driver does that
    /// itself): a caller that stops waiting half-way (a client that hung
    /// up, a timeout, a `select!` that took another branch) leaves a
    /// transaction that the task rolls back, never a connection that went
    /// back to the pool inside a transaction sqlx does not know of, whose
    /// later autocommit statements (and wins) would not commit. On a
    /// connection of your own, wrap the transaction sqlx begins there with
    /// [`Tx::new`].
    pub async fn begin(pool: &sqlx::Pool<DB>) -> Result<Self, Error> {
        Self::begin_in_task(pool, None).await
    }

    /// [`Tx::begin`], with a statement of the caller's choice:
    /// `"BEGIN IMMEDIATE"` on SQLite, so that a transaction that reads
    /// before it writes does not fail with `SQLITE_BUSY_SNAPSHOT`.
    pub async fn begin_with(pool: &sqlx::Pool<DB>, statement: &'static str) -> Result<Self, Error> {
        Self::begin_in_task(pool, Some(statement)).await
    }

    /// [`Tx::begin`] or, with a statement, [`Tx::begin_with`].
    pub(crate) async fn begin_in_task(
        pool: &sqlx::Pool<DB>,
        statement: Option<&'static str>,
    ) -> Result<Self, Error> {
        let pool = pool.clone();
        let begin = async move {
            match statement {
                Some(statement) => pool.begin_with(statement).await,
                None => pool.begin().await,
            }
        };
        // SQLite's worker sees a command through on its own, and sqlx
        // rolls back a SQLite `BEGIN` dropped half-way: no task needed.
        let inner = match DB::EMBEDDED {
            true => begin.await,
            false => crate::task::see_through("a BEGIN", begin).await,
        }
        .map_err(|source| Error::Begin { source })?;
        Self::new(inner)
    }

    /// Wraps a transaction begun through sqlx. It must be an outermost
    /// transaction: a nested one is a savepoint, whose commit commits
    /// nothing yet ([`Error::NestedTransaction`]).
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
        })
    }

    /// Opens a savepoint inside this transaction. Wins inside it belong to
    /// it until [`Savepoint::release`] hands them to this transaction; if
    /// it is rolled back or dropped instead, they are gone.
    pub async fn savepoint(&mut self) -> Result<Savepoint<'_, DB>, Error> {
        Savepoint::open(&mut *self.inner, &mut self.health, self.scope).await
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
    /// is [`Error::RolledBack`] and no win comes out. On PostgreSQL and
    /// MariaDB the check is one extra statement, unless the transaction's
    /// last statement was the library's own (an `apply`, an
    /// `idempotency::Ticket::complete`, an `inbox::receive`) and succeeded,
    /// which shows the transaction open; on MySQL 8, which has no way to
    /// ask, only the deadlocks of the library's own statements are seen.
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
        let open = match self.health.verified {
            true => Ok(true),
            false => DB::transaction_open(&mut self.inner).await,
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
        self.inner
            .commit()
            .await
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
    /// [`Tx::commit`] with one win.
    pub async fn commit<DB: Backend>(self, tx: Tx<'_, DB>) -> Result<Won<S, K, Committed>, Error> {
        tx.commit(self).await
    }
}

/// A savepoint inside a [`Tx`] (or inside another savepoint).
///
/// Wins inside it are its own: [`Savepoint::release`] hands them to the
/// enclosing transaction, and [`Savepoint::rollback`] (or dropping it)
/// rolls its work back and leaves them unable to commit.
pub struct Savepoint<'t, DB: Backend> {
    inner: sqlx::Transaction<'t, DB>,
    health: &'t mut Health,
    scope: u64,
    parent: u64,
}

impl<'t, DB: Backend> Savepoint<'t, DB> {
    async fn open(
        conn: &'t mut DB::Connection,
        health: &'t mut Health,
        parent: u64,
    ) -> Result<Self, Error> {
        health.verified = false;
        let inner = conn
            .begin()
            .await
            .map_err(|source| Error::Begin { source })?;
        Ok(Savepoint {
            inner,
            health,
            scope: next_scope(),
            parent,
        })
    }

    /// Opens a savepoint inside this one.
    pub async fn savepoint(&mut self) -> Result<Savepoint<'_, DB>, Error> {
        Savepoint::open(&mut *self.inner, &mut *self.health, self.scope).await
    }

    /// Releases the savepoint and hands its wins to the enclosing
    /// transaction or savepoint `parent`: they commit with it.
    ///
    /// Each win must have been won in this savepoint (or released into it);
    /// otherwise nothing is released and the error is
    /// [`Error::ForeignWin`].
    pub async fn release<T: Staged + sealed::Convert>(self, staged: T) -> Result<T, Error> {
        if !staged.all_in(self.scope) {
            return Err(Error::ForeignWin);
        }
        self.health.verified = false;
        self.inner
            .commit()
            .await
            .map_err(|source| Error::Commit { source })?;
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
    ($ty:ident, $what:literal) => {
        impl<DB: Backend> $ty<'_, DB> {
            #[doc = concat!("Rolls the ", $what, " back. Its wins are gone.")]
            // `mut` is needed where the health is owned (`Tx`), not where
            // it is borrowed (`Savepoint`).
            #[allow(unused_mut)]
            pub async fn rollback(mut self) -> Result<(), Error> {
                self.health.verified = false;
                self.inner
                    .rollback()
                    .await
                    .map_err(|source| Error::Commit { source })
            }

            pub(crate) fn scope_id(&self) -> u64 {
                self.scope
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

scoped!(Tx, "transaction");
scoped!(Savepoint, "savepoint (the enclosing transaction goes on)");

impl<DB: Backend> core::fmt::Debug for Tx<'_, DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tx").field("scope", &self.scope).finish()
    }
}

impl<DB: Backend> core::fmt::Debug for Savepoint<'_, DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Savepoint")
            .field("scope", &self.scope)
            .field("parent", &self.parent)
            .finish()
    }
}

/// Wins from inside a transaction: one [`Won<S, K, Uncommitted>`], a tuple
/// of up to four, a `Vec` or an `Option` of them, or `()`.
pub trait Staged: sealed::Sealed {
    /// The same wins, committed.
    type Committed;
}

pub(crate) mod sealed {
    pub trait Sealed {}

    /// Out of reach of callers: only [`Tx::commit`](super::Tx::commit) may
    /// turn uncommitted wins into committed ones, and only
    /// [`Savepoint::release`](super::Savepoint::release) may move them to
    /// another scope.
    pub trait Convert: super::Staged + Sized {
        /// Whether every win was won in `scope`.
        fn all_in(&self, scope: u64) -> bool;
        fn rescope(self, scope: u64) -> Self;
        fn into_committed(self) -> Self::Committed;
    }
}

impl<S: StateMachine, K> sealed::Sealed for Won<S, K, Uncommitted> {}

impl<S: StateMachine, K> Staged for Won<S, K, Uncommitted> {
    type Committed = Won<S, K, Committed>;
}

impl<S: StateMachine, K> sealed::Convert for Won<S, K, Uncommitted> {
    fn all_in(&self, scope: u64) -> bool {
        self.scope() == scope
    }

    fn rescope(self, scope: u64) -> Self {
        Won::rescope(self, scope)
    }

    fn into_committed(self) -> Self::Committed {
        Won::rescope(self, 0)
    }
}

impl sealed::Sealed for () {}

impl Staged for () {
    type Committed = ();
}

impl sealed::Convert for () {
    fn all_in(&self, _: u64) -> bool {
        true
    }

    fn rescope(self, _: u64) -> Self {}

    fn into_committed(self) -> Self::Committed {}
}

impl<T: Staged> sealed::Sealed for Vec<T> {}

impl<T: Staged> Staged for Vec<T> {
    type Committed = Vec<T::Committed>;
}

impl<T: sealed::Convert> sealed::Convert for Vec<T> {
    fn all_in(&self, scope: u64) -> bool {
        self.iter().all(|t| t.all_in(scope))
    }

    fn rescope(self, scope: u64) -> Self {
        self.into_iter().map(|t| t.rescope(scope)).collect()
    }

    fn into_committed(self) -> Self::Committed {
        self.into_iter()
            .map(sealed::Convert::into_committed)
            .collect()
    }
}

impl<T: Staged> sealed::Sealed for Option<T> {}

impl<T: Staged> Staged for Option<T> {
    type Committed = Option<T::Committed>;
}

impl<T: sealed::Convert> sealed::Convert for Option<T> {
    fn all_in(&self, scope: u64) -> bool {
        self.as_ref().is_none_or(|t| t.all_in(scope))
    }

    fn rescope(self, scope: u64) -> Self {
        self.map(|t| t.rescope(scope))
    }

    fn into_committed(self) -> Self::Committed {
        self.map(sealed::Convert::into_committed)
    }
}

macro_rules! staged_tuple {
    ($($t:ident),+) => {
        impl<$($t: Staged),+> sealed::Sealed for ($($t,)+) {}

        impl<$($t: Staged),+> Staged for ($($t,)+) {
            type Committed = ($($t::Committed,)+);
        }

        #[allow(non_snake_case)]
        impl<$($t: sealed::Convert),+> sealed::Convert for ($($t,)+) {
            fn all_in(&self, scope: u64) -> bool {
                let ($($t,)+) = self;
                true $(&& $t.all_in(scope))+
            }

            fn rescope(self, scope: u64) -> Self {
                let ($($t,)+) = self;
                ($($t.rescope(scope),)+)
            }

            fn into_committed(self) -> Self::Committed {
                let ($($t,)+) = self;
                ($(sealed::Convert::into_committed($t),)+)
            }
        }
    };
}

staged_tuple!(A, B);
staged_tuple!(A, B, C);
staged_tuple!(A, B, C, D);
