//! Batches: `transition.apply_many(pool, &keys)` applies one transition to
//! many keys with one winning statement and one read for the rest, and
//! returns one outcome per key, in input order.

// Each backend uses some of the helpers below; a build with fewer backends
// leaves some imports unused.
#![cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused_imports)
)]

use tracing::Instrument;

use crate::StateMachine;
use crate::batch::batched::{Batch, BatchRunner, Batched, Found};
use crate::deadline::call::Call;
use crate::deadline::call::Sent;
use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::error::{Error, Misuse};
use crate::executor::seam::Seam;
use crate::machine::key::{BatchKey, Batchable, KeyShape};
use crate::outcome::{Outcome, Won};
use crate::telemetry;
#[allow(unused_imports)] // in the docs
use crate::transition::Bound;
use crate::transition::bind::{self, Parts};
use crate::transition::note::{Note, NoteSlot};
use crate::transition::{Binds, Class, Transition};

/// Keys sent in one statement; a longer batch is split into chunks of
/// this many distinct keys, each moved by statements of its own.
pub const APPLY_MANY_CHUNK: usize = 10_000;

impl<S: StateMachine, P: Send + Sync + 'static, N: NoteSlot> Transition<S, P, N> {
    /// Applies this transition to every key of `keys`: one outcome per key,
    /// in input order. `Applied(Won)` for each row it moved (committed; one
    /// win at most per row, a repeated key's later occurrences are
    /// `AlreadyInState`), and `AlreadyInState`, `Conflict`, `Refused` (a
    /// guard) or `NotFound` for the others, as [`apply`](Transition::apply)
    /// gives them.
    ///
    /// The rows that move, move in one statement; the others are read in
    /// one more. Keys travel as one bound value (an array per key column on
    /// PostgreSQL, JSON on SQLite and MySQL), never as a list in the SQL.
    /// Rows are taken in key order (on PostgreSQL through the key's index,
    /// on MySQL in the order of the keys' text), so batches over
    /// overlapping keys do not deadlock; a deadlock that a plan still runs
    /// into, or a busy database, is retried inside the call. More than
    /// [`APPLY_MANY_CHUNK`] distinct keys are split into chunks of that
    /// many, each applied, and committed, on its own; each chunk keeps the
    /// transition's deadline.
    ///
    /// PostgreSQL and SQLite run the update, then the read for the keys it
    /// did not move. MySQL, which has no `UPDATE … RETURNING`, reads and
    /// locks the rows, updates those in a source state and reads their
    /// leases, in one transaction. [`expecting`](Transition::expecting)
    /// names one row: it is [`Misuse::ExpectingMany`](crate::Misuse::ExpectingMany). Inside the caller's
    /// transaction (`&mut tx`, see [`BatchRunner`]) the chunks run there,
    /// the wins are [`Uncommitted`](crate::Uncommitted) until the commit,
    /// and a deadlock is [`Error::RetryTransaction`]. Every row gets the
    /// same values (a [`Bound`]); noted ([`Transition::noted`]), the
    /// history row of every move records the note.
    ///
    /// When a later statement fails after an earlier one moved rows (the
    /// read after the update, a later chunk, MySQL's read of the leases),
    /// nothing is hidden: on a pool, where the moves committed, the error
    /// is [`Error::Unreported`], whose outcome is unknown (apply again to
    /// learn each row's state; a row moved into an in-flight state is
    /// recovered after its lease, under the same effect key); inside the
    /// caller's transaction the error comes as it is, and the transaction
    /// can no longer commit ([`Tx::commit`](crate::Tx::commit) answers
    /// [`Error::RolledBack`]), so no move commits without its win. An
    /// error before anything moved is the statement's own.
    ///
    /// ```
    /// # use stateguard::{Outcome, StateMachine, Won};
    /// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// # #[state_machine(table = "payouts", column = "status", key = "id")]
    /// # enum PayoutStatus {
    /// #     #[state(initial)]
    /// #     #[transition(start -> Sending)]
    /// #     Pending,
    /// #     Sending,
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
    /// #     .execute(&pool).await?;
    /// # sqlx::query("INSERT INTO payouts VALUES (1, 'pending'), (2, 'pending'), (3, 'pending')")
    /// #     .execute(&pool).await?;
    /// // One statement for the batch; each key gets its own outcome, in order.
    /// let outcomes = PayoutStatus::start().apply_many(&pool, &[1_i64, 2, 9]).await?;
    /// assert!(outcomes[0].is_applied() && outcomes[1].is_applied());
    /// assert_eq!(outcomes[2], Outcome::NotFound);
    /// # Ok(()) }
    /// ```
    pub fn apply_many<'a, E, K>(
        self,
        executor: E,
        keys: &'a [K],
    ) -> Call<'a, Vec<Outcome<S, K, E::Commit>>>
    where
        E: BatchRunner<Database: Binds<P>> + 'a,
        K: BatchKey<S, E::Database> + 'a,
    {
        self.call(move |this| async move {
            this.recorded()?;
            this.transition()
                .apply_many_with(
                    executor,
                    keys,
                    &bind::values(&this.params),
                    this.note_or_none(),
                )
                .await
        })
    }
}

impl<S: StateMachine> Transition<S> {
    pub(crate) async fn apply_many_with<E, K>(
        self,
        executor: E,
        keys: &[K],
        params: &(dyn Parts<E::Database> + Sync),
        note: &Note,
    ) -> Result<Vec<Outcome<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        K: BatchKey<S, E::Database>,
    {
        if self.expected().is_some() {
            return Err(Error::Misuse(Misuse::ExpectingMany {
                table: S::MACHINE.table(),
                transition: self.name(),
                call: "apply_many",
            }));
        }
        let span = telemetry::span!(
            "stateguard.apply_many",
            S,
            E::Database,
            "UPDATE",
            self.name()
        );
        let result = self
            .apply_many_traced(executor, keys, params, note)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(outcomes) => {
                // One count per kind of outcome, not one call per key.
                let mut counts: Vec<(&'static str, u64)> = Vec::with_capacity(6);
                for outcome in outcomes {
                    let label = crate::transition::outcome_label(outcome);
                    match counts.iter_mut().find(|(l, _)| *l == label) {
                        Some((_, n)) => *n += 1,
                        None => counts.push((label, 1)),
                    }
                }
                let applied = counts.iter().find(|(l, _)| *l == "applied");
                span.record("stateguard.outcome", "applied_many");
                span.record("stateguard.rows", applied.map_or(0, |&(_, n)| n));
                for (label, n) in counts {
                    telemetry::outcomes(S::MACHINE.name(), self.name(), label, n);
                }
            }
            Err(_) => {
                span.record("stateguard.outcome", "error");
            }
        }
        result
    }

    async fn apply_many_traced<E, K>(
        self,
        mut executor: E,
        keys: &[K],
        params: &(dyn Parts<E::Database> + Sync),
        note: &Note,
    ) -> Result<Vec<Outcome<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        K: BatchKey<S, E::Database>,
    {
        // The distinct keys, in key order; `slot[i]` is the distinct key of
        // input `i`. Keys given sorted and distinct are their own order.
        let (distinct, slot) = match keys.windows(2).all(|w| w[0] < w[1]) {
            true => ((0..keys.len()).collect(), None),
            false => {
                let mut order: Vec<usize> = (0..keys.len()).collect();
                // Equal keys in input order: `distinct[s]` is the first
                // occurrence of its key.
                order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]).then(a.cmp(&b)));
                let mut slot = vec![0; keys.len()];
                let mut distinct: Vec<usize> = Vec::new();
                for i in order {
                    if distinct.last().is_none_or(|&last| keys[last] != keys[i]) {
                        distinct.push(i);
                    }
                    slot[i] = distinct.len() - 1;
                }
                (distinct, Some(slot))
            }
        };
        let mut outcomes: Vec<Outcome<S, K, E::Commit>> = Vec::with_capacity(distinct.len());
        let (classify, effect) = (self.classifier(), self.effect_prefix());
        let sent = Sent::default();
        let batch = self.batch(&classify, &effect, &sent);
        // What earlier chunks moved: a later failure must not hide it.
        let mut seam = Seam::new(S::MACHINE.table(), self.name());
        for part in distinct.chunks(APPLY_MANY_CHUNK) {
            let chunk_keys: Vec<&K> = part.iter().map(|&i| &keys[i]).collect();
            let found = chunk::<E::Database, E, S::KeyShape, K>(
                &mut executor,
                batch,
                &chunk_keys,
                params,
                note,
            )
            .await
            .map_err(|e| seam.failed(&mut executor, e))?;
            seam.changed_if(found.iter().any(|f| matches!(f, Found::Moved { .. })));
            let scope = executor.scope();
            for (key, found) in chunk_keys.into_iter().zip(found) {
                let settled = self
                    .settled(found, scope)
                    .map_err(|e| seam.failed(&mut executor, e))?;
                let outcome = match settled {
                    Some(outcome) => outcome,
                    // In a source state and meeting the guard, yet not
                    // moved: it moved away and back between the
                    // statements. This one key takes the one-row path.
                    None => self
                        .apply_with(&mut executor, key.clone(), params, note)
                        .await
                        .map_err(|e| seam.failed(&mut executor, e))?,
                };
                seam.changed_if(outcome.is_applied());
                outcomes.push(outcome);
            }
        }
        let Some(slot) = slot else {
            return Ok(outcomes);
        };
        // Fan out to the input: a repeated key's first occurrence gets its
        // outcome; a later one finds the row where the first left it.
        let mut repeated: Vec<Option<Outcome<S, K, E::Commit>>> =
            (0..outcomes.len()).map(|_| None).collect();
        for (i, &s) in slot.iter().enumerate() {
            if i != distinct[s] && repeated[s].is_none() {
                repeated[s] = Some(again::<S, K, E::Commit>(&outcomes[s]));
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for (i, s) in slot.into_iter().enumerate() {
            out.push(match &repeated[s] {
                Some(later) if i != distinct[s] => again::<S, K, E::Commit>(later),
                // The first occurrence, whose outcome is read nowhere else.
                _ => std::mem::replace(&mut outcomes[s], Outcome::NotFound),
            });
        }
        Ok(out)
    }

    /// What one distinct key's row came to; `None` for a row in a source
    /// state that meets the guard yet did not move.
    fn settled<K, C>(self, found: Found<K>, scope: u64) -> Result<Option<Outcome<S, K, C>>, Error> {
        Ok(Some(match found {
            Found::Moved {
                key,
                occurrence,
                lease,
            } => {
                let won = Won::new(self.target(), key, occurrence, lease, scope);
                Outcome::Applied(won.within(self.deadline()))
            }
            Found::Missing => Outcome::NotFound,
            Found::Left {
                current,
                class,
                meets,
            } => {
                let current = S::parse_db_str(&current)?;
                match class {
                    Class::Target => Outcome::AlreadyInState(current),
                    Class::Elsewhere => Outcome::Conflict { current },
                    Class::Source if !meets => Outcome::Refused { current },
                    Class::Source => return Ok(None),
                }
            }
        }))
    }
}

/// One chunk, within the deadline, tried again when the database asks;
/// inside the caller's transaction, such an error is the caller's to
/// retry, and a chunk cut off by the deadline leaves a transaction that
/// cannot commit.
async fn chunk<DB, E, Sh, K>(
    executor: &mut E,
    batch: Batch<'_>,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
) -> Result<Vec<Found<K>>, Error>
where
    DB: Batched,
    E: BatchRunner<Database = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let mut attempts = 0;
    loop {
        attempts += 1;
        let run = DB::apply_rows::<E, Sh, K>(executor, batch, keys, params, note);
        let error = match tokio::time::timeout(batch.deadline(), run).await {
            Ok(Ok(found)) => return Ok(found),
            Ok(Err(error)) => error,
            Err(_) => {
                executor.abandoned();
                return Err(Error::Timeout {
                    table: batch.table(),
                    transition: batch.name(),
                    deadline: batch.deadline(),
                    outcome_known: false,
                });
            }
        };
        let own = executor.pool().is_some();
        if !own || !error.retries_whole::<DB>() || attempts >= MAX_ATTEMPTS {
            return Err(error);
        }
        tokio::time::sleep(backoff(attempts)).await;
    }
}

/// The outcome of a repeated key's later occurrence.
fn again<S: StateMachine, K, C>(first: &Outcome<S, K, C>) -> Outcome<S, K, C> {
    match first {
        Outcome::Applied(won) => Outcome::AlreadyInState(won.state()),
        Outcome::AlreadyInState(state) => Outcome::AlreadyInState(*state),
        Outcome::Conflict { current } => Outcome::Conflict { current: *current },
        Outcome::NotFound => Outcome::NotFound,
        Outcome::Stale {
            current,
            occurrence,
        } => Outcome::Stale {
            current: *current,
            occurrence: *occurrence,
        },
        Outcome::Refused { current } => Outcome::Refused { current: *current },
    }
}
