//! Recovery: taking over rows left in an in-flight state past their lease,
//! running their effect again under the original effect key, and
//! finishing them.

use tracing::Instrument;

use crate::StateMachine;
use crate::deadline::call::{Call, Sent, bounded};
use crate::deadline::retry::Step;
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Column, Statement};
use crate::effects::effect::{
    Finished, Leased, exhausted, follow_up, give_up_unreported, in_flight_def,
};
use crate::effects::effect_fn::EffectFn;
use crate::effects::lease::{self, Stamped};
use crate::effects::many::finish_many;
use crate::effects::verdict::FollowUpValues;
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::executor::seam::Seam;
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::InFlightDef;
use crate::machine::key::KeyType;
use crate::machine::key::{BatchKey, BindError, DecodeKey, RowKey};
use crate::outcome::{Committed, LeasedAt, Won};
use crate::telemetry;
use crate::transition::bind::{self, Values};
use crate::transition::row::Read;

/// Takes over rows left in the in-flight `state` past their lease, at most
/// `limit` of them, oldest first (whatever plan the database picks: the
/// rows are chosen once, before the takeover writes).
///
/// Each returned `Won` is the same occurrence the original winner held, so
/// its [`effect_key`](Won::effect_key) is the same: run the effect again
/// with it (the far side dedups) and finish the row. Taking over renews the
/// lease, so concurrent recoveries do not take the same row; all of the
/// batch's leases start now, so finish the batch within one lease or take
/// smaller batches ([`recover`] renews each row's lease before its effect
/// when it has waited). On PostgreSQL and SQLite one statement lists and
/// takes over the batch; MySQL lists, then claims each row.
///
/// When a later statement fails after an earlier takeover committed (on
/// MySQL, a later row's takeover or the read of its new lease; anywhere,
/// reading back the rows the one statement took over), nothing is
/// hidden: the error is [`Error::Unreported`], whose outcome is unknown,
/// and the rows taken over without a `Won` wait for a later pass, their
/// lease renewed, to run their effect under the same effect key. An error
/// before anything was taken over is the statement's own.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for the whole
/// batch, or `claim_expired(&pool, state, limit).within(d)` ([`Call`]);
/// each returned `Won` keeps it for [`Won::finish`]. Cut off,
/// [`Error::Timeout`] (`claim_expired`), with the outcome unknown once a
/// takeover was sent: rows taken over without a `Won` wait for a later
/// pass, their lease renewed.
pub fn claim_expired<'a, S, K, E>(
    mut executor: E,
    state: S,
    limit: u32,
) -> Call<'a, Vec<Won<S, K, Committed>>>
where
    S: StateMachine + KeyType<K>,
    E: Runner<Commit = Committed> + 'a,
    K: DecodeKey<E::Database, S::KeyShape> + RowKey<E::Database, S::KeyShape> + 'a,
{
    Call::new(move |deadline| async move {
        let sent = Sent::default();
        let claim = claim_on(&mut executor, state, limit, &sent, CLAIM_EXPIRED);
        let (claimed, _lost) =
            bounded(S::MACHINE.table(), CLAIM_EXPIRED, deadline, &sent, claim).await?;
        Ok(claimed
            .into_iter()
            .map(|won| won.within(deadline))
            .collect())
    })
}

/// What [`Error::Timeout`] names a [`claim_expired`] cut off by its
/// deadline.
const CLAIM_EXPIRED: &str = "claim_expired";

/// The rows taken over, and how many expired rows another recovery (or
/// their owner) got to first. `call` names the call in an
/// [`Error::Unreported`]: a statement that fails after a takeover
/// committed hides it from the caller.
async fn claim_on<S, K, E>(
    executor: &mut E,
    state: S,
    limit: u32,
    sent: &Sent,
    call: &'static str,
) -> Result<(Vec<Won<S, K, Committed>>, usize), Error>
where
    S: StateMachine,
    E: Runner<Commit = Committed>,
    K: DecodeKey<E::Database, S::KeyShape> + RowKey<E::Database, S::KeyShape>,
{
    let in_flight = in_flight_def(state)?;
    refuse_open_transaction(executor)?;
    // PostgreSQL lists and takes over in one statement, a write.
    if !<E::Database as Driver>::sql(in_flight.take_over_sql()).is_empty() {
        sent.write();
    }
    // Before the statement that stamps the leases: each is at most this
    // old.
    let stamped_at = LeasedAt(Some(std::time::Instant::now()));
    if let Some(taken) = take_over::<S, K, E>(executor, in_flight, state, limit, call).await? {
        let taken = taken
            .into_iter()
            .map(|(key, occurrence, stamped)| {
                Won::new(state, key, occurrence, stamped.token, 0)
                    .at_attempt(stamped.attempt.unwrap_or(0))
                    .leased_since(stamped_at)
            })
            .collect();
        return Ok((taken, 0));
    }
    let (mut claimed, mut lost) = (Vec::new(), 0);
    // Each row's takeover commits on its own: once one did, a later
    // failure must not hide its win.
    let mut seam = Seam::new(S::MACHINE.table(), call);
    for (key, occurrence) in list_expired::<S, K, E>(executor, in_flight, state, limit).await? {
        sent.write();
        let stamped_at = LeasedAt(Some(std::time::Instant::now()));
        let taken = claim_one(executor, in_flight, state, &key, occurrence).await;
        match taken.map_err(|error| seam.failed(executor, error))? {
            Some(stamped) => {
                seam.changed_if(true);
                let won = Won::new(state, key, occurrence, stamped.token, 0);
                let won = won.at_attempt(stamped.attempt.unwrap_or(0));
                claimed.push(won.leased_since(stamped_at));
            }
            None => lost += 1,
        }
    }
    Ok((claimed, lost))
}

/// PostgreSQL and SQLite: takes over up to `limit` expired rows in one
/// statement ([`InFlightDef::take_over_sql`]), oldest first: each row's
/// key, occurrence and new lease (with the attempt it counted, where the
/// state counts them). `None` where the dialect has no such statement
/// (MySQL), which lists and claims row by row. Rows it cannot read back
/// are taken over all the same: the error is [`Error::Unreported`],
/// naming `call`.
async fn take_over<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    limit: u32,
    call: &'static str,
) -> Result<Option<Vec<(K, i64, Stamped)>>, Error>
where
    S: StateMachine,
    E: Runner<Commit = Committed>,
    K: DecodeKey<E::Database, S::KeyShape>,
{
    let take_over = <E::Database as Driver>::statement(in_flight.take_over_sql());
    if take_over.is_empty() {
        return Ok(None);
    }
    let db_error = |source| recovery_error(state, source);
    let args = limit_arguments::<E::Database>(take_over, limit).map_err(db_error)?;
    let rows = match executor.rows(take_over, args).await {
        Ok(rows) => rows,
        // A serialization failure or busy database: a later pass sees the
        // rows again, as a row-by-row claim would.
        Err(error) if <E::Database as Backend>::is_retryable(&error) => {
            tracing::debug!(
                table = S::MACHINE.table(),
                state = state.as_str(),
                %error,
                "taking over expired in-flight rows hit a retryable error; leaving them to a later pass"
            );
            return Ok(Some(Vec::new()));
        }
        Err(error) => return Err(db_error(error)),
    };
    let mut seam = Seam::new(S::MACHINE.table(), call);
    seam.changed_if(!rows.is_empty());
    rows.iter()
        .map(|row| {
            let row = Read::<E::Database>::new(take_over, row);
            let key = row.key::<K, S::KeyShape>().map_err(db_error)?;
            let occurrence = row.int(Column::Occurrence).map_err(db_error)?;
            let token = row.int(Column::Token).map_err(db_error)?;
            let attempt = match take_over.returns().contains(&Column::Attempt) {
                true => Some(lease::attempt_of(
                    row.int(Column::Attempt).map_err(db_error)?,
                )),
                false => None,
            };
            Ok((key, occurrence, Stamped { token, attempt }))
        })
        .collect::<Result<Vec<_>, Error>>()
        .map(Some)
        .map_err(|error| seam.failed(executor, error))
}

/// The arguments of a statement that binds only a limit.
fn limit_arguments<DB: Backend>(
    statement: Statement,
    limit: u32,
) -> Result<<DB as Driver>::Args, sqlx::Error> {
    let values = Values::<DB> {
        limit: Some(i64::from(limit)),
        ..Values::NONE
    };
    bind::arguments(statement, &values).map_err(BindError::into_sqlx)
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
    E: Runner<Commit = Committed>,
    K: DecodeKey<E::Database, S::KeyShape>,
{
    let db_error = |source| recovery_error(state, source);
    let expired = <E::Database as Driver>::statement(in_flight.expired_sql());
    let args = limit_arguments::<E::Database>(expired, limit).map_err(db_error)?;
    let rows = executor.rows(expired, args).await.map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let row = Read::<E::Database>::new(expired, row);
            let key = row.key::<K, S::KeyShape>().map_err(db_error)?;
            let occurrence = row.int(Column::Occurrence).map_err(db_error)?;
            Ok((key, occurrence))
        })
        .collect()
}

/// Takes over one expired row if it is still in the same occurrence of
/// `state`, stamping a new lease: `Some(lease)`, or `None` when another
/// recovery took it, its owner finished it, or the database asked to back
/// off (a serialization failure or busy database): a later pass sees it
/// again.
async fn claim_one<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    key: &K,
    occurrence: i64,
) -> Result<Option<Stamped>, Error>
where
    S: StateMachine,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape>,
{
    let db_error = |source| recovery_error(state, source);
    let claim = <E::Database as Driver>::statement(in_flight.claim_sql());
    let key_parts = bind::key(key);
    let values = Values {
        key: Some(&key_parts),
        expected: Some(occurrence),
        ..Values::NONE
    };
    let args = bind::arguments(claim, &values).map_err(|e| db_error(e.into_sqlx()))?;
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

/// What [`Error::Timeout`] names a recovery pass's listing of expired rows
/// cut off by a deadline (MySQL; PostgreSQL and SQLite take them over in
/// that statement, [`lease::TAKE_OVER`]).
const RECOVER: &str = "recover";

fn recovery_error<S: StateMachine>(state: S, source: sqlx::Error) -> Error {
    crate::error::mix_up(source).unwrap_or_else(|source| Error::Recovery {
        table: S::MACHINE.table(),
        state: state.as_str(),
        source,
    })
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
    /// Rows whose attempts ran out (their state's `retry(max = …)`): each
    /// moved on through `failed`, its history row saying why. A row taken
    /// over after its last attempt (whose worker stopped before its
    /// verdict) gives up without running the effect again: ask the far
    /// side by its effect key whether that attempt happened.
    pub gave_up: usize,
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

/// Re-drives rows stuck in the in-flight `state`: takes over at most
/// `limit` rows whose lease ran out, and for each in turn runs `effect` with
/// the original effect key and finishes it as the [`Verdict`] says
/// ([`Won::finish`]).
///
/// On PostgreSQL one statement lists and takes over the whole pass's rows
/// (`FOR UPDATE SKIP LOCKED`, so concurrent passes take different rows),
/// and on SQLite too (its one writer leaves nothing to skip); a row that
/// has waited a third of its lease for the effects before it renews its
/// lease before its own effect, and one whose lease another recovery took
/// meanwhile is counted in [`Recovered::lost`]. On MySQL the pass lists
/// the rows, then takes each over just before its effect. Each row's lease is renewed while its effect runs.
///
/// The effects run one after another; on a pool, [`recover_many`] runs
/// them at a concurrency the caller sets, under one heartbeat per batch,
/// and writes their follow-ups a batch at a time.
///
/// Listing the rows failing ends the pass with an error (on PostgreSQL
/// and SQLite, rows the listing took over but could not read back end it
/// with [`Error::Unreported`], and wait for a later pass); a failure on
/// one row is recorded in [`Recovered::errors`] and the pass goes on. A row
/// whose takeover, effect or follow-up failed stays in flight, and the
/// next pass runs its effect again under the same effect key: no row is
/// finished without its verdict, and none is left for good. Rows
/// whose `since` column is NULL (inserted straight into the state, or
/// there before the column was) count as expired.
///
/// Listing, and each row (takeover, effect and follow-up), keep
/// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE); [`recover_within`]
/// takes another. A row cut off by it is an [`Error::Timeout`] in
/// [`Recovered::errors`] and stays in flight for a later pass. Every such
/// timeout names the statement it cut off (`take_over`, `renew`, or the
/// row's follow-up: `done` while the effect runs); the listing's, named
/// `recover`, changed nothing, and all the others may still commit
/// ([`Error::is_outcome_unknown`]), PostgreSQL's `take_over` of the
/// whole pass included, which ends the pass.
///
/// ```
/// use stateguard::{Effect, StateMachine, Verdict};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "transfers", column = "status", key = "id")]
/// enum TransferStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent)]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// # sqlx::query("CREATE TABLE transfers (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sending_since TEXT)")
/// #     .execute(&pool).await?;
/// # sqlx::query("INSERT INTO transfers (id, status) VALUES (1, 'pending')")
/// #     .execute(&pool).await?;
/// // A worker won the row, then died before its effect: the row is in flight.
/// let _lost = TransferStatus::start().apply(&pool, 1_i64).await?;
/// # sqlx::query("UPDATE transfers SET sending_since = '2000-01-01 00:00:00.000'").execute(&pool).await?;
/// // Once its lease has run out, a recovery pass runs the effect again, with
/// // the same effect key, and finishes the row.
/// let pass = stateguard::recover(&pool, TransferStatus::Sending, 10, |effect: Effect<_, i64>| async move {
///     let _key = effect.effect_key();
///     Verdict::done()
/// })
/// .await?;
/// assert_eq!((pass.claimed, pass.done), (1, 1));
/// # Ok(()) }
/// ```
pub async fn recover<S, K, E, F>(
    executor: E,
    state: S,
    limit: u32,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database> + KeyType<K>,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape> + DecodeKey<E::Database, S::KeyShape>,
    F: EffectFn<S, K>,
{
    recover_within(
        executor,
        state,
        limit,
        crate::deadline::retry::DEFAULT_DEADLINE,
        effect,
    )
    .await
}

/// [`recover`], with `deadline` for the listing and for each row
/// (takeover, effect and follow-up) instead of
/// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE).
pub async fn recover_within<S, K, E, F>(
    executor: E,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database> + KeyType<K>,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape> + DecodeKey<E::Database, S::KeyShape>,
    F: EffectFn<S, K>,
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

/// [`recover`] at a concurrency the caller sets: takes over at most
/// `limit` rows whose lease ran out (or whose next attempt is due), then
/// runs their effects, at most `concurrency` at once, under one heartbeat
/// per batch and with their follow-ups written a batch at a time
/// ([`finish_many`](crate::finish_many)), each row fenced by its own lease.
///
/// The rows waiting for their turn keep their leases (the batch's
/// heartbeat renews every row still in hand), so no other pass takes one
/// over, and no attempt is counted twice. PostgreSQL and SQLite take the
/// rows over in one statement; MySQL lists them, then takes each over.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for the
/// takeover, and for each row's effect and for each statement of the
/// batch. Rows whose effect or follow-up failed or was cut off are in
/// [`Recovered::errors`] and stay in flight for a later pass. Refused as
/// [`finish_many`](crate::finish_many) refuses (a `concurrency` of 0 is
/// [`Error::BatchOfWins`]).
///
/// ```
/// use stateguard::{Effect, StateMachine, Verdict};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "transfers", column = "status", key = "id")]
/// enum TransferStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent)]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// # sqlx::query("CREATE TABLE transfers (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sending_since TEXT)")
/// #     .execute(&pool).await?;
/// # sqlx::query("INSERT INTO transfers (id, status, sending_since) VALUES \
/// #     (1, 'sending', '2000-01-01 00:00:00.000'), (2, 'sending', '2000-01-01 00:00:00.000')")
/// #     .execute(&pool).await?;
/// // Rows whose workers died: each effect runs again with its effect key,
/// // 16 at a time, and their follow-ups go to the database in batches.
/// let pass = stateguard::recover_many(&pool, TransferStatus::Sending, 500, 16, |effect: Effect<_, i64>| async move {
///     let _key = effect.effect_key();
///     Verdict::done()
/// })
/// .await?;
/// assert_eq!((pass.claimed, pass.done), (2, 2));
/// # Ok(()) }
/// ```
pub async fn recover_many<S, K, DB, F>(
    pool: &sqlx::Pool<DB>,
    state: S,
    limit: u32,
    concurrency: usize,
    effect: F,
) -> Result<Recovered, Error>
where
    DB: Backend,
    S: FollowUpValues<DB> + KeyType<K>,
    K: BatchKey<DB, S::KeyShape>,
    F: EffectFn<S, K>,
{
    let in_flight = in_flight_def(state);
    let done = in_flight.as_ref().map_or("", |f| f.done().name());
    let span = telemetry::span!("stateguard.recover", S, DB, "UPDATE", done);
    let report = async {
        in_flight?;
        if concurrency == 0 {
            return Err(Error::BatchOfWins {
                machine: S::MACHINE.name(),
                reason: "a concurrency of 0 runs no effect",
            });
        }
        let (taken, lost) = take_over_batch::<S, K, DB>(pool, state, limit).await?;
        let mut report = Recovered {
            claimed: taken.len(),
            lost,
            ..Recovered::default()
        };
        for row in finish_many(pool, taken, concurrency, effect).await? {
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
        Ok(report)
    }
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

/// [`recover_many`]'s takeover, within [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE):
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
    K: BatchKey<DB, S::KeyShape>,
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
    K: BatchKey<DB, S::KeyShape>,
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

async fn recover_traced<S, K, E, F>(
    in_flight: Result<&'static InFlightDef<S>, Error>,
    mut executor: E,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database> + KeyType<K>,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape> + DecodeKey<E::Database, S::KeyShape>,
    F: EffectFn<S, K>,
{
    let in_flight = in_flight?;
    refuse_open_transaction(&executor)?;
    let timeout = |transition, outcome_known| Error::Timeout {
        table: S::MACHINE.table(),
        transition,
        deadline,
        outcome_known,
    };
    // PostgreSQL takes the rows over in the listing's statement; the others
    // take each over just before its effect. Cut off, that statement may
    // still commit: its rows' leases renewed, they wait for a later pass.
    let taken = take_over::<S, K, E>(&mut executor, in_flight, state, limit, RECOVER);
    let taken = tokio::time::timeout(deadline, taken)
        .await
        .map_err(|_| timeout(lease::TAKE_OVER, false))??;
    let taken_at = tokio::time::Instant::now();
    let expired: Vec<(K, i64, Option<Stamped>)> = match taken {
        Some(taken) => taken
            .into_iter()
            .map(|(key, occurrence, stamped)| (key, occurrence, Some(stamped)))
            .collect(),
        None => {
            let listing = list_expired::<S, K, E>(&mut executor, in_flight, state, limit);
            tokio::time::timeout(deadline, listing)
                .await
                .map_err(|_| timeout(RECOVER, true))??
                .into_iter()
                .map(|(key, occurrence)| (key, occurrence, None))
                .collect()
        }
    };
    let mut report = Recovered::default();
    for (key, occurrence, lease) in expired {
        let step = Step::new(lease::TAKE_OVER);
        let row = recover_row(
            &mut executor,
            in_flight,
            state,
            ExpiredRow {
                key,
                occurrence,
                lease,
                taken_at,
            },
            &effect,
            &step,
        );
        match tokio::time::timeout(deadline, row).await {
            Ok(Ok(RowEnded::Lost)) => report.lost += 1,
            Ok(Ok(RowEnded::Finished(effect_key, finished))) => {
                report.claimed += 1;
                match finished {
                    Finished::Done { .. } => report.done += 1,
                    Finished::Failed { .. } => report.failed += 1,
                    Finished::RetryLater => report.retry_later += 1,
                    Finished::GaveUp { .. } => report.gave_up += 1,
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
            Ok(Ok(RowEnded::Unfinished(error))) => {
                report.claimed += 1;
                report.errors.push(error);
            }
            Ok(Err(error)) => report.errors.push(error),
            // Cut off in the row's takeover, its effect or its follow-up,
            // each of which may have happened (in part): the row stays in
            // flight, and a later pass takes it over again.
            Err(_) => report.errors.push(timeout(step.name(), false)),
        }
    }
    Ok(report)
}

/// How [`recover`] ended with one row.
enum RowEnded<S> {
    /// Another recovery, or the owner, got to it first.
    Lost,
    /// Taken over; the effect ran (with this effect key) and the follow-up
    /// said where the row is.
    Finished(String, Finished<S>),
    /// Taken over; the effect ran and the follow-up failed.
    Unfinished(Error),
}

/// An expired row of a recovery pass: taken over already (`lease`, at
/// `taken_at`, with the rest of the pass), or to be taken over just before
/// its effect.
struct ExpiredRow<K> {
    key: K,
    occurrence: i64,
    lease: Option<Stamped>,
    taken_at: tokio::time::Instant,
}

/// Takes over one expired row (or, taken over with the pass, renews its
/// lease if a third of it has gone by, so that its effect starts under a
/// lease it still holds), runs its effect under a renewed lease, and
/// finishes it.
async fn recover_row<S, K, E, F>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    state: S,
    taken: ExpiredRow<K>,
    effect: &F,
    step: &Step,
) -> Result<RowEnded<S>, Error>
where
    S: FollowUpValues<E::Database> + KeyType<K>,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape>,
    F: EffectFn<S, K>,
{
    let ExpiredRow {
        key,
        occurrence,
        lease,
        taken_at,
    } = taken;
    let lease = match lease {
        None => claim_one(executor, in_flight, state, &key, occurrence).await?,
        // Rows taken over with the pass wait for the effects before them;
        // one that waited a third of its lease renews it first, and one
        // whose lease another recovery took meanwhile is left to it.
        Some(stamped) if taken_at.elapsed() >= in_flight.lease() / 3 => {
            step.at(lease::RENEW);
            lease::renew::<S, K, E>(executor, in_flight, &key, occurrence, stamped.token)
                .await
                .map_err(|source| recovery_error(state, source))?
                .map(|token| Stamped {
                    token,
                    attempt: stamped.attempt,
                })
        }
        Some(stamped) => Some(stamped),
    };
    let Some(Stamped {
        token: lease,
        attempt,
    }) = lease
    else {
        return Ok(RowEnded::Lost);
    };
    let won: Won<S, K, Committed> =
        Won::new(state, key.clone(), occurrence, lease, 0).at_attempt(attempt.unwrap_or(0));
    let effect_key = won.effect_key();
    let attempt = won.attempt();
    let row = Leased {
        state,
        key: &key,
        occurrence,
        lease,
        attempt,
    };
    if let Some(attempts) = exhausted(in_flight, attempt) {
        let gave_up = give_up_unreported(executor, in_flight, &row, attempts, step).await;
        return Ok(match gave_up {
            Ok(finished) => RowEnded::Finished(effect_key, finished),
            Err(error) => RowEnded::Unfinished(error),
        });
    }
    tracing::info!(
        state = state.as_str(),
        occurrence,
        attempt,
        "took over an in-flight row whose lease ran out or whose next attempt is due"
    );
    if let Some(attempt) = attempt {
        telemetry::effect_attempt(S::MACHINE.name(), state.as_str(), attempt);
    }
    step.at(in_flight.done().name());
    let run = won.run(effect);
    let (verdict, lease) =
        lease::while_renewing::<S, K, E, _>(executor, in_flight, &key, occurrence, lease, run)
            .await;
    let row = Leased { lease, ..row };
    let finished = follow_up(executor, in_flight, row, verdict, step);
    match finished.await {
        Ok(finished) => Ok(RowEnded::Finished(effect_key, finished)),
        Err(error) => Ok(RowEnded::Unfinished(error)),
    }
}
