//! [`Savepoint`]: a savepoint inside a [`Tx`](crate::Tx) or another savepoint, whose
//! wins [`Savepoint::release`] hands on to the enclosing scope.

use core::time::Duration;

use sqlx::Connection;

use super::staged::sealed;
use super::{Staged, TxHealth, next_scope, timed_out};
use crate::dialect::Backend;
use crate::error::{Error, Misuse};

/// A savepoint inside a [`Tx`](crate::Tx) (or inside another savepoint).
///
/// Wins inside it are its own: [`Savepoint::release`] hands them to the
/// enclosing transaction, and [`Savepoint::rollback`] (or dropping it)
/// rolls its work back and leaves them unable to commit.
///
/// Its calls keep the deadline of the transaction or savepoint it was
/// opened in, unless [`Savepoint::within`] says otherwise. A call cut off
/// by it ends in [`Error::Timeout`] with `outcome_known: true`, and leaves
/// the whole transaction unable to commit ([`Tx::commit`](crate::Tx::commit) answers
/// [`Error::RolledBack`]): nothing of it commits.
pub struct Savepoint<'t, DB: Backend> {
    pub(super) inner: sqlx::Transaction<'t, DB>,
    pub(super) health: &'t mut TxHealth,
    pub(super) scope: u64,
    pub(super) parent: u64,
    pub(super) deadline: Duration,
}

impl<'t, DB: Backend> Savepoint<'t, DB> {
    pub(super) async fn open(
        conn: &'t mut DB::Connection,
        health: &'t mut TxHealth,
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
    /// off, as [`Tx::savepoint`](crate::Tx::savepoint).
    pub async fn savepoint(&mut self) -> Result<Savepoint<'_, DB>, Error> {
        let deadline = self.deadline;
        Savepoint::open(&mut *self.inner, &mut *self.health, self.scope, deadline).await
    }

    /// Releases the savepoint and hands its wins to the enclosing
    /// transaction or savepoint `parent`: they commit with it.
    ///
    /// Each win must have been won in this savepoint (or released into it);
    /// otherwise nothing is released and the error is
    /// [`Misuse::ForeignWin`](crate::Misuse::ForeignWin).
    ///
    /// The `RELEASE SAVEPOINT` keeps the savepoint's deadline. Cut off, it
    /// ends in [`Error::Timeout`] with `outcome_known: true`, the wins are
    /// gone, and the transaction can no longer commit ([`Tx::commit`](crate::Tx::commit)
    /// answers [`Error::RolledBack`]).
    pub async fn release<T: Staged + sealed::Convert>(self, staged: T) -> Result<T, Error> {
        if !staged.all_in(self.scope) {
            return Err(Error::Misuse(Misuse::ForeignWin));
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

    pub(crate) fn parts(&mut self) -> (&mut DB::Connection, &mut TxHealth) {
        (&mut self.inner, &mut *self.health)
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
