//! An HTTP service with both front doors guarded: `POST /payouts` takes an
//! `Idempotency-Key` (a retry gets the first response, replayed), and the
//! bank's webhooks are applied once per event id, however often and in
//! whatever order they arrive.
//!
//! ```text
//! cargo run --example payouts_api                  # embedded SQLite, no setup
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --example payouts_api
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run --example payouts_api
//! ```
//!
//! It listens on `127.0.0.1:3000` (`ADDR` changes it); a request owns its
//! `Idempotency-Key` for 60 s (`IDEMPOTENCY_LEASE_MS` changes it). On PostgreSQL it
//! works in a schema of its own, on MySQL and MariaDB in a database of its
//! own, both called `stateguard_api`, made anew on each start unless
//! `KEEP_DATA=1`; on SQLite in `payouts_api.db` in the system's temporary
//! directory (`SQLITE_PATH` changes it).
//!
//! ```text
//! curl -i -X POST localhost:3000/payouts -H 'Idempotency-Key: 7c1f' \
//!      -d '{"amount_cents":1000,"currency":"EUR","recipient":"acct_1"}'
//! ```

use std::str::FromStr;

use sqlx::Pool;

mod app;

use app::App;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let keep = std::env::var("KEEP_DATA").is_ok_and(|v| v == "1");
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let url = std::env::var("DATABASE_URL").ok();
    let router = match url.as_deref() {
        Some(url) if url.starts_with("postgres") => {
            let admin = sqlx::PgPool::connect(url).await?;
            if !keep {
                sqlx::query("DROP SCHEMA IF EXISTS stateguard_api CASCADE")
                    .execute(&admin)
                    .await?;
            }
            let fresh = sqlx::query("CREATE SCHEMA stateguard_api")
                .execute(&admin)
                .await
                .is_ok();
            admin.close().await;
            let options = sqlx::postgres::PgConnectOptions::from_str(url)?
                .options([("search_path", "stateguard_api")]);
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(16)
                .connect_with(options)
                .await?;
            if fresh {
                app::create_schema(&pool).await?;
            }
            app::router(App::from_env(pool))
        }
        Some(url) if url.starts_with("mysql") || url.starts_with("mariadb") => {
            let admin = sqlx::MySqlPool::connect(url).await?;
            if !keep {
                sqlx::query("DROP DATABASE IF EXISTS stateguard_api")
                    .execute(&admin)
                    .await?;
            }
            let fresh = sqlx::query("CREATE DATABASE stateguard_api")
                .execute(&admin)
                .await
                .is_ok();
            admin.close().await;
            let options =
                sqlx::mysql::MySqlConnectOptions::from_str(url)?.database("stateguard_api");
            let pool: Pool<sqlx::MySql> = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(16)
                .connect_with(options)
                .await?;
            if fresh {
                app::create_schema(&pool).await?;
            }
            app::router(App::from_env(pool))
        }
        Some(other) => {
            return Err(format!("DATABASE_URL {other:?} is not postgres or mysql").into());
        }
        None => {
            let path = std::env::var("SQLITE_PATH").map_or_else(
                |_| std::env::temp_dir().join("payouts_api.db"),
                std::path::PathBuf::from,
            );
            if !keep {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(file);
                }
            }
            let fresh = !path.exists();
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(std::time::Duration::from_secs(30));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(options)
                .await?;
            if fresh {
                app::create_schema(&pool).await?;
            }
            app::router(App::from_env(pool))
        }
    };
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router).await?;
    Ok(())
}
