//! What a flush of `finish_many` writes: each buffered verdict's
//! follow-up, one statement per follow-up kind and batch.

use std::sync::atomic::Ordering;

use crate::StateMachine;
use crate::deadline::retry::Step;
use crate::dialect::Backend;
use crate::effects::fenced::{Fenced, Moved};
use crate::effects::finished::Finished;
use crate::effects::follow_up::follow_up;
use crate::effects::lease::{self};
use crate::effects::verdict::{Chosen, FollowUpValues, Verdict};
use crate::error::{Error, Misuse};
use crate::machine::key::BatchKey;
use crate::transition::Transition;
use crate::transition::bind::Parts;
use crate::transition::note::Note;

use super::{Bucket, Finishing, NONE, timeout};

impl<S, K, DB> Finishing<'_, S, K, DB>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
{
    /// Writes the follow-ups of `verdicts`: one statement per follow-up
    /// for the rows that share it, one each for the rest.
    pub(super) async fn flush(&self, verdicts: Vec<(usize, Verdict<S>)>) {
        let in_flight = self.in_flight;
        let mut buckets: Vec<(usize, Bucket, Verdict<S>)> = Vec::with_capacity(verdicts.len());
        for (i, verdict) in verdicts {
            match self.bucket(i, &verdict) {
                Ok(Some(bucket)) => buckets.push((i, bucket, verdict)),
                Ok(None) => self.settle(i, Ok(Finished::RetryLater)),
                Err(error) => self.settle(i, Err(error)),
            }
        }
        // In key order, as the statements take them.
        buckets.sort_by(|a, b| self.rows[a.0].key.cmp(&self.rows[b.0].key));
        for f in [0, 1] {
            let rows: Vec<(usize, &Verdict<S>)> = buckets
                .iter()
                .filter(|(_, b, _)| matches!(b, Bucket::FollowUp(g) if *g == f))
                .map(|(i, _, verdict)| (*i, verdict))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let transition = match (f, in_flight.failed) {
                (1, Some(failed)) => failed.transition(),
                _ => in_flight.done().transition(),
            };
            let statement = Fenced {
                sql: &in_flight.follow_up_many_sql()[f],
                inserts: [
                    &in_flight.follow_up_many_history_insert_sql()[f],
                    &in_flight.follow_up_many_outbox_insert_sql()[f],
                ],
                tokens: false,
            };
            // Each row's values, as `bucket` found them to fit.
            let mut chosen = Vec::with_capacity(rows.len());
            for (i, verdict) in rows {
                match Chosen::of((*verdict).clone(), in_flight, self.state) {
                    Ok(Some(one)) => chosen.push((i, one)),
                    Ok(None) => self.settle(i, Ok(Finished::RetryLater)),
                    Err(error) => self.settle(i, Err(error)),
                }
            }
            let mut indices = Vec::with_capacity(chosen.len());
            let mut values = Vec::with_capacity(chosen.len());
            for (i, one) in &chosen {
                match one.values::<DB>() {
                    Ok(bound) => {
                        indices.push(*i);
                        values.push(bound);
                    }
                    Err(error) => self.settle(*i, Err(error)),
                }
            }
            if indices.is_empty() {
                continue;
            }
            let values: Vec<&(dyn Parts<DB> + Sync)> = (values.iter())
                .map(|bound| bound as &(dyn Parts<DB> + Sync))
                .collect();
            let moved = self
                .fenced(transition, &statement, &indices, None, &values)
                .await;
            self.settled(transition, f == 1, &indices, moved, &buckets)
                .await;
        }
        let postponed: Vec<(usize, i64)> = buckets
            .iter()
            .filter_map(|(i, b, _)| match b {
                Bucket::Postpone(ms) => Some((*i, *ms)),
                _ => None,
            })
            .collect();
        if let (false, Some(retry)) = (postponed.is_empty(), in_flight.retry()) {
            let indices: Vec<usize> = postponed.iter().map(|(i, _)| *i).collect();
            let delays: Vec<i64> = postponed.iter().map(|(_, ms)| *ms).collect();
            let statement = Fenced {
                sql: retry.postpone_many_sql(),
                inserts: [&NONE, &NONE],
                tokens: false,
            };
            let transition = in_flight.done().transition();
            let moved = self
                .fenced(transition, &statement, &indices, Some(&delays), &[])
                .await;
            self.postponed(&indices, moved, &buckets).await;
        }
        for (i, bucket, verdict) in buckets {
            if matches!(bucket, Bucket::Single) {
                self.one(i, verdict).await;
            }
        }
    }

    /// Which statement writes `verdict`'s follow-up; `None` for a verdict
    /// that writes nothing (a retry without `retry(…)`).
    fn bucket(&self, i: usize, verdict: &Verdict<S>) -> Result<Option<Bucket>, Error> {
        let in_flight = self.in_flight;
        let retry = match verdict {
            Verdict::RetryLater => None,
            Verdict::Retry(retry) => Some(retry),
            verdict => {
                let Some(chosen) = Chosen::of(verdict.clone(), in_flight, self.state)? else {
                    return Ok(None);
                };
                let f = usize::from(chosen.failed);
                let batched = !DB::sql(&in_flight.follow_up_many_sql()[f]).is_empty()
                    && chosen.note == Note::NONE;
                return Ok(Some(match batched {
                    true => Bucket::FollowUp(f),
                    false => Bucket::Single,
                }));
            }
        };
        let wait = retry.and_then(|retry| retry.wait());
        let Some(def) = in_flight.retry() else {
            // Without `retry(…)`, the lease says when.
            return match wait {
                Some(_) => Err(Error::Misuse(Misuse::RetryNotDeclared {
                    machine: S::MACHINE.name(),
                    state: self.state.as_str(),
                })),
                None => Ok(None),
            };
        };
        let attempt = self.rows[i].attempt.unwrap_or(1);
        // A reason to keep (`last_error`) is written one row at a time:
        // the batch statement writes none.
        let reason = retry.and_then(|retry| retry.reason());
        if attempt >= def.max_attempts() || (reason.is_some() && def.last_error_column().is_some())
        {
            return Ok(Some(Bucket::Single));
        }
        let wait = wait.unwrap_or_else(|| crate::effects::lease::wait_after(def, attempt));
        Ok(Some(Bucket::Postpone(
            i64::try_from(wait.as_millis()).unwrap_or(i64::MAX),
        )))
    }

    /// What a batched follow-up came to for each of `indices`; a row
    /// still held yet not moved (it moved away and back in between), and
    /// every row of a statement that failed, finish one statement each.
    async fn settled(
        &self,
        transition: Transition<S>,
        failed: bool,
        indices: &[usize],
        moved: Result<Vec<Moved<S>>, Error>,
        buckets: &[(usize, Bucket, Verdict<S>)],
    ) {
        let versioned = S::MACHINE.version().is_some();
        let target = transition.target();
        let landed = |occurrence: i64| {
            let occurrence = if versioned {
                occurrence + 1
            } else {
                occurrence
            };
            match failed {
                true => Finished::Failed {
                    state: target,
                    occurrence,
                },
                false => Finished::Done {
                    state: target,
                    occurrence,
                },
            }
        };
        let moved = match moved {
            Ok(moved) => moved,
            Err(error) => {
                tracing::debug!(
                    table = S::MACHINE.table(),
                    %error,
                    "a batch's follow-up failed; finishing its rows one by one"
                );
                for &i in indices {
                    self.one(i, verdict_of(buckets, i)).await;
                }
                return;
            }
        };
        for (&i, moved) in indices.iter().zip(moved) {
            let row = &self.rows[i];
            let found = match moved {
                Moved::Yes(_) => {
                    self.settle(i, Ok(landed(row.occurrence)));
                    continue;
                }
                Moved::No(None) => {
                    self.settle(
                        i,
                        Err(Error::RowVanished {
                            table: S::MACHINE.table(),
                            transition: transition.name(),
                        }),
                    );
                    continue;
                }
                Moved::No(Some(found)) => found,
            };
            // This very follow-up already finished this occurrence.
            if found.current == target && (!versioned || found.version == row.occurrence + 1) {
                self.settle(i, Ok(landed(row.occurrence)));
                continue;
            }
            match found.missed(
                self.state,
                row.occurrence,
                row.token.load(Ordering::Relaxed),
            ) {
                Some(missed) => self.settle(i, Ok(missed_finished(missed))),
                None => self.one(i, verdict_of(buckets, i)).await,
            }
        }
    }

    /// What a batched postponement came to for each of `indices`.
    async fn postponed(
        &self,
        indices: &[usize],
        moved: Result<Vec<Moved<S>>, Error>,
        buckets: &[(usize, Bucket, Verdict<S>)],
    ) {
        let moved = match moved {
            Ok(moved) => moved,
            Err(_) => {
                for &i in indices {
                    self.one(i, verdict_of(buckets, i)).await;
                }
                return;
            }
        };
        for (&i, moved) in indices.iter().zip(moved) {
            let row = &self.rows[i];
            match moved {
                Moved::Yes(_) => self.settle(i, Ok(Finished::RetryLater)),
                Moved::No(None) => self.settle(
                    i,
                    Err(Error::RowVanished {
                        table: S::MACHINE.table(),
                        transition: lease::POSTPONE,
                    }),
                ),
                Moved::No(Some(found)) => {
                    match found.missed(
                        self.state,
                        row.occurrence,
                        row.token.load(Ordering::Relaxed),
                    ) {
                        Some(missed) => self.settle(i, Ok(missed_finished(missed))),
                        None => self.one(i, verdict_of(buckets, i)).await,
                    }
                }
            }
        }
    }

    /// One row's follow-up in a statement of its own, as `finish` writes
    /// it.
    async fn one(&self, i: usize, verdict: Verdict<S>) {
        let mut executor = self.pool;
        let step = Step::new(self.in_flight.done().name());
        let row = self.leased(i);
        let finished = follow_up(&mut executor, self.in_flight, row, verdict, &step);
        let finished = match tokio::time::timeout(self.deadline, finished).await {
            Ok(finished) => finished,
            Err(_) => Err(timeout::<S>(self.deadline, step.name())),
        };
        self.settle(i, finished);
    }
}
/// The verdict row `i` brought to a flush.
fn verdict_of<S>(buckets: &[(usize, Bucket, Verdict<S>)], i: usize) -> Verdict<S> {
    buckets
        .iter()
        .find(|(j, _, _)| *j == i)
        .map_or(Verdict::RetryLater, |(_, _, verdict)| verdict.clone())
}

/// A row that a fenced statement missed, as [`Finished`] says it.
fn missed_finished<S: StateMachine>(missed: lease::Settled<S>) -> Finished<S> {
    match missed {
        lease::Settled::LeaseLost(current) => Finished::LeaseLost { current },
        lease::Settled::Superseded(current)
        | lease::Settled::Applied(current)
        | lease::Settled::Already(current) => Finished::Superseded { current },
        lease::Settled::Vanished => Finished::Skipped { current: None },
    }
}
