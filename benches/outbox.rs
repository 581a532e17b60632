//! The outbox relay's throughput to the real NATS JetStream server,
//! against a relay written by hand of the same shape in the same run:
//! claim a batch of due messages with `FOR UPDATE SKIP LOCKED` (each the
//! earliest unpublished of its order key, under a lease), publish each
//! with its id as `Nats-Msg-Id` and wait for the stream's ack, mark each
//! published under its lease. PostgreSQL, one relay, 2,000 messages of
//! 100 order keys per round, the two ways in rotation, for batches of 10,
//! 50 and 200. Messages per second, median of the rounds, and the ratio.
//!
//! `cargo bench --bench outbox`, with `STATEGUARD_POSTGRES_URL` and
//! `STATEGUARD_NATS_URL`; the schema `stateguard_outbox_bench` and a
//! stream of the same name are made anew and removed at the end.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use sqlx::Row as _;
use stateguard::outbox::{JetStream, Relay};

#[allow(dead_code)]
mod support;

const PLACE: support::Place = support::Place {
    name: "stateguard_outbox_bench",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_outbox_bench CASCADE",
        "CREATE SCHEMA stateguard_outbox_bench",
    ],
    drop: "DROP SCHEMA stateguard_outbox_bench CASCADE",
    connections: 4,
    delay: Duration::ZERO,
};

const MESSAGES: i64 = 2_000;
const ROUNDS: usize = 6;

/// Due messages, fresh ids (the stream's duplicate window would drop
/// repeated ones).
const SEED: &str = "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, \
    created_at, next_attempt_at) SELECT $1 || g, CAST(g % 100 AS TEXT), \
    'stateguard_outbox_bench.m', CAST('{}' AS BYTEA), now(), now() FROM generate_series(1, $2) g";

/// The hand-written relay's claim: the library's, without its tag.
const CLAIM: &str = "WITH due AS (SELECT d.seq FROM stateguard_outbox AS d WHERE \
    d.published_at IS NULL AND d.dead_at IS NULL AND d.next_attempt_at <= now() AND \
    (d.locked_until IS NULL OR d.locked_until < now()) AND NOT EXISTS (SELECT 1 FROM \
    stateguard_outbox AS e WHERE e.order_key = d.order_key AND e.seq < d.seq AND \
    e.published_at IS NULL) ORDER BY d.seq LIMIT $1 FOR UPDATE OF d SKIP LOCKED) \
    UPDATE stateguard_outbox AS o SET lease = o.lease + 1, attempts = o.attempts + 1, \
    locked_until = now() + INTERVAL '30 seconds' FROM due WHERE o.seq = due.seq \
    RETURNING o.seq, o.lease, o.message_id, o.topic, o.payload";

const MARK: &str = "UPDATE stateguard_outbox SET published_at = now(), locked_until = NULL \
    WHERE seq = $1 AND lease = $2 AND published_at IS NULL";

/// Drains the outbox by hand, one batch of `batch` at a time.
async fn by_hand(pool: &sqlx::PgPool, context: &jetstream::Context, batch: i64) {
    loop {
        let rows = sqlx::query(CLAIM)
            .bind(batch)
            .fetch_all(pool)
            .await
            .unwrap();
        if rows.is_empty() {
            return;
        }
        for row in rows {
            let (seq, lease): (i64, i64) = (row.get(0), row.get(1));
            let (id, topic): (String, String) = (row.get(2), row.get(3));
            let payload: Vec<u8> = row.get(4);
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
            context
                .publish_with_headers(topic, headers, payload.into())
                .await
                .unwrap()
                .await
                .unwrap();
            let done = sqlx::query(MARK)
                .bind(seq)
                .bind(lease)
                .execute(pool)
                .await
                .unwrap();
            assert_eq!(done.rows_affected(), 1);
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Ok(nats) = std::env::var("STATEGUARD_NATS_URL") else {
        println!("skipped, because STATEGUARD_NATS_URL is not set");
        return;
    };
    support::on_postgres(PLACE, |pool| async move {
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Postgres) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        let client = async_nats::connect(&nats).await.unwrap();
        let context = jetstream::new(client);
        let _ = context.delete_stream(PLACE.name).await;
        context
            .create_stream(jetstream::stream::Config {
                name: PLACE.name.into(),
                subjects: vec![format!("{}.>", PLACE.name)],
                duplicate_window: Duration::from_secs(60),
                ..Default::default()
            })
            .await
            .unwrap();
        println!("PostgreSQL to JetStream: messages per second, median of {ROUNDS} rounds");
        println!("| batch | library relay | by hand | ratio | paired |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        let mut round_id = 0;
        for batch in [10_u32, 50, 200] {
            let relay = Relay::new(JetStream::new(context.clone())).batch(batch);
            let (mut ours, mut hand, mut paired) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..ROUNDS {
                let mut rates = [0.0; 2];
                for turn in 0..2 {
                    let way = (turn + round) % 2;
                    round_id += 1;
                    sqlx::query("TRUNCATE stateguard_outbox")
                        .execute(&pool)
                        .await
                        .unwrap();
                    sqlx::query(SEED)
                        .bind(format!("r{round_id}-"))
                        .bind(MESSAGES)
                        .execute(&pool)
                        .await
                        .unwrap();
                    let started = Instant::now();
                    match way {
                        0 => loop {
                            if relay.pass(&pool).await.unwrap().taken() == 0 {
                                break;
                            }
                        },
                        _ => by_hand(&pool, &context, i64::from(batch)).await,
                    }
                    rates[way] = MESSAGES as f64 / started.elapsed().as_secs_f64();
                }
                ours.push(rates[0]);
                hand.push(rates[1]);
                paired.push(rates[0] / rates[1]);
            }
            let (ours, hand) = (support::median(ours), support::median(hand));
            println!(
                "| {batch} | {ours:.0} | {hand:.0} | {:.3} | {:.3} |",
                ours / hand,
                support::median(paired)
            );
        }
        context.delete_stream(PLACE.name).await.unwrap();
    })
    .await;
}
