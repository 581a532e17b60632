//! `apply`: the compare-and-set, its retries and the read that tells a
//! loser why.

use tracing::Instrument;

use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::telemetry;
use crate::transition::note::Note;

use super::Transition;
use super::failure::worth_retrying;
use crate::StateMachine;
use crate::dialect::sealed::Dialect;
use crate::dialect::{Backend, Column, Statement};
use crate::error::Error;
use crate::executor::sealed::Run;
use crate::executor::{Executor, refuse_open_transaction};
use crate::machine::key::{BindError, KeyShape, RowKey};
use crate::outcome::{Outcome, Won};
use crate::transition::bind::Params;
use crate::transition::bind::{self, Values};
use crate::transition::row::Read;

impl<S: StateMachine> Transition<S> {
    /// [`Transition::apply`], binding `params` into the `set` assignments
    /// that take values per call.
    pub(crate) async fn apply_with<E, K, P>(
        self,
        mut executor: E,
        key: K,
        params: &P,
        note: &Note,
    ) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        let span = telemetry::span!("stateguard.apply", S, E::Database, "UPDATE", self.name());
        telemetry::key(&span, &key);
        let writing = core::sync::atomic::AtomicBool::new(false);
        let tries = core::sync::atomic::AtomicU32::new(0);
        let watch = Watch {
            writing: &writing,
            tries: &tries,
            span: &span,
            note,
        };
        let attempt = self.apply_watched(&mut executor, key, params, watch);
        let result = tokio::time::timeout(self.deadline, attempt)
            .instrument(span.clone())
            .await;
        let outcome = outcome_name(&result);
        span.record("stateguard.outcome", outcome);
        telemetry::outcomes(S::MACHINE.name(), self.name(), outcome, 1);
        let tries = tries.load(core::sync::atomic::Ordering::Relaxed);
        telemetry::attempts(S::MACHINE.name(), self.name(), tries);
        match result {
            Ok(outcome) => outcome,
            Err(_) => {
                let outcome_known = !writing.load(core::sync::atomic::Ordering::Relaxed);
                if !outcome_known {
                    executor.abandoned();
                }
                Err(Error::Timeout {
                    table: S::MACHINE.table(),
                    transition: self.name(),
                    deadline: self.deadline,
                    outcome_known,
                })
            }
        }
    }

    /// The compare-and-set and its losing path, with `writing` true while
    /// the `UPDATE` is in flight, so that a deadline that cuts it off knows
    /// the outcome is open.
    async fn apply_watched<E, K, P>(
        self,
        executor: &mut E,
        key: K,
        params: &P,
        watch: Watch<'_>,
    ) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        refuse_open_transaction(executor)?;
        let def = self.def;
        let machine = S::MACHINE;
        let in_transaction = executor.in_transaction();
        let select = <E::Database as Dialect>::statement(match def.select_guarded_sql() {
            Some([plain, locked]) => [plain, locked][usize::from(in_transaction)],
            None => machine.select_for(in_transaction),
        });
        let update = match (self.expected, def.update_expecting_sql()) {
            (None, _) => def.update_sql(),
            (Some(_), Some(update)) => update,
            // Only a hand-written `HasVersion` gets here: the derive
            // implements it only with a version column.
            (Some(_), None) => {
                return Err(Error::NoVersionColumn {
                    machine: machine.name(),
                    transition: def.name(),
                });
            }
        };
        let update = <E::Database as Dialect>::statement(update);
        let mut attempts = 0;
        loop {
            attempts += 1;
            watch.span.record("stateguard.attempts", attempts);
            watch
                .tries
                .store(attempts, core::sync::atomic::Ordering::Relaxed);
            watch
                .writing
                .store(true, core::sync::atomic::Ordering::Relaxed);
            let sent = crate::outcome::LeasedAt(Some(std::time::Instant::now()));
            let changed = self
                .attempt(executor, update, &key, params, watch.note, attempts)
                .await;
            watch
                .writing
                .store(false, core::sync::atomic::Ordering::Relaxed);
            let Try::Done(changed) = changed? else {
                continue;
            };
            if let Some(Changed { occurrence, lease }) = changed {
                let won = Won::new(def.target(), key, occurrence, lease, executor.scope());
                return Ok(Outcome::Applied(
                    won.within(self.deadline).leased_since(sent),
                ));
            }
            // Zero rows: read the state with a statement of its own, so that
            // it sees what the racing winner committed.
            let read = self.fresh_read(executor, select, &key, params, attempts);
            let Try::Done(row) = read.await? else {
                continue;
            };
            let Some(row) = row else {
                return Ok(Outcome::NotFound);
            };
            let row = Read::<E::Database>::new(select, &row);
            let current = self.read_status(&row)?;
            if let Some(expected) = self.expected {
                let version = row.int(Column::Version).map_err(|e| self.db_error(e))?;
                // Moved on since the caller looked, even if into this very
                // target: the caller acted on a page that is out of date.
                if version != expected {
                    return Ok(Outcome::Stale {
                        current,
                        occurrence: version,
                    });
                }
            }
            if current == def.target() {
                return Ok(Outcome::AlreadyInState(current));
            }
            if !def.sources().contains(&current) {
                return Ok(Outcome::Conflict { current });
            }
            if def.guard().is_some() {
                let meets = row.int(Column::Meets).map_err(|e| self.db_error(e))?;
                if meets == 0 {
                    return Ok(Outcome::Refused { current });
                }
            }
            // The row is in a source state, yet the UPDATE matched nothing:
            // it moved away and back between the two statements. Try again.
            if attempts >= MAX_ATTEMPTS {
                return Err(self.contention(attempts, None));
            }
            tokio::time::sleep(backoff(attempts)).await;
            tracing::debug!(
                table = machine.table(),
                transition = def.name(),
                attempts,
                "row back in a source state after a lost compare-and-set; retrying"
            );
        }
    }

    /// The status `row` holds, parsed; NULL is an error of its own.
    pub(crate) fn read_status<DB: Backend>(self, row: &Read<'_, DB>) -> Result<S, Error> {
        status_of::<S, DB>(row, |e| self.db_error(e))
    }

    /// One compare-and-set: `Done(Some(changed))` when it changed the row,
    /// `Done(None)` when it matched nothing, `Again` after a retryable error
    /// once the backoff has been slept.
    async fn attempt<E, K, P>(
        self,
        executor: &mut E,
        update: Statement,
        key: &K,
        params: &P,
        note: &Note,
        attempts: u32,
    ) -> Result<Try<Option<Changed>>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        match self
            .compare_and_set(executor, update, key, params, note)
            .await
        {
            Ok(changed) => Ok(Try::Done(changed)),
            Err(Attempt::Failed(error)) => Err(error),
            Err(Attempt::Retryable(error)) => {
                self.before_retry(executor, error, attempts).await?;
                Ok(Try::Again)
            }
        }
    }

    /// The losing path's fresh read of the row: `Done(row)` (`None`: no such
    /// row), or `Again` after a retryable error once the backoff has been
    /// slept.
    async fn fresh_read<E, K, P>(
        self,
        executor: &mut E,
        select: Statement,
        key: &K,
        params: &P,
        attempts: u32,
    ) -> Result<Try<Option<<E::Database as sqlx::Database>::Row>>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        let (key, params) = (bind::key(key), bind::values(params));
        let values = Values {
            key: Some(&key),
            values: Some(&params),
            ..Values::NONE
        };
        let row = match bind::arguments(select, &values) {
            Ok(args) => executor.fetch_optional(select.text(), args).await,
            Err(error) => return Err(self.keys_error(error)),
        };
        match row {
            Ok(row) => Ok(Try::Done(row)),
            Err(error) => {
                self.before_retry(executor, error, attempts).await?;
                Ok(Try::Again)
            }
        }
    }

    /// The winning-path statement: `Some(changed)` when it changed the row,
    /// `None` when it matched nothing.
    async fn compare_and_set<E, K, P>(
        self,
        executor: &mut E,
        update: Statement,
        key: &K,
        params: &P,
        note: &Note,
    ) -> Result<Option<Changed>, Attempt>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        type DB<E> = <E as Run>::Database;
        let failed = |e| Attempt::Failed(self.db_error(e));
        let (key_parts, params) = (bind::key(key), bind::values(params));
        // One set of values for every statement of the move: each binds
        // what its plan names.
        let values = Values {
            key: Some(&key_parts),
            values: Some(&params),
            note: Some(note),
            expected: self.expected,
            ..Values::NONE
        };
        let arguments = |statement| {
            bind::arguments::<DB<E>>(statement, &values)
                .map_err(|e| Attempt::Failed(self.keys_error(e)))
        };
        let args = arguments(update)?;
        // With a history table on SQLite and MySQL, the history row's
        // insert, run just before the move in one transaction with it.
        let log = self.def.log_sql().map(|[plain, expecting]| {
            <DB<E> as Dialect>::statement(match self.expected {
                Some(_) => expecting,
                None => plain,
            })
        });
        let (statement, update) = (update, update.text());
        let read_back = <DB<E> as Dialect>::statement(self.def.read_back_sql());
        let retryable = |error: sqlx::Error| match worth_retrying::<E>(&error) {
            true => Attempt::Retryable(error),
            false => Attempt::Failed(self.db_error(error)),
        };
        let versioned = S::MACHINE.version().is_some();
        let leased = self.def.stamps().is_some();
        // What the winning statement returned (`RETURNING [version][,
        // lease]`), or MySQL's read-back.
        let changed = |row: Option<Read<'_, DB<E>>>| {
            let mut changed = Changed::default();
            if let Some(row) = row {
                if versioned {
                    changed.occurrence = row.int_or_zero(Column::Version).map_err(failed)?;
                }
                if leased {
                    changed.lease = row.int_or_zero(Column::Token).map_err(failed)?;
                }
            }
            Ok::<_, Attempt>(changed)
        };
        // A version MySQL's OK packet carried, as the signed column holds it.
        let last_id = |id: u64| {
            i64::try_from(id).map_err(|_| {
                Attempt::Failed(self.db_error(sqlx::Error::Protocol(format!(
                    "LAST_INSERT_ID {id} does not fit the version column"
                ))))
            })
        };
        // MySQL reads the new version and lease back on the same
        // connection: the lease token of the row by its key.
        let read_back_args = || Ok::<_, Attempt>((read_back.text(), arguments(read_back)?));
        let (rows, changed) = if let Some(log) = log.filter(|log| !log.is_empty()) {
            // With a history table on SQLite and MySQL: the history row's
            // insert and the compare-and-set, in one transaction.
            let log_args = arguments(log)?;
            let log = log.text();
            let returns_rows = (versioned || leased) && <DB<E> as Dialect>::RETURNING;
            // MySQL reads a lease back; a version comes with the update.
            let then = match leased && !<DB<E> as Dialect>::RETURNING {
                true => Some(read_back_args()?),
                false => None,
            };
            let logged = executor
                .logged(log, log_args, update, args, returns_rows, then)
                .await
                .map_err(retryable)?;
            let row = match logged.rows.first() {
                Some(row) => Some(Read::new(statement, row)),
                None => logged.then.as_ref().map(|row| Read::new(read_back, row)),
            };
            let mut changed = changed(row)?;
            if versioned && !leased && !<DB<E> as Dialect>::RETURNING {
                changed.occurrence = last_id(logged.last_id)?;
            }
            (logged.updated, changed)
        } else if !versioned && !leased {
            let done = executor.execute(update, args).await.map_err(retryable)?;
            (<DB<E> as Dialect>::rows_affected(&done), changed(None)?)
        } else if <DB<E> as Dialect>::RETURNING {
            // One row per row changed.
            let rows = executor.fetch_all(update, args).await.map_err(retryable)?;
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
                    <DB<E> as Dialect>::LAST_ID,
                    Default::default(),
                    <DB<E> as Dialect>::id_lost,
                )
                .await
                .map_err(retryable)?;
            let mut changed = changed(None)?;
            changed.occurrence = match row {
                Some(row) => <DB<E> as Dialect>::int(&row, 0).map_err(failed)?,
                None => last_id(<DB<E> as Dialect>::last_insert_id(&done))?,
            };
            (<DB<E> as Dialect>::rows_affected(&done), changed)
        } else {
            // MySQL into an in-flight state: the same connection reads the
            // new version (LAST_INSERT_ID()) and the lease token back.
            let (read, then_args) = read_back_args()?;
            let (done, row) = executor
                .execute_then_fetch(update, args, read, then_args, <DB<E> as Dialect>::changed)
                .await
                .map_err(retryable)?;
            let row = row.as_ref().map(|row| Read::new(read_back, row));
            (<DB<E> as Dialect>::rows_affected(&done), changed(row)?)
        };
        match rows {
            0 => Ok(None),
            1 => Ok(Some(changed)),
            rows => Err(Attempt::Failed(Error::AmbiguousKey {
                table: S::MACHINE.table(),
                key: S::MACHINE.key(),
                transition: self.def.name(),
                rows,
            })),
        }
    }

    /// Decides what a failed statement means: `Ok` after sleeping when a
    /// fresh autocommit attempt may succeed, the error to return otherwise.
    pub(crate) async fn before_retry<E: Executor>(
        self,
        executor: &mut E,
        error: sqlx::Error,
        attempts: u32,
    ) -> Result<(), Error> {
        if !worth_retrying::<E>(&error) {
            return Err(self.db_error(error));
        }
        let fresh = !<E::Database as Backend>::is_retryable(&error);
        if executor.in_transaction() {
            return Err(Error::RetryTransaction {
                table: S::MACHINE.table(),
                transition: self.name(),
                source: error,
            });
        }
        if attempts >= MAX_ATTEMPTS {
            return Err(match fresh {
                true => self.db_error(error),
                false => self.contention(attempts, Some(error)),
            });
        }
        tracing::debug!(
            table = S::MACHINE.table(),
            transition = self.name(),
            attempts,
            %error,
            "retryable database error; backing off"
        );
        tokio::time::sleep(backoff(attempts)).await;
        Ok(())
    }
}

/// What a winning compare-and-set changed: the row's new occurrence and,
/// for a transition into an in-flight state, its lease token.
#[derive(Default)]
pub(crate) struct Changed {
    occurrence: i64,
    lease: i64,
}

/// What one try of a statement came to.
enum Try<T> {
    /// It ran: here is what it found.
    Done(T),
    /// It hit a retryable error in autocommit, and the backoff has been
    /// slept: run the attempt again.
    Again,
}

/// How one statement of an attempt failed.
enum Attempt {
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
struct Watch<'a> {
    writing: &'a core::sync::atomic::AtomicBool,
    tries: &'a core::sync::atomic::AtomicU32,
    span: &'a tracing::Span,
    note: &'a Note,
}

/// The `stateguard.outcome` of a span: the outcome's name, `error` or
/// `timeout`.
fn outcome_name<S: StateMachine, K, C, T>(
    result: &Result<Result<Outcome<S, K, C>, Error>, T>,
) -> &'static str {
    match result {
        Ok(Ok(outcome)) => outcome_label(outcome),
        Ok(Err(_)) => "error",
        Err(_) => "timeout",
    }
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
