//! A relay worker: publishes what the outbox table holds to NATS
//! JetStream, in passes, until stopped (or, with `--drain`, until a pass
//! finds nothing due). Run as many as you like, on as many machines.
//!
//! ```text
//! DATABASE_URL=postgres://… NATS_URL=nats://127.0.0.1:4222 cargo run --example outbox_relay
//! ```
//!
//! - `DATABASE_URL`: `sqlite://…`, `postgres://…` or `mysql://…`; by
//!   default the SQLite file `outbox.db` in the current folder. The
//!   outbox table is created there if it is missing; nothing is dropped.
//! - `NATS_URL`: by default `nats://127.0.0.1:4222`. Each message goes to
//!   its topic as a subject, which a JetStream stream must cover.
//! - `OUTBOX_LEASE_MS`: how long a pass holds what it took (5000).

use std::error::Error;
use std::time::Duration;

use sqlx::{MySqlPool, PgPool, Pool, SqlitePool};
use stateguard::Backend;
use stateguard::ddl::Dialect;
use stateguard::outbox::{self, JetStream, Relay};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://outbox.db?mode=rwc".into());
    let nats = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let lease = match std::env::var("OUTBOX_LEASE_MS") {
        Ok(ms) => Duration::from_millis(
            ms.parse()
                .map_err(|e| format!("OUTBOX_LEASE_MS {ms:?}: {e}"))?,
        ),
        Err(_) => Duration::from_secs(5),
    };
    let drain = std::env::args().any(|arg| arg == "--drain");
    let client = async_nats::connect(&nats).await?;
    let relay = Relay::new(JetStream::new(async_nats::jetstream::new(client)))
        .batch(50)
        .lease(lease);
    match url.split_once(':').map(|(scheme, _)| scheme) {
        Some("sqlite") => {
            run(
                SqlitePool::connect(&url).await?,
                Dialect::Sqlite,
                relay,
                drain,
            )
            .await
        }
        Some("postgres" | "postgresql") => {
            run(
                PgPool::connect(&url).await?,
                Dialect::Postgres,
                relay,
                drain,
            )
            .await
        }
        Some("mysql" | "mariadb") => {
            run(
                MySqlPool::connect(&url).await?,
                Dialect::MySql,
                relay,
                drain,
            )
            .await
        }
        _ => Err(format!("DATABASE_URL {url:?} is not sqlite://, postgres:// or mysql://").into()),
    }
}

async fn run<DB: Backend>(
    pool: Pool<DB>,
    dialect: Dialect,
    relay: Relay<JetStream>,
    drain: bool,
) -> Result<(), Box<dyn Error>>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    // The table, where it is missing.
    if sqlx::raw_sql("SELECT 1 FROM stateguard_outbox WHERE 1 = 0")
        .execute(&pool)
        .await
        .is_err()
    {
        for statement in outbox::ddl(dialect) {
            sqlx::raw_sql(*statement).execute(&pool).await?;
        }
        println!("created the outbox table");
    }
    loop {
        match relay.pass(&pool).await {
            Ok(pass) if pass.taken() > 0 => println!(
                "published {} ({} already held by the stream), retrying {}, gave up {}, lost {}",
                pass.published(),
                pass.duplicates(),
                pass.retried(),
                pass.given_up(),
                pass.lost()
            ),
            Ok(_) if drain => return Ok(()),
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            // The database is away: what the pass took is taken again once
            // its lease has run out.
            Err(error) => {
                eprintln!("relay pass failed: {error}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
