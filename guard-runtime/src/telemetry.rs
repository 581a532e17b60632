//! Tracing: one span per `apply`, `claim`, `apply_many`, `finish` and
//! recovery pass, named `stateguard.<call>`, with OpenTelemetry's database
//! fields (`db.system.name`, `db.operation.name`, `db.collection.name`)
//! and stateguard's own (`stateguard.machine`, `stateguard.transition`,
//! `stateguard.outcome`, `stateguard.attempts`, and, only after
//! [`record_keys`]`(true)`, `stateguard.key`). Retries, lease takeovers and
//! superseded finishes are events inside them.

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

static RECORD_KEYS: AtomicBool = AtomicBool::new(false);

/// Whether spans record the row key (`stateguard.key`). Off by default:
/// keys can identify customers. Applies to the whole process.
pub fn record_keys(on: bool) {
    RECORD_KEYS.store(on, Ordering::Relaxed);
}

/// `span!("stateguard.apply", S, DB, "UPDATE", transition)`: the span of
/// one call on machine `S` over backend `DB`.
macro_rules! span {
    ($name:literal, $s:ty, $db:ty, $operation:expr, $transition:expr) => {
        tracing::info_span!(
            $name,
            db.system.name = <$db as $crate::dialect::sealed::Dialect>::SYSTEM,
            db.operation.name = $operation,
            db.collection.name = <$s as $crate::StateMachine>::MACHINE.table(),
            stateguard.machine = <$s as $crate::StateMachine>::MACHINE.name(),
            stateguard.transition = $transition,
            stateguard.outcome = tracing::field::Empty,
            stateguard.attempts = tracing::field::Empty,
            stateguard.rows = tracing::field::Empty,
            stateguard.key = tracing::field::Empty,
        )
    };
}
pub(crate) use span;

/// Records `key` on `span`, if keys are recorded.
pub(crate) fn key(span: &tracing::Span, key: &dyn fmt::Debug) {
    if RECORD_KEYS.load(Ordering::Relaxed) {
        span.record("stateguard.key", tracing::field::debug(key));
    }
}
