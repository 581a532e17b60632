//! Database-guarded state transitions for [sqlx], derived from an annotated
//! enum.
//!
//! Every transition is one compare-and-set statement,
//! `UPDATE … SET status = 'to' WHERE key = $1 AND status IN ('from', …)`,
//! so of any number of concurrent or replayed attempts exactly one changes the
//! row. That attempt gets [`Outcome::Applied`] with a [`Won`] token and is the
//! only one that may run the side effect; the others get
//! [`Outcome::AlreadyInState`], [`Outcome::Conflict`] or
//! [`Outcome::NotFound`].
//!
//! ```
//! use stateguard::{Outcome, StateMachine};
//!
//! #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! #[state_machine(table = "payouts", column = "status", key = "id")]
//! pub enum PayoutStatus {
//!     #[state(initial)]
//!     #[transition(start -> Sending)]
//!     #[transition(cancel -> Cancelled)]
//!     Pending,
//!     #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
//!     #[transition(fail -> Failed)]
//!     #[transition(cancel -> Cancelled)]
//!     Sending,
//!     Sent,
//!     Failed,
//!     Cancelled,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL, sent_at TEXT)")
//!     .execute(&pool)
//!     .await?;
//! sqlx::query("INSERT INTO payouts (id, status) VALUES (7, 'pending')")
//!     .execute(&pool)
//!     .await?;
//!
//! let mut bank_calls = 0;
//! for _delivery in 0..3 {
//!     // The same job delivered three times: one attempt wins.
//!     match PayoutStatus::start().apply(&pool, 7_i64).await? {
//!         Outcome::Applied(won) => {
//!             assert_eq!(won.state(), PayoutStatus::Sending);
//!             bank_calls += 1;
//!         }
//!         Outcome::AlreadyInState(state) => assert_eq!(state, PayoutStatus::Sending),
//!         Outcome::Conflict { current } => panic!("moved on to {current}"),
//!         Outcome::NotFound => panic!("no payout 7"),
//!         // Only with `.expecting(occurrence)`: the row moved on since.
//!         Outcome::Stale { current, .. } => panic!("moved on to {current}"),
//!         // Only for a transition with a `guard`.
//!         Outcome::Refused { current } => panic!("refused in {current}"),
//!     }
//! }
//! assert_eq!(bank_calls, 1);
//!
//! assert!(PayoutStatus::confirm().apply(&pool, 7_i64).await?.is_applied());
//! // Too late to cancel: the row is somewhere `cancel` cannot start from.
//! assert_eq!(
//!     PayoutStatus::cancel().apply(&pool, 7_i64).await?,
//!     Outcome::Conflict { current: PayoutStatus::Sent },
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # Attributes
//!
//! - `#[state_machine(table = "…", column = "…", key = "…")]` on the enum: the
//!   table (`table` or `schema.table`), the status column and the key column
//!   (or up to four, `key = "tenant_id, id"`: `apply` then takes a tuple,
//!   `(tenant_id, id)`; see [`KeyOf`](bounds::KeyOf)).
//!   Optional: `version = "…"` (an integer column every transition
//!   increments, the occurrence in effect keys; required when the machine has
//!   a cycle), `history = "…"` (a table every move appends a row to, in
//!   the same atomic act: see the [history chapter](crate::guide::history)),
//!   `key_type = "i64"` (the Rust type of the key, `"(String, i64)"` for
//!   two columns: then `claim`, `claim_older_than`, `claim_timed_out`,
//!   `recover` and `claim_expired` infer the type of the keys they read
//!   back; without it, name it on the call or the variable),
//!   `rename_all = "…"` (serde's rule names; default `snake_case`),
//!   `crate = "…"` for a renamed dependency, and `conversions = false` for
//!   an enum that has its own `Display`, `FromStr` or sqlx impls: the
//!   derive then writes none of the `Display`, `FromStr`, sqlx
//!   `Type`/`Encode`/`Decode` (and, with the `serde` feature,
//!   `Serialize`/`Deserialize`) impls it writes over the database strings
//!   otherwise.
//! - `#[state(initial)]` on exactly one variant; `#[state(rename = "…")]` to
//!   choose a state's database string.
//! - `#[transition(name -> Target)]` on each source variant, optionally with
//!   `set(column = "SQL expression", …)`: other columns the same `UPDATE`
//!   writes. One name on several variants is one transition with several
//!   sources; it must name the same target and the same `set` list everywhere.
//!   The expression is one SQL expression of the row, from an allow-list:
//!   bare names (`attempts`, `payouts.attempts`), numbers, text in single
//!   quotes (no backslash, no `$`), `+ - * / % = <> != < > <= >= ||`,
//!   parentheses, commas and function calls. Quoted names, placeholders,
//!   comments, `;`, `::` casts and subqueries are compile errors. It may read
//!   its own column and any column the transition does not write, and reads
//!   the row as it was on every backend.
//!
//! - `set(column = bind(Type))`: a value the constructor takes per call,
//!   bound into the same statement; `guard = "SQL condition"`: a condition
//!   the row must meet, in the same `WHERE`;
//!   `#[state(in_flight(lease = "…", since = "…", done = …, failed = …))]`:
//!   a state whose effect must survive a crash (see *Per-call values* and
//!   *Side effects*), with `retry(max = 8, backoff = "2s..1h", attempts =
//!   "…", next_attempt = "…")` inside `in_flight(…)` for an effect that
//!   may be tried again: its attempts are counted in `attempts`, the next
//!   is due at `next_attempt` after a backoff that doubles from the first
//!   wait to the longest (`ms`, `s`, `m`, `h`), and the attempt past `max`
//!   ends the row in its `failed` follow-up; an optional `last_error =
//!   "…"` names a text column that keeps the reason the last retry gave
//!   (see the [effects chapter](crate::guide::effects));
//!   `supersedes_effect` on a transition out of an in-flight state other
//!   than its `done` and `failed`: such a move may happen while the effect
//!   runs (a payout `cancelled` during its bank call, whose verdict then
//!   finds it `Superseded`), and without the word it is a compile error;
//!   `#[state(since = "…", timeout = "…")]`: a state that
//!   records when a row entered it, for [`Transition::claim_older_than`]
//!   and [`Transition::claim_timed_out`]; `order = "…"` on the enum: the
//!   columns [`Transition::claim`] takes rows in.
//! - `emit("topic", payload(column, …))` on a transition: each winning move
//!   writes a message to the outbox in the same atomic act, on every path
//!   (needs `version = "…"`); `outbox = "…"` on the enum names its table,
//!   `stateguard_outbox` by default. See the
//!   [outbox chapter](crate::guide::outbox).
//!
//! Mistakes are compile errors pointing at the offending token, all reported
//! at once.
//!
//! # Per-call values
//!
//! Values bound per call, a guard, an expected occurrence, and the bank's
//! reference stored by the statement that ends the in-flight state:
//!
//! ```
//! use stateguard::{Finished, Outcome, StateMachine, Verdict};
//!
//! #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! #[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
//! pub enum PayoutStatus {
//!     #[state(initial)]
//!     #[transition(start -> Sending, guard = "amount_cents <= 100000")]
//!     #[transition(cancel -> Cancelled, set(reason = bind(String)))]
//!     Pending,
//!     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = decline))]
//!     #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
//!     #[transition(decline -> Failed, set(reason = bind(String)))]
//!     Sending,
//!     Sent,
//!     Failed,
//!     Cancelled,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! # sqlx::query(
//! #     "CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL,
//! #      version INTEGER NOT NULL DEFAULT 0, amount_cents INTEGER NOT NULL,
//! #      sending_since TEXT, bank_ref TEXT, reason TEXT)",
//! # )
//! # .execute(&pool).await?;
//! # sqlx::query("INSERT INTO payouts (id, status, amount_cents) VALUES
//! #     (1, 'pending', 5000), (2, 'pending', 250000), (3, 'pending', 700)")
//! #     .execute(&pool).await?;
//! // The guard is part of the compare-and-set: payout 2 is over the limit.
//! assert_eq!(
//!     PayoutStatus::start().apply(&pool, 2_i64).await?,
//!     Outcome::Refused { current: PayoutStatus::Pending },
//! );
//!
//! // The bank's reference is written by the statement that ends `sending`.
//! let won = PayoutStatus::start().apply(&pool, 1_i64).await?.won().expect("pending");
//! let finished = won
//!     .finish(&pool, |effect| async move {
//!         let bank_ref = format!("tr_{}", effect.key()); // the bank's answer
//!         PayoutStatus::confirm(bank_ref).into()
//!     })
//!     .await?;
//! // The follow-up moved the row on from the win's occurrence, 1.
//! assert_eq!(finished, Finished::Done { state: PayoutStatus::Sent, occurrence: 2 });
//! let (bank_ref,): (String,) = sqlx::query_as("SELECT bank_ref FROM payouts WHERE id = 1")
//!     .fetch_one(&pool)
//!     .await?;
//! assert_eq!(bank_ref, "tr_1");
//!
//! // An operator's page carries the occurrence it showed; a click on a page
//! // that is out of date is stale, and writes nothing.
//! let seen = PayoutStatus::MACHINE.load(&pool, 3_i64).await?.expect("exists");
//! let cancel = PayoutStatus::cancel("customer asked".to_owned());
//! assert!(cancel.clone().expecting(seen.occurrence()).apply(&pool, 3_i64).await?.is_applied());
//! assert_eq!(
//!     cancel.expecting(seen.occurrence()).apply(&pool, 3_i64).await?,
//!     Outcome::Stale { current: PayoutStatus::Cancelled, occurrence: seen.occurrence() + 1 },
//! );
//! # let _: Verdict<PayoutStatus> = Verdict::RetryLater;
//! # Ok(())
//! # }
//! ```
//!
//! # Keys of several columns
//!
//! With `key = "tenant_id, id"`, a key is a tuple with one value per
//! column, and each column is matched exactly: another tenant's row with
//! the same id is never touched.
//!
//! ```
//! use stateguard::{Outcome, StateMachine};
//!
//! #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! #[state_machine(table = "transfers", column = "status", key = "tenant_id, id", version = "version")]
//! pub enum TransferStatus {
//!     #[state(initial)]
//!     #[transition(start -> Sending)]
//!     Pending,
//!     Sending,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! # sqlx::query(
//! #     "CREATE TABLE transfers (tenant_id TEXT NOT NULL, id INTEGER NOT NULL,
//! #      status TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tenant_id, id))",
//! # )
//! # .execute(&pool).await?;
//! # sqlx::query("INSERT INTO transfers (tenant_id, id, status) VALUES
//! #     ('acme', 1, 'pending'), ('globex', 1, 'pending'), ('globex', 2, 'pending')")
//! #     .execute(&pool).await?;
//! let won = TransferStatus::start()
//!     .apply(&pool, ("acme", 1_i64))
//!     .await?
//!     .won()
//!     .expect("acme's transfer 1 is pending");
//! // Every key part is in the effect key.
//! assert_eq!(won.effect_key(), "transfers.status:acme/1:sending:1");
//! // acme has no transfer 2, whoever else does.
//! assert_eq!(
//!     TransferStatus::start().apply(&pool, ("acme", 2_i64)).await?,
//!     Outcome::NotFound,
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # Side effects
//!
//! Only a [`Won`] can run an effect ([`Won::run`]), and only a committed
//! one: a win inside a [`Tx`] is `Won<S, K, Uncommitted>` until
//! [`Tx::commit`] commits that very transaction and hands it back
//! committed. A win from a rolled-back transaction or savepoint, or from
//! another transaction, never becomes committed.
//! [`Won::effect_key`] is the idempotency key to send to the far side. For
//! effects that must survive a crash, run them from an in-flight state
//! (`#[state(in_flight(lease = "30s", since = "…", done = …, failed = …))]`)
//! with [`Won::finish`], and re-drive rows stuck past their lease with
//! [`recover`].
//!
//! # Transactions
//!
//! Inside a transaction a win waits for the commit. Begin a [`Tx`], apply
//! on `&mut tx`, and let [`Tx::commit`] hand out the committed wins; a win
//! from a rolled-back transaction or savepoint, or one offered to another
//! transaction, never becomes committed.
//!
//! The transaction's own calls keep a deadline, [`DEFAULT_DEADLINE`] unless
//! `Tx::begin(&pool).within(d)` (which covers the wait for a connection)
//! or [`Tx::within`] says otherwise, and end in [`Error::Timeout`]; only a
//! `COMMIT` cut off in flight leaves the outcome open.
//!
//! ```
//! # use stateguard::{Outcome, StateMachine, Tx};
//! # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! # #[state_machine(table = "payouts", column = "status", key = "id")]
//! # pub enum PayoutStatus {
//! #     #[state(initial)]
//! #     #[transition(start -> Sending)]
//! #     Pending,
//! #     Sending,
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
//! #     .execute(&pool).await?;
//! # sqlx::query("INSERT INTO payouts VALUES (1, 'pending')").execute(&pool).await?;
//! let mut tx = Tx::begin_with(&pool, "BEGIN IMMEDIATE").await?;
//! let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await?;
//! // … more work in the same transaction, through `&mut *tx` …
//! let won = tx.commit(outcome.won()).await?.expect("row 1 was pending");
//! let key = won.run(|effect| async move { effect.effect_key().to_owned() }).await;
//! assert_eq!(key, "payouts.status:1:sending:0");
//! # Ok(())
//! # }
//! ```
//!
//! # Backends
//!
//! Enable `postgres`, `sqlite` or `mysql` (MySQL 8 and MariaDB), or
//! several; `metrics` counts outcomes through the `metrics` facade, and
//! `serde` makes every machine's enum `Serialize` and `Deserialize` as its
//! database strings. [`Transition::apply`] takes a
//! `&Pool`, a `&mut` connection or a `&mut` [`Tx`] / [`Savepoint`] of that backend; see
//! it for the retry rules inside and outside a transaction.
//!
//! # Failover
//!
//! A primary with a standby (PostgreSQL with streaming replication and a
//! failover manager such as pg_auto_failover or Patroni; MariaDB or MySQL
//! with a replica) keeps every promise above, given four things:
//!
//! - **One address that follows the primary.** sqlx connects to one host:
//!   put a virtual IP, a DNS name the failover manager moves, or a proxy
//!   (HAProxy, PgBouncer pointed by the manager) in front, so that a
//!   connection opened after a failover reaches the new primary. A
//!   pooler in transaction mode can run one client's prepared statement
//!   for another: see [`pooler`] for the setups that are safe, and run
//!   [`pooler::check`] at start-up.
//! - **Stale connections are dropped.** Pooled connections opened before a
//!   switchover may still reach the demoted node, which answers writes
//!   with PostgreSQL's 25006 or MySQL/MariaDB's 1290 or 1792. Nothing was
//!   written, so the outcome is known: the library closes such a
//!   connection instead of returning it to the pool, and a call on a pool
//!   tries again on a fresh connection within its deadline; a call on your
//!   own connection or in your transaction ends in [`Error::ReadOnly`]
//!   (transient: roll back and call again). Set the pool's `max_lifetime`
//!   too, so that connections the library never uses are renewed.
//! - **Two nodes: no synchronous standby while one is down.** After a
//!   failover with two nodes the new primary runs alone until the old one
//!   rejoins as its standby: commits in that window live on one node. With
//!   `synchronous_commit` waiting for a standby, a `COMMIT` cut off while
//!   it waited is committed locally already (PostgreSQL 57014): the library
//!   counts that outcome as unknown ([`Error::is_outcome_unknown`]).
//! - **The far side dedups by effect key.** A follow-up lost to a failover
//!   (its connection broke, or its commit was not replicated before the
//!   promotion) leaves the row in flight, and recovery runs the effect
//!   again with the same [`Won::effect_key`]: the provider must treat a
//!   repeated key as the same request, as payment and payout APIs do with
//!   an `Idempotency-Key`.
//!
//! [sqlx]: https://docs.rs/sqlx

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Derives [`StateMachine`](trait@StateMachine): see the [crate
/// documentation](crate) for the attributes.
pub use stateguard_macros::StateMachine;
// Transitions and what they return.
pub use stateguard_runtime::{
    Available, Bound, Call, Choice, Committed, Current, DEFAULT_DEADLINE, Error, ErrorKind,
    GuardNow, HasHistory, HasVersion, HistoryRow, Misuse, Note, Noted, Outcome, SchemaProblem,
    SchemaProblemKind, StateMachine, Transition, Uncommitted, UnknownState, Won,
};
// What an operator sees: how many rows are in each state, and which.
pub use stateguard_runtime::{COUNT_CAP, InState, PAGE_ROWS, RowsPage, StateCount};
// Transactions whose wins wait for the commit.
pub use stateguard_runtime::{Begin, Savepoint, Tx};
// Effects, in-flight states and their recovery.
pub use stateguard_runtime::{
    Effect, FLUSH_AFTER, FinishError, Finished, FinishedRow, FollowUp, Recover, Recovered, Retry,
    SupersededRow, Verdict, claim_expired, finish_many, recover, recover_many,
};
// What `apply` runs on.
pub use stateguard_runtime::{APPLY_MANY_CHUNK, Backend, Runner, key};

/// The traits that say what a key, a value or a database can do: the
/// bounds of the library's signatures, which code generic over the
/// database names in its own `where` clauses (`i64: bounds::Key<DB>`), and
/// nothing else needs to import.
///
/// Each entry point spells at most two: where it runs, and what it runs.
/// Code of one's own that wraps one needs no more:
///
/// ```
/// use stateguard::bounds::{Claimable, FinishFn};
/// use stateguard::{Backend, Error, Recovered, Transition, Won};
///
/// // A sweep of any machine's in-flight state, on any database: the one
/// // bound on the effect says it fits the machine, its key and `DB`.
/// async fn sweep<S, K, DB, F>(pool: &sqlx::Pool<DB>, state: S, effect: F) -> Result<Recovered, Error>
/// where
///     DB: Backend,
///     F: FinishFn<S, K, DB>,
/// {
///     stateguard::recover_many(pool, state, 100, 8, effect).await
/// }
///
/// // A claim of any machine, on any database that can run one.
/// async fn take<S, K, DB>(pool: &sqlx::Pool<DB>, claim: Transition<S>) -> Result<Vec<Won<S, K>>, Error>
/// where
///     DB: stateguard::bounds::Batched,
///     S: Claimable<K, DB>,
/// {
///     claim.claim(pool, 50).await
/// }
/// ```
pub mod bounds {
    pub use stateguard_runtime::{
        BatchKey, BatchRunner, Batchable, Batched, Binds, Claimable, ColumnTypes, DecodeKey,
        EffectFn, EffectFnOnce, FinishFn, FinishFnOnce, FollowUpValues, Key, KeyOf, KeyShape,
        KeyText, KeyType, ManyKeys, MayRun, NoteSlot, ParseKey, PlainDone, PlainFailed, RowKey,
        Staged,
    };
}
// Metadata, and what is generated from it.
pub use stateguard_runtime::{ddl, docs, meta, telemetry};
// Exactly once at the front doors: idempotency keys and a consumer's inbox.
pub use stateguard_runtime::pooler;
pub use stateguard_runtime::{Stores, idempotency, inbox, stores};
// And at the way out: messages, and the publishers that hand them to a
// broker.
pub use stateguard_runtime::outbox;
// The loops that run it all: claims, effects, recovery.
pub use stateguard_runtime::worker;
// The caller's side of an idempotent HTTP call, as an effect (feature
// `reqwest`).
pub use stateguard_runtime::http;
// The operators' console: an axum router to mount (feature `console`).
pub use stateguard_runtime::console;

pub mod guide;

// Every Rust block of the README compiles as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[doc(hidden)]
pub mod __private {
    pub use stateguard_runtime::__private::*;
}
