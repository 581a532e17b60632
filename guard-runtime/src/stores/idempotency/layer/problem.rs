//! The layer's own answers: one JSON shape, [`Problem`].

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::{Error, ErrorKind};

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
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Problem {
            status,
            code,
            message: message.into(),
        }
    }

    /// The answer to a request that failed with nothing of it committed:
    /// its work rolled back, or never ran. `error` is logged, not sent.
    pub(super) fn store(error: &Error) -> Self {
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
    pub(super) fn not_saved() -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store_failed",
            "the request failed and nothing of it was saved; retry it with the same \
             Idempotency-Key",
        )
    }

    /// The answer to a request whose work's commit has an unknown outcome.
    pub(super) fn maybe_committed(error: &Error) -> Self {
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
