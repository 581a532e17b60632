//! An HTTP service with both front doors guarded: `POST /payouts` takes an
//! `Idempotency-Key` (a retry gets the first response, replayed), and the
//! bank's webhooks are applied once per event id, however often and in
//! whatever order they arrive.
//!
//! ```text
//! cargo run --example payouts_api                  # embedded SQLite, no setup
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --example payouts_api
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run --example payouts_api
//! cargo run --example payouts_api -- --reset       # start from empty tables
//! ```
//!
//! It listens on `127.0.0.1:3000` (`ADDR` changes it); a request owns its
//! `Idempotency-Key` for 60 s (`IDEMPOTENCY_LEASE_MS` changes it). With
//! `OPS_PASSWORD` set, the operators' console is at `/ops`, behind HTTP
//! Basic authentication with that password (any user name, which the
//! console records as the operator); without it, the console is not
//! served.
//!
//! Its data: four tables, `api_payouts`, `stateguard_idempotency`,
//! `stateguard_inbox` and `stateguard_outbox`, in the database `DATABASE_URL` names (on PostgreSQL
//! in the connection's current schema: the first of its `search_path`,
//! which the URL can set with `?options=-c%20search_path%3Dmy_schema`);
//! without `DATABASE_URL`, in the SQLite file `payouts_api.db` in the
//! working directory (`SQLITE_PATH` changes it). It creates a table that is
//! missing and keeps those that exist, with what they hold, across
//! restarts: a service that restarts after a crash still knows every
//! payout and every key. Only `--reset` drops the four tables first
//! (and nothing else in the database).
//!
//! Each payout's events (`payout.created`, `payout.paid`,
//! `payout.failed`) are written to the outbox with the work they announce;
//! `cargo run --example outbox_relay` publishes them to NATS JetStream, and
//! `cargo run --example payouts_consumer` receives them (the README shows
//! the whole loop).
//!
//! ```text
//! curl -i -X POST localhost:3000/payouts -H 'Idempotency-Key: 7c1f' \
//!      -d '{"amount_cents":1000,"currency":"EUR","recipient":"acct_1"}'
//! ```

use std::str::FromStr;

mod app;

use app::App;

const USAGE: &str = "usage: payouts_api [--reset]";

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
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let url = std::env::var("DATABASE_URL").ok();
    let (router, created) = match url.as_deref() {
        Some(url) if url.starts_with("postgres") => {
            let options = sqlx::postgres::PgConnectOptions::from_str(url)?;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(16)
                .connect_with(options)
                .await?;
            let created = app::prepare(&pool, reset).await?;
            (app::router(App::from_env(pool)), created)
        }
        Some(url) if url.starts_with("mysql") || url.starts_with("mariadb") => {
            let options = sqlx::mysql::MySqlConnectOptions::from_str(url)?;
            if options.get_database().is_none() {
                return Err(format!(
                    "DATABASE_URL {url:?} names no database: add one, as in \
                     mysql://root@127.0.0.1:3306/payouts"
                )
                .into());
            }
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(16)
                .connect_with(options)
                .await?;
            let created = app::prepare(&pool, reset).await?;
            (app::router(App::from_env(pool)), created)
        }
        Some(other) => {
            return Err(format!("DATABASE_URL {other:?} is not postgres or mysql").into());
        }
        None => {
            let path = std::env::var("SQLITE_PATH")
                .map_or_else(|_| "payouts_api.db".into(), std::path::PathBuf::from);
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(std::time::Duration::from_secs(30));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(options)
                .await?;
            let created = app::prepare(&pool, reset).await?;
            println!("data in {}", path.display());
            (app::router(App::from_env(pool)), created)
        }
    };
    match created.is_empty() {
        true => println!("tables kept as they were"),
        false => println!("created tables: {}", created.join(", ")),
    }
    println!("listening on http://{}", listener.local_addr()?);
    match std::env::var("OPS_PASSWORD").is_ok_and(|p| !p.is_empty()) {
        true => println!("the console: http://{}/ops", listener.local_addr()?),
        false => println!("no console: set OPS_PASSWORD to serve it at /ops"),
    }
    axum::serve(listener, router).await?;
    Ok(())
}
