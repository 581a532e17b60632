//! One attempt of the compare-and-set: the winning `UPDATE` (with what
//! MySQL reads back after it), and the losing path's fresh read.

use crate::dialect::sealed::Driver;
use crate::dialect::{Column, Statement};
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::{Proven, prove_all};
use crate::executor::sealed::Run;
use crate::executor::seam::Seam;
use crate::transition::bind::{self, Values};
use crate::transition::failure::worth_retrying;
use crate::transition::row::Read;

use super::{CallParts, CasPlan, Changed, Round, StatementFailure};

impl CasPlan {
    /// One compare-and-set: `Done(Some(changed))` when it changed the row,
    /// `Done(None)` when it matched nothing, `Again` after a retryable error
    /// once the backoff has been slept.
    pub(super) async fn attempt<E: Runner>(
        &self,
        executor: &mut E,
        update: Statement,
        call: &CallParts<'_, E::Database>,
        attempts: u32,
    ) -> Result<Round<Option<Changed>>, Error> {
        match self.compare_and_set(executor, update, call).await {
            Ok(changed) => Ok(Round::Done(changed)),
            Err(StatementFailure::Failed(error)) => Err(error),
            Err(StatementFailure::Retryable(error)) => {
                self.names.before_retry(executor, error, attempts).await?;
                Ok(Round::Again)
            }
        }
    }

    /// The losing path's fresh read of the row: `Done(row)` (`None`: no such
    /// row), or `Again` after a retryable error once the backoff has been
    /// slept.
    pub(super) async fn fresh_read<E: Runner>(
        &self,
        executor: &mut E,
        select: Statement,
        call: &CallParts<'_, E::Database>,
        attempts: u32,
    ) -> Result<Round<Option<<E::Database as sqlx::Database>::Row>>, Error> {
        let values = Values {
            key: Some(call.key),
            values: Some(call.values),
            ..Values::NONE
        };
        let row = match bind::arguments(select, &values) {
            Ok(args) => executor.row(select, args).await,
            Err(error) => return Err(self.names.keys_error(error)),
        };
        match row {
            Ok(row) => Ok(Round::Done(row)),
            Err(error) => {
                self.names.before_retry(executor, error, attempts).await?;
                Ok(Round::Again)
            }
        }
    }

    /// The winning-path statement: `Some(changed)` when it changed the row,
    /// `None` when it matched nothing.
    pub(super) async fn compare_and_set<E: Runner>(
        &self,
        executor: &mut E,
        update: Statement,
        call: &CallParts<'_, E::Database>,
    ) -> Result<Option<Changed>, StatementFailure> {
        type DB<E> = <E as Run>::Db;
        let names = self.names;
        let failed = |e| StatementFailure::Failed(names.db_error(e));
        // One set of values for every statement of the move: each binds
        // what its plan names.
        let values = Values {
            key: Some(call.key),
            values: Some(call.values),
            note: Some(call.note),
            expected: self.expected,
            effect: Some(call.effect),
            ..Values::NONE
        };
        let arguments = |statement| {
            bind::arguments::<DB<E>>(statement, &values)
                .map_err(|e| StatementFailure::Failed(names.keys_error(e)))
        };
        // With a history table or a message to emit on SQLite and MySQL,
        // the history row's and the outbox row's inserts, run just before
        // the move in one transaction with it.
        let inserts: Vec<Statement> = [self.history_insert, self.outbox_insert]
            .into_iter()
            .flatten()
            .map(|[plain, expecting]| {
                <DB<E> as Driver>::statement(match self.expected {
                    Some(_) => expecting,
                    None => plain,
                })
            })
            .filter(|insert| !insert.is_empty())
            .collect();
        let (versioned, leased) = (self.versioned, self.leased);
        // A move that returns nothing but its tag runs untagged where the
        // caller asked for that on a pool the check found dedicated.
        let update = match inserts.is_empty() && !versioned && !leased {
            true => executor.counted(update),
            false => update,
        };
        let args = arguments(update)?;
        let (statement, update) = (update, update.text());
        let read_back = <DB<E> as Driver>::statement(self.read_back);
        let retryable = |error: sqlx::Error| match worth_retrying::<E>(&error) {
            true => StatementFailure::Retryable(error),
            false => StatementFailure::Failed(names.db_error(error)),
        };
        // MySQL's read back after the move: a failure there hides a move
        // that happened, which `Seam` turns into what the caller is told.
        let read_result = |executor: &mut E, done: &_, row: Result<_, sqlx::Error>| {
            row.map_err(|error| {
                let mut seam = Seam::new(names.table, names.transition);
                seam.changed_if(<DB<E> as Driver>::rows_affected(done) > 0);
                StatementFailure::Failed(seam.failed(executor, names.db_error(error)))
            })
        };
        // What the winning statement returned (`RETURNING [version][,
        // lease]`), or MySQL's read-back.
        let changed = |row: Option<Read<'_, DB<E>>>| {
            let mut changed = Changed::default();
            if let Some(row) = row {
                if versioned {
                    changed.occurrence = row.int_or_zero(Column::Occurrence).map_err(failed)?;
                }
                if leased {
                    changed.lease = row.int_or_zero(Column::Token).map_err(failed)?;
                }
            }
            Ok::<_, StatementFailure>(changed)
        };
        // A version MySQL's OK packet carried, as the signed column holds it.
        let last_id = |id: u64| {
            i64::try_from(id).map_err(|_| {
                StatementFailure::Failed(names.db_error(sqlx::Error::Protocol(format!(
                    "LAST_INSERT_ID {id} does not fit the version column"
                ))))
            })
        };
        // MySQL reads the new version and lease back on the same
        // connection: the lease token of the row by its key.
        let read_back_args =
            || Ok::<_, StatementFailure>((read_back.text(), arguments(read_back)?));
        let (rows, changed) = if !inserts.is_empty() {
            // With a history table or a message on SQLite and MySQL: the
            // inserts and the compare-and-set, in one transaction.
            let inserts = inserts
                .into_iter()
                .map(|insert| Ok((insert.text(), arguments(insert)?)))
                .collect::<Result<Vec<_>, StatementFailure>>()?;
            let returns_rows = (versioned || leased) && <DB<E> as Driver>::RETURNING;
            // MySQL reads a lease back; a version comes with the update.
            let then = match leased && !<DB<E> as Driver>::RETURNING {
                true => Some(read_back_args()?),
                false => None,
            };
            let moved = executor
                .with_inserts(inserts, update, args, returns_rows, then)
                .await
                .map_err(retryable)?;
            prove_all::<DB<E>, _>(statement, &moved.rows).map_err(failed)?;
            let row = match moved.rows.first() {
                Some(row) => Some(Read::new(statement, row)),
                None => moved.then.as_ref().map(|row| Read::new(read_back, row)),
            };
            let mut changed = changed(row)?;
            if versioned && !leased && !<DB<E> as Driver>::RETURNING {
                changed.occurrence = last_id(moved.last_id)?;
            }
            (moved.updated, changed)
        } else if !versioned && !leased {
            // Counted by its tagged rows on PostgreSQL (`Proven::changed`),
            // or untagged by the command's count (`Proven::counted`).
            let done = executor.changed(statement, args).await.map_err(retryable)?;
            (done, changed(None)?)
        } else if <DB<E> as Driver>::RETURNING {
            // One row per row changed.
            let rows = executor.rows(statement, args).await.map_err(retryable)?;
            let row = rows.first().map(|row| Read::new(statement, row));
            (rows.len() as u64, changed(row)?)
        } else if !leased {
            // MySQL: the UPDATE stored the new version with
            // LAST_INSERT_ID(expr), and its OK packet carries it: one
            // round trip. On a table with a trigger MariaDB's packet says
            // 0, and the same connection reads LAST_INSERT_ID() back.
            let (done, row) = executor
                .execute_then_fetch(
                    update,
                    args,
                    <DB<E> as Driver>::LAST_ID,
                    Default::default(),
                    <DB<E> as Driver>::id_lost,
                )
                .await
                .map_err(retryable)?;
            let row = read_result(executor, &done, row)?;
            let mut changed = changed(None)?;
            changed.occurrence = match row {
                Some(row) => <DB<E> as Driver>::int(&row, 0).map_err(failed)?,
                None => last_id(<DB<E> as Driver>::last_insert_id(&done))?,
            };
            (<DB<E> as Driver>::rows_affected(&done), changed)
        } else {
            // MySQL into an in-flight state: the same connection reads the
            // new version (LAST_INSERT_ID()) and the lease token back.
            let (read, then_args) = read_back_args()?;
            let (done, row) = executor
                .execute_then_fetch(update, args, read, then_args, <DB<E> as Driver>::changed)
                .await
                .map_err(retryable)?;
            let row = read_result(executor, &done, row)?;
            let row = row.as_ref().map(|row| Read::new(read_back, row));
            (<DB<E> as Driver>::rows_affected(&done), changed(row)?)
        };
        match rows {
            0 => Ok(None),
            1 => Ok(Some(changed)),
            rows => Err(StatementFailure::Failed(Error::AmbiguousKey {
                table: names.table,
                key: names.key,
                transition: names.transition,
                rows,
            })),
        }
    }
}
