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
use crate::batched::{Batched, Found, position};
use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::dialect::{Backend, Column, Sql, Statement};
use crate::error::Error;
use crate::executor::Executor;
use crate::executor::sealed::Run;
use crate::executor::tx::Tx;
use crate::machine::key::{DecodeKey, ManyKeys, RowKey};
use crate::outcome::{Committed, Outcome, Uncommitted, Won};
use crate::telemetry;
use crate::transition::bind::{self, Values};
use crate::transition::note::Note;
use crate::transition::row::Read;
use crate::transition::{Bound, Params, Transition};

/// Keys sent in one statement; a longer batch is split into chunks of
/// this many distinct keys, each moved by statements of its own.
pub const APPLY_MANY_CHUNK: usize = 10_000;

impl<S: StateMachine> Transition<S> {
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
    /// names one row: it is [`Error::ExpectingMany`].
    pub async fn apply_many<DB, K>(
        self,
        pool: &sqlx::Pool<DB>,
        keys: &[K],
    ) -> Result<Vec<Outcome<S, K, Committed>>, Error>
    where
        DB: Batched,
        for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
        K: RowKey<DB, S::KeyShape>
            + DecodeKey<DB, S::KeyShape>
            + ManyKeys<DB, S::KeyShape>
            + Ord
            + Clone
            + Send
            + Sync,
    {
        self.apply_many_with(pool, keys, &(), &Note::NONE).await
    }

    pub(crate) async fn apply_many_with<DB, K, P>(
        self,
        pool: &sqlx::Pool<DB>,
        keys: &[K],
        params: &P,
        note: &Note,
    ) -> Result<Vec<Outcome<S, K, Committed>>, Error>
    where
        DB: Batched,
        for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
        K: RowKey<DB, S::KeyShape>
            + DecodeKey<DB, S::KeyShape>
            + ManyKeys<DB, S::KeyShape>
            + Ord
            + Clone
            + Send
            + Sync,
        P: Params<DB>,
    {
        if self.expected().is_some() {
            return Err(Error::ExpectingMany {
                table: S::MACHINE.table(),
                transition: self.name(),
                call: "apply_many",
            });
        }
        let span = telemetry::span!("stateguard.apply_many", S, DB, "UPDATE", self.name());
        let result = self
            .apply_many_traced(pool, keys, params, note)
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

    async fn apply_many_traced<DB, K, P>(
        self,
        pool: &sqlx::Pool<DB>,
        keys: &[K],
        params: &P,
        note: &Note,
    ) -> Result<Vec<Outcome<S, K, Committed>>, Error>
    where
        DB: Batched,
        for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
        K: RowKey<DB, S::KeyShape>
            + DecodeKey<DB, S::KeyShape>
            + ManyKeys<DB, S::KeyShape>
            + Ord
            + Clone
            + Send
            + Sync,
        P: Params<DB>,
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
        let mut outcomes: Vec<Outcome<S, K, Committed>> = Vec::with_capacity(distinct.len());
        for chunk in distinct.chunks(APPLY_MANY_CHUNK) {
            let chunk_keys: Vec<&K> = chunk.iter().map(|&i| &keys[i]).collect();
            let found = self.chunk(pool, &chunk_keys, params, note).await?;
            for (key, found) in chunk_keys.into_iter().zip(found) {
                let outcome = match self.settled(found) {
                    Some(outcome) => outcome,
                    // In a source state and meeting the guard, yet not
                    // moved: it moved away and back between the
                    // statements. This one key takes the one-row path.
                    None => self.apply_with(pool, key.clone(), params, note).await?,
                };
                outcomes.push(outcome);
            }
        }
        let Some(slot) = slot else {
            return Ok(outcomes);
        };
        // Fan out to the input: a repeated key's first occurrence gets its
        // outcome; a later one finds the row where the first left it.
        let mut repeated: Vec<Option<Outcome<S, K, Committed>>> =
            (0..outcomes.len()).map(|_| None).collect();
        for (i, &s) in slot.iter().enumerate() {
            if i != distinct[s] && repeated[s].is_none() {
                repeated[s] = Some(again::<S, K>(&outcomes[s]));
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for (i, s) in slot.into_iter().enumerate() {
            out.push(match &repeated[s] {
                Some(later) if i != distinct[s] => again::<S, K>(later),
                // The first occurrence, whose outcome is read nowhere else.
                _ => std::mem::replace(&mut outcomes[s], Outcome::NotFound),
            });
        }
        Ok(out)
    }

    /// One chunk, within the deadline, tried again when the database asks.
    async fn chunk<DB, K, P>(
        self,
        pool: &sqlx::Pool<DB>,
        keys: &[&K],
        params: &P,
        note: &Note,
    ) -> Result<Vec<Found<S, K>>, Error>
    where
        DB: Batched,
        K: RowKey<DB, S::KeyShape>
            + DecodeKey<DB, S::KeyShape>
            + ManyKeys<DB, S::KeyShape>
            + Ord
            + Send
            + Sync,
        P: Params<DB>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let run = DB::apply_rows(pool, self, keys, params, note);
            let error = match tokio::time::timeout(self.deadline(), run).await {
                Ok(Ok(found)) => return Ok(found),
                Ok(Err(error)) => error,
                Err(_) => {
                    return Err(Error::Timeout {
                        table: S::MACHINE.table(),
                        transition: self.name(),
                        deadline: self.deadline(),
                        outcome_known: false,
                    });
                }
            };
            if !error.retries_whole::<DB>() || attempts >= MAX_ATTEMPTS {
                return Err(error);
            }
            tokio::time::sleep(backoff(attempts)).await;
        }
    }

    /// What one distinct key's row came to; `None` for a row in a source
    /// state that meets the guard yet did not move.
    fn settled<K>(self, found: Found<S, K>) -> Option<Outcome<S, K, Committed>> {
        Some(match found {
            Found::Moved {
                key,
                occurrence,
                lease,
            } => {
                let won = Won::new(self.target(), key, occurrence, lease, 0);
                Outcome::Applied(won.within(self.deadline()))
            }
            Found::Missing => Outcome::NotFound,
            Found::Left { current, .. } if current == self.target() => {
                Outcome::AlreadyInState(current)
            }
            Found::Left { current, .. } if !self.sources().contains(&current) => {
                Outcome::Conflict { current }
            }
            Found::Left {
                current,
                meets: false,
            } => Outcome::Refused { current },
            Found::Left { .. } => return None,
        })
    }
}

/// The outcome of a repeated key's later occurrence.
fn again<S: StateMachine, K>(first: &Outcome<S, K, Committed>) -> Outcome<S, K, Committed> {
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

impl<S: StateMachine, P> Bound<S, P> {
    /// See [`Transition::apply_many`]; every row gets the same values.
    /// Deadline: the transition's ([`Bound::within`]).
    pub async fn apply_many<DB, K>(
        self,
        pool: &sqlx::Pool<DB>,
        keys: &[K],
    ) -> Result<Vec<Outcome<S, K, Committed>>, Error>
    where
        DB: Batched,
        for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
        K: RowKey<DB, S::KeyShape>
            + DecodeKey<DB, S::KeyShape>
            + ManyKeys<DB, S::KeyShape>
            + Ord
            + Clone
            + Send
            + Sync,
        P: Params<DB>,
    {
        let transition = self.transition();
        transition
            .apply_many_with(pool, keys, self.params(), &Note::NONE)
            .await
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// The batch's `[update, read]`: compared by value where the keys allow it
/// and the dialect has such statements, exactly otherwise.
fn statements<DB, S, K>(transition: Transition<S>) -> [&'static Sql; 2]
where
    DB: Backend,
    S: StateMachine,
    K: ManyKeys<DB, S::KeyShape> + Sync,
{
    let def = transition.def();
    let [update, read, _, _] = def.apply_many_sql();
    let [by_value_update, by_value_read] = def.apply_many_by_value_sql();
    match K::by_value() && !DB::sql(by_value_update).is_empty() {
        true => [by_value_update, by_value_read],
        false => [update, read],
    }
}

/// `sql` as `DB` runs it, with the batch's keys, the call's values and
/// its note bound as the statement's plan takes them.
fn prepared<DB, S, K, P>(
    transition: Transition<S>,
    sql: &Sql,
    keys: &[&K],
    params: &P,
    note: &Note,
) -> Result<(Statement, DB::Args), Error>
where
    DB: Backend,
    S: StateMachine,
    K: ManyKeys<DB, S::KeyShape> + Sync,
    P: Params<DB>,
{
    let statement = DB::statement(sql);
    let (keys, params) = (bind::batch(keys), bind::values(params));
    let values = Values {
        keys: Some(&keys),
        values: Some(&params),
        note: Some(note),
        ..Values::NONE
    };
    let args = bind::arguments(statement, &values).map_err(|e| transition.keys_error(e))?;
    Ok((statement, args))
}

/// A row of `many_read` (`read`): the key, status, version and whether
/// it meets the guard.
fn read_row<DB, S, K>(
    transition: Transition<S>,
    read: Statement,
    row: &<DB as sqlx::Database>::Row,
) -> Result<(K, S, i64, bool), Error>
where
    DB: Backend,
    S: StateMachine,
    K: DecodeKey<DB, S::KeyShape>,
{
    let db_error = |e| transition.db_error(e);
    let key = K::decode(row).map_err(db_error)?;
    let row = Read::<DB>::new(read, row);
    let current = transition.read_status(&row)?;
    let version = row.int(Column::Version).map_err(db_error)?;
    let meets = row.int(Column::Meets).map_err(db_error)? != 0;
    Ok((key, current, version, meets))
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// PostgreSQL and SQLite: the update with `RETURNING`, then one read of
/// the keys it did not move.
pub(crate) async fn returning<DB, S, K, P>(
    pool: &sqlx::Pool<DB>,
    transition: Transition<S>,
    keys: &[&K],
    params: &P,
    note: &Note,
) -> Result<Vec<Found<S, K>>, Error>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
    S: StateMachine,
    K: DecodeKey<DB, S::KeyShape> + ManyKeys<DB, S::KeyShape> + Ord + Sync,
    P: Params<DB>,
{
    let mut executor = pool;
    let mut found = update_returning(&mut executor, transition, keys, params, note).await?;
    let [_, read] = statements::<DB, S, K>(transition);
    let db_error = |e| transition.db_error(e);
    // One read for the rest: only the keys the update did not move.
    let left: Vec<&K> = keys
        .iter()
        .zip(&found)
        .filter_map(|(k, f)| (!matches!(f, Found::Moved { .. })).then_some(*k))
        .collect();
    if left.is_empty() {
        return Ok(found);
    }
    let (read, args) = prepared::<DB, S, K, P>(transition, read, &left, params, note)?;
    let rows = executor
        .fetch_all(read.text(), args)
        .await
        .map_err(db_error)?;
    for row in &rows {
        let (key, current, _, meets) = read_row::<DB, S, K>(transition, read, row)?;
        if let Some(i) = position(keys, &key) {
            found[i] = Found::Left { current, meets };
        }
    }
    Ok(found)
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// The winning statement of [`returning`]: the update with `RETURNING` (on
/// SQLite with a history table, after the history rows, in one transaction
/// or savepoint) on `executor`. Keys it did not move are `Missing`.
pub(crate) async fn update_returning<DB, S, K, P, E>(
    executor: &mut E,
    transition: Transition<S>,
    keys: &[&K],
    params: &P,
    note: &Note,
) -> Result<Vec<Found<S, K>>, Error>
where
    DB: Backend,
    E: Run<Database = DB>,
    S: StateMachine,
    K: DecodeKey<DB, S::KeyShape> + ManyKeys<DB, S::KeyShape> + Ord + Sync,
    P: Params<DB>,
{
    let [_, _, _, log] = transition.def().apply_many_sql();
    let [update, _] = statements::<DB, S, K>(transition);
    let mut found: Vec<Found<S, K>> = keys.iter().map(|_| Found::Missing).collect();
    let db_error = |e| transition.db_error(e);
    let (update, args) = prepared::<DB, S, K, P>(transition, update, keys, params, note)?;
    let rows = match DB::sql(log).is_empty() {
        // Without a history table, or on PostgreSQL, which writes the
        // history rows in the update's statement.
        true => executor.fetch_all(update.text(), args).await,
        // SQLite with a history table: the history rows and the update in
        // one transaction.
        false => {
            let (log, log_args) = prepared::<DB, S, K, P>(transition, log, keys, params, note)?;
            executor
                .logged(log.text(), log_args, update.text(), args, true, None)
                .await
                .map(|logged| logged.rows)
        }
    }
    .map_err(db_error)?;
    // The keys, then the version and the lease token where they exist.
    let versioned = S::MACHINE.version().is_some();
    let leased = transition.def().stamps().is_some();
    for row in &rows {
        let key = K::decode(row).map_err(db_error)?;
        let row = Read::<DB>::new(update, row);
        let occurrence = match versioned {
            true => row.int(Column::Version).map_err(db_error)?,
            false => 0,
        };
        let lease = match leased {
            true => row.int(Column::Token).map_err(db_error)?,
            false => 0,
        };
        if let Some(i) = position(keys, &key) {
            found[i] = Found::Moved {
                key,
                occurrence,
                lease,
            };
        }
    }
    Ok(found)
}

#[cfg(feature = "mysql")]
/// MySQL: read and lock the rows, update those in a source state that
/// meet the guard, read their leases, commit.
pub(crate) async fn in_transaction<DB, S, K, P>(
    pool: &sqlx::Pool<DB>,
    transition: Transition<S>,
    keys: &[&K],
    params: &P,
    note: &Note,
) -> Result<Vec<Found<S, K>>, Error>
where
    DB: Backend,
    for<'t, 'c> &'t mut Tx<'c, DB>: Executor<Database = DB, Commit = Uncommitted>,
    S: StateMachine,
    K: DecodeKey<DB, S::KeyShape> + ManyKeys<DB, S::KeyShape> + Ord + Sync,
    P: Params<DB>,
{
    let mut tx = Tx::begin(pool)
        .within(transition.deadline())
        .await
        .map_err(|e| transition.begin_error(e))?;
    let found = lock_and_update(&mut tx, transition, keys, params, note).await?;
    tx.commit(()).await?;
    Ok(found)
}

#[cfg(feature = "mysql")]
/// The statements of [`in_transaction`] inside `tx`: read and lock the
/// rows, then the history rows, the update and the leases' read for those
/// in a source state that meet the guard. An error that rolled the
/// transaction back says so ([`Error::retries_whole`]): the caller starts
/// over.
pub(crate) async fn lock_and_update<DB, S, K, P>(
    mut tx: &mut Tx<'_, DB>,
    transition: Transition<S>,
    keys: &[&K],
    params: &P,
    note: &Note,
) -> Result<Vec<Found<S, K>>, Error>
where
    DB: Backend,
    for<'t, 'c> &'t mut Tx<'c, DB>: Executor<Database = DB, Commit = Uncommitted>,
    S: StateMachine,
    K: DecodeKey<DB, S::KeyShape> + ManyKeys<DB, S::KeyShape> + Ord + Sync,
    P: Params<DB>,
{
    let [update, read, lease_read, log] = transition.def().apply_many_sql();
    let mut found: Vec<Found<S, K>> = keys.iter().map(|_| Found::Missing).collect();
    let retry = |source| transition.tx_error::<DB>(source);
    let (read, args) = prepared::<DB, S, K, P>(transition, read, keys, params, note)?;
    let rows = (&mut tx)
        .fetch_all(read.text(), args)
        .await
        .map_err(retry)?;
    let mut movers: Vec<(usize, K, i64)> = Vec::new();
    for row in &rows {
        let (key, current, version, meets) = read_row::<DB, S, K>(transition, read, row)?;
        let Some(i) = position(keys, &key) else {
            continue;
        };
        if transition.sources().contains(&current) && meets {
            movers.push((i, key, version));
        } else {
            found[i] = Found::Left { current, meets };
        }
    }
    if movers.is_empty() {
        return Ok(found);
    }
    let mover_keys: Vec<&K> = movers.iter().map(|(i, _, _)| keys[*i]).collect();
    if !DB::sql(log).is_empty() {
        // The history rows, from the rows locked above, before they move.
        let (log, args) = prepared::<DB, S, K, P>(transition, log, &mover_keys, params, note)?;
        (&mut tx).execute(log.text(), args).await.map_err(retry)?;
    }
    let (update, args) = prepared::<DB, S, K, P>(transition, update, &mover_keys, params, note)?;
    (&mut tx)
        .execute(update.text(), args)
        .await
        .map_err(retry)?;
    // Locked since the read: each moved, from the version read.
    let mut leases: Vec<i64> = vec![0; keys.len()];
    if !DB::sql(lease_read).is_empty() {
        let (lease_read, args) =
            prepared::<DB, S, K, P>(transition, lease_read, &mover_keys, params, note)?;
        let rows = (&mut tx)
            .fetch_all(lease_read.text(), args)
            .await
            .map_err(retry)?;
        for row in &rows {
            let key = K::decode(row).map_err(|e| transition.db_error(e))?;
            let lease = Read::<DB>::new(lease_read, row)
                .int(Column::Token)
                .map_err(|e| transition.db_error(e))?;
            if let Some(i) = position(keys, &key) {
                leases[i] = lease;
            }
        }
    }
    let versioned = S::MACHINE.version().is_some();
    for (i, key, version) in movers {
        let lease = leases[i];
        found[i] = Found::Moved {
            key,
            occurrence: if versioned { version + 1 } else { 0 },
            lease,
        };
    }
    Ok(found)
}
