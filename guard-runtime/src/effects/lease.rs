//! Leases on rows in an in-flight state: who holds one, renewing it while
//! an effect runs, taking it over once it ran out, and the follow-up that
//! only the holder may run.
//!
//! A lease is named by its token, the row's `since` stamp read as an
//! integer (`guard-macros/src/sql/mod.rs`, `lease_token`). Entering the state, a takeover and a
//! renewal each stamp `since` anew, so a worker whose lease was taken over
//! holds a token the row no longer has: its follow-up matches nothing and
//! reads [`Settled::LeaseLost`].

use core::future::Future;

use crate::StateMachine;
use crate::deadline::retry::{MAX_ATTEMPTS, backoff, random};
use crate::dialect::Sql;
use crate::dialect::connection::read_back_failed;
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Column, Statement};
use crate::effects::verdict::{Chosen, FollowUpValues};
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::executor::sealed::Run;
use crate::machine::key::{BindError, RowKey};
use crate::machine::{InFlightDef, RetryDef};
use crate::outcome::effect_key_prefix;
use crate::transition::bind::{self, Values};
use crate::transition::note::Note;
use crate::transition::row::Read;
use crate::transition::{Transition, key_arguments};

/// What [`Error::Timeout`] names a lease's renewal cut off by a deadline.
pub(crate) const RENEW: &str = "renew";
/// What [`Error::Timeout`] names the takeover of expired rows cut off by a
/// deadline.
pub(crate) const TAKE_OVER: &str = "take_over";

/// Where a follow-up left the row.
pub(crate) enum Settled<S> {
    /// This call's write landed: the row is in this state (a follow-up's
    /// target; for a postponement, still the in-flight state).
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

/// The arguments of a statement that needs the lease: the key, the
/// occurrence and the lease token, as its plan takes them.
fn leased_arguments<S, DB, K>(
    statement: Statement,
    key: &K,
    occurrence: i64,
    lease: i64,
) -> Result<DB::Args, sqlx::Error>
where
    S: StateMachine,
    DB: Backend,
    K: RowKey<DB, S::KeyShape>,
{
    let key = bind::key(key);
    let values = Values {
        key: Some(&key),
        expected: Some(occurrence),
        token: Some(lease),
        ..Values::NONE
    };
    bind::arguments(statement, &values).map_err(BindError::into_sqlx)
}

/// The wait after attempt `attempt` (from 1) of a `retry(…)` state: the
/// first wait doubled per attempt before it, at most the longest, plus up
/// to a quarter more at random, so that rows that failed together spread
/// out. Never shorter than the backoff declares.
pub(crate) fn wait_after(def: &RetryDef, attempt: u32) -> core::time::Duration {
    let (first, longest) = def.backoff();
    let doublings = attempt.saturating_sub(1).min(40);
    let base = first.saturating_mul(1 << doublings.min(31)).min(longest);
    let spread = u64::try_from(base.as_nanos() / 4).unwrap_or(u64::MAX);
    base + core::time::Duration::from_nanos(random() % spread.saturating_add(1))
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
    E: Runner,
    K: RowKey<E::Database, S::KeyShape>,
{
    type DB<E> = <E as Run>::Db;
    let transition = chosen.transition.transition();
    let target = chosen.transition.target();
    let effect = || effect_key_prefix::<S>(&key.key_text(), target);
    let update = <DB<E> as Driver>::statement(chosen.sql);
    let read = <DB<E> as Driver>::statement(in_flight.follow_up_read_sql());
    // With a history table or a message to emit on SQLite and MySQL: the
    // inserts that run just before the follow-up, in one transaction.
    let inserts: Vec<Statement> = [
        &in_flight.follow_up_history_insert_sql()[usize::from(chosen.failed)],
        &in_flight.follow_up_outbox_insert_sql()[usize::from(chosen.failed)],
    ]
    .into_iter()
    .map(<DB<E> as Driver>::statement)
    .filter(|insert| !insert.is_empty())
    .collect();
    let versioned = S::MACHINE.version().is_some();
    // The follow-up, its history row and its losing read each bind what
    // their plans name of these.
    let (key_parts, chosen_values) = (bind::key(key), chosen.values::<DB<E>>()?);
    let values = Values {
        key: Some(&key_parts),
        values: Some(&chosen_values),
        note: Some(&chosen.note),
        expected: Some(occurrence),
        token: Some(lease),
        effect: Some(&effect),
        ..Values::NONE
    };
    let arguments = |statement| {
        bind::arguments::<DB<E>>(statement, &values).map_err(|e| transition.keys_error(e))
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let args = arguments(update)?;
        let moved = match inserts.is_empty() {
            // Without a history table or a message, or on PostgreSQL, whose
            // follow-up writes them in the same statement.
            true => executor.changed(update, args).await,
            // On SQLite and MySQL: the history row, the message and the
            // follow-up in one transaction.
            false => {
                let inserts = inserts
                    .iter()
                    .map(|insert| Ok((insert.text(), arguments(*insert)?)))
                    .collect::<Result<Vec<_>, Error>>()?;
                executor
                    .with_inserts(inserts, update.text(), args, false, None)
                    .await
                    .map(|moved| moved.updated)
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
        let args = arguments(read)?;
        let row = match executor.row(read, args).await {
            Ok(row) => row,
            Err(error) => {
                transition.before_retry(executor, error, attempts).await?;
                continue;
            }
        };
        let Some(LeaseRow {
            current,
            version,
            token,
        }) = found::<S, DB<E>>(transition, read, row)?
        else {
            return Ok(Settled::Vanished);
        };
        // This very transition already finished this occurrence (a
        // recovery got there first): the version moved on by one.
        if current == transition.target() && (!versioned || version == occurrence + 1) {
            return Ok(Settled::Already(current));
        }
        let found = LeaseRow {
            current,
            version,
            token,
        };
        if let Some(missed) = found.missed(state, occurrence, lease) {
            return Ok(missed);
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
pub(crate) struct LeaseRow<S> {
    pub(crate) current: S,
    pub(crate) version: i64,
    pub(crate) token: i64,
}

impl<S: StateMachine> LeaseRow<S> {
    /// Why a statement fenced on occurrence `occurrence` of `state` under
    /// `lease` matched nothing: the row left that occurrence, or another
    /// worker holds it now. `None` when it is still there under the lease
    /// (it moved away and back in between: try again).
    pub(crate) fn missed(self, state: S, occurrence: i64, lease: i64) -> Option<Settled<S>> {
        if self.current != state || self.version != occurrence {
            return Some(Settled::Superseded(self.current));
        }
        (self.token != lease).then_some(Settled::LeaseLost(self.current))
    }
}

fn found<S: StateMachine, DB: Backend>(
    transition: Transition<S>,
    read: Statement,
    row: Option<DB::Row>,
) -> Result<Option<LeaseRow<S>>, Error> {
    let Some(row) = row else {
        return Ok(None);
    };
    let row = Read::<DB>::new(read, &row);
    let current = transition.read_status(&row)?;
    let int = |column| row.int(column).map_err(|e| transition.db_error(e));
    Ok(Some(LeaseRow {
        current,
        version: int(Column::Occurrence)?,
        token: int(Column::Token)?,
    }))
}

/// The row as it is, for a worker that found its lease gone before its
/// effect ran.
pub(crate) async fn read<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    transition: Transition<S>,
    key: &K,
) -> Result<Option<LeaseRow<S>>, Error>
where
    S: StateMachine,
    E: Runner,
    K: RowKey<E::Database, S::KeyShape>,
{
    let read = <E::Database as Driver>::statement(in_flight.follow_up_read_sql());
    let args = key_arguments::<E::Database, S::KeyShape, K>(read, key)
        .map_err(|e| transition.db_error(e))?;
    let row = executor
        .row(read, args)
        .await
        .map_err(|e| transition.db_error(e))?;
    found::<S, E::Database>(transition, read, row)
}

/// A lease just stamped: its token and, from a takeover of a row whose
/// state counts attempts, the attempt the takeover counted.
pub(crate) struct Stamped {
    pub(crate) token: i64,
    pub(crate) attempt: Option<u32>,
}

/// Runs a statement that stamps a new lease (a takeover with `sql` =
/// `claim_sql`, or a renewal with `renew_sql`) and returns the new token,
/// or `None` when it matched no row.
pub(crate) async fn stamp<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    sql: &'static Sql,
    args: <E::Database as Driver>::Args,
    key: &K,
) -> Result<Option<Stamped>, sqlx::Error>
where
    S: StateMachine,
    E: Runner,
    K: RowKey<E::Database, S::KeyShape>,
{
    type DB<E> = <E as Run>::Db;
    let statement = <DB<E> as Driver>::statement(sql);
    let token = |read: Statement, row: Option<_>| {
        row.map(|row| {
            let row = Read::<DB<E>>::new(read, &row);
            let attempt = match read.returns().contains(&Column::Attempt) {
                true => Some(attempt_of(row.int(Column::Attempt)?)),
                false => None,
            };
            Ok(Stamped {
                token: row.int(Column::Token)?,
                attempt,
            })
        })
        .transpose()
    };
    if <DB<E> as Driver>::RETURNING {
        // `RETURNING token`.
        let row = executor.row(statement, args).await?;
        return token(statement, row);
    }
    // MySQL: read the new token back on the same connection.
    let read = <DB<E> as Driver>::statement(in_flight.lease_read_sql());
    let key_args = key_arguments::<DB<E>, S::KeyShape, K>(read, key)?;
    let (done, row) = executor
        .execute_then_fetch(
            statement.text(),
            args,
            read.text(),
            key_args,
            <DB<E> as Driver>::changed,
        )
        .await?;
    if <DB<E> as Driver>::rows_affected(&done) != 1 {
        return Ok(None);
    }
    // The lease is stamped: a read that fails leaves its token unknown.
    token(read, row.map_err(read_back_failed)?)
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
    E: Runner,
    K: RowKey<E::Database, S::KeyShape>,
{
    let renew = <E::Database as Driver>::statement(in_flight.renew_sql());
    let args = leased_arguments::<S, E::Database, K>(renew, key, occurrence, lease)?;
    let stamped = stamp(executor, in_flight, in_flight.renew_sql(), args, key).await?;
    Ok(stamped.map(|stamped| stamped.token))
}

/// An attempt count as stored: at least 1, as a takeover leaves it.
pub(crate) fn attempt_of(stored: i64) -> u32 {
    u32::try_from(stored.max(1)).unwrap_or(u32::MAX)
}

/// What [`Error::Timeout`] names a "try again later" cut off by a
/// deadline.
pub(crate) const POSTPONE: &str = "retry_later";

/// Sets when the row's next attempt is due, `wait` from now by the
/// database's clock, only while the row is still in occurrence
/// `occurrence` of `state` under the lease `lease`: from then on recovery
/// takes it over at that time, not when the lease runs out. Where the
/// state keeps the last retry's reason, `reason` is written with it (NULL
/// for none). [`Settled::Applied`] with `state` when it did.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn postpone<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    postpone: &'static Sql,
    state: S,
    key: &K,
    occurrence: i64,
    lease: i64,
    wait: core::time::Duration,
    reason: Option<&str>,
) -> Result<Settled<S>, Error>
where
    S: StateMachine,
    E: Runner,
    K: RowKey<E::Database, S::KeyShape>,
{
    type DB<E> = <E as Run>::Db;
    // Errors name the effect, which `done` names while it runs.
    let transition = in_flight.done().transition();
    let update = <DB<E> as Driver>::statement(postpone);
    let read = <DB<E> as Driver>::statement(in_flight.follow_up_read_sql());
    let key_parts = bind::key(key);
    // The reason goes where the state keeps the last one (`last_error`),
    // bound as a note's reason is.
    let note = match reason {
        Some(reason) => Note::NONE.because(reason),
        None => Note::NONE,
    };
    let values = Values {
        key: Some(&key_parts),
        expected: Some(occurrence),
        token: Some(lease),
        delay: Some(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
        note: Some(&note),
        ..Values::NONE
    };
    let arguments = |statement| {
        bind::arguments::<DB<E>>(statement, &values).map_err(|e| transition.keys_error(e))
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        match executor.changed(update, arguments(update)?).await {
            Ok(1) => return Ok(Settled::Applied(state)),
            Ok(_) => {}
            Err(error) => {
                transition.before_retry(executor, error, attempts).await?;
                continue;
            }
        }
        let row = match executor.row(read, arguments(read)?).await {
            Ok(row) => row,
            Err(error) => {
                transition.before_retry(executor, error, attempts).await?;
                continue;
            }
        };
        let Some(found) = found::<S, DB<E>>(transition, read, row)? else {
            return Ok(Settled::Vanished);
        };
        if let Some(missed) = found.missed(state, occurrence, lease) {
            return Ok(missed);
        }
        if attempts >= MAX_ATTEMPTS {
            return Err(transition.contention(attempts, None));
        }
        tokio::time::sleep(backoff(attempts)).await;
    }
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
    E: Runner,
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
