//! The backends that can claim rows and apply a transition to many keys:
//! the sealed [`Batched`] trait and what its methods pass around. The
//! implementations, one per backend, are in `claim/backends.rs`; `apply_many` and
//! `claim` (in `many.rs` and `claim/`) call them.

use core::time::Duration;

use crate::StateMachine;
use crate::deadline::call::Sent;
use crate::dialect::{Backend, BoxFuture, Column, Sql, Statement};
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::tx::{Savepoint, Tx};
use crate::machine::ManySql;
use crate::machine::key::{Batchable, BindError, KeyShape};
use crate::transition::bind::{self, Parts, Prefix, Values};
use crate::transition::note::Note;
use crate::transition::row::Read;
use crate::transition::{Class, Names, Transition, classify};

/// A backend that can claim rows and apply a transition to many keys
/// ([`Transition::claim`], [`Transition::apply_many`]). Claims: PostgreSQL in one statement
/// (`FOR UPDATE SKIP LOCKED`), MySQL 8 / MariaDB 10.6+ in a short
/// transaction that skips locked rows, SQLite in a short `BEGIN IMMEDIATE`
/// transaction (one writer at a time, so nothing to skip); on both, one
/// `UPDATE` moves every row the claim took. PostgreSQL claims the rows
/// of a transition that emits a message as MySQL does, so that the
/// messages' effect keys are bound beside the keys. Implemented for every backend;
/// it cannot be implemented outside this crate.
pub trait Batched: Backend + sealed::Sealed {
    /// Runs the claim.
    #[doc(hidden)]
    fn claim_rows<'a, E, Sh, K>(
        executor: &'a mut E,
        transition: Batch<'a>,
        values: &'a (dyn Parts<Self> + Sync),
        claim: Claim,
        limit: u32,
        note: &'a Note,
    ) -> Claimed<'a, K>
    where
        E: BatchRunner<Database = Self> + 'a,
        Sh: KeyShape,
        K: Batchable<Self, Sh> + 'a;

    /// Runs one chunk of `apply_many`.
    #[doc(hidden)]
    fn apply_rows<'a, E, Sh, K>(
        executor: &'a mut E,
        transition: Batch<'a>,
        keys: &'a [&'a K],
        values: &'a (dyn Parts<Self> + Sync),
        note: &'a Note,
    ) -> Applied<'a, K>
    where
        E: BatchRunner<Database = Self> + 'a,
        Sh: KeyShape,
        K: Batchable<Self, Sh> + 'a;

    /// Moves the rows a claim holds, inside its transaction: the winning
    /// statements of `apply_many`, once for all of them.
    #[doc(hidden)]
    fn move_held<'a, E, Sh, K>(
        executor: &'a mut E,
        transition: Batch<'a>,
        keys: &'a [&'a K],
        values: &'a (dyn Parts<Self> + Sync),
        note: &'a Note,
    ) -> Applied<'a, K>
    where
        E: Runner<Database = Self> + 'a,
        Sh: KeyShape,
        K: Batchable<Self, Sh> + 'a;
}

/// What claims, sweeps and [`apply_many`](Transition::apply_many) run on:
/// a pool (`&pool`), where each claim or chunk runs and commits on its own
/// and its wins are [`Committed`](crate::Committed), or the caller's
/// transaction or savepoint (`&mut tx`), where its statements run inside
/// it and its wins are [`Uncommitted`](crate::Uncommitted) until
/// [`Tx::commit`](crate::Tx::commit), so that the work that the rows stand
/// for commits with their move, or neither does.
///
/// A bare connection is not one: on SQLite and MySQL a claim needs a
/// transaction around its statements. Implemented for `&Pool`, `&mut Tx`
/// and `&mut Savepoint`; it cannot be implemented outside this crate.
#[diagnostic::on_unimplemented(
    message = "claims and batches do not run on `{Self}`",
    label = "not a pool or a stateguard transaction",
    note = "pass `&pool`, or a stateguard transaction: `let mut tx = \
            stateguard::Tx::begin(&pool).await?;` and then `&mut tx`"
)]
pub trait BatchRunner: Runner<Database: Batched> + sealed::SealedRunner {
    /// The pool, where the batch runs on one; `None` inside the caller's
    /// transaction.
    #[doc(hidden)]
    fn pool(&self) -> Option<&sqlx::Pool<Self::Database>>;
}

impl<DB: Backend> sealed::SealedRunner for &sqlx::Pool<DB> {}
impl<DB: Batched> BatchRunner for &sqlx::Pool<DB> {
    fn pool(&self) -> Option<&sqlx::Pool<DB>> {
        Some(self)
    }
}

impl<DB: Backend> sealed::SealedRunner for &mut Tx<'_, DB> {}
impl<DB: Batched> BatchRunner for &mut Tx<'_, DB> {
    fn pool(&self) -> Option<&sqlx::Pool<DB>> {
        None
    }
}

impl<DB: Backend> sealed::SealedRunner for &mut Savepoint<'_, DB> {}
impl<DB: Batched> BatchRunner for &mut Savepoint<'_, DB> {
    fn pool(&self) -> Option<&sqlx::Pool<DB>> {
        None
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}

    pub trait SealedRunner {}
}

/// A claim's future: the rows it moved, committed, oldest first.
pub(crate) type Claimed<'a, K> = BoxFuture<'a, Result<Vec<Took<K>>, Error>>;

/// One `apply_many` chunk's future: what each key came to.
pub(crate) type Applied<'a, K> = BoxFuture<'a, Result<Vec<Found<K>>, Error>>;

/// One transition as claims and batches run it, with no type of the
/// machine's: its names, deadline and statements, where a status text
/// stands for it, and a row's effect key up to its occurrence, which its
/// messages take (`emit(…)`). The code that runs the statements is generic over the
/// backend and the key only; `claim` and `apply_many` turn what it found
/// into wins and outcomes of the machine.
#[doc(hidden)]
#[derive(Clone, Copy)]
// Each backend reads some of it; a build with fewer backends leaves some
// unread.
#[cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code)
)]
pub struct Batch<'a> {
    names: Names,
    deadline: Duration,
    many: &'static ManySql,
    by_value: &'static [Sql; 2],
    versioned: bool,
    leased: bool,
    classify: &'a (dyn Fn(&str) -> Result<Class, Error> + Sync),
    effect: &'a Prefix,
    /// Whether a statement that may write has gone out: a call cut off
    /// before it (waiting for a connection or a `BEGIN`) changed nothing.
    sent: &'a Sent,
}

impl<S: StateMachine> Transition<S> {
    /// Where a status text stands for this transition, for [`Batch`].
    pub(crate) fn classifier(self) -> impl Fn(&str) -> Result<Class, Error> + Sync {
        let def = self.def;
        move |text: &str| classify(def, text)
    }

    /// This transition as claims and batches run it, placing status texts
    /// with `classify` (from [`Transition::classifier`]) and computing
    /// effect keys with `effect` (from [`Transition::effect_prefix`]).
    pub(crate) fn batch<'a>(
        self,
        classify: &'a (dyn Fn(&str) -> Result<Class, Error> + Sync),
        effect: &'a Prefix,
        sent: &'a Sent,
    ) -> Batch<'a> {
        Batch {
            names: self.names(),
            deadline: self.deadline,
            many: self.def.apply_many_sql(),
            by_value: self.def.apply_many_by_value_sql(),
            versioned: S::MACHINE.version().is_some(),
            leased: self.def.since_column().is_some(),
            classify,
            effect,
            sent,
        }
    }
}

#[cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code)
)]
impl Batch<'_> {
    /// From now on a statement that may write is in flight.
    pub(crate) fn sending(&self) {
        self.sent.write();
    }

    /// The transition's name.
    pub(crate) fn name(&self) -> &'static str {
        self.names.transition
    }

    /// The machine's table.
    pub(crate) fn table(&self) -> &'static str {
        self.names.table
    }

    /// The deadline the call keeps.
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The statements of `apply_many`.
    pub(crate) fn many(&self) -> &'static ManySql {
        self.many
    }

    /// `[update, read]` of `apply_many`, comparing keys by value.
    pub(crate) fn by_value(&self) -> &'static [Sql; 2] {
        self.by_value
    }

    /// A row's effect key up to its occurrence, from its key's text.
    pub(crate) fn effect(&self) -> &Prefix {
        self.effect
    }

    /// Whether the machine has a version column.
    pub(crate) fn versioned(&self) -> bool {
        self.versioned
    }

    /// Whether the transition enters an in-flight state, whose rows get a
    /// lease token.
    pub(crate) fn leased(&self) -> bool {
        self.leased
    }

    /// The status `row` holds and where it stands; NULL is an error of its
    /// own, and so is a text that is no state of the machine.
    pub(crate) fn read_status<DB: Backend>(
        &self,
        row: &Read<'_, DB>,
    ) -> Result<(String, Class), Error> {
        match row.text(Column::Status).map_err(|e| self.db_error(e))? {
            Some(text) => {
                let class = (self.classify)(&text)?;
                Ok((text, class))
            }
            None => Err(Error::NullStatus {
                table: self.names.table,
                column: self.names.column,
            }),
        }
    }

    pub(crate) fn keys_error(&self, error: BindError) -> Error {
        self.names.keys_error(error)
    }

    pub(crate) fn db_error(&self, source: sqlx::Error) -> Error {
        self.names.db_error(source)
    }

    pub(crate) fn begin_error(&self, error: Error) -> Error {
        self.names.begin_error(error)
    }

    pub(crate) fn tx_error<DB: Backend>(&self, source: sqlx::Error) -> Error {
        self.names.tx_error::<DB>(source)
    }

    pub(crate) async fn before_retry<E: Runner>(
        &self,
        executor: &mut E,
        error: sqlx::Error,
        attempts: u32,
    ) -> Result<(), Error> {
        self.names.before_retry(executor, error, attempts).await
    }
}

/// A row a claim moved: its key as stored, its new occurrence and lease
/// token.
#[doc(hidden)]
pub struct Took<K> {
    pub(crate) key: K,
    pub(crate) occurrence: i64,
    pub(crate) lease: i64,
}

/// Which claim: every row in a source state, or those whose `since` is
/// older than an age.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    pub(crate) sql: &'static Sql,
    /// Milliseconds, bound after the guard's values.
    pub(crate) older_than: Option<i64>,
}

impl Claim {
    /// Whether the claim's statement on `DB` moves the rows it takes (it
    /// returns their new occurrence), or only names them (their keys),
    /// for `apply_many`'s statements to move in the same transaction.
    #[cfg(feature = "postgres")]
    pub(crate) fn moves<DB: Backend>(self) -> bool {
        DB::statement(self.sql).column(Column::Occurrence).is_some()
    }

    /// The claim's statement as `DB` runs it, with the call's values, the
    /// age, the limit and the note bound as its plan takes them.
    pub(crate) fn prepared<DB: Backend>(
        self,
        params: &(dyn Parts<DB> + Sync),
        limit: u32,
        note: &Note,
    ) -> Result<(Statement, DB::Args), sqlx::Error> {
        let statement = DB::statement(self.sql);
        let values = Values {
            values: Some(params),
            note: Some(note),
            age: self.older_than,
            limit: Some(i64::from(limit)),
            ..Values::NONE
        };
        let args = bind::arguments(statement, &values).map_err(BindError::into_sqlx)?;
        Ok((statement, args))
    }
}

/// What one chunk's statements found for one distinct key.
#[doc(hidden)]
pub enum Found<K> {
    /// Moved by the winning statement: the key as stored, the new
    /// occurrence and lease token.
    Moved { key: K, occurrence: i64, lease: i64 },
    /// Not moved; the row is in `current` (as the database wrote it), which
    /// stands as `class` for the transition, and meets the guard or not.
    Left {
        current: String,
        class: Class,
        meets: bool,
    },
    /// No such row.
    Missing,
}

/// The position of `key` among a chunk's keys, which are sorted and
/// distinct (keys match exactly, so a row's key reads back equal to the
/// key that found it).
pub(crate) fn position<K: Ord>(keys: &[&K], key: &K) -> Option<usize> {
    keys.binary_search_by(|k| (*k).cmp(key)).ok()
}
