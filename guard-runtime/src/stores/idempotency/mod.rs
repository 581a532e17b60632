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
//! use stateguard::idempotency::{self, Begun, Request, Work};
//!
//! let request = Request::new("acme:POST /payouts", "4f1c…", "sha256-of-the-body")?;
//! match idempotency::begin_tx(&pool, &request, idempotency::DEFAULT_LEASE).await? {
//!     Begun::New(Work { ticket, mut tx }) => {
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
//! response is replayed as stored: its status, its body, and the headers
//! given to [`Ticket::complete_with_headers`].
//!
//! # The table
//!
//! One table, `stateguard_idempotency`, whose name is fixed so that every
//! statement is fixed at compile time. [`ddl`] gives its `CREATE TABLE` per
//! dialect. The free functions find it through the connection's search
//! path; a [`Store`] of [`stores!`](crate::stores!) finds it in a schema
//! named at compile time, as a transaction-mode pooler needs (it does not
//! keep a session's `SET search_path`):
//!
//! ```no_run
//! # async fn run(pool: sqlx::PgPool, request: stateguard::idempotency::Request) -> Result<(), stateguard::Error> {
//! use stateguard::idempotency::{self, DEFAULT_LEASE};
//! use stateguard::Stores;
//!
//! static PAYMENTS: Stores = stateguard::stores!(schema = "payments");
//!
//! let store = PAYMENTS.idempotency(); // "payments".stateguard_idempotency
//! let begun = store.begin(&pool, &request, DEFAULT_LEASE).await?;
//! # let _ = begun;
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::deadline::call::Call;
use crate::dialect::{Backend, Sql, Statement};
use crate::error::Error;
use crate::executor::tx::Tx;
use crate::stores::schema::{DEFAULT, IdempotencySql};
use crate::transition::bind::{Field, Fields};

mod claim;
#[cfg(feature = "axum")]
pub mod layer;
mod store;
mod ticket;
mod tx;

pub use self::store::Store;
pub use self::ticket::Ticket;

/// How long a request owns its key before another request may take it
/// over: 60 seconds. Give a longer lease to requests that run longer.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// How long a key is kept before [`prune`] may remove it: 24 hours, as
/// Stripe keeps them.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest scope, key or fingerprint, in characters.
pub const MAX_LEN: usize = 255;

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
/// `New`, a [`Work`]).
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

/// What [`begin_tx`] hands a new key: its lease, and the open transaction
/// the request's work runs in. Take it apart in the match,
/// `Begun::New(Work { ticket, mut tx })`, do the work on `&mut tx`, then
/// [`Ticket::complete`] in it and commit.
#[derive(Debug)]
#[must_use = "do the work in `tx`, complete the ticket in it, and commit"]
pub struct Work<DB: Backend> {
    /// The key's lease, completed in `tx`.
    pub ticket: Ticket,
    /// The transaction the work runs in.
    pub tx: Tx<'static, DB>,
}

/// A completed request's response, as [`Ticket::complete`] stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Stored {
    /// The status, for example 201.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The headers stored with it ([`Ticket::complete_with_headers`]), in
    /// order, each `(name, value)`; empty when none were.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
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

/// What a statement on `request`'s key can bind: scope, key and
/// fingerprint.
pub(super) fn keyed(request: &Request) -> Fields<'_> {
    Fields {
        scope: Some(&request.scope),
        key: Some(&request.key),
        fingerprint: Some(&request.fingerprint),
        ..Fields::default()
    }
}

/// What a statement on `request`'s key held under `lease` can bind.
pub(super) fn held(request: &Request, lease: i64) -> Fields<'_> {
    Fields {
        lease: Some(lease),
        ..keyed(request)
    }
}

pub(super) fn store_error(sql: &IdempotencySql, call: &'static str, source: sqlx::Error) -> Error {
    Error::store(sql.table, call, source)
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
/// Only the claim of a new key and the takeover change the row, and
/// nothing follows the claim; after the takeover, MySQL may read the new
/// lease back. When that read fails, the key is taken over all the same:
/// the error's outcome is unknown ([`Error::is_outcome_unknown`]), and
/// the key runs under a lease nobody holds, so a retry gets `InProgress`
/// until it runs out. An error before the claim or the takeover changed
/// nothing.
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
{
    DEFAULT.idempotency().begin(pool, request, lease)
}

/// Removes up to `limit` keys created more than `window` ago
/// ([`DEFAULT_WINDOW`]) that no live lease holds, oldest first, and
/// returns how many it removed. Call it until it returns less than
/// `limit`, or from a periodic job: each call is one bounded statement.
/// A pruned key's retry is a new request. An error removed nothing,
/// unless its outcome is unknown ([`Error::is_outcome_unknown`]): then
/// some keys may be gone.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `idempotency::prune(&pool, window, limit).within(d)` ([`Call`]); cut
/// off, [`Error::Timeout`] (`prune`, outcome unknown: some keys may be
/// gone).
pub fn prune<DB>(pool: &sqlx::Pool<DB>, window: Duration, limit: u32) -> Call<'_, u64>
where
    DB: Backend,
{
    DEFAULT.idempotency().prune(pool, window, limit)
}

/// How many keys are running: begun, and neither completed nor released
/// (a key whose lease ran out is running until a retry takes it over or
/// [`prune`] removes it). One statement that counts up to
/// [`COUNT_CAP`](crate::COUNT_CAP), which reads as that many or more.
///
/// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
/// `idempotency::running(&pool).within(d)` ([`Call`]); cut off,
/// [`Error::Timeout`] (`running`, outcome known: it only reads).
pub fn running<DB: Backend>(pool: &sqlx::Pool<DB>) -> Call<'_, u64> {
    DEFAULT.idempotency().running(pool)
}

/// The statements that create the store's table and its index in
/// `dialect`, without trailing `;`. Run them once, in a migration. A
/// [`Store`] in a schema has its own ([`Store::ddl`]).
pub fn ddl(dialect: crate::ddl::Dialect) -> &'static [&'static str] {
    DEFAULT.idempotency().ddl(dialect)
}

/// [`Store::begin_tx`] on the table found through the search path.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// use stateguard::idempotency::{self, Begun, Request, Work};
///
/// for statement in idempotency::ddl(stateguard::ddl::Dialect::Sqlite) {
///     sqlx::raw_sql(*statement).execute(&pool).await?;
/// }
/// // A client retries `POST /payouts` with the same key: the work runs once,
/// // and the retry gets the stored response.
/// let request = Request::new("acme:POST /payouts", "key-1", "sha256-of-the-body")?;
/// for _attempt in 0..2 {
///     match idempotency::begin_tx(&pool, &request, idempotency::DEFAULT_LEASE).await? {
///         Begun::New(Work { ticket, mut tx }) => {
///             // … the work, on &mut *tx …
///             ticket.complete(&mut tx, 201, b"{\"id\":42}".to_vec()).await?;
///             tx.commit(()).await?;
///         }
///         Begun::Replay(stored) => assert_eq!(stored.status(), 201),
///         Begun::InProgress | Begun::Mismatch => unreachable!(),
///     }
/// }
/// # Ok(()) }
/// ```
pub fn begin_tx<'a, DB>(
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
) -> Call<'a, Begun<Work<DB>>>
where
    DB: Backend,
{
    DEFAULT.idempotency().begin_tx(pool, request, lease)
}

/// [`Store::begin_tx_with`] on the table found through the search path.
pub fn begin_tx_with<'a, DB>(
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
    statement: &'static str,
) -> Call<'a, Begun<Work<DB>>>
where
    DB: Backend,
{
    DEFAULT
        .idempotency()
        .begin_tx_with(pool, request, lease, statement)
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
{
    Call::new(move |deadline| async move {
        let fields = Fields {
            millis: Some(i64::try_from(window.as_millis()).unwrap_or(i64::MAX)),
            limit: Some(i64::from(limit)),
            ..Fields::default()
        };
        crate::stores::changed_on_pool(pool, table, "prune", deadline, sql, fields).await
    })
}
