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
use crate::error::{Error, Misuse};
use crate::executor::{Runner, refuse_open_transaction};
use crate::machine::key::{BindError, KeyShape, RowKey};
use crate::outcome::{LeasedAt, Outcome};
use crate::transition::bind::{self, Parts, Values};
use crate::transition::failure::Names;
use crate::transition::row::Read;

mod attempt;

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
                return Err(Error::Misuse(Misuse::NoVersionColumn {
                    machine: names.machine,
                    transition: names.transition,
                }));
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
