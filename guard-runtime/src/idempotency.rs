//! Idempotency keys: a client's retry of a request that creates something
//! (`POST /payouts` with an `Idempotency-Key` header) gets the first
//! request's response instead of creating it twice.
//!
//! A request [`begin_tx`]s with its scope (whose keys these are: a tenant
//! and an operation, say `acme:POST /payouts`), the client's key, and a
//! fingerprint of its parameters that the caller computes (a hash of the
//! canonical body). The answer is one of four ([`Begun`]):
//!
//! - [`Begun::New`]: the key is this request's, with the transaction for
//!   its work. Do the work in it, store the response with
//!   [`Ticket::complete`] in it, commit, respond.
//! - [`Begun::Replay`]: a request with this key completed; answer with its
//!   stored status and body (HTTP: add `Idempotent-Replayed: true`).
//! - [`Begun::InProgress`]: a request with this key is running now; answer
//!   at once (HTTP 409), without waiting on its transaction.
//! - [`Begun::Mismatch`]: the key was used with other parameters (HTTP 422).
//!
//! ```no_run
//! # async fn handler(pool: sqlx::PgPool, body: Vec<u8>) -> Result<(), stateguard::Error> {
//! use stateguard::idempotency::{self, Begun, Request};
//!
//! let request = Request::new("acme:POST /payouts", "4f1c…", "sha256-of-the-body")?;
//! match idempotency::begin_tx(&pool, &request, idempotency::DEFAULT_LEASE).await? {
//!     Begun::New((ticket, mut tx)) => {
//!         // … INSERT the payout on &mut *tx …
//!         let response = br#"{"id":42}"#.to_vec();
//!         ticket.complete(&mut tx, 201, response).await?;
//!         tx.commit(()).await?;
//!         // respond 201
//!     }
//!     Begun::Replay(stored) => { /* respond stored.status(), stored.body() */ }
//!     Begun::InProgress => { /* respond 409 */ }
//!     Begun::Mismatch => { /* respond 422 */ }
//! }
//! # Ok(()) }
//! ```
//!
//! [`begin`] claims the key alone, for work in a transaction the caller
//! begins itself (or already has). `begin_tx` begins the transaction at
//! the same time as the claim, which runs on a second pooled connection
//! when one is idle, so that a new key adds one round trip to the
//! request's wait: on PostgreSQL and MySQL the claim of a new key is one
//! statement, and so is `complete`.
//!
//! # Guarantees
//!
//! - **One owner at a time.** The claim inserts the key's row in a
//!   statement of its own (committed at once) with a lease; of any number of
//!   concurrent requests with one key, one gets `New`, the others
//!   `InProgress` (or `Replay` once it completed).
//! - **The response commits with the work.** [`Ticket::complete`] writes
//!   the response in the caller's transaction, so the work's rows and the
//!   stored response commit together or not at all. A crash before that
//!   commit leaves neither, and once the lease has run out a retry gets
//!   `New` and does the work afresh: no permanent 409.
//! - **A lost lease cannot complete.** A request whose lease ran out and
//!   was taken over gets [`Error::IdempotencyLeaseLost`] from `complete`,
//!   and must roll back (drop its [`Tx`]): only the request holding the
//!   lease commits its work.
//! - **Keys are exact and scoped.** The scope and the key compare byte for
//!   byte (a binary collation), so `abc` and `ABC ` are two keys, and two
//!   scopes never share one. Each is 1 to 255 characters
//!   ([`Error::BadKey`], HTTP 400, otherwise).
//! - **Every call keeps a deadline**,
//!   [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) unless `.within(d)` on
//!   the [`Call`] it returns says otherwise: cut off, it is
//!   [`Error::Timeout`], whose outcome is unknown once a write was sent.
//!
//! Limits: the deduplication lasts as long as the key's row, that is until
//! [`prune`] removes it ([`DEFAULT_WINDOW`], 24 hours, by default). A
//! response is replayed as stored: status and body only, no headers.
//!
//! # The table
//!
//! One table, `stateguard_idempotency`, whose name is fixed so that every
//! statement is fixed at compile time. [`ddl`] gives its `CREATE TABLE` per
//! dialect.

use std::pin::pin;
use std::time::Duration;

use crate::ddl::Dialect as DdlDialect;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::{Backend, Sql, Statement};
use crate::error::Error;
use crate::executor::Executor;
use crate::executor::sealed::Run;
use crate::executor::tx::Tx;
use crate::outcome::{Committed, Uncommitted};
use crate::transition::bind::{Field, Fields, store_arguments};

/// The store's table, which [`Error::Store`] and [`Error::Timeout`] name.
pub(crate) const TABLE: &str = crate::error::store::IDEMPOTENCY;

/// How long a request owns its key before another request may take it
/// over: 60 seconds. Give a longer lease to requests that run longer.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// How long a key is kept before [`prune`] may remove it: 24 hours, as
/// Stripe keeps them.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest scope, key or fingerprint, in characters.
pub const MAX_LEN: usize = 255;

/// The statements of the store, in [`ddl`]'s order.
const DDL_POSTGRES: &[&str] = &[
    "CREATE TABLE stateguard_idempotency (
    scope TEXT COLLATE \"C\" NOT NULL,
    idem_key TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT COLLATE \"C\" NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease BIGINT NOT NULL,
    locked_until TIMESTAMPTZ,
    response_status INTEGER,
    response_body BYTEA,
    created_at TIMESTAMPTZ NOT NULL,
    completed_at TIMESTAMPTZ,
    PRIMARY KEY (scope, idem_key)
)",
    "CREATE INDEX stateguard_idempotency_created_at ON stateguard_idempotency (created_at)",
];

const DDL_SQLITE: &[&str] = &[
    "CREATE TABLE stateguard_idempotency (
    scope TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease INTEGER NOT NULL,
    locked_until TEXT,
    response_status INTEGER,
    response_body BLOB,
    created_at TEXT NOT NULL,
    completed_at TEXT,
    PRIMARY KEY (scope, idem_key)
)",
    "CREATE INDEX stateguard_idempotency_created_at ON stateguard_idempotency (created_at)",
];

// Scope and key are bytes (VARBINARY), compared exactly: MySQL's string
// collations, `_bin` ones included, ignore trailing spaces.
const DDL_MYSQL: &[&str] = &["CREATE TABLE stateguard_idempotency (
    scope VARBINARY(1020) NOT NULL,
    idem_key VARBINARY(1020) NOT NULL,
    fingerprint VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state VARCHAR(16) NOT NULL,
    lease BIGINT NOT NULL,
    locked_until DATETIME(3) NULL,
    response_status INT NULL,
    response_body LONGBLOB NULL,
    created_at DATETIME(3) NOT NULL,
    completed_at DATETIME(3) NULL,
    PRIMARY KEY (scope, idem_key),
    KEY stateguard_idempotency_created_at (created_at)
)"];

/// The statements that create the store's table and its index in
/// `dialect`, without trailing `;`. Run them once, in a migration.
pub fn ddl(dialect: DdlDialect) -> &'static [&'static str] {
    match dialect {
        DdlDialect::Postgres => DDL_POSTGRES,
        DdlDialect::Sqlite => DDL_SQLITE,
        DdlDialect::MySql => DDL_MYSQL,
    }
}

/// The key's row: fingerprint, state, lease, response status and body,
/// and whether the lease has run out.
const READ: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "SELECT fingerprint, state, lease, CAST(response_status AS BIGINT), response_body, \
               CAST(CASE WHEN locked_until < statement_timestamp() THEN 1 ELSE 0 END AS BIGINT) \
               FROM stateguard_idempotency WHERE scope = $1 AND idem_key = $2",
        &[Field::Scope, Field::Key],
    ),
    sqlite: Statement::new(
        "SELECT fingerprint, state, lease, response_status, response_body, \
             CASE WHEN locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END \
             FROM stateguard_idempotency WHERE scope = ?1 AND idem_key = ?2",
        &[Field::Scope, Field::Key],
    ),
    mysql: Statement::new(
        "SELECT fingerprint, state, lease, CAST(response_status AS SIGNED), response_body, \
            CAST(CASE WHEN locked_until < UTC_TIMESTAMP(3) THEN 1 ELSE 0 END AS SIGNED) \
            FROM stateguard_idempotency WHERE scope = ? AND idem_key = ?",
        &[Field::Scope, Field::Key],
    ),
};

/// A new key's row, running under lease 1 for `$4` milliseconds, or the
/// existing row, with the columns of [`READ`] after a first column that
/// says which (1 for a new row). PostgreSQL answers both in this one
/// statement; SQLite returns a row only for a new key, and MySQL only says
/// how many rows it inserted (its `INSERT IGNORE` is safe here: every value
/// was checked to fit), so that [`READ`] follows for an existing key.
///
/// PostgreSQL commits a new key's row without waiting for its WAL flush
/// (`set_config('synchronous_commit', 'off', true)`, for this statement's
/// own transaction, in the last column): others see the row at once all
/// the same, and it only matters once the work commits, whose synchronous
/// commit flushes the WAL up to it, the claim included. A crash before
/// that may lose the claim, and then there is no work to lose either: a
/// retry starts afresh. One flush per request instead of two.
const CLAIM: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "WITH __sg_new AS (INSERT INTO stateguard_idempotency (scope, idem_key, \
               fingerprint, state, lease, locked_until, created_at) VALUES ($1, $2, $3, \
               'running', 1, statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 \
               millisecond', statement_timestamp()) ON CONFLICT (scope, idem_key) DO NOTHING \
               RETURNING lease) SELECT CAST(1 AS BIGINT), CAST(NULL AS TEXT), CAST(NULL AS \
               TEXT), lease, CAST(NULL AS BIGINT), CAST(NULL AS BYTEA), CAST(0 AS BIGINT), \
               set_config('synchronous_commit', 'off', true) FROM __sg_new UNION ALL SELECT \
               CAST(0 AS BIGINT), fingerprint, state, lease, CAST(response_status AS BIGINT), \
               response_body, CAST(CASE WHEN locked_until < statement_timestamp() THEN 1 ELSE 0 \
               END AS BIGINT), CAST(NULL AS TEXT) FROM stateguard_idempotency WHERE scope = $1 \
               AND idem_key = $2 AND NOT EXISTS (SELECT 1 FROM __sg_new)",
        &[Field::Scope, Field::Key, Field::Fingerprint, Field::Millis],
    ),
    sqlite: Statement::new(
        "INSERT INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
             locked_until, created_at) VALUES (?1, ?2, ?3, 'running', 1, strftime('%Y-%m-%d \
             %H:%M:%f', 'now', printf('+%.3f seconds', CAST(?4 AS INTEGER) / 1000.0)), \
             strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (scope, idem_key) DO NOTHING \
             RETURNING 1",
        &[Field::Scope, Field::Key, Field::Fingerprint, Field::Millis],
    ),
    mysql: Statement::new(
        "INSERT IGNORE INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
            locked_until, created_at) VALUES (?, ?, ?, 'running', 1, UTC_TIMESTAMP(3) + INTERVAL \
            (? * 1000) MICROSECOND, UTC_TIMESTAMP(3))",
        &[Field::Scope, Field::Key, Field::Fingerprint, Field::Millis],
    ),
};

/// A running key whose lease `$3` ran out, taken over under the next lease
/// for `$4` milliseconds; returns the new lease (MySQL: through
/// `LAST_INSERT_ID`, its placeholders in the order milliseconds, scope,
/// key, lease).
const TAKE_OVER: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "UPDATE stateguard_idempotency SET lease = lease + 1, locked_until = \
               statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 millisecond' WHERE \
               scope = $1 AND idem_key = $2 AND state = 'running' AND lease = $3 AND \
               locked_until < statement_timestamp() RETURNING lease",
        &[Field::Scope, Field::Key, Field::Lease, Field::Millis],
    ),
    sqlite: Statement::new(
        "UPDATE stateguard_idempotency SET lease = lease + 1, locked_until = \
             strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', CAST(?4 AS INTEGER) / \
             1000.0)) WHERE scope = ?1 AND idem_key = ?2 AND state = 'running' AND lease = ?3 \
             AND locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now') RETURNING lease",
        &[Field::Scope, Field::Key, Field::Lease, Field::Millis],
    ),
    mysql: Statement::new(
        "UPDATE stateguard_idempotency SET lease = LAST_INSERT_ID(lease + 1), locked_until = \
            UTC_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND WHERE scope = ? AND idem_key = ? \
            AND state = 'running' AND lease = ? AND locked_until < UTC_TIMESTAMP(3)",
        &[Field::Millis, Field::Scope, Field::Key, Field::Lease],
    ),
};

/// The response `$4`, `$5` of the running key held under lease `$3`
/// (MySQL: status, body, scope, key, lease).
const COMPLETE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "UPDATE stateguard_idempotency SET state = 'done', response_status = $4, \
               response_body = $5, locked_until = NULL, completed_at = statement_timestamp() \
               WHERE scope = $1 AND idem_key = $2 AND state = 'running' AND lease = $3",
        &[
            Field::Scope,
            Field::Key,
            Field::Lease,
            Field::Status,
            Field::Body,
        ],
    ),
    sqlite: Statement::new(
        "UPDATE stateguard_idempotency SET state = 'done', response_status = ?4, \
             response_body = ?5, locked_until = NULL, completed_at = strftime('%Y-%m-%d \
             %H:%M:%f', 'now') WHERE scope = ?1 AND idem_key = ?2 AND state = 'running' AND \
             lease = ?3",
        &[
            Field::Scope,
            Field::Key,
            Field::Lease,
            Field::Status,
            Field::Body,
        ],
    ),
    mysql: Statement::new(
        "UPDATE stateguard_idempotency SET state = 'done', response_status = ?, \
            response_body = ?, locked_until = NULL, completed_at = UTC_TIMESTAMP(3) WHERE \
            scope = ? AND idem_key = ? AND state = 'running' AND lease = ?",
        &[
            Field::Status,
            Field::Body,
            Field::Scope,
            Field::Key,
            Field::Lease,
        ],
    ),
};

/// The running key held under lease `$3`, removed.
const RELEASE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE scope = $1 AND idem_key = $2 AND \
               state = 'running' AND lease = $3",
        &[Field::Scope, Field::Key, Field::Lease],
    ),
    sqlite: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE scope = ?1 AND idem_key = ?2 AND \
             state = 'running' AND lease = ?3",
        &[Field::Scope, Field::Key, Field::Lease],
    ),
    mysql: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE scope = ? AND idem_key = ? AND \
            state = 'running' AND lease = ?",
        &[Field::Scope, Field::Key, Field::Lease],
    ),
};

/// Up to `$2` keys created more than `$1` milliseconds ago that no lease
/// holds, oldest first, removed.
const PRUNE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE (scope, idem_key) IN (SELECT scope, \
               idem_key FROM stateguard_idempotency WHERE created_at < statement_timestamp() - \
               CAST($1 AS BIGINT) * INTERVAL '1 millisecond' AND (state = 'done' OR \
               locked_until < statement_timestamp()) ORDER BY created_at LIMIT $2 FOR UPDATE \
               SKIP LOCKED)",
        &[Field::Millis, Field::Limit],
    ),
    sqlite: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE rowid IN (SELECT rowid FROM \
             stateguard_idempotency WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', \
             printf('-%.3f seconds', CAST(?1 AS INTEGER) / 1000.0)) AND (state = 'done' OR \
             locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now')) ORDER BY created_at LIMIT ?2)",
        &[Field::Millis, Field::Limit],
    ),
    mysql: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE created_at < UTC_TIMESTAMP(3) - INTERVAL \
            (? * 1000) MICROSECOND AND (state = 'done' OR locked_until < UTC_TIMESTAMP(3)) \
            ORDER BY created_at LIMIT ?",
        &[Field::Millis, Field::Limit],
    ),
};

/// One request's claim on a key: its scope, the client's key and the
/// fingerprint of its parameters, each 1 to [`MAX_LEN`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    scope: String,
    key: String,
    fingerprint: String,
}

impl Request {
    /// Checks each part: empty or longer than [`MAX_LEN`] characters is
    /// [`Error::BadKey`], which an HTTP service answers with 400.
    pub fn new(
        scope: impl Into<String>,
        key: impl Into<String>,
        fingerprint: impl Into<String>,
    ) -> Result<Self, Error> {
        let (scope, key, fingerprint) = (scope.into(), key.into(), fingerprint.into());
        checked("idempotency scope", &scope)?;
        checked("idempotency key", &key)?;
        checked("request fingerprint", &fingerprint)?;
        Ok(Request {
            scope,
            key,
            fingerprint,
        })
    }

    /// The scope.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The client's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fingerprint of the request's parameters.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// `value` is 1 to [`MAX_LEN`] characters long.
pub(crate) fn checked(field: &'static str, value: &str) -> Result<(), Error> {
    let length = value.chars().count();
    match length {
        1..=MAX_LEN => Ok(()),
        _ => Err(Error::BadKey { field, length }),
    }
}

/// What [`begin`] found ([`begin_tx`]: with the work's transaction in
/// `New`).
#[derive(Debug)]
#[must_use = "each answer needs its response: do the work, replay, 409 or 422"]
pub enum Begun<N = Ticket> {
    /// The key is this request's: do the work, then [`Ticket::complete`]
    /// in the same transaction.
    New(N),
    /// A request with this key completed: its response.
    Replay(Stored),
    /// A request with this key is running now, and its lease has not run
    /// out.
    InProgress,
    /// The key was used with another fingerprint.
    Mismatch,
}

/// A completed request's response, as [`Ticket::complete`] stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    status: u16,
    body: Vec<u8>,
}

impl Stored {
    /// The status, for example 201.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body, owned.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
}

/// The lease on a key that [`begin`] gave this request. Dropping it
/// without [`complete`](Ticket::complete) or [`release`](Ticket::release)
/// (a crash, an error) leaves the key running until its lease runs out;
/// then a retry gets [`Begun::New`].
#[derive(Debug)]
#[must_use = "complete the ticket in the work's transaction, or release it"]
pub struct Ticket {
    request: Request,
    lease: i64,
}

impl Ticket {
    /// The request.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Stores `status` and `body` as the key's response, in `tx`, the
    /// transaction that holds the request's own writes: they commit
    /// together. Call it last, just before the commit: from here to the
    /// commit, a retry's `begin` waits for this transaction.
    ///
    /// [`Error::IdempotencyLeaseLost`] when the lease ran out and another
    /// request took the key over: roll `tx` back (drop it), so that only
    /// the request holding the lease commits its work.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `ticket.complete(&mut tx, status, body).within(d)` ([`Call`]). Cut
    /// off, [`Error::Timeout`] (`complete`, outcome unknown) and `tx` can
    /// no longer commit: roll it back.
    pub fn complete<'t, 'c, DB>(
        self,
        tx: &'t mut Tx<'c, DB>,
        status: u16,
        body: Vec<u8>,
    ) -> Call<'t, ()>
    where
        DB: Backend,
        for<'x, 'y> &'x mut Tx<'y, DB>: Executor<Database = DB, Commit = Uncommitted>,
    {
        Call::new(move |deadline| async move {
            let mut tx = tx;
            let sent = Sent::default();
            let work = async {
                let db_error = |source| store_error("complete", source);
                let complete = DB::choose(&COMPLETE);
                let fields = Fields {
                    status: Some(i64::from(status)),
                    body: Some(body),
                    ..held(&self.request, self.lease)
                };
                let args = store_arguments::<DB>(complete, fields).map_err(db_error)?;
                sent.write();
                let done = Run::execute(&mut tx, complete.text(), args)
                    .await
                    .map_err(db_error)?;
                match DB::rows_affected(&done) {
                    1 => Ok(()),
                    _ => Err(Error::IdempotencyLeaseLost {
                        scope: self.request.scope,
                        key: self.request.key,
                    }),
                }
            };
            let completed = bounded(TABLE, "complete", deadline, &sent, work).await;
            if let Err(Error::Timeout { .. }) = completed {
                // The UPDATE may still run: the transaction must not commit.
                Run::abandoned(&mut tx);
            }
            completed
        })
    }

    /// Gives the key up without a response, so that a retry gets
    /// [`Begun::New`] at once: for a failure the client should be free to
    /// retry (a 5xx, say). Nothing happens if the lease was lost.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `ticket.release(&pool).within(d)` ([`Call`]); cut off,
    /// [`Error::Timeout`] (`release`, outcome unknown).
    pub fn release<DB>(self, pool: &sqlx::Pool<DB>) -> Call<'_, ()>
    where
        DB: Backend,
        for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
    {
        Call::new(move |deadline| async move {
            let sent = Sent::default();
            let work = async {
                let db_error = |source| store_error("release", source);
                let release = DB::choose(&RELEASE);
                let args = store_arguments::<DB>(release, held(&self.request, self.lease))
                    .map_err(db_error)?;
                let mut executor = pool;
                sent.write();
                Run::execute(&mut executor, release.text(), args)
                    .await
                    .map_err(db_error)?;
                Ok(())
            };
            bounded(TABLE, "release", deadline, &sent, work).await
        })
    }
}

/// What a statement on `request`'s key can bind: scope, key and
/// fingerprint.
fn keyed(request: &Request) -> Fields<'_> {
    Fields {
        scope: Some(&request.scope),
        key: Some(&request.key),
        fingerprint: Some(&request.fingerprint),
        ..Fields::default()
    }
}

/// What a statement on `request`'s key held under `lease` can bind.
fn held(request: &Request, lease: i64) -> Fields<'_> {
    Fields {
        lease: Some(lease),
        ..keyed(request)
    }
}

fn store_error(call: &'static str, source: sqlx::Error) -> Error {
    Error::Store {
        table: TABLE,
        call,
        source,
    }
}

/// Claims `request`'s key for this request, under a lease of `lease`, or
/// says why not ([`Begun`]). Each statement commits on its own, and a
/// `New` key's row is committed before the work starts, so a retry finds
/// the running key at once, without waiting for its work. On PostgreSQL
/// one statement answers (the claim of a new key also returns an existing
/// key's row: a replay is one round trip); MySQL claims, then reads an
/// existing key; SQLite reads, then claims a new key. The only wait is for
/// a request between its [`complete`](Ticket::complete) and its commit.
///
/// A key whose lease ran out (its request crashed, or ran longer than its
/// lease) is taken over: `New`, under the next lease, and the old holder
/// can no longer [`complete`](Ticket::complete).
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for the whole
/// call (the wait for a connection included), or
/// `idempotency::begin(&pool, &request, lease).within(d)` ([`Call`]). Cut
/// off, [`Error::Timeout`] (`begin`) with the outcome unknown once the
/// claim may have been sent (the wait for its connection counts): the key
/// may then be running under a lease nobody holds, and a retry gets
/// `InProgress` until it runs out.
pub fn begin<'a, DB>(
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
) -> Call<'a, Begun>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    Call::new(move |deadline| async move {
        let sent = Sent::default();
        let mut executor = pool;
        let work = begin_on(&mut executor, request, lease, &sent);
        bounded(TABLE, "begin", deadline, &sent, work).await
    })
}

/// [`begin`] on `executor`, a pool or a connection out of a transaction;
/// `sent` learns when the claim goes out.
async fn begin_on<DB, E>(
    executor: &mut E,
    request: &Request,
    lease: Duration,
    sent: &Sent,
) -> Result<Begun, Error>
where
    DB: Backend,
    E: Run<Database = DB>,
{
    let db_error = |source| store_error("begin", source);
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let new = |lease| {
        Ok(Begun::New(Ticket {
            request: request.clone(),
            lease,
        }))
    };
    // Each pass either answers or sees the row change under it (inserted,
    // taken over or pruned by another request); three passes see it settle.
    for _ in 0..3 {
        // SQLite reads first: its insert would wait for any write
        // transaction, including a running request's work. The others
        // claim first, which waits only for a request between its
        // `complete` and its commit.
        let found = match DB::EMBEDDED {
            true => match read(executor, request).await? {
                Some(row) => Some((row, 0)),
                None => match claim(executor, request, lease_ms, sent).await? {
                    Claimed::New => return new(1),
                    Claimed::Existing(row) => Some((row, 1)),
                    Claimed::Taken => None,
                },
            },
            false => match claim(executor, request, lease_ms, sent).await? {
                Claimed::New => return new(1),
                Claimed::Existing(row) => Some((row, 1)),
                Claimed::Taken => read(executor, request).await?.map(|row| (row, 0)),
            },
        };
        // Gone between the statements (pruned, or inserted after a read
        // and before a claim): another pass.
        let Some((row, at)) = found else {
            continue;
        };
        let fingerprint = DB::text_opt(&row, at).map_err(db_error)?;
        let state = DB::text_opt(&row, at + 1).map_err(db_error)?;
        let held = DB::int(&row, at + 2).map_err(db_error)?;
        let expired = DB::int(&row, at + 5).map_err(db_error)? != 0;
        if fingerprint.as_deref() != Some(request.fingerprint.as_str()) {
            return Ok(Begun::Mismatch);
        }
        if state.as_deref() == Some("done") {
            let status = DB::int_opt(&row, at + 3).map_err(db_error)?;
            let body = DB::bytes_opt(&row, at + 4).map_err(db_error)?;
            let status = status.and_then(|s| u16::try_from(s).ok());
            let (Some(status), Some(body)) = (status, body) else {
                return Err(Error::Store {
                    table: "stateguard_idempotency",
                    call: "begin",
                    source: sqlx::Error::Protocol(format!(
                        "key {:?} of scope {:?} is done without a response",
                        request.key, request.scope
                    )),
                });
            };
            return Ok(Begun::Replay(Stored { status, body }));
        }
        if !expired {
            return Ok(Begun::InProgress);
        }
        let take_over = DB::choose(&TAKE_OVER);
        let fields = Fields {
            millis: Some(lease_ms),
            ..self::held(request, held)
        };
        let args = store_arguments::<DB>(take_over, fields).map_err(db_error)?;
        sent.write();
        let taken = match DB::RETURNING {
            true => Run::fetch_optional(executor, take_over.text(), args)
                .await
                .map_err(db_error)?
                .map(|row| DB::int(&row, 0))
                .transpose()
                .map_err(db_error)?,
            false => {
                // The OK packet carries the new lease, or 0 where a trigger
                // on the table made MariaDB drop it: then it is read back.
                let (done, row) = Run::execute_then_fetch(
                    executor,
                    take_over.text(),
                    args,
                    DB::LAST_ID,
                    Default::default(),
                    DB::id_lost,
                )
                .await
                .map_err(db_error)?;
                match (DB::rows_affected(&done) == 1, row) {
                    (false, _) => None,
                    (true, Some(row)) => Some(DB::int(&row, 0).map_err(db_error)?),
                    (true, None) => {
                        Some(i64::try_from(DB::last_insert_id(&done)).unwrap_or(i64::MAX))
                    }
                }
            }
        };
        if let Some(lease) = taken {
            return new(lease);
        }
    }
    Ok(Begun::InProgress)
}

/// [`begin`], with the work's transaction begun at the same time, the
/// claim on a second pooled connection when one is idle: a new key adds
/// one round trip to the request's wait instead of two. `New` carries the [`Ticket`] and the
/// open [`Tx`], in which the request does its work, then
/// [`Ticket::complete`]s and commits:
///
/// ```no_run
/// # async fn handler(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use stateguard::idempotency::{self, Begun, Request};
///
/// let request = Request::new("acme:POST /payouts", "4f1c…", "sha256-of-the-body")?;
/// match idempotency::begin_tx(&pool, &request, idempotency::DEFAULT_LEASE).await? {
///     Begun::New((ticket, mut tx)) => {
///         // … INSERT the payout on &mut *tx …
///         ticket.complete(&mut tx, 201, br#"{"id":42}"#.to_vec()).await?;
///         tx.commit(()).await?;
///     }
///     Begun::Replay(stored) => { /* respond stored.status(), stored.body() */ }
///     Begun::InProgress => { /* respond 409 */ }
///     Begun::Mismatch => { /* respond 422 */ }
/// }
/// # Ok(()) }
/// ```
///
/// The claim takes a connection only if the pool has one idle at that
/// moment (checked as the pool's `acquire` checks it, when the pool tests
/// connections before handing them out; the pool's `before_acquire` hook
/// does not run for it), and gives it back as soon as it answers: a
/// request never holds one connection while it waits for another, so a
/// pool that runs out of connections cannot deadlock. Without an idle
/// connection, or when it turns out dead, the claim runs first and the
/// transaction begins after it, as with [`begin`] and [`Tx::begin`]: a
/// new key then costs the two round trips it costs there. SQLite has no
/// round trips to save, and a transaction begun first could hold the write
/// lock the claim needs: there the claim always runs first, and the
/// transaction begins only for `New`.
///
/// For any answer but `New` the answer does not wait for the transaction:
/// as everywhere with [`Tx::begin`], its `BEGIN` runs in a task of its own
/// that sees it through and rolls the transaction back when nobody waits
/// for it any more. If the transaction cannot begin, the error is
/// [`Error::Begin`], and a `New` key's claim is released again on a best
/// effort (a retry gets `New` at once rather than 409 until the lease runs
/// out), unless the pool itself failed (timed out or closed).
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for the whole
/// call, claim, `BEGIN` and the waits for their connections, or
/// `idempotency::begin_tx(&pool, &request, lease).within(d)` ([`Call`]);
/// the transaction keeps the same deadline for its later calls unless
/// [`Tx::within`] says otherwise. Cut off, [`Error::Timeout`]
/// (`begin_tx`), with the outcome unknown once the claim may have been
/// sent, as for [`begin`] (a `BEGIN` cut off by its own deadline is
/// `Timeout` naming `BEGIN`).
pub fn begin_tx<'a, DB>(
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
) -> Call<'a, Begun<(Ticket, Tx<'static, DB>)>>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    begin_both(pool, request, lease, None)
}

/// [`begin_tx`], with the transaction begun by `statement`, as
/// [`Tx::begin_with`] does: `"BEGIN ISOLATION LEVEL SERIALIZABLE"` on
/// PostgreSQL, say, or `"BEGIN IMMEDIATE"` on SQLite. (PostgreSQL takes a
/// repeatable-read snapshot at the first statement after `BEGIN`, so the
/// work sees the claim; a MySQL `START TRANSACTION WITH CONSISTENT
/// SNAPSHOT` may not, which only matters to work that reads the store.)
/// Its deadline is [`begin_tx`]'s.
pub fn begin_tx_with<'a, DB>(
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
    statement: &'static str,
) -> Call<'a, Begun<(Ticket, Tx<'static, DB>)>>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    begin_both(pool, request, lease, Some(statement))
}

/// [`begin_tx`] and [`begin_tx_with`], within the call's deadline.
fn begin_both<'a, DB>(
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
    statement: Option<&'static str>,
) -> Call<'a, Begun<(Ticket, Tx<'static, DB>)>>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    Call::new(move |deadline| async move {
        let sent = Sent::default();
        let work = claim_and_begin(pool, request, lease, statement, deadline, &sent);
        bounded(TABLE, "begin_tx", deadline, &sent, work).await
    })
}

/// The claim and the `BEGIN` of [`begin_both`]; the transaction keeps
/// `deadline`.
async fn claim_and_begin<DB>(
    pool: &sqlx::Pool<DB>,
    request: &Request,
    lease: Duration,
    statement: Option<&'static str>,
    deadline: Duration,
    sent: &Sent,
) -> Result<Begun<(Ticket, Tx<'static, DB>)>, Error>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    // The claim runs on a connection the pool has idle right now while the
    // transaction begins on another. With none idle, or on SQLite (no round
    // trips to save; and a `BEGIN IMMEDIATE` ahead of the claim would hold
    // the write lock the claim needs), or when the idle one turns out dead,
    // the claim runs first, and the transaction begins only for a new key.
    let idle = match DB::EMBEDDED {
        true => None,
        false => Run::try_idle(&pool),
    };
    if let Some(conn) = idle
        && let Some(answer) = alongside(pool, conn, request, lease, statement, deadline, sent).await
    {
        return answer;
    }
    let ticket = match begin_on(&mut &*pool, request, lease, sent)
        .await?
        .answered()
    {
        Ok(answer) => return Ok(answer),
        Err(ticket) => ticket,
    };
    let tx = crate::executor::tx::begin_in_task(pool, statement, deadline).await;
    started(pool, ticket, tx).await
}

/// The claim on `conn`, an idle connection of `pool`, while the work's
/// transaction begins on another; `None` when `conn` failed the pool's
/// check before anything ran on it (the transaction, if it began, is rolled
/// back). The claim gives `conn` back as soon as it answers, so the request
/// never holds a connection while it waits for one: a busy pool cannot
/// deadlock on requests each holding half of what they need. For any
/// answer but `New` the answer does not wait for the transaction: dropped
/// half-way, [`Tx::begin`] still sees its `BEGIN` through in a task of its
/// own, and rolls it back.
async fn alongside<DB, C>(
    pool: &sqlx::Pool<DB>,
    mut conn: C,
    request: &Request,
    lease: Duration,
    statement: Option<&'static str>,
    deadline: Duration,
    sent: &Sent,
) -> Option<Result<Begun<(Ticket, Tx<'static, DB>)>, Error>>
where
    DB: Backend,
    C: Run<Database = DB>,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    // `try_idle` skips the check the pool's `acquire` makes (the
    // transaction's side makes it, at the same time).
    let test = pool.options().get_test_before_acquire();
    let claim = async move {
        if test && conn.ping().await.is_err() {
            return None;
        }
        Some(begin_on(&mut conn, request, lease, sent).await)
    };
    let mut claim = pin!(claim);
    let mut opening = pin!(crate::executor::tx::begin_in_task(
        pool, statement, deadline
    ));
    let mut opened = None;
    let claimed = loop {
        tokio::select! {
            claimed = &mut claim => break claimed,
            tx = &mut opening, if opened.is_none() => opened = Some(tx),
        }
    };
    let ticket = match claimed?.map(Begun::answered) {
        Err(error) => return Some(Err(error)),
        Ok(Ok(answer)) => return Some(Ok(answer)),
        Ok(Err(ticket)) => ticket,
    };
    let tx = match opened {
        Some(tx) => tx,
        None => opening.await,
    };
    Some(started(pool, ticket, tx).await)
}

/// `New` with the transaction, or the transaction's error after releasing
/// the new key's claim, which would otherwise stay until its lease runs out
/// (not when the pool itself failed: the release would wait for it in
/// vain, and the lease ends the claim all the same).
async fn started<DB>(
    pool: &sqlx::Pool<DB>,
    ticket: Ticket,
    tx: Result<Tx<'static, DB>, Error>,
) -> Result<Begun<(Ticket, Tx<'static, DB>)>, Error>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    match tx {
        Ok(tx) => Ok(Begun::New((ticket, tx))),
        Err(error) => {
            let pool_failed = matches!(
                &error,
                Error::Begin {
                    source: sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
                }
            );
            if !pool_failed {
                let _ = ticket.release(pool).await;
            }
            Err(error)
        }
    }
}

impl Begun {
    /// The answer, for anything but `New`; `New`'s ticket otherwise.
    fn answered<N>(self) -> Result<Begun<N>, Ticket> {
        match self {
            Begun::New(ticket) => Err(ticket),
            Begun::Replay(stored) => Ok(Begun::Replay(stored)),
            Begun::InProgress => Ok(Begun::InProgress),
            Begun::Mismatch => Ok(Begun::Mismatch),
        }
    }
}

/// What [`CLAIM`] found.
enum Claimed<Row> {
    /// The key was new, and is this request's under lease 1.
    New,
    /// The key's row (PostgreSQL), its columns after the flag.
    Existing(Row),
    /// The key exists; [`READ`] tells how.
    Taken,
}

/// Runs [`CLAIM`].
async fn claim<DB, E>(
    executor: &mut E,
    request: &Request,
    lease_ms: i64,
    sent: &Sent,
) -> Result<Claimed<<DB as sqlx::Database>::Row>, Error>
where
    DB: Backend,
    E: Run<Database = DB>,
{
    let db_error = |source| store_error("begin", source);
    let claim = DB::choose(&CLAIM);
    let fields = Fields {
        millis: Some(lease_ms),
        ..keyed(request)
    };
    let args = store_arguments::<DB>(claim, fields).map_err(db_error)?;
    sent.write();
    if !DB::RETURNING {
        let done = Run::execute(executor, claim.text(), args)
            .await
            .map_err(db_error)?;
        return Ok(match DB::rows_affected(&done) {
            1 => Claimed::New,
            _ => Claimed::Taken,
        });
    }
    let row = Run::fetch_optional(executor, claim.text(), args)
        .await
        .map_err(db_error)?;
    Ok(match row {
        Some(row) if DB::int(&row, 0).map_err(db_error)? == 1 => Claimed::New,
        Some(row) => Claimed::Existing(row),
        None => Claimed::Taken,
    })
}

/// Runs [`READ`].
async fn read<DB, E>(
    executor: &mut E,
    request: &Request,
) -> Result<Option<<DB as sqlx::Database>::Row>, Error>
where
    DB: Backend,
    E: Run<Database = DB>,
{
    let db_error = |source| store_error("begin", source);
    let read = DB::choose(&READ);
    let args = store_arguments::<DB>(read, keyed(request)).map_err(db_error)?;
    Run::fetch_optional(executor, read.text(), args)
        .await
        .map_err(db_error)
}

/// Removes up to `limit` keys created more than `window` ago
/// ([`DEFAULT_WINDOW`]) that no live lease holds, oldest first, and
/// returns how many it removed. Call it until it returns less than
/// `limit`, or from a periodic job: each call is one bounded statement.
/// A pruned key's retry is a new request.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `idempotency::prune(&pool, window, limit).within(d)` ([`Call`]); cut
/// off, [`Error::Timeout`] (`prune`, outcome unknown: some keys may be
/// gone).
pub fn prune<DB>(pool: &sqlx::Pool<DB>, window: Duration, limit: u32) -> Call<'_, u64>
where
    DB: Backend,
    for<'p> &'p sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    prune_table::<DB>(pool, &PRUNE, TABLE, window, limit)
}

/// One bounded `DELETE` of `sql` (placeholders: the window in
/// milliseconds, the limit), within the call's deadline.
pub(crate) fn prune_table<'p, DB>(
    pool: &'p sqlx::Pool<DB>,
    sql: &'static Sql<Statement<Field>>,
    table: &'static str,
    window: Duration,
    limit: u32,
) -> Call<'p, u64>
where
    DB: Backend,
    for<'x> &'x sqlx::Pool<DB>: Executor<Database = DB, Commit = Committed>,
{
    Call::new(move |deadline| async move {
        let sent = Sent::default();
        let work = async {
            let db_error = |source| Error::Store {
                table,
                call: "prune",
                source,
            };
            let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
            let prune = DB::choose(sql);
            let fields = Fields {
                millis: Some(window_ms),
                limit: Some(i64::from(limit)),
                ..Fields::default()
            };
            let args = store_arguments::<DB>(prune, fields).map_err(db_error)?;
            let mut executor = pool;
            sent.write();
            let done = Run::execute(&mut executor, prune.text(), args)
                .await
                .map_err(db_error)?;
            Ok(DB::rows_affected(&done))
        };
        bounded(table, "prune", deadline, &sent, work).await
    })
}

#[cfg(test)]
mod plans {
    use super::*;

    #[test]
    fn every_statement_has_a_plan_entry_per_placeholder() {
        crate::transition::bind::assert_plans_fit("READ", &READ);
        crate::transition::bind::assert_plans_fit("CLAIM", &CLAIM);
        crate::transition::bind::assert_plans_fit("TAKE_OVER", &TAKE_OVER);
        crate::transition::bind::assert_plans_fit("COMPLETE", &COMPLETE);
        crate::transition::bind::assert_plans_fit("RELEASE", &RELEASE);
        crate::transition::bind::assert_plans_fit("PRUNE", &PRUNE);
    }
}
