//! The smallest service: PostgreSQL only, an axum `State<PgPool>`, one
//! table. `POST /payouts/{id}/send` moves a payout from `pending` to
//! `sending` with one compare-and-set; only the request that moved it
//! calls the bank, however many arrive at once, and the others answer
//! `409` with the state they found.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --example payouts_pg
//! curl -X POST localhost:3000/payouts/7                 # a pending payout
//! curl -X POST localhost:3000/payouts/7/send            # 200 sent, once
//! curl localhost:3000/payouts/7                         # its state and bank calls
//! ```
//!
//! A crash between the bank call and `confirm` leaves the payout in
//! `sending`; `examples/payouts_api` and `examples/recovery` show the
//! in-flight states and recovery that finish such a payout.
//!
//! Its one table, `mini_payouts`, lives in the database (and current
//! schema) the URL names; it is created if missing and kept across
//! restarts, and dropped only with `--reset`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use sqlx::PgPool;
use stateguard::{Outcome, StateMachine};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "mini_payouts", column = "status", key = "id")]
enum Payout {
    #[state(initial)]
    #[transition(send -> Sending)]
    Pending,
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

type Answer = (StatusCode, Json<Value>);

fn failed(e: impl std::fmt::Display) -> Answer {
    let body = json!({ "error": e.to_string() });
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body))
}

async fn create(State(pool): State<PgPool>, Path(id): Path<i64>) -> Answer {
    let insert = sqlx::query("INSERT INTO mini_payouts (id) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(id)
        .execute(&pool)
        .await;
    match insert {
        Ok(done) if done.rows_affected() == 1 => (StatusCode::CREATED, Json(json!({ "id": id }))),
        Ok(_) => (StatusCode::OK, Json(json!({ "id": id, "existed": true }))),
        Err(e) => failed(e),
    }
}

/// Stands in for the bank: it counts each transfer it is asked for.
async fn bank_transfer(pool: &PgPool, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE mini_payouts SET bank_calls = bank_calls + 1 WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .map(drop)
}

async fn send(State(pool): State<PgPool>, Path(id): Path<i64>) -> Answer {
    match Payout::send().apply(&pool, id).await {
        // Only this request moved the row: it alone calls the bank, then
        // records that it did.
        Ok(Outcome::Applied(_won)) => match bank_transfer(&pool, id).await {
            Err(e) => failed(e),
            Ok(()) => match Payout::confirm().apply(&pool, id).await {
                Ok(done) if done.is_applied() => (StatusCode::OK, Json(json!({ "sent": id }))),
                Ok(other) => failed(format!("confirm found {other:?}")),
                Err(e) => failed(e),
            },
        },
        Ok(Outcome::NotFound) => (StatusCode::NOT_FOUND, Json(json!({ "id": id }))),
        Ok(other) => {
            let found = other.state().map(|state| state.to_string());
            (
                StatusCode::CONFLICT,
                Json(json!({ "id": id, "found": found })),
            )
        }
        Err(e) => failed(e),
    }
}

async fn read(State(pool): State<PgPool>, Path(id): Path<i64>) -> Answer {
    let row: Result<Option<(String, i64)>, _> =
        sqlx::query_as("SELECT status, bank_calls FROM mini_payouts WHERE id = $1")
            .bind(id)
            .fetch_optional(&pool)
            .await;
    match row {
        Ok(Some((status, calls))) => (
            StatusCode::OK,
            Json(json!({ "id": id, "status": status, "bank_calls": calls })),
        ),
        Ok(None) => (StatusCode::NOT_FOUND, Json(json!({ "id": id }))),
        Err(e) => failed(e),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL to a PostgreSQL URL")?;
    let pool = PgPool::connect(&url).await?;
    if std::env::args().any(|arg| arg == "--reset") {
        sqlx::query("DROP TABLE IF EXISTS mini_payouts")
            .execute(&pool)
            .await?;
    }
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS mini_payouts (id BIGINT PRIMARY KEY, \
         status TEXT NOT NULL DEFAULT 'pending', bank_calls BIGINT NOT NULL DEFAULT 0)",
    )
    .execute(&pool)
    .await?;
    let router = Router::new()
        .route("/payouts/{id}", post(create).get(read))
        .route("/payouts/{id}/send", post(send))
        .with_state(pool);
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
