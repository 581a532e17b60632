//! A payout run: workers claim batches of pending payouts, a fake bank
//! counts the calls it receives, and then every worker replays `start` on
//! every payout and replayed bank confirmations arrive. Exactly one worker
//! wins each payout, so the bank is called once per payout however many
//! workers and replays there are.
//!
//! ```text
//! cargo run --example payouts                      # embedded SQLite, no setup
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --example payouts
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run --example payouts   # MariaDB or MySQL
//! ```
//!
//! Each run adds its own 100 payouts after those of earlier runs, so the
//! data of a run stays for the next one to find. On PostgreSQL they live in
//! a schema of the example's own, `stateguard_example`, in the database the
//! URL names; on MySQL and MariaDB in the database the URL names, in a
//! `payouts` table beside a `stateguard_example` marker table (the example
//! refuses to touch a `payouts` table it did not create); on SQLite in a
//! file in a temporary directory, removed after the run. Each table is
//! created when it is missing; only `--reset` drops the example's own
//! schema (PostgreSQL) or its two tables (MySQL and MariaDB) first.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::{PgPool, Pool};
use stateguard::bounds::Batched;
use stateguard::{Backend, Outcome};

mod status;

use status::PayoutStatus;

const PAYOUTS: i64 = 100;
const WORKERS: usize = 8;
/// Every tenth payout is cancelled by its owner before the run starts.
const CANCEL_EVERY: i64 = 10;
/// Payouts a worker claims at a time.
const BATCH: u32 = 10;
/// Payout `id` is for `id * 1000` cents; `start`'s guard lets through at
/// most this many (`amount_cents <= 95000` in `status.rs`).
const LIMIT_CENTS: i64 = 95_000;

/// Stands in for the bank's API: it only counts what it is asked to do.
#[derive(Default)]
struct Bank {
    transfers: AtomicUsize,
}

impl Bank {
    /// Moves the money and answers with the bank's reference.
    async fn transfer(&self, payout: i64) -> String {
        tokio::time::sleep(Duration::from_millis(1)).await;
        self.transfers.fetch_add(1, Ordering::SeqCst);
        format!("tr_{payout:05}")
    }
}

#[derive(Default)]
struct Report {
    sent: AtomicUsize,
    sent_in_run: AtomicUsize,
    lost_races: AtomicUsize,
    found_sent: AtomicUsize,
    found_cancelled: AtomicUsize,
    batches: AtomicUsize,
    over_limit: AtomicUsize,
    replays_already_sent: AtomicUsize,
}

const USAGE: &str = "usage: payouts [--reset]";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut reset = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--reset" => reset = true,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
        }
    }
    let url = std::env::var("DATABASE_URL").ok();
    match url.as_deref() {
        Some(url) if url.starts_with("postgres") => {
            // A schema of the example's own, kept across runs.
            let admin = PgPool::connect(url).await?;
            if reset {
                sqlx::query("DROP SCHEMA IF EXISTS stateguard_example CASCADE")
                    .execute(&admin)
                    .await?;
            }
            sqlx::query("CREATE SCHEMA IF NOT EXISTS stateguard_example")
                .execute(&admin)
                .await?;
            admin.close().await;
            let options = sqlx::postgres::PgConnectOptions::from_str(url)?
                .options([("search_path", "stateguard_example")]);
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(WORKERS as u32)
                .connect_with(options)
                .await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS payouts (
                    id BIGINT PRIMARY KEY,
                    amount_cents BIGINT NOT NULL,
                    status TEXT NOT NULL DEFAULT 'pending',
                    sent_at TIMESTAMPTZ,
                    bank_ref TEXT
                )",
            )
            .execute(&pool)
            .await?;
            let first = next_id(&pool, "SELECT COALESCE(MAX(id), 0) + 1 FROM payouts").await?;
            sqlx::query(
                "INSERT INTO payouts (id, amount_cents)
                 SELECT $1 + g - 1, 1000 * g FROM generate_series(1, 100) g",
            )
            .bind(first)
            .execute(&pool)
            .await?;
            run(pool, "PostgreSQL", first).await
        }
        Some(url) if url.starts_with("mysql") || url.starts_with("mariadb") => {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let options = sqlx::mysql::MySqlConnectOptions::from_str(&url)?;
            if options.get_database().is_none() {
                return Err(format!(
                    "DATABASE_URL {url:?} names no database: add one, as in \
                     mysql://root@127.0.0.1:3306/test"
                )
                .into());
            }
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(WORKERS as u32)
                .connect_with(options)
                .await?;
            // The marker says that `payouts` is the example's: a database
            // with a `payouts` table of its own is left alone.
            let tables = |name: &'static str| {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.tables
                     WHERE table_schema = DATABASE() AND table_name = ?",
                )
                .bind(name)
            };
            let marked = tables("stateguard_example").fetch_one(&pool).await? == 1;
            let payouts = tables("payouts").fetch_one(&pool).await? == 1;
            if payouts && !marked {
                return Err(
                    "the database already has a `payouts` table that this example \
                            did not create: point DATABASE_URL at another database"
                        .into(),
                );
            }
            if reset {
                for statement in [
                    "DROP TABLE IF EXISTS payouts",
                    "DROP TABLE IF EXISTS stateguard_example",
                ] {
                    sqlx::query(statement).execute(&pool).await?;
                }
            }
            for statement in [
                "CREATE TABLE IF NOT EXISTS stateguard_example (
                    note VARCHAR(128) NOT NULL
                )",
                "CREATE TABLE IF NOT EXISTS payouts (
                    id BIGINT PRIMARY KEY,
                    amount_cents BIGINT NOT NULL,
                    status VARCHAR(32) NOT NULL DEFAULT 'pending',
                    sent_at DATETIME(3) NULL,
                    bank_ref VARCHAR(64) NULL
                )",
            ] {
                sqlx::query(statement).execute(&pool).await?;
            }
            let first = next_id(&pool, "SELECT COALESCE(MAX(id), 0) + 1 FROM payouts").await?;
            sqlx::query(
                "INSERT INTO payouts (id, amount_cents)
                 WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 100)
                 SELECT ? + i - 1, 1000 * i FROM g",
            )
            .bind(first)
            .execute(&pool)
            .await?;
            run(pool, "MySQL/MariaDB", first).await
        }
        Some(other) => Err(format!(
            "DATABASE_URL must start with postgres:// or mysql:// (or be unset for SQLite), \
             got {other:?}"
        )
        .into()),
        None => {
            let dir =
                std::env::temp_dir().join(format!("stateguard-payouts-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(dir.join("payouts.db"))
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(WORKERS as u32)
                .connect_with(options)
                .await?;
            for statement in [
                "CREATE TABLE payouts (
                    id INTEGER PRIMARY KEY,
                    amount_cents INTEGER NOT NULL,
                    status TEXT NOT NULL DEFAULT 'pending',
                    sent_at TEXT,
                    bank_ref TEXT
                )",
                "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < 100)
                 INSERT INTO payouts (id, amount_cents) SELECT i, 1000 * i FROM g",
            ] {
                sqlx::query(statement).execute(&pool).await?;
            }
            let result = run::<sqlx::Sqlite>(pool, "SQLite (embedded)", 1).await;
            std::fs::remove_dir_all(&dir).ok();
            result
        }
    }
}

/// The first id of this run's payouts: after every earlier run's.
async fn next_id<DB: sqlx::Database>(pool: &Pool<DB>, sql: &'static str) -> Result<i64, sqlx::Error>
where
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    i64: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    sqlx::query_scalar(sql).fetch_one(pool).await
}

/// The run over payouts `first ..= first + 99`: payout `first + i - 1` is
/// for `i * 1000` cents.
async fn run<DB: Batched>(
    pool: Pool<DB>,
    label: &str,
    first: i64,
) -> Result<(), Box<dyn std::error::Error>>
where
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let bank = Arc::new(Bank::default());
    let report = Arc::new(Report::default());

    // Some owners cancel before the run.
    let mut cancelled = 0;
    let ids = first..first + PAYOUTS;
    for i in (CANCEL_EVERY..=PAYOUTS).step_by(CANCEL_EVERY as usize) {
        if PayoutStatus::cancel()
            .apply(&pool, first + i - 1)
            .await?
            .is_applied()
        {
            cancelled += 1;
        }
    }

    // Every worker claims batches of pending payouts until none is left:
    // no two workers get the same payout, so none chases another's.
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (pool, bank, report, ids) = (pool.clone(), bank.clone(), report.clone(), ids.clone());
        workers.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            loop {
                let batch = PayoutStatus::start().claim(&pool, BATCH).await?;
                if batch.is_empty() {
                    return Ok::<_, stateguard::Error>(claimed);
                }
                report.batches.fetch_add(1, Ordering::SeqCst);
                for won in batch {
                    let id = *won.key();
                    claimed.push(id);
                    // Only the claimer gets here: call the bank, then record
                    // it with the bank's reference, in the one statement.
                    let bank_ref = bank.transfer(id).await;
                    if PayoutStatus::confirm(bank_ref)
                        .apply(&pool, id)
                        .await?
                        .is_applied()
                    {
                        report.sent.fetch_add(1, Ordering::SeqCst);
                        // A payout an interrupted earlier run left pending
                        // is sent too, and counted apart.
                        if ids.contains(&id) {
                            report.sent_in_run.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        }));
    }
    let mut claimed = std::collections::HashSet::new();
    let mut claimed_twice = 0;
    for worker in workers {
        for id in worker.await?? {
            if !claimed.insert(id) {
                claimed_twice += 1;
            }
        }
    }

    // A worker restarted from a stale job list replays `start` on every
    // payout, as do all the others: nothing wins twice, so the bank hears
    // nothing more.
    for worker in 0..WORKERS {
        let offset = worker as i64 * PAYOUTS / WORKERS as i64;
        for i in 0..PAYOUTS {
            let id = first + (i + offset) % PAYOUTS;
            send_payout(&pool, &bank, &report, id).await?;
        }
    }

    // The bank's confirmation webhook is delivered again for every payout,
    // carrying a reference of its own: the loser writes nothing, so the
    // stored reference stays the one the winning confirm wrote.
    for id in ids.clone() {
        if let Outcome::AlreadyInState(PayoutStatus::Sent) =
            PayoutStatus::confirm(format!("replayed_{id}"))
                .apply(&pool, id)
                .await?
        {
            report.replays_already_sent.fetch_add(1, Ordering::SeqCst);
        }
    }

    let transfers = bank.transfers.load(Ordering::SeqCst);
    let sent = report.sent.load(Ordering::SeqCst);
    println!("stateguard payouts on {label}");
    println!("  payouts created:                    {PAYOUTS}");
    println!("  cancelled before the run:           {cancelled}");
    println!(
        "  {:<36}{WORKERS}",
        format!("workers claiming batches of {BATCH}:")
    );
    println!(
        "  batches claimed:                    {}",
        report.batches.load(Ordering::SeqCst)
    );
    println!("  payouts claimed twice:              {claimed_twice}");
    println!("  payouts sent:                       {sent}");
    println!("  bank transfers:                     {transfers}");
    println!("  then every worker replays `start` on every payout:");
    println!(
        "  attempts that lost the race:        {} (AlreadyInState)",
        report.lost_races.load(Ordering::SeqCst)
    );
    println!(
        "  attempts that found it sent:        {} (Conflict)",
        report.found_sent.load(Ordering::SeqCst)
    );
    println!(
        "  attempts that found it cancelled:   {} (Conflict)",
        report.found_cancelled.load(Ordering::SeqCst)
    );
    println!(
        "  attempts over the limit:            {} (Refused by the guard)",
        report.over_limit.load(Ordering::SeqCst)
    );
    println!(
        "  replayed confirmations:             {} (AlreadyInState)",
        report.replays_already_sent.load(Ordering::SeqCst)
    );
    let over_limit = (1..=PAYOUTS)
        .filter(|i| i * 1000 > LIMIT_CENTS && i % CANCEL_EVERY != 0)
        .count() as i64;
    let sent_in_run = report.sent_in_run.load(Ordering::SeqCst);
    if claimed_twice != 0
        || transfers != sent
        || sent_in_run as i64 != PAYOUTS - cancelled - over_limit
    {
        return Err(format!("{transfers} bank transfers for {sent} payouts sent").into());
    }
    println!("  every payout sent exactly once: ok");
    Ok(())
}

/// One worker's attempt at one payout.
async fn send_payout<DB: Backend>(
    pool: &Pool<DB>,
    bank: &Bank,
    report: &Report,
    id: i64,
) -> Result<(), stateguard::Error>
where
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    match PayoutStatus::start().apply(pool, id).await? {
        Outcome::Applied(_won) => {
            // Only the winner gets here: call the bank, then record it
            // with the bank's reference, in the one statement.
            let bank_ref = bank.transfer(id).await;
            if PayoutStatus::confirm(bank_ref)
                .apply(pool, id)
                .await?
                .is_applied()
            {
                report.sent.fetch_add(1, Ordering::SeqCst);
                // Only this run's payouts are replayed.
                report.sent_in_run.fetch_add(1, Ordering::SeqCst);
            }
        }
        Outcome::AlreadyInState(_) => {
            report.lost_races.fetch_add(1, Ordering::SeqCst);
        }
        Outcome::Conflict {
            current: PayoutStatus::Cancelled,
        } => {
            report.found_cancelled.fetch_add(1, Ordering::SeqCst);
        }
        // Already past `sending`: another worker finished it.
        Outcome::Conflict { .. } => {
            report.found_sent.fetch_add(1, Ordering::SeqCst);
        }
        // Pending, and over the limit: the guard held it back.
        Outcome::Refused { .. } => {
            report.over_limit.fetch_add(1, Ordering::SeqCst);
        }
        Outcome::NotFound => unreachable!("payout {id} was created above"),
        // Only a transition that expects an occurrence can find the row
        // moved on; this one does not.
        Outcome::Stale { .. } => unreachable!("start() expects no occurrence"),
    }
    Ok(())
}
