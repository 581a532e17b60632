//! Work queues: `transition.claim(pool, n)` moves up to `n` rows from the
//! transition's sources to its target and hands out one committed win per
//! row, in the machine's `order`. Concurrent claimers never get the same
//! row and do not wait for rows another claimer holds.
//!
//! The calls are here; `backends.rs` holds how each backend runs a claim
//! (one statement on PostgreSQL, a transaction of its own on SQLite and
//! MySQL) and the `Batched` impls that name them.

// Each backend uses some of the helpers below; a build with fewer backends
// leaves some imports unused.
#![cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused_imports)
)]

mod backends;

use core::marker::PhantomData;
use core::time::Duration;

use tracing::Instrument;

use crate::StateMachine;
use crate::batch::batched::{BatchRunner, Batched, Claim};
use crate::deadline::call::Call;
use crate::deadline::call::Sent;
use crate::error::{Error, Misuse};
use crate::machine::key::{BatchKey, ClaimVisit, Claimable, KeyFor};
use crate::outcome::{LeasedAt, Won};
use crate::telemetry;
#[allow(unused_imports)] // in the docs
use crate::transition::Bound;
use crate::transition::bind::{self, Parts};
use crate::transition::note::{Note, NoteSlot};
use crate::transition::{Binds, Transition};

impl<S: StateMachine, P: Send + Sync + 'static, N: NoteSlot> Transition<S, P, N> {
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
    /// has no meaning here: it is [`Misuse::ExpectingMany`](crate::Misuse::ExpectingMany).
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
    /// [`Transition::within`], or `.within(d)` on the [`Call`] it returns)
    /// for the whole claim, and each `Won` keeps
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
    pub fn claim<'a, E, K>(self, executor: E, limit: u32) -> Call<'a, Vec<Won<S, K, E::Commit>>>
    where
        E: BatchRunner<Database: Binds<P>> + 'a,
        S: Claimable<K, E::Database>,
    {
        S::visit(ClaimAged::new(self, executor, Age::Any, limit))
    }

    /// [`claim`](Transition::claim) for rows that have sat in a source
    /// state for longer than `age`, by the database's clock: the state
    /// timeout. Every source state must stamp the same `since` column
    /// (`#[state(since = "…")]`, or an in-flight state's), or it is
    /// [`Misuse::NoSinceColumn`](crate::Misuse::NoSinceColumn). A NULL stamp is never old: give the column
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
    pub fn claim_older_than<'a, E, K>(
        self,
        executor: E,
        age: Duration,
        limit: u32,
    ) -> Call<'a, Vec<Won<S, K, E::Commit>>>
    where
        E: BatchRunner<Database: Binds<P>> + 'a,
        S: Claimable<K, E::Database>,
    {
        S::visit(ClaimAged::new(self, executor, Age::Older(age), limit))
    }

    /// [`claim_older_than`](Transition::claim_older_than) with the
    /// `#[state(timeout = "…")]` its source states declare (the shortest,
    /// if they differ); [`Misuse::NoTimeout`](crate::Misuse::NoTimeout) when none declares one.
    /// Deadline, and what a statement that fails after the move tells
    /// the caller: as for [`claim`](Transition::claim).
    pub fn claim_timed_out<'a, E, K>(
        self,
        executor: E,
        limit: u32,
    ) -> Call<'a, Vec<Won<S, K, E::Commit>>>
    where
        E: BatchRunner<Database: Binds<P>> + 'a,
        S: Claimable<K, E::Database>,
    {
        S::visit(ClaimAged::new(self, executor, Age::TimedOut, limit))
    }

    /// The one body of the three claims: rows older than `age` when given.
    fn claim_aged<'a, E, K>(
        self,
        executor: E,
        age: Age,
        limit: u32,
    ) -> Call<'a, Vec<Won<S, K, E::Commit>>>
    where
        E: BatchRunner<Database: Binds<P>> + 'a,
        K: BatchKey<S, E::Database>,
    {
        self.call(move |this| async move {
            // A noted call on a machine without history is refused first.
            this.recorded()?;
            let age = match age {
                Age::Any => None,
                Age::Older(age) => Some(age),
                Age::TimedOut => Some(this.transition().timeout()?),
            };
            this.transition()
                .claim_with(
                    executor,
                    &bind::values(&this.params),
                    age,
                    limit,
                    this.note_or_none(),
                )
                .await
        })
    }
}

/// Which rows of the source states a claim takes.
#[derive(Debug, Clone, Copy)]
enum Age {
    /// Any.
    Any,
    /// Those that have sat there for longer than this.
    Older(Duration),
    /// Those past their state's timeout.
    TimedOut,
}

/// A claim, waiting for [`Claimable`] to vouch for its key.
struct ClaimAged<'a, S: 'static, P, N, E, K> {
    transition: Transition<S, P, N>,
    executor: E,
    age: Age,
    limit: u32,
    call: PhantomData<KeyFor<'a, K>>,
}

impl<S: 'static, P, N, E, K> ClaimAged<'_, S, P, N, E, K> {
    fn new(transition: Transition<S, P, N>, executor: E, age: Age, limit: u32) -> Self {
        ClaimAged {
            transition,
            executor,
            age,
            limit,
            call: PhantomData,
        }
    }
}

impl<'a, S, P, N, E, K> ClaimVisit<S, K, E::Database> for ClaimAged<'a, S, P, N, E, K>
where
    S: StateMachine,
    P: Send + Sync + 'static,
    N: NoteSlot,
    E: BatchRunner<Database: Binds<P>> + 'a,
{
    type Output = Call<'a, Vec<Won<S, K, E::Commit>>>;

    fn visit(self) -> Self::Output
    where
        K: BatchKey<S, E::Database>,
    {
        let ClaimAged {
            transition,
            executor,
            age,
            limit,
            call: _,
        } = self;
        transition.claim_aged(executor, age, limit)
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
        timeout.ok_or(Error::Misuse(Misuse::NoTimeout {
            machine: S::MACHINE.name(),
            transition: self.name(),
        }))
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
        K: BatchKey<S, E::Database>,
    {
        if self.expected().is_some() {
            return Err(Error::Misuse(Misuse::ExpectingMany {
                table: S::MACHINE.table(),
                transition: self.name(),
                call: "claim",
            }));
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
                    return Err(Error::Misuse(Misuse::NoSinceColumn {
                        machine: S::MACHINE.name(),
                        transition: self.name(),
                    }));
                }
            },
        };
        // Before any statement that stamps a lease: each win's lease is
        // known to be at most this old.
        let sent = LeasedAt(Some(std::time::Instant::now()));
        let span = telemetry::span!("stateguard.claim", S, E::Database, "UPDATE", self.name());
        let (classify, effect) = (self.classifier(), self.effect_prefix());
        // Cut off before a statement that may write went out (waiting for
        // a connection or behind SQLite's `BEGIN IMMEDIATE`), the claim
        // changed nothing.
        let sending = Sent::default();
        let claim = <E::Database as Batched>::claim_rows::<E, S::KeyShape, K>(
            &mut executor,
            self.batch(&classify, &effect, &sending),
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
                    outcome_known: !sending.any(),
                }
            }),
        }
    }
}
