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
//! Each run adds its own 50 payouts after those of earlier runs, and keeps
//! them: on PostgreSQL in a schema of the example's own,
//! `stateguard_recovery`, in the database the URL names; on MySQL and
//! MariaDB in the database the URL names (tables `recovery_payouts`,
//! `bank_calls`, `bank_transfers`, `bank_refusals`), beside a `stateguard_recovery`
//! marker table (it refuses tables of the same names it did not create);
//! on SQLite in a file in a temporary directory, removed after the run.
//! The workers finish their payouts as batches (`finish_many`,
//! `recover_many`); `--one-by-one` finishes each on its own, and
//! `--worker` runs the library's `Worker` instead of the example's loop.
//! Only `--reset` drops the example's own schema (PostgreSQL) or tables
//! (MySQL and MariaDB) first. The workflow itself is in `workflow.rs`,
//! shared with the crash test that SIGKILLs real processes.

mod workflow;

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::Pool;
use stateguard::Outcome;

use workflow::{Bank, BoxError, Finishing, PayoutStatus, Store, Worked};

const PAYOUTS: i64 = 50;
const WORKERS: usize = 4;
const BANK_LATENCY: Duration = Duration::from_millis(1);

const USAGE: &str = "usage: recovery [--reset] [--one-by-one | --worker]";

/// The example's tables on MySQL and MariaDB, dropped by `--reset`.
const TABLES: [&str; 6] = [
    "DROP TABLE IF EXISTS recovery_payout_history",
    "DROP TABLE IF EXISTS recovery_payouts",
    "DROP TABLE IF EXISTS bank_calls",
    "DROP TABLE IF EXISTS bank_transfers",
    "DROP TABLE IF EXISTS bank_refusals",
    "DROP TABLE IF EXISTS stateguard_recovery",
];

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut reset = false;
    // The workers finish their payouts as batches (`finish_many`,
    // `recover_many`), with `--one-by-one` each on its own, or with
    // `--worker` through the library's `Worker`.
    let mut finishing = Finishing::Batched { concurrency: 4 };
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--reset" => reset = true,
            "--one-by-one" => finishing = Finishing::OneByOne,
            "--worker" => finishing = Finishing::Worker { concurrency: 4 },
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
            let admin = sqlx::PgPool::connect(url).await?;
            // The example's five tables in its schema: all of them, or a
            // schema to make (anew, if an interrupted first run left part).
            let tables: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = 'stateguard_recovery' AND table_name IN \
                 ('recovery_payouts', 'recovery_payout_history', 'bank_calls', 'bank_transfers', \
                 'bank_refusals')",
            )
            .fetch_one(&admin)
            .await?;
            let made = reset || tables < 5;
            if made {
                for statement in [
                    "DROP SCHEMA IF EXISTS stateguard_recovery CASCADE",
                    "CREATE SCHEMA stateguard_recovery",
                ] {
                    sqlx::query(statement).execute(&admin).await?;
                }
            }
            admin.close().await;
            let options = sqlx::postgres::PgConnectOptions::from_str(url)?
                .options([("search_path", "stateguard_recovery")]);
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(2 * WORKERS as u32)
                .connect_with(options)
                .await?;
            if made {
                sqlx::Postgres::create_tables(&pool).await?;
            }
            let first: i64 =
                sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM recovery_payouts")
                    .fetch_one(&pool)
                    .await?;
            run(pool, "PostgreSQL", first, finishing).await
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
                .max_connections(2 * WORKERS as u32)
                .connect_with(options)
                .await?;
            // How many of the example's tables, and its marker, exist.
            let (tables, marked): (i64, i64) = sqlx::query_as(
                "SELECT COUNT(CASE WHEN table_name <> 'stateguard_recovery' THEN 1 END),
                        COUNT(CASE WHEN table_name = 'stateguard_recovery' THEN 1 END)
                 FROM information_schema.tables WHERE table_schema = DATABASE()
                 AND table_name IN ('recovery_payouts', 'recovery_payout_history', 'bank_calls',
                                    'bank_transfers', 'bank_refusals', 'stateguard_recovery')",
            )
            .fetch_one(&pool)
            .await?;
            if tables > 0 && marked == 0 {
                return Err(
                    "the database already has a `recovery_payouts`, `recovery_payout_history`, `bank_calls`, \
                            `bank_transfers` or `bank_refusals` table that this example did not create: point \
                            DATABASE_URL at another database"
                        .into(),
                );
            }
            // Made anew when asked, or when a first run was interrupted
            // part-way (the marker is made first, so the tables are ours).
            if reset || tables < 5 {
                for statement in TABLES {
                    sqlx::query(statement).execute(&pool).await?;
                }
                sqlx::query("CREATE TABLE stateguard_recovery (note VARCHAR(128) NOT NULL)")
                    .execute(&pool)
                    .await?;
                sqlx::MySql::create_tables(&pool).await?;
            }
            let first: i64 =
                sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM recovery_payouts")
                    .fetch_one(&pool)
                    .await?;
            run(pool, "MySQL/MariaDB", first, finishing).await
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
            sqlx::Sqlite::create_tables(&pool).await?;
            let result = run(pool, "SQLite (embedded)", 1, finishing).await;
            std::fs::remove_dir_all(&dir).ok();
            result
        }
    }
}

/// The run over payouts `first ..= first + 49`, on tables that exist.
async fn run<DB: Store>(
    pool: Pool<DB>,
    label: &str,
    first: i64,
    finishing: Finishing,
) -> Result<(), BoxError>
where
    i64: for<'q> sqlx::Encode<'q, DB>
        + for<'r> sqlx::Decode<'r, DB>
        + sqlx::Type<DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    DB::seed(&pool, first, first + PAYOUTS - 1).await?;
    let bank = Bank::new(pool.clone(), BANK_LATENCY);

    crash_before_the_bank_call(&pool, first).await?;
    crash_after_the_bank_call(&pool, &bank, first + 1).await?;

    // The workers that come up after the crash.
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let pool = pool.clone();
        workers.push(tokio::spawn(async move {
            let bank = Bank::new(pool.clone(), BANK_LATENCY);
            workflow::run_worker(&pool, &bank, finishing).await
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
    println!(
        "  first requests the bank turned away: {} (each retried after its backoff)",
        tally.refusals
    );
    println!("  run after the crash took:           {elapsed:.2?}");
    if tally.uncounted != 0 {
        return Err(format!("{} payouts with attempts left uncounted", tally.uncounted).into());
    }
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
