//! A relay worker: publishes what the outbox table holds to NATS
//! JetStream, or to RabbitMQ, in passes, until stopped (or, with
//! `--drain`, until a pass finds nothing due). Run as many as you like,
//! on as many machines.
//!
//! ```text
//! DATABASE_URL=postgres://… NATS_URL=nats://127.0.0.1:4222 cargo run --example outbox_relay
//! DATABASE_URL=postgres://… AMQP_URL=amqp://127.0.0.1:5672/%2f cargo run --example outbox_relay
//! ```
//!
//! - `DATABASE_URL`: `sqlite://…`, `postgres://…` or `mysql://…`; by
//!   default the SQLite file `outbox.db` in the current folder. The
//!   outbox table is created there if it is missing; nothing is dropped.
//! - `NATS_URL`: by default `nats://127.0.0.1:4222`. Each message goes to
//!   its topic as a subject, which a JetStream stream must cover.
//! - `AMQP_URL`: RabbitMQ instead of NATS. Each message goes to the topic
//!   exchange `outbox` (declared, durable) with its topic as the routing
//!   key and its id as the AMQP `message-id`, persistent and mandatory,
//!   and counts as published once the broker confirms it (publisher
//!   confirms); a message no queue is bound for is refused, and retried.
//!   RabbitMQ keeps no duplicate window: a message published again after
//!   a relay died is delivered again, and the consumer's inbox absorbs it.
//! - `OUTBOX_LEASE_MS`: how long a pass holds what it took (5000).

use std::error::Error;
use std::time::Duration;

use sqlx::{MySqlPool, PgPool, Pool, SqlitePool};
use stateguard::Backend;
use stateguard::ddl::Dialect;
use stateguard::outbox::{self, JetStream, Message, Published, Publisher, Relay};

/// RabbitMQ with publisher confirms: the whole `Publisher` is this page.
struct Rabbit(lapin::Channel);

/// Why RabbitMQ did not take a message.
#[derive(Debug)]
enum RabbitError {
    Client(lapin::Error),
    Refused(String),
}

impl std::fmt::Display for RabbitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RabbitError::Client(e) => write!(f, "RabbitMQ: {e}"),
            RabbitError::Refused(why) => write!(f, "RabbitMQ refused the message: {why}"),
        }
    }
}

impl Error for RabbitError {}

impl Rabbit {
    /// A channel of `url` in confirm mode, with the `outbox` exchange.
    async fn connect(url: &str) -> Result<Self, lapin::Error> {
        use lapin::options::{ConfirmSelectOptions, ExchangeDeclareOptions};
        let connection = lapin::Connection::connect(url, Default::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .exchange_declare(
                "outbox".into(),
                lapin::ExchangeKind::Topic,
                durable,
                Default::default(),
            )
            .await?;
        Ok(Rabbit(channel))
    }
}

impl Publisher for Rabbit {
    type Error = RabbitError;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        let properties = lapin::BasicProperties::default()
            .with_message_id(message.id.into())
            .with_delivery_mode(2);
        let mandatory = lapin::options::BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        };
        let confirm = self
            .0
            .basic_publish(
                "outbox".into(),
                message.topic.into(),
                mandatory,
                message.payload,
                properties,
            )
            .await
            .map_err(RabbitError::Client)?
            .await
            .map_err(RabbitError::Client)?;
        match confirm {
            lapin::Confirmation::Ack(None) => Ok(Published::new(false)),
            lapin::Confirmation::Ack(Some(returned)) => Err(RabbitError::Refused(format!(
                "no queue is bound for it ({})",
                returned.reply_text
            ))),
            lapin::Confirmation::Nack(_) => {
                Err(RabbitError::Refused("not confirmed (nack)".into()))
            }
            lapin::Confirmation::NotRequested => Err(RabbitError::Refused(
                "the channel is not in confirm mode".into(),
            )),
        }
    }
}

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
    match std::env::var("AMQP_URL") {
        Ok(amqp) => {
            let relay = Relay::new(Rabbit::connect(&amqp).await?)
                .batch(50)
                .lease(lease);
            on_database(&url, relay, drain).await
        }
        Err(_) => {
            let client = async_nats::connect(&nats).await?;
            let relay = Relay::new(JetStream::new(async_nats::jetstream::new(client)))
                .batch(50)
                .lease(lease);
            on_database(&url, relay, drain).await
        }
    }
}

/// [`run`] on the database `url` names.
async fn on_database<P: Publisher>(
    url: &str,
    relay: Relay<P>,
    drain: bool,
) -> Result<(), Box<dyn Error>> {
    match url.split_once(':').map(|(scheme, _)| scheme) {
        Some("sqlite") => {
            run(
                SqlitePool::connect(url).await?,
                Dialect::Sqlite,
                relay,
                drain,
            )
            .await
        }
        Some("postgres" | "postgresql") => {
            run(PgPool::connect(url).await?, Dialect::Postgres, relay, drain).await
        }
        Some("mysql" | "mariadb") => {
            run(MySqlPool::connect(url).await?, Dialect::MySql, relay, drain).await
        }
        _ => Err(format!("DATABASE_URL {url:?} is not sqlite://, postgres:// or mysql://").into()),
    }
}

async fn run<DB: Backend, P: Publisher>(
    pool: Pool<DB>,
    dialect: Dialect,
    relay: Relay<P>,
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
