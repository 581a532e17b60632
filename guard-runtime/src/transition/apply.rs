//! `apply`: the compare-and-set, its retries and the read that tells a
//! loser why.
//!
//! The body runs on a core that knows neither the machine nor the types
//! of the key and the values ([`Plan::run`]): it takes the statements and
//! names of one transition ([`Plan`]), the call's values already erased
//! for binding ([`Call`]), and returns what happened with the status as
//! the database wrote it ([`Raw`]). [`Transition::apply_with`] is the thin
//! generic wrapper that turns that into an [`Outcome`], so that a binary
//! carries one copy of the compare-and-set per executor, not one per
//! machine and values.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use core::time::Duration;

use tracing::Instrument;

use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::telemetry;
use crate::transition::note::Note;

use super::Transition;
use super::failure::{Names, worth_retrying};
use crate::StateMachine;
use crate::dialect::sealed::Dialect;
use crate::dialect::{Backend, BoxFuture, Column, Sql, Statement};
use crate::error::Error;
use crate::executor::sealed::Run;
use crate::executor::{Executor, refuse_open_transaction};
use crate::machine::TransitionDef;
use crate::machine::key::{BindError, KeyShape, RowKey};
use crate::outcome::{LeasedAt, Outcome, Won};
use crate::transition::bind::{self, Parts, Values};
use crate::transition::row::Read;

impl<S: StateMachine> Transition<S> {
    /// [`Transition::apply`], binding `values` (a call's values,
    /// [`bind::values`]) into the `set` assignments that take values per
    /// call, and `note` into the history row.
    pub(crate) async fn apply_with<E, K>(
        self,
        mut executor: E,
        key: K,
        values: &(dyn Parts<E::Database> + Sync),
        note: &Note,
    ) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
    {
        let def = self.def;
        let classify = |text: &str| classify(def, text);
        let raw = {
            let parts = bind::key::<S::KeyShape, K>(&key);
            let call = Call {
                key: &parts,
                values,
                note,
                shown: &key,
                classify: &classify,
            };
            // Boxed: the caller's future holds a pointer to the core's,
            // not a copy of its state machine, and no call site inlines it.
            let run: BoxFuture<'_, Result<Raw, Error>> =
                Box::pin(self.plan().run(&mut executor, &call));
            run.await?
        };
        Ok(match raw {
            Raw::Applied {
                occurrence,
                lease,
                sent,
            } => {
                let won = Won::new(def.target(), key, occurrence, lease, executor.scope());
                Outcome::Applied(won.within(self.deadline).leased_since(sent))
            }
            Raw::NotFound => Outcome::NotFound,
            Raw::Left { current, left } => {
                let current = S::parse_db_str(&current)?;
                match left {
                    Left::Stale(occurrence) => Outcome::Stale {
                        current,
                        occurrence,
                    },
                    Left::AlreadyInState => Outcome::AlreadyInState(current),
                    Left::Conflict => Outcome::Conflict { current },
                    Left::Refused => Outcome::Refused { current },
                }
            }
        })
    }

    /// What the core of `apply` needs of this transition.
    fn plan(self) -> Plan {
        let (def, machine) = (self.def, S::MACHINE);
        Plan {
            names: self.names(),
            deadline: self.deadline,
            expected: self.expected,
            select: match def.select_guarded_sql() {
                Some([plain, locked]) => [plain, locked],
                None => [machine.select_for(false), machine.select_for(true)],
            },
            update: def.update_sql(),
            update_expecting: def.update_expecting_sql(),
            log: def.log_sql(),
            read_back: def.read_back_sql(),
            versioned: machine.version().is_some(),
            leased: def.stamps().is_some(),
            guarded: def.guard().is_some(),
        }
    }

    /// The status `row` holds, parsed; NULL is an error of its own.
    pub(crate) fn read_status<DB: Backend>(self, row: &Read<'_, DB>) -> Result<S, Error> {
        status_of::<S, DB>(row, |e| self.db_error(e))
    }
}

/// Where the status text a losing read found stands for `def`: its target,
/// one of its sources, or elsewhere; a text that is no state of the
/// machine is [`Error::UnknownState`].
pub(crate) fn classify<S: StateMachine>(
    def: &TransitionDef<S>,
    text: &str,
) -> Result<Class, Error> {
    let current = S::parse_db_str(text)?;
    Ok(if current == def.target() {
        Class::Target
    } else if def.sources().contains(&current) {
        Class::Source
    } else {
        Class::Elsewhere
    })
}

/// One transition's compare-and-set, with no type of the machine's: its
/// names, deadline and expected occurrence, and its statements.
#[derive(Clone, Copy)]
pub(crate) struct Plan {
    names: Names,
    deadline: Duration,
    expected: Option<i64>,
    /// The losing path's read, `[plain, inside a transaction]`.
    select: [&'static Sql; 2],
    update: &'static Sql,
    update_expecting: Option<&'static Sql>,
    /// With a history table on SQLite and MySQL: the history row's
    /// insert, `[plain, expecting]`.
    log: Option<&'static [Sql; 2]>,
    read_back: &'static Sql,
    versioned: bool,
    leased: bool,
    guarded: bool,
}

/// What one call of the core binds and how it reads a status, erased: the
/// key's columns, the call's values, the note, the key as spans show it,
/// and where a status text stands.
pub(crate) struct Call<'a, DB: Backend> {
    key: &'a (dyn Parts<DB> + Sync),
    values: &'a (dyn Parts<DB> + Sync),
    note: &'a Note,
    shown: &'a (dyn fmt::Debug + Sync),
    classify: &'a (dyn Fn(&str) -> Result<Class, Error> + Sync),
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

impl Plan {
    /// The compare-and-set within its deadline, traced and counted.
    async fn run<E: Executor>(
        self,
        executor: &mut E,
        call: &Call<'_, E::Database>,
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
        let watch = Watch {
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
    async fn watched<E: Executor>(
        &self,
        executor: &mut E,
        call: &Call<'_, E::Database>,
        watch: Watch<'_>,
    ) -> Result<Raw, Error> {
        refuse_open_transaction(executor)?;
        let names = self.names;
        let in_transaction = executor.in_transaction();
        let select = <E::Database as Dialect>::statement(self.select[usize::from(in_transaction)]);
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
        let update = <E::Database as Dialect>::statement(update);
        let mut attempts = 0;
        loop {
            attempts += 1;
            watch.span.record("stateguard.attempts", attempts);
            watch.tries.store(attempts, Ordering::Relaxed);
            watch.writing.store(true, Ordering::Relaxed);
            let sent = LeasedAt(Some(std::time::Instant::now()));
            let changed = self.attempt(executor, update, call, attempts).await;
            watch.writing.store(false, Ordering::Relaxed);
            let Try::Done(changed) = changed? else {
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
            let Try::Done(row) = read.await? else {
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
                let version = row.int(Column::Version).map_err(|e| names.db_error(e))?;
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
            // it moved away and back between the two statements. Try again.
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
    async fn attempt<E: Executor>(
        &self,
        executor: &mut E,
        update: Statement,
        call: &Call<'_, E::Database>,
        attempts: u32,
    ) -> Result<Try<Option<Changed>>, Error> {
        match self.compare_and_set(executor, update, call).await {
            Ok(changed) => Ok(Try::Done(changed)),
            Err(Attempt::Failed(error)) => Err(error),
            Err(Attempt::Retryable(error)) => {
                self.names.before_retry(executor, error, attempts).await?;
                Ok(Try::Again)
            }
        }
    }

    /// The losing path's fresh read of the row: `Done(row)` (`None`: no such
    /// row), or `Again` after a retryable error once the backoff has been
    /// slept.
    async fn fresh_read<E: Executor>(
        &self,
        executor: &mut E,
        select: Statement,
        call: &Call<'_, E::Database>,
        attempts: u32,
    ) -> Result<Try<Option<<E::Database as sqlx::Database>::Row>>, Error> {
        let values = Values {
            key: Some(call.key),
            values: Some(call.values),
            ..Values::NONE
        };
        let row = match bind::arguments(select, &values) {
            Ok(args) => executor.fetch_optional(select.text(), args).await,
            Err(error) => return Err(self.names.keys_error(error)),
        };
        match row {
            Ok(row) => Ok(Try::Done(row)),
            Err(error) => {
                self.names.before_retry(executor, error, attempts).await?;
                Ok(Try::Again)
            }
        }
    }

    /// The winning-path statement: `Some(changed)` when it changed the row,
    /// `None` when it matched nothing.
    async fn compare_and_set<E: Executor>(
        &self,
        executor: &mut E,
        update: Statement,
        call: &Call<'_, E::Database>,
    ) -> Result<Option<Changed>, Attempt> {
        type DB<E> = <E as Run>::Database;
        let names = self.names;
        let failed = |e| Attempt::Failed(names.db_error(e));
        // One set of values for every statement of the move: each binds
        // what its plan names.
        let values = Values {
            key: Some(call.key),
            values: Some(call.values),
            note: Some(call.note),
            expected: self.expected,
            ..Values::NONE
        };
        let arguments = |statement| {
            bind::arguments::<DB<E>>(statement, &values)
                .map_err(|e| Attempt::Failed(names.keys_error(e)))
        };
        let args = arguments(update)?;
        // With a history table on SQLite and MySQL, the history row's
        // insert, run just before the move in one transaction with it.
        let log = self.log.map(|[plain, expecting]| {
            <DB<E> as Dialect>::statement(match self.expected {
                Some(_) => expecting,
                None => plain,
            })
        });
        let (statement, update) = (update, update.text());
        let read_back = <DB<E> as Dialect>::statement(self.read_back);
        let retryable = |error: sqlx::Error| match worth_retrying::<E>(&error) {
            true => Attempt::Retryable(error),
            false => Attempt::Failed(names.db_error(error)),
        };
        let (versioned, leased) = (self.versioned, self.leased);
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
                Attempt::Failed(names.db_error(sqlx::Error::Protocol(format!(
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
