//! Idempotent endpoints in one line: a [`tower`](https://docs.rs/tower)
//! layer for axum services (feature `axum`).
//!
//! [`Idempotent`] wraps a route. For each request it reads the
//! `Idempotency-Key` header, scopes the key by the route and by the caller
//! the application names, fingerprints the method, the path and the body,
//! and claims the key ([`begin_tx`](super::begin_tx)):
//!
//! | what the claim finds | what the layer does |
//! | --- | --- |
//! | a new key | runs the handler with the claim's transaction ([`IdempotentTx`]); stores the response in that transaction and commits them together, or, for a response it does not store (5xx, 409, 429 by default), rolls the work back and frees the key |
//! | a completed request | answers with the stored status, headers and body, and `Idempotent-Replayed: true`, without running the handler |
//! | a request in progress | 409 at once, or, with [`wait_for`](Idempotent::wait_for), waits up to that long for it to finish and replays it (409 if it does not finish) |
//! | the key with other parameters | 422 |
//! | no key, on a route where it is [optional](Idempotent::optional) | runs the handler untouched |
//!
//! Every answer of the layer's own is one JSON shape, [`Problem`]:
//!
//! | status | `code` | when |
//! | --- | --- | --- |
//! | 400 | `idempotency_key_missing` | no `Idempotency-Key` on a route that requires it |
//! | 400 | `idempotency_key_invalid` | empty, longer than 255 characters, or not visible ASCII |
//! | 400 | `body_not_json` | the body does not parse as JSON ([`Fingerprint::Json`], the default) |
//! | 400 | `scope_too_long` | the caller's identity and the route exceed 255 characters together |
//! | 401 | `identity_missing` | the [`identity`](Idempotent::identity) function names no caller |
//! | 409 | `request_in_progress` | another request with the key is running |
//! | 413 | `body_too_large` | the body exceeds [`body_limit`](Idempotent::body_limit) |
//! | 422 | `key_reused` | the key was used with other parameters |
//! | 500 | `store_failed` | the store failed, or the work and its response could not be committed (the key is freed: a retry runs the handler again), or their commit's outcome is unknown (see below) |
//! | 503 | `store_unavailable` | the store's database answered with a transient error: retry |
//!
//! Their `error` speaks to the client, of its request and its key; the
//! library's error behind a 500 or a 503 is logged (`tracing`, at level
//! `error`), not sent.
//!
//! # When something fails after the claim
//!
//! Once a request holds its key, every way it can end without its
//! response committed frees the key again, so that a retry runs the
//! handler at once instead of meeting 409 `request_in_progress` until the
//! lease runs out: a response the route does not store, a response body
//! that cannot be read, storing the response failing (the lease lost, a
//! statement of the handler's that left the transaction unable to
//! commit, the deadline), the `COMMIT` failing (a deferred unique or
//! foreign key constraint), the inner service's error, and the handler
//! panicking or the request's future being dropped (a timeout layer, a
//! client gone away), where a task of its own frees it. The work rolls
//! back first; the answer is 500 `store_failed` (503
//! `store_unavailable` when the database's error was transient).
//!
//! The key is freed by one statement that deletes it only while it is
//! still running under this request's lease: the stored response is
//! written in the work's transaction, so a request whose work committed
//! has a completed key, which that statement leaves alone. This is what
//! makes a `COMMIT` whose outcome is unknown safe (the connection lost
//! while it was in flight, or its deadline reached): the layer frees the
//! key only if the work did not commit (the statement waits for the
//! row's lock until the transaction's fate is settled), and answers 500
//! `store_failed` saying the request may have taken effect. A retry with
//! the same key then learns which: the stored response, replayed, if the
//! work committed; the handler run again if not. Freeing fails only if
//! the store cannot be reached; the key then frees itself when its lease
//! runs out.
//!
//! An OpenAPI document describes them with one schema, `{error: string,
//! code: string}`, and the header as a `parameter` of `in: header`; the
//! guide's idempotent routes chapter shows both.
//!
//! The layer and its service are here; `problem.rs` holds the answers of
//! its own, `extract.rs` the handler's [`IdempotentTx`], and `serve.rs`
//! what one request goes through, from the key's claim to the stored
//! response.

mod extract;
mod problem;
mod serve;

pub use self::extract::IdempotentTx;
pub use self::problem::Problem;
// The tower traits the layer and its service implement, so that a router
// wrapped in the layer can be driven (`router.call(request)` in a test)
// without a dependency on `tower` of its own: axum does not re-export them.
#[doc(no_inline)]
pub use tower_layer::Layer;
#[doc(no_inline)]
pub use tower_service::Service;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{HeaderName, StatusCode};
use axum::response::Response;

use crate::dialect::Backend;
use crate::stores::idempotency::DEFAULT_LEASE;

/// The header a client sends its key in.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The header a replayed response carries, `true`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The largest body the layer reads by default: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// How the layer fingerprints a request's parameters: the method, the
/// path and a canonical form of the body, hashed with SHA-256. The same
/// key with another fingerprint is 422.
#[derive(Clone, Default)]
pub enum Fingerprint {
    /// The body parsed as JSON and written out again, its object keys
    /// sorted and without whitespace: `{"b":1, "a":2}` and `{"a":2,"b":1}`
    /// are the same parameters. A body that is not JSON is 400; an empty
    /// body is the empty parameters.
    #[default]
    Json,
    /// The body's bytes as they are.
    Raw,
    /// The application's own canonical form of the request: what it
    /// returns is hashed with the method and the path; an `Err` is 400
    /// with its message.
    With(Canonical),
}

/// An application's canonical form of a request's parameters, from its
/// parts and its body.
pub type Canonical = Arc<dyn Fn(&Parts, &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// The caller a key belongs to, named from the request's parts (an API
/// key's account, a tenant); `None` is 401.
type Identity = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Which response statuses are stored and replayed.
type StoredStatus = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;

/// Makes a route idempotent: see the [module](self).
///
/// ```
/// use std::time::Duration;
/// use axum::Router;
/// use axum::http::header;
/// use axum::routing::post;
/// use stateguard::idempotency::layer::{Idempotent, IdempotentTx};
///
/// async fn create(mut tx: IdempotentTx<sqlx::Sqlite>) -> (axum::http::StatusCode, &'static str) {
///     sqlx::query("INSERT INTO payouts (amount) VALUES (100)")
///         .execute(&mut **tx)
///         .await
///         .unwrap();
///     (axum::http::StatusCode::CREATED, r#"{"ok":true}"#)
/// }
///
/// # fn app(pool: sqlx::SqlitePool) -> Router {
/// Router::new().route(
///     "/payouts",
///     post(create).layer(
///         Idempotent::new(pool, "POST /payouts")
///             .identity(|parts| {
///                 let key = parts.headers.get("x-api-key")?;
///                 key.to_str().ok().map(str::to_owned)
///             })
///             .store_headers([header::LOCATION, header::CONTENT_TYPE])
///             .wait_for(Duration::from_secs(2)),
///     ),
/// )
/// # }
/// ```
pub struct Idempotent<DB: Backend> {
    pool: sqlx::Pool<DB>,
    route: Arc<str>,
    required: bool,
    identity: Option<Identity>,
    fingerprint: Fingerprint,
    stored_headers: Arc<[HeaderName]>,
    stores: StoredStatus,
    wait: Option<Duration>,
    lease: Duration,
    body_limit: usize,
    begin: Option<&'static str>,
}

impl<DB: Backend> Clone for Idempotent<DB> {
    fn clone(&self) -> Self {
        Idempotent {
            pool: self.pool.clone(),
            route: self.route.clone(),
            required: self.required,
            identity: self.identity.clone(),
            fingerprint: self.fingerprint.clone(),
            stored_headers: self.stored_headers.clone(),
            stores: self.stores.clone(),
            wait: self.wait,
            lease: self.lease,
            body_limit: self.body_limit,
            begin: self.begin,
        }
    }
}

/// Whether a response is stored by default: 2xx, and 4xx other than 409
/// and 429, as Stripe does. 5xx, 409 and 429 free the key, so a retry
/// runs again.
pub fn stored_by_default(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error()
            && status != StatusCode::CONFLICT
            && status != StatusCode::TOO_MANY_REQUESTS)
}

impl<DB: Backend> Idempotent<DB> {
    /// The layer of the route named `route` (its method and path, say
    /// `"POST /payouts"`: keys are scoped by it), claiming keys in `pool`'s
    /// `stateguard_idempotency` table. The key is required; the caller is
    /// not identified (every caller shares the route's keys) until
    /// [`identity`](Self::identity) names one.
    pub fn new(pool: sqlx::Pool<DB>, route: impl Into<String>) -> Self {
        Idempotent {
            pool,
            route: Arc::from(route.into()),
            required: true,
            identity: None,
            fingerprint: Fingerprint::Json,
            stored_headers: Arc::from([]),
            stores: Arc::new(stored_by_default),
            wait: None,
            lease: DEFAULT_LEASE,
            body_limit: DEFAULT_BODY_LIMIT,
            begin: None,
        }
    }

    /// A request without the header runs the handler untouched (its
    /// [`IdempotentTx`] extractor, if any, as an `Option`, is `None`).
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// Names the caller a key belongs to (a tenant, an API key's account),
    /// so that two callers never share a key; a request it names no caller
    /// for is 401.
    pub fn identity(
        mut self,
        identity: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.identity = Some(Arc::new(identity));
        self
    }

    /// How the request's parameters are fingerprinted; [`Fingerprint::Json`]
    /// by default.
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The response headers stored with the status and body, and given
    /// back on a replay (`Location`, `Content-Type`).
    pub fn store_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names: Vec<HeaderName> = names.into_iter().collect();
        self.stored_headers = Arc::from(names);
        self
    }

    /// Which statuses are stored and replayed; the others free the key
    /// and roll the handler's work back. [`stored_by_default`] otherwise.
    pub fn store_when(
        mut self,
        stores: impl Fn(StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.stores = Arc::new(stores);
        self
    }

    /// A request that finds its key in progress waits up to `wait` for
    /// that request to finish, then replays it, or answers 409.
    pub fn wait_for(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How long a request owns its key before a retry may take it over:
    /// longer than the handler may run. [`DEFAULT_LEASE`] otherwise.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The largest body read, in bytes; a larger one is 413.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Begins the work's transaction with `statement` (SQLite's `BEGIN
    /// IMMEDIATE`), as [`Store::begin_tx_with`](super::Store::begin_tx_with).
    pub fn begin_with(mut self, statement: &'static str) -> Self {
        self.begin = Some(statement);
        self
    }
}

impl<S, DB: Backend> tower_layer::Layer<S> for Idempotent<DB> {
    type Service = IdempotentService<S, DB>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotentService {
            inner,
            config: self.clone(),
        }
    }
}

/// The service [`Idempotent`] wraps a route's handler in.
pub struct IdempotentService<S, DB: Backend> {
    inner: S,
    config: Idempotent<DB>,
}

impl<S: Clone, DB: Backend> Clone for IdempotentService<S, DB> {
    fn clone(&self) -> Self {
        IdempotentService {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S, DB> tower_service::Service<axum::extract::Request> for IdempotentService<S, DB>
where
    DB: Backend,
    S: tower_service::Service<axum::extract::Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::extract::Request) -> Self::Future {
        // The clone that was made ready runs this request; the one left
        // behind is made ready for the next (tower's usual swap).
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        Box::pin(async move { config.handle(inner, request).await })
    }
}
