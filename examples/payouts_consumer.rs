//! A consumer of the payout service's events: it receives each
//! `payout.created`, `payout.paid` and `payout.failed` from NATS JetStream
//! and records a notification for it, once, however often the broker
//! delivers it.
//!
//! ```text
//! cargo run --example payouts_consumer              # embedded SQLite, consumer.db
//! cargo run --example payouts_consumer -- --drain   # stop once nothing is left
//! ```
//!
//! Each delivery is applied in one transaction: `inbox::receive` records
//! its message id (`Nats-Msg-Id`, the outbox's id) beside the consumer's
//! own work (a row in `notifications`), and the message is acknowledged
//! only after that commit. A message delivered again (the consumer died
//! before its ack, or stalled past the ack wait) is then a `Duplicate`: it
//! is acknowledged without a second notification.
//!
//! - `DATABASE_URL`: `sqlite://…`, `postgres://…` or `mysql://…`; by
//!   default the SQLite file `consumer.db` in the working directory. Its
//!   two tables (`notifications`, `stateguard_inbox`) are created where
//!   missing; nothing is dropped.
//! - `NATS_URL`: by default `nats://127.0.0.1:4222`. The stream `PAYOUTS`
//!   (subjects `payout.>`, a two-minute duplicate window) and the durable
//!   consumer `notifier` are created where missing, so start this before
//!   the relay.

use std::error::Error;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;
use sqlx::{MySqlPool, PgPool, Pool, SqlitePool};
use stateguard::inbox::{self, Received};
use stateguard::{Backend, Tx};

/// This consumer's name in the inbox, and its durable name on the stream.
const CONSUMER: &str = "notifier";

/// What the consumer's own table looks like, per backend, and its insert.
struct Notifications {
    create: &'static str,
    insert: &'static str,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://consumer.db?mode=rwc".into());
    let nats = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let drain = std::env::args().any(|arg| arg == "--drain");
    let context = jetstream::new(async_nats::connect(&nats).await?);
    let stream = context
        .get_or_create_stream(stream::Config {
            name: "PAYOUTS".into(),
            subjects: vec!["payout.>".into()],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await?;
    let consumer: PullConsumer = stream
        .get_or_create_consumer(
            CONSUMER,
            pull::Config {
                durable_name: Some(CONSUMER.into()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .await?;
    use stateguard::ddl::Dialect;
    match url.split_once(':').map(|(scheme, _)| scheme) {
        Some("sqlite") => {
            let table = Notifications {
                create: "CREATE TABLE IF NOT EXISTS notifications (message_id TEXT PRIMARY KEY, \
                         topic TEXT NOT NULL, payload TEXT NOT NULL)",
                insert: "INSERT INTO notifications (message_id, topic, payload) VALUES (?1, ?2, ?3)",
            };
            let pool = SqlitePool::connect(&url).await?;
            run(pool, Dialect::Sqlite, table, consumer, drain).await
        }
        Some("postgres" | "postgresql") => {
            let table = Notifications {
                create: "CREATE TABLE IF NOT EXISTS notifications (message_id TEXT PRIMARY KEY, \
                         topic TEXT NOT NULL, payload TEXT NOT NULL)",
                insert: "INSERT INTO notifications (message_id, topic, payload) VALUES ($1, $2, $3)",
            };
            let pool = PgPool::connect(&url).await?;
            run(pool, Dialect::Postgres, table, consumer, drain).await
        }
        Some("mysql" | "mariadb") => {
            let table = Notifications {
                create: "CREATE TABLE IF NOT EXISTS notifications (message_id VARCHAR(255) \
                         PRIMARY KEY, topic VARCHAR(255) NOT NULL, payload TEXT NOT NULL)",
                insert: "INSERT INTO notifications (message_id, topic, payload) VALUES (?, ?, ?)",
            };
            let pool = MySqlPool::connect(&url).await?;
            run(pool, Dialect::MySql, table, consumer, drain).await
        }
        _ => Err(format!("DATABASE_URL {url:?} is not sqlite://, postgres:// or mysql://").into()),
    }
}

async fn run<DB: Backend>(
    pool: Pool<DB>,
    dialect: stateguard::ddl::Dialect,
    table: Notifications,
    consumer: PullConsumer,
    drain: bool,
) -> Result<(), Box<dyn Error>>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    sqlx::raw_sql(table.create).execute(&pool).await?;
    // The inbox, where it is missing.
    if sqlx::raw_sql("SELECT 1 FROM stateguard_inbox WHERE 1 = 0")
        .execute(&pool)
        .await
        .is_err()
    {
        for statement in inbox::ddl(dialect) {
            sqlx::raw_sql(*statement).execute(&pool).await?;
        }
    }
    loop {
        // A batch of what is there, waiting up to a second for it.
        let mut batch = consumer
            .fetch()
            .max_messages(100)
            .expires(Duration::from_secs(1))
            .messages()
            .await?;
        let mut got = 0;
        while let Some(delivered) = batch.next().await {
            let delivered = delivered.map_err(|e| format!("a delivery: {e}"))?;
            got += 1;
            let Some(id) = delivered
                .headers
                .as_ref()
                .and_then(|headers| headers.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|id| id.as_str().to_owned())
            else {
                // Not the outbox's: nothing to dedup it by. Leave it to an
                // operator rather than apply it blind.
                eprintln!(
                    "a message without Nats-Msg-Id on {}: left unacknowledged",
                    delivered.subject
                );
                continue;
            };
            let topic = delivered.subject.to_string();
            let payload = String::from_utf8_lossy(&delivered.payload).into_owned();
            let mut tx = Tx::begin(&pool).await?;
            match inbox::receive(&mut tx, CONSUMER, &id).await? {
                Received::First => {
                    sqlx::query(table.insert)
                        .bind(id.clone())
                        .bind(topic.clone())
                        .bind(payload.clone())
                        .execute(&mut *tx)
                        .await?;
                    tx.commit(()).await?;
                    println!("notified {topic} {id} {payload}");
                }
                Received::Duplicate => {
                    tx.rollback().await?;
                    println!("duplicate {id}");
                }
            }
            // Only after the commit: a crash before this line redelivers,
            // and the redelivery is a duplicate.
            delivered
                .ack()
                .await
                .map_err(|e| format!("the ack of {id}: {e}"))?;
        }
        if got == 0 && drain {
            return Ok(());
        }
    }
}
