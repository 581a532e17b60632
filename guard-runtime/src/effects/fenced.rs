//! The statements of [`finish_many`](crate::finish_many) over a batch of
//! held rows, each row fenced by its own occurrence and lease token: the
//! heartbeat, the follow-ups and the postponement, with the read that
//! tells why a row did not move.
//!
//! PostgreSQL and SQLite run the statement and read the moved rows off
//! its `RETURNING`; MySQL, which has none, locks the batch's rows first in
//! a short transaction, and moves those its read shows still held: the
//! lock keeps them so until the commit.

use crate::StateMachine;
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Bind, Column, Sql, Statement};
use crate::effects::lease::LeaseRow;
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::executor::tx::Tx;
use crate::machine::InFlightDef;
use crate::machine::key::{BatchKey, Batchable, KeyShape};
use crate::transition::Transition;
use crate::transition::bind::{self, Parts, Values};
use crate::transition::note::Note;
use crate::transition::row::Read;

/// Rows of one in-flight state, sorted by key and distinct, each with the
/// integers its statements bind: its occurrence, its lease token and,
/// for a postponement, its wait in milliseconds; and for a follow-up that
/// binds values per row, each row's values.
pub(crate) struct Rows<'a, K, DB: Backend> {
    pub(crate) keys: Vec<&'a K>,
    /// `[occurrences, tokens]`, or `[occurrences, tokens, delays]`.
    pub(crate) ints: Vec<Vec<i64>>,
    /// One per row, or none for a statement that binds no values.
    pub(crate) values: Vec<&'a (dyn Parts<DB> + Sync)>,
}

impl<'a, K, DB: Backend> Rows<'a, K, DB> {
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The rows at `indices`, in that order.
    fn subset(&self, indices: impl Iterator<Item = usize> + Clone) -> Rows<'a, K, DB> {
        Rows {
            keys: indices.clone().map(|i| self.keys[i]).collect(),
            ints: (self.ints.iter())
                .map(|column| indices.clone().map(|i| column[i]).collect())
                .collect(),
            values: match self.values.is_empty() {
                true => Vec::new(),
                false => indices.map(|i| self.values[i]).collect(),
            },
        }
    }

    /// The rows as `statement` takes them: all at once, or for a batch
    /// spelled out row by row, in runs of as many rows as it has.
    fn runs(&self, statement: Statement) -> Vec<Rows<'a, K, DB>> {
        let per_statement = (statement.binds().iter())
            .filter_map(|bind| match bind {
                Bind::Row(row, _) => Some(usize::from(*row) + 1),
                _ => None,
            })
            .max()
            .unwrap_or(self.len())
            .max(1);
        (0..self.len())
            .step_by(per_statement)
            .map(|start| self.subset(start..(start + per_statement).min(self.len())))
            .collect()
    }

    fn occurrence(&self, i: usize) -> i64 {
        self.ints[0][i]
    }

    fn token(&self, i: usize) -> i64 {
        self.ints[1][i]
    }
}

/// Each row's outcome, from whether it moved (with its new token) and, if
/// not, how it was found.
fn outcomes<S>(moved: Vec<Option<Option<i64>>>, found: Vec<Option<LeaseRow<S>>>) -> Vec<Moved<S>> {
    moved
        .into_iter()
        .zip(found)
        .map(|(moved, found)| match moved {
            Some(token) => Moved::Yes(token),
            None => Moved::No(found),
        })
        .collect()
}

/// What a batch statement did to one row.
pub(crate) enum Moved<S> {
    /// It moved (for a heartbeat: its lease renewed, with the new token).
    Yes(Option<i64>),
    /// It did not: the row as it is now, or `None` when it is gone.
    No(Option<LeaseRow<S>>),
}

/// A batch statement and the inserts that go before it on SQLite and
/// MySQL (history rows, messages).
pub(crate) struct Fenced<'s> {
    pub(crate) sql: &'s Sql,
    pub(crate) inserts: [&'s Sql; 2],
    /// For a heartbeat: read each moved row's new token.
    pub(crate) tokens: bool,
}

/// Runs `statement` over `rows` and says what it did to each, in `rows`'
/// order. Errors name `transition`.
pub(crate) async fn run<S, K, DB>(
    pool: &sqlx::Pool<DB>,
    in_flight: &'static InFlightDef<S>,
    state: S,
    transition: Transition<S>,
    statement: Fenced<'_>,
    rows: &Rows<'_, K, DB>,
    deadline: core::time::Duration,
) -> Result<Vec<Moved<S>>, Error>
where
    S: StateMachine,
    DB: Backend,
    K: BatchKey<S, DB>,
{
    match <DB as Driver>::RETURNING {
        true => returning(pool, in_flight, transition, statement, rows, deadline).await,
        false => {
            locked(
                pool, in_flight, state, transition, statement, rows, deadline,
            )
            .await
        }
    }
}

/// The arguments of `statement` for `rows`: their keys, integers and
/// values, their effect keys on a win of `transition` (a follow-up's
/// messages take them), and no note.
fn arguments<S, DB, Sh, K>(
    transition: Transition<S>,
    statement: Statement,
    rows: &Rows<'_, K, DB>,
) -> Result<DB::Args, Error>
where
    S: StateMachine,
    DB: Backend,
    Sh: KeyShape,
    K: Batchable<DB, Sh>,
{
    let effect = transition.effect_prefix();
    let parts = bind::rows::<Sh, K>(&rows.keys, &rows.ints);
    let (keys, ints) = (parts.keys(), parts.ints());
    let effects = bind::effect_keys::<Sh, K>(&rows.keys, &rows.ints, &effect);
    let cells = bind::cells::<Sh, K, DB>(&rows.keys, &rows.ints, &rows.values, &effect);
    let values = Values {
        keys: Some(&keys),
        cells: Some(&cells),
        ints: Some(&ints),
        note: Some(&Note::NONE),
        effects: Some(&effects),
        ..Values::NONE
    };
    bind::arguments(statement, &values).map_err(|e| transition.keys_error(e))
}

/// PostgreSQL and SQLite: the statement (on SQLite after its inserts, in
/// one transaction), then one read of the rows it did not move. A batch
/// spelled out row by row that takes several statements runs them in one
/// transaction, so that it commits once, and whole or not at all.
async fn returning<S, K, DB>(
    pool: &sqlx::Pool<DB>,
    in_flight: &'static InFlightDef<S>,
    transition: Transition<S>,
    statement: Fenced<'_>,
    rows: &Rows<'_, K, DB>,
    deadline: core::time::Duration,
) -> Result<Vec<Moved<S>>, Error>
where
    S: StateMachine,
    DB: Backend,
    K: BatchKey<S, DB>,
{
    let mut executor = pool;
    let db_error = |e| transition.db_error(e);
    let update = DB::statement(statement.sql);
    let inserts: Vec<Statement> = statement
        .inserts
        .iter()
        .map(|sql| DB::statement(sql))
        .filter(|insert| !insert.is_empty())
        .collect();
    let runs = rows.runs(update);
    let returned = match runs.as_slice() {
        [] => Vec::new(),
        [run] => moved_rows(&mut executor, transition, update, &inserts, run).await?,
        // Several runs commit together: once, and all or none.
        runs => {
            let names = transition.names();
            let mut tx = Tx::begin(pool)
                .within(deadline)
                .await
                .map_err(|e| names.begin_error(e))?;
            let mut returned = Vec::with_capacity(rows.len());
            for run in runs {
                returned.extend(moved_rows(&mut &mut tx, transition, update, &inserts, run).await?);
            }
            tx.commit(()).await?;
            returned
        }
    };
    let mut moved: Vec<Option<Option<i64>>> = vec![None; rows.len()];
    for row in &returned {
        let row = Read::<DB>::new(update, row);
        let key = row.key::<K, S::KeyShape>().map_err(db_error)?;
        let token = match statement.tokens {
            true => Some(row.int(Column::Token).map_err(db_error)?),
            false => None,
        };
        if let Some(i) = crate::batch::batched::position(&rows.keys, &key) {
            moved[i] = Some(token);
        }
    }
    let left: Vec<usize> = (0..rows.len()).filter(|&i| moved[i].is_none()).collect();
    let mut found: Vec<Option<LeaseRow<S>>> = (0..rows.len()).map(|_| None).collect();
    if !left.is_empty() {
        let rest = rows.subset(left.iter().copied());
        for (key, row) in read::<S, K, DB, _>(&mut executor, in_flight, transition, &rest).await? {
            if let Some(i) = crate::batch::batched::position(&rows.keys, &key) {
                found[i] = Some(row);
            }
        }
    }
    Ok(outcomes(moved, found))
}

/// `update` over `run` (with `inserts` beside it): the rows it returned,
/// each proven its own.
async fn moved_rows<S, K, DB, E>(
    executor: &mut E,
    transition: Transition<S>,
    update: Statement,
    inserts: &[Statement],
    run: &Rows<'_, K, DB>,
) -> Result<Vec<<DB as sqlx::Database>::Row>, Error>
where
    S: StateMachine,
    DB: Backend,
    E: Runner<Database = DB>,
    K: BatchKey<S, DB>,
{
    let args = arguments::<S, DB, S::KeyShape, K>(transition, update, run)?;
    let inserts = (inserts.iter())
        .map(|&insert| {
            let args = arguments::<S, DB, S::KeyShape, K>(transition, insert, run)?;
            Ok((insert.text(), args))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    (executor.rows_after_inserts(update, args, inserts).await)
        .map_err(|e| failed::<S, DB, E>(transition, e))
}

/// `error` of a statement run on `E`: inside a transaction (MySQL's, or a
/// buffer's runs), an error that rolled it back says so.
fn failed<S: StateMachine, DB: Backend, E: Runner>(
    transition: Transition<S>,
    error: sqlx::Error,
) -> Error {
    match E::IS_TRANSACTION {
        true => transition.names().tx_error::<DB>(error),
        false => transition.db_error(error),
    }
}

/// The rows of `rows` as they are: each found row's key and what it holds.
async fn read<S, K, DB, E>(
    executor: &mut E,
    in_flight: &'static InFlightDef<S>,
    transition: Transition<S>,
    rows: &Rows<'_, K, DB>,
) -> Result<Vec<(K, LeaseRow<S>)>, Error>
where
    S: StateMachine,
    DB: Backend,
    E: Runner<Database = DB>,
    K: BatchKey<S, DB>,
{
    let db_error = |e| transition.db_error(e);
    let read = DB::statement(in_flight.read_many_sql());
    let args = arguments::<S, DB, S::KeyShape, K>(transition, read, rows)?;
    let found = (executor.rows(read, args).await).map_err(|e| failed::<S, DB, E>(transition, e))?;
    found
        .iter()
        .map(|row| {
            let row = Read::<DB>::new(read, row);
            let key = row.key::<K, S::KeyShape>().map_err(db_error)?;
            let current = transition.read_status(&row)?;
            let int = |column| row.int(column).map_err(db_error);
            Ok((
                key,
                LeaseRow {
                    current,
                    version: int(Column::Occurrence)?,
                    token: int(Column::Token)?,
                },
            ))
        })
        .collect()
}

/// MySQL: in one transaction, the rows locked and read, the inserts and
/// the statement for those still held, and for a heartbeat their new
/// tokens.
async fn locked<S, K, DB>(
    pool: &sqlx::Pool<DB>,
    in_flight: &'static InFlightDef<S>,
    state: S,
    transition: Transition<S>,
    statement: Fenced<'_>,
    rows: &Rows<'_, K, DB>,
    deadline: core::time::Duration,
) -> Result<Vec<Moved<S>>, Error>
where
    S: StateMachine,
    DB: Backend,
    K: BatchKey<S, DB>,
{
    let names = transition.names();
    let mut tx = Tx::begin(pool)
        .within(deadline)
        .await
        .map_err(|e| names.begin_error(e))?;
    // Before the locking read, every statement the transaction may send
    // (`Driver::PREPARES_FIRST`).
    let statements = DB::texts(
        [in_flight.read_many_sql(), statement.sql]
            .into_iter()
            .chain(statement.inserts),
    );
    crate::executor::sealed::Run::prepare_first(&mut &mut tx, statements)
        .await
        .map_err(|e| names.tx_error::<DB>(e))?;
    let mut found: Vec<Option<LeaseRow<S>>> = (0..rows.len()).map(|_| None).collect();
    for (key, row) in read::<S, K, DB, _>(&mut &mut tx, in_flight, transition, rows).await? {
        if let Some(i) = crate::batch::batched::position(&rows.keys, &key) {
            found[i] = Some(row);
        }
    }
    let held: Vec<usize> = (0..rows.len())
        .filter(|&i| {
            found[i].as_ref().is_some_and(|f| {
                f.current == state && f.version == rows.occurrence(i) && f.token == rows.token(i)
            })
        })
        .collect();
    let mut moved: Vec<Option<Option<i64>>> = vec![None; rows.len()];
    if !held.is_empty() {
        let mine = rows.subset(held.iter().copied());
        let retry = |e| names.tx_error::<DB>(e);
        let update = DB::statement(statement.sql);
        for run in mine.runs(update) {
            let args = |sql| arguments::<S, DB, S::KeyShape, K>(transition, sql, &run);
            for insert in statement.inserts {
                let insert = DB::statement(insert);
                if insert.is_empty() {
                    continue;
                }
                let written = (&mut tx)
                    .changed(insert, args(insert)?)
                    .await
                    .map_err(retry)?;
                if written != run.len() as u64 {
                    return Err(transition.db_error(sqlx::Error::Protocol(format!(
                        "an insert beside a batch's follow-up wrote {written} rows for {} rows held",
                        run.len()
                    ))));
                }
            }
            (&mut tx)
                .changed(update, args(update)?)
                .await
                .map_err(retry)?;
        }
        // Locked since the read: each held row moved. A heartbeat reads
        // the new tokens.
        let tokens: Vec<Option<i64>> = match statement.tokens {
            false => vec![None; mine.len()],
            true => {
                let mut tokens = vec![None; mine.len()];
                for (key, row) in
                    read::<S, K, DB, _>(&mut &mut tx, in_flight, transition, &mine).await?
                {
                    if let Some(i) = crate::batch::batched::position(&mine.keys, &key) {
                        tokens[i] = Some(row.token);
                    }
                }
                tokens
            }
        };
        for (j, &i) in held.iter().enumerate() {
            moved[i] = Some(tokens[j]);
        }
    }
    tx.commit(()).await?;
    Ok(outcomes(moved, found))
}
