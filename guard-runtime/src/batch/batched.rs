//! The backends that can claim rows and apply a transition to many keys:
//! the sealed [`Batched`] trait and what its methods pass around. The
//! implementations, one per backend, are in `claim.rs`; `apply_many` and
//! `claim` (in `many.rs` and `claim.rs`) call them.

use crate::StateMachine;
use crate::dialect::{Backend, BoxFuture, Sql, Statement};
use crate::error::Error;
use crate::machine::key::{BatchKey, BindError};
use crate::outcome::{Committed, Won};
use crate::transition::Transition;
use crate::transition::bind::{self, Parts, Values};
use crate::transition::note::Note;

/// A backend that can claim rows and apply a transition to many keys
/// ([`Transition::claim`], [`Transition::apply_many`]). Claims: PostgreSQL in one statement
/// (`FOR UPDATE SKIP LOCKED`), MySQL 8 / MariaDB 10.6+ in a short
/// transaction that skips locked rows, SQLite in a short `BEGIN IMMEDIATE`
/// transaction (one writer at a time, so nothing to skip); on both, one
/// `UPDATE` moves every row the claim took. Implemented for every backend;
/// it cannot be implemented outside this crate.
pub trait Batched: Backend + sealed::Sealed {
    /// Runs the claim.
    #[doc(hidden)]
    fn claim_rows<'a, S, K>(
        pool: &'a sqlx::Pool<Self>,
        transition: Transition<S>,
        values: &'a (dyn Parts<Self> + Sync),
        claim: Claim,
        limit: u32,
        note: &'a Note,
    ) -> Claimed<'a, S, K>
    where
        S: StateMachine,
        K: BatchKey<Self, S::KeyShape> + 'a;

    /// Runs one chunk of `apply_many`.
    #[doc(hidden)]
    fn apply_rows<'a, S, K>(
        pool: &'a sqlx::Pool<Self>,
        transition: Transition<S>,
        keys: &'a [&'a K],
        values: &'a (dyn Parts<Self> + Sync),
        note: &'a Note,
    ) -> Applied<'a, S, K>
    where
        S: StateMachine,
        K: BatchKey<Self, S::KeyShape> + 'a;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A claim's future: committed wins, oldest first.
pub(crate) type Claimed<'a, S, K> = BoxFuture<'a, Result<Vec<Won<S, K, Committed>>, Error>>;

/// One `apply_many` chunk's future: what each key came to.
pub(crate) type Applied<'a, S, K> = BoxFuture<'a, Result<Vec<Found<S, K>>, Error>>;

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
pub enum Found<S, K> {
    /// Moved by the winning statement: the key as stored, the new
    /// occurrence and lease token.
    Moved { key: K, occurrence: i64, lease: i64 },
    /// Not moved; the row is in `current` at `version`, and meets the
    /// guard or not.
    Left { current: S, meets: bool },
    /// No such row.
    Missing,
}

/// The position of `key` among a chunk's keys, which are sorted and
/// distinct (keys match exactly, so a row's key reads back equal to the
/// key that found it).
pub(crate) fn position<K: Ord>(keys: &[&K], key: &K) -> Option<usize> {
    keys.binary_search_by(|k| (*k).cmp(key)).ok()
}
