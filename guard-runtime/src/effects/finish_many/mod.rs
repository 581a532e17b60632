//! `finish_many`: the effects of many committed wins at a bounded
//! concurrency, under one heartbeat per batch, with their follow-ups
//! written a batch at a time.
//!
//! One task runs two loops side by side: the effects, at most
//! `concurrency` at once, whose verdicts go into a buffer; and the
//! database loop, which alone sends statements, so that a heartbeat and a
//! flush never race over a row's token. It flushes the buffer when the
//! batch's every verdict is in, or when its oldest has waited
//! [`FLUSH_AFTER`], and renews every lease still in hand every third of
//! the lease.
//!
//! `pump.rs` holds the two loops (`Finishing::run`, with the heartbeat,
//! `beat`), and `flush.rs` what a flush writes: each verdict's follow-up
//! statement, a batch at a time.

mod flush;
mod pump;
mod release;

use core::time::Duration;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use tokio::sync::watch;
use tracing::Instrument;

use crate::StateMachine;
use crate::deadline::retry::{MAX_ATTEMPTS, Step, backoff};
use crate::dialect::{Backend, Sql};
use crate::effects::effect_fn::EffectFn;
use crate::effects::fenced::{self, Fenced, Moved, Rows};
use crate::effects::finished::Finished;
use crate::effects::follow_up::{Leased, exhausted, give_up_unreported, in_flight_def};
use crate::effects::lease::{self, LeaseRow};
use crate::effects::verdict::FollowUpValues;
use crate::error::{Error, Misuse};
use crate::machine::InFlightDef;
use crate::machine::key::BatchKey;
use crate::outcome::{Committed, Won};
use crate::telemetry;
use crate::transition::Transition;
use crate::transition::bind::Parts;

/// How long [`finish_many`](crate::finish_many) lets a verdict wait at most for others to
/// share its follow-up's statement.
pub const FLUSH_AFTER: Duration = Duration::from_millis(20);

/// One row of [`finish_many`](crate::finish_many): its key, the effect key its effect ran
/// with, and where it ended, or why it is still in flight.
#[derive(Debug)]
#[non_exhaustive]
pub struct FinishedRow<S, K> {
    /// The row's key.
    pub key: K,
    /// The effect key (see [`Won::effect_key`]).
    pub effect_key: String,
    /// Where the row ended, as [`Won::finish`] reports it; an error
    /// leaves the row in flight for [`recover`](crate::recover), which
    /// runs its effect again with the same effect key.
    pub finished: Result<Finished<S>, Error>,
}

/// A win of the batch, as the loops hold it.
struct WinRow<K> {
    key: K,
    occurrence: i64,
    /// The lease's token, renewed by the heartbeat.
    token: AtomicI64,
    attempt: Option<u32>,
    effect_key: String,
    deadline: Duration,
    /// Still this worker's to renew and to finish: not yet settled, and
    /// no heartbeat found it taken over.
    in_hand: AtomicBool,
    /// Its effect has started.
    started: AtomicBool,
    /// Its effect never started: the batch was told to stop first.
    unstarted: AtomicBool,
}

/// A signal that tells a batch to start no more effects (a worker's
/// shutdown): `None`, or a flag that turns true once. The rows whose
/// effect had not started are released ([`Unstarted`]).
pub(crate) type Stop = Option<watch::Receiver<bool>>;

/// The rows of a stopped batch whose effect never started: released
/// (their leases ended, so that recovery takes them at once), or, when
/// the release failed, left to their leases.
#[derive(Debug, Default)]
pub(crate) struct Unstarted {
    /// Rows released.
    pub(crate) released: usize,
    /// Rows whose release failed or may not have committed: they wait out
    /// their leases, as after a crash.
    pub(crate) left: usize,
    /// Why the release failed.
    pub(crate) error: Option<Error>,
}

/// [`finish_many`](crate::finish_many), told by `stop` to start no more effects: the rows
/// whose effect had not started are released, left out of the rows
/// returned, and counted in [`Unstarted`].
pub(crate) async fn finish_many_until<S, K, DB, F>(
    pool: &sqlx::Pool<DB>,
    wins: Vec<Won<S, K, Committed>>,
    concurrency: usize,
    effect: F,
    stop: Stop,
) -> Result<(Vec<FinishedRow<S, K>>, Unstarted), Error>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
    F: EffectFn<S, K>,
{
    let Some(first) = wins.first() else {
        return Ok((Vec::new(), Unstarted::default()));
    };
    let state = first.state();
    let in_flight = in_flight_def(state);
    let done = in_flight.as_ref().map_or("", |f| f.done().name());
    let span = telemetry::span!("stateguard.finish_many", S, DB, "UPDATE", done);
    let rows = finish_many_traced(pool, in_flight, wins, concurrency, &effect, stop)
        .instrument(span.clone())
        .await;
    match &rows {
        Ok((rows, _)) => {
            let mut counts: Vec<(&'static str, u64)> = Vec::with_capacity(8);
            for row in rows {
                let label = match &row.finished {
                    Ok(Finished::Done { .. }) => "done",
                    Ok(Finished::Failed { .. }) => "failed",
                    Ok(Finished::RetryLater) => "retry_later",
                    Ok(Finished::GaveUp { .. }) => "gave_up",
                    Ok(Finished::Superseded { .. }) => "superseded",
                    Ok(Finished::LeaseLost { .. }) => "lease_lost",
                    Ok(Finished::Skipped { .. }) => "skipped",
                    Err(_) => "unfinished",
                };
                match counts.iter_mut().find(|(l, _)| *l == label) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((label, 1)),
                }
            }
            span.record("stateguard.outcome", "finished_many");
            span.record("stateguard.rows", rows.len());
            for (label, n) in counts {
                telemetry::outcomes(S::MACHINE.name(), done, label, n);
            }
        }
        Err(_) => {
            span.record("stateguard.outcome", "refused");
        }
    }
    rows
}

async fn finish_many_traced<S, K, DB, F>(
    pool: &sqlx::Pool<DB>,
    in_flight: Result<&'static InFlightDef<S>, Error>,
    wins: Vec<Won<S, K, Committed>>,
    concurrency: usize,
    effect: &F,
    stop: Stop,
) -> Result<(Vec<FinishedRow<S, K>>, Unstarted), Error>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
    F: EffectFn<S, K>,
{
    let in_flight = in_flight?;
    let state = wins[0].state();
    let refuse = |reason| {
        Error::Misuse(Misuse::BatchOfWins {
            machine: S::MACHINE.name(),
            reason,
        })
    };
    if concurrency == 0 {
        return Err(refuse("a concurrency of 0 runs no effect"));
    }
    if wins.iter().any(|won| won.state() != state) {
        return Err(refuse("the wins are of more than one state"));
    }
    let deadline = wins.iter().map(Won::deadline).min().unwrap_or_default();
    let third = in_flight.lease() / 3;
    let stale: Vec<bool> = wins
        .iter()
        .map(|won| !won.lease_younger_than(third))
        .collect();
    let rows: Vec<WinRow<K>> = wins
        .into_iter()
        .map(|won| {
            let (effect_key, attempt) = (won.effect_key(), won.attempt());
            let (token, deadline) = (won.lease(), won.deadline());
            let (_, key, occurrence) = won.into_parts();
            WinRow {
                key,
                occurrence,
                token: AtomicI64::new(token),
                attempt,
                effect_key,
                deadline,
                in_hand: AtomicBool::new(true),
                started: AtomicBool::new(false),
                unstarted: AtomicBool::new(false),
            }
        })
        .collect();
    // The rows in key order, as the batch statements take them.
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| rows[a].key.cmp(&rows[b].key));
    if order.windows(2).any(|w| rows[w[0]].key == rows[w[1]].key) {
        return Err(refuse("the same row twice"));
    }
    let batch = Finishing {
        pool,
        in_flight,
        state,
        rows: &rows,
        order: &order,
        deadline,
        results: Mutex::new((0..rows.len()).map(|_| None).collect()),
        unstarted: Mutex::new(Unstarted::default()),
    };
    // The leases that may have run out are renewed first, in one
    // statement; a row taken over meanwhile is skipped.
    let renew: Vec<usize> = order.iter().copied().filter(|&i| stale[i]).collect();
    if !renew.is_empty() {
        for (i, moved) in renew.iter().zip(batch.heartbeat(&renew).await?) {
            match moved {
                Moved::Yes(token) => {
                    if let Some(token) = token {
                        rows[*i].token.store(token, Ordering::Relaxed);
                    }
                }
                Moved::No(found) => batch.skipped(*i, found),
            }
        }
    }
    // A takeover past the last attempt gives up without the effect.
    for (i, row) in rows.iter().enumerate() {
        if batch.done(i) {
            continue;
        }
        if let Some(attempts) = exhausted(in_flight, row.attempt) {
            let leased = batch.leased(i);
            let step = Step::new(lease::POSTPONE);
            let mut executor = pool;
            let gave_up = give_up_unreported(&mut executor, in_flight, &leased, attempts, &step);
            let finished = match tokio::time::timeout(deadline, gave_up).await {
                Ok(finished) => finished,
                Err(_) => Err(timeout::<S>(deadline, step.name())),
            };
            batch.settle(i, finished);
        }
    }
    let runnable: Vec<usize> = (0..rows.len()).filter(|&i| !batch.done(i)).collect();
    batch.run(runnable, concurrency, effect, stop).await;
    let results = batch
        .results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let unstarted = batch
        .unstarted
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let rows = rows
        .into_iter()
        .zip(results)
        .filter(|(row, _)| !row.unstarted.load(Ordering::Relaxed))
        .map(|(row, finished)| FinishedRow {
            key: row.key,
            effect_key: row.effect_key,
            finished: finished.unwrap_or_else(|| Err(timeout::<S>(deadline, "done"))),
        })
        .collect();
    Ok((rows, unstarted))
}

/// The error of a row whose effect or follow-up a deadline cut off: it
/// may have happened, and the row stays in flight.
fn timeout<S: StateMachine>(deadline: Duration, transition: &'static str) -> Error {
    Error::Timeout {
        table: S::MACHINE.table(),
        transition,
        deadline,
        outcome_known: false,
    }
}

/// Where a row ended, once it did.
type RowEnd<S> = Result<Finished<S>, Error>;

/// One call's batch: its rows and what became of each.
struct Finishing<'a, S: 'static, K, DB: Backend> {
    pool: &'a sqlx::Pool<DB>,
    in_flight: &'static InFlightDef<S>,
    state: S,
    rows: &'a [WinRow<K>],
    /// The rows' indices in key order.
    order: &'a [usize],
    deadline: Duration,
    results: Mutex<Vec<Option<RowEnd<S>>>>,
    /// The rows a stop left unstarted, once released.
    unstarted: Mutex<Unstarted>,
}

/// A verdict's follow-up, as a flush groups them.
enum Bucket {
    /// `done` (0) or `failed` (1), one statement for the bucket.
    FollowUp(usize),
    /// A later attempt, after this many milliseconds.
    Postpone(i64),
    /// A statement of its own: values, a note, or the last attempt.
    Single,
}

impl<S, K, DB> Finishing<'_, S, K, DB>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
{
    fn done(&self, i: usize) -> bool {
        lock(&self.results)[i].is_some()
    }

    fn settle(&self, i: usize, finished: Result<Finished<S>, Error>) {
        self.rows[i].in_hand.store(false, Ordering::Relaxed);
        lock(&self.results)[i] = Some(finished);
    }

    fn skipped(&self, i: usize, found: Option<LeaseRow<S>>) {
        let current = found.map(|found| found.current);
        self.settle(i, Ok(Finished::Skipped { current }));
    }

    fn leased(&self, i: usize) -> Leased<'_, S, K> {
        let row = &self.rows[i];
        Leased {
            state: self.state,
            key: &row.key,
            occurrence: row.occurrence,
            lease: row.token.load(Ordering::Relaxed),
            attempt: row.attempt,
        }
    }

    /// `indices` (in key order) as a batch statement binds them, with
    /// `extra` as each row's third integer and `values` as its values.
    fn fenced_rows<'v>(
        &'v self,
        indices: &[usize],
        extra: Option<&[i64]>,
        values: &[&'v (dyn Parts<DB> + Sync)],
    ) -> Rows<'v, K, DB> {
        let rows = self.rows;
        let mut ints = vec![
            indices.iter().map(|&i| rows[i].occurrence).collect(),
            indices
                .iter()
                .map(|&i| rows[i].token.load(Ordering::Relaxed))
                .collect(),
        ];
        if let Some(extra) = extra {
            ints.push(extra.to_vec());
        }
        Rows {
            keys: indices.iter().map(|&i| &rows[i].key).collect(),
            ints,
            values: values.to_vec(),
        }
    }

    /// Runs `statement` over `indices`, tried again from the start when
    /// the database rolled it back (a deadlock, a busy database), within
    /// the deadline.
    async fn fenced(
        &self,
        transition: Transition<S>,
        statement: &Fenced<'_>,
        indices: &[usize],
        extra: Option<&[i64]>,
        values: &[&(dyn Parts<DB> + Sync)],
    ) -> Result<Vec<Moved<S>>, Error> {
        let rows = self.fenced_rows(indices, extra, values);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let again = Fenced {
                sql: statement.sql,
                inserts: statement.inserts,
                tokens: statement.tokens,
            };
            let run = fenced::run(
                self.pool,
                self.in_flight,
                self.state,
                transition,
                again,
                &rows,
                self.deadline,
            );
            let error = match tokio::time::timeout(self.deadline, run).await {
                Ok(Ok(moved)) => return Ok(moved),
                Ok(Err(error)) => error,
                Err(_) => return Err(timeout::<S>(self.deadline, transition.name())),
            };
            if !error.retries_whole::<DB>() || attempts >= MAX_ATTEMPTS {
                return Err(error);
            }
            tokio::time::sleep(backoff(attempts)).await;
        }
    }

    /// Renews the leases of `indices` (in key order) in one statement.
    async fn heartbeat(&self, indices: &[usize]) -> Result<Vec<Moved<S>>, Error> {
        let statement = Fenced {
            sql: self.in_flight.renew_many_sql(),
            inserts: [&NONE, &NONE],
            tokens: true,
        };
        // Errors name the effect, which `done` names while it runs.
        let transition = self.in_flight.done().transition();
        self.fenced(transition, &statement, indices, None, &[])
            .await
    }
}

/// `mutex`, locked: no code here panics while holding one, and a
/// poisoned one still holds whole values.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// No statement: an insert a batch does not need.
static NONE: Sql = crate::machine::construct::NONE;
