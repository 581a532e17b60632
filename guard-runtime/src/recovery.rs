//! Recovery: taking over rows left in an in-flight state past their lease,
//! running their effect again under the original effect key, and
//! finishing them.

use core::future::Future;

use tracing::Instrument;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::dialect::sealed::Dialect;
use crate::effect::{Effect, Finished, follow_up, in_flight_def};
use crate::error::Error;
use crate::executor::{Executor, refuse_open_transaction};
use crate::key::{DecodeKey, KeyShape, KeyText, RowKey};
use crate::lease;
use crate::machine::InFlightDef;
use crate::outcome::{Committed, Won};
use crate::telemetry;
use crate::transition::key_arguments;
use crate::verdict::{FollowUpValues, Verdict};

/// Takes over rows left in the in-flight `state` past their lease, at most
/// `limit` of them, oldest first.
///
/// Each returned `Won` is the same occurrence the original winner held, so
/// its [`effect_key`](Won::effect_key) is the same: run the effect again
/// with it (the far side dedups) and finish the row. Taking over renews the
/// lease, so concurrent recoveries do not take the same row; all of the
/// batch's leases start now, so finish the batch within one lease or take
/// smaller batches ([`recover`] claims each row just before its effect).
pub async fn claim_expired<S, K, E>(
    mut executor: E,
    state: S,
    limit: u32,
) -> Result<Vec<Won<S, K, Committed>>, Error>
where
    S: StateMachine,
    E: Executor<Commit = Committed>,
    K: DecodeKey<E::Database, S::KeyShape> + RowKey<E::Database, S::KeyShape>,
{
    claim_on(&mut executor, state, limit).await
}

async fn claim_on<S, K, E>(
    executor: &mut E,
    state: S,
    limit: u32,
) -> Result<Vec<Won<S, K, Committed>>, Error>
where
    S: StateMachine,
    E: Executor<Commit = Committed>,
    K: DecodeKey<E::Database, S::KeyShape> + RowKey<E::Database, S::KeyShape>,
{
    let in_flight = in_flight_def(state)?;
    refuse_open_transaction(executor)?;
    let mut claimed = Vec::new();
    for (key, occurrence) in list_expired::<S, K, E>(executor, in_flight, state, limit).await? {
        if let Some(lease) = claim_one(executor, in_flight, state, &key, occurrence).await? {
            claimed.push(Won::new(state, key, occurrence, lease, 0));
        }
    }
    Ok(claimed)
}

/// Keys and occurrences of rows in `state` past their lease, oldest first.
async fn list_expired<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    limit: u32,
) -> Result<Vec<(K, i64)>, Error>
where
    S: StateMachine,
    E: Executor<Commit = Committed>,
    K: DecodeKey<E::Database, S::KeyShape>,
{
    let db_error = |source| recovery_error(state, source);
    let expired = <E::Database as Dialect>::sql(in_flight.expired_sql());
    let mut args = <E::Database as Dialect>::Args::default();
    <E::Database as Dialect>::bind_int(&mut args, i64::from(limit)).map_err(db_error)?;
    let rows = executor.fetch_all(expired, args).await.map_err(db_error)?;
    rows.iter()
        .map(|row| {
            // The key columns first, then the occurrence.
            let key = K::decode(row).map_err(db_error)?;
            let occurrence =
                <E::Database as Dialect>::int(row, S::KeyShape::COLUMNS).map_err(db_error)?;
            Ok((key, occurrence))
        })
        .collect()
}

/// Takes over one expired row if it is still in the same occurrence of
/// `state`, stamping a new lease: `Some(token)`, or `None` when another
/// recovery took it, its owner finished it, or the database asked to back
/// off (a serialization failure or busy database): a later pass sees it
/// again.
async fn claim_one<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    key: &K,
    occurrence: i64,
) -> Result<Option<i64>, Error>
where
    S: StateMachine,
    E: Executor<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape>,
{
    let db_error = |source| recovery_error(state, source);
    let mut args = key_arguments::<E::Database, S::KeyShape, K>(key).map_err(db_error)?;
    if S::MACHINE.version().is_some() {
        <E::Database as Dialect>::bind_int(&mut args, occurrence).map_err(db_error)?;
    }
    match lease::stamp(executor, in_flight, in_flight.claim_sql(), args, key).await {
        Ok(lease) => Ok(lease),
        Err(error) if <E::Database as Backend>::is_retryable(&error) => {
            tracing::debug!(
                table = S::MACHINE.table(),
                state = state.as_str(),
                %error,
                "claim of an expired in-flight row hit a retryable error; leaving it to a later pass"
            );
            Ok(None)
        }
        Err(error) => Err(db_error(error)),
    }
}

fn recovery_error<S: StateMachine>(state: S, source: sqlx::Error) -> Error {
    Error::Recovery {
        table: S::MACHINE.table(),
        state: state.as_str(),
        source,
    }
}

/// A row that [`recover`] ran the effect for, but that had left the
/// in-flight state some other way before the follow-up could finish it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupersededRow {
    /// The effect key the effect ran with; it names the row (see
    /// [`Won::effect_key`]).
    pub effect_key: String,
    /// The database string of the state the follow-up found.
    pub current: &'static str,
}

/// What one [`recover`] pass did.
#[must_use = "a pass records per-row failures in `errors` instead of returning them"]
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Recovered {
    /// Rows taken over.
    pub claimed: usize,
    /// Expired rows another recovery (or their owner) got to first.
    pub lost: usize,
    /// Rows whose effect succeeded and that moved on through `done`.
    pub done: usize,
    /// Rows whose effect failed for good and moved on through `failed`.
    pub failed: usize,
    /// Rows whose effect asked to be retried later.
    pub retry_later: usize,
    /// Rows that had left the in-flight state some other way while their
    /// effect ran: the effect did run, so reconcile each with the far side
    /// by its effect key.
    pub superseded: Vec<SupersededRow>,
    /// Rows whose lease another recovery took over while their effect ran
    /// (this pass stalled past the lease): that recovery finishes them.
    pub lease_lost: usize,
    /// Rows whose claim or follow-up failed. They stay in flight, and the
    /// pass went on with the other rows.
    pub errors: Vec<Error>,
}

/// Re-drives rows stuck in the in-flight `state`: lists at most `limit`
/// rows whose lease ran out, and for each in turn takes it over (renewing
/// its lease just before its effect runs), runs `effect` with the original
/// effect key, and finishes it as the [`Verdict`] says ([`Won::finish`]).
///
/// Listing the rows failing ends the pass with an error; a failure on one
/// row is recorded in [`Recovered::errors`] and the pass goes on. Rows
/// whose `since` column is NULL (inserted straight into the state, or
/// there before the column was) count as expired.
///
/// Listing, and each row (takeover, effect and follow-up), keep
/// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE); [`recover_within`]
/// takes another. A row cut off by it is an [`Error::Timeout`] in
/// [`Recovered::errors`] and stays in flight for a later pass.
pub async fn recover<S, K, E, F, Fut>(
    executor: E,
    state: S,
    limit: u32,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database>,
    E: Executor<Commit = Committed>,
    K: KeyText<S::KeyShape>
        + Clone
        + DecodeKey<E::Database, S::KeyShape>
        + RowKey<E::Database, S::KeyShape>,
    F: Fn(Effect<S, K>) -> Fut,
    Fut: Future<Output = Verdict>,
{
    recover_within(
        executor,
        state,
        limit,
        crate::retry::DEFAULT_DEADLINE,
        effect,
    )
    .await
}

/// [`recover`], with `deadline` for the listing and for each row
/// (takeover, effect and follow-up) instead of
/// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE).
pub async fn recover_within<S, K, E, F, Fut>(
    executor: E,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database>,
    E: Executor<Commit = Committed>,
    K: KeyText<S::KeyShape>
        + Clone
        + DecodeKey<E::Database, S::KeyShape>
        + RowKey<E::Database, S::KeyShape>,
    F: Fn(Effect<S, K>) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let in_flight = in_flight_def(state);
    let done = in_flight.as_ref().map_or("", |f| f.done().name());
    let span = telemetry::span!("stateguard.recover", S, E::Database, "UPDATE", done);
    let report = recover_traced(in_flight, executor, state, limit, deadline, effect)
        .instrument(span.clone())
        .await;
    match &report {
        Ok(report) => {
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

async fn recover_traced<S, K, E, F, Fut>(
    in_flight: Result<&'static InFlightDef<S>, Error>,
    mut executor: E,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database>,
    E: Executor<Commit = Committed>,
    K: KeyText<S::KeyShape>
        + Clone
        + DecodeKey<E::Database, S::KeyShape>
        + RowKey<E::Database, S::KeyShape>,
    F: Fn(Effect<S, K>) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let in_flight = in_flight?;
    refuse_open_transaction(&executor)?;
    let timeout = |outcome_known| Error::Timeout {
        table: S::MACHINE.table(),
        transition: in_flight.done().name(),
        deadline,
        outcome_known,
    };
    let listing = list_expired::<S, K, E>(&mut executor, in_flight, state, limit);
    let expired = tokio::time::timeout(deadline, listing)
        .await
        .map_err(|_| timeout(true))??;
    let mut report = Recovered::default();
    for (key, occurrence) in expired {
        let row = recover_row(&mut executor, in_flight, state, key, occurrence, &effect);
        match tokio::time::timeout(deadline, row).await {
            Ok(Ok(Row::Lost)) => report.lost += 1,
            Ok(Ok(Row::Finished(effect_key, finished))) => {
                report.claimed += 1;
                match finished {
                    Finished::Done(_) => report.done += 1,
                    Finished::Failed(_) => report.failed += 1,
                    Finished::RetryLater => report.retry_later += 1,
                    Finished::Superseded { current } => report.superseded.push(SupersededRow {
                        effect_key,
                        current: current.as_str(),
                    }),
                    // follow_up never skips: only `finish` checks before
                    // the effect.
                    Finished::LeaseLost { .. } | Finished::Skipped { .. } => {
                        report.lease_lost += 1;
                    }
                }
            }
            Ok(Ok(Row::Unfinished(error))) => {
                report.claimed += 1;
                report.errors.push(error);
            }
            Ok(Err(error)) => report.errors.push(error),
            // Cut off after the takeover, maybe in the effect: the row
            // stays in flight, and a later pass takes it over again.
            Err(_) => report.errors.push(timeout(false)),
        }
    }
    Ok(report)
}

/// How [`recover`] ended with one row.
enum Row<S> {
    /// Another recovery, or the owner, got to it first.
    Lost,
    /// Taken over; the effect ran (with this effect key) and the follow-up
    /// said where the row is.
    Finished(String, Finished<S>),
    /// Taken over; the effect ran and the follow-up failed.
    Unfinished(Error),
}

/// Takes over one expired row, runs its effect under a renewed lease, and
/// finishes it.
async fn recover_row<S, K, E, F, Fut>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    key: K,
    occurrence: i64,
    effect: &F,
) -> Result<Row<S>, Error>
where
    S: FollowUpValues<E::Database>,
    E: Executor<Commit = Committed>,
    K: KeyText<S::KeyShape> + Clone + RowKey<E::Database, S::KeyShape>,
    F: Fn(Effect<S, K>) -> Fut,
    Fut: Future<Output = Verdict>,
{
    let Some(lease) = claim_one(executor, in_flight, state, &key, occurrence).await? else {
        return Ok(Row::Lost);
    };
    let won: Won<S, K, Committed> = Won::new(state, key.clone(), occurrence, lease, 0);
    let effect_key = won.effect_key();
    tracing::info!(
        state = state.as_str(),
        occurrence,
        "took over an in-flight row whose lease ran out"
    );
    let run = won.run(effect);
    let (verdict, lease) =
        lease::while_renewing::<S, K, E, _>(executor, in_flight, &key, occurrence, lease, run)
            .await;
    match follow_up(executor, in_flight, state, &key, occurrence, lease, verdict).await {
        Ok(finished) => Ok(Row::Finished(effect_key, finished)),
        Err(error) => Ok(Row::Unfinished(error)),
    }
}
