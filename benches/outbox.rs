//! The outbox relay's throughput to the real NATS JetStream server,
//! against relays written by hand in the same run. Each claims a batch of
//! due messages with `FOR UPDATE SKIP LOCKED` (each the earliest
//! unpublished of its order key, under a lease) and publishes each with
//! its id as `Nats-Msg-Id`, waiting for the stream's ack; the first hand
//! relay publishes one message at a time and marks each under its lease,
//! the second publishes the batch at once and marks it in one statement,
//! as the library does. PostgreSQL, one relay, 2,000 messages of 100 order
//! keys per round, the three ways in rotation, for batches of 10, 50 and
//! 200: messages per second, median of the rounds, and the ratios. Then
//! the library alone on SQLite and MariaDB, for the same batches.
//!
//! `cargo bench --bench outbox`, with `STATEGUARD_NATS_URL` (and
//! `STATEGUARD_POSTGRES_URL`, `STATEGUARD_MYSQL_URL` for the servers); the
//! schema or database `stateguard_outbox_bench` and a stream of the same
//! name are made anew and removed at the end.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use sqlx::Row as _;
use stateguard::outbox::{JetStream, Relay};

#[allow(dead_code)]
mod support;

#[path = "outbox/backlog.rs"]
mod backlog;

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

/// [`PLACE`] on MySQL and MariaDB, where a schema is a database.
const MYSQL_PLACE: support::Place = support::Place {
    fresh: [
        "DROP DATABASE IF EXISTS stateguard_outbox_bench",
        "CREATE DATABASE stateguard_outbox_bench",
    ],
    drop: "DROP DATABASE stateguard_outbox_bench",
    ..PLACE
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
    (d.locked_until IS NULL OR d.locked_until < now()) AND d.seq = (SELECT e.seq FROM \
    stateguard_outbox AS e WHERE e.order_key = d.order_key AND e.published_at IS NULL ORDER BY \
    e.seq LIMIT 1) ORDER BY d.seq LIMIT $1 FOR UPDATE OF d SKIP LOCKED) \
    UPDATE stateguard_outbox AS o SET lease = o.lease + 1, attempts = o.attempts + 1, \
    locked_until = now() + INTERVAL '30 seconds' FROM due WHERE o.seq = due.seq \
    RETURNING o.seq, o.lease, o.message_id, o.topic, o.payload";

const MARK: &str = "UPDATE stateguard_outbox SET published_at = now(), locked_until = NULL \
    WHERE seq = $1 AND lease = $2 AND published_at IS NULL";

/// The batched hand relay's mark: every message of the batch, each under
/// its lease, in one statement.
const MARK_MANY: &str = "UPDATE stateguard_outbox AS o SET published_at = now(), locked_until \
    = NULL FROM unnest(CAST($1 AS BIGINT[]), CAST($2 AS BIGINT[])) AS m(seq, lease) WHERE \
    o.seq = m.seq AND o.lease = m.lease AND o.published_at IS NULL";

/// The claim of a hand relay that keeps no order: the due messages by
/// seq, whatever their keys.
const CLAIM_UNORDERED: &str = "WITH due AS (SELECT d.seq FROM stateguard_outbox AS d WHERE \
    d.published_at IS NULL AND d.dead_at IS NULL AND d.next_attempt_at <= now() AND \
    (d.locked_until IS NULL OR d.locked_until < now()) ORDER BY d.seq LIMIT $1 FOR UPDATE OF d \
    SKIP LOCKED) UPDATE stateguard_outbox AS o SET lease = o.lease + 1, attempts = o.attempts + \
    1, locked_until = now() + INTERVAL '30 seconds' FROM due WHERE o.seq = due.seq RETURNING \
    o.seq, o.lease, o.message_id, o.topic, o.payload";

/// Drains the outbox by hand, publishing a whole batch at once and
/// marking it in one statement.
async fn by_hand_batched(pool: &sqlx::PgPool, context: &jetstream::Context, batch: i64) {
    by_hand_batched_until(pool, context, CLAIM, batch, i64::MAX).await;
}

/// Relays by hand with `claim`, a batch at a time, until `until`
/// messages are relayed or none is due; returns how many were.
async fn by_hand_batched_until(
    pool: &sqlx::PgPool,
    context: &jetstream::Context,
    claim: &'static str,
    batch: i64,
    until: i64,
) -> i64 {
    let mut relayed = 0;
    while relayed < until {
        let rows = sqlx::query(claim)
            .bind(batch)
            .fetch_all(pool)
            .await
            .unwrap();
        if rows.is_empty() {
            return relayed;
        }
        relayed += rows.len() as i64;
        let publishes = rows.iter().map(|row| {
            let (id, topic): (String, String) = (row.get(2), row.get(3));
            let payload: Vec<u8> = row.get(4);
            async move {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
                context
                    .publish_with_headers(topic, headers, payload.into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        });
        futures_util::future::join_all(publishes).await;
        let seqs: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
        let leases: Vec<i64> = rows.iter().map(|row| row.get(1)).collect();
        let done = sqlx::query(MARK_MANY)
            .bind(&seqs)
            .bind(&leases)
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), seqs.len() as u64);
    }
    relayed
}

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
    if std::env::args().any(|arg| arg == "backlog") {
        backlog::run(&nats).await;
        return;
    }
    let url = nats.clone();
    support::on_postgres(PLACE, |pool| async move {
        let nats = url;
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Postgres) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        let client = async_nats::connect(&nats).await.unwrap();
        let context = jetstream::new(client);
        fresh_stream(&context).await;
        println!("PostgreSQL to JetStream: messages per second, median of {ROUNDS} rounds");
        println!(
            "| batch | library relay | by hand, one at a time | ratio (paired) | by hand, \
             batched | ratio (paired) |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        let mut round_id = 0;
        for batch in [10_u32, 50, 200] {
            let relay = Relay::new(JetStream::new(context.clone())).batch(batch);
            let mut rates: [Vec<f64>; 3] = Default::default();
            for round in 0..ROUNDS {
                for turn in 0..3 {
                    let way = (turn + round) % 3;
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
                        1 => by_hand(&pool, &context, i64::from(batch)).await,
                        _ => by_hand_batched(&pool, &context, i64::from(batch)).await,
                    }
                    rates[way].push(MESSAGES as f64 / started.elapsed().as_secs_f64());
                }
            }
            let paired = |other: usize| support::paired(&rates[0], &rates[other]);
            let [ours, one, many] = rates.clone().map(support::median);
            println!(
                "| {batch} | {ours:.0} | {one:.0} | {:.3} ({:.3}) | {many:.0} | {:.3} ({:.3}) |",
                ours / one,
                paired(1),
                ours / many,
                paired(2)
            );
        }
        context.delete_stream(PLACE.name).await.unwrap();
    })
    .await;
    library_alone(&nats).await;
}

/// The bench's stream, made anew: its subjects are the bench's, and a
/// duplicate window of a minute.
async fn fresh_stream(context: &jetstream::Context) {
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
}

/// The library's relay alone on SQLite and MariaDB: messages per second
/// for each batch size, median of the rounds.
async fn library_alone(nats: &str) {
    let client = async_nats::connect(nats).await.unwrap();
    let context = jetstream::new(client);
    fresh_stream(&context).await;
    let context = &context;
    support::on_sqlite(4, |pool| async move {
        drain_rounds(
            "SQLite",
            &pool,
            stateguard::ddl::Dialect::Sqlite,
            "DELETE FROM stateguard_outbox",
            SQLITE_SEED,
            context,
        )
        .await;
    })
    .await;
    support::on_mysql(MYSQL_PLACE, |pool| async move {
        drain_rounds(
            "MariaDB",
            &pool,
            stateguard::ddl::Dialect::MySql,
            "TRUNCATE stateguard_outbox",
            MYSQL_SEED,
            context,
        )
        .await;
    })
    .await;
    context.delete_stream(PLACE.name).await.unwrap();
}

async fn drain_rounds<DB: stateguard::Backend>(
    backend: &str,
    pool: &sqlx::Pool<DB>,
    dialect: stateguard::ddl::Dialect,
    empty: &'static str,
    seed: &'static str,
    context: &jetstream::Context,
) where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    for statement in stateguard::outbox::ddl(dialect) {
        sqlx::raw_sql(*statement).execute(pool).await.unwrap();
    }
    println!(
        "\n{backend} to JetStream, the library's relay: messages per second, median of {ROUNDS} rounds"
    );
    println!("| batch | messages/s |");
    println!("| ---: | ---: |");
    for batch in [10_u32, 50, 200] {
        let relay = Relay::new(JetStream::new(context.clone())).batch(batch);
        let prefix = format!("{backend}-{batch}-");
        let rate = library_rounds(pool, &relay, [empty, seed], &prefix, MESSAGES, None).await;
        println!("| {batch} | {rate:.0} |");
    }
}

/// Due messages on SQLite: `?1` the ids' prefix, `?2` how many.
const SQLITE_SEED: &str = "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE \
    i < ?2) INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, \
    next_attempt_at) SELECT ?1 || i, CAST(i % 100 AS TEXT), 'stateguard_outbox_bench.m', \
    CAST('{}' AS BLOB), strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', \
    'now') FROM g";

/// Due messages on MariaDB, from its sequence engine: the ids' prefix,
/// how many (at most 200,000).
const MYSQL_SEED: &str = "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, \
    created_at, next_attempt_at) SELECT CONCAT(?, seq), CAST(seq % 100 AS CHAR), \
    'stateguard_outbox_bench.m', CAST('{}' AS BINARY), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) FROM \
    seq_1_to_200000 WHERE seq <= ?";

/// Passes of `relay` until `until` messages are taken, or, without a
/// count, until a pass takes none: how many were taken.
async fn relay_until<DB: stateguard::Backend>(
    relay: &Relay<JetStream>,
    pool: &sqlx::Pool<DB>,
    until: Option<i64>,
) -> i64 {
    let mut taken = 0;
    while until.is_none_or(|until| taken < until) {
        match relay.pass(pool).await.unwrap().taken() {
            0 => break,
            n => taken += n as i64,
        }
    }
    taken
}

/// The library's messages per second over `ROUNDS` rounds, median. Each
/// round empties the outbox (`empty`), writes `due` messages (`seed`,
/// their ids led by `prefix` and the round), and times `relay` until
/// `relayed` of them are taken, or until none is left.
async fn library_rounds<DB: stateguard::Backend>(
    pool: &sqlx::Pool<DB>,
    relay: &Relay<JetStream>,
    [empty, seed]: [&'static str; 2],
    prefix: &str,
    due: i64,
    relayed: Option<i64>,
) -> f64
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut rates = Vec::new();
    for round in 0..ROUNDS {
        sqlx::query(empty).execute(pool).await.unwrap();
        sqlx::query(seed)
            .bind(format!("{prefix}{round}-"))
            .bind(due)
            .execute(pool)
            .await
            .unwrap();
        let started = Instant::now();
        let taken = relay_until(relay, pool, relayed).await;
        assert!(taken >= relayed.unwrap_or(due), "ran dry after {taken}");
        rates.push(taken as f64 / started.elapsed().as_secs_f64());
    }
    support::median(rates)
}
