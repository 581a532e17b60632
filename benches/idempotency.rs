//! What an idempotency key costs a request, in one process, one request
//! at a time on a pool of three connections (SQLite: two), all open and
//! idle between requests (sqlx checks a connection on its way back to the
//! pool, a round trip of its own), in alternating rounds, as requests per
//! second:
//!
//! - plain: the request without a key, `BEGIN; INSERT` the payout`; COMMIT`
//!   (three round trips);
//! - new key, `begin_tx`: the claim (one statement on PostgreSQL and
//!   MySQL) on one connection while the other runs `BEGIN`, then the insert,
//!   `Ticket::complete` and `COMMIT` (four round trips to wait for);
//! - new key, `begin`: the claim, then the same transaction begun after it
//!   (five);
//! - replay, `begin_tx` and `begin`: a completed key (one round trip on
//!   PostgreSQL, two on MySQL and SQLite: the claim, then the read;
//!   `begin_tx` also begins a transaction alongside, and rolls it back on
//!   its connection's way back to the pool).
//!
//! PostgreSQL (`STATEGUARD_POSTGRES_URL`, in the schema
//! `stateguard_bench_idempotency`, made anew) and MariaDB/MySQL
//! (`STATEGUARD_MYSQL_URL`, in the database of that name) run
//! when their URLs are set, directly and over a link that delays each
//! packet by 1 ms each way (a round trip of 2 ms, where round trips
//! rather than the server's work decide); SQLite (a temporary file, WAL)
//! always.
//!
//! - a new key through `idempotency::layer::Idempotent` against the same
//!   handler doing the layer's work by hand with `begin_tx`, both as axum
//!   routers called without a socket, alternating, with the paired ratio.
//!
//! Run with `cargo bench --bench idempotency`.

use std::time::{Duration, Instant};

#[allow(dead_code)]
mod support;

/// The bench's own schema (PostgreSQL) and database (MySQL).
const POSTGRES: support::Place = support::Place {
    name: "stateguard_bench_idempotency",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_bench_idempotency CASCADE",
        "CREATE SCHEMA stateguard_bench_idempotency",
    ],
    drop: "DROP SCHEMA stateguard_bench_idempotency CASCADE",
    connections: 3,
    delay: Duration::ZERO,
};
const MYSQL: support::Place = support::Place {
    name: "stateguard_bench_idempotency",
    fresh: [
        "DROP DATABASE IF EXISTS stateguard_bench_idempotency",
        "CREATE DATABASE stateguard_bench_idempotency",
    ],
    drop: "DROP DATABASE stateguard_bench_idempotency",
    connections: 3,
    delay: Duration::ZERO,
};

use sqlx::Pool;
use stateguard::idempotency::{self, Begun, Request, Work};
use stateguard::{Backend, Tx};

/// Requests per round, directly and over the delayed link.
const REQUESTS: usize = 300;
const REQUESTS_OVER_LINK: usize = 60;
/// Each way's delay of the link.
const LINK: Duration = Duration::from_millis(1);
const ROUNDS: usize = 6;

use support::median;

/// The plain request's statements, per backend.
trait Bench: Backend {
    const CREATE: &'static str;
    const INSERT: &'static str;
    const DIALECT: stateguard::ddl::Dialect;
}

impl Bench for sqlx::Sqlite {
    const CREATE: &'static str =
        "CREATE TABLE bench_payouts (id INTEGER PRIMARY KEY, amount_cents INTEGER NOT NULL)";
    const INSERT: &'static str = "INSERT INTO bench_payouts (id, amount_cents) VALUES (?1, ?2)";
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Sqlite;
}

impl Bench for sqlx::Postgres {
    const CREATE: &'static str =
        "CREATE TABLE bench_payouts (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL)";
    const INSERT: &'static str = "INSERT INTO bench_payouts (id, amount_cents) VALUES ($1, $2)";
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Postgres;
}

impl Bench for sqlx::MySql {
    const CREATE: &'static str =
        "CREATE TABLE bench_payouts (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL)";
    const INSERT: &'static str = "INSERT INTO bench_payouts (id, amount_cents) VALUES (?, ?)";
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::MySql;
}

async fn setup<DB: Bench>(pool: &Pool<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let mut conn = pool.acquire().await.unwrap();
    for statement in [DB::CREATE]
        .into_iter()
        .chain(idempotency::ddl(DB::DIALECT).iter().copied())
    {
        sqlx::query(statement).execute(&mut *conn).await.unwrap();
    }
}

/// Requests per second of `n` calls of `one(i)` for `from..`.
async fn timed<F, Fut>(from: usize, n: usize, one: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let started = Instant::now();
    for i in from..from + n {
        one(i).await;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

async fn plain<DB: Bench>(pool: &Pool<DB>, id: usize)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(DB::INSERT)
        .bind(id as i64)
        .bind(1000_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// The keyed request, through `begin_tx` (`together`) or `begin` then
/// `Tx::begin`: `true` when it was a replay.
async fn keyed<DB: Bench>(pool: &Pool<DB>, id: usize, together: bool) -> bool
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let request = Request::new("bench:POST /payouts", format!("key-{id}"), "amount=1000").unwrap();
    let lease = idempotency::DEFAULT_LEASE;
    let (ticket, mut tx) = match together {
        true => match idempotency::begin_tx(pool, &request, lease).await.unwrap() {
            Begun::New(Work { ticket, tx }) => (ticket, tx),
            Begun::Replay(_) => return true,
            other => panic!("{other:?}"),
        },
        false => match idempotency::begin(pool, &request, lease).await.unwrap() {
            Begun::New(ticket) => (ticket, Tx::begin(pool).await.unwrap()),
            Begun::Replay(_) => return true,
            other => panic!("{other:?}"),
        },
    };
    sqlx::query(DB::INSERT)
        .bind(id as i64)
        .bind(1000_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    ticket
        .complete(&mut tx, 201, br#"{"id":1}"#.to_vec())
        .await
        .unwrap();
    tx.commit(()).await.unwrap();
    false
}

/// The same `POST /payouts`, through the layer, and through a handler
/// that does what the layer does by hand (read the key, hash the
/// canonical body, `begin_tx`, the answers, `complete_with_headers`,
/// `COMMIT`): both called as axum routers, without a socket.
fn routers<DB: Bench>(pool: &Pool<DB>) -> (axum::Router, axum::Router)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use stateguard::idempotency::layer::{Idempotent, IdempotentTx};

    let layered = axum::Router::new().route(
        "/payouts",
        axum::routing::post(
            |mut tx: IdempotentTx<DB>, body: axum::body::Bytes| async move {
                let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                sqlx::query(DB::INSERT)
                    .bind(value["id"].as_i64().unwrap())
                    .bind(1000_i64)
                    .execute(&mut **tx)
                    .await
                    .unwrap();
                (
                    StatusCode::CREATED,
                    [("location", "/payouts/1")],
                    r#"{"id":1}"#,
                )
            },
        )
        .layer(
            Idempotent::new(pool.clone(), "POST /payouts")
                .store_headers([axum::http::header::LOCATION]),
        ),
    );
    let pool = pool.clone();
    let by_hand = axum::Router::new().route(
        "/payouts",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                use sha2::Digest;
                let key = headers["idempotency-key"].to_str().unwrap().to_owned();
                let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let canonical = serde_json::to_vec(&value).unwrap();
                let fingerprint = format!("{:x}", sha2::Sha256::digest(&canonical));
                let request = Request::new("POST /payouts", key, fingerprint).unwrap();
                let lease = idempotency::DEFAULT_LEASE;
                let (ticket, mut tx) = match idempotency::begin_tx(&pool, &request, lease).await {
                    Ok(Begun::New(Work { ticket, tx })) => (ticket, tx),
                    other => panic!("{other:?}"),
                };
                sqlx::query(DB::INSERT)
                    .bind(value["id"].as_i64().unwrap())
                    .bind(1000_i64)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                let stored = vec![("location".to_owned(), "/payouts/1".to_owned())];
                ticket
                    .complete_with_headers(&mut tx, 201, stored, br#"{"id":1}"#.to_vec())
                    .await
                    .unwrap();
                tx.commit(()).await.unwrap();
                (
                    StatusCode::CREATED,
                    [("location", "/payouts/1")],
                    r#"{"id":1}"#,
                )
                    .into_response()
            },
        ),
    );
    (layered, by_hand)
}

/// One new-key request through `router`.
async fn through(router: &axum::Router, id: usize) {
    use stateguard::idempotency::layer::Service;
    let request = axum::http::Request::post("/payouts")
        .header("idempotency-key", format!("http-{id}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(format!(
            r#"{{"amount_cents":1000,"id":{id}}}"#
        )))
        .unwrap();
    let response = router.clone().call(request).await.unwrap();
    assert_eq!(response.status(), axum::http::StatusCode::CREATED);
}

async fn run<DB: Bench>(name: &str, pool: Pool<DB>, n: usize)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    setup(&pool).await;
    println!("{name}");
    let pool = &pool;
    // plain, new key (begin_tx), new key (begin), replay (begin_tx),
    // replay (begin), in requests per second, per round.
    let mut rates: [Vec<f64>; 5] = Default::default();
    let mut next = 0;
    for round in 0..ROUNDS {
        let from = next;
        next += 3 * n;
        let (together, apart) = (from + n, from + 2 * n);
        // Alternate which goes first.
        let mut order = [0, 1, 2];
        order.rotate_left(round % 3);
        for case in order {
            rates[case].push(match case {
                0 => timed(from, n, |i| plain(pool, i)).await,
                1 => {
                    timed(together, n, |i| async move {
                        assert!(!keyed(pool, i, true).await)
                    })
                    .await
                }
                _ => {
                    timed(apart, n, |i| async move {
                        assert!(!keyed(pool, i, false).await)
                    })
                    .await
                }
            });
        }
        // The keys the new-key rounds completed, replayed.
        rates[3].push(
            timed(together, n, |i| async move {
                assert!(keyed(pool, i, true).await)
            })
            .await,
        );
        rates[4].push(
            timed(
                apart,
                n,
                |i| async move { assert!(keyed(pool, i, false).await) },
            )
            .await,
        );
    }
    // The layer against the same handler by hand, alternating, paired.
    let (layered, by_hand) = routers(pool);
    let (mut ours, mut hand, mut pairs) = (vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        let (a, b) = (next, next + n);
        next += 2 * n;
        let layer = || timed(a, n, |i| through(&layered, i));
        let manual = || timed(b, n, |i| through(&by_hand, i));
        let (x, y) = match round % 2 {
            0 => {
                let x = layer().await;
                (x, manual().await)
            }
            _ => {
                let y = manual().await;
                (layer().await, y)
            }
        };
        ours.push(x);
        hand.push(y);
        pairs.push(x / y);
    }
    let (l, h, paired) = (median(ours), median(hand), median(pairs));
    let [p, n, n2, r, r2] = rates.map(median);
    println!(
        "  a new key through the layer {l:.0}/s, the same handler calling begin_tx by hand \
         {h:.0}/s: {:.3}× (paired {paired:.3})",
        l / h
    );
    println!(
        "  plain request {p:.0}/s; with a new key: begin_tx {n:.0}/s ({:.3}×), begin {n2:.0}/s \
         ({:.3}×); a replay: begin_tx {r:.0}/s ({:.3}×), begin {r2:.0}/s ({:.3}×)",
        n / p,
        n2 / p,
        r / p,
        r2 / p
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let started = Instant::now();
    support::on_sqlite(2, |pool| {
        run("SQLite (temp file, WAL, two connections)", pool, REQUESTS)
    })
    .await;

    let n = REQUESTS;
    support::on_postgres(POSTGRES, |pool| {
        run("PostgreSQL (three connections)", pool, n)
    })
    .await;
    support::on_mysql(MYSQL, |pool| {
        run("MariaDB/MySQL (three connections)", pool, n)
    })
    .await;
    let n = REQUESTS_OVER_LINK;
    let over_link = support::Place {
        delay: LINK,
        ..POSTGRES
    };
    support::on_postgres(over_link, |pool| {
        run("PostgreSQL over a link of 1 ms each way", pool, n)
    })
    .await;
    let over_link = support::Place {
        delay: LINK,
        ..MYSQL
    };
    support::on_mysql(over_link, |pool| {
        run("MariaDB/MySQL over a link of 1 ms each way", pool, n)
    })
    .await;
    println!("total {:.1} s", started.elapsed().as_secs_f64());
}
