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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::Digest;
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::{Begun, DEFAULT_LEASE, MAX_LEN, Request, Stored, Ticket, Work};
use crate::dialect::Backend;
use crate::error::{Error, ErrorKind};
use crate::executor::tx::Tx;

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

/// The layer's own answers: one JSON shape, `{"error": "…", "code": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (see the module's table).
    pub code: &'static str,
    /// A sentence for people.
    pub message: String,
}

impl Problem {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Problem {
            status,
            code,
            message: message.into(),
        }
    }

    /// The answer to a request that failed with nothing of it committed:
    /// its work rolled back, or never ran. `error` is logged, not sent.
    fn store(error: &Error) -> Self {
        tracing::error!(%error, "an idempotent request failed; nothing of it was committed");
        match error.kind() {
            ErrorKind::Transient => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the server is busy and nothing of this request was saved; retry it with the \
                 same Idempotency-Key",
            ),
            _ => Problem::not_saved(),
        }
    }

    /// 500 `store_failed`, for a request of which nothing committed.
    fn not_saved() -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_failed",
            "the request failed and nothing of it was saved; retry it with the same \
             Idempotency-Key",
        )
    }

    /// The answer to a request whose work's commit has an unknown outcome.
    fn maybe_committed(error: &Error) -> Self {
        tracing::error!(%error, "an idempotent request's commit has an unknown outcome");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_failed",
            "the request may or may not have taken effect; retry it with the same \
             Idempotency-Key: the retry answers with this request's response if it took effect, \
             and runs it again if it did not",
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message, "code": self.code });
        let mut response = (self.status, body.to_string()).into_response();
        response.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

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

/// The claim's transaction, shared with the handler while it runs.
type Slot<DB> = Arc<Mutex<Option<Tx<'static, DB>>>>;

/// The transaction of the request's work, begun with the claim of its
/// key: the layer stores the response in it and commits both. An
/// extractor; `Option<IdempotentTx<DB>>` on an
/// [optional](Idempotent::optional) route.
///
/// It derefs to the [`Tx`]: `&mut *tx` is the transaction
/// (`transition.apply(&mut *tx, key)`), `&mut **tx` its connection
/// (`query.execute(&mut **tx)`). Do not commit it: the layer does, after
/// storing the response.
pub struct IdempotentTx<DB: Backend> {
    guard: OwnedMutexGuard<Option<Tx<'static, DB>>>,
}

impl<DB: Backend> std::ops::Deref for IdempotentTx<DB> {
    type Target = Tx<'static, DB>;

    fn deref(&self) -> &Self::Target {
        self.guard
            .as_ref()
            .expect("the layer holds the transaction while the handler runs")
    }
}

impl<DB: Backend> std::ops::DerefMut for IdempotentTx<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.guard
            .as_mut()
            .expect("the layer holds the transaction while the handler runs")
    }
}

impl<DB: Backend, St: Sync> FromRequestParts<St> for IdempotentTx<DB> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &St) -> Result<Self, Problem> {
        let missing = || {
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_failed",
                "the handler takes an IdempotentTx, but the request has none: the route has no \
                 Idempotent layer, or the key is optional and was not sent",
            )
        };
        let slot = parts
            .extensions
            .get::<Slot<DB>>()
            .cloned()
            .ok_or_else(missing)?;
        let guard = slot.lock_owned().await;
        match guard.is_some() {
            true => Ok(IdempotentTx { guard }),
            false => Err(missing()),
        }
    }
}

impl<DB: Backend, St: Sync> OptionalFromRequestParts<St> for IdempotentTx<DB> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &St) -> Result<Option<Self>, Problem> {
        match parts.extensions.get::<Slot<DB>>() {
            None => Ok(None),
            Some(_) => <Self as FromRequestParts<St>>::from_request_parts(parts, state)
                .await
                .map(Some),
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

impl<DB: Backend> Idempotent<DB> {
    async fn handle<S>(
        &self,
        mut inner: S,
        request: axum::extract::Request,
    ) -> Result<Response, S::Error>
    where
        S: tower_service::Service<axum::extract::Request, Response = Response>,
    {
        let (parts, body) = request.into_parts();
        let key = match parts.headers.get(&IDEMPOTENCY_KEY) {
            None if !self.required => {
                return inner
                    .call(axum::extract::Request::from_parts(parts, body))
                    .await;
            }
            None => {
                return Ok(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "idempotency_key_missing",
                    "the Idempotency-Key header is required",
                )
                .into_response());
            }
            Some(key) => match checked_key(key) {
                Ok(key) => key,
                Err(problem) => return Ok(problem.into_response()),
            },
        };
        let (request, body) = match self.claim_request(&parts, key, body).await {
            Ok(claimed) => claimed,
            Err(problem) => return Ok(problem.into_response()),
        };
        let deadline = self.wait.map(|wait| tokio::time::Instant::now() + wait);
        let mut pause = Duration::from_millis(5);
        let mut begun = self.begin_tx(&request).await;
        let work = loop {
            match begun {
                Ok(Begun::New(work)) => break work,
                Ok(Begun::Replay(stored)) => return Ok(replay(stored)),
                Ok(Begun::Mismatch) => {
                    return Ok(Problem::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "key_reused",
                        "this Idempotency-Key was used with other parameters",
                    )
                    .into_response());
                }
                Ok(Begun::InProgress) => {
                    let now = tokio::time::Instant::now();
                    let Some(left) = deadline.filter(|d| now < *d).map(|d| d - now) else {
                        return Ok(Problem::new(
                            StatusCode::CONFLICT,
                            "request_in_progress",
                            "a request with this Idempotency-Key is in progress; retry later",
                        )
                        .into_response());
                    };
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                    begun = self.poll(&request).await;
                }
                Err(error) => return Ok(Problem::store(&error).into_response()),
            }
        };
        let Work { ticket, tx } = work;
        // From here on, every way out frees the key unless the response
        // committed: dropped (a panic, a dropped future), the claim frees
        // it in a task of its own.
        let claim = HeldKey::new(ticket, self.pool.clone());
        let slot: Slot<DB> = Arc::new(Mutex::new(Some(tx)));
        let mut parts = parts;
        parts.extensions.insert(slot.clone());
        let response = inner
            .call(axum::extract::Request::from_parts(parts, Body::from(body)))
            .await;
        // The handler is done, and its extractor with it: the transaction
        // is the layer's again.
        let tx = slot.lock().await.take();
        match response {
            Ok(response) => Ok(self.settle(claim, tx, response).await),
            Err(error) => {
                // The work rolls back before the key is freed.
                drop(tx);
                claim.free().await;
                Err(error)
            }
        }
    }

    /// The claim of the key and the work's transaction, begun together.
    async fn begin_tx(&self, request: &Request) -> Result<Begun<Work<DB>>, Error> {
        match self.begin {
            Some(statement) => {
                super::begin_tx_with(&self.pool, request, self.lease, statement).await
            }
            None => super::begin_tx(&self.pool, request, self.lease).await,
        }
    }

    /// A waiting request's next claim: the key alone, and the work's
    /// transaction only once the key is this request's, so that each poll
    /// that finds it still running costs one statement.
    async fn poll(&self, request: &Request) -> Result<Begun<Work<DB>>, Error> {
        let ticket = match super::begin(&self.pool, request, self.lease).await? {
            Begun::New(ticket) => ticket,
            Begun::Replay(stored) => return Ok(Begun::Replay(stored)),
            Begun::InProgress => return Ok(Begun::InProgress),
            Begun::Mismatch => return Ok(Begun::Mismatch),
        };
        let tx = match self.begin {
            Some(statement) => Tx::begin_with(&self.pool, statement).await,
            None => Tx::begin(&self.pool).await,
        };
        match tx {
            Ok(tx) => Ok(Begun::New(Work { ticket, tx })),
            Err(error) => {
                // Free the key again at once, as `begin_tx` does.
                let _ = ticket.release(&self.pool).await;
                Err(error)
            }
        }
    }

    /// The key's claim: the scope (the caller and the route), the key and
    /// the fingerprint; and the body, read once.
    async fn claim_request(
        &self,
        parts: &Parts,
        key: String,
        body: Body,
    ) -> Result<(Request, axum::body::Bytes), Problem> {
        let scope = match &self.identity {
            None => self.route.to_string(),
            // The caller's length first: no caller and route can spell
            // another pair's scope.
            Some(identity) => match identity(parts) {
                Some(caller) => format!("{}:{caller} {}", caller.len(), self.route),
                None => {
                    return Err(Problem::new(
                        StatusCode::UNAUTHORIZED,
                        "identity_missing",
                        "the request names no caller for its Idempotency-Key",
                    ));
                }
            },
        };
        if scope.chars().count() > MAX_LEN {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "scope_too_long",
                format!("the caller and the route exceed {MAX_LEN} characters together"),
            ));
        }
        let body = axum::body::to_bytes(body, self.body_limit)
            .await
            .map_err(|_| {
                Problem::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!("the body exceeds {} bytes", self.body_limit),
                )
            })?;
        let canonical = match &self.fingerprint {
            Fingerprint::Raw => body.to_vec(),
            Fingerprint::Json if body.is_empty() => Vec::new(),
            Fingerprint::Json => {
                let value: serde_json::Value = serde_json::from_slice(&body).map_err(|error| {
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "body_not_json",
                        format!("the body is not JSON: {error}"),
                    )
                })?;
                // serde_json's maps are sorted by key: the same object in
                // any order, with any whitespace, writes the same bytes.
                serde_json::to_vec(&value).unwrap_or_default()
            }
            Fingerprint::With(canonical) => canonical(parts, &body).map_err(|message| {
                Problem::new(StatusCode::BAD_REQUEST, "body_not_json", message)
            })?,
        };
        let mut digest = sha2::Sha256::new();
        digest.update(parts.method.as_str().as_bytes());
        digest.update(b"\n");
        digest.update(parts.uri.path().as_bytes());
        digest.update(b"\n");
        digest.update(&canonical);
        let fingerprint: String = digest
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let request = Request::new(scope, key, fingerprint).map_err(|error| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "idempotency_key_invalid",
                error.to_string(),
            )
        })?;
        Ok((request, body))
    }

    /// Stores a response the route stores, with the work, and commits;
    /// rolls the work back and frees the key otherwise, and whenever
    /// storing or committing fails (see the [module](self)).
    async fn settle(
        &self,
        claim: HeldKey<DB>,
        tx: Option<Tx<'static, DB>>,
        response: Response,
    ) -> Response {
        let status = response.status();
        let Some(mut tx) = tx.filter(|_| (self.stores)(status)) else {
            // Not stored: the work rolls back with the dropped transaction,
            // and a retry runs again.
            claim.free().await;
            return response;
        };
        let (mut parts, body) = response.into_parts();
        let body = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(body) => body,
            Err(error) => {
                drop(tx);
                claim.free().await;
                tracing::error!(%error, "an idempotent route's response body could not be read");
                return Problem::not_saved().into_response();
            }
        };
        let mut headers: Vec<(String, String)> = Vec::new();
        for name in self.stored_headers.iter() {
            for value in parts.headers.get_all(name) {
                match value.to_str() {
                    Ok(value) => headers.push((name.as_str().to_owned(), value.to_owned())),
                    // Stored as text: a value of other bytes is left out of
                    // the replay, and said so.
                    Err(_) => tracing::warn!(
                        header = name.as_str(),
                        "a response header to store is not visible ASCII; its replay will lack it"
                    ),
                }
            }
        }
        let completed = claim
            .copy()
            .complete_with_headers(&mut tx, status.as_u16(), headers, body.to_vec())
            .await;
        if let Err(error) = completed {
            // Nothing committed: the work rolls back, and the key is
            // freed (unless the lease was lost, when it is not ours).
            drop(tx);
            claim.free().await;
            return Problem::store(&error).into_response();
        }
        if let Err(error) = tx.commit(()).await {
            // The key is freed only if it is still running: a committed
            // response completed it, in the same transaction as the work.
            claim.free().await;
            return match error.is_outcome_unknown() {
                true => Problem::maybe_committed(&error),
                false => Problem::store(&error),
            }
            .into_response();
        }
        claim.kept();
        parts.headers.remove(&IDEMPOTENT_REPLAYED);
        Response::from_parts(parts, Body::from(body))
    }
}

/// A new key's claim, from the claim until its request settles. Dropped
/// before [`kept`](HeldKey::kept) or [`free`](HeldKey::free) (the handler
/// panicked, or the request's future was dropped), it frees the key in a
/// task of its own.
struct HeldKey<DB: Backend> {
    ticket: Ticket,
    pool: sqlx::Pool<DB>,
    settled: bool,
}

impl<DB: Backend> HeldKey<DB> {
    fn new(ticket: Ticket, pool: sqlx::Pool<DB>) -> Self {
        HeldKey {
            ticket,
            pool,
            settled: false,
        }
    }

    /// A ticket for the same lease: [`Ticket::complete`] takes one, and
    /// the claim keeps its own to free the key if the commit fails after.
    fn copy(&self) -> Ticket {
        Ticket {
            request: self.ticket.request.clone(),
            lease: self.ticket.lease,
            sql: self.ticket.sql,
        }
    }

    /// The response committed: the key is completed, nothing to free.
    fn kept(mut self) {
        self.settled = true;
    }

    /// Frees the key now, if it is still running under this request's
    /// lease.
    async fn free(mut self) {
        self.settled = true;
        release(&self.pool, self.copy()).await;
    }
}

impl<DB: Backend> Drop for HeldKey<DB> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Outside a runtime (a request dropped as the runtime shuts down)
        // the lease ends the claim all the same.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (pool, ticket) = (self.pool.clone(), self.copy());
            runtime.spawn(async move { release(&pool, ticket).await });
        }
    }
}

/// Releases `ticket`'s key, saying so when it cannot.
async fn release<DB: Backend>(pool: &sqlx::Pool<DB>, ticket: Ticket) {
    if let Err(error) = ticket.release(pool).await {
        tracing::warn!(%error, "freeing an idempotency key failed; it frees itself when its lease runs out");
    }
}

/// The key as sent: 1 to 255 visible ASCII characters.
fn checked_key(value: &HeaderValue) -> Result<String, Problem> {
    let bytes = value.as_bytes();
    let visible = bytes.iter().all(|b| (0x21..=0x7e).contains(b));
    match (bytes.len(), visible) {
        (1..=MAX_LEN, true) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        (0, _) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_invalid",
            "the Idempotency-Key header is empty",
        )),
        (_, true) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_invalid",
            format!("the Idempotency-Key header is longer than {MAX_LEN} characters"),
        )),
        (_, false) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_invalid",
            "the Idempotency-Key header holds characters other than visible ASCII",
        )),
    }
}

/// A completed request's response, as stored, marked replayed.
fn replay(stored: Stored) -> Response {
    let status = StatusCode::from_u16(stored.status()).unwrap_or(StatusCode::OK);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    for (name, value) in stored.headers() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    *response.body_mut() = Body::from(stored.into_body());
    response
}
