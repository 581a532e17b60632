//! Tracing: one span per `apply`, `claim`, `apply_many`, `finish` and
//! recovery pass, named `stateguard.<call>`, with OpenTelemetry's database
//! fields (`db.system.name`, `db.operation.name`, `db.collection.name`)
//! and stateguard's own (`stateguard.machine`, `stateguard.transition`,
//! `stateguard.outcome`, `stateguard.attempts`, `stateguard.attempt` (the
//! attempt at an effect, where its state counts them), and, only after
//! [`record_keys`]`(true)`, `stateguard.key`). Retries, lease takeovers and
//! superseded finishes are events inside them.
//!
//! With the `metrics` feature, the same calls also count through the
//! [`metrics`](https://docs.rs/metrics) facade, for the exporter the
//! application installs:
//!
//! - `stateguard_outcomes_total` (counter; labels `machine`, `transition`,
//!   `outcome`): one per `apply` and per key of `apply_many`, one per row
//!   of a claim (`claimed`), one per `finish` (`done`, `failed`,
//!   `superseded`, …);
//! - `stateguard_attempts` (histogram; `machine`, `transition`): the
//!   compare-and-set attempts of each `apply`;
//! - `stateguard_effect_attempt` (histogram; `machine`, `state`): the
//!   attempt number of each effect run by `finish` or recovery, where its
//!   in-flight state counts attempts (`retry(…)`);
//! - `stateguard_recovered_total` (counter; `machine`, `state`, `result`)
//!   and `stateguard_recovery_claimed` (gauge; `machine`, `state`): what
//!   each recovery pass took over and how it ended;
//! - `stateguard_relayed_total` (counter; `table`, `result`: `published`,
//!   `duplicate`, `retried`, `given_up`, `lost`): what each outbox relay
//!   pass did with the messages it took (a duplicate is also counted as
//!   published);
//! - `stateguard_worker_looks_total` (counter; `machine`, `loop`,
//!   `found`: `true` or `false`): each look of a worker's loop for work
//!   (the machine's name and its claiming transition, or the outbox
//!   table and `relay`);
//! - `stateguard_worker_errors_total` (counter; `machine`, `loop`): the
//!   errors a worker's loop met and went on after;
//! - `stateguard_worker_released_total` (counter; `machine`, `loop`): the
//!   rows a worker's loop released at shutdown, their effects never
//!   started.

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

static RECORD_KEYS: AtomicBool = AtomicBool::new(false);

/// Whether spans record the row key (`stateguard.key`). Off by default:
/// keys can identify customers. Applies to the whole process.
pub fn record_keys(on: bool) {
    RECORD_KEYS.store(on, Ordering::Relaxed);
}

/// `span!("stateguard.apply", S, DB, "UPDATE", transition)`: the span of
/// one call on machine `S` over backend `DB`; or with the machine's table
/// and name given, `span!("stateguard.apply", table = t, machine = m, DB,
/// "UPDATE", transition)`, in code that knows no machine's type.
macro_rules! span {
    (
        $name:literal,
        table = $table:expr,
        machine = $machine:expr,
        $db:ty,
        $operation:expr,
        $transition:expr
    ) => {
        tracing::info_span!(
            $name,
            db.system.name = <$db as $crate::dialect::sealed::Driver>::SYSTEM,
            db.operation.name = $operation,
            db.collection.name = $table,
            stateguard.machine = $machine,
            stateguard.transition = $transition,
            stateguard.outcome = tracing::field::Empty,
            stateguard.attempts = tracing::field::Empty,
            stateguard.attempt = tracing::field::Empty,
            stateguard.rows = tracing::field::Empty,
            stateguard.key = tracing::field::Empty,
        )
    };
    ($name:literal, $s:ty, $db:ty, $operation:expr, $transition:expr) => {
        $crate::telemetry::span!(
            $name,
            table = <$s as $crate::StateMachine>::MACHINE.table(),
            machine = <$s as $crate::StateMachine>::MACHINE.name(),
            $db,
            $operation,
            $transition
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

/// Counts `n` outcomes named `outcome` of `transition` on `machine`.
#[cfg(feature = "metrics")]
pub(crate) fn outcomes(
    machine: &'static str,
    transition: &'static str,
    outcome: &'static str,
    n: u64,
) {
    metrics::counter!(
        "stateguard_outcomes_total",
        "machine" => machine,
        "transition" => transition,
        "outcome" => outcome,
    )
    .increment(n);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn outcomes(_: &'static str, _: &'static str, _: &'static str, _: u64) {}

/// Records the attempts one `apply` took.
#[cfg(feature = "metrics")]
pub(crate) fn attempts(machine: &'static str, transition: &'static str, attempts: u32) {
    metrics::histogram!(
        "stateguard_attempts",
        "machine" => machine,
        "transition" => transition,
    )
    .record(f64::from(attempts));
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn attempts(_: &'static str, _: &'static str, _: u32) {}

/// Records the attempt at an effect of `state` about to run.
#[cfg(feature = "metrics")]
pub(crate) fn effect_attempt(machine: &'static str, state: &'static str, attempt: u32) {
    metrics::histogram!(
        "stateguard_effect_attempt",
        "machine" => machine,
        "state" => state,
    )
    .record(f64::from(attempt));
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn effect_attempt(_: &'static str, _: &'static str, _: u32) {}

/// Records one recovery pass over `state`.
#[cfg(feature = "metrics")]
pub(crate) fn recovered(machine: &'static str, state: &'static str, report: &crate::Recovered) {
    metrics::gauge!("stateguard_recovery_claimed", "machine" => machine, "state" => state)
        .set(report.claimed as f64);
    for (result, n) in [
        ("done", report.done),
        ("failed", report.failed),
        ("retry_later", report.retry_later),
        ("gave_up", report.gave_up),
        ("superseded", report.superseded.len()),
        ("lease_lost", report.lease_lost),
        ("lost", report.lost),
        ("error", report.errors.len()),
    ] {
        if n > 0 {
            metrics::counter!(
                "stateguard_recovered_total",
                "machine" => machine,
                "state" => state,
                "result" => result,
            )
            .increment(n as u64);
        }
    }
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn recovered(_: &'static str, _: &'static str, _: &crate::Recovered) {}

/// Records what one outbox relay pass over `table` did.
#[cfg(feature = "metrics")]
pub(crate) fn relayed(table: &'static str, pass: &crate::outbox::Pass) {
    for (result, n) in [
        ("published", pass.published()),
        ("duplicate", pass.duplicates()),
        ("retried", pass.retried()),
        ("given_up", pass.given_up()),
        ("lost", pass.lost()),
    ] {
        if n > 0 {
            metrics::counter!("stateguard_relayed_total", "table" => table, "result" => result)
                .increment(n as u64);
        }
    }
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn relayed(_: &'static str, _: &crate::outbox::Pass) {}

/// Counts a look of a worker's loop for work.
#[cfg(feature = "metrics")]
pub(crate) fn worker_look(machine: &'static str, name: &'static str, found: bool) {
    let found = if found { "true" } else { "false" };
    metrics::counter!(
        "stateguard_worker_looks_total",
        "machine" => machine,
        "loop" => name,
        "found" => found,
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn worker_look(_: &'static str, _: &'static str, _: bool) {}

/// Counts an error a worker's loop met.
#[cfg(feature = "metrics")]
pub(crate) fn worker_error(machine: &'static str, name: &'static str) {
    metrics::counter!("stateguard_worker_errors_total", "machine" => machine, "loop" => name)
        .increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn worker_error(_: &'static str, _: &'static str) {}

/// Counts the rows a worker's loop released at shutdown.
#[cfg(feature = "metrics")]
pub(crate) fn worker_released(machine: &'static str, name: &'static str, n: usize) {
    if n > 0 {
        metrics::counter!("stateguard_worker_released_total", "machine" => machine, "loop" => name)
            .increment(n as u64);
    }
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn worker_released(_: &'static str, _: &'static str, _: usize) {}
