//! A recovery pass that re-drives its rows as one batch, on
//! [`finish_many`](crate::finish_many).

use tracing::Instrument;

use crate::StateMachine;
use crate::deadline::call::{Sent, bounded};
use crate::dialect::{Backend, Column};
use crate::effects::effect_fn::EffectFn;
use crate::effects::finish_many::{Stop, Unstarted, finish_many_until};
use crate::effects::finished::Finished;
use crate::effects::follow_up::in_flight_def;
use crate::effects::lease::{self};
use crate::effects::verdict::FollowUpValues;
use crate::error::{Error, Misuse};
use crate::executor::proven::Proven;
use crate::machine::InFlightDef;
use crate::machine::key::BatchKey;
use crate::outcome::{Committed, LeasedAt, Won};
use crate::telemetry;
use crate::transition::bind::{self, Values};
use crate::transition::row::Read;

use super::expired::{claim_on, limit_arguments, recovery_error};
use super::{Recovered, SupersededRow};

/// [`recover_many`](crate::recover_many), told by `stop` to start no more effects: the rows
/// taken over whose effect had not started are released again, counted in
/// [`Unstarted`] and nowhere in the report.
pub(crate) async fn recover_many_until<S, K, DB, F>(
    pool: &sqlx::Pool<DB>,
    state: S,
    limit: u32,
    concurrency: usize,
    effect: F,
    stop: Stop,
) -> Result<(Recovered, Unstarted), Error>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
    F: EffectFn<S, K>,
{
    let in_flight = in_flight_def(state);
    let done = in_flight.as_ref().map_or("", |f| f.done().name());
    let span = telemetry::span!("stateguard.recover", S, DB, "UPDATE", done);
    let report = async {
        in_flight?;
        if concurrency == 0 {
            return Err(Error::Misuse(Misuse::BatchOfWins {
                machine: S::MACHINE.name(),
                reason: "a concurrency of 0 runs no effect",
            }));
        }
        let (taken, lost) = take_over_batch::<S, K, DB>(pool, state, limit).await?;
        let mut report = Recovered {
            claimed: taken.len(),
            lost,
            ..Recovered::default()
        };
        let (rows, unstarted) = finish_many_until(pool, taken, concurrency, effect, stop).await?;
        report.claimed -= unstarted.released + unstarted.left;
        for row in rows {
            match row.finished {
                Ok(Finished::Done { .. }) => report.done += 1,
                Ok(Finished::Failed { .. }) => report.failed += 1,
                Ok(Finished::RetryLater) => report.retry_later += 1,
                Ok(Finished::GaveUp { .. }) => report.gave_up += 1,
                Ok(Finished::Superseded { current }) => report.superseded.push(SupersededRow {
                    effect_key: row.effect_key,
                    current: current.as_str(),
                }),
                Ok(Finished::LeaseLost { .. } | Finished::Skipped { .. }) => {
                    report.lease_lost += 1;
                }
                Err(error) => report.errors.push(error),
            }
        }
        Ok((report, unstarted))
    }
    .instrument(span.clone())
    .await;
    match &report {
        Ok((report, _)) => {
            span.record("stateguard.outcome", "recovered");
            span.record("stateguard.rows", report.claimed);
            telemetry::recovered(S::MACHINE.name(), state.as_str(), report);
        }
        Err(_) => {
            span.record("stateguard.outcome", "error");
        }
    }
    report
}

/// [`recover_many`](crate::recover_many)'s takeover, within [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE):
/// PostgreSQL's and SQLite's one statement; on MySQL the expired rows
/// locked (`SKIP LOCKED`), taken over by one update and read back, in one
/// short transaction, tried again when the database rolls it back. The
/// rows taken over, and those another recovery got to first.
async fn take_over_batch<S, K, DB>(
    pool: &sqlx::Pool<DB>,
    state: S,
    limit: u32,
) -> Result<(Vec<Won<S, K, Committed>>, usize), Error>
where
    S: StateMachine,
    DB: Backend,
    K: BatchKey<S, DB>,
{
    let deadline = crate::deadline::retry::DEFAULT_DEADLINE;
    let in_flight = in_flight_def(state)?;
    let sent = Sent::default();
    if DB::statement(in_flight.expired_locked_sql()).is_empty() {
        let mut executor = pool;
        let claim = claim_on::<S, K, _>(&mut executor, state, limit, &sent, lease::TAKE_OVER);
        return bounded(S::MACHINE.table(), lease::TAKE_OVER, deadline, &sent, claim).await;
    }
    sent.write();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let once = take_over_locked::<S, K, DB>(pool, in_flight, state, limit, deadline);
        let error = match bounded(S::MACHINE.table(), lease::TAKE_OVER, deadline, &sent, once).await
        {
            Ok(taken) => return Ok((taken, 0)),
            Err(error) => error,
        };
        if !error.retries_whole::<DB>() || attempts >= crate::deadline::retry::MAX_ATTEMPTS {
            return Err(error);
        }
        tokio::time::sleep(crate::deadline::retry::backoff(attempts)).await;
    }
}

/// MySQL: one attempt of [`take_over_batch`]'s transaction.
async fn take_over_locked<S, K, DB>(
    pool: &sqlx::Pool<DB>,
    in_flight: &'static InFlightDef<S>,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
) -> Result<Vec<Won<S, K, Committed>>, Error>
where
    S: StateMachine,
    DB: Backend,
    K: BatchKey<S, DB>,
{
    // A deadlock or busy database rolled the transaction back: the caller
    // tries it again whole.
    let tx_error = |source: sqlx::Error| match DB::is_retryable(&source) {
        true => Error::RetryTransaction {
            table: S::MACHINE.table(),
            transition: lease::TAKE_OVER,
            source,
        },
        false => recovery_error(state, source),
    };
    let db_error = |source| recovery_error(state, source);
    let mut tx = crate::executor::tx::Tx::begin(pool)
        .within(deadline)
        .await?;
    // Before the locking read, every statement the takeover sends
    // (`Driver::PREPARES_FIRST`).
    let statements = DB::texts([
        in_flight.expired_locked_sql(),
        in_flight.take_over_keyed_sql(),
        in_flight.read_many_sql(),
    ]);
    crate::executor::sealed::Run::prepare_first(&mut &mut tx, statements)
        .await
        .map_err(tx_error)?;
    let locked = DB::statement(in_flight.expired_locked_sql());
    let args = limit_arguments::<DB>(locked, limit).map_err(db_error)?;
    let rows = (&mut tx).rows(locked, args).await.map_err(tx_error)?;
    let mut keys = rows
        .iter()
        .map(|row| Read::<DB>::new(locked, row).key::<K, S::KeyShape>())
        .collect::<Result<Vec<K>, _>>()
        .map_err(db_error)?;
    if keys.is_empty() {
        tx.commit(()).await?;
        return Ok(Vec::new());
    }
    keys.sort();
    keys.dedup();
    let keys: Vec<&K> = keys.iter().collect();
    let parts = bind::rows::<S::KeyShape, K>(&keys, &[]);
    let key_parts = parts.keys();
    let values = Values {
        keys: Some(&key_parts),
        ..Values::NONE
    };
    let update = DB::statement(in_flight.take_over_keyed_sql());
    let args = bind::arguments(update, &values).map_err(|e| db_error(e.into_sqlx()))?;
    // Before the statement that stamps the leases: each is at most this
    // old.
    let stamped_at = LeasedAt(Some(std::time::Instant::now()));
    let moved = (&mut tx).changed(update, args).await.map_err(tx_error)?;
    if moved != keys.len() as u64 {
        return Err(db_error(sqlx::Error::Protocol(format!(
            "a takeover moved {moved} of the {} rows it locked",
            keys.len()
        ))));
    }
    // The new leases, and the attempts they counted.
    let read = DB::statement(in_flight.read_many_sql());
    let args = bind::arguments(read, &values).map_err(|e| db_error(e.into_sqlx()))?;
    let rows = (&mut tx).rows(read, args).await.map_err(tx_error)?;
    let taken = rows
        .iter()
        .map(|row| {
            let row = Read::<DB>::new(read, row);
            let key = row.key::<K, S::KeyShape>().map_err(db_error)?;
            let occurrence = row.int(Column::Occurrence).map_err(db_error)?;
            let token = row.int(Column::Token).map_err(db_error)?;
            let attempt = match read.returns().contains(&Column::Attempt) {
                true => lease::attempt_of(row.int(Column::Attempt).map_err(db_error)?),
                false => 0,
            };
            Ok(Won::new(state, key, occurrence, token, 0)
                .at_attempt(attempt)
                .leased_since(stamped_at))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    tx.commit(()).await?;
    Ok(taken)
}
