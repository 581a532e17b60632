//! Recovery: taking over rows left in an in-flight state past their lease,
//! running their effect again under the original effect key, and
//! finishing them.
//!
//! `expired.rs` lists and takes over expired rows ([`claim_expired`]),
//! this file re-drives them one at a time ([`recover`](crate::recover)), and
//! `recover_many.rs` re-drives a batch on [`finish_many`](crate::finish_many) under one
//! heartbeat.

mod expired;
mod recover_many;

pub use self::expired::claim_expired;
use self::expired::{RECOVER, claim_one, list_expired, recovery_error, take_over};
pub(crate) use self::recover_many::recover_many_until;

use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;

use tracing::Instrument;

use crate::deadline::retry::Step;
use crate::effects::effect_fn::{EffectFn, Visit};
use crate::effects::finished::Finished;
use crate::effects::follow_up::{Leased, exhausted, follow_up, give_up_unreported, in_flight_def};
use crate::effects::lease::{self, Stamped};
use crate::effects::verdict::FollowUpValues;
use crate::error::Error;
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::InFlightDef;
use crate::machine::key::{BatchKey, DecodeKey, KeyFor, KeyOf, KeyType};
use crate::outcome::{Committed, Won};
use crate::telemetry;

/// A row that [`recover`](crate::recover) ran the effect for, but that had left the
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

/// What one [`recover`](crate::recover) pass did.
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

/// A recovery pass about to run: what [`recover`](crate::recover) returns. Await it for
/// its report; it keeps [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for
/// the listing and for each row (takeover, effect and follow-up) unless
/// [`Recover::within`] sets another first, as every call's `.within(d)`
/// does. It runs as one boxed future, so the effect and the future it
/// returns are `Send`, as a task's are.
///
/// ```no_run
/// # use stateguard::{Effect, StateMachine, Verdict};
/// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// # #[state_machine(table = "transfers", column = "status", key = "id")]
/// # enum TransferStatus {
/// #     #[state(initial)]
/// #     #[transition(start -> Sending)]
/// #     Pending,
/// #     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
/// #     #[transition(confirm -> Sent)]
/// #     #[transition(fail -> Failed)]
/// #     Sending,
/// #     Sent,
/// #     Failed,
/// # }
/// # async fn pass(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use std::time::Duration;
///
/// let pass = stateguard::recover(&pool, TransferStatus::Sending, 100, |effect: Effect<_, i64>| async move {
///     let _key = effect.effect_key();
///     Verdict::done()
/// })
/// .within(Duration::from_secs(5))
/// .await?;
/// # let _ = pass;
/// # Ok(()) }
/// ```
#[must_use = "a recovery pass runs only when awaited"]
pub struct Recover<'a, S, K, E, F> {
    executor: E,
    state: S,
    limit: u32,
    effect: F,
    deadline: core::time::Duration,
    key: PhantomData<KeyFor<'a, K>>,
}

impl<S, K, E, F> Recover<'_, S, K, E, F> {
    /// The pass of [`recover`](crate::recover), with the default deadline.
    pub(crate) fn new(executor: E, state: S, limit: u32, effect: F) -> Self {
        Recover {
            executor,
            state,
            limit,
            effect,
            deadline: crate::deadline::retry::DEFAULT_DEADLINE,
            key: PhantomData,
        }
    }

    /// The same pass, keeping `deadline` for the listing and for each row
    /// instead of [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE).
    pub fn within(self, deadline: core::time::Duration) -> Self {
        Recover { deadline, ..self }
    }

    /// The deadline the pass keeps.
    pub fn deadline(&self) -> core::time::Duration {
        self.deadline
    }
}

impl<S: core::fmt::Debug, K, E, F> core::fmt::Debug for Recover<'_, S, K, E, F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Recover")
            .field("state", &self.state)
            .field("limit", &self.limit)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl<'a, S, K, E, F> Visit<S, K, E::Database> for Recover<'a, S, K, E, F>
where
    K: 'a,
    E: Runner<Commit = Committed> + 'a,
    F: EffectFn<S, K, Future: Send> + Send + Sync + 'a,
{
    type Output = Pin<Box<dyn Future<Output = Result<Recovered, Error>> + Send + 'a>>;

    fn visit(self) -> Self::Output
    where
        S: FollowUpValues<E::Database> + KeyType<K>,
        K: BatchKey<S, E::Database>,
    {
        let Recover {
            executor,
            state,
            limit,
            effect,
            deadline,
            key: _,
        } = self;
        Box::pin(recover_pass(executor, state, limit, deadline, effect))
    }
}

/// The pass of [`recover`](crate::recover), within `deadline`.
async fn recover_pass<S, K, E, F>(
    executor: E,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database>,
    E: Runner<Commit = Committed>,
    K: KeyOf<S, E::Database> + DecodeKey<E::Database, S::KeyShape>,
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

async fn recover_traced<S, K, E, F>(
    in_flight: Result<&'static InFlightDef<S>, Error>,
    mut executor: E,
    state: S,
    limit: u32,
    deadline: core::time::Duration,
    effect: F,
) -> Result<Recovered, Error>
where
    S: FollowUpValues<E::Database>,
    E: Runner<Commit = Committed>,
    K: KeyOf<S, E::Database> + DecodeKey<E::Database, S::KeyShape>,
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

/// How [`recover`](crate::recover) ended with one row.
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
    S: FollowUpValues<E::Database>,
    E: Runner<Commit = Committed>,
    K: KeyOf<S, E::Database>,
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
