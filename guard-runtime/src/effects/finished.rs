//! How `finish` ended: [`Finished`], or a [`FinishError`] that hands the
//! win back when nothing ran.

use core::fmt;

use crate::StateMachine;
use crate::error::{Error, ErrorKind};
use crate::outcome::{Committed, Won};

/// Why [`Won::finish`] did not finish the row.
#[derive(Debug)]
pub enum FinishError<S, K> {
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
    /// cannot take, such as [`Misuse::FollowUpValues`](crate::Misuse::FollowUpValues)) fails recovery the
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
