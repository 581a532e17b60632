//! [`Begin`]: a transaction about to begin on a pool, and the deadline it
//! keeps.

use core::future::{Future, IntoFuture};
use core::pin::Pin;
use core::time::Duration;

use super::{Tx, timed_out};
use crate::deadline::retry::DEFAULT_DEADLINE;
use crate::dialect::Backend;
use crate::error::Error;

/// A transaction about to begin on a pool: what [`Tx::begin`] and
/// [`Tx::begin_with`] return. Await it for the [`Tx`]; set its deadline
/// with [`Begin::within`] first:
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use std::time::Duration;
/// use stateguard::Tx;
///
/// let tx = Tx::begin(&pool).within(Duration::from_secs(2)).await?;
/// tx.commit(()).await?;
/// # Ok(()) }
/// ```
#[must_use = "a transaction begins only when awaited"]
pub struct Begin<'p, DB: Backend> {
    pool: &'p sqlx::Pool<DB>,
    statement: Option<&'static str>,
    deadline: Duration,
}

impl<'p, DB: Backend> Begin<'p, DB> {
    pub(crate) fn new(pool: &'p sqlx::Pool<DB>, statement: Option<&'static str>) -> Self {
        Begin {
            pool,
            statement,
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// The same transaction, whose wait for a connection and for its
    /// `BEGIN` keeps `deadline` instead of [`DEFAULT_DEADLINE`]; so do its
    /// later calls ([`Tx::commit`], [`Tx::savepoint`], [`Tx::rollback`])
    /// unless [`Tx::within`] changes it.
    pub fn within(self, deadline: Duration) -> Self {
        Begin { deadline, ..self }
    }

    /// The deadline the `BEGIN` keeps.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
}

impl<'p, DB: Backend> IntoFuture for Begin<'p, DB> {
    type Output = Result<Tx<'static, DB>, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'p>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(begin_in_task(self.pool, self.statement, self.deadline))
    }
}

impl<DB: Backend> core::fmt::Debug for Begin<'_, DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Begin")
            .field("statement", &self.statement)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// Begins a transaction on `pool` with `statement` (`BEGIN` when `None`),
/// the wait for a connection included, within `deadline`, which the
/// transaction then keeps.
pub(crate) async fn begin_in_task<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    statement: Option<&'static str>,
    deadline: Duration,
) -> Result<Tx<'static, DB>, Error> {
    let multiplexed = crate::executor::marked::marked(pool);
    let untagged = crate::executor::marked::untagged(pool);
    let pool = pool.clone();
    let begin = async move {
        match statement {
            Some(statement) => {
                crate::executor::fault::statement(statement, pool.begin_with(statement)).await
            }
            None => crate::executor::fault::statement("BEGIN", pool.begin()).await,
        }
    };
    // SQLite's worker sees a command through on its own, and sqlx rolls
    // back a SQLite `BEGIN` dropped half-way: no task needed. On a server,
    // the deadline stops the wait, not the task, which keeps the connection
    // until the `BEGIN` answers and then rolls it back.
    let begun = match DB::EMBEDDED {
        true => tokio::time::timeout(deadline, begin).await,
        false => {
            tokio::time::timeout(
                deadline,
                crate::executor::task::run_to_completion("a BEGIN", begin),
            )
            .await
        }
    };
    let inner = begun
        .map_err(|_| timed_out("BEGIN", deadline, true))?
        .map_err(|source| Error::Begin { source })?;
    let mut tx = Tx::new(inner)?.within(deadline);
    tx.health.multiplexed = multiplexed;
    tx.health.untagged = untagged;
    Ok(tx)
}
