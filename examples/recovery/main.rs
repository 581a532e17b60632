//! Crash recovery: a worker process dies twice in the middle of a payout,
//! once before it called the bank and once after the bank moved the money
//! but before it recorded the answer. The next workers take both payouts
//! over once their lease runs out, call the bank again with the same
//! idempotency key, and every payout's money moves exactly once.
//!
//! ```text
//! cargo run --example recovery                      # embedded SQLite, no setup
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --example recovery
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run --example recovery   # MariaDB or MySQL
//! ```
//!
//! On PostgreSQL it works in a schema of its own, on MySQL and MariaDB in a
//! database of its own, both called `stateguard_recovery`, which it drops
//! and creates anew on each run. The workflow itself is in
//! `workflow.rs`, shared with the crash test that SIGKILLs real processes.

mod workflow;

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::Pool;
use stateguard::Outcome;

use workflow::{Bank, BoxError, PayoutStatus, Store, Worked};

const PAYOUTS: i64 = 50;
const WORKERS: usize = 4;
const BANK_LATENCY: Duration = Duration::from_millis(1);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DATABASE_URL").ok();
    match url.as_deref() {
        Some(url) if url.starts_with("postgres") => {
            let admin = sqlx::PgPool::connect(url).await?;
            sqlx::query("DROP SCHEMA IF EXISTS stateguard_recovery CASCADE")
                .execute(&admin)
                .await?;
            sqlx::query("CREATE SCHEMA stateguard_recovery")
                .execute(&admin)
                .await?;
            admin.close().await;
            let options = sqlx::postgres::PgConnectOptions::from_str(url)?
                .options([("search_path", "stateguard_recovery")]);
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(2 * WORKERS as u32)
                .connect_with(options)
                .await?;
            run(pool, "PostgreSQL").await
        }
        Some(url) if url.starts_with("mysql") || url.starts_with("mariadb") => {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let admin = sqlx::MySqlPool::connect(&url).await?;
            sqlx::query("DROP DATABASE IF EXISTS stateguard_recovery")
                .execute(&admin)
                .await?;
            sqlx::query("CREATE DATABASE stateguard_recovery")
                .execute(&admin)
                .await?;
            admin.close().await;
            let options =
                sqlx::mysql::MySqlConnectOptions::from_str(&url)?.database("stateguard_recovery");
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2 * WORKERS as u32)
                .connect_with(options)
                .await?;
            run(pool, "MySQL/MariaDB").await
        }
        Some(other) => Err(format!(
            "DATABASE_URL must start with postgres:// or mysql:// (or be unset for SQLite), got \
             {other:?}"
        )
        .into()),
        None => {
            let dir =
                std::env::temp_dir().join(format!("stateguard-recovery-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(dir.join("recovery.db"))
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(2 * WORKERS as u32)
                .connect_with(options)
                .await?;
            let result = run(pool, "SQLite (embedded)").await;
            std::fs::remove_dir_all(&dir).ok();
            result
        }
    }
}

async fn run<DB: Store>(pool: Pool<DB>, label: &str) -> Result<(), BoxError>
where
    for<'p> &'p Pool<DB>: stateguard::Executor<Database = DB, Commit = stateguard::Committed>,
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::ManyKeys<DB, stateguard::key::shape::One>,
{
    DB::create_tables(&pool).await?;
    DB::seed(&pool, 1, PAYOUTS).await?;
    let bank = Bank::new(pool.clone(), BANK_LATENCY);

    crash_before_the_bank_call(&pool, 1).await?;
    crash_after_the_bank_call(&pool, &bank, 2).await?;

    // The workers that come up after the crash.
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let pool = pool.clone();
        workers.push(tokio::spawn(async move {
            let bank = Bank::new(pool.clone(), BANK_LATENCY);
            workflow::run_worker(&pool, &bank).await
        }));
    }
    let mut worked = Worked::default();
    for worker in workers {
        let w = worker.await??;
        worked.started += w.started;
        worked.recovered += w.recovered;
        worked.sent += w.sent;
        worked.failed += w.failed;
        worked.retry_later += w.retry_later;
    }
    let elapsed = started.elapsed();

    let tally = DB::tally(&pool).await?;
    println!("stateguard crash recovery on {label}");
    println!("  payouts:                            {}", tally.payouts);
    println!("  left in sending by the crash:       2 (one before, one after its bank call)");
    println!("  workers after the crash:            {WORKERS}");
    println!("  payouts sent:                       {}", tally.sent);
    println!("  recovered rows:                     {}", worked.recovered);
    println!("  bank raw calls:                     {}", tally.raw_calls);
    println!("  distinct transfers:                 {}", tally.transfers);
    println!(
        "  calls the bank deduplicated:        {}",
        tally.raw_calls - tally.transfers
    );
    println!("  run after the crash took:           {elapsed:.2?}");
    if tally.not_exactly_once != 0 || tally.sent != tally.payouts {
        return Err(format!(
            "{} of {} payouts moved money other than exactly once ({} sent)",
            tally.not_exactly_once, tally.payouts, tally.sent
        )
        .into());
    }
    println!("  every payout's money moved exactly once: ok");
    Ok(())
}

/// A worker moves payout `id` to `sending` and dies before it calls the
/// bank.
async fn crash_before_the_bank_call<DB: Store>(pool: &Pool<DB>, id: i64) -> Result<(), BoxError>
where
    for<'p> &'p Pool<DB>: stateguard::Executor<Database = DB, Commit = stateguard::Committed>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    match PayoutStatus::start().apply(pool, id).await? {
        // The process dies here: the win is gone, the row stays in flight.
        Outcome::Applied(won) => drop(won),
        other => return Err(format!("payout {id}: expected to win `start`, got {other:?}").into()),
    }
    Ok(())
}

/// A worker moves payout `id` to `sending`, the bank moves the money, and
/// the worker dies before it hears the answer.
async fn crash_after_the_bank_call<DB: Store>(
    pool: &Pool<DB>,
    bank: &Bank<DB>,
    id: i64,
) -> Result<(), BoxError>
where
    for<'p> &'p Pool<DB>: stateguard::Executor<Database = DB, Commit = stateguard::Committed>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    match PayoutStatus::start().apply(pool, id).await? {
        // `run` calls the bank but, unlike `finish`, never records the
        // answer: as if the process died right after the call.
        Outcome::Applied(won) => {
            won.run(|effect| bank.pay(effect)).await;
        }
        other => return Err(format!("payout {id}: expected to win `start`, got {other:?}").into()),
    }
    Ok(())
}
