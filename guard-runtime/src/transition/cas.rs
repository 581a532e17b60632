//! The compare-and-set core of `apply`: one transition's statements and
//! names ([`CasPlan`]), a call's values erased for binding ([`CallParts`]), and
//! what the attempt came to with the status as the database wrote it
//! ([`Raw`]). It knows neither the machine nor the types of the key and
//! the values, so a binary carries one copy per executor.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use core::time::Duration;

use tracing::Instrument;

use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::telemetry;
use crate::transition::note::Note;

use crate::StateMachine;
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Column, Sql, Statement};
use crate::error::Error;
use crate::executor::proven::{Proven, prove_all};
use crate::executor::sealed::Run;
use crate::executor::seam::Seam;
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::key::{BindError, KeyShape, RowKey};
use crate::outcome::{LeasedAt, Outcome};
use crate::transition::bind::{self, Parts, Values};
use crate::transition::failure::{Names, worth_retrying};
use crate::transition::row::Read;

/// One transition's compare-and-set, with no type of the machine's: its
/// names, deadline and expected occurrence, and its statements.
#[derive(Clone, Copy)]
pub(crate) struct CasPlan {
    pub(crate) names: Names,
    pub(crate) deadline: Duration,
    pub(crate) expected: Option<i64>,
    /// The losing path's read, `[plain, inside a transaction]`.
    pub(crate) select: [&'static Sql; 2],
    pub(crate) update: &'static Sql,
    pub(crate) update_expecting: Option<&'static Sql>,
    /// With a history table on SQLite and MySQL: the history row's
    /// insert, `[plain, expecting]`.
    pub(crate) history_insert: Option<&'static [Sql; 2]>,
    /// For a transition that emits a message, on SQLite and MySQL: the
    /// outbox row's insert, `[plain, expecting]`.
    pub(crate) outbox_insert: Option<&'static [Sql; 2]>,
    pub(crate) read_back: &'static Sql,
    pub(crate) versioned: bool,
    pub(crate) leased: bool,
    pub(crate) guarded: bool,
}

/// What one call of the core binds and how it reads a status, erased: the
/// key's columns, the call's values, the note, the key as spans show it,
/// and where a status text stands.
pub(crate) struct CallParts<'a, DB: Backend> {
    pub(crate) key: &'a (dyn Parts<DB> + Sync),
    pub(crate) values: &'a (dyn Parts<DB> + Sync),
    pub(crate) note: &'a Note,
    pub(crate) shown: &'a (dyn fmt::Debug + Sync),
    /// The row's effect key up to its occurrence, for the outbox row of
    /// a transition that emits one.
    pub(crate) effect: &'a (dyn Fn() -> String + Sync),
    pub(crate) classify: &'a (dyn Fn(&str) -> Result<Class, Error> + Sync),
}

/// Where a row's status stands for the transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Target,
    Source,
    Elsewhere,
}

/// What the core's compare-and-set came to, the status as the database
/// wrote it.
pub(crate) enum Raw {
    /// It won: the row's new occurrence and lease token, and when the
    /// winning statement was sent.
    Applied {
        occurrence: i64,
        lease: i64,
        sent: LeasedAt,
    },
    NotFound,
    /// It did not: the row is in `current`.
    Left {
        current: String,
        left: Left,
    },
}

/// Why a row in `current` was left where it is.
pub(crate) enum Left {
    /// It moved on since the expected occurrence: it is at this one now.
    Stale(i64),
    AlreadyInState,
    Conflict,
    Refused,
}

impl Raw {
    /// The outcome's name in spans and metrics.
    fn label(&self) -> &'static str {
        match self {
            Raw::Applied { .. } => "applied",
            Raw::NotFound => "not_found",
            Raw::Left { left, .. } => match left {
                Left::Stale(_) => "stale",
                Left::AlreadyInState => "already_in_state",
                Left::Conflict => "conflict",
                Left::Refused => "refused",
            },
        }
    }
}

impl CasPlan {
    /// The compare-and-set within its deadline, traced and counted.
    pub(crate) async fn run<E: Runner>(
        self,
        executor: &mut E,
        call: &CallParts<'_, E::Database>,
    ) -> Result<Raw, Error> {
        let names = self.names;
        let span = telemetry::span!(
            "stateguard.apply",
            table = names.table,
            machine = names.machine,
            E::Database,
            "UPDATE",
            names.transition
        );
        telemetry::key(&span, call.shown);
        let writing = AtomicBool::new(false);
        let tries = AtomicU32::new(0);
        let watch = Progress {
            writing: &writing,
            tries: &tries,
            span: &span,
        };
        let attempt = self.watched(executor, call, watch);
        let result = tokio::time::timeout(self.deadline, attempt)
            .instrument(span.clone())
            .await;
        let outcome = match &result {
            Ok(Ok(raw)) => raw.label(),
            Ok(Err(_)) => "error",
            Err(_) => "timeout",
        };
        span.record("stateguard.outcome", outcome);
        telemetry::outcomes(names.machine, names.transition, outcome, 1);
        let tries = tries.load(Ordering::Relaxed);
        telemetry::attempts(names.machine, names.transition, tries);
        match result {
            Ok(raw) => raw,
            Err(_) => {
                let outcome_known = !writing.load(Ordering::Relaxed);
                if !outcome_known {
                    executor.abandoned();
                }
                Err(Error::Timeout {
                    table: names.table,
                    transition: names.transition,
                    deadline: self.deadline,
                    outcome_known,
                })
            }
        }
    }

    /// The compare-and-set and its losing path, with `writing` true while
    /// the `UPDATE` is in flight, so that a deadline that cuts it off knows
    /// the outcome is open.
    async fn watched<E: Runner>(
        &self,
        executor: &mut E,
        call: &CallParts<'_, E::Database>,
        watch: Progress<'_>,
    ) -> Result<Raw, Error> {
        refuse_open_transaction(executor)?;
        let names = self.names;
        let in_transaction = executor.in_transaction();
        let select = <E::Database as Driver>::statement(self.select[usize::from(in_transaction)]);
        let update = match (self.expected, self.update_expecting) {
            (None, _) => self.update,
            (Some(_), Some(update)) => update,
            // Only a hand-written `HasVersion` gets here: the derive
            // implements it only with a version column.
            (Some(_), None) => {
                return Err(Error::NoVersionColumn {
                    machine: names.machine,
                    transition: names.transition,
                });
            }
        };
        let update = <E::Database as Driver>::statement(update);
        let mut attempts = 0;
        loop {
            attempts += 1;
            watch.span.record("stateguard.attempts", attempts);
            watch.tries.store(attempts, Ordering::Relaxed);
            watch.writing.store(true, Ordering::Relaxed);
            let sent = LeasedAt(Some(std::time::Instant::now()));
            let changed = self.attempt(executor, update, call, attempts).await;
            watch.writing.store(false, Ordering::Relaxed);
            let Round::Done(changed) = changed? else {
                continue;
            };
            if let Some(Changed { occurrence, lease }) = changed {
                return Ok(Raw::Applied {
                    occurrence,
                    lease,
                    sent,
                });
            }
            // Zero rows: read the state with a statement of its own, so that
            // it sees what the racing winner committed.
            let read = self.fresh_read(executor, select, call, attempts);
            let Round::Done(row) = read.await? else {
                continue;
            };
            let Some(row) = row else {
                return Ok(Raw::NotFound);
            };
            let row = Read::<E::Database>::new(select, &row);
            let current = match row.text(Column::Status).map_err(|e| names.db_error(e))? {
                Some(text) => text,
                None => {
                    return Err(Error::NullStatus {
                        table: names.table,
                        column: names.column,
                    });
                }
            };
            let class = (call.classify)(&current)?;
            let left = |left| Ok(Raw::Left { current, left });
            if let Some(expected) = self.expected {
                let version = row.int(Column::Occurrence).map_err(|e| names.db_error(e))?;
                // Moved on since the caller looked, even if into this very
                // target: the caller acted on a page that is out of date.
                if version != expected {
                    return left(Left::Stale(version));
                }
            }
            match class {
                Class::Target => return left(Left::AlreadyInState),
                Class::Elsewhere => return left(Left::Conflict),
                Class::Source => {}
            }
            if self.guarded {
                let meets = row.int(Column::Meets).map_err(|e| names.db_error(e))?;
                if meets == 0 {
                    return left(Left::Refused);
                }
            }
            // The row is in a source state, yet the UPDATE matched nothing:
            // it moved away and back between the two statements. Round again.
            if attempts >= MAX_ATTEMPTS {
                return Err(names.contention(attempts, None));
            }
            tokio::time::sleep(backoff(attempts)).await;
            tracing::debug!(
                table = names.table,
                transition = names.transition,
                attempts,
                "row back in a source state after a lost compare-and-set; retrying"
            );
        }
    }

    /// One compare-and-set: `Done(Some(changed))` when it changed the row,
    /// `Done(None)` when it matched nothing, `Again` after a retryable error
    /// once the backoff has been slept.
    async fn attempt<E: Runner>(
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
    async fn fresh_read<E: Runner>(
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
    async fn compare_and_set<E: Runner>(
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
        let args = arguments(update)?;
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
        let (statement, update) = (update, update.text());
        let read_back = <DB<E> as Driver>::statement(self.read_back);
        let retryable = |error: sqlx::Error| match worth_retrying::<E>(&error) {
            true => StatementFailure::Retryable(error),
            false => StatementFailure::Failed(names.db_error(error)),
        };
        let (versioned, leased) = (self.versioned, self.leased);
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
            // Counted by its tagged rows on PostgreSQL (`Proven::changed`).
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

/// What a winning compare-and-set changed: the row's new occurrence and,
/// for a transition into an in-flight state, its lease token.
#[derive(Default)]
pub(crate) struct Changed {
    occurrence: i64,
    lease: i64,
}

/// What one round of the retry loop came to.
enum Round<T> {
    /// It ran: here is what it found.
    Done(T),
    /// It hit a retryable error in autocommit, and the backoff has been
    /// slept: run the attempt again.
    Again,
}

/// How one statement of an attempt failed.
enum StatementFailure {
    /// A serialization failure, deadlock or busy database.
    Retryable(sqlx::Error),
    Failed(Error),
}

/// The arguments of a statement that binds only the row's key.
pub(crate) fn key_arguments<DB: Backend, Sh: KeyShape, K: RowKey<DB, Sh>>(
    statement: Statement,
    key: &K,
) -> Result<DB::Args, sqlx::Error> {
    let key = bind::key(key);
    let values = Values {
        key: Some(&key),
        ..Values::NONE
    };
    bind::arguments(statement, &values).map_err(BindError::into_sqlx)
}

/// What an `apply` in progress tells its caller: whether its `UPDATE` is
/// in flight (a deadline that cuts it off leaves the outcome open), how
/// many attempts it made, and its span.
#[derive(Clone, Copy)]
struct Progress<'a> {
    writing: &'a AtomicBool,
    tries: &'a AtomicU32,
    span: &'a tracing::Span,
}

/// An outcome's name in spans and metrics.
pub(crate) fn outcome_label<S: StateMachine, K, C>(outcome: &Outcome<S, K, C>) -> &'static str {
    match outcome {
        Outcome::Applied(_) => "applied",
        Outcome::AlreadyInState(_) => "already_in_state",
        Outcome::Conflict { .. } => "conflict",
        Outcome::NotFound => "not_found",
        Outcome::Stale { .. } => "stale",
        Outcome::Refused { .. } => "refused",
    }
}

/// The status `row` holds, parsed; NULL is an error of its own.
pub(crate) fn status_of<S: StateMachine, DB: Backend>(
    row: &Read<'_, DB>,
    db_error: impl FnOnce(sqlx::Error) -> Error,
) -> Result<S, Error> {
    match row.text(Column::Status).map_err(db_error)? {
        Some(text) => Ok(S::parse_db_str(&text)?),
        None => Err(Error::NullStatus {
            table: S::MACHINE.table(),
            column: S::MACHINE.column(),
        }),
    }
}
