//! Leases on rows in an in-flight state: who holds one, renewing it while
//! an effect runs, taking it over once it ran out, and the follow-up that
//! only the holder may run.
//!
//! A lease is named by its token, the row's `since` stamp read as an
//! integer (`sql.rs`, `lease_token`). Entering the state, a takeover and a
//! renewal each stamp `since` anew, so a worker whose lease was taken over
//! holds a token the row no longer has: its follow-up matches nothing and
//! reads [`Settled::LeaseLost`].

use core::future::Future;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::dialect::Sql;
use crate::dialect::sealed::Dialect;
use crate::error::Error;
use crate::executor::Executor;
use crate::executor::sealed::Run;
use crate::key::RowKey;
use crate::machine::InFlightDef;
use crate::retry::{MAX_ATTEMPTS, backoff};
use crate::transition::{Transition, key_arguments};
use crate::verdict::{Chosen, FollowUpValues};

/// What [`Error::Timeout`] names a lease's renewal cut off by a deadline.
pub(crate) const RENEW: &str = "renew";
/// What [`Error::Timeout`] names the takeover of expired rows cut off by a
/// deadline.
pub(crate) const TAKE_OVER: &str = "take_over";

/// Where a follow-up left the row.
pub(crate) enum Settled<S> {
    /// This call moved it to the transition's target.
    Applied(S),
    /// The same transition had already finished this occurrence.
    Already(S),
    /// Another worker took the lease over and holds the row now.
    LeaseLost(S),
    /// The row left the occurrence some other way: it is in this state.
    Superseded(S),
    /// The row is gone.
    Vanished,
}

/// Key, then the occurrence where the machine has a version column, then
/// the lease token: the parameters of the statements that need the lease.
fn leased_arguments<S, DB, K>(key: &K, occurrence: i64, lease: i64) -> Result<DB::Args, sqlx::Error>
where
    S: StateMachine,
    DB: Backend,
    K: RowKey<DB, S::KeyShape>,
{
    let mut args = key_arguments::<DB, S::KeyShape, K>(key)?;
    lease_arguments::<S, DB>(&mut args, occurrence, lease)?;
    Ok(args)
}

/// The occurrence, where the machine has a version column, then the lease
/// token.
fn lease_arguments<S, DB>(
    args: &mut DB::Args,
    occurrence: i64,
    lease: i64,
) -> Result<(), sqlx::Error>
where
    S: StateMachine,
    DB: Backend,
{
    if S::MACHINE.version().is_some() {
        DB::bind_int(args, occurrence)?;
    }
    DB::bind_int(args, lease)
}

/// A follow-up's parameters: the key, the verdict's values, the occurrence
/// and the lease token, in the order of the dialect's placeholders
/// (MySQL's `SET` values come before its `WHERE`).
fn follow_up_arguments<S, DB, K>(
    chosen: &Chosen<S>,
    key: &K,
    occurrence: i64,
    lease: i64,
) -> Result<DB::Args, Error>
where
    S: FollowUpValues<DB>,
    DB: Backend,
    K: RowKey<DB, S::KeyShape>,
{
    let db_error = |e| chosen.transition.transition().db_error(e);
    let mut args = DB::Args::default();
    if DB::PARAMS_FIRST {
        chosen.bind::<DB>(&mut args)?;
        key.bind(&mut args).map_err(db_error)?;
    } else {
        key.bind(&mut args).map_err(db_error)?;
        chosen.bind::<DB>(&mut args)?;
    }
    lease_arguments::<S, DB>(&mut args, occurrence, lease).map_err(db_error)?;
    Ok(args)
}

/// Runs the follow-up the verdict chose (the state's `done` or `failed`),
/// binding its values, only while the row is still in occurrence
/// `occurrence` of `state` under the lease `lease`.
pub(crate) async fn settle<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    chosen: &Chosen<S>,
    key: &K,
    occurrence: i64,
    lease: i64,
) -> Result<Settled<S>, Error>
where
    S: FollowUpValues<E::Database>,
    E: Executor,
    K: RowKey<E::Database, S::KeyShape>,
{
    type DB<E> = <E as Run>::Database;
    let transition = chosen.transition.transition();
    let update = <DB<E> as Dialect>::sql(chosen.sql);
    let read = <DB<E> as Dialect>::sql(in_flight.follow_up_read_sql());
    let log = <DB<E> as Dialect>::sql(&in_flight.follow_up_log_sql()[usize::from(chosen.failed)]);
    let versioned = S::MACHINE.version().is_some();
    let history = S::MACHINE.history_table().is_some();
    let db_error = |e| transition.db_error(e);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut args = follow_up_arguments::<S, DB<E>, K>(chosen, key, occurrence, lease)?;
        let moved = match log.is_empty() {
            // PostgreSQL with a history table writes the history row in the
            // follow-up's statement: the note's placeholders come last.
            true => {
                if history {
                    chosen.note.bind::<DB<E>>(&mut args).map_err(db_error)?;
                }
                executor
                    .execute(update, args)
                    .await
                    .map(|done| <DB<E> as Dialect>::rows_affected(&done))
            }
            // With a history table on SQLite and MySQL: the history row
            // and the follow-up in one transaction. SQLite numbers the
            // log's placeholders as the follow-up's, then the note's;
            // MySQL's take the note, the key, the occurrence and the lease.
            false => {
                let mut log_args = match <DB<E> as Dialect>::PARAMS_FIRST {
                    true => {
                        let mut log_args = <DB<E> as Dialect>::Args::default();
                        chosen.note.bind::<DB<E>>(&mut log_args).map_err(db_error)?;
                        key.bind(&mut log_args).map_err(db_error)?;
                        lease_arguments::<S, DB<E>>(&mut log_args, occurrence, lease)
                            .map_err(db_error)?;
                        log_args
                    }
                    false => follow_up_arguments::<S, DB<E>, K>(chosen, key, occurrence, lease)?,
                };
                if !<DB<E> as Dialect>::PARAMS_FIRST {
                    chosen.note.bind::<DB<E>>(&mut log_args).map_err(db_error)?;
                }
                executor
                    .logged(log, log_args, update, args, false, None)
                    .await
                    .map(|logged| logged.updated)
            }
        };
        match moved {
            Ok(1) => return Ok(Settled::Applied(transition.target())),
            Ok(_) => {}
            Err(error) => {
                transition.before_retry(executor, error, attempts).await?;
                continue;
            }
        }
        // No row matched: read the row with a statement of its own.
        let args =
            key_arguments::<DB<E>, S::KeyShape, K>(key).map_err(|e| transition.db_error(e))?;
        let row = match executor.fetch_optional(read, args).await {
            Ok(row) => row,
            Err(error) => {
                transition.before_retry(executor, error, attempts).await?;
                continue;
            }
        };
        let Some(Found {
            current,
            version,
            token,
        }) = found::<S, DB<E>>(transition, row)?
        else {
            return Ok(Settled::Vanished);
        };
        // This very transition already finished this occurrence (a
        // recovery got there first): the version moved on by one.
        if current == transition.target() && (!versioned || version == occurrence + 1) {
            return Ok(Settled::Already(current));
        }
        if current != state || version != occurrence {
            return Ok(Settled::Superseded(current));
        }
        if token != lease {
            return Ok(Settled::LeaseLost(current));
        }
        // Same state, occurrence and lease, yet nothing matched: it moved
        // away and back in between. Try again, bounded.
        if attempts >= MAX_ATTEMPTS {
            return Err(transition.contention(attempts, None));
        }
        tokio::time::sleep(backoff(attempts)).await;
    }
}

/// The row as a follow-up's losing path reads it.
pub(crate) struct Found<S> {
    pub(crate) current: S,
    pub(crate) version: i64,
    pub(crate) token: i64,
}

fn found<S: StateMachine, DB: Backend>(
    transition: Transition<S>,
    row: Option<DB::Row>,
) -> Result<Option<Found<S>>, Error> {
    let Some(row) = row else {
        return Ok(None);
    };
    let current = transition.read_status::<DB>(&row)?;
    let int = |i| DB::int(&row, i).map_err(|e| transition.db_error(e));
    Ok(Some(Found {
        current,
        version: int(1)?,
        token: int(2)?,
    }))
}

/// The row as it is, for a worker that found its lease gone before its
/// effect ran.
pub(crate) async fn read<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    transition: Transition<S>,
    key: &K,
) -> Result<Option<Found<S>>, Error>
where
    S: StateMachine,
    E: Executor,
    K: RowKey<E::Database, S::KeyShape>,
{
    let read = <E::Database as Dialect>::sql(in_flight.follow_up_read_sql());
    let args =
        key_arguments::<E::Database, S::KeyShape, K>(key).map_err(|e| transition.db_error(e))?;
    let row = executor
        .fetch_optional(read, args)
        .await
        .map_err(|e| transition.db_error(e))?;
    found::<S, E::Database>(transition, row)
}

/// Runs a statement that stamps a new lease (a takeover with `sql` =
/// `claim_sql`, or a renewal with `renew_sql`) and returns the new token,
/// or `None` when it matched no row.
pub(crate) async fn stamp<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    sql: &'static Sql,
    args: <E::Database as Dialect>::Args,
    key: &K,
) -> Result<Option<i64>, sqlx::Error>
where
    S: StateMachine,
    E: Executor,
    K: RowKey<E::Database, S::KeyShape>,
{
    type DB<E> = <E as Run>::Database;
    let statement = <DB<E> as Dialect>::sql(sql);
    if <DB<E> as Dialect>::RETURNING {
        // `RETURNING token`.
        let row = executor.fetch_optional(statement, args).await?;
        return row.map(|row| <DB<E> as Dialect>::int(&row, 0)).transpose();
    }
    // MySQL: read the new token back on the same connection.
    let read = <DB<E> as Dialect>::sql(in_flight.lease_read_sql());
    let key_args = key_arguments::<DB<E>, S::KeyShape, K>(key)?;
    let (done, row) = executor
        .execute_then_fetch(statement, args, read, key_args, <DB<E> as Dialect>::changed)
        .await?;
    if <DB<E> as Dialect>::rows_affected(&done) != 1 {
        return Ok(None);
    }
    row.map(|row| <DB<E> as Dialect>::int(&row, 0)).transpose()
}

/// Renews the lease `lease` on the row: `Some(new token)`, or `None` when
/// the row is no longer this occurrence of the state under this lease.
pub(crate) async fn renew<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    key: &K,
    occurrence: i64,
    lease: i64,
) -> Result<Option<i64>, sqlx::Error>
where
    S: StateMachine,
    E: Executor,
    K: RowKey<E::Database, S::KeyShape>,
{
    let args = leased_arguments::<S, E::Database, K>(key, occurrence, lease)?;
    stamp(executor, in_flight, in_flight.renew_sql(), args, key).await
}

/// Runs `effect` while renewing the lease every third of its length, so
/// that an effect longer than the lease keeps its row, and returns the
/// effect's output with the token the lease has at the end.
///
/// A renewal is never cut off mid-statement (its new token would be
/// lost): when the effect ends during one, the renewal completes first. A
/// renewal that finds the lease gone stops renewing; the follow-up then
/// reads [`Settled::LeaseLost`]. A renewal that fails is tried again at the
/// next tick.
pub(crate) async fn while_renewing<S, K, E, Fut>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    key: &K,
    occurrence: i64,
    lease: i64,
    effect: Fut,
) -> (Fut::Output, i64)
where
    S: StateMachine,
    E: Executor,
    K: RowKey<E::Database, S::KeyShape>,
    Fut: Future,
{
    let period = (in_flight.lease() / 3).max(core::time::Duration::from_millis(1));
    let done = tokio::sync::Notify::new();
    let run = async {
        let output = effect.await;
        done.notify_one();
        output
    };
    let keep = async {
        let mut token = lease;
        loop {
            tokio::select! {
                () = done.notified() => return token,
                () = tokio::time::sleep(period) => {}
            }
            match renew::<S, K, E>(executor, in_flight, key, occurrence, token).await {
                Ok(Some(renewed)) => token = renewed,
                Ok(None) => {
                    // Taken over, or moved on: nothing left to renew.
                    done.notified().await;
                    return token;
                }
                Err(error) => tracing::debug!(
                    table = S::MACHINE.table(),
                    %error,
                    "renewing a lease failed; trying again at the next tick"
                ),
            }
        }
    };
    tokio::join!(run, keep)
}
