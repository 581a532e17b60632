//! A start-up check that a PostgreSQL pool is not multiplexed by a
//! connection pooler in transaction mode: [`check`].
//!
//! # Behind a connection pooler
//!
//! sqlx runs a statement as a *named* prepared statement: it prepares it in
//! one round trip and executes it in the next, whether its statement cache
//! is on or off. A pooler that hands the server session to another client
//! between those two trips, or that lets two clients' statement names
//! (`sqlx_s_1`, …) meet on one server session, makes PostgreSQL run
//! *another client's statement* with this call's values, and sqlx decodes
//! that statement's row with this statement's columns.
//!
//! **Every statement proves its rows.** Each PostgreSQL statement of a
//! machine and of the fixed-table stores returns, as the first column of
//! every row, a literal that names it and no other
//! ([`Statement::tag`](crate::meta::Statement::tag)), and a statement that
//! changes rows returns one such row per row changed: the library never
//! counts a command's `UPDATE 1`, which another statement could have
//! sent. A row without the statement's tag is not believed: the call
//! returns [`Error::StatementMixUp`](crate::Error::StatementMixUp) (outcome
//! unknown) instead of a win, a loss or a missing row. On a pool that
//! [`check`] found multiplexed, a server error of such a statement is one
//! too ([below](#what-a-multiplexed-pool-can-show)).
//!
//! **No statement of the library's writes with another call's values.**
//! Checking rows cannot undo a write, so each of those statements also
//! binds its own tag as its last value, and its tag column fails the
//! whole statement, undoing what it wrote, unless that value is its tag.
//! When the server runs one of the library's statements with another
//! call's values (another call's follow-up with a lease renewal's, which
//! would move a row on before its effect ran), the values end with the
//! other statement's tag: the statement fails with nothing written, and
//! the call gets [`Error::StatementMixUp`](crate::Error::StatementMixUp).
//!
//! So a race behind such a pooler gives no false `Applied` and no write
//! made with the wrong values; but most calls fail, and a statement of
//! *your own* code that such a pooler runs with the library's values (or
//! the other way round) is beyond its reach. The pool must not be set up
//! that way.
//!
//! | between the pool and PostgreSQL | safe |
//! | --- | --- |
//! | nothing: a direct connection | yes |
//! | PgBouncer (any version), `pool_mode = session` | yes |
//! | PgBouncer 1.21 or later, `pool_mode = transaction`, `max_prepared_statements` above 0 | yes: it tracks each client's prepared statements; acknowledge it (below) |
//! | PgBouncer before 1.21, `pool_mode = transaction` | **no** |
//! | PgBouncer 1.21 or later, `max_prepared_statements = 0`, `pool_mode = transaction` | **no** |
//! | PgBouncer, `pool_mode = statement` | **no**: no transactions at all |
//!
//! Other poolers that multiplex clients onto shared sessions are unsafe
//! in the same way unless they track prepared statements per client.
//! Nothing else in the library is tied to a session: it sets no session
//! variable, takes no advisory lock, uses no `LISTEN` or temporary table,
//! and its pre-commit check runs inside the transaction.
//!
//! **Check at start-up.** [`check`] finds out, before the first move,
//! whether the pool's connections are multiplexed, and refuses with
//! [`Error::Multiplexed`](crate::Error::Multiplexed) if they are:
//!
//! ```no_run
//! # async fn start(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
//! use std::time::Duration;
//! use stateguard::pooler;
//!
//! // Err(Error::Multiplexed { .. }) behind a transaction-mode pooler.
//! pooler::check(&pool).within(Duration::from_secs(5)).await?;
//! # Ok(()) }
//! ```
//!
//! Behind PgBouncer 1.21 or later with `max_prepared_statements` above 0,
//! say that it tracks prepared statements, and the check lets the pool
//! through and reports what it saw:
//!
//! ```no_run
//! # async fn start(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
//! use stateguard::pooler::{self, Acknowledgement, Pooling};
//!
//! let pooling = pooler::check(&pool)
//!     .acknowledge(Acknowledgement::PgBouncerTracksPreparedStatements)
//!     .await?;
//! if let Pooling::Multiplexed { seen, .. } = &pooling {
//!     tracing::info!("behind a transaction-mode pooler: {seen}");
//! }
//! # Ok(()) }
//! ```
//!
//! The acknowledgement is the caller's word: the check does not read the
//! pooler's version or settings (PgBouncer shows them only on its admin
//! console).
//!
//! **Start-up parameters.** sqlx sends `extra_float_digits` when it
//! connects, which PgBouncer refuses (`unsupported startup parameter`)
//! unless its configuration says
//! `ignore_startup_parameters = extra_float_digits`. Or leave it out on the
//! client side:
//! `PgConnectOptions::new().extra_float_digits(None)`. The same goes for
//! `options` (sqlx's [`PgConnectOptions::options`](sqlx::postgres::PgConnectOptions::options)):
//! PgBouncer 1.18 refuses it (`unsupported startup parameter: options`),
//! and one that ignores it does not pass it on, so a `search_path` given
//! that way never reaches the server.
//!
//! **Schema-qualify the tables.** Under transaction pooling a session
//! setting such as `SET search_path` sticks to whichever server session ran
//! it, not to the client, so the next transaction may run with another
//! search path. Give the tables with their schema:
//! both `table = …` and `history = …` accept a schema-qualified name, and
//! every statement then names the schema:
//!
//! ```
//! use stateguard::StateMachine;
//!
//! #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
//! #[state_machine(
//!     table = "payments.payouts",
//!     column = "status",
//!     key = "id",
//!     history = "payments.payout_transitions"
//! )]
//! pub enum PayoutStatus {
//!     #[state(initial)]
//!     #[transition(start -> Sending)]
//!     Pending,
//!     Sending,
//! }
//!
//! let machine = PayoutStatus::MACHINE;
//! assert_eq!(machine.table(), "payments.payouts");
//! assert_eq!(machine.history_table(), Some("payments.payout_transitions"));
//! assert!(machine.select_sql().postgres().contains(r#""payments"."payouts""#));
//! ```
//!
//! A `search_path` set per role or per database
//! (`ALTER ROLE … SET search_path`) holds on every server session and is
//! safe. The idempotency store and the inbox have fixed table names
//! (`stateguard_idempotency`, `stateguard_inbox`): their free functions
//! (`idempotency::begin`, `inbox::receive`, …) find them through the search
//! path, and [`stores!`](crate::stores!) puts them in a schema named at
//! compile time, whose every statement names it:
//!
//! ```
//! use stateguard::Stores;
//!
//! static PAYMENTS: Stores = stateguard::stores!(schema = "payments");
//!
//! // PAYMENTS.idempotency().begin(&pool, &request, lease),
//! // PAYMENTS.inbox().receive(&mut tx, consumer, message_id), …
//! let create = PAYMENTS.idempotency().ddl(stateguard::ddl::Dialect::Postgres);
//! assert!(create[0].starts_with(r#"CREATE TABLE "payments".stateguard_idempotency"#));
//! ```
//!
//! **Size the pooler's pool with the deadlines.** Every call keeps a
//! deadline ([`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) unless set), and the time it waits for a
//! server session counts against it. With PgBouncer's `default_pool_size`
//! below the number of client connections that run at once, a call queues
//! in PgBouncer, where sqlx's pool cannot see it, and can run out of its
//! deadline there ([`Error::Timeout`](crate::Error::Timeout), with `outcome_known` false once the
//! `UPDATE` was sent). Under session pooling each sqlx connection holds a
//! server session for its whole life: give `default_pool_size` at least the
//! sum of every process's `max_connections`, or a pool's connection waits
//! in PgBouncer until another client disconnects. Under transaction
//! pooling keep `default_pool_size` at least the number of moves you run
//! at once, and PgBouncer's `query_wait_timeout` above the longest
//! deadline, so that the deadline, not PgBouncer, decides.
//!
//! # What a multiplexed pool can show
//!
//! Once [`check`] has seen a pool multiplexed, whether the caller
//! acknowledged it or not, the library remembers that pool (and its
//! clones) for the life of the process. On it, and on a [`Tx`](crate::Tx)
//! begun on it, **any server error of one of the library's statements,
//! before a row of it showed which statement ran, is
//! [`Error::StatementMixUp`](crate::Error::StatementMixUp)** (outcome
//! unknown), with the server's error in
//! [`server_code`](StatementMixUp::server_code) and
//! [`server_message`](StatementMixUp::server_message). The error may
//! belong to another client's statement, run with this call's values, and
//! that statement may have written before it failed; it may name a table
//! the call never touches. Seen behind PgBouncer 1.18 in transaction mode:
//!
//! | code | what the server says | what happened |
//! | --- | --- | --- |
//! | 42P05 | `prepared statement "sqlx_s_1" already exists` | another client's statement holds the name on that session; nothing ran |
//! | 26000 | `prepared statement "sqlx_s_1" does not exist` | the session lacks the name; nothing ran |
//! | 08P01 | `bind message supplies 2 parameters, but prepared statement "sqlx_s_1" requires 3` | another statement holds the name; nothing ran |
//! | 22P03 | `incorrect binary data format in bind parameter 1` | this call's values did not fit another statement; nothing ran |
//! | 42P01 | `relation "…" does not exist` | another client's statement ran with this call's values |
//! | 22P02 | `invalid input syntax for type …` | another statement ran with this call's values, or one of the library's ran with another call's and wrote nothing |
//!
//! Which of them ran nothing only the server's words tell, and another
//! client's statement can raise any error at all; so none of them is
//! reported as a plain [`Error::Database`](crate::Error::Database) whose
//! outcome is known. Behind a pooler that really tracks prepared
//! statements none of this happens, and a server error there is the
//! statement's own: but with the pool marked, it is reported as a mix-up
//! too, whose outcome is unknown, so apply again to learn the row's
//! state. A pool the check never saw multiplexed reports the server's
//! errors as they are.
//!
//! The library knows a pool by the pool itself: a connection the caller
//! acquires (`&mut conn`), or a `sqlx::Transaction` wrapped with
//! [`Tx::new`](crate::Tx::new), is not tied to it, and its server errors
//! stay as they are. Run the calls on the pool or on a
//! [`Tx::begin`](crate::Tx::begin) of it. A pool whose connect options
//! are replaced (`Pool::set_connect_options`) needs the check again.
//!
//! # Untagged moves on a dedicated pool
//!
//! A tag costs a move that returns nothing else a returned row and one
//! value more: on a quiet server a few percent of a single-row `apply`
//! (BENCHMARKS.md, "The tag alone"). Where nothing can stand between the
//! pool and PostgreSQL (a direct connection to a server you run), that
//! buys nothing. [`Check::untagged_if_dedicated`] lets the caller say so:
//! when the check finds the pool dedicated, the moves on it that return
//! nothing but their tag (`apply` of a machine without a version column
//! or a history table, into a state that is not in flight, emitting no
//! message) run their `UPDATE` as a hand-written one would, and count the
//! command's rows. Every other statement keeps its tag: reads, claims,
//! moves that return a version or a lease or write other rows, follow-ups,
//! the stores.
//!
//! What it gives up is the mix-up guarantee of those moves, and only on
//! that pool: were a pooler multiplexing it after all, an untagged move
//! could count another client's command as its own win, or run with
//! another call's values. The check proves multiplexing when it sees it,
//! not its absence ([below](#the-probe)); so opt in only for a pool whose
//! URL names the server itself, and check again when that can change. A
//! later check that finds the pool multiplexed tags its moves again (for
//! good: a pool once found multiplexed stays tagged), and a pool whose
//! connect options are replaced (`Pool::set_connect_options`) is tagged
//! until checked anew. A transaction begun on the pool, and a
//! connection it had idle, run untagged with it; a connection the caller
//! acquires does not.
//!
//! ```no_run
//! # async fn start(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
//! use stateguard::pooler;
//!
//! // Refuses a multiplexed pool, and runs untagged moves on a dedicated one.
//! pooler::check(&pool).untagged_if_dedicated().await?;
//! # Ok(()) }
//! ```
//!
//! # The probe
//!
//! A direct connection, and a client connection under session pooling, is
//! one server session for its whole life, and two such connections open at
//! once are two sessions. The check watches `pg_backend_pid()` (with
//! `pg_postmaster_start_time()`, which tells two servers apart) on two
//! client connections that stay open throughout: one of the pool's, which
//! only ever runs autocommit statements, and a second one, taken idle from
//! the pool (and closed afterwards) or opened with the pool's options. In
//! each of [`ROUNDS`] rounds:
//!
//! 1. the pool's connection reads its session;
//! 2. the second connection reads its session;
//! 3. the second connection begins a transaction and reads its session in
//!    the same message, and the transaction holds that session;
//! 4. the pool's connection reads its session again, while the other holds
//!    one;
//! 5. the second connection rolls back.
//!
//! A connection whose session changed ([`Multiplexing::Moved`]), or two
//! connections on one session ([`Multiplexing::Shared`]), is multiplexed;
//! neither can happen without a pooler in between, so the check never
//! refuses a direct connection or session pooling. A pooler that reuses
//! the server session released last (PgBouncer's default,
//! `server_round_robin = 0`) gives step 2 the session step 1 just
//! released, and the first round sees it; one that hands sessions out
//! round robin moves a connection from one round's reads to the next, or
//! the pool's connection in step 4, when step 3 holds the session it had.
//! A pooler in statement mode refuses step 3's transaction
//! ([`Multiplexing::NoTransactions`]). All statements go through the
//! simple query protocol (`sqlx::raw_sql`), so the probe's own statements
//! cannot be mixed up with another client's, and none writes.
//!
//! The check proves multiplexing when it sees it; it cannot prove its
//! absence beyond what the rounds saw. A pooler with several idle server
//! sessions and other clients taking them in between could, in principle,
//! hand each connection back its own session every time.
//!
//! **Cost.** Once per pool, at start-up: at most [`ROUNDS`] × 5 round
//! trips (four reads, one of them with the `BEGIN`, and the `ROLLBACK`),
//! plus opening one connection when the pool has none idle, and nothing written. The
//! second connection is closed afterwards (a pool's idle one too: it was
//! inside the probe's transactions), so the pool opens another when it
//! needs one. Behind a transaction-mode pooler the first round usually
//! decides, and the check stops there. Under session pooling a second
//! connection the check opens needs a server session of its own: with
//! the pooler's pool full it waits for one, until the check's deadline.
//! Run the check before the pool is busy, or with an idle connection in
//! it.

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::{Check, check};
pub use crate::error::{Multiplexing, ServerSession, StatementMixUp};

/// How many rounds [`check`] probes before it says the pool is not
/// multiplexed. See [the probe](crate::pooler#the-probe).
pub const ROUNDS: u32 = 3;

/// What a caller vouches for when it lets a multiplexed pool through
/// ([`Check::acknowledge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Acknowledgement {
    /// The pooler is PgBouncer 1.21 or later with `max_prepared_statements`
    /// above 0, so that it tracks each client's prepared statements and
    /// prepares them anew on whichever server session runs them.
    PgBouncerTracksPreparedStatements,
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pooling {
    /// Each client connection kept its own server session through every
    /// round: a direct connection, or session pooling.
    Dedicated {
        /// The rounds probed ([`ROUNDS`]).
        rounds: u32,
    },
    /// The connections are multiplexed, and the caller acknowledged that
    /// the pooler is safe.
    Multiplexed {
        /// What the check saw.
        seen: Multiplexing,
        /// What the caller vouched for.
        acknowledged: Acknowledgement,
    },
}

/// What needs the PostgreSQL driver: the check and its probe.
#[cfg(feature = "postgres")]
mod postgres;
