//! `http::HttpEffect` against a real bank service on 127.0.0.1, behind
//! the library's idempotency layer, which answers each key's attempts in
//! turn with a timeout (after it paid), 409, 503 with `Retry-After`, 500,
//! and then the replay of the first answer: every payout is paid once,
//! every attempt carries the same key and the same bytes, and the attempt
//! after the 503 waits the time it asked for.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use common::{Bind, Db, TestBackend};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Sqlite, SqlitePool};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::http::{Answers, HttpEffect, Refusal};
use stateguard::idempotency::{self, layer::Idempotent, layer::IdempotentTx};
use stateguard::key::shape::One;
use stateguard::worker::{Poll, Worker};
use stateguard::{Effect, Finished, Retry, StateMachine, Verdict, Won};

/// A wire transfer whose effect is retried up to eight times, 20 ms to
/// 80 ms apart, unless an answer names its own time.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "wires", column = "status", key = "id", key_type = "i64")]
enum Wire {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(
        lease = "30s",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(max = 8, backoff = "20ms..80ms", attempts = "attempts", next_attempt = "next_attempt_at")
    ))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const WIRES: i64 = 20;

backend_tests! {
    "http_effect" => every_payout_is_paid_once_through_every_kind_of_answer (flavor = "multi_thread", worker_threads = 4),
    "http_answers" => refusals_fail_the_row_and_a_receipt_is_read_from_the_answer,
}

/// [`Wire`] whose `confirm` records the bank's receipt.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "wires", column = "status", key = "id", key_type = "i64")]
enum Receipted {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// A 2xx answer's receipt goes into `bank_ref`; a refusal fails the row.
struct ReadReceipt;

impl Answers<Receipted> for ReadReceipt {
    async fn done(&self, response: reqwest::Response) -> Verdict<Receipted> {
        match response.json::<serde_json::Value>().await {
            Ok(body) => match body["receipt"].as_str() {
                Some(receipt) => Receipted::confirm(receipt.to_owned()).into(),
                None => Retry::later().because("no receipt").into(),
            },
            Err(error) => Retry::later().because(error.to_string()).into(),
        }
    }

    fn failed(&self, _: Refusal) -> Verdict<Receipted> {
        Verdict::failed()
    }
}

/// Each key's attempts as the bank saw them: when, and the body's bytes.
type Attempts = Arc<Mutex<HashMap<String, Vec<(Instant, Bytes)>>>>;

/// The bank's answer to attempt `n` of a key, before its idempotency
/// layer: the first and the fifth on go through (the first answered too
/// late for the client), the others are refused in turn.
async fn faults(attempts: Attempts, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let key = parts
        .headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let n = {
        let mut seen = attempts.lock().unwrap();
        let of_key = seen.entry(key).or_default();
        of_key.push((Instant::now(), bytes.clone()));
        of_key.len()
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    match n {
        1 => {
            let response = next.run(request).await;
            // Paid, and answered after the client stopped waiting.
            tokio::time::sleep(Duration::from_millis(600)).await;
            response
        }
        2 => StatusCode::CONFLICT.into_response(),
        3 => {
            let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
            let wait = HeaderValue::from_static("1");
            response.headers_mut().insert(header::RETRY_AFTER, wait);
            response
        }
        4 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        _ => next.run(request).await,
    }
}

/// `POST /transfers`: books the payout in the ledger, in the key's
/// transaction.
async fn pay(mut tx: IdempotentTx<Sqlite>, body: Bytes) -> (StatusCode, String) {
    let wire: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let payout = wire["payout"].as_i64().unwrap();
    sqlx::query("INSERT INTO ledger (payout, amount) VALUES (?, ?)")
        .bind(payout)
        .bind(wire["amount"].as_i64().unwrap())
        .execute(&mut **tx)
        .await
        .unwrap();
    (
        StatusCode::CREATED,
        format!(r#"{{"receipt":"r-{payout}"}}"#),
    )
}

/// The bank: its own SQLite database in `dir`, with its ledger and its
/// idempotency keys, served on 127.0.0.1. Returns its URL and its pool.
async fn bank(dir: &tempfile::TempDir, attempts: Attempts) -> (String, SqlitePool) {
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("bank.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE ledger (payout INTEGER NOT NULL, amount INTEGER NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    for statement in idempotency::ddl(Dialect::Sqlite) {
        sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
    }
    let router = Router::new().route(
        "/transfers",
        axum::routing::post(pay)
            .layer(Idempotent::new(pool.clone(), "POST /transfers"))
            .layer(axum::middleware::from_fn(move |request, next| {
                faults(attempts.clone(), request, next)
            })),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}/transfers"), pool)
}

/// The `wires` table with `WIRES` pending rows.
async fn wires<DB: TestBackend>(db: &Db<DB>) {
    let (create, insert) = match DB::DIALECT {
        Dialect::Postgres => (
            "CREATE TABLE wires (id BIGINT PRIMARY KEY, status TEXT NOT NULL,
                sending_since TIMESTAMPTZ, attempts INT NOT NULL DEFAULT 0,
                next_attempt_at TIMESTAMPTZ, bank_ref TEXT)",
            "INSERT INTO wires (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g",
        ),
        Dialect::Sqlite => (
            "CREATE TABLE wires (id INTEGER PRIMARY KEY, status TEXT NOT NULL,
                sending_since TEXT, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at TEXT,
                bank_ref TEXT)",
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
             INSERT INTO wires (id, status) SELECT i, 'pending' FROM s",
        ),
        _ => (
            "CREATE TABLE wires (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL,
                sending_since DATETIME(3) NULL, attempts INT NOT NULL DEFAULT 0,
                next_attempt_at DATETIME(3) NULL, bank_ref VARCHAR(64) NULL)",
            "INSERT INTO wires (id, status)
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
             SELECT i, 'pending' FROM s",
        ),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    DB::execute(&mut conn, insert, &[Bind::Int(WIRES)])
        .await
        .unwrap();
}

/// How many wires are `sent`.
async fn sent<DB: TestBackend>(db: &Db<DB>) -> i64 {
    let sql = match DB::DIALECT {
        Dialect::Postgres => "SELECT COUNT(*)::BIGINT FROM wires WHERE status = 'sent'",
        Dialect::Sqlite => "SELECT COUNT(*) FROM wires WHERE status = 'sent'",
        _ => "SELECT CAST(COUNT(*) AS SIGNED) FROM wires WHERE status = 'sent'",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

/// A worker whose effect is an `HttpEffect` drives every wire through the
/// bank's five answers to `sent`, and the bank books each payout once.
async fn every_payout_is_paid_once_through_every_kind_of_answer<DB: TestBackend + Batched>(
    db: Db<DB>,
) where
    i64: common::KeyColumn<DB> + ManyKeys<DB, One>,
{
    wires(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let attempts = Attempts::default();
    let (url, ledger) = bank(&dir, attempts.clone()).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let pay = HttpEffect::new(move |effect: &Effect<Wire, i64>| {
        client
            .post(&url)
            .json(&serde_json::json!({ "payout": effect.key(), "amount": 100 }))
    });
    let all_sent = async {
        let done = async {
            while sent(&db).await < WIRES {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(120), done)
            .await
            .expect("every wire sent within two minutes");
    };
    let report = Worker::new(db.pool.clone())
        .effects(Wire::start(), 10, 8, pay.effect())
        .poll(Poll::new(
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .run(all_sent)
        .await
        .unwrap();
    assert_eq!(report.loops[0].done, WIRES as usize, "{report:?}");
    let (booked, payouts): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT payout) FROM ledger")
            .fetch_one(&ledger)
            .await
            .unwrap();
    assert_eq!((booked, payouts), (WIRES, WIRES), "each payout booked once");
    let attempts = attempts.lock().unwrap();
    assert_eq!(attempts.len(), WIRES as usize, "one key per payout");
    for (key, seen) in attempts.iter() {
        assert!(seen.len() >= 5, "{key}: {} attempts", seen.len());
        assert!(
            seen.iter().all(|(_, body)| *body == seen[0].1),
            "{key}: the body changed between attempts"
        );
        let waited = seen[3].0 - seen[2].0;
        assert!(
            waited >= Duration::from_millis(950),
            "{key}: the attempt after `Retry-After: 1` came after {waited:?}"
        );
    }
}

/// A bank that books odd payouts (201 with a receipt), refuses payouts
/// 4, 8, … as a key reused with other parameters (422), and the others as
/// closed accounts (400). Returns its URL and its count of calls.
async fn refusing_bank() -> (String, Arc<Mutex<u32>>) {
    let calls = Arc::new(Mutex::new(0));
    let counted = calls.clone();
    let router = Router::new().route(
        "/transfers",
        axum::routing::post(move |body: Bytes| {
            *counted.lock().unwrap() += 1;
            async move {
                let wire: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let payout = wire["payout"].as_i64().unwrap();
                match payout % 4 {
                    1 | 3 => (
                        StatusCode::CREATED,
                        format!(r#"{{"receipt":"r-{payout}"}}"#),
                    ),
                    0 => (StatusCode::UNPROCESSABLE_ENTITY, "key reused".to_owned()),
                    _ => (StatusCode::BAD_REQUEST, "account closed".to_owned()),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{addr}/transfers"), calls)
}

/// 422 and other 4xx answers fail their rows after one call each, and
/// answers of the application's own read the receipt of a 2xx into the
/// `done` transition's value.
async fn refusals_fail_the_row_and_a_receipt_is_read_from_the_answer<DB: TestBackend + Batched>(
    db: Db<DB>,
) where
    i64: common::KeyColumn<DB> + ManyKeys<DB, One>,
    String: common::KeyColumn<DB>,
{
    wires(&db).await;
    let (url, calls) = refusing_bank().await;
    let client = reqwest::Client::new();
    let pay = HttpEffect::new(move |effect: &Effect<Receipted, i64>| {
        client
            .post(&url)
            .json(&serde_json::json!({ "payout": effect.key(), "amount": 100 }))
    })
    .answers(ReadReceipt);
    let wins: Vec<Won<Receipted, i64>> = Receipted::start()
        .claim(&db.pool, WIRES as u32)
        .await
        .unwrap();
    let rows = stateguard::finish_many(&db.pool, wins, 4, pay.effect())
        .await
        .unwrap();
    for row in &rows {
        let expected = match row.key % 4 {
            1 | 3 => Receipted::Sent,
            _ => Receipted::Failed,
        };
        match &row.finished {
            Ok(Finished::Done { state, .. } | Finished::Failed { state, .. }) => {
                assert_eq!(*state, expected, "wire {}", row.key);
            }
            other => panic!("wire {}: {other:?}", row.key),
        }
    }
    assert_eq!(*calls.lock().unwrap(), WIRES as u32, "one call per wire");
    let sql = match DB::DIALECT {
        Dialect::Postgres => "SELECT bank_ref FROM wires WHERE id = $1",
        _ => "SELECT bank_ref FROM wires WHERE id = ?",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (bank_ref,): (String,) = DB::fetch_one(&mut conn, sql, &[Bind::Int(7)])
        .await
        .unwrap();
    assert_eq!(bank_ref, "r-7");
}
