//! Work queues: `transition.claim(pool, n)` moves up to `n` rows from the
//! transition's sources to its target and hands out one committed win per
//! row, in the machine's `order`. Concurrent claimers never get the same
//! row and do not wait for rows another claimer holds.

// Each backend uses some of the helpers below; a build with fewer backends
// leaves some imports unused.
#![cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused_imports)
)]

use core::time::Duration;

use tracing::Instrument;

use crate::StateMachine;
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
use crate::machine::key::KeyType;
use crate::machine::key::{BatchKey, DecodeKey, KeyShape, RowKey};
use crate::outcome::{LeasedAt, Won};
use crate::telemetry;
#[allow(unused_imports)] // in the docs
use crate::transition::Bound;
use crate::transition::bind::{self, Parts};
use crate::transition::note::{Note, NoteSlot};
use crate::transition::row::Read;
use crate::transition::{Params, Transition};

/// The `Batched` impl of one backend: the function that moves a chunk of
/// keys, and the one that claims rows (with the `BEGIN` of its
/// transaction, where it runs one).
macro_rules! batched {
    ($feature:literal, $db:ty, apply: $apply:path, claim: $claim:path $(, begin: $begin:literal)?) => {
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
                K: BatchKey<Self, Sh> + 'a,
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
                K: BatchKey<Self, Sh> + 'a,
            {
                Box::pin($claim(executor, $($begin,)? transition, params, claim, limit, note))
            }
        }
    };
}

batched!("postgres", sqlx::Postgres, apply: run::returning, claim: postgres);
// SQLite takes the write lock first: the candidates read are then the
// rows the transaction moves.
batched!(
    "sqlite", sqlx::Sqlite,
    apply: run::returning, claim: in_transaction, begin: "BEGIN IMMEDIATE"
);
batched!(
    "mysql", sqlx::MySql,
    apply: run::in_transaction, claim: in_transaction, begin: "BEGIN"
);

impl<S: StateMachine, P, N: NoteSlot> Transition<S, P, N> {
    /// Moves up to `limit` rows from this transition's source states to its
    /// target, oldest first in the machine's `order` (`#[state_machine(…,
    /// order = "created_at")]`, by default the key), and returns one
    /// committed [`Won`] per row moved.
    ///
    /// Concurrent claimers never get the same row, and a claimer does not
    /// wait for rows that another claimer holds: PostgreSQL moves them in
    /// one statement (`WITH c AS MATERIALIZED (SELECT key … ORDER BY …
    /// LIMIT $n FOR UPDATE SKIP LOCKED) UPDATE … WHERE key IN (SELECT key
    /// FROM c) RETURNING …`, whose candidates are chosen once whatever the
    /// plan, so that no claim moves more than `limit` rows); MySQL 8 and MariaDB
    /// 10.6+ lock the candidates with `SKIP LOCKED` in a short transaction
    /// and move them all with one `UPDATE`, the statements of
    /// [`apply_many`](Transition::apply_many) (an older server refuses
    /// `SKIP LOCKED` with a syntax error, [`Error::Database`]); SQLite, whose
    /// one writer makes skipping needless, reads the candidates in order
    /// and moves them with one `UPDATE … RETURNING` in a `BEGIN IMMEDIATE`
    /// transaction. A transition that emits a message (`emit(…)`) claims
    /// on PostgreSQL as on MySQL, in a short transaction that locks the
    /// candidates with `SKIP LOCKED` and moves them with `apply_many`'s
    /// statement: each message's id is its row's
    /// [`effect_key`](Won::effect_key), computed from the row's key and
    /// bound beside it, so the keys are read first. A claim into an
    /// in-flight state stamps each row's lease, so a claimer that dies is
    /// recovered as after [`apply`](Transition::apply).
    ///
    /// A guard holds for every row claimed; rows that fail it stay. Index
    /// the status column together with the order columns, or each claim
    /// scans the table. An empty result means no row was free to claim.
    /// [`expecting`](Transition::expecting) names one row's occurrence and
    /// has no meaning here: it is [`Error::ExpectingMany`].
    ///
    /// Every row claimed gets the same values (a [`Bound`]); noted
    /// ([`Transition::noted`]), every row's history row records the note.
    ///
    /// On a pool (`&pool`) the claim commits on its own and its wins are
    /// committed; inside the caller's transaction (`&mut tx`, see
    /// [`BatchRunner`]) its statements run there, its wins are
    /// [`Uncommitted`](crate::Uncommitted) until
    /// [`Tx::commit`](crate::Tx::commit), and a deadlock or busy database
    /// is [`Error::RetryTransaction`], for the caller to run the whole
    /// transaction again.
    ///
    /// Deadline: the transition's ([`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE),
    /// or [`Transition::within`]) for the whole claim, and each `Won` keeps
    /// it for [`Won::finish`]; cut off, [`Error::Timeout`] (and the caller's
    /// transaction can no longer commit).
    ///
    /// A later statement that fails hides nothing: on a pool the claim's
    /// statements on SQLite and MySQL (and on PostgreSQL, for a transition
    /// that emits) run in one transaction of their own, so a failure
    /// before its `COMMIT` leaves every row where it was, and a `COMMIT`
    /// whose answer is lost is outcome-unknown; inside the caller's
    /// transaction a failure after the move leaves it unable to commit.
    /// PostgreSQL's claim of a transition that emits nothing is one
    /// statement.
    ///
    /// ```
    /// # use stateguard::{Outcome, StateMachine, Won};
    /// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// # #[state_machine(table = "payouts", column = "status", key = "id")]
    /// # enum PayoutStatus {
    /// #     #[state(initial)]
    /// #     #[transition(start -> Sending)]
    /// #     Pending,
    /// #     Sending,
    /// # }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
    /// #     .execute(&pool).await?;
    /// # sqlx::query("INSERT INTO payouts VALUES (1, 'pending'), (2, 'pending'), (3, 'pending')")
    /// #     .execute(&pool).await?;
    /// // A worker takes up to two pending payouts; the next worker gets the rest.
    /// let taken: Vec<Won<PayoutStatus, i64>> = PayoutStatus::start().claim(&pool, 2).await?;
    /// let keys: Vec<i64> = taken.iter().map(|won| *won.key()).collect();
    /// assert_eq!(keys, [1, 2]);
    /// let rest: Vec<Won<PayoutStatus, i64>> = PayoutStatus::start().claim(&pool, 2).await?;
    /// assert_eq!(rest.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn claim<E, K>(
        self,
        executor: E,
        limit: u32,
    ) -> Result<Vec<Won<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        E::Database: Batched,
        K: BatchKey<E::Database, S::KeyShape>,
        S: KeyType<K>,
        P: Params<E::Database>,
    {
        self.claim_aged(executor, None, limit).await
    }

    /// [`claim`](Transition::claim) for rows that have sat in a source
    /// state for longer than `age`, by the database's clock: the state
    /// timeout. Every source state must stamp the same `since` column
    /// (`#[state(since = "…")]`, or an in-flight state's), or it is
    /// [`Error::NoSinceColumn`]. A NULL stamp is never old: give the column
    /// a default, so that inserted rows carry one.
    ///
    /// ```text
    /// // Payouts left in `pending` for a day expire.
    /// PayoutStatus::expire().claim_older_than(&pool, Duration::from_secs(86_400), 100).await?
    /// ```
    ///
    /// Noted, every row's history row records the note: a sweep can say
    /// why it moved the rows.
    ///
    /// ```text
    /// PayoutStatus::expire()
    ///     .noted(Note::by("sweeper").because("pending for a day"))
    ///     .claim_older_than(&pool, Duration::from_secs(86_400), 100)
    ///     .await?
    /// ```
    ///
    /// Deadline, and what a statement that fails after the move tells
    /// the caller: as for [`claim`](Transition::claim).
    pub async fn claim_older_than<E, K>(
        self,
        executor: E,
        age: Duration,
        limit: u32,
    ) -> Result<Vec<Won<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        E::Database: Batched,
        K: BatchKey<E::Database, S::KeyShape>,
        S: KeyType<K>,
        P: Params<E::Database>,
    {
        self.claim_aged(executor, Some(age), limit).await
    }

    /// [`claim_older_than`](Transition::claim_older_than) with the
    /// `#[state(timeout = "…")]` its source states declare (the shortest,
    /// if they differ); [`Error::NoTimeout`] when none declares one.
    /// Deadline, and what a statement that fails after the move tells
    /// the caller: as for [`claim`](Transition::claim).
    pub async fn claim_timed_out<E, K>(
        self,
        executor: E,
        limit: u32,
    ) -> Result<Vec<Won<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        E::Database: Batched,
        K: BatchKey<E::Database, S::KeyShape>,
        S: KeyType<K>,
        P: Params<E::Database>,
    {
        // A noted call on a machine without history is refused first.
        self.recorded()?;
        let age = self.transition().timeout()?;
        self.claim_aged(executor, Some(age), limit).await
    }

    /// The one body of the three claims: rows older than `age` when given.
    async fn claim_aged<E, K>(
        self,
        executor: E,
        age: Option<Duration>,
        limit: u32,
    ) -> Result<Vec<Won<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        E::Database: Batched,
        K: BatchKey<E::Database, S::KeyShape>,
        P: Params<E::Database>,
    {
        self.recorded()?;
        self.transition()
            .claim_with(
                executor,
                &bind::values(&self.params),
                age,
                limit,
                self.note_or_none(),
            )
            .await
    }
}

impl<S: StateMachine> Transition<S> {
    /// The shortest `timeout` among the source states.
    pub(crate) fn timeout(self) -> Result<Duration, Error> {
        let timeout = self
            .sources()
            .iter()
            .filter_map(|&s| S::MACHINE.state(s)?.timeout())
            .min();
        timeout.ok_or(Error::NoTimeout {
            machine: S::MACHINE.name(),
            transition: self.name(),
        })
    }

    pub(crate) async fn claim_with<E, K>(
        self,
        mut executor: E,
        params: &(dyn Parts<E::Database> + Sync),
        older_than: Option<Duration>,
        limit: u32,
        note: &Note,
    ) -> Result<Vec<Won<S, K, E::Commit>>, Error>
    where
        E: BatchRunner,
        E::Database: Batched,
        K: BatchKey<E::Database, S::KeyShape>,
    {
        if self.expected().is_some() {
            return Err(Error::ExpectingMany {
                table: S::MACHINE.table(),
                transition: self.name(),
                call: "claim",
            });
        }
        let claim = match older_than {
            None => Claim {
                sql: self.def().claim_sql(),
                older_than: None,
            },
            Some(age) => match self.def().claim_older_sql() {
                Some(sql) => Claim {
                    sql,
                    older_than: Some(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)),
                },
                None => {
                    return Err(Error::NoSinceColumn {
                        machine: S::MACHINE.name(),
                        transition: self.name(),
                    });
                }
            },
        };
        // Before any statement that stamps a lease: each win's lease is
        // known to be at most this old.
        let sent = LeasedAt(Some(std::time::Instant::now()));
        let span = telemetry::span!("stateguard.claim", S, E::Database, "UPDATE", self.name());
        let (classify, effect) = (self.classifier(), self.effect_prefix());
        let claim = <E::Database as Batched>::claim_rows::<E, S::KeyShape, K>(
            &mut executor,
            self.batch(&classify, &effect),
            params,
            claim,
            limit,
            note,
        );
        let claimed = tokio::time::timeout(self.deadline(), claim)
            .instrument(span.clone())
            .await;
        let scope = executor.scope();
        match &claimed {
            Ok(Ok(wins)) => {
                span.record("stateguard.outcome", "claimed");
                span.record("stateguard.rows", wins.len());
                telemetry::outcomes(S::MACHINE.name(), self.name(), "claimed", wins.len() as u64);
            }
            Ok(Err(_)) => {
                span.record("stateguard.outcome", "error");
            }
            Err(_) => {
                span.record("stateguard.outcome", "timeout");
            }
        }
        match claimed {
            Ok(claimed) => Ok(claimed?
                .into_iter()
                .map(|took| {
                    let won = Won::new(self.target(), took.key, took.occurrence, took.lease, scope);
                    won.within(self.deadline()).leased_since(sent)
                })
                .collect()),
            // Cut off mid-statement: rows may have moved. Rows moved into
            // an in-flight state are recovered once their lease runs out;
            // inside the caller's transaction, it can no longer commit.
            Err(_) => Err({
                executor.abandoned();
                Error::Timeout {
                    table: S::MACHINE.table(),
                    transition: self.name(),
                    deadline: self.deadline(),
                    outcome_known: false,
                }
            }),
        }
    }
}

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
    K: BatchKey<sqlx::Postgres, Sh>,
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
    DB: MoveHeld,
    E: BatchRunner<Database = DB>,
    Sh: KeyShape,
    K: BatchKey<DB, Sh>,
{
    let Some(pool) = executor.pool().cloned() else {
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

/// How a claim moves the candidates it holds, inside its transaction: the
/// winning statements of `apply_many`, once for all of them.
trait MoveHeld: Backend {
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
        K: BatchKey<Self, Sh> + 'a;
}

/// PostgreSQL: one `UPDATE … RETURNING` (with its history rows and
/// messages), of the rows the claim locked (`FOR UPDATE SKIP LOCKED`).
#[cfg(feature = "postgres")]
impl MoveHeld for sqlx::Postgres {
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
        K: BatchKey<Self, Sh> + 'a,
    {
        Box::pin(run::update_returning(
            executor, transition, keys, params, note,
        ))
    }
}

/// SQLite: one `UPDATE … RETURNING` (after the history rows, where there
/// are any), behind the write lock the claim took first.
#[cfg(feature = "sqlite")]
impl MoveHeld for sqlx::Sqlite {
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
        K: BatchKey<Self, Sh> + 'a,
    {
        Box::pin(run::update_returning(
            executor, transition, keys, params, note,
        ))
    }
}

/// MySQL: the locked rows' read, the history rows, one `UPDATE` and the
/// leases' read, for the rows `SKIP LOCKED` handed to this claim.
#[cfg(feature = "mysql")]
impl MoveHeld for sqlx::MySql {
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
        K: BatchKey<Self, Sh> + 'a,
    {
        Box::pin(run::lock_and_update(
            executor, transition, keys, params, note,
        ))
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
    DB: MoveHeld,
    Sh: KeyShape,
    K: BatchKey<DB, Sh>,
{
    let mut tx = Tx::begin_with(pool, begin)
        .within(transition.deadline())
        .await
        .map_err(|e| transition.begin_error(e))?;
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
    DB: MoveHeld,
    E: Runner<Database = DB>,
    Sh: KeyShape,
    K: BatchKey<DB, Sh>,
{
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
