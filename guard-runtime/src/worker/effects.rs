//! [`Worker::effects`]' loop: claim a batch, run its effects with
//! [`finish_many`](crate::finish_many), and recover the in-flight state
//! with [`recover_many`](crate::recover_many) when a claim comes back
//! empty or recovery has not looked for a while.

use core::marker::PhantomData;
use core::time::Duration;

use sqlx::Pool;
use tracing::Instrument;

use super::health::{Beat, Health};
use super::report::LoopReport;
use super::{At, Loop, idle, loop_span};
use crate::batch::batched::Batched;
use crate::dialect::BoxFuture;
use crate::effects::effect_fn::{EffectFn, Visit};
use crate::effects::finish_many::finish_many_until;
use crate::effects::follow_up::in_flight_def;
use crate::effects::recovery::recover_many_until;
use crate::effects::verdict::FollowUpValues;
use crate::error::Error;
use crate::machine::key::{BatchKey, KeyType};
use crate::transition::Transition;

#[cfg(doc)]
use super::Worker;

/// What [`Worker::effects`] makes its loop of, with the bounds
/// [`FinishFn`](crate::FinishFn) stands for.
pub(super) struct NewEffectsLoop<'h, S: 'static, K, F> {
    pub(super) claim: Transition<S>,
    pub(super) batch: u32,
    pub(super) concurrency: usize,
    pub(super) effect: F,
    pub(super) health: &'h Health,
    pub(super) key: PhantomData<fn() -> K>,
}

impl<DB, S, K, F> Visit<S, K, DB> for NewEffectsLoop<'_, S, K, F>
where
    DB: Batched,
    K: 'static,
    F: EffectFn<S, K, Future: Send> + Send + Sync + 'static,
{
    type Output = Box<dyn Loop<DB>>;

    fn visit(self) -> Box<dyn Loop<DB>>
    where
        S: FollowUpValues<DB> + KeyType<K>,
        K: BatchKey<S, DB>,
    {
        let beat = self.health.add(S::MACHINE.name(), self.claim.name());
        Box::new(EffectsLoop {
            claim: self.claim,
            batch: self.batch,
            concurrency: self.concurrency,
            effect: self.effect,
            beat,
            key: PhantomData,
        })
    }
}

/// [`Worker::effects`]' loop.
struct EffectsLoop<S: 'static, K, F> {
    claim: Transition<S>,
    batch: u32,
    concurrency: usize,
    effect: F,
    beat: Beat,
    key: PhantomData<fn() -> K>,
}

impl<DB, S, K, F> Loop<DB> for EffectsLoop<S, K, F>
where
    DB: Batched,
    S: FollowUpValues<DB> + KeyType<K>,
    K: BatchKey<S, DB> + Send + Sync + 'static,
    F: EffectFn<S, K, Future: Send> + Send + Sync + 'static,
{
    fn check(&self) -> Result<(), Error> {
        in_flight_def(self.claim.target()).map(|_| ())
    }

    fn table(&self) -> Option<&'static str> {
        Some(S::MACHINE.table())
    }

    fn run(self: Box<Self>, mut at: At<DB>) -> BoxFuture<'static, LoopReport> {
        let span = loop_span(S::MACHINE.name(), self.claim.name());
        Box::pin(Instrument::instrument(
            async move {
                let EffectsLoop {
                    claim,
                    batch,
                    concurrency,
                    effect,
                    beat,
                    key: _,
                } = *self;
                let in_flight = claim.target();
                let mut report = LoopReport::new(S::MACHINE.name(), claim.name());
                let (pool, stopped) = (at.pool.clone(), at.stopped.clone());
                let mut wait = at.poll.min;
                // When recovery last looked: a loop whose claims keep
                // coming back full looks at least once per longest poll
                // wait, so that retries come due and dead workers' rows
                // are not starved by new work.
                let mut recovered_at = tokio::time::Instant::now();
                while !*stopped.borrow() {
                    let mut found = false;
                    match claim.claim::<_, K>(&pool, batch).await {
                        Ok(wins) if !wins.is_empty() => {
                            beat.ok();
                            found = true;
                            report.claimed += wins.len();
                            let stop = Some(stopped.clone());
                            let rows =
                                finish_many_until(&pool, wins, concurrency, &effect, stop).await;
                            report.finished(rows);
                        }
                        Ok(_) => beat.ok(),
                        Err(error) => {
                            beat.failed(&error);
                            report.error(error);
                        }
                    }
                    // Nothing claimed, or no recovery for a while, and not
                    // stopping: rows left by a dead worker, or waiting for
                    // their retry.
                    let due = !found || recovered_at.elapsed() >= at.poll.max;
                    if due && !*stopped.borrow() {
                        recovered_at = tokio::time::Instant::now();
                        let stop = Some(stopped.clone());
                        let pass =
                            recover_many_until(&pool, in_flight, batch, concurrency, &effect, stop);
                        match pass.await {
                            Ok((pass, unstarted)) => {
                                beat.ok();
                                found |= pass.claimed > 0;
                                report.recovered(pass);
                                report.unstarted(unstarted);
                                // How far behind recovery is now: a
                                // failure to tell leaves the last answer.
                                if let Ok(behind) = behind(&pool, in_flight).await {
                                    beat.behind(behind);
                                }
                            }
                            Err(error) => {
                                beat.failed(&error);
                                report.error(error);
                            }
                        }
                    }
                    report.looked(found);
                    wait = idle(found, wait, &mut at).await;
                }
                report
            },
            span,
        ))
    }
}

/// How long the oldest row of `state` that recovery may take over has
/// been due, or `None` when none is.
async fn behind<S, DB>(pool: &Pool<DB>, state: S) -> Result<Option<Duration>, Error>
where
    S: crate::StateMachine,
    DB: Batched,
{
    use crate::dialect::Column;
    use crate::dialect::sealed::Driver;
    use crate::executor::proven::Proven;
    let in_flight = in_flight_def(state)?;
    let statement = <DB as Driver>::statement(in_flight.behind_sql());
    let error = |source| Error::Database {
        table: S::MACHINE.table(),
        transition: "behind",
        source,
    };
    let args =
        crate::transition::bind::arguments::<DB>(statement, &crate::transition::bind::Values::NONE)
            .map_err(|e| error(e.into_sqlx()))?;
    let mut executor = pool;
    let rows = (&mut executor).rows(statement, args).await.map_err(error)?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let ms = crate::transition::row::Read::<DB>::new(statement, row)
        .int(Column::Behind)
        .map_err(error)?;
    Ok(u64::try_from(ms).ok().map(Duration::from_millis))
}
