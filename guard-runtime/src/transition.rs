//! `Transition<S>`: one named move, and `apply`, the compare-and-set that
//! runs it.

use core::fmt;
use core::time::Duration;

use tracing::Instrument;

use crate::deadline::retry::{DEFAULT_DEADLINE, MAX_ATTEMPTS, backoff};
use crate::note::Note;
use crate::telemetry;

use crate::StateMachine;
pub use crate::bind::Params;
use crate::bind::{self, Values};
use crate::dialect::sealed::Dialect;
use crate::dialect::{Backend, Column, Statement};
use crate::error::Error;
use crate::executor::sealed::Run;
use crate::executor::{Executor, refuse_open_transaction};
use crate::machine::key::{BindError, KeyShape, RowKey};
use crate::machine::{HasVersion, InFlightDef, Machine, TransitionDef};
use crate::outcome::{Current, Outcome, Won};
use crate::row::Read;

/// One named transition of a machine, e.g. `PayoutStatus::start()`.
///
/// A small `Copy` value pointing at compile-time metadata and SQL text.
pub struct Transition<S: 'static> {
    def: &'static TransitionDef<S>,
    deadline: Duration,
    expected: Option<i64>,
}

impl<S: StateMachine> Transition<S> {
    pub(crate) const fn from_def(def: &'static TransitionDef<S>) -> Self {
        Transition {
            def,
            deadline: DEFAULT_DEADLINE,
            expected: None,
        }
    }

    /// The occurrence [`Transition::expecting`] set, if any.
    pub const fn expected(self) -> Option<i64> {
        self.expected
    }

    /// The same transition, with `deadline` for [`Transition::apply`]
    /// instead of [`DEFAULT_DEADLINE`]:
    /// `PayoutStatus::start().within(Duration::from_secs(2)).apply(&pool, id)`.
    ///
    /// A call that runs out of time ends in [`Error::Timeout`], which says
    /// whether the outcome is known. A win of this transition keeps the
    /// same deadline for [`Won::finish`].
    pub const fn within(self, deadline: Duration) -> Self {
        Transition { deadline, ..self }
    }

    /// The deadline [`Transition::apply`] keeps.
    pub const fn deadline(self) -> Duration {
        self.deadline
    }

    /// The transition's name, e.g. `start`.
    pub const fn name(self) -> &'static str {
        self.def.name()
    }

    /// The state a win moves the row to.
    pub const fn target(self) -> S {
        self.def.target()
    }

    /// The states it may start from.
    pub const fn sources(self) -> &'static [S] {
        self.def.sources()
    }

    /// The full metadata, including the SQL text for each dialect.
    pub const fn def(self) -> &'static TransitionDef<S> {
        self.def
    }

    /// Runs the compare-and-set on the row whose key is `key`.
    ///
    /// One `UPDATE … WHERE key = ? AND status IN (sources)` on the winning
    /// path. If it changed no row, a fresh `SELECT` of the status tells why:
    /// the row is already in the target ([`Outcome::AlreadyInState`]),
    /// somewhere this transition cannot start from ([`Outcome::Conflict`]),
    /// or absent ([`Outcome::NotFound`]).
    ///
    /// `executor` is a `&Pool`, a `&mut` connection, or a `&mut`
    /// [`Tx`](crate::Tx) or [`Savepoint`](crate::Savepoint).
    /// On a pool or a connection outside a transaction, serialization
    /// failures and deadlocks are retried with jittered backoff, and a win
    /// is [`Committed`](crate::Committed). Inside a transaction they end in
    /// [`Error::RetryTransaction`], and a win is
    /// [`Uncommitted`](crate::Uncommitted) until the transaction commits
    /// through [`Tx::commit`](crate::Tx::commit).
    ///
    /// The call keeps a deadline ([`DEFAULT_DEADLINE`], or
    /// [`Transition::within`]): a lock held elsewhere, or retries that do
    /// not settle, end in [`Error::Timeout`]. If time ran out while the
    /// `UPDATE` was in flight, the change may still commit without a win
    /// (`outcome_known: false`); inside a [`Tx`](crate::Tx) the transaction
    /// then refuses to commit. The same holds when the caller drops the
    /// future mid-statement: the `UPDATE` may commit, and no `Won` comes
    /// out. A row moved into an in-flight state that way is taken over by
    /// [`recover`](crate::recover) once its lease runs out; any other
    /// effect is lost unless the caller treats such an error, or a later
    /// `AlreadyInState`, as an effect possibly owed.
    pub async fn apply<E, K>(self, executor: E, key: K) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
    {
        self.apply_with(executor, key, &(), &Note::NONE).await
    }

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

    /// A batch's keys that could not be bound.
    pub(crate) fn keys_error(self, error: crate::machine::key::BindError) -> Error {
        match error {
            crate::machine::key::BindError::Key { key, reason } => Error::BatchKey {
                table: S::MACHINE.table(),
                transition: self.name(),
                key,
                reason,
            },
            crate::machine::key::BindError::Encode(source) => self.db_error(source),
        }
    }

    /// An error of the `BEGIN` of a transaction that the call runs itself
    /// (a claim, a batch), named after the call: a `BEGIN` cut off by the
    /// deadline wrote nothing, so the outcome is known.
    pub(crate) fn begin_error(self, error: Error) -> Error {
        match error {
            Error::Timeout { deadline, .. } => Error::Timeout {
                table: S::MACHINE.table(),
                transition: self.name(),
                deadline,
                outcome_known: true,
            },
            other => other,
        }
    }

    pub(crate) fn db_error(self, source: sqlx::Error) -> Error {
        let (table, transition) = (S::MACHINE.table(), self.name());
        match crate::error::read_only(&source) {
            true => Error::ReadOnly {
                table,
                transition,
                source,
            },
            false => Error::Database {
                table,
                transition,
                source,
            },
        }
    }

    /// A statement's error inside a transaction the call runs itself: a
    /// deadlock or busy database rolled it back, so the whole transaction
    /// is tried again.
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    pub(crate) fn tx_error<DB: Backend>(self, source: sqlx::Error) -> Error {
        match DB::is_retryable(&source) {
            true => Error::RetryTransaction {
                table: S::MACHINE.table(),
                transition: self.name(),
                source,
            },
            false => self.db_error(source),
        }
    }

    pub(crate) fn contention(self, attempts: u32, last: Option<sqlx::Error>) -> Error {
        Error::Contention {
            table: S::MACHINE.table(),
            transition: self.name(),
            attempts,
            last,
        }
    }
}

impl<S: HasVersion> Transition<S> {
    /// The same transition, applied only if the row is still at
    /// `occurrence`, the value of the machine's version column that the
    /// caller saw ([`Won::occurrence`], [`Current::occurrence`] from
    /// [`Machine::load`](crate::meta::Machine::load)):
    /// `PayoutStatus::cancel().expecting(seen).apply(&pool, id)`.
    ///
    /// A row that moved on since is [`Outcome::Stale`], with its state and
    /// occurrence now; the compare-and-set is still one statement. This is
    /// how an operator acting on a page loaded earlier cannot move a row
    /// that changed meanwhile, and how a late replay in a machine with a
    /// cycle (`held → active → held`) is refused instead of winning the
    /// next pass. Only a machine with a `version` column ([`HasVersion`])
    /// has an occurrence to expect: elsewhere the call does not compile.
    pub const fn expecting(self, occurrence: i64) -> Self {
        Transition {
            expected: Some(occurrence),
            ..self
        }
    }
}

/// Whether a fresh autocommit attempt of a statement that failed with
/// `error` on `E` may get past it: a serialization failure, deadlock or
/// busy database; or, on a pool, a read-only server (a standby, a primary
/// demoted by a failover), which wrote nothing and whose connection the
/// pool closed, so that the next attempt takes a fresh one.
fn worth_retrying<E: Run>(error: &sqlx::Error) -> bool {
    <E::Database as Backend>::is_retryable(error) || (E::POOLED && crate::error::read_only(error))
}

impl<S: StateMachine> TransitionDef<S> {
    /// This transition as a value that can be applied.
    pub const fn transition(&'static self) -> Transition<S> {
        Transition::from_def(self)
    }
}

impl<S: StateMachine> Machine<S> {
    /// Reads the row whose key is `key`: its state and occurrence now, or
    /// `None` if there is no such row. A page can carry the occurrence to
    /// the next request and apply with [`Transition::expecting`].
    ///
    /// One `SELECT`, a locking read inside a transaction as on the losing
    /// path of [`Transition::apply`].
    ///
    /// Deadline: [`DEFAULT_DEADLINE`], or `PayoutStatus::MACHINE.load(&pool,
    /// id).within(d)` ([`Call`](crate::Call)); cut off, [`Error::Timeout`]
    /// (`load`, outcome known: it only reads).
    pub fn load<'a, E, K>(&'static self, executor: E, key: K) -> crate::Call<'a, Option<Current<S>>>
    where
        E: Executor + 'a,
        K: RowKey<E::Database, S::KeyShape> + 'a,
    {
        crate::Call::new(move |deadline| async move {
            let read = self.read_current(executor, key);
            let sent = crate::deadline::call::Sent::default();
            crate::deadline::call::bounded(self.table(), "load", deadline, &sent, read).await
        })
    }

    /// [`Machine::load`], without its deadline.
    async fn read_current<E, K>(
        &'static self,
        mut executor: E,
        key: K,
    ) -> Result<Option<Current<S>>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
    {
        let error = |source| Error::Database {
            table: self.table(),
            transition: "load",
            source,
        };
        let select =
            <E::Database as Dialect>::statement(self.select_for(executor.in_transaction()));
        let args = key_arguments::<E::Database, S::KeyShape, K>(select, &key).map_err(error)?;
        let Some(row) = executor
            .fetch_optional(select.text(), args)
            .await
            .map_err(error)?
        else {
            return Ok(None);
        };
        let row = Read::<E::Database>::new(select, &row);
        let state = status_of::<S, E::Database>(&row, error)?;
        let occurrence = row.int(Column::Version).map_err(error)?;
        Ok(Some(Current::new(state, occurrence)))
    }
}

impl<S: StateMachine> InFlightDef<S> {
    /// The transition that ends this state when the effect succeeded.
    pub const fn done(&self) -> Transition<S> {
        Transition::from_def(self.done)
    }

    /// The transition that ends this state when the effect failed for good.
    pub const fn failed(&self) -> Option<Transition<S>> {
        match self.failed {
            Some(def) => Some(Transition::from_def(def)),
            None => None,
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

impl<S: StateMachine> Clone for Transition<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: StateMachine> Copy for Transition<S> {}

impl<S: StateMachine> PartialEq for Transition<S> {
    fn eq(&self, other: &Self) -> bool {
        (core::ptr::eq(self.def, other.def) || self.def.name() == other.def.name())
            && self.deadline == other.deadline
            && self.expected == other.expected
    }
}

impl<S: StateMachine> Eq for Transition<S> {}

impl<S: StateMachine> fmt::Debug for Transition<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transition")
            .field("name", &self.name())
            .field("sources", &self.sources())
            .field("target", &self.target())
            .finish()
    }
}

impl<S: StateMachine> fmt::Display for Transition<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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

/// A transition with values bound per call:
/// `PayoutStatus::confirm(bank_ref)` for
/// `#[transition(confirm -> Sent, set(bank_ref = bind(String)))]`.
///
/// It applies as [`Transition`] does; the values go into the one
/// compare-and-set statement as bound parameters, never into its text.
#[derive(Debug, Clone)]
pub struct Bound<S: StateMachine, P> {
    transition: Transition<S>,
    params: P,
}

impl<S: StateMachine, P> Bound<S, P> {
    pub(crate) const fn new(transition: Transition<S>, params: P) -> Self {
        Bound { transition, params }
    }

    /// The transition, without its values.
    pub const fn transition(&self) -> Transition<S> {
        self.transition
    }

    /// The values it binds.
    pub const fn params(&self) -> &P {
        &self.params
    }

    /// The values it binds, by value.
    pub fn into_params(self) -> P {
        self.params
    }

    /// See [`Transition::within`].
    pub fn within(self, deadline: Duration) -> Self {
        Bound {
            transition: self.transition.within(deadline),
            ..self
        }
    }

    /// See [`Transition::apply`]; the values are bound into the `set`
    /// assignments of the same statement.
    pub async fn apply<E, K>(self, executor: E, key: K) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        self.transition
            .apply_with(executor, key, &self.params, &Note::NONE)
            .await
    }
}

impl<S: HasVersion, P> Bound<S, P> {
    /// See [`Transition::expecting`].
    pub fn expecting(self, occurrence: i64) -> Self {
        Bound {
            transition: self.transition.expecting(occurrence),
            ..self
        }
    }
}
