//! How long and how often: the deadline a call keeps, and the bounded,
//! jittered retries of autocommit statements.

use core::time::Duration;

/// Attempts made in autocommit before giving up with
/// [`Error::Contention`](crate::Error::Contention). Each attempt after a serialization failure or
/// deadlock waits a jittered, growing delay first.
pub(crate) const MAX_ATTEMPTS: u32 = 10;
const BACKOFF_BASE: Duration = Duration::from_millis(2);
const BACKOFF_CAP: Duration = Duration::from_millis(100);

/// How long [`Transition::apply`](crate::Transition::apply) may take,
/// retries and waits for locks included, unless
/// [`Transition::within`](crate::Transition::within) says otherwise; also
/// what [`Won::finish`](crate::Won::finish) and [`recover`](crate::recover)
/// keep by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// Which statement of a call that runs several is under way, so that a
/// deadline that cuts the call off names it in
/// [`Error::Timeout`](crate::Error::Timeout): a lease's renewal, a
/// takeover, an effect (named by its `done` transition) or the follow-up
/// the verdict chose. Shared with the future the deadline drops, hence
/// the lock.
pub(crate) struct Step(std::sync::Mutex<&'static str>);

impl Step {
    pub(crate) const fn new(name: &'static str) -> Self {
        Step(std::sync::Mutex::new(name))
    }

    /// From now on the call is at `name`.
    pub(crate) fn at(&self, name: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = name;
    }

    /// The statement the call is at.
    pub(crate) fn name(&self) -> &'static str {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Full jitter: a uniform delay between zero and an exponentially growing
/// cap, so that racing retries spread out instead of colliding again.
pub(crate) fn backoff(attempt: u32) -> Duration {
    jittered(BACKOFF_BASE, BACKOFF_CAP, attempt)
}

/// Full jitter from `first`, doubling per `attempt`, up to `max`: a
/// uniform delay between zero and that cap.
pub(crate) fn jittered(first: Duration, max: Duration, attempt: u32) -> Duration {
    let ceiling = first.saturating_mul(1 << attempt.min(16)).min(max);
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(random() % nanos.max(1))
}

/// A random number, for jitter and for tokens that must not repeat
/// between processes: each `RandomState` is freshly keyed, which is all
/// the randomness either needs.
pub(crate) fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_its_cap() {
        for attempt in 1..40 {
            assert!(backoff(attempt) <= BACKOFF_CAP);
        }
    }

    #[test]
    fn backoff_is_jittered() {
        let delays: std::collections::HashSet<_> = (0..32).map(|_| backoff(6)).collect();
        assert!(delays.len() > 1, "32 draws gave one delay: {delays:?}");
    }
}
