//! What a worker's loops say of themselves while they run: when each last
//! did its work without an error, and the errors since.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::Error;

/// The health of a worker's loops, readable while it runs: take it with
/// [`Worker::health`](super::Worker::health) before
/// [`Worker::run`](super::Worker::run), and ask it from a readiness probe.
///
/// A loop succeeds each time its look for work (a claim, a recovery pass,
/// a relay pass, a pruning round) ends without an error, whether or not it
/// found work.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<Mutex<Vec<LoopHealth>>>);

/// One loop's health.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoopHealth {
    /// The machine's name (the outbox table for a relay, `stores` for
    /// pruning).
    pub machine: &'static str,
    /// The claiming transition (`relay`, `prune`).
    pub transition: &'static str,
    /// When the loop last looked for work without an error; `None` before
    /// its first such look.
    pub last_success: Option<Instant>,
    /// Looks that ended in an error since the last success.
    pub failures_in_a_row: u32,
    /// The last error, as its message says it.
    pub last_error: Option<String>,
    /// How far behind the loop's recovery is, as its last look found it:
    /// how long the oldest row it may take over (its lease run out, or
    /// its next attempt come) has been due; `None` when no row was due,
    /// and for loops that recover nothing (a relay, pruning). Rows still
    /// to claim carry no time the library knows, so they do not count.
    pub behind: Option<Duration>,
}

impl Health {
    /// Every loop's health, in the order the loops were given.
    pub fn loops(&self) -> Vec<LoopHealth> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether every loop has succeeded within the last `within`: what a
    /// readiness probe asks. False before the first success of each.
    pub fn is_healthy(&self, within: Duration) -> bool {
        self.loops()
            .iter()
            .all(|lp| lp.last_success.is_some_and(|at| at.elapsed() <= within))
    }

    /// A new loop's entry, and the handle it reports through.
    pub(super) fn add(&self, machine: &'static str, transition: &'static str) -> Beat {
        let mut loops = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        loops.push(LoopHealth {
            machine,
            transition,
            last_success: None,
            failures_in_a_row: 0,
            last_error: None,
            behind: None,
        });
        Beat {
            health: self.clone(),
            index: loops.len() - 1,
        }
    }

    fn update(&self, index: usize, change: impl FnOnce(&mut LoopHealth)) {
        let mut loops = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lp) = loops.get_mut(index) {
            change(lp);
        }
    }
}

/// How one loop reports its health.
#[derive(Debug, Clone)]
pub(super) struct Beat {
    health: Health,
    index: usize,
}

impl Beat {
    /// A look that ended without an error.
    pub(super) fn ok(&self) {
        self.health.update(self.index, |lp| {
            lp.last_success = Some(Instant::now());
            lp.failures_in_a_row = 0;
        });
    }

    /// How far behind the loop's recovery was at its last look.
    pub(super) fn behind(&self, behind: Option<Duration>) {
        self.health.update(self.index, |lp| lp.behind = behind);
    }

    /// A look that ended in `error`.
    pub(super) fn failed(&self, error: &Error) {
        self.health.update(self.index, |lp| {
            lp.failures_in_a_row += 1;
            lp.last_error = Some(error.to_string());
        });
    }
}
