//! A small bank, behind the library's own idempotency layer: the far side
//! a payout worker calls. `POST /transfers` with an `Idempotency-Key` and
//! a JSON body `{"payout": 42, "amount": 100}` books the transfer in its
//! ledger once per key: a retry with the same key and body gets the first
//! answer again (`Idempotent-Replayed: true`), one still running gets
//! 409, the same key with another body 422. Every request is logged first,
//! with a digest of its body, so that a test can check that the caller
//! sent the same bytes on every attempt.
//!
//! ```text
//! cargo run --example bank -- --port 8080 --db bank.db
//! curl -X POST localhost:8080/transfers -H 'Idempotency-Key: k1' \
//!      -H 'Content-Type: application/json' -d '{"payout":1,"amount":100}'
//! ```
//!
//! With `--faults`, it answers each key's attempts in turn as a flaky bank
//! does: the first is booked and answered after two seconds, the second
//! is 409, the third 503 with `Retry-After: 1`, the fourth 500, and the
//! fifth on go through (a replay of the first, if it was booked).
//!
//! `tests/examples/bank_crash.rs` runs it as a process of its own, and
//! SIGKILLs it again and again while a `Worker` pays through
//! `http::HttpEffect`.

#![allow(dead_code)]

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use stateguard::ddl::Dialect;
use stateguard::idempotency::{self, layer::Idempotent, layer::IdempotentTx};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "usage: bank [--port N] [--db FILE] [--faults]";

/// The bank's database: a SQLite file, with its ledger, its log of
/// requests and its idempotency keys, made on first use.
pub async fn open(path: &std::path::Path) -> Result<SqlitePool, BoxError> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    let made: Option<(String,)> =
        sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'ledger'")
            .fetch_optional(&pool)
            .await?;
    if made.is_none() {
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(
            "CREATE TABLE requests (key TEXT NOT NULL, body_sha256 TEXT NOT NULL, \
             at_ms INTEGER NOT NULL); \
             CREATE TABLE ledger (payout INTEGER NOT NULL, amount INTEGER NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        for statement in idempotency::ddl(Dialect::Sqlite) {
            sqlx::raw_sql(*statement).execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
    Ok(pool)
}

/// The service: `POST /transfers`, behind the idempotency layer, behind
/// the request log (and the faults, with `faults`).
pub fn router(pool: SqlitePool, faults: bool) -> Router {
    Router::new()
        .route(
            "/transfers",
            axum::routing::post(book)
                // A booking takes milliseconds: a crash mid-request holds
                // its key for two seconds, not the default minute.
                .layer(
                    Idempotent::new(pool.clone(), "POST /transfers").lease(Duration::from_secs(2)),
                )
                .layer(axum::middleware::from_fn_with_state(
                    (pool.clone(), faults),
                    logged,
                )),
        )
        .with_state(faults)
}

/// Logs the request, then answers it as the attempt's turn says (with
/// faults) or passes it on.
async fn logged(
    State((pool, faults)): State<(SqlitePool, bool)>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let key = parts
        .headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let digest = format!("{:x}", Sha256::digest(&bytes));
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let logged = sqlx::query("INSERT INTO requests (key, body_sha256, at_ms) VALUES (?, ?, ?)")
        .bind(&key)
        .bind(&digest)
        .bind(at_ms)
        .execute(&pool)
        .await;
    if logged.is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let request = Request::from_parts(parts, Body::from(bytes));
    if !faults {
        return next.run(request).await;
    }
    let turn: Result<(i64,), _> = sqlx::query_as("SELECT COUNT(*) FROM requests WHERE key = ?")
        .bind(&key)
        .fetch_one(&pool)
        .await;
    match turn.map_or(0, |(n,)| n) {
        1 => {
            let response = next.run(request).await;
            // Booked, and answered after the caller stopped waiting.
            tokio::time::sleep(Duration::from_secs(2)).await;
            response
        }
        2 => StatusCode::CONFLICT.into_response(),
        3 => {
            let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        4 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        _ => next.run(request).await,
    }
}

/// Books the transfer in the key's transaction; the layer stores the
/// answer in it too.
async fn book(
    State(faults): State<bool>,
    mut tx: IdempotentTx<sqlx::Sqlite>,
    body: Bytes,
) -> (StatusCode, String) {
    let Ok(transfer) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "the body is not JSON".to_owned());
    };
    let (Some(payout), Some(amount)) = (transfer["payout"].as_i64(), transfer["amount"].as_i64())
    else {
        return (
            StatusCode::BAD_REQUEST,
            "payout and amount are required".to_owned(),
        );
    };
    if faults {
        // A slow bank: a crash meanwhile rolls the booking and the key's
        // claim back together, and the caller's retry books it.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let booked = sqlx::query("INSERT INTO ledger (payout, amount) VALUES (?, ?)")
        .bind(payout)
        .bind(amount)
        .execute(&mut **tx)
        .await;
    match booked {
        Ok(_) => (
            StatusCode::CREATED,
            format!(r#"{{"receipt":"r-{payout}"}}"#),
        ),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "try again".to_owned()),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (mut port, mut db, mut faults) = (8080_u16, "bank.db".to_owned(), false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--port" => port = args.next().ok_or(USAGE)?.parse()?,
            "--db" => db = args.next().ok_or(USAGE)?,
            "--faults" => faults = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
        }
    }
    let pool = open(std::path::Path::new(&db)).await?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "bank listening on http://{}/transfers",
        listener.local_addr()?
    );
    axum::serve(listener, router(pool, faults)).await?;
    Ok(())
}
