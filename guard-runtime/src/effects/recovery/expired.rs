//! Listing and taking over the rows whose lease ran out.

use core::marker::PhantomData;

use crate::StateMachine;
use crate::deadline::call::{Call, Sent, bounded};
use crate::deadline::retry::MAX_ATTEMPTS;
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Column, Statement};
use crate::effects::follow_up::in_flight_def;
use crate::effects::lease::{self, Stamped};
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::executor::seam::Seam;
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::InFlightDef;
use crate::machine::key::{BatchKey, BindError, ClaimVisit, Claimable, DecodeKey, KeyFor, RowKey};
use crate::outcome::{Committed, LeasedAt, Won};
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
/// smaller batches ([`recover`](crate::recover) renews each row's lease before its effect
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
    executor: E,
    state: S,
    limit: u32,
) -> Call<'a, Vec<Won<S, K, Committed>>>
where
    E: Runner<Commit = Committed> + 'a,
    S: Claimable<K, E::Database>,
{
    S::visit(ClaimExpired {
        executor,
        state,
        limit,
        call: PhantomData,
    })
}

/// A [`claim_expired`], waiting for [`Claimable`] to vouch for its key.
struct ClaimExpired<'a, S, K, E> {
    executor: E,
    state: S,
    limit: u32,
    call: PhantomData<KeyFor<'a, K>>,
}

impl<'a, S, K, E> ClaimVisit<S, K, E::Database> for ClaimExpired<'a, S, K, E>
where
    S: StateMachine,
    E: Runner<Commit = Committed> + 'a,
{
    type Output = Call<'a, Vec<Won<S, K, Committed>>>;

    fn visit(self) -> Self::Output
    where
        K: BatchKey<S, E::Database>,
    {
        let ClaimExpired {
            mut executor,
            state,
            limit,
            call: _,
        } = self;
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
}

/// What [`Error::Timeout`] names a [`claim_expired`] cut off by its
/// deadline.
pub(super) const CLAIM_EXPIRED: &str = "claim_expired";

/// The rows taken over, and how many expired rows another recovery (or
/// their owner) got to first. `call` names the call in an
/// [`Error::Unreported`]: a statement that fails after a takeover
/// committed hides it from the caller.
pub(super) async fn claim_on<S, K, E>(
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
pub(super) async fn take_over<S, K, E>(
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
    let mut attempt = 1;
    let rows = loop {
        let args = limit_arguments::<E::Database>(take_over, limit).map_err(db_error)?;
        match executor.rows(take_over, args).await {
            // A read-only server (a standby, a primary demoted by a
            // failover) wrote nothing, and on a pool its connection is
            // closed: a fresh one may reach the new primary.
            Err(error)
                if E::POOLED && crate::error::read_only(&error) && attempt < MAX_ATTEMPTS =>
            {
                attempt += 1;
            }
            done => break done,
        }
    };
    let rows = match rows {
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
pub(super) fn limit_arguments<DB: Backend>(
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
pub(super) async fn list_expired<S, K, E>(
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
pub(super) async fn claim_one<S, K, E>(
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
pub(super) const RECOVER: &str = "recover";

pub(super) fn recovery_error<S: StateMachine>(state: S, source: sqlx::Error) -> Error {
    crate::error::mix_up(source).unwrap_or_else(|source| Error::Recovery {
        table: S::MACHINE.table(),
        state: state.as_str(),
        source,
    })
}
