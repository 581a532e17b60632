//! What a worker's loops did, as [`Worker::run`](super::Worker::run)
//! returns it.

use crate::effects::finish_many::{FinishedRow, Unstarted};
use crate::effects::finished::Finished;
use crate::effects::recovery::Recovered;
use crate::error::Error;
use crate::telemetry;

/// What [`Worker::run`](super::Worker::run) did, loop by loop.
#[derive(Debug)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Each loop's counts, in the order the loops were given; empty when
    /// the drain ran out before the loops ended.
    pub loops: Vec<LoopReport>,
    /// Whether every loop ended within the drain: false when effects were
    /// still running at its deadline, left to their leases.
    pub drained: bool,
}

/// What one loop of a worker did.
#[derive(Debug)]
#[non_exhaustive]
pub struct LoopReport {
    /// The machine's name.
    pub machine: &'static str,
    /// The claiming transition.
    pub transition: &'static str,
    /// Rows claimed.
    pub claimed: usize,
    /// Rows recovery took over: a dead worker's, or due for their retry.
    pub recovered: usize,
    /// Rows whose effect succeeded and that moved on through `done`.
    pub done: usize,
    /// Rows whose effect failed for good, or whose attempts ran out.
    pub failed: usize,
    /// Rows whose effect asked to be retried later.
    pub retry_later: usize,
    /// Rows that left the in-flight state some other way while their
    /// effect ran, or whose lease another worker took over.
    pub superseded: usize,
    /// Rows claimed or recovered whose effect had not started when the
    /// shutdown signal came: released, their leases ended so that
    /// another worker's recovery takes them at once, under the same
    /// effect keys. A release that failed counts no row here and one
    /// error: its rows wait out their leases, or, if the statement ran
    /// and only its answer was lost, were released all the same. Either
    /// way they stay in flight for recovery, and none of their effects
    /// ran.
    pub released: usize,
    /// Errors met: rows left in flight for a later recovery, and claims or
    /// recoveries that failed. The loop went on after each.
    pub errors: usize,
    /// The last error met, for the log.
    pub last_error: Option<Error>,
}

impl LoopReport {
    pub(super) fn new(machine: &'static str, transition: &'static str) -> Self {
        LoopReport {
            machine,
            transition,
            claimed: 0,
            recovered: 0,
            done: 0,
            failed: 0,
            retry_later: 0,
            superseded: 0,
            released: 0,
            errors: 0,
            last_error: None,
        }
    }

    /// Counts the rows of a [`finish_many`](crate::finish_many).
    pub(super) fn finished<S, K>(
        &mut self,
        rows: Result<(Vec<FinishedRow<S, K>>, Unstarted), Error>,
    ) {
        match rows {
            Ok((rows, unstarted)) => {
                self.unstarted(unstarted);
                for row in rows {
                    match row.finished {
                        Ok(Finished::Done { .. }) => self.done += 1,
                        Ok(Finished::Failed { .. } | Finished::GaveUp { .. }) => self.failed += 1,
                        Ok(Finished::RetryLater) => self.retry_later += 1,
                        Ok(_) => self.superseded += 1,
                        Err(error) => self.error(error),
                    }
                }
            }
            Err(error) => self.error(error),
        }
    }

    /// Counts the rows a stop left unstarted: released, or, where the
    /// release failed, left to their leases (one error).
    pub(super) fn unstarted(&mut self, unstarted: Unstarted) {
        self.released += unstarted.released;
        telemetry::worker_released(self.machine, self.transition, unstarted.released);
        if let Some(error) = unstarted.error {
            self.error(error);
        }
    }

    /// Counts a recovery pass.
    pub(super) fn recovered(&mut self, pass: Recovered) {
        self.recovered += pass.claimed;
        self.done += pass.done;
        self.failed += pass.failed + pass.gave_up;
        self.retry_later += pass.retry_later;
        self.superseded += pass.superseded.len() + pass.lease_lost;
        for error in pass.errors {
            self.error(error);
        }
    }

    /// Counts a look for work, which found some or not.
    pub(super) fn looked(&self, found: bool) {
        telemetry::worker_look(self.machine, self.transition, found);
    }

    /// Counts an error, and says it in the log.
    pub(super) fn error(&mut self, error: Error) {
        tracing::warn!(
            machine = self.machine,
            transition = self.transition,
            %error,
            "a worker's loop met an error; it goes on"
        );
        self.errors += 1;
        telemetry::worker_error(self.machine, self.transition);
        self.last_error = Some(error);
    }
}
