//! `cargo bench --bench outbox -- backlog`: the relay with work waiting.
//! Before each round the outbox holds a backlog of 2,000, 20,000 or
//! 200,000 due messages of 100 order keys; one relay then relays 2,000 of
//! them in batches of 100 to JetStream. Three ways in rotation, on
//! PostgreSQL: the library's `Relay`; by hand, keeping per-key order (the
//! library's claim without its tag, the batch published at once and
//! marked in one statement); and by hand without order (the due messages
//! by seq, whatever their keys, published and marked the same way).
//! Messages per second, median of the rounds, and the paired ratios. Then
//! the library alone on SQLite and MariaDB at the same backlogs.

use std::time::Instant;

use async_nats::jetstream;
use stateguard::outbox::{JetStream, Relay};

use super::{
    CLAIM, CLAIM_UNORDERED, MYSQL_PLACE, MYSQL_SEED, PLACE, SEED, SQLITE_SEED,
    by_hand_batched_until, fresh_stream, library_rounds, relay_until, support,
};

/// How many messages a round relays.
const RELAYED: i64 = 2_000;
/// The relays' batch.
const BATCH: u32 = 100;
/// The due messages waiting when a round starts.
const BACKLOGS: [i64; 3] = [2_000, 20_000, 200_000];
const ROUNDS: usize = 6;

/// Relays with the library until `RELAYED` messages are relayed.
async fn library<DB: stateguard::Backend>(relay: &Relay<JetStream>, pool: &sqlx::Pool<DB>) {
    let relayed = relay_until(relay, pool, Some(RELAYED)).await;
    assert!(relayed >= RELAYED, "the backlog ran dry after {relayed}");
}

/// The outbox emptied, then `n` due messages whose ids start with
/// `prefix`, its statistics read anew, as autovacuum would after such a
/// change.
async fn seeded(pool: &sqlx::PgPool, prefix: String, n: i64) {
    for sql in ["TRUNCATE stateguard_outbox", "ANALYZE stateguard_outbox"] {
        sqlx::query(sql).execute(pool).await.unwrap();
    }
    sqlx::query(SEED)
        .bind(prefix)
        .bind(n)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE stateguard_outbox")
        .execute(pool)
        .await
        .unwrap();
}

/// Only one way, many rounds at a backlog of 20,000, for a profiler:
/// `STATEGUARD_BACKLOG_ONLY=library` (or `ordered`), 20 rounds or
/// `STATEGUARD_BACKLOG_ROUNDS`; under callgrind, two counts at different
/// rounds give the client's instructions per message.
async fn only(way: &str, context: &jetstream::Context) {
    support::on_postgres(PLACE, |pool| async move {
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Postgres) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        let relay = Relay::new(JetStream::new(context.clone())).batch(BATCH);
        let mut spent = std::time::Duration::ZERO;
        let rounds: u32 =
            std::env::var("STATEGUARD_BACKLOG_ROUNDS").map_or(20, |n| n.parse().unwrap());
        for round in 0..rounds {
            seeded(&pool, format!("o{round}-"), 20_000).await;
            let started = Instant::now();
            match way {
                "library" => library(&relay, &pool).await,
                _ => {
                    by_hand_batched_until(&pool, context, CLAIM, BATCH.into(), RELAYED).await;
                }
            }
            spent += started.elapsed();
        }
        println!(
            "{way}: {:.0} messages/s",
            f64::from(rounds) * RELAYED as f64 / spent.as_secs_f64()
        );
    })
    .await;
}

pub async fn run(nats: &str) {
    if let Ok(way) = std::env::var("STATEGUARD_BACKLOG_ONLY") {
        let client = async_nats::connect(nats).await.unwrap();
        let context = jetstream::new(client);
        fresh_stream(&context).await;
        only(&way, &context).await;
        return;
    }
    let client = async_nats::connect(nats).await.unwrap();
    let context = jetstream::new(client);
    fresh_stream(&context).await;
    let context = &context;
    support::on_postgres(PLACE, |pool| async move {
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Postgres) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        println!(
            "PostgreSQL to JetStream, {RELAYED} messages relayed in batches of {BATCH} from a \
             backlog: messages per second, median of {ROUNDS} rounds"
        );
        println!(
            "| due | `Relay` | by hand, per-key order | ratio (paired) | by hand, no order | \
             ratio (paired) |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        let relay = Relay::new(JetStream::new(context.clone())).batch(BATCH);
        let mut round_id = 0;
        for backlog in BACKLOGS {
            let mut rates: [Vec<f64>; 3] = Default::default();
            for round in 0..ROUNDS {
                for turn in 0..3 {
                    let way = (turn + round) % 3;
                    round_id += 1;
                    seeded(&pool, format!("b{round_id}-"), backlog).await;
                    let started = Instant::now();
                    if way == 0 {
                        library(&relay, &pool).await;
                    } else {
                        let claim = [CLAIM, CLAIM_UNORDERED][way - 1];
                        let n = by_hand_batched_until(&pool, context, claim, BATCH.into(), RELAYED)
                            .await;
                        assert!(n >= RELAYED, "ran dry after {n}");
                    }
                    rates[way].push(RELAYED as f64 / started.elapsed().as_secs_f64());
                }
            }
            let paired = |other: usize| support::paired(&rates[0], &rates[other]);
            let [ours, ordered, unordered] = rates.clone().map(support::median);
            println!(
                "| {backlog} | {ours:.0} | {ordered:.0} | {:.3} ({:.3}) | {unordered:.0} | {:.3} \
                 ({:.3}) |",
                ours / ordered,
                paired(1),
                ours / unordered,
                paired(2)
            );
        }
    })
    .await;
    println!(
        "\nThe library's relay alone, the same load: messages per second, median of {ROUNDS} rounds"
    );
    println!("| due | SQLite | MariaDB |");
    println!("| ---: | ---: | ---: |");
    let mut sqlite = Vec::new();
    {
        let sqlite = &mut sqlite;
        support::on_sqlite(4, |pool| async move {
            for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Sqlite) {
                sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
            }
            for backlog in BACKLOGS {
                let empty = "DELETE FROM stateguard_outbox";
                let relay = Relay::new(JetStream::new(context.clone())).batch(BATCH);
                let (prefix, seeds) = (format!("x{backlog}-"), [empty, SQLITE_SEED]);
                sqlite.push(
                    library_rounds(&pool, &relay, seeds, &prefix, backlog, Some(RELAYED)).await,
                );
            }
        })
        .await;
    }
    let sqlite = &sqlite;
    support::on_mysql(MYSQL_PLACE, |pool| async move {
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::MySql) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        for (i, backlog) in BACKLOGS.into_iter().enumerate() {
            let empty = "TRUNCATE stateguard_outbox";
            let relay = Relay::new(JetStream::new(context.clone())).batch(BATCH);
            let (prefix, seeds) = (format!("x{backlog}-"), [empty, MYSQL_SEED]);
            let rate = library_rounds(&pool, &relay, seeds, &prefix, backlog, Some(RELAYED)).await;
            println!("| {backlog} | {:.0} | {rate:.0} |", sqlite[i]);
        }
    })
    .await;
    context.delete_stream(PLACE.name).await.unwrap();
}
