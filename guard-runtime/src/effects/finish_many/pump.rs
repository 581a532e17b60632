//! The effects loop and the database loop of one `finish_many` call, and
//! the heartbeat that renews its leases.

use core::time::Duration;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::dialect::Backend;
use crate::effects::effect_fn::Effect;
use crate::effects::effect_fn::EffectFn;
use crate::effects::fenced::Moved;
use crate::effects::verdict::{FollowUpValues, Verdict};
use crate::machine::key::BatchKey;
use crate::telemetry;

use super::{FLUSH_AFTER, Finishing, Stop, lock, timeout};

impl<S, K, DB> Finishing<'_, S, K, DB>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
{
    /// Runs the effects of `runnable` and the database loop side by side.
    /// Once `stop` turns true, no effect starts: the rows not yet started
    /// go to the database loop, which releases them.
    pub(super) async fn run<F>(
        &self,
        runnable: Vec<usize>,
        concurrency: usize,
        effect: &F,
        mut stop: Stop,
    ) where
        F: EffectFn<S, K>,
    {
        let buffer: Mutex<Vec<(usize, Verdict<S>)>> = Mutex::new(Vec::new());
        let oldest: Mutex<Option<Instant>> = Mutex::new(None);
        let finished = AtomicBool::new(runnable.is_empty());
        // Rows a stop left unstarted, for the database loop to release.
        let release: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        let (wake, room) = (Notify::new(), Notify::new());
        let done_name = self.in_flight.done().name();
        // The whole batch's verdicts in one statement, as a batch
        // statement takes them.
        let flush_rows = runnable
            .len()
            .clamp(1, crate::batch::many::APPLY_MANY_CHUNK);
        let effects = async {
            let mut queue = runnable.into_iter().peekable();
            let mut running = FuturesUnordered::new();
            let mut completed = 0_usize;
            loop {
                if stopped(&stop) {
                    let rest: Vec<usize> = queue.by_ref().filter(|&i| !self.done(i)).collect();
                    if !rest.is_empty() {
                        lock(&release).extend(rest);
                        wake.notify_one();
                    }
                    // Nothing is left to start: no need to hear it again.
                    stop = None;
                }
                // Start effects while there is room: at most `concurrency`
                // at once, and none while the buffer waits to be written.
                while running.len() < concurrency && lock(&buffer).len() < flush_rows {
                    let Some(i) = queue.next() else { break };
                    // A heartbeat found it taken over before its turn.
                    if self.done(i) {
                        continue;
                    }
                    let row = &self.rows[i];
                    row.started.store(true, Ordering::Relaxed);
                    let run = effect(Effect::new(
                        self.state,
                        row.key.clone(),
                        row.occurrence,
                        row.effect_key.clone(),
                        row.attempt,
                    ));
                    if let Some(attempt) = row.attempt {
                        telemetry::effect_attempt(S::MACHINE.name(), self.state.as_str(), attempt);
                    }
                    let deadline = row.deadline;
                    running.push(async move { (i, tokio::time::timeout(deadline, run).await) });
                }
                if running.is_empty() {
                    if queue.peek().is_none() {
                        break;
                    }
                    tokio::select! {
                        () = room.notified() => {}
                        () = stopping(&mut stop) => {}
                    }
                    continue;
                }
                let next = tokio::select! {
                    next = running.next() => next,
                    () = stopping(&mut stop) => continue,
                };
                let Some((i, verdict)) = next else {
                    continue;
                };
                match verdict {
                    Ok(verdict) => {
                        lock(&buffer).push((i, verdict));
                        lock(&oldest).get_or_insert_with(Instant::now);
                    }
                    // Cut off in the effect: it may have happened in
                    // part. The row stays in flight.
                    Err(_) => self.settle(i, Err(timeout::<S>(self.rows[i].deadline, done_name))),
                }
                wake.notify_one();
                // Effects that end at once never suspend this loop: let
                // the database loop (and the runtime) in now and then.
                completed += 1;
                if completed.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
            }
            finished.store(true, Ordering::Relaxed);
            wake.notify_one();
        };
        let database = async {
            let period = (self.in_flight.lease() / 3).max(Duration::from_millis(1));
            let mut beat_at = Instant::now() + period;
            loop {
                let waiting = lock(&buffer).len();
                let unstarted = core::mem::take(&mut *lock(&release));
                if !unstarted.is_empty() {
                    // Before anything else: another worker may take them
                    // at once.
                    self.release(&unstarted).await;
                    continue;
                }
                if finished.load(Ordering::Relaxed) && waiting == 0 {
                    break;
                }
                let now = Instant::now();
                // An overdue heartbeat goes first: flushes that follow one
                // another must not let a lease run out.
                if beat_at <= now {
                    self.beat().await;
                    beat_at = Instant::now() + period;
                    continue;
                }
                let flush_at = lock(&oldest).map(|at| at + FLUSH_AFTER);
                let flush = waiting >= flush_rows
                    || (finished.load(Ordering::Relaxed) && waiting > 0)
                    || flush_at.is_some_and(|at| at <= now);
                if flush {
                    let verdicts = core::mem::take(&mut *lock(&buffer));
                    *lock(&oldest) = None;
                    room.notify_one();
                    self.flush(verdicts).await;
                    continue;
                }
                let until = flush_at.map_or(beat_at, |at| at.min(beat_at));
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
            }
        };
        tokio::join!(effects, database);
    }

    /// The heartbeat of the leases still in hand; a row another worker
    /// took over is left to it (its follow-up then reads the lease lost).
    /// A heartbeat that fails is tried again at the next tick.
    async fn beat(&self) {
        let held: Vec<usize> = self
            .order
            .iter()
            .copied()
            .filter(|&i| self.rows[i].in_hand.load(Ordering::Relaxed))
            .collect();
        if held.is_empty() {
            return;
        }
        match self.heartbeat(&held).await {
            Ok(moved) => {
                for (&i, moved) in held.iter().zip(moved) {
                    match moved {
                        Moved::Yes(Some(token)) => {
                            self.rows[i].token.store(token, Ordering::Relaxed)
                        }
                        Moved::Yes(None) => {}
                        // Taken over before its effect started: the effect
                        // does not run here.
                        Moved::No(found) if !self.rows[i].started.load(Ordering::Relaxed) => {
                            self.skipped(i, found);
                        }
                        Moved::No(_) => self.rows[i].in_hand.store(false, Ordering::Relaxed),
                    }
                }
            }
            Err(error) => tracing::debug!(
                table = S::MACHINE.table(),
                %error,
                "renewing a batch's leases failed; trying again at the next tick"
            ),
        }
    }
}

/// Whether `stop` says to start no more effects.
fn stopped(stop: &Stop) -> bool {
    stop.as_ref().is_some_and(|stop| *stop.borrow())
}

/// Completes when `stop` turns true; never without one, nor once its
/// sender is gone.
async fn stopping(stop: &mut Stop) {
    match stop {
        Some(stop) => {
            if stop.wait_for(|stopped| *stopped).await.is_err() {
                core::future::pending::<()>().await;
            }
        }
        None => core::future::pending().await,
    }
}
