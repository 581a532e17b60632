//! The HTTP effect against a bank in a process of its own
//! (`examples/bank.rs`, with its faults on: each key's attempts are
//! answered late after booking, then 409, then 503 with `Retry-After`,
//! then 500, then replayed), SIGKILLed again and again and started anew
//! on the same port while a `Worker` pays 30 payouts through
//! `http::HttpEffect`, its payouts on SQLite, PostgreSQL or MariaDB.
//! Every payout must be booked once, under one key, and every attempt the
//! bank saw for a key must carry the same bytes, across the kills.
//!
//! The parent test re-executes this test binary with `--exact
//! bank_crash::bank_child` and `STATEGUARD_BANK_CHILD=<port>:<file>`;
//! without that variable the child test does nothing.

#![cfg(unix)]

#[path = "../../examples/bank.rs"]
mod bank;

use std::process::Stdio;
use std::time::Duration;

use crate::common::{self, Bind, Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::http::HttpEffect;
use stateguard::key::shape::One;
use stateguard::worker::{Poll, Worker};
use stateguard::{Effect, StateMachine};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const CHILD_ENV: &str = "STATEGUARD_BANK_CHILD";
const CHILD_TEST: &str = "bank_crash::bank_child";
const READY: &str = "bank-child-ready";
const PAYOUTS: i64 = 30;
const KILLS: usize = 12;

/// A wire whose attempts outlast the bank's two-second hold on a key that
/// a crash left in progress (409 meanwhile).
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
        retry(max = 40, backoff = "50ms..1s", attempts = "attempts", next_attempt = "next_attempt_at")
    ))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// The bank's process. Does nothing unless `STATEGUARD_BANK_CHILD` is set.
#[test]
fn bank_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (port, path) = spec.split_once(':').expect("<port>:<file>");
    let port: u16 = port.parse().expect("a port");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let pool = bank::open(std::path::Path::new(path)).await.unwrap();
            // The port of the process killed a moment ago may still be
            // held for a while.
            let mut tries = 0;
            let listener = loop {
                match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                    Ok(listener) => break listener,
                    Err(error) if tries < 100 => {
                        tries += 1;
                        eprintln!("bank child: binding {port}: {error}; again");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(error) => panic!("bank child: binding {port}: {error}"),
                }
            };
            println!("{READY}");
            axum::serve(listener, bank::router(pool, true))
                .await
                .unwrap();
        });
}

/// Starts the bank on `port` with its database in `file`, and waits until
/// it listens.
async fn start_bank(port: u16, file: &std::path::Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{port}:{}", file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the bank");
    let stdout = child.stdout.take().unwrap();
    let ready = async {
        let mut lines = BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(READY) {
                // Keep reading, so that the child never blocks on a full
                // pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return;
            }
        }
        panic!("the bank ended before it listened");
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("the bank listens within 30 s");
    child
}

backend_tests! {
    "bank_crash" => a_killed_bank_still_books_each_payout_once (flavor = "multi_thread", worker_threads = 4),
}

/// The `wires` table with `PAYOUTS` pending rows.
async fn wires<DB: TestBackend>(db: &Db<DB>) {
    let (create, insert) = match DB::DIALECT {
        Dialect::Postgres => (
            "CREATE TABLE wires (id BIGINT PRIMARY KEY, status TEXT NOT NULL,
                sending_since TIMESTAMPTZ, attempts INT NOT NULL DEFAULT 0,
                next_attempt_at TIMESTAMPTZ)",
            "INSERT INTO wires (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g",
        ),
        Dialect::Sqlite => (
            "CREATE TABLE wires (id INTEGER PRIMARY KEY, status TEXT NOT NULL,
                sending_since TEXT, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at TEXT)",
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
             INSERT INTO wires (id, status) SELECT i, 'pending' FROM s",
        ),
        _ => (
            "CREATE TABLE wires (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL,
                sending_since DATETIME(3) NULL, attempts INT NOT NULL DEFAULT 0,
                next_attempt_at DATETIME(3) NULL)",
            "INSERT INTO wires (id, status)
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
             SELECT i, 'pending' FROM s",
        ),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    DB::execute(&mut conn, insert, &[Bind::Int(PAYOUTS)])
        .await
        .unwrap();
}

/// How many wires are `sent`.
async fn sent<DB: TestBackend>(pool: &sqlx::Pool<DB>) -> i64 {
    let sql = match DB::DIALECT {
        Dialect::Postgres => "SELECT COUNT(*)::BIGINT FROM wires WHERE status = 'sent'",
        Dialect::Sqlite => "SELECT COUNT(*) FROM wires WHERE status = 'sent'",
        _ => "SELECT CAST(COUNT(*) AS SIGNED) FROM wires WHERE status = 'sent'",
    };
    let mut conn = pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

async fn a_killed_bank_still_books_each_payout_once<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: common::KeyColumn<DB> + ManyKeys<DB, One>,
{
    let dir = tempfile::tempdir().unwrap();
    let bank_file = dir.path().join("bank.db");
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut bank = start_bank(port, &bank_file).await;

    wires(&db).await;

    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/transfers");
    let pay = HttpEffect::new(move |effect: &Effect<Wire, i64>| {
        client
            .post(&url)
            .json(&serde_json::json!({ "payout": effect.key(), "amount": 100 }))
    });
    let watched = db.pool.clone();
    let all_sent = async move {
        while sent(&watched).await < PAYOUTS {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let worker = tokio::spawn(
        Worker::new(db.pool.clone())
            .effects(Wire::start(), 10, 10, pay.effect())
            .poll(Poll::new(
                Duration::from_millis(5),
                Duration::from_millis(100),
            ))
            .run(all_sent),
    );

    // Kill the bank at moments spread over the run, and start it again.
    for kill in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(150 + 100 * (kill as u64 % 4))).await;
        bank.start_kill().unwrap(); // SIGKILL
        bank.wait().await.unwrap();
        bank = start_bank(port, &bank_file).await;
    }
    let report = tokio::time::timeout(Duration::from_secs(180), worker)
        .await
        .expect("every payout sent within three minutes")
        .unwrap()
        .unwrap();
    bank.start_kill().unwrap();
    bank.wait().await.unwrap();
    assert_eq!(report.loops[0].done, PAYOUTS as usize, "{report:?}");

    let books = bank::open(&bank_file).await.unwrap();
    let (booked, payouts): (i64, i64) =
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT payout) FROM ledger")
            .fetch_one(&books)
            .await
            .unwrap();
    let (keys, requests): (i64, i64) =
        sqlx::query_as("SELECT COUNT(DISTINCT key), COUNT(*) FROM requests")
            .fetch_one(&books)
            .await
            .unwrap();
    let changed: Vec<(String,)> = sqlx::query_as(
        "SELECT key FROM requests GROUP BY key HAVING COUNT(DISTINCT body_sha256) > 1",
    )
    .fetch_all(&books)
    .await
    .unwrap();
    eprintln!(
        "bank killed {KILLS} times: {booked} transfers booked for {PAYOUTS} payouts, \
         {requests} requests under {keys} keys"
    );
    assert_eq!(
        (booked, payouts),
        (PAYOUTS, PAYOUTS),
        "each payout booked once"
    );
    assert_eq!(keys, PAYOUTS, "one key per payout, on every attempt");
    // Five turns per key, and one more for each attempt a kill cut off.
    assert!(requests >= 5 * PAYOUTS, "every key went through the faults");
    assert!(
        changed.is_empty(),
        "bodies that changed between attempts: {changed:?}"
    );
}
