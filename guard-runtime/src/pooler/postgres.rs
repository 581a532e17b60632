//! The check and its probe, which need the PostgreSQL driver.

use core::future::{Future, IntoFuture};
use core::pin::Pin;
use core::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, PgPool, Row};

use super::{Acknowledgement, Multiplexing, Pooling, ROUNDS, ServerSession};
use crate::deadline::retry::DEFAULT_DEADLINE;
use crate::error::Error;
/// The server session a connection runs on, read without a prepared
/// statement.
const SESSION: &str = "SELECT pg_backend_pid(), pg_postmaster_start_time()::text";

/// A transaction begun, and the server session it holds, in one message:
/// both run on the same session whatever pools in between.
const BEGIN_SESSION: &str = "BEGIN; SELECT pg_backend_pid(), pg_postmaster_start_time()::text";

/// The probe's transaction, which wrote nothing, ended.
const ROLLBACK: &str = "ROLLBACK";

/// What the `transition` of the [`Error::Timeout`] of a check says.
const CALL: &str = "pooler_check";

/// Checks whether `pool`'s connections are multiplexed onto shared server
/// sessions (a pooler in transaction or statement mode), before the first
/// move. Await it; see [the module](crate::pooler) for what it does and costs.
///
/// It answers [`Error::Multiplexed`] when they are (unless
/// [acknowledged](Check::acknowledge)), [`Error::Timeout`] (`transition`
/// `pooler_check`) when its deadline runs out, and
/// [`Error::PoolerCheck`] when a statement or the connection fails.
pub fn check(pool: &PgPool) -> Check<'_> {
    Check {
        pool,
        deadline: DEFAULT_DEADLINE,
        acknowledged: None,
        untagged: false,
    }
}

/// A check about to run: what [`check`] returns. Await it for its
/// [`Pooling`].
#[must_use = "a check runs only when awaited"]
#[derive(Debug, Clone)]
pub struct Check<'a> {
    pool: &'a PgPool,
    deadline: Duration,
    acknowledged: Option<Acknowledgement>,
    untagged: bool,
}

impl<'a> Check<'a> {
    /// The same check, keeping `deadline` instead of [`DEFAULT_DEADLINE`]:
    /// waiting for the pool's connection, opening the second one and every
    /// round count against it.
    pub fn within(self, deadline: Duration) -> Self {
        Check { deadline, ..self }
    }

    /// The same check, letting a multiplexed pool through because the
    /// pooler is known to be safe: it answers
    /// [`Pooling::Multiplexed`] instead of [`Error::Multiplexed`].
    pub fn acknowledge(self, acknowledgement: Acknowledgement) -> Self {
        Check {
            acknowledged: Some(acknowledgement),
            ..self
        }
    }

    /// The same check, which, when it finds the pool
    /// [`Dedicated`](Pooling::Dedicated), has the library's moves on it run
    /// without their tags from then on: a move that returns nothing but
    /// its tag (`apply` of a machine without a version column or a history
    /// table, into a state that is not in flight, emitting no message)
    /// sends its `UPDATE` alone, as a hand-written one would, and counts
    /// the command's rows. See
    /// [untagged moves](crate::pooler#untagged-moves-on-a-dedicated-pool)
    /// for what that gives up.
    ///
    /// A multiplexed pool is not changed by it: its moves stay tagged, and
    /// a later check that finds the pool multiplexed tags them again. A
    /// pool that any check has found multiplexed stays tagged for the life
    /// of the process, even if a later check finds it dedicated.
    ///
    /// ```no_run
    /// # async fn start(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
    /// use stateguard::pooler::{self, Pooling};
    ///
    /// // A direct connection: Ok(Pooling::Dedicated { .. }), and moves untagged.
    /// let pooling = pooler::check(&pool).untagged_if_dedicated().await?;
    /// assert!(matches!(pooling, Pooling::Dedicated { .. }));
    /// # Ok(()) }
    /// ```
    pub fn untagged_if_dedicated(self) -> Self {
        Check {
            untagged: true,
            ..self
        }
    }

    /// The deadline the check keeps.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
}

impl<'a> IntoFuture for Check<'a> {
    type Output = Result<Pooling, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Pooling, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let Check {
                pool,
                deadline,
                acknowledged,
                untagged,
            } = self;
            let seen = match tokio::time::timeout(deadline, probe(pool)).await {
                Err(_) => {
                    return Err(Error::Timeout {
                        table: "",
                        transition: CALL,
                        deadline,
                        // The probe writes nothing.
                        outcome_known: true,
                    });
                }
                Ok(Err(source)) => return Err(Error::PoolerCheck { source }),
                Ok(Ok(seen)) => seen,
            };
            match seen {
                Some(_) => crate::executor::marked::mark(pool),
                None if untagged => crate::executor::marked::mark_untagged(pool),
                None => {}
            }
            match (seen, acknowledged) {
                (None, _) => Ok(Pooling::Dedicated { rounds: ROUNDS }),
                (Some(seen), Some(acknowledged)) => Ok(Pooling::Multiplexed { seen, acknowledged }),
                (Some(seen), None) => Err(Error::Multiplexed { seen }),
            }
        })
    }
}

/// The sessions the two client connections were last seen on.
#[derive(Default)]
struct Watch {
    /// The pool's connection.
    pooled: Option<ServerSession>,
    /// The second connection.
    other: Option<ServerSession>,
}

/// Which of the two connections a reading is of.
#[derive(Clone, Copy)]
enum Which {
    Pooled,
    Other,
}

impl Watch {
    /// `which` now runs on `session`: what that shows, if anything.
    fn saw(&mut self, which: Which, session: ServerSession) -> Option<Multiplexing> {
        let (own, theirs) = match which {
            Which::Pooled => (&mut self.pooled, &self.other),
            Which::Other => (&mut self.other, &self.pooled),
        };
        if theirs.as_ref() == Some(&session) {
            return Some(Multiplexing::Shared { backend: session });
        }
        match own.take() {
            Some(before) if before != session => Some(Multiplexing::Moved {
                before,
                after: session,
            }),
            _ => {
                *own = Some(session);
                None
            }
        }
    }
}

/// The probe: `Some` with the first sign of multiplexing, `None` after
/// [`ROUNDS`] rounds without one.
async fn probe(pool: &PgPool) -> Result<Option<Multiplexing>, sqlx::Error> {
    let mut pooled = pool.acquire().await?;
    // Not the pool's connection: it runs transactions that a cut-off
    // probe would leave open, so it is closed afterwards, never returned.
    let mut other = match pool.try_acquire() {
        Some(idle) => idle.detach(),
        None => PgConnection::connect_with(&pool.connect_options()).await?,
    };
    let mut watch = Watch::default();
    let mut seen = None;
    for _ in 0..ROUNDS {
        seen = round(&mut pooled, &mut other, &mut watch).await?;
        if seen.is_some() {
            break;
        }
    }
    other.close().await?;
    Ok(seen)
}

/// One round of the probe: the steps in [the module's docs](crate::pooler#the-probe).
async fn round(
    pooled: &mut PgConnection,
    other: &mut PgConnection,
    watch: &mut Watch,
) -> Result<Option<Multiplexing>, sqlx::Error> {
    if let Some(seen) = watch.saw(Which::Pooled, session(pooled, SESSION).await?) {
        return Ok(Some(seen));
    }
    if let Some(seen) = watch.saw(Which::Other, session(other, SESSION).await?) {
        return Ok(Some(seen));
    }
    let held = match session(other, BEGIN_SESSION).await {
        Ok(held) => held,
        Err(error) => return no_transactions(error).map(Some),
    };
    let seen = match watch.saw(Which::Other, held) {
        Some(seen) => Some(seen),
        None => watch.saw(Which::Pooled, session(pooled, SESSION).await?),
    };
    sqlx::raw_sql(ROLLBACK).execute(&mut *other).await?;
    Ok(seen)
}

/// A `BEGIN` refused by a pooler in statement mode (PgBouncer answers
/// 08P01 `transaction blocks not allowed in statement pooling mode`)
/// as what it shows; any other error as itself.
fn no_transactions(error: sqlx::Error) -> Result<Multiplexing, sqlx::Error> {
    match &error {
        sqlx::Error::Database(db)
            if db.code().as_deref() == Some("08P01")
                && db.message().contains("statement pooling") =>
        {
            Ok(Multiplexing::NoTransactions {
                refusal: db.message().to_owned(),
            })
        }
        _ => Err(error),
    }
}

/// The server session `conn` runs `sql` on.
///
/// Read to the end of the answer, not to its first row: a connection
/// that moved on (or closed) before the server's `ReadyForQuery`
/// leaves a transaction-mode PgBouncer a server session that is not
/// ready, which it then closes.
async fn session(conn: &mut PgConnection, sql: &'static str) -> Result<ServerSession, sqlx::Error> {
    let rows: Vec<PgRow> = sqlx::raw_sql(sql).fetch_all(&mut *conn).await?;
    let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    Ok(ServerSession {
        pid: row.try_get(0)?,
        server_started: row.try_get(1)?,
    })
}

#[cfg(test)]
mod tests {
    use super::{Multiplexing, ServerSession, Watch, Which};

    fn at(pid: i32) -> ServerSession {
        ServerSession {
            pid,
            server_started: "2026-01-01 00:00:00+00".into(),
        }
    }

    #[test]
    fn one_session_each_is_not_multiplexed() {
        let mut watch = Watch::default();
        for _ in 0..3 {
            assert_eq!(watch.saw(Which::Pooled, at(1)), None);
            assert_eq!(watch.saw(Which::Other, at(2)), None);
        }
    }

    #[test]
    fn a_moved_connection_is_multiplexed() {
        let mut watch = Watch::default();
        assert_eq!(watch.saw(Which::Pooled, at(1)), None);
        assert_eq!(
            watch.saw(Which::Pooled, at(3)),
            Some(Multiplexing::Moved {
                before: at(1),
                after: at(3),
            })
        );
    }

    #[test]
    fn a_shared_session_is_multiplexed() {
        let mut watch = Watch::default();
        assert_eq!(watch.saw(Which::Pooled, at(1)), None);
        assert_eq!(
            watch.saw(Which::Other, at(1)),
            Some(Multiplexing::Shared { backend: at(1) })
        );
    }

    #[test]
    fn equal_pids_of_two_servers_are_two_sessions() {
        let mut watch = Watch::default();
        let elsewhere = ServerSession {
            pid: 1,
            server_started: "2026-02-01 00:00:00+00".into(),
        };
        assert_eq!(watch.saw(Which::Pooled, at(1)), None);
        assert_eq!(watch.saw(Which::Other, elsewhere), None);
    }
}
