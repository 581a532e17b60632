//! What an idempotency key costs a request, in one process, on one
//! connection, in alternating rounds, as requests per second:
//!
//! - plain: the request without a key, `BEGIN; INSERT` the payout`; COMMIT`
//!   (three round trips);
//! - new key: `idempotency::begin` (one statement on PostgreSQL), then the
//!   same transaction with `Ticket::complete` before its `COMMIT` (five
//!   round trips: the claim, `BEGIN`, the insert, the response, `COMMIT`);
//! - replay: `idempotency::begin` on a completed key (one round trip on
//!   PostgreSQL, two on MySQL and SQLite: the claim, then the read).
//!
//! PostgreSQL (`STATEGUARD_POSTGRES_URL`, in the schema
//! `stateguard_bench_idempotency`, made anew) and MariaDB/MySQL
//! (`STATEGUARD_MYSQL_URL`, in the database of that name) run
//! when their URLs are set; SQLite (a temporary file, WAL) always.
//!
//! Run with `cargo bench --bench idempotency`.

use std::time::{Duration, Instant};

mod support;

/// The bench's own schema (PostgreSQL) and database (MySQL).
const POSTGRES: support::Place = support::Place {
    name: "stateguard_bench_idempotency",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_bench_idempotency CASCADE",
        "CREATE SCHEMA stateguard_bench_idempotency",
    ],
    drop: "DROP SCHEMA stateguard_bench_idempotency CASCADE",
};
const MYSQL: support::Place = support::Place {
    name: "stateguard_bench_idempotency",
    fresh: [
        "DROP DATABASE IF EXISTS stateguard_bench_idempotency",
        "CREATE DATABASE stateguard_bench_idempotency",
    ],
    drop: "DROP DATABASE stateguard_bench_idempotency",
};

use sqlx::Pool;
use stateguard::idempotency::{self, Begun, Request};
use stateguard::{Backend, Committed, Executor, Tx, Uncommitted};

const REQUESTS: usize = 300;
const ROUNDS: usize = 6;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

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

/// Requests per second of `REQUESTS` calls of `one(i)` for `from..`.
async fn timed<F, Fut>(from: usize, one: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let started = Instant::now();
    for i in from..from + REQUESTS {
        one(i).await;
    }
    REQUESTS as f64 / started.elapsed().as_secs_f64()
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

/// The keyed request: `true` when it was a replay.
async fn keyed<DB: Bench>(pool: &Pool<DB>, id: usize) -> bool
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    for<'t, 'c> &'t mut Tx<'c, DB>: Executor<Database = DB, Commit = Uncommitted>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let request = Request::new("bench:POST /payouts", format!("key-{id}"), "amount=1000").unwrap();
    let begun = idempotency::begin(pool, &request, idempotency::DEFAULT_LEASE)
        .await
        .unwrap();
    let ticket = match begun {
        Begun::New(ticket) => ticket,
        Begun::Replay(_) => return true,
        other => panic!("{other:?}"),
    };
    let mut tx = Tx::begin(pool).await.unwrap();
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

async fn run<DB: Bench>(name: &str, pool: Pool<DB>)
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    for<'t, 'c> &'t mut Tx<'c, DB>: Executor<Database = DB, Commit = Uncommitted>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    setup(&pool).await;
    println!("{name}");
    let pool = &pool;
    let (mut plains, mut news, mut replays) = (vec![], vec![], vec![]);
    let mut next = 0;
    for round in 0..ROUNDS {
        let from = next;
        next += 2 * REQUESTS;
        let plain_round = timed(from, |i| plain(pool, i));
        let new_round = timed(from + REQUESTS, |i| async move {
            assert!(!keyed(pool, i).await);
        });
        // Alternate which goes first.
        let (p, n) = if round % 2 == 0 {
            let p = plain_round.await;
            (p, new_round.await)
        } else {
            let n = new_round.await;
            (plain_round.await, n)
        };
        plains.push(p);
        news.push(n);
        // The keys the new-key round completed, replayed.
        replays.push(
            timed(from + REQUESTS, |i| async move {
                assert!(keyed(pool, i).await);
            })
            .await,
        );
    }
    let (p, n, r) = (median(plains), median(news), median(replays));
    println!(
        "  plain request {p:.0}/s; with a new key {n:.0}/s ({:.3}×); a replay {r:.0}/s ({:.3}×)",
        n / p,
        r / p
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("idempotency.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    run("SQLite (temp file, WAL, one connection)", pool).await;

    support::on_postgres(POSTGRES, |pool| run("PostgreSQL (one connection)", pool)).await;
    support::on_mysql(MYSQL, |pool| run("MariaDB/MySQL (one connection)", pool)).await;
    println!("total {:.1} s", started.elapsed().as_secs_f64());
}
