//! Side effects that only the winner runs: `Won::run`, and `Won::finish`
//! for in-flight states, with the follow-up that ends them
//! (`follow_up.rs`); how a finish ended is in `finished.rs`.

use tracing::Instrument;

use crate::StateMachine;
use crate::deadline::retry::Step;
pub use crate::effects::effect_fn::Effect;
use crate::effects::effect_fn::EffectFnOnce;
use crate::effects::finished::{FinishError, Finished};
use crate::effects::follow_up::{Leased, exhausted, follow_up, give_up_unreported, in_flight_def};
use crate::effects::lease::{self};
use crate::effects::verdict::FollowUpValues;
use crate::error::Error;
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::InFlightDef;
use crate::machine::key::{KeyText, RowKey};
use crate::outcome::{Committed, MayRun, Uncommitted, Won};
use crate::telemetry;

impl<S: StateMachine, K> Won<S, K, Committed> {
    /// Runs the side effect this win guards, once.
    ///
    /// Only a committed `Won` runs it, so an effect can neither run for an
    /// attempt that lost nor before the transaction that won commits (on
    /// an [`Uncommitted`] win this is a compile error that says to commit
    /// first). Returns what `effect` returns, its future for an `async`
    /// effect: `won.run(|effect| async move { … }).await`.
    pub fn run<F, Fut>(self, effect: F) -> Fut
    where
        K: KeyText<S::KeyShape>,
        F: FnOnce(Effect<S, K>) -> Fut,
    {
        effect(self.into_effect())
    }

    /// [`Won::finish`], with the bounds its effect stands for.
    pub(crate) async fn finish_on<E, F>(
        self,
        executor: E,
        effect: F,
    ) -> Result<Finished<S>, FinishError<S, K>>
    where
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

/// [`Won::run`] and [`Won::finish`] on a win whose transaction has not
/// committed: there only to say, in one compile error, to commit first.
impl<S: StateMachine, K> Won<S, K, Uncommitted> {
    #[doc(hidden)]
    pub fn run<F, Fut>(self, effect: F) -> Fut
    where
        Self: MayRun<S, K>,
        K: KeyText<S::KeyShape>,
        F: FnOnce(Effect<S, K>) -> Fut,
    {
        effect(self.committed().into_effect())
    }

    #[doc(hidden)]
    pub fn finish<E, F>(
        self,
        executor: E,
        effect: F,
    ) -> core::future::Pending<Result<Finished<S>, FinishError<S, K>>>
    where
        Self: MayRun<S, K>,
    {
        let _ = (self, executor, effect);
        core::future::pending()
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
