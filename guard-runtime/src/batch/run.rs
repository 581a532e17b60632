//! What runs a batch's statements on each backend: one `UPDATE …
//! RETURNING` where the dialect has it, a locking read and an update in a
//! transaction on MySQL. The `Batched` impls in `claim/backends.rs` call them, for
//! `apply_many` and for the rows a claim took.

// Each backend uses some of the helpers below; a build with fewer backends
// leaves some imports unused.
#![cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused_imports)
)]

use crate::batch::batched::{Batch, BatchRunner, Found, position};
use crate::dialect::{Backend, Column, Sql, Statement};
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::executor::sealed::Run;
use crate::executor::seam::Seam;
use crate::executor::tx::Tx;
use crate::machine::key::{Batchable, DecodeKey, KeyShape, KeyText, ManyKeys};
use crate::transition::Class;
use crate::transition::bind::{self, Parts, Values};
use crate::transition::note::Note;
use crate::transition::row::Read;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// The batch's `[update, read]`: compared by value where the keys allow it
/// and the dialect has such statements, exactly otherwise.
fn statements<DB, Sh, K>(transition: Batch<'_>) -> [&'static Sql; 2]
where
    DB: Backend,
    Sh: KeyShape,
    K: ManyKeys<DB, Sh> + Sync,
{
    let many = transition.many();
    let (update, read) = (many.update(), many.read());
    let [by_value_update, by_value_read] = transition.by_value();
    match K::by_value() && !DB::sql(by_value_update).is_empty() {
        true => [by_value_update, by_value_read],
        false => [update, read],
    }
}

/// `sql` as `DB` runs it, with the batch's keys (and their effect keys,
/// for a statement that writes their messages), the call's values and its
/// note bound as the statement's plan takes them.
fn prepared<DB, Sh, K>(
    transition: Batch<'_>,
    sql: &Sql,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
) -> Result<(Statement, DB::Args), Error>
where
    DB: Backend,
    Sh: KeyShape,
    K: ManyKeys<DB, Sh> + KeyText<Sh> + Sync,
{
    let statement = DB::statement(sql);
    let effects = bind::effect_keys::<Sh, K>(keys, &[], transition.effect());
    let keys = bind::batch(keys);
    let values = Values {
        keys: Some(&keys),
        values: Some(params),
        note: Some(note),
        effects: Some(&effects),
        ..Values::NONE
    };
    let args = bind::arguments(statement, &values).map_err(|e| transition.keys_error(e))?;
    Ok((statement, args))
}

/// A row of `many_read` (`read`): the key, status (and where it stands),
/// version and whether it meets the guard.
fn read_row<DB, Sh, K>(
    transition: Batch<'_>,
    read: Statement,
    row: &<DB as sqlx::Database>::Row,
) -> Result<(K, (String, Class), i64, bool), Error>
where
    DB: Backend,
    Sh: KeyShape,
    K: DecodeKey<DB, Sh>,
{
    let db_error = |e| transition.db_error(e);
    let row = Read::<DB>::new(read, row);
    let key = row.key::<K, Sh>().map_err(db_error)?;
    let current = transition.read_status(&row)?;
    let version = row.int(Column::Occurrence).map_err(db_error)?;
    let meets = row.int(Column::Meets).map_err(db_error)? != 0;
    Ok((key, current, version, meets))
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// PostgreSQL and SQLite: the update with `RETURNING`, then one read of
/// the keys it did not move.
pub(crate) async fn returning<DB, E, Sh, K>(
    executor: &mut E,
    transition: Batch<'_>,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
) -> Result<Vec<Found<K>>, Error>
where
    DB: Backend,
    E: Run<Db = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let mut found = update_returning(executor, transition, keys, params, note).await?;
    // Committed on a pool, waiting in the caller's transaction: a failure
    // of the read below must not hide these moves.
    let mut seam = Seam::new(transition.table(), transition.name());
    seam.changed_if(found.iter().any(|f| matches!(f, Found::Moved { .. })));
    match read_left(executor, transition, keys, params, note, &mut found).await {
        Ok(()) => Ok(found),
        Err(error) => Err(seam.failed(executor, error)),
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// The second statement of [`returning`]: one read of the keys the update
/// did not move, which `found` then records.
async fn read_left<DB, E, Sh, K>(
    executor: &mut E,
    transition: Batch<'_>,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
    found: &mut [Found<K>],
) -> Result<(), Error>
where
    DB: Backend,
    E: Run<Db = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let [_, read] = statements::<DB, Sh, K>(transition);
    let db_error = |e| transition.db_error(e);
    // One read for the rest: only the keys the update did not move.
    let left: Vec<&K> = keys
        .iter()
        .zip(found.iter())
        .filter_map(|(k, f)| (!matches!(f, Found::Moved { .. })).then_some(*k))
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    let (read, args) = prepared::<DB, Sh, K>(transition, read, &left, params, note)?;
    let rows = executor.rows(read, args).await.map_err(db_error)?;
    for row in &rows {
        let (key, (current, class), _, meets) = read_row::<DB, Sh, K>(transition, read, row)?;
        if let Some(i) = position(keys, &key) {
            found[i] = Found::Left {
                current,
                class,
                meets,
            };
        }
    }
    Ok(())
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
/// The winning statement of [`returning`]: the update with `RETURNING` (on
/// SQLite with a history table, after the history rows, in one transaction
/// or savepoint) on `executor`. Keys it did not move are `Missing`.
pub(crate) async fn update_returning<DB, Sh, K, E>(
    executor: &mut E,
    transition: Batch<'_>,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
) -> Result<Vec<Found<K>>, Error>
where
    DB: Backend,
    E: Run<Db = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let many = transition.many();
    let inserts: Vec<&Sql> = [many.history_insert(), many.outbox_insert()]
        .into_iter()
        .filter(|insert| !DB::sql(insert).is_empty())
        .collect();
    let [update, _] = statements::<DB, Sh, K>(transition);
    let mut found: Vec<Found<K>> = keys.iter().map(|_| Found::Missing).collect();
    let db_error = |e| transition.db_error(e);
    let (update, args) = prepared::<DB, Sh, K>(transition, update, keys, params, note)?;
    // SQLite's history rows and messages, where the machine has them.
    let inserts = inserts
        .into_iter()
        .map(|insert| {
            let (insert, args) = prepared::<DB, Sh, K>(transition, insert, keys, params, note)?;
            Ok((insert.text(), args))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let rows = executor
        .rows_after_inserts(update, args, inserts)
        .await
        .map_err(db_error)?;
    // The keys, then the version and the lease token where they exist.
    let versioned = transition.versioned();
    let leased = transition.leased();
    for row in &rows {
        let row = Read::<DB>::new(update, row);
        let key = row.key::<K, Sh>().map_err(db_error)?;
        let occurrence = match versioned {
            true => row.int(Column::Occurrence).map_err(db_error)?,
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
pub(crate) async fn in_transaction<DB, E, Sh, K>(
    executor: &mut E,
    transition: Batch<'_>,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
) -> Result<Vec<Found<K>>, Error>
where
    DB: Backend,
    E: BatchRunner<Database = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    // Inside the caller's transaction, its statements run there.
    let Some(pool) = executor.pool().cloned() else {
        prepare_first(executor, transition, None).await?;
        return lock_and_update(executor, transition, keys, params, note).await;
    };
    let mut tx = Tx::begin(&pool)
        .within(transition.deadline())
        .await
        .map_err(|e| transition.begin_error(e))?;
    prepare_first(&mut &mut tx, transition, None).await?;
    let found = lock_and_update(&mut &mut tx, transition, keys, params, note).await?;
    tx.commit(()).await?;
    Ok(found)
}

/// Where the database wants it (`Driver::PREPARES_FIRST`), prepares every
/// statement of [`lock_and_update`] (after `first`, a statement to run
/// before them) on `tx`'s connection, or finds them in its cache: called
/// before the transaction's first write and its locking read, so that a
/// Galera node's abort of the transaction is never met by a
/// `COM_STMT_PREPARE`. A failure writes nothing (inside a transaction it
/// leaves the transaction unable to commit), and is returned as the
/// batch's own errors are.
pub(crate) async fn prepare_first<DB, E>(
    tx: &mut E,
    transition: Batch<'_>,
    first: Option<&Sql>,
) -> Result<(), Error>
where
    DB: Backend,
    E: Run<Db = DB>,
{
    if !DB::PREPARES_FIRST {
        return Ok(());
    }
    let statements = DB::texts(first.into_iter().chain(transition.many().in_transaction()));
    tx.prepare_first(statements)
        .await
        .map_err(|e| transition.tx_error::<DB>(e))
}

#[cfg(feature = "mysql")]
/// The statements of [`in_transaction`] inside `tx`: read and lock the
/// rows, then the history rows, the update and the leases' read for those
/// in a source state that meet the guard. An error that rolled the
/// transaction back says so ([`Error::retries_whole`]): the caller starts
/// over.
pub(crate) async fn lock_and_update<DB, E, Sh, K>(
    tx: &mut E,
    transition: Batch<'_>,
    keys: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
) -> Result<Vec<Found<K>>, Error>
where
    DB: Backend,
    E: Run<Db = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let many = transition.many();
    let (update, read) = (many.update(), many.read());
    let mut found: Vec<Found<K>> = keys.iter().map(|_| Found::Missing).collect();
    let retry = |source| transition.tx_error::<DB>(source);
    let (read, args) = prepared::<DB, Sh, K>(transition, read, keys, params, note)?;
    let rows = tx.rows(read, args).await.map_err(retry)?;
    let mut movers: Vec<(usize, K, i64)> = Vec::new();
    for row in &rows {
        let (key, (current, class), version, meets) = read_row::<DB, Sh, K>(transition, read, row)?;
        let Some(i) = position(keys, &key) else {
            continue;
        };
        if class == Class::Source && meets {
            movers.push((i, key, version));
        } else {
            found[i] = Found::Left {
                current,
                class,
                meets,
            };
        }
    }
    if movers.is_empty() {
        return Ok(found);
    }
    let mover_keys: Vec<&K> = movers.iter().map(|(i, _, _)| keys[*i]).collect();
    // The inserts and the moves wait in the transaction: a failure after
    // any of them leaves it unable to commit.
    let mut seam = Seam::new(transition.table(), transition.name());
    // The history rows and the messages, from the rows locked above,
    // before they move: one each per row.
    for insert in [many.history_insert(), many.outbox_insert()] {
        if DB::sql(insert).is_empty() {
            continue;
        }
        let (insert, args) = prepared::<DB, Sh, K>(transition, insert, &mover_keys, params, note)?;
        let written = tx
            .changed(insert, args)
            .await
            .map_err(|e| seam.failed(tx, retry(e)))?;
        seam.changed_if(written > 0);
        if written != mover_keys.len() as u64 {
            let error = transition.db_error(sqlx::Error::Protocol(format!(
                "an insert beside the move wrote {written} rows for {} rows locked to move",
                mover_keys.len()
            )));
            return Err(seam.failed(tx, error));
        }
    }
    let (update, args) = prepared::<DB, Sh, K>(transition, update, &mover_keys, params, note)?;
    let moved = tx
        .changed(update, args)
        .await
        .map_err(|e| seam.failed(tx, retry(e)))?;
    seam.changed_if(moved > 0);
    // Locked since the read: each moved, from the version read.
    let mut leases: Vec<i64> = vec![0; keys.len()];
    if let Err(error) =
        read_leases(tx, transition, keys, &mover_keys, params, note, &mut leases).await
    {
        return Err(seam.failed(tx, error));
    }
    let versioned = transition.versioned();
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

#[cfg(feature = "mysql")]
/// The leases of the rows [`lock_and_update`] moved, into `leases` (by
/// the position of their key in `keys`).
async fn read_leases<DB, E, Sh, K>(
    tx: &mut E,
    transition: Batch<'_>,
    keys: &[&K],
    moved: &[&K],
    params: &(dyn Parts<DB> + Sync),
    note: &Note,
    leases: &mut [i64],
) -> Result<(), Error>
where
    DB: Backend,
    E: Run<Db = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let lease_read = transition.many().lease_read();
    if DB::sql(lease_read).is_empty() {
        return Ok(());
    }
    let (lease_read, args) = prepared::<DB, Sh, K>(transition, lease_read, moved, params, note)?;
    let rows = tx
        .rows(lease_read, args)
        .await
        .map_err(|source| transition.tx_error::<DB>(source))?;
    for row in &rows {
        let row = Read::<DB>::new(lease_read, row);
        let key = row.key::<K, Sh>().map_err(|e| transition.db_error(e))?;
        let lease = row.int(Column::Token).map_err(|e| transition.db_error(e))?;
        if let Some(i) = position(keys, &key) {
            leases[i] = lease;
        }
    }
    Ok(())
}
