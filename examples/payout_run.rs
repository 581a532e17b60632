//! A nightly payout run at the database's speed: `--workers` instances of
//! the library's `Worker` move payouts `pending → sending → sent`, each
//! claiming a batch of rows per statement and running the bank calls at a
//! bounded concurrency (`finish_many`: one heartbeat and one follow-up
//! statement per batch, each row still fenced by its lease), against a
//! fake bank that answers after a set latency and moves money once per
//! idempotency key. The run ends when every payout is sent, and the
//! workers drain. Prints rows per second.
//!
//! With `--bank-url`, the workers pay through `http::HttpEffect` instead,
//! each payout's effect key as its `Idempotency-Key`, against a bank of
//! its own: `cargo run --example bank` (a service behind the library's
//! idempotency layer) prints the URL to give.
//!
//! ```text
//! cargo run --release --example payout_run                      # 100,000 payouts on embedded SQLite
//! cargo run --release --example payout_run -- --latency-ms 20   # a bank that takes 20 ms
//! cargo run --release --example payout_run -- --rows 20000 --workers 8 --claim 250 --concurrency 32
//! cargo run --example bank -- --port 8080 --db /tmp/bank.db &
//! cargo run --release --example payout_run -- --rows 2000 --bank-url http://127.0.0.1:8080/transfers
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --release --example payout_run
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run --release --example payout_run
//! ```
//!
//! Each run adds its payouts after those of earlier runs, and keeps them:
//! on PostgreSQL in a schema of the example's own, `stateguard_payout_run`;
//! on MySQL and MariaDB in the table `payout_run` of the database the URL
//! names, beside a `stateguard_payout_run` marker table (the example
//! refuses a `payout_run` table it did not create); on SQLite in a file in
//! a temporary directory, removed after the run.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::{MySql, Pool, Postgres, Sqlite};
use stateguard::http::HttpEffect;
use stateguard::worker::{Poll, Worker};
use stateguard::{Effect, StateMachine, Verdict};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "payout_run",
    column = "status",
    key = "id",
    key_type = "i64",
    version = "version"
)]
enum Payout {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const USAGE: &str = "usage: payout_run [--rows N] [--latency-ms MS] [--workers N] [--claim N] \
                     [--concurrency N] [--bank-url URL]";

/// What the run is asked to do.
#[derive(Debug, Clone, Copy)]
struct Plan {
    rows: i64,
    latency: Duration,
    workers: usize,
    claim: u32,
    concurrency: usize,
    /// Pay through this bank over HTTP, instead of the fake one.
    bank_url: Option<&'static str>,
}

impl Plan {
    fn from_args() -> Result<Option<Plan>, BoxError> {
        let mut plan = Plan {
            rows: 100_000,
            latency: Duration::ZERO,
            workers: 8,
            claim: 250,
            concurrency: 32,
            bank_url: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                println!("{USAGE}");
                return Ok(None);
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
            let number = |what: &str| -> Result<u64, BoxError> {
                value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0 || what == "--latency-ms")
                    .ok_or_else(|| format!("{what} takes a positive number, got {value:?}").into())
            };
            if flag == "--bank-url" {
                // Lives for the run.
                plan.bank_url = Some(Box::leak(value.into_boxed_str()));
                continue;
            }
            match flag.as_str() {
                "--rows" => plan.rows = i64::try_from(number("--rows")?.min(10_000_000))?,
                "--latency-ms" => plan.latency = Duration::from_millis(number("--latency-ms")?),
                "--workers" => plan.workers = usize::try_from(number("--workers")?.min(256))?,
                "--claim" => plan.claim = u32::try_from(number("--claim")?.min(10_000))?,
                "--concurrency" => {
                    plan.concurrency = usize::try_from(number("--concurrency")?.min(10_000))?;
                }
                other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
            }
        }
        Ok(Some(plan))
    }
}

/// A fake bank: it answers after `latency`, and moves money once per
/// idempotency key, as a real provider's idempotency keys make it do.
struct Bank {
    latency: Duration,
    transfers: Mutex<HashSet<String>>,
    calls: Mutex<u64>,
}

impl Bank {
    async fn pay(&self, effect: Effect<Payout, i64>) -> Verdict<Payout> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        *self.calls.lock().unwrap() += 1;
        self.transfers
            .lock()
            .unwrap()
            .insert(effect.effect_key().to_owned());
        Verdict::done()
    }
}

/// The statements that differ between backends.
trait Store: stateguard::bounds::Batched {
    /// Payouts `$1..=$2`, pending.
    const SEED: &'static str;
    const NEXT_ID: &'static str;
    const SENT: &'static str;
}

impl Store for Sqlite {
    const SEED: &'static str = "WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g \
                                WHERE i < ?2) INSERT INTO payout_run (id) SELECT i FROM g";
    const NEXT_ID: &'static str = "SELECT COALESCE(MAX(id), 0) + 1 FROM payout_run";
    const SENT: &'static str =
        "SELECT COUNT(*) FROM payout_run WHERE status = 'sent' AND id BETWEEN ?1 AND ?2";
}

impl Store for Postgres {
    const SEED: &'static str =
        "INSERT INTO payout_run (id) SELECT g FROM generate_series($1::BIGINT, $2) g";
    const NEXT_ID: &'static str = "SELECT COALESCE(MAX(id), 0) + 1 FROM payout_run";
    const SENT: &'static str =
        "SELECT COUNT(*) FROM payout_run WHERE status = 'sent' AND id BETWEEN $1 AND $2";
}

impl Store for MySql {
    // Digits crossed (MySQL caps recursion), ten thousand at a time.
    const SEED: &'static str = "INSERT INTO payout_run (id) SELECT ? + n FROM (SELECT a.d + 10 * \
        b.d + 100 * c.d + 1000 * e.d AS n FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL \
        SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 \
        UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a, (SELECT 0 AS d UNION ALL \
        SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
        UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b, (SELECT 0 \
        AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION \
        ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) \
        c, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL \
        SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
        UNION ALL SELECT 9) e) s WHERE ? + n <= ?";
    const NEXT_ID: &'static str = "SELECT CAST(COALESCE(MAX(id), 0) + 1 AS SIGNED) FROM payout_run";
    const SENT: &'static str = "SELECT CAST(COUNT(*) AS SIGNED) FROM payout_run WHERE status = \
                                'sent' AND id BETWEEN ? AND ?";
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Some(plan) = Plan::from_args()? else {
        return Ok(());
    };
    let connections = u32::try_from(plan.workers + 2)?;
    match std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        Some(url) if url.starts_with("postgres") => {
            let admin = sqlx::PgPool::connect(&url).await?;
            sqlx::query("CREATE SCHEMA IF NOT EXISTS stateguard_payout_run")
                .execute(&admin)
                .await?;
            admin.close().await;
            let options = sqlx::postgres::PgConnectOptions::from_str(&url)?
                .options([("search_path", "stateguard_payout_run")]);
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(connections)
                .connect_with(options)
                .await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS payout_run (id BIGINT PRIMARY KEY, status TEXT NOT \
                 NULL DEFAULT 'pending', version BIGINT NOT NULL DEFAULT 0, sending_since \
                 TIMESTAMPTZ, sent_at TIMESTAMPTZ)",
            )
            .execute(&pool)
            .await?;
            // Claims find pending rows, oldest first, through this index.
            sqlx::query(
                "CREATE INDEX IF NOT EXISTS payout_run_by_status ON payout_run (status, id)",
            )
            .execute(&pool)
            .await?;
            run(pool, "PostgreSQL", plan).await
        }
        Some(url) if url.starts_with("mysql") => {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(connections)
                .connect(&url)
                .await?;
            // The table is the example's own only beside its marker.
            let tables: Vec<String> = sqlx::query_scalar(
                "SELECT CAST(table_name AS CHAR) FROM information_schema.tables WHERE \
                 table_schema = DATABASE() AND table_name IN ('payout_run', \
                 'stateguard_payout_run')",
            )
            .fetch_all(&pool)
            .await?;
            let ours = tables.iter().any(|t| t == "stateguard_payout_run");
            if tables.iter().any(|t| t == "payout_run") && !ours {
                return Err(
                    "a table `payout_run` exists that this example did not create; \
                            it is left alone"
                        .into(),
                );
            }
            if !ours {
                sqlx::query("CREATE TABLE stateguard_payout_run (note VARCHAR(64))")
                    .execute(&pool)
                    .await?;
                sqlx::query(
                    "CREATE TABLE payout_run (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL \
                     DEFAULT 'pending', version BIGINT NOT NULL DEFAULT 0, sending_since \
                     DATETIME(3) NULL, sent_at DATETIME(3) NULL, INDEX (status, id))",
                )
                .execute(&pool)
                .await?;
            }
            run(pool, "MySQL/MariaDB", plan).await
        }
        Some(other) => Err(format!(
            "DATABASE_URL must start with postgres:// or mysql:// (or be unset for SQLite), got \
             {other:?}"
        )
        .into()),
        None => {
            let dir = tempfile_dir()?;
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(dir.join("payout_run.db"))
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(30));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(connections)
                .connect_with(options)
                .await?;
            sqlx::query(
                "CREATE TABLE payout_run (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT \
                 'pending', version INTEGER NOT NULL DEFAULT 0, sending_since TEXT, sent_at TEXT)",
            )
            .execute(&pool)
            .await?;
            sqlx::query("CREATE INDEX payout_run_by_status ON payout_run (status, id)")
                .execute(&pool)
                .await?;
            let result = run(pool, "SQLite (embedded)", plan).await;
            std::fs::remove_dir_all(&dir).ok();
            result
        }
    }
}

/// A directory of this run's own.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("stateguard-payout-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn run<DB: Store>(pool: Pool<DB>, label: &str, plan: Plan) -> Result<(), BoxError>
where
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    let (first,): (i64,) = sqlx::query_as(DB::NEXT_ID).fetch_one(&pool).await?;
    let last = first + plan.rows - 1;
    for from in (first..=last).step_by(10_000) {
        let to = (from + 9_999).min(last);
        // MySQL's statement takes the first id twice.
        let seed = match DB::SEED.matches('?').count() {
            3 => sqlx::query(DB::SEED).bind(from).bind(from).bind(to),
            _ => sqlx::query(DB::SEED).bind(from).bind(to),
        };
        seed.execute(&pool).await?;
    }
    let bank = std::sync::Arc::new(Bank {
        latency: plan.latency,
        transfers: Mutex::new(HashSet::new()),
        calls: Mutex::new(0),
    });
    println!(
        "stateguard payout run on {label}: {} payouts, {} workers claiming {} at a time, {} bank \
         calls at once each, bank latency {:?}",
        plan.rows, plan.workers, plan.claim, plan.concurrency, plan.latency
    );
    let started = Instant::now();
    // Every worker stops once every payout of the run is sent.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    for _ in 0..plan.workers {
        let bank = bank.clone();
        let mut stopped = stopped.clone();
        let worker = Worker::new(pool.clone());
        let worker = match plan.bank_url {
            // The bank over HTTP: the effect key as the Idempotency-Key,
            // the body made from the row alone.
            Some(url) => {
                let client = client.clone();
                let pay = HttpEffect::new(move |effect: &Effect<Payout, i64>| {
                    client
                        .post(url)
                        .json(&serde_json::json!({ "payout": effect.key(), "amount": 100 }))
                });
                worker.effects(Payout::start(), plan.claim, plan.concurrency, pay.effect())
            }
            None => worker.effects(
                Payout::start(),
                plan.claim,
                plan.concurrency,
                move |effect: Effect<Payout, i64>| {
                    let bank = bank.clone();
                    async move { bank.pay(effect).await }
                },
            ),
        }
        .poll(Poll::new(
            Duration::from_millis(1),
            Duration::from_millis(50),
        ));
        workers.push(tokio::spawn(worker.run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })));
    }
    let stored = loop {
        let (stored,): (i64,) = sqlx::query_as(DB::SENT)
            .bind(first)
            .bind(last)
            .fetch_one(&pool)
            .await?;
        if stored == plan.rows {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let elapsed = started.elapsed();
    stop.send(true)?;
    let mut sent = 0;
    for worker in workers {
        let report = worker.await??;
        for lp in report.loops {
            sent += lp.done;
            if let Some(error) = lp.last_error {
                // Left in flight: the worker's recovery finished it, with
                // the same idempotency key.
                eprintln!("{} errors, the last: {error}", lp.errors);
            }
        }
    }
    if let Some(url) = plan.bank_url {
        println!("  payouts sent:          {sent} ({stored} stored as sent), paid at {url}");
        println!(
            "  elapsed:               {:.2} s, {:.0} payouts/s",
            elapsed.as_secs_f64(),
            sent as f64 / elapsed.as_secs_f64()
        );
        return match stored == plan.rows {
            true => Ok(()),
            false => Err(format!("expected {} payouts sent, got {stored}", plan.rows).into()),
        };
    }
    let transfers = bank.transfers.lock().unwrap().len();
    let calls = *bank.calls.lock().unwrap();
    println!("  payouts sent:          {sent} ({stored} stored as sent)");
    println!("  bank calls:            {calls}, transfers {transfers}");
    println!(
        "  elapsed:               {:.2} s, {:.0} payouts/s",
        elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64()
    );
    // Payouts an earlier, interrupted run left pending are sent too.
    if stored != plan.rows || (transfers as i64) < plan.rows || calls != transfers as u64 {
        return Err(format!(
            "expected {} payouts sent once each, got {stored} sent, {transfers} transfers, {calls} \
             calls",
            plan.rows
        )
        .into());
    }
    Ok(())
}
