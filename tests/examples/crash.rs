//! Crash test with real processes: a worker running the reference payout
//! workflow (`examples/recovery/workflow.rs`, which claims pending payouts
//! a batch at a time) is SIGKILLed at random moments, often in the middle
//! of a claimed batch, at least 100 times per backend, and a last one is
//! let run to completion. The children take turns: one finishes its
//! payouts one by one (`Won::finish`, `recover`), the next as batches
//! (`finish_many`, `recover_many`, whose follow-ups wait for the batch),
//! the next runs the library's `Worker` (a third of the kills, at least
//! 32), and the last child is a `Worker` too. Every payout must end `sent`
//! with its money moved exactly once, and every kill may have cost at most
//! the bank calls whose answers were not yet written: one for a child that
//! finishes one by one, a batch's (at most `RECOVER_BATCH`) for one that
//! batches or runs a `Worker`.
//!
//! How it runs: the parent tests (`crash_sqlite`, `crash_postgres`,
//! `crash_mysql`) re-execute this test binary with `--exact
//! crash::crash_child` and `STATEGUARD_CRASH_CHILD=sqlite|postgres|mysql`
//! plus `STATEGUARD_CRASH_DB` (the SQLite file or the server's URL).
//! `crash_child` is the worker process; without `STATEGUARD_CRASH_CHILD` it
//! does nothing, so it passes trivially in a normal `cargo test`.
//!
//! `crash_postgres` reads `STATEGUARD_POSTGRES_URL` and works in the schema
//! `sg_crash`; `crash_mysql` reads `STATEGUARD_MYSQL_URL` and works in the
//! database `sg_crash`. Without its URL each prints why it was skipped and
//! passes, unless `STATEGUARD_REQUIRE_SERVERS=1` turns that into a failure.

#![cfg(unix)]

#[path = "../../examples/recovery/workflow.rs"]
mod workflow;

use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, Pool};

use stateguard::StateMachine;
use workflow::{Bank, Finishing, Store, Tally};

/// Which backend the child runs on; unset in every process but a child.
const CHILD_ENV: &str = "STATEGUARD_CRASH_CHILD";
/// The SQLite file or the server's URL the child connects to.
const CHILD_DB_ENV: &str = "STATEGUARD_CRASH_DB";
/// How the child finishes its payouts: `batched` (`finish_many`,
/// `recover_many`), `worker` (`stateguard::worker::Worker`), or, unset,
/// one by one. The children take turns.
const CHILD_BATCHED_ENV: &str = "STATEGUARD_CRASH_BATCHED";
/// The batched children's bank calls at once.
const BATCH_CONCURRENCY: usize = 4;
/// The child test's name, for `--exact`: its path in the `examples` test
/// binary.
const CHILD_TEST: &str = "crash::crash_child";
const SCHEMA: &str = "sg_crash";
/// What the child prints once connected. libtest writes `test
/// crash::crash_child ... ` without a newline just before, so the parent
/// looks for it anywhere in a line.
const READY: &str = "crash-child-ready";
/// What the child's summary line starts with.
const DONE: &str = "crash-child-done:";

const KILLS: usize = 100;
/// Each kill lands this long after the child said it is ready, at random.
const MAX_KILL_DELAY_MS: u64 = 25;
/// Payouts seeded at first, and added whenever fewer than `LOW_WATER` are
/// still pending, so that the children never run out of work.
const SEED: i64 = 40;
const LOW_WATER: i64 = 10;
const TOP_UP: i64 = 20;
/// Time a bank request and its answer each spend on the wire, so that
/// some kills land between the money moving and the answer arriving.
const BANK_LATENCY: Duration = Duration::from_millis(1);
/// Limits that keep each backend's test well under a minute.
const KILL_PHASE_BUDGET: Duration = Duration::from_secs(40);
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const FINAL_RUN_TIMEOUT: Duration = Duration::from_secs(15);

/// Prints past libtest's output capture.
fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

fn require_servers() -> bool {
    std::env::var("STATEGUARD_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// The server URL in `var`, or `None` after saying why `test` is skipped.
fn server_url(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !require_servers(),
                "{var} is unset but STATEGUARD_REQUIRE_SERVERS=1: `{test}` needs that server"
            );
            say(&format!("skipped `{test}`: {var} is unset"));
            None
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn sqlite_pool(path: &str, create: bool) -> sqlx::SqlitePool {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(create)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("open SQLite at {path}: {e}"))
}

async fn mysql_pool(url: &str) -> sqlx::MySqlPool {
    let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
        .expect("MySQL URL")
        .database(SCHEMA);
    sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("connect to MySQL at {url}: {e}"))
}

async fn postgres_pool(url: &str) -> sqlx::PgPool {
    let options = PgConnectOptions::from_str(url)
        .expect("PostgreSQL URL")
        .options([("search_path", SCHEMA)]);
    PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("connect to PostgreSQL at {url}: {e}"))
}

/// The worker process. Does nothing unless `STATEGUARD_CRASH_CHILD` is set:
/// only the parent tests below set it, when they run this binary as a
/// child with `--exact crash::crash_child`.
#[test]
fn crash_child() {
    let Ok(backend) = std::env::var(CHILD_ENV) else {
        return;
    };
    let target = std::env::var(CHILD_DB_ENV).expect("STATEGUARD_CRASH_DB is set for a child");
    runtime().block_on(async {
        match backend.as_str() {
            "sqlite" => work(sqlite_pool(&target, false).await).await,
            "postgres" => work(postgres_pool(&target).await).await,
            "mysql" => work(mysql_pool(&target).await).await,
            other => panic!("{CHILD_ENV}={other:?}: expected sqlite, postgres or mysql"),
        }
    });
}

/// One worker, so that a kill interrupts at most one bank call, or one
/// batch's.
async fn work<DB: Store>(pool: Pool<DB>)
where
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    println!("{READY}");
    let bank = Bank::new(pool.clone(), BANK_LATENCY);
    let finishing = match std::env::var(CHILD_BATCHED_ENV).as_deref() {
        Ok("worker") => Finishing::Worker {
            concurrency: BATCH_CONCURRENCY,
        },
        Ok(_) => Finishing::Batched {
            concurrency: BATCH_CONCURRENCY,
        },
        Err(_) => Finishing::OneByOne,
    };
    let worked = workflow::run_worker(&pool, &bank, finishing)
        .await
        .expect("the worker loop");
    println!(
        "{DONE} started {}, recovered {}, sent {}, left to recovery {}",
        worked.started, worked.recovered, worked.sent, worked.retry_later
    );
}

/// How a child finishes its payouts, as [`CHILD_BATCHED_ENV`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    OneByOne,
    Batched,
    Worker,
}

/// A child process, killed and reaped if the parent panics.
struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
}

impl ChildProcess {
    fn spawn(backend: &str, target: &str, finishing: Mode) -> Self {
        let exe = std::env::current_exe().expect("path of the test binary");
        let mut command = Command::new(exe);
        match finishing {
            Mode::OneByOne => {}
            Mode::Batched => {
                command.env(CHILD_BATCHED_ENV, "batched");
            }
            Mode::Worker => {
                command.env(CHILD_BATCHED_ENV, "worker");
            }
        }
        let mut child = command
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, backend)
            .env(CHILD_DB_ENV, target)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProcess { child, lines }
    }

    /// Waits for the child to say it has connected.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(READY) => return,
                Ok(line) => seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "child not ready after {READY_TIMEOUT:?}; it said:\n{}",
                        seen.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().expect("reap the child");
                    panic!(
                        "child exited before it was ready ({status}); it said:\n{}",
                        seen.join("\n")
                    );
                }
            }
        }
    }

    /// SIGKILLs the child; true if the signal is what ended it (it may have
    /// finished all work and exited first).
    fn kill(&mut self) -> bool {
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("reap the child");
        match status.signal() {
            Some(9) => true,
            Some(signal) => panic!("child died of signal {signal}"),
            None => {
                assert!(status.success(), "child failed: {status}");
                false
            }
        }
    }

    /// Lets the child run to completion and returns its output lines.
    fn finish(&mut self) -> Vec<String> {
        let deadline = Instant::now() + FINAL_RUN_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the final child did not finish within {FINAL_RUN_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        let lines: Vec<String> = self.lines.iter().collect();
        assert!(
            status.success(),
            "the final child failed: {status}\n{}",
            lines.join("\n")
        );
        lines
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Uniform in `0..=MAX_KILL_DELAY_MS` milliseconds. Each `RandomState` is
/// freshly keyed, which is all the randomness this needs.
fn kill_delay() -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_millis(random % (MAX_KILL_DELAY_MS + 1))
}

/// The parent's side: seed, kill children at random at least `KILLS`
/// times, let a last child finish, and check the books.
async fn crash_and_recover<DB: Store>(pool: &Pool<DB>, backend: &str, target: &str)
where
    i64: stateguard::bounds::Key<DB>,
{
    DB::create_tables(pool).await.expect("create tables");
    DB::seed(pool, 1, SEED).await.expect("seed");
    let mut last_id = SEED;

    let started = Instant::now();
    let mut kills = 0;
    let mut spawned = 0;
    let (mut owed, mut batched_kills, mut worker_kills) = (0_i64, 0, 0);
    while kills < KILLS && started.elapsed() < KILL_PHASE_BUDGET {
        let tally = DB::tally(pool).await.expect("tally");
        if tally.pending < LOW_WATER {
            DB::seed(pool, last_id + 1, last_id + TOP_UP)
                .await
                .expect("top up");
            last_id += TOP_UP;
        }
        let mode = [Mode::OneByOne, Mode::Batched, Mode::Worker][spawned % 3];
        let mut child = ChildProcess::spawn(backend, target, mode);
        spawned += 1;
        child.wait_ready();
        std::thread::sleep(kill_delay());
        if child.kill() {
            kills += 1;
            // What the kill may cost: the bank calls whose answers were
            // not yet written.
            owed += match mode {
                Mode::OneByOne => 1,
                // A batch of a recovery, or a worker's claim or recovery.
                Mode::Batched | Mode::Worker => {
                    i64::from(workflow::RECOVER_BATCH.max(workflow::CLAIM_BATCH))
                }
            };
            batched_kills += usize::from(mode == Mode::Batched);
            worker_kills += usize::from(mode == Mode::Worker);
        }
    }
    let kill_phase = started.elapsed();

    let before: Tally = DB::tally(pool).await.expect("tally");
    // The last child is a `Worker`: it must see every payout through.
    let mut last = ChildProcess::spawn(backend, target, Mode::Worker);
    last.wait_ready();
    let final_started = Instant::now();
    let output = last.finish();
    let final_run = final_started.elapsed();
    let after: Tally = DB::tally(pool).await.expect("tally");

    say(&format!(
        "crash test on {backend}: {kills} kills ({batched_kills} batching, {worker_kills} workers) \
         of {spawned} children \
         in {kill_phase:.2?}\n  \
         payouts {}, sent {}, bank raw calls {}, distinct transfers {}, repeated calls {}, \
         refusals retried {}\n  \
         final run: {} left in sending and {} pending, all finished in {final_run:.2?} ({})",
        after.payouts,
        after.sent,
        after.raw_calls,
        after.transfers,
        after.raw_calls - after.transfers,
        after.refusals,
        before.sending,
        before.pending,
        output
            .iter()
            .find_map(|line| line.split_once(DONE))
            .map_or("no summary", |(_, summary)| summary.trim()),
    ));

    assert!(
        kills >= KILLS,
        "only {kills} kills in {kill_phase:.2?} ({spawned} children)"
    );
    assert_eq!(
        (after.sent, after.pending, after.sending, after.failed),
        (after.payouts, 0, 0, 0),
        "every payout ends sent: {after:?}"
    );
    assert_eq!(
        after.not_exactly_once, 0,
        "payouts whose money moved other than exactly once: {after:?}"
    );
    assert_eq!(after.transfers, after.payouts, "one transfer per payout");
    // Retries ran (the bank turned every fifth payout's first request
    // away), and every attempt the bank saw was counted, kills or not.
    assert!(after.refusals > 0, "no retries ran: {after:?}");
    assert_eq!(
        after.uncounted, 0,
        "attempts the bank saw but no row counted: {after:?}"
    );
    let repeated = after.raw_calls - after.payouts;
    assert!(
        (0..=owed).contains(&repeated),
        "{repeated} repeated bank calls for {kills} kills ({batched_kills} of children that \
         batch), at most {owed} owed: {after:?}"
    );
    assert!(
        batched_kills >= KILLS / 3 - 1,
        "too few kills of batching children"
    );
    assert!(
        worker_kills >= KILLS / 3 - 1,
        "too few kills of children running a `Worker`"
    );
    // Every payout's history reads pending -> sending -> sent, with no
    // gap and no duplicate, however often its worker was killed.
    for id in 1..=after.payouts {
        let history = workflow::PayoutStatus::MACHINE
            .history(pool, id)
            .await
            .expect("read history");
        let moves: Vec<(&str, &str, &str, i64)> = history
            .iter()
            .map(|row| {
                (
                    row.transition.name(),
                    row.from.as_str(),
                    row.to.as_str(),
                    row.occurrence,
                )
            })
            .collect();
        assert_eq!(
            moves,
            [
                ("start", "pending", "sending", 1),
                ("confirm", "sending", "sent", 2)
            ],
            "payout {id}"
        );
    }
}

#[test]
fn crash_sqlite() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("crash.db");
    let path = path.to_str().expect("UTF-8 temporary path");
    runtime().block_on(async {
        let pool = sqlite_pool(path, true).await;
        crash_and_recover(&pool, "sqlite", path).await;
        pool.close().await;
    });
}

#[test]
fn crash_postgres() {
    let Some(url) = server_url("STATEGUARD_POSTGRES_URL", "crash_postgres") else {
        return;
    };
    runtime().block_on(async {
        let mut admin = sqlx::PgConnection::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to PostgreSQL at {url}: {e}"));
        for statement in [
            "DROP SCHEMA IF EXISTS sg_crash CASCADE",
            "CREATE SCHEMA sg_crash",
        ] {
            sqlx::query(statement)
                .execute(&mut admin)
                .await
                .expect("make schema");
        }
        admin.close().await.ok();
        let pool = postgres_pool(&url).await;
        crash_and_recover(&pool, "postgres", &url).await;
        pool.close().await;
    });
}

#[test]
fn crash_mysql() {
    let Some(url) = server_url("STATEGUARD_MYSQL_URL", "crash_mysql") else {
        return;
    };
    runtime().block_on(async {
        let mut admin = sqlx::MySqlConnection::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to MySQL at {url}: {e}"));
        for statement in [
            "DROP DATABASE IF EXISTS sg_crash",
            "CREATE DATABASE sg_crash",
        ] {
            sqlx::query(statement)
                .execute(&mut admin)
                .await
                .expect("make database");
        }
        admin.close().await.ok();
        let pool = mysql_pool(&url).await;
        crash_and_recover(&pool, "mysql", &url).await;
        pool.close().await;
    });
}
