//! `examples/outbox_relay` with `AMQP_URL`: the outbox relayed to the real
//! RabbitMQ server (`STATEGUARD_AMQP_URL`) with publisher confirms. Every
//! message reaches the queue bound for its topic once, with its id as the
//! AMQP `message-id` and each order key's messages in order; a message no
//! queue is bound for is refused (mandatory, returned), kept, and tried
//! again later, never marked published.

use std::process::{Command, Stdio};

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use sqlx::SqlitePool;
use stateguard::Tx;
use stateguard::ddl::Dialect;
use stateguard::outbox::{self, Message};

use crate::common::server_url;
use crate::payouts_api_crash::{example_binary, runtime};

const KEYS: usize = 3;
const PER_KEY: usize = 10;

#[test]
fn the_relay_publishes_to_rabbitmq_once_and_in_order() {
    let Some(amqp) = server_url("STATEGUARD_AMQP_URL", "outbox_rabbitmq") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let database = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("outbox.db").display()
    );
    let prefix = format!("sgtest{}", std::process::id());
    let queue = format!("{prefix}_events");
    runtime().block_on(async {
        // The test's own queue, bound to the relay's exchange for its
        // prefix's topics.
        let connection = lapin::Connection::connect(&amqp, Default::default())
            .await
            .expect("RabbitMQ");
        let channel = connection.create_channel().await.unwrap();
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
            .await
            .unwrap();
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                Default::default(),
            )
            .await
            .unwrap();
        channel
            .queue_bind(
                queue.as_str().into(),
                "outbox".into(),
                format!("{prefix}.#").as_str().into(),
                QueueBindOptions::default(),
                Default::default(),
            )
            .await
            .unwrap();

        let pool = SqlitePool::connect(&database).await.unwrap();
        for statement in outbox::ddl(Dialect::Sqlite) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        let mut tx = Tx::begin(&pool).await.unwrap();
        let topic = format!("{prefix}.payout.paid");
        for n in 0..PER_KEY {
            for key in 0..KEYS {
                let id = format!("k{key}:{n}");
                let message = Message {
                    id: &id,
                    topic: &topic,
                    payload: b"{}",
                };
                outbox::enqueue(&mut tx, &format!("k{key}"), message)
                    .await
                    .unwrap();
            }
        }
        let nowhere = format!("unbound{}.payout.paid", std::process::id());
        let message = Message {
            id: "nowhere:0",
            topic: &nowhere,
            payload: b"{}",
        };
        outbox::enqueue(&mut tx, "nowhere", message).await.unwrap();
        tx.commit(()).await.unwrap();

        let output = Command::new(example_binary("outbox_relay"))
            .arg("--drain")
            .env("DATABASE_URL", &database)
            .env("AMQP_URL", &amqp)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run the relay");
        assert!(output.status.success(), "{}", output.status);

        // Each message once, in each key's order.
        let mut ids = Vec::new();
        while let Some(got) = channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let id = got
                .delivery
                .properties
                .message_id()
                .clone()
                .expect("a message-id");
            ids.push(id.to_string());
        }
        assert_eq!(ids.len(), KEYS * PER_KEY, "{ids:?}");
        for key in 0..KEYS {
            let of_key: Vec<&String> = ids
                .iter()
                .filter(|id| id.starts_with(&format!("k{key}:")))
                .collect();
            let expected: Vec<String> = (0..PER_KEY).map(|n| format!("k{key}:{n}")).collect();
            assert_eq!(of_key, expected.iter().collect::<Vec<_>>());
        }
        // The unroutable message: refused, kept, not published.
        let (published, error): (i64, Option<String>) = sqlx::query_as(
            "SELECT published_at IS NOT NULL, last_error FROM stateguard_outbox WHERE \
             message_id = 'nowhere:0'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(published, 0);
        let error = error.expect("the refusal is recorded");
        assert!(error.contains("no queue is bound"), "{error}");
        let (left,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM stateguard_outbox WHERE published_at IS NULL")
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(left, 1);
        channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await
            .unwrap();
        pool.close().await;
    });
}
