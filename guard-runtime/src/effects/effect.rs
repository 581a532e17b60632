//! Side effects that only the winner runs: `Won::run`, and `Won::finish`
//! for in-flight states, with the follow-up that ends them.

use core::fmt;
use core::future::Future;

use tracing::Instrument;

use crate::StateMachine;
use crate::deadline::retry::Step;
pub use crate::effects::effect_fn::Effect;
use crate::effects::effect_fn::EffectFnOnce;
use crate::effects::lease::{self, Settled};
use crate::effects::verdict::{Chosen, FollowUpValues, Retry, Verdict};
use crate::error::{Error, ErrorKind};
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::InFlightDef;
use crate::machine::key::{KeyText, RowKey};
use crate::outcome::{Committed, MayRun, Won};
use crate::telemetry;
use crate::transition::note::Note;

/// Why [`Won::finish`] did not finish the row.
#[derive(Debug)]
pub enum FinishError<S: StateMachine, K> {
    /// Refused before the effect ran: the win comes back, and its effect
    /// can still run (with [`Won::run`], or `finish` on a fitting
    /// executor).
    Refused {
        /// The win, as it was.
        won: Won<S, K, Committed>,
        /// Why `finish` refused.
        error: Error,
    },
    /// The effect ran, or may have run in part (the deadline cut it off),
    /// and the row was not finished: it stays in flight until recovery
    /// runs the effect again with the same effect key and finishes it. An
    /// error of kind [`Misuse`](ErrorKind::Misuse) (a verdict the state
    /// cannot take, such as [`Error::FollowUpValues`]) fails recovery the
    /// same way until the effect's code is fixed.
    Unfinished(Error),
}

impl<S: StateMachine, K> FinishError<S, K> {
    /// The error, whichever way `finish` failed.
    pub fn error(&self) -> &Error {
        match self {
            FinishError::Refused { error, .. } | FinishError::Unfinished(error) => error,
        }
    }

    /// The win handed back by a refused call.
    pub fn into_won(self) -> Option<Won<S, K, Committed>> {
        match self {
            FinishError::Refused { won, .. } => Some(won),
            FinishError::Unfinished(_) => None,
        }
    }
}

impl<S: StateMachine, K> fmt::Display for FinishError<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishError::Refused { error, .. } => {
                write!(
                    f,
                    "finish refused before the effect ran (the win is handed back): {error}"
                )
            }
            // A misuse (a verdict the state cannot take) fails recovery
            // too, which runs the same code: promise nothing of it.
            FinishError::Unfinished(error) if error.kind() == ErrorKind::Misuse => {
                write!(f, "the row was not finished and stays in flight: {error}")
            }
            FinishError::Unfinished(error) => {
                write!(
                    f,
                    "the row was not finished and stays in flight; recovery runs the effect \
                     again with the same effect key: {error}"
                )
            }
        }
    }
}

impl<S: StateMachine, K: fmt::Debug> std::error::Error for FinishError<S, K> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error())
    }
}

/// Drops a refused call's win: `?` into [`Error`] gives it up explicitly.
impl<S: StateMachine, K> From<FinishError<S, K>> for Error {
    fn from(error: FinishError<S, K>) -> Error {
        match error {
            FinishError::Refused { error, .. } | FinishError::Unfinished(error) => error,
        }
    }
}

/// Where [`Won::finish`] left the row.
#[must_use = "a `Superseded` row needs reconciling: the effect ran, yet the row moved on"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished<S> {
    /// The effect succeeded and the row is in the `done` transition's
    /// target (moved there by this call, or already there).
    Done {
        /// The `done` transition's target.
        state: S,
        /// The row's occurrence there, as stored: the win's plus one with a
        /// version column (the follow-up is fenced on the win's), else 0.
        occurrence: i64,
    },
    /// The effect failed for good and the row is in the `failed`
    /// transition's target.
    Failed {
        /// The `failed` transition's target.
        state: S,
        /// The row's occurrence there, as for [`Finished::Done`].
        occurrence: i64,
    },
    /// The effect asked to be retried; the row stays in flight until its
    /// next attempt is due (its backoff, or its lease without `retry(…)`).
    RetryLater,
    /// The effect asked to be retried, but this was the last attempt its
    /// state's `retry(max = …)` allows: the row is in the `failed`
    /// transition's target, and its history row, where there is one, says
    /// it gave up.
    GaveUp {
        /// The `failed` transition's target.
        state: S,
        /// The row's occurrence there, as for [`Finished::Done`].
        occurrence: i64,
        /// The attempts made.
        attempts: u32,
    },
    /// The row left the in-flight state some other way while the effect
    /// ran (for example it was cancelled): the follow-up found it in
    /// `current`. The effect did run; reconcile it.
    Superseded {
        /// The state the follow-up found.
        current: S,
    },
    /// The lease ran out while the effect ran and another worker took the
    /// row over: that worker runs the effect again with the same effect
    /// key and finishes the row; this verdict did not move it.
    LeaseLost {
        /// The state the row is in (still in flight).
        current: S,
    },
    /// The row was no longer this worker's when `finish` began (another
    /// worker took it over after the lease ran out, or it moved on): the
    /// effect did not run here.
    Skipped {
        /// The state the row is in, or `None` if it is gone.
        current: Option<S>,
    },
}

impl<S: StateMachine, K, C> Won<S, K, C> {
    /// Runs the side effect this win guards, once.
    ///
    /// Only a committed `Won` runs it ([`MayRun`]), so an effect can
    /// neither run for an attempt that lost nor before the transaction
    /// that won commits.
    pub async fn run<F, Fut>(self, effect: F) -> Fut::Output
    where
        C: MayRun,
        K: KeyText<S::KeyShape>,
        F: FnOnce(Effect<S, K>) -> Fut,
        Fut: Future,
    {
        effect(self.into_committed().into_effect()).await
    }

    /// For a win into an in-flight state: runs the effect, then the state's
    /// `done` transition, or its `failed` transition, as the effect's
    /// [`Verdict`] says.
    ///
    /// A crash anywhere in between leaves the row in flight; once its lease
    /// runs out, [`recover`](crate::recover) runs the effect again with the same effect key
    /// and finishes it. Before the effect the lease is renewed, unless the
    /// win stamped it less than a third of its length ago (then no one can
    /// have taken it over, and the effect starts at once); while the effect
    /// runs, the lease is renewed every third of its length, so an effect
    /// may outlast it as long as this worker lives. A worker whose lease was taken over all the same (it
    /// stalled past its lease) gets [`Finished::Skipped`] if that happened
    /// before its effect (which then does not run), or
    /// [`Finished::LeaseLost`] if it happened during it; either way its
    /// verdict does not move the row.
    ///
    /// A call that cannot finish (the state is not in flight, or `executor`
    /// is a connection inside a transaction) is refused before the effect
    /// runs, and [`FinishError::Refused`] hands the win back: its effect can
    /// still run.
    ///
    /// The call keeps the win's deadline ([`Won::within`]; by default the
    /// deadline of the transition that won, [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE)),
    /// the effect included. Cut off before the effect, it is refused with
    /// [`Error::Timeout`]: named `renew` and with its outcome unknown when
    /// the lease's renewal was in flight (it may still commit, and the win
    /// handed back then holds a lease the row no longer has: finishing it
    /// again ends in [`Finished::Skipped`], and recovery takes the row over
    /// once the new lease runs out). Cut off in the effect or the
    /// follow-up, it ends in [`FinishError::Unfinished`] with an
    /// [`Error::Timeout`] whose outcome is unknown, naming the follow-up
    /// under way (`done` while the effect runs), and the row stays in
    /// flight for recovery.
    ///
    /// Whatever statement fails (the renewal, the follow-up, its history
    /// or outbox rows, the read that tells why a follow-up moved nothing),
    /// the row is either finished, with [`Finished`] saying how, or left in
    /// flight, and recovery runs the effect again under the same effect
    /// key and finishes it: an error after the effect ran is
    /// [`FinishError::Unfinished`], never a finish the caller is not told
    /// of.
    ///
    /// ```
    /// use stateguard::{Finished, StateMachine, Verdict};
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
    /// let outcome = TransferStatus::start().apply(&pool, 1_i64).await?;
    /// if let Some(won) = outcome.won() {
    ///     // The effect runs once, under the row's lease; its verdict moves the row.
    ///     let finished = won
    ///         .finish(&pool, |effect| async move {
    ///             let _key = effect.effect_key(); // the bank's idempotency key
    ///             Verdict::done()
    ///         })
    ///         .await?;
    ///     assert!(matches!(finished, Finished::Done { state: TransferStatus::Sent, .. }));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn finish<E, F>(
        self,
        executor: E,
        effect: F,
    ) -> Result<Finished<S>, FinishError<S, K>>
    where
        C: MayRun,
        E: Runner<Commit = Committed>,
        K: RowKey<E::Database, S::KeyShape>,
        S: FollowUpValues<E::Database>,
        F: EffectFnOnce<S, K>,
    {
        let in_flight = in_flight_def(self.state());
        let done = in_flight.as_ref().map_or("", |f| f.done().name());
        let span = telemetry::span!("stateguard.finish", S, E::Database, "UPDATE", done);
        telemetry::key(&span, self.key());
        if let Some(attempt) = self.attempt() {
            span.record("stateguard.attempt", attempt);
            telemetry::effect_attempt(S::MACHINE.name(), self.state().as_str(), attempt);
        }
        let finished = self
            .into_committed()
            .finish_traced(in_flight, executor, effect)
            .instrument(span.clone())
            .await;
        let outcome = match &finished {
            Ok(Finished::Done { .. }) => "done",
            Ok(Finished::Failed { .. }) => "failed",
            Ok(Finished::RetryLater) => "retry_later",
            Ok(Finished::GaveUp { .. }) => "gave_up",
            Ok(Finished::Superseded { .. }) => "superseded",
            Ok(Finished::LeaseLost { .. }) => "lease_lost",
            Ok(Finished::Skipped { .. }) => "skipped",
            Err(FinishError::Refused { .. }) => "refused",
            Err(FinishError::Unfinished(_)) => "unfinished",
        };
        span.record("stateguard.outcome", outcome);
        telemetry::outcomes(S::MACHINE.name(), done, outcome, 1);
        match &finished {
            Ok(Finished::Superseded { current }) => {
                let _guard = span.enter();
                tracing::warn!(
                    current = current.as_str(),
                    "the row left the in-flight state while its effect ran; reconcile the effect"
                );
            }
            Ok(Finished::LeaseLost { .. }) => {
                let _guard = span.enter();
                tracing::info!(
                    "the lease ran out during the effect and another worker took the row over"
                );
            }
            _ => {}
        }
        finished
    }
}

impl<S: StateMachine, K> Won<S, K, Committed> {
    async fn finish_traced<E, F>(
        self,
        in_flight: Result<&'static InFlightDef<S>, Error>,
        mut executor: E,
        effect: F,
    ) -> Result<Finished<S>, FinishError<S, K>>
    where
        E: Runner<Commit = Committed>,
        K: RowKey<E::Database, S::KeyShape>,
        S: FollowUpValues<E::Database>,
        F: EffectFnOnce<S, K>,
    {
        let checked =
            in_flight.and_then(|in_flight| refuse_open_transaction(&executor).map(|()| in_flight));
        let in_flight = match checked {
            Ok(in_flight) => in_flight,
            Err(error) => return Err(FinishError::Refused { won: self, error }),
        };
        let (key, state, occurrence) = (self.key().clone(), self.state(), self.occurrence());
        let deadline = self.deadline();
        let timeout = |transition, outcome_known| Error::Timeout {
            table: S::MACHINE.table(),
            transition,
            deadline,
            outcome_known,
        };
        let started = tokio::time::Instant::now();
        // Take the lease afresh before the effect: it proves this worker
        // still holds the row, and gives the effect a whole lease. A lease
        // stamped less than a third of its length ago (the statement that
        // stamped it was sent since) cannot have run out, nor been taken
        // over: the effect starts under it, and the heartbeat renews it.
        let fresh = self.lease_younger_than(in_flight.lease() / 3);
        let renew = async {
            match fresh {
                true => Ok(Some(self.lease())),
                false => {
                    lease::renew::<S, K, E>(
                        &mut executor,
                        in_flight,
                        &key,
                        occurrence,
                        self.lease(),
                    )
                    .await
                }
            }
        };
        let lease = match tokio::time::timeout(deadline, renew).await {
            Ok(Ok(Some(lease))) => lease,
            Ok(Ok(None)) => {
                let done = in_flight.done();
                let read = lease::read(&mut executor, in_flight, done, &key);
                return match tokio::time::timeout_at(started + deadline, read).await {
                    Ok(Ok(found)) => Ok(Finished::Skipped {
                        current: found.map(|found| found.current),
                    }),
                    Ok(Err(error)) => Err(FinishError::Refused { won: self, error }),
                    Err(_) => Err(FinishError::Refused {
                        won: self,
                        error: timeout(done.name(), true),
                    }),
                };
            }
            Ok(Err(source)) => {
                let error = in_flight.done().db_error(source);
                return Err(FinishError::Refused { won: self, error });
            }
            // The renewal may still commit, and stamp a lease this win
            // does not hold. The effect has not run.
            Err(_) => {
                return Err(FinishError::Refused {
                    won: self,
                    error: timeout(lease::RENEW, false),
                });
            }
        };
        let attempt = self.attempt();
        // A takeover past the last attempt (the one before did not report:
        // its worker stopped) gives up instead of running the effect again.
        if let Some(attempts) = exhausted(in_flight, attempt) {
            let row = Leased {
                state,
                key: &key,
                occurrence,
                lease,
                attempt,
            };
            let step = Step::new(lease::POSTPONE);
            let gave_up = give_up_unreported(&mut executor, in_flight, &row, attempts, &step);
            return match tokio::time::timeout_at(started + deadline, gave_up).await {
                Ok(finished) => finished.map_err(FinishError::Unfinished),
                Err(_) => Err(FinishError::Unfinished(timeout(step.name(), false))),
            };
        }
        let effect = self.run(effect);
        // The effect, named by `done`, until the verdict chooses the
        // follow-up.
        let step = Step::new(in_flight.done().name());
        let rest = async {
            let (verdict, lease) = lease::while_renewing::<S, K, E, _>(
                &mut executor,
                in_flight,
                &key,
                occurrence,
                lease,
                effect,
            )
            .await;
            let row = Leased {
                state,
                key: &key,
                occurrence,
                lease,
                attempt,
            };
            follow_up(&mut executor, in_flight, row, verdict, &step).await
        };
        match tokio::time::timeout_at(started + deadline, rest).await {
            Ok(finished) => finished.map_err(FinishError::Unfinished),
            // Cut off in the effect or its follow-up: either may have
            // happened in part. The row stays in flight.
            Err(_) => Err(FinishError::Unfinished(timeout(step.name(), false))),
        }
    }

    fn into_effect(self) -> Effect<S, K>
    where
        K: KeyText<S::KeyShape>,
    {
        let effect_key = self.effect_key();
        let attempt = self.attempt();
        let (state, key, occurrence) = self.into_parts();
        Effect::new(state, key, occurrence, effect_key, attempt)
    }
}

/// The in-flight metadata of `state`, or the error that it has none.
pub(crate) fn in_flight_def<S: StateMachine>(state: S) -> Result<&'static InFlightDef<S>, Error> {
    S::MACHINE
        .state(state)
        .and_then(|s| s.in_flight())
        .ok_or(Error::NotInFlight {
            machine: S::MACHINE.name(),
            state: state.as_str(),
        })
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
            return Err(Error::RetryNotDeclared {
                machine: S::MACHINE.name(),
                state: row.state.as_str(),
            });
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
