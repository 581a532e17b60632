//! The effect calls as their callers see them: [`Won::finish`],
//! [`finish_many`], [`recover`] and [`recover_many`], each naming its
//! effect with one bound, [`FinishFnOnce`] or [`FinishFn`], that ties the
//! effect to the machine, its key and the database. Their bodies are in
//! `effect.rs`, `finish_many/` and `recovery/`; this file sits above them,
//! so that the traits' blanket impls can call into each.

use core::future::{Future, IntoFuture};
use core::pin::Pin;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::effects::effect_fn::{EffectFn, EffectFnOnce, Visit};
use crate::effects::finish_many::{FinishedRow, finish_many_until};
use crate::effects::finished::{FinishError, Finished};
use crate::effects::recovery::{Recover, Recovered, recover_many_until};
use crate::effects::verdict::FollowUpValues;
use crate::error::Error;
use crate::executor::Runner;
use crate::machine::key::{BatchKey, KeyType, RowKey};
use crate::outcome::{Committed, Won};

/// The effect of the rows of machine `S`, keyed by `K`, for the calls that
/// run it on `DB` ([`finish_many`](crate::finish_many),
/// [`recover`](crate::recover), [`recover_many`](crate::recover_many),
/// a worker's `effects` loop): an [`EffectFn`]
/// whose machine's follow-up values bind on `DB` ([`FollowUpValues`]) and
/// whose key is the machine's key type, bound, read back and ordered in a
/// batch ([`BatchKey`]).
///
/// A blanket impl covers every such closure; nothing else implements it.
/// It is the one bound that ties the effect, the machine, its key and the
/// database together, as axum's `Handler` ties a handler to its
/// extractors, so each of those calls spells two: where it runs, and what
/// it runs. Where the machine declares `key_type`, it also tells the call
/// the key's type, so `|effect| async move { … }` needs no annotation.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect of `{S}`'s rows keyed by `{K}` on `{DB}`",
    label = "an effect takes an `Effect<{S}, {K}>` and returns a future of a `Verdict<{S}>`",
    note = "write it as `|effect| async move {{ …; Verdict::done() }}`; the key must be the \
            machine's key type, owned, and `DecodeKey + ManyKeys + Ord` (`i64`, `String`, a \
            tuple of them), and every follow-up `bind(Type)` must encode on the database"
)]
pub trait FinishFn<S, K, DB: Backend>: EffectFn<S, K, Future: Send> + Send + Sync {
    /// [`finish_many`](crate::finish_many)'s body.
    #[doc(hidden)]
    fn finish_many(
        self,
        pool: &sqlx::Pool<DB>,
        wins: Vec<Won<S, K, Committed>>,
        concurrency: usize,
    ) -> impl Future<Output = Result<Vec<FinishedRow<S, K>>, Error>> + Send;

    /// [`recover_many`](crate::recover_many)'s body.
    #[doc(hidden)]
    fn recover_many(
        self,
        pool: &sqlx::Pool<DB>,
        state: S,
        limit: u32,
        concurrency: usize,
    ) -> impl Future<Output = Result<Recovered, Error>> + Send;

    /// Hands `visit` the bounds this trait stands for, for a body whose
    /// result has a name (a boxed future, a worker's loop).
    #[doc(hidden)]
    fn visit<V: Visit<S, K, DB>>(visit: V) -> V::Output;
}

impl<S, K, DB, F> FinishFn<S, K, DB> for F
where
    S: FollowUpValues<DB> + KeyType<K>,
    K: BatchKey<S, DB>,
    DB: Backend,
    F: EffectFn<S, K, Future: Send> + Send + Sync,
{
    async fn finish_many(
        self,
        pool: &sqlx::Pool<DB>,
        wins: Vec<Won<S, K, Committed>>,
        concurrency: usize,
    ) -> Result<Vec<FinishedRow<S, K>>, Error> {
        let (rows, _) = finish_many_until(pool, wins, concurrency, self, None).await?;
        Ok(rows)
    }

    async fn recover_many(
        self,
        pool: &sqlx::Pool<DB>,
        state: S,
        limit: u32,
        concurrency: usize,
    ) -> Result<Recovered, Error> {
        let (report, _) = recover_many_until(pool, state, limit, concurrency, self, None).await?;
        Ok(report)
    }

    fn visit<V: Visit<S, K, DB>>(visit: V) -> V::Output {
        visit.visit()
    }
}

/// The effect of one win of machine `S`, keyed by `K`, for
/// [`Won::finish`](crate::Won::finish) on `DB`: an [`EffectFnOnce`] whose
/// machine's follow-up values bind on `DB` and whose key binds there. See
/// [`FinishFn`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect of a win of `{S}` keyed by `{K}` on `{DB}`",
    label = "an effect takes an `Effect<{S}, {K}>` and returns a future of a `Verdict<{S}>`",
    note = "write it as `|effect| async move {{ …; Verdict::done() }}`; every follow-up \
            `bind(Type)` must encode on the database"
)]
pub trait FinishFnOnce<S, K, DB: Backend>: EffectFnOnce<S, K, Future: Send> + Send {
    /// [`Won::finish`](crate::Won::finish)'s body.
    #[doc(hidden)]
    fn finish<E>(
        self,
        won: Won<S, K, Committed>,
        executor: E,
    ) -> impl Future<Output = Result<Finished<S>, FinishError<S, K>>> + Send
    where
        E: Runner<Database = DB, Commit = Committed>;
}

impl<S, K, DB, F> FinishFnOnce<S, K, DB> for F
where
    S: FollowUpValues<DB>,
    K: RowKey<DB, S::KeyShape>,
    DB: Backend,
    F: EffectFnOnce<S, K, Future: Send> + Send,
{
    fn finish<E>(
        self,
        won: Won<S, K, Committed>,
        executor: E,
    ) -> impl Future<Output = Result<Finished<S>, FinishError<S, K>>> + Send
    where
        E: Runner<Database = DB, Commit = Committed>,
    {
        won.finish_on(executor, self)
    }
}

impl<S: StateMachine, K> Won<S, K, Committed> {
    /// For a win into an in-flight state: runs the effect, then the state's
    /// `done` transition, or its `failed` transition, as the effect's
    /// [`Verdict`](crate::Verdict) says.
    ///
    /// A crash anywhere in between leaves the row in flight; once its lease
    /// runs out, [`recover`](crate::recover) runs the effect again with the same effect key
    /// and finishes it. Before the effect the lease is renewed, unless the
    /// win stamped it less than a third of its length ago (then no one can
    /// have taken it over, and the effect starts at once); while the effect
    /// runs, the lease is renewed every third of its length, so an effect
    /// may outlast it as long as this worker lives. A worker whose lease was taken over all the same (it
    /// stalled past its lease) gets [`Finished::Skipped`] if that happened
    /// before its effect (which then does not run), or
    /// [`Finished::LeaseLost`] if it happened during it; either way its
    /// verdict does not move the row.
    ///
    /// A call that cannot finish (the state is not in flight, or `executor`
    /// is a connection inside a transaction) is refused before the effect
    /// runs, and [`FinishError::Refused`] hands the win back: its effect can
    /// still run.
    ///
    /// The call keeps the win's deadline ([`Won::within`]; by default the
    /// deadline of the transition that won, [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE)),
    /// the effect included. Cut off before the effect, it is refused with
    /// [`Error::Timeout`]: named `renew` and with its outcome unknown when
    /// the lease's renewal was in flight (it may still commit, and the win
    /// handed back then holds a lease the row no longer has: finishing it
    /// again ends in [`Finished::Skipped`], and recovery takes the row over
    /// once the new lease runs out). Cut off in the effect or the
    /// follow-up, it ends in [`FinishError::Unfinished`] with an
    /// [`Error::Timeout`] whose outcome is unknown, naming the follow-up
    /// under way (`done` while the effect runs), and the row stays in
    /// flight for recovery.
    ///
    /// Whatever statement fails (the renewal, the follow-up, its history
    /// or outbox rows, the read that tells why a follow-up moved nothing),
    /// the row is either finished, with [`Finished`] saying how, or left in
    /// flight, and recovery runs the effect again under the same effect
    /// key and finishes it: an error after the effect ran is
    /// [`FinishError::Unfinished`], never a finish the caller is not told
    /// of.
    ///
    /// ```
    /// use stateguard::{Finished, StateMachine, Verdict};
    ///
    /// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// #[state_machine(table = "transfers", column = "status", key = "id")]
    /// enum TransferStatus {
    ///     #[state(initial)]
    ///     #[transition(start -> Sending)]
    ///     Pending,
    ///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    ///     #[transition(confirm -> Sent)]
    ///     #[transition(fail -> Failed)]
    ///     Sending,
    ///     Sent,
    ///     Failed,
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE transfers (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sending_since TEXT)")
    /// #     .execute(&pool).await?;
    /// # sqlx::query("INSERT INTO transfers (id, status) VALUES (1, 'pending')")
    /// #     .execute(&pool).await?;
    /// let outcome = TransferStatus::start().apply(&pool, 1_i64).await?;
    /// if let Some(won) = outcome.won() {
    ///     // The effect runs once, under the row's lease; its verdict moves the row.
    ///     let finished = won
    ///         .finish(&pool, |effect| async move {
    ///             let _key = effect.effect_key(); // the bank's idempotency key
    ///             Verdict::done()
    ///         })
    ///         .await?;
    ///     assert!(matches!(finished, Finished::Done { state: TransferStatus::Sent, .. }));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn finish<E, F>(
        self,
        executor: E,
        effect: F,
    ) -> impl Future<Output = Result<Finished<S>, FinishError<S, K>>> + Send
    where
        E: Runner<Commit = Committed>,
        F: FinishFnOnce<S, K, E::Database>,
    {
        effect.finish(self, executor)
    }
}

/// Runs the effects of many committed wins of one in-flight state, at
/// most `concurrency` at once, and finishes each row as its [`Verdict`](crate::Verdict)
/// says, as [`Won::finish`] does one: one row per win, in the wins'
/// order.
///
/// What it sends:
/// - **One heartbeat per batch.** Wins whose lease was stamped a third of
///   its length ago or more are renewed before their effects, in one
///   statement (a row another worker took over meanwhile is
///   [`Finished::Skipped`], and its effect does not run); while effects
///   run, every lease still in hand is renewed every third of the lease,
///   in one statement.
/// - **Batched follow-ups.** Verdicts are collected, and each follow-up
///   (`done`, `failed`, and with `retry(…)` the postponement) is written
///   for all of them in one statement, each row fenced by its own
///   occurrence and lease token: a row another worker took over is
///   [`Finished::LeaseLost`], one that moved on otherwise
///   [`Finished::Superseded`]. The buffer is written when no effect is
///   left to run, or when its oldest verdict has waited [`FLUSH_AFTER`](crate::FLUSH_AFTER):
///   quick effects share one statement per follow-up for the whole batch,
///   slow ones one per [`FLUSH_AFTER`](crate::FLUSH_AFTER).
/// - **Per-row values.** A follow-up that binds values per row
///   (`PayoutStatus::confirm(bank_ref)`) takes each row's values in the
///   same statement, bound as [`Won::finish`] binds them, so any type the
///   transition declares travels unchanged: such a statement takes 64
///   rows, and a larger buffer is written in runs of 64 that commit
///   together.
/// - Rows whose verdict carries a note, or whose attempts ran out, are
///   finished one statement each, as [`Won::finish`] finishes them.
///
/// The guarantee is [`Won::finish`]'s: an effect runs again only when its
/// row's follow-up did not commit, and always with the same effect key.
/// A crash re-runs at most the effects whose verdicts were not yet
/// written: those running (at most `concurrency`), those that ended in
/// the last [`FLUSH_AFTER`](crate::FLUSH_AFTER), and those of a flush under way; never more
/// than the batch.
///
/// Effects run in this task, interleaved, not spawned: an effect that
/// blocks the thread holds up the others and the heartbeat.
///
/// Refused before any effect runs: wins of a state that is not in flight
/// ([`Misuse::NotInFlight`](crate::Misuse::NotInFlight)); of more than one state, the same row twice,
/// or a `concurrency` of 0 ([`Misuse::BatchOfWins`](crate::Misuse::BatchOfWins)); a first heartbeat
/// that failed (its rows stay in flight, for recovery once their leases
/// run out). Deadlines: each effect keeps its win's deadline
/// ([`Won::within`]), and each statement the shortest of them; a row
/// whose effect or follow-up was cut off is an [`Error::Timeout`] in its
/// [`FinishedRow`], and stays in flight.
///
/// ```
/// use stateguard::{Finished, StateMachine, Verdict, Won};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent)]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sending_since TEXT)")
/// #     .execute(&pool).await?;
/// # sqlx::query("INSERT INTO payouts (id, status) VALUES (1, 'pending'), (2, 'pending'), (3, 'pending')")
/// #     .execute(&pool).await?;
/// // Claim a batch, then send every payout of it, 32 at a time.
/// let wins: Vec<Won<PayoutStatus, i64>> = PayoutStatus::start().claim(&pool, 50).await?;
/// let rows = stateguard::finish_many(&pool, wins, 32, |effect| async move {
///     let _key = effect.effect_key(); // the bank's idempotency key
///     Verdict::done()
/// })
/// .await?;
/// assert_eq!(rows.len(), 3);
/// assert!(rows.iter().all(|row| matches!(row.finished, Ok(Finished::Done { .. }))));
/// # Ok(()) }
/// ```
pub fn finish_many<S, K, DB, F>(
    pool: &sqlx::Pool<DB>,
    wins: Vec<Won<S, K, Committed>>,
    concurrency: usize,
    effect: F,
) -> impl Future<Output = Result<Vec<FinishedRow<S, K>>, Error>> + Send
where
    DB: Backend,
    F: FinishFn<S, K, DB>,
{
    effect.finish_many(pool, wins, concurrency)
}

/// [`recover`](crate::recover) at a concurrency the caller sets: takes over at most
/// `limit` rows whose lease ran out (or whose next attempt is due), then
/// runs their effects, at most `concurrency` at once, under one heartbeat
/// per batch and with their follow-ups written a batch at a time
/// ([`finish_many`](crate::finish_many)), each row fenced by its own lease.
///
/// The rows waiting for their turn keep their leases (the batch's
/// heartbeat renews every row still in hand), so no other pass takes one
/// over, and no attempt is counted twice. PostgreSQL and SQLite take the
/// rows over in one statement; MySQL lists them, then takes each over.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for the
/// takeover, and for each row's effect and for each statement of the
/// batch. Rows whose effect or follow-up failed or was cut off are in
/// [`Recovered::errors`] and stay in flight for a later pass. Refused as
/// [`finish_many`](crate::finish_many) refuses (a `concurrency` of 0 is
/// [`Misuse::BatchOfWins`](crate::Misuse::BatchOfWins)).
///
/// ```
/// use stateguard::{Effect, StateMachine, Verdict};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "transfers", column = "status", key = "id")]
/// enum TransferStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent)]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// # sqlx::query("CREATE TABLE transfers (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sending_since TEXT)")
/// #     .execute(&pool).await?;
/// # sqlx::query("INSERT INTO transfers (id, status, sending_since) VALUES \
/// #     (1, 'sending', '2000-01-01 00:00:00.000'), (2, 'sending', '2000-01-01 00:00:00.000')")
/// #     .execute(&pool).await?;
/// // Rows whose workers died: each effect runs again with its effect key,
/// // 16 at a time, and their follow-ups go to the database in batches.
/// let pass = stateguard::recover_many(&pool, TransferStatus::Sending, 500, 16, |effect: Effect<_, i64>| async move {
///     let _key = effect.effect_key();
///     Verdict::done()
/// })
/// .await?;
/// assert_eq!((pass.claimed, pass.done), (2, 2));
/// # Ok(()) }
/// ```
pub fn recover_many<S, K, DB, F>(
    pool: &sqlx::Pool<DB>,
    state: S,
    limit: u32,
    concurrency: usize,
    effect: F,
) -> impl Future<Output = Result<Recovered, Error>> + Send
where
    DB: Backend,
    F: FinishFn<S, K, DB>,
{
    effect.recover_many(pool, state, limit, concurrency)
}

/// Re-drives rows stuck in the in-flight `state`: takes over at most
/// `limit` rows whose lease ran out, and for each in turn runs `effect` with
/// the original effect key and finishes it as the [`Verdict`](crate::Verdict) says
/// ([`Won::finish`]).
///
/// On PostgreSQL one statement lists and takes over the whole pass's rows
/// (`FOR UPDATE SKIP LOCKED`, so concurrent passes take different rows),
/// and on SQLite too (its one writer leaves nothing to skip); a row that
/// has waited a third of its lease for the effects before it renews its
/// lease before its own effect, and one whose lease another recovery took
/// meanwhile is counted in [`Recovered::lost`]. On MySQL the pass lists
/// the rows, then takes each over just before its effect. Each row's lease is renewed while its effect runs.
///
/// The effects run one after another; on a pool, [`recover_many`] runs
/// them at a concurrency the caller sets, under one heartbeat per batch,
/// and writes their follow-ups a batch at a time.
///
/// Listing the rows failing ends the pass with an error (on PostgreSQL
/// and SQLite, rows the listing took over but could not read back end it
/// with [`Error::Unreported`], and wait for a later pass); a failure on
/// one row is recorded in [`Recovered::errors`] and the pass goes on. A row
/// whose takeover, effect or follow-up failed stays in flight, and the
/// next pass runs its effect again under the same effect key: no row is
/// finished without its verdict, and none is left for good. Rows
/// whose `since` column is NULL (inserted straight into the state, or
/// there before the column was) count as expired.
///
/// Listing, and each row (takeover, effect and follow-up), keep
/// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE); `.within(d)` on the
/// [`Recover`] it returns sets another. A row cut off by it is an [`Error::Timeout`] in
/// [`Recovered::errors`] and stays in flight for a later pass. Every such
/// timeout names the statement it cut off (`take_over`, `renew`, or the
/// row's follow-up: `done` while the effect runs); the listing's, named
/// `recover`, changed nothing, and all the others may still commit
/// ([`Error::is_outcome_unknown`]), PostgreSQL's `take_over` of the
/// whole pass included, which ends the pass.
///
/// ```
/// use stateguard::{Effect, StateMachine, Verdict};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "transfers", column = "status", key = "id")]
/// enum TransferStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent)]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// # sqlx::query("CREATE TABLE transfers (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sending_since TEXT)")
/// #     .execute(&pool).await?;
/// # sqlx::query("INSERT INTO transfers (id, status) VALUES (1, 'pending')")
/// #     .execute(&pool).await?;
/// // A worker won the row, then died before its effect: the row is in flight.
/// let _lost = TransferStatus::start().apply(&pool, 1_i64).await?;
/// # sqlx::query("UPDATE transfers SET sending_since = '2000-01-01 00:00:00.000'").execute(&pool).await?;
/// // Once its lease has run out, a recovery pass runs the effect again, with
/// // the same effect key, and finishes the row.
/// let pass = stateguard::recover(&pool, TransferStatus::Sending, 10, |effect: Effect<_, i64>| async move {
///     let _key = effect.effect_key();
///     Verdict::done()
/// })
/// .await?;
/// assert_eq!((pass.claimed, pass.done), (1, 1));
/// # Ok(()) }
/// ```
pub fn recover<'a, S, K, E, F>(
    executor: E,
    state: S,
    limit: u32,
    effect: F,
) -> Recover<'a, S, K, E, F>
where
    E: Runner<Commit = Committed> + 'a,
    F: FinishFn<S, K, E::Database>,
{
    Recover::new(executor, state, limit, effect)
}

impl<'a, S, K, E, F> IntoFuture for Recover<'a, S, K, E, F>
where
    K: 'a,
    E: Runner<Commit = Committed> + 'a,
    F: FinishFn<S, K, E::Database> + 'a,
{
    type Output = Result<Recovered, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Recovered, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        F::visit(self)
    }
}
