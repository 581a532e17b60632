//! The follow-up that ends an in-flight row as its verdict says, fenced
//! by the lease the worker holds, and the give-up when the attempts ran
//! out.

use crate::StateMachine;
use crate::deadline::retry::Step;
use crate::effects::finished::Finished;
use crate::effects::lease::{self, Settled};
use crate::effects::verdict::{Chosen, FollowUpValues, Retry, Verdict};
use crate::error::{Error, Misuse};
use crate::executor::Runner;
use crate::machine::InFlightDef;
use crate::machine::key::RowKey;
use crate::outcome::Committed;
use crate::transition::note::Note;

/// The in-flight metadata of `state`, or the error that it has none.
pub(crate) fn in_flight_def<S: StateMachine>(state: S) -> Result<&'static InFlightDef<S>, Error> {
    S::MACHINE
        .state(state)
        .and_then(|s| s.in_flight())
        .ok_or(Error::Misuse(Misuse::NotInFlight {
            machine: S::MACHINE.name(),
            state: state.as_str(),
        }))
}

/// A row of an in-flight state under a lease this worker holds, as a
/// follow-up is fenced on it.
pub(crate) struct Leased<'k, S, K> {
    pub(crate) state: S,
    pub(crate) key: &'k K,
    pub(crate) occurrence: i64,
    pub(crate) lease: i64,
    /// The attempt the effect made, where the state counts them.
    pub(crate) attempt: Option<u32>,
}

/// The actor of the history row a row that gave up writes.
const GAVE_UP: &str = "stateguard retry";

/// Ends the row as the verdict says: its `done` or `failed` follow-up,
/// a later attempt, or, when the attempts ran out, `failed` for good.
pub(crate) async fn follow_up<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    row: Leased<'_, S, K>,
    verdict: Verdict<S>,
    step: &Step,
) -> Result<Finished<S>, Error>
where
    S: StateMachine,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape>,
    S: FollowUpValues<E::Database>,
{
    let retry = match verdict {
        Verdict::RetryLater => Retry::later(),
        Verdict::Retry(retry) => retry,
        verdict => {
            let Some(chosen) = Chosen::of(verdict, in_flight, row.state)? else {
                return Ok(Finished::RetryLater);
            };
            return settle_as(executor, in_flight, &row, &chosen, step, None).await;
        }
    };
    let Some(def) = in_flight.retry() else {
        // Without `retry(…)`, the lease says when: a time of the effect's
        // own has nowhere to go.
        if retry.wait().is_some() {
            return Err(Error::Misuse(Misuse::RetryNotDeclared {
                machine: S::MACHINE.name(),
                state: row.state.as_str(),
            }));
        }
        return Ok(Finished::RetryLater);
    };
    let attempt = row.attempt.unwrap_or(1);
    if attempt >= def.max_attempts() {
        let reason = retry.reason().map(|r| format!("asked to retry: {r}"));
        let note = gave_up_note(attempt, reason.as_deref());
        let chosen = Chosen::give_up(in_flight, row.state, note)?;
        return settle_as(executor, in_flight, &row, &chosen, step, Some(attempt)).await;
    }
    let wait = retry
        .wait()
        .unwrap_or_else(|| lease::wait_after(def, attempt));
    step.at(lease::POSTPONE);
    let postponed = lease::postpone(
        executor,
        in_flight,
        def.postpone_sql(),
        row.state,
        row.key,
        row.occurrence,
        row.lease,
        wait,
        retry.reason(),
    );
    Ok(match postponed.await? {
        Settled::Applied(_) | Settled::Already(_) => Finished::RetryLater,
        Settled::Superseded(current) => Finished::Superseded { current },
        Settled::LeaseLost(current) => Finished::LeaseLost { current },
        Settled::Vanished => {
            return Err(Error::RowVanished {
                table: S::MACHINE.table(),
                transition: lease::POSTPONE,
            });
        }
    })
}

/// The attempts made, where `attempt` is past the last one the state
/// allows: a takeover counted it, but no attempt may start.
pub(crate) fn exhausted<S>(in_flight: &InFlightDef<S>, attempt: Option<u32>) -> Option<u32> {
    let max = in_flight.retry()?.max_attempts();
    attempt.filter(|a| *a > max).map(|_| max)
}

/// Ends a row taken over past its last attempt in `failed`, without
/// running the effect: the last attempt's worker stopped before its
/// verdict, so whether it happened is known only to the far side (ask it
/// by the effect key).
pub(crate) async fn give_up_unreported<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    row: &Leased<'_, S, K>,
    attempts: u32,
    step: &Step,
) -> Result<Finished<S>, Error>
where
    S: StateMachine,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape>,
    S: FollowUpValues<E::Database>,
{
    let note = gave_up_note(
        attempts,
        Some("no verdict: its worker stopped; ask the far side by the effect key"),
    );
    let chosen = Chosen::give_up(in_flight, row.state, note)?;
    tracing::warn!(
        table = S::MACHINE.table(),
        state = row.state.as_str(),
        attempts,
        "an in-flight row was taken over after its last attempt; giving up without running \
         the effect again"
    );
    settle_as(executor, in_flight, row, &chosen, step, Some(attempts)).await
}

/// The history note of a row whose attempts ran out.
pub(crate) fn gave_up_note(attempts: u32, reason: Option<&str>) -> Note {
    let why = match reason {
        Some(reason) => format!("gave up after {attempts} attempts; the last: {reason}"),
        None => format!("gave up after {attempts} attempts"),
    };
    Note::by(GAVE_UP)
        .because(why)
        .details(format!("{{\"attempts\": {attempts}}}"))
}

/// Runs the follow-up `chosen`, fenced on the row's occurrence and lease;
/// `gave_up` holds the attempts made when it ends a row whose attempts
/// ran out.
pub(crate) async fn settle_as<S, K, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    row: &Leased<'_, S, K>,
    chosen: &Chosen<S>,
    step: &Step,
    gave_up: Option<u32>,
) -> Result<Finished<S>, Error>
where
    S: StateMachine,
    E: Runner<Commit = Committed>,
    K: RowKey<E::Database, S::KeyShape>,
    S: FollowUpValues<E::Database>,
{
    let (transition, failed) = (chosen.transition.transition(), chosen.failed);
    step.at(transition.name());
    // The follow-up is fenced on the win's occurrence and moves the
    // version on by one: where it lands is known without a read.
    let next = match S::MACHINE.version() {
        Some(_) => row.occurrence + 1,
        None => row.occurrence,
    };
    let settled = |state| match (gave_up, failed) {
        (Some(attempts), _) => Finished::GaveUp {
            state,
            occurrence: next,
            attempts,
        },
        (None, true) => Finished::Failed {
            state,
            occurrence: next,
        },
        (None, false) => Finished::Done {
            state,
            occurrence: next,
        },
    };
    // Tied to the occurrence and to the lease: a late follow-up must not
    // finish a later pass of the row, nor one that another worker took
    // over.
    let (state, key, occurrence, lease) = (row.state, row.key, row.occurrence, row.lease);
    let at = lease::settle(executor, in_flight, state, chosen, key, occurrence, lease);
    Ok(match at.await? {
        Settled::Applied(target) | Settled::Already(target) => settled(target),
        Settled::Superseded(current) => Finished::Superseded { current },
        Settled::LeaseLost(current) => Finished::LeaseLost { current },
        Settled::Vanished => {
            return Err(Error::RowVanished {
                table: S::MACHINE.table(),
                transition: transition.name(),
            });
        }
    })
}
