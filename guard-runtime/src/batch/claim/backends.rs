//! How each backend claims rows and moves the ones it holds, and the
//! `Batched` impl of each that names them.

// Each backend uses some of the helpers below; a build with fewer backends
// leaves some imports unused.
#![cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused_imports)
)]

use crate::batch::batched::{
    Applied, Batch, BatchRunner, Batched, Claim, Claimed, Found, Took, position, sealed,
};
use crate::batch::{many, run};
use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::dialect::{Backend, Column};
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::executor::tx::Tx;
use crate::machine::key::{Batchable, DecodeKey, KeyShape, RowKey};
#[allow(unused_imports)] // in the docs
use crate::transition::Bound;
use crate::transition::bind::Parts;
use crate::transition::note::Note;
use crate::transition::row::Read;

/// The `Batched` impl of one backend: the function that moves a chunk of
/// keys, and the one that claims rows (with the `BEGIN` of its
/// transaction, where it runs one).
macro_rules! batched {
    (
        $feature:literal, $db:ty, apply: $apply:path, claim: $claim:path,
        move_held: $move_held:path $(, begin: $begin:literal)?
    ) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $db {}

        #[cfg(feature = $feature)]
        impl Batched for $db {
            fn apply_rows<'a, E, Sh, K>(
                executor: &'a mut E,
                transition: Batch<'a>,
                keys: &'a [&'a K],
                params: &'a (dyn Parts<Self> + Sync),
                note: &'a Note,
            ) -> Applied<'a, K>
            where
                E: BatchRunner<Database = Self> + 'a,
                Sh: KeyShape,
                K: Batchable<Self, Sh> + 'a,
            {
                Box::pin($apply(executor, transition, keys, params, note))
            }

            fn claim_rows<'a, E, Sh, K>(
                executor: &'a mut E,
                transition: Batch<'a>,
                params: &'a (dyn Parts<Self> + Sync),
                claim: Claim,
                limit: u32,
                note: &'a Note,
            ) -> Claimed<'a, K>
            where
                E: BatchRunner<Database = Self> + 'a,
                Sh: KeyShape,
                K: Batchable<Self, Sh> + 'a,
            {
                Box::pin($claim(executor, $($begin,)? transition, params, claim, limit, note))
            }

            fn move_held<'a, E, Sh, K>(
                executor: &'a mut E,
                transition: Batch<'a>,
                keys: &'a [&'a K],
                params: &'a (dyn Parts<Self> + Sync),
                note: &'a Note,
            ) -> Applied<'a, K>
            where
                E: Runner<Database = Self> + 'a,
                Sh: KeyShape,
                K: Batchable<Self, Sh> + 'a,
            {
                Box::pin($move_held(executor, transition, keys, params, note))
            }
        }
    };
}

// The rows a claim holds move as `apply_many`'s do, once for all of them:
// PostgreSQL and SQLite in one `UPDATE … RETURNING` (with its history rows
// and messages; SQLite behind the write lock the claim took first), MySQL
// by the locked rows' read, the history rows, one `UPDATE` and the
// leases' read, for the rows `SKIP LOCKED` handed to this claim.
batched!(
    "postgres", sqlx::Postgres,
    apply: run::returning, claim: postgres, move_held: run::update_returning
);
// SQLite takes the write lock first: the candidates read are then the
// rows the transaction moves.
batched!(
    "sqlite", sqlx::Sqlite,
    apply: run::returning, claim: in_transaction, move_held: run::update_returning,
    begin: "BEGIN IMMEDIATE"
);
batched!(
    "mysql", sqlx::MySql,
    apply: run::in_transaction, claim: in_transaction, move_held: run::lock_and_update,
    begin: "BEGIN"
);

#[cfg(feature = "postgres")]
/// PostgreSQL: one statement that takes the rows and moves them; for a
/// transition that emits a message, whose statement only names the rows
/// it takes ([`Claim::moves`]), the candidates' locking read and the
/// move in one transaction, as on MySQL: each message's id is its row's
/// effect key, which is computed from the key (`outcome.rs`) and bound
/// beside it, so the keys must be known before the move.
async fn postgres<E, Sh, K>(
    executor: &mut E,
    transition: Batch<'_>,
    params: &(dyn Parts<sqlx::Postgres> + Sync),
    claim: Claim,
    limit: u32,
    note: &Note,
) -> Result<Vec<Took<K>>, Error>
where
    E: BatchRunner<Database = sqlx::Postgres>,
    Sh: KeyShape,
    K: Batchable<sqlx::Postgres, Sh>,
{
    match claim.moves::<sqlx::Postgres>() {
        true => one_statement(executor, transition, params, claim, limit, note).await,
        false => in_transaction(executor, "BEGIN", transition, params, claim, limit, note).await,
    }
}

#[cfg(feature = "postgres")]
/// PostgreSQL: the one statement, retried after a serialization failure or
/// deadlock.
async fn one_statement<DB, E, Sh, K>(
    executor: &mut E,
    transition: Batch<'_>,
    params: &(dyn Parts<DB> + Sync),
    claim: Claim,
    limit: u32,
    note: &Note,
) -> Result<Vec<Took<K>>, Error>
where
    DB: Backend,
    E: Runner<Database = DB>,
    Sh: KeyShape,
    K: RowKey<DB, Sh> + DecodeKey<DB, Sh>,
{
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (sql, args) = claim
            .prepared::<DB>(params, limit, note)
            .map_err(|e| transition.db_error(e))?;
        transition.sending();
        let rows = match executor.rows(sql, args).await {
            Ok(rows) => rows,
            Err(error) => {
                transition.before_retry(executor, error, attempts).await?;
                continue;
            }
        };
        return rows
            .iter()
            .map(|row| {
                let row = Read::<DB>::new(sql, row);
                let key = row.key::<K, Sh>().map_err(|e| transition.db_error(e))?;
                let int = |column| row.int(column).map_err(|e| transition.db_error(e));
                Ok(Took {
                    key,
                    occurrence: int(Column::Occurrence)?,
                    lease: int(Column::Token)?,
                })
            })
            .collect();
    }
}

/// SQLite and MySQL (and PostgreSQL, for a transition that emits a
/// message): the candidates' `SELECT`, then one `UPDATE` for all
/// of them, in one short transaction, tried again when the database rolls
/// it back (a deadlock, a busy database). Inside the caller's transaction
/// the statements run in it, and such an error is the caller's to retry
/// ([`Error::RetryTransaction`]).
async fn in_transaction<DB, E, Sh, K>(
    executor: &mut E,
    begin: &'static str,
    transition: Batch<'_>,
    params: &(dyn Parts<DB> + Sync),
    claim: Claim,
    limit: u32,
    note: &Note,
) -> Result<Vec<Took<K>>, Error>
where
    DB: Batched,
    E: BatchRunner<Database = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let Some(pool) = executor.pool().cloned() else {
        crate::batch::run::prepare_first(executor, transition, Some(claim.sql)).await?;
        return claim_in(executor, transition, params, claim, limit, note).await;
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let error = match claim_once(&pool, begin, transition, params, claim, limit, note).await {
            Ok(claimed) => return Ok(claimed),
            Err(error) => error,
        };
        if !error.retries_whole::<DB>() || attempts >= MAX_ATTEMPTS {
            return Err(error);
        }
        tracing::debug!(
            table = transition.table(),
            transition = transition.name(),
            attempts,
            %error,
            "claim rolled back; trying again"
        );
        tokio::time::sleep(backoff(attempts)).await;
    }
}

/// One attempt of a claim in a transaction of its own.
async fn claim_once<DB, Sh, K>(
    pool: &sqlx::Pool<DB>,
    begin: &'static str,
    transition: Batch<'_>,
    params: &(dyn Parts<DB> + Sync),
    claim: Claim,
    limit: u32,
    note: &Note,
) -> Result<Vec<Took<K>>, Error>
where
    DB: Batched,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let mut tx = Tx::begin_with(pool, begin)
        .within(transition.deadline())
        .await
        .map_err(|e| transition.begin_error(e))?;
    // Before the candidates' locking read, every statement the claim may
    // send after it.
    crate::batch::run::prepare_first(&mut &mut tx, transition, Some(claim.sql)).await?;
    let claimed = claim_in(&mut &mut tx, transition, params, claim, limit, note).await?;
    tx.commit(()).await?;
    Ok(claimed)
}

/// The claim's statements inside a transaction: the candidates, then one
/// move for all of them (per chunk of `APPLY_MANY_CHUNK`).
async fn claim_in<DB, E, Sh, K>(
    executor: &mut E,
    transition: Batch<'_>,
    params: &(dyn Parts<DB> + Sync),
    claim: Claim,
    limit: u32,
    note: &Note,
) -> Result<Vec<Took<K>>, Error>
where
    DB: Batched,
    E: Runner<Database = DB>,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    // In the claim's transaction (after its `BEGIN`) or the caller's.
    transition.sending();
    // The candidates.
    let (select, args) = claim
        .prepared::<DB>(params, limit, note)
        .map_err(|e| transition.db_error(e))?;
    // A deadlock or busy database rolls the transaction back: the whole
    // claim is tried again.
    let rows = executor
        .rows(select, args)
        .await
        .map_err(|e| transition.tx_error::<DB>(e))?;
    let candidates = rows
        .iter()
        .map(|row| {
            Read::<DB>::new(select, row)
                .key::<K, Sh>()
                .map_err(|e| transition.db_error(e))
        })
        .collect::<Result<Vec<K>, Error>>()?;
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    // Locked by this transaction (or, on SQLite, behind its write lock),
    // in a source state and meeting the guard: every candidate moves, in
    // one statement for all of them (per chunk of `APPLY_MANY_CHUNK`).
    let mut keys: Vec<&K> = candidates.iter().collect();
    keys.sort();
    keys.dedup();
    let mut found = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(many::APPLY_MANY_CHUNK) {
        found.extend(DB::move_held(executor, transition, chunk, params, note).await?);
    }
    // The wins in the candidates' order.
    let mut wins = Vec::with_capacity(candidates.len());
    for candidate in &candidates {
        let Some(i) = position(&keys, candidate) else {
            continue;
        };
        if let Found::Moved {
            key,
            occurrence,
            lease,
        } = core::mem::replace(&mut found[i], Found::Missing)
        {
            wins.push(Took {
                key,
                occurrence,
                lease,
            });
        }
    }
    Ok(wins)
}
