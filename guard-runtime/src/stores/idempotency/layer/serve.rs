//! What one request goes through: the key's claim, the handler, and the
//! stored response or the freed key.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::Digest;
use tokio::sync::Mutex;

use crate::dialect::Backend;
use crate::error::Error;
use crate::executor::tx::Tx;
use crate::stores::idempotency::{Begun, MAX_LEN, Request, Stored, Ticket, Work};

use super::extract::Slot;
use super::{Fingerprint, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, Idempotent, Problem};

impl<DB: Backend> Idempotent<DB> {
    pub(super) async fn handle<S>(
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
                crate::stores::idempotency::begin_tx_with(
                    &self.pool, request, self.lease, statement,
                )
                .await
            }
            None => crate::stores::idempotency::begin_tx(&self.pool, request, self.lease).await,
        }
    }

    /// A waiting request's next claim: the key alone, and the work's
    /// transaction only once the key is this request's, so that each poll
    /// that finds it still running costs one statement.
    async fn poll(&self, request: &Request) -> Result<Begun<Work<DB>>, Error> {
        let ticket =
            match crate::stores::idempotency::begin(&self.pool, request, self.lease).await? {
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
