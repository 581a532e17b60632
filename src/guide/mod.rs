//! The guide: one chapter per capability, each with examples that run
//! (on in-memory SQLite, as `cargo test --doc` runs them).
//!
//! - [Transitions and outcomes](transitions): what `apply` does, its
//!   retries, deadlines and errors, and what each backend needs.
//! - [Values, guards and occurrences](values): `bind(Type)`, `guard`,
//!   `expecting`.
//! - [Keys of several columns](keys).
//! - [Effects, in-flight states and recovery](effects): `Won`, effect
//!   keys, occurrences, leases, verdicts, `finish` and `recover`.
//! - [Transactions](transactions): `Tx`, savepoints, and wins that wait
//!   for the commit.
//! - [Claims, sweeps and batches](batches): `claim`, `claim_older_than`,
//!   `claim_timed_out` and `apply_many`.
//! - [Running workers](workers): the `Worker` that claims, runs effects
//!   and recovers on its own, and its shutdown.
//! - [History and notes](history): the history table, `history`, and
//!   notes on every way of moving a row.
//! - [Idempotency keys and the inbox](front_doors): `begin_tx`,
//!   `complete`, `receive`, their tables, and the example service.
//! - [Idempotent routes](idempotent_routes): the axum layer that makes a
//!   route idempotent in one line, what it answers, and its OpenAPI shape.
//! - [The outbox](outbox): messages written with the move, `enqueue`,
//!   the relay, and what each guarantee holds.
//! - [DDL and diagrams](ddl): the machine's tables, the migration that
//!   makes the database refuse illegal transitions, and the drawings of
//!   the machine.
//! - [Tracing and metrics](tracing): the spans and their fields, and the
//!   `metrics` feature.
//! - [Seeing the machines](seeing): the state diagram in each machine's
//!   rustdoc, the count of rows in each state, and the same drawing at
//!   run time.
//! - [Beyond one server](beyond): replicas and failover, poolers, a
//!   multi-primary Galera cluster, and the distributed engines.
//!
//! The crate documentation has the attributes and the backends; the pooler guide is [`pooler`](crate::pooler).

#[doc = include_str!("transitions.md")]
pub mod transitions {}

#[doc = include_str!("values.md")]
pub mod values {}

#[doc = include_str!("keys.md")]
pub mod keys {}

#[doc = include_str!("effects.md")]
pub mod effects {}

#[doc = include_str!("transactions.md")]
pub mod transactions {}

#[doc = include_str!("batches.md")]
pub mod batches {}

#[doc = include_str!("workers.md")]
pub mod workers {}

#[doc = include_str!("history.md")]
pub mod history {}

#[doc = include_str!("front_doors.md")]
pub mod front_doors {}

#[doc = include_str!("idempotent_routes.md")]
pub mod idempotent_routes {}

#[doc = include_str!("outbox.md")]
pub mod outbox {}

#[doc = include_str!("ddl.md")]
pub mod ddl {}

#[doc = include_str!("tracing.md")]
pub mod tracing {}

#[doc = include_str!("seeing.md")]
pub mod seeing {}

#[doc = include_str!("beyond.md")]
pub mod beyond {}
