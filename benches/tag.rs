//! What the PostgreSQL statement tag costs on the winning path, measured
//! finely: one row's compare-and-set, 40 rounds of 250 calls, six ways
//! in rotation so that the machine's drift falls on each alike:
//!
//! - the statement without its tag, by hand (`execute`, the command's
//!   count), the library's winning path before statements proved their
//!   rows;
//! - the tagged statement, by hand, its row fetched and its tag checked;
//! - the tagged statement, by hand, run with `execute`;
//! - `Transition::apply`;
//! - on a second pool of the same server, which `pooler::check` found
//!   dedicated and was asked to run untagged (`untagged_if_dedicated`):
//!   the untagged statement by hand again, and `Transition::apply`,
//!   whose ratio is taken against that hand statement on its own pool.
//!
//! Once with the WAL flushed at each commit, as a server runs by default,
//! and once with `synchronous_commit = off`, where the flush no longer
//! hides what the statement and the client cost. PostgreSQL only (no other
//! backend tags its statements), on `STATEGUARD_POSTGRES_URL`, in the
//! schema `stateguard_tag`. `cargo bench --bench tag`; the matrix
//! (`cargo bench --bench matrix`) has the same comparison among its rows,
//! at 20 rounds.
//!
//! `STATEGUARD_TAG_COUNT=<way>:<calls>` runs one way alone for that many
//! calls, with the WAL flushed, and no table of rates: the mode to run
//! under `valgrind --tool=callgrind`, which counts the client's
//! instructions, not the server's. Two counts of one way at different
//! numbers of calls give its instructions per call, set-up cancelled.

use std::time::{Duration, Instant};

use sqlx::{Executor as _, Row as _};
use stateguard::StateMachine;

// One backend of the three the helpers serve.
#[allow(dead_code)]
mod support;

const PLACE: support::Place = support::Place {
    name: "stateguard_tag",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_tag CASCADE",
        "CREATE SCHEMA stateguard_tag",
    ],
    drop: "DROP SCHEMA stateguard_tag CASCADE",
    connections: 1,
    delay: Duration::ZERO,
};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "t_plain", column = "status", key = "id", key_type = "i64")]
enum Plain {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

const CALLS: i64 = 250;
const ROUNDS: usize = 40;
/// Each way, and the way its ratio is taken against: the untagged
/// statement by hand on the same pool. Two pools on one server can differ
/// by more than the tag (where the scheduler puts each backend), so the
/// untagged pool's `apply` is measured against a hand statement there.
const WAYS: [(&str, usize); 6] = [
    ("untagged, execute (baseline)", 0),
    ("tagged, rows fetched, tag checked", 0),
    ("tagged, execute", 0),
    ("Transition::apply", 0),
    ("untagged pool: untagged, execute (its baseline)", 4),
    ("untagged pool: Transition::apply", 4),
];

#[path = "batches.rs"]
#[allow(dead_code)]
mod batches;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    support::on_postgres(PLACE, |pool| async move {
        let rows = 2 * WAYS.len() as i64 * ROUNDS as i64 * CALLS;
        // A second pool of one connection on the same server and schema,
        // whose moves run untagged.
        let untagged_pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .test_before_acquire(false)
            .connect_with((*pool.connect_options()).clone())
            .await
            .unwrap();
        let pooling = stateguard::pooler::check(&untagged_pool)
            .untagged_if_dedicated()
            .await
            .unwrap();
        assert!(matches!(
            pooling,
            stateguard::pooler::Pooling::Dedicated { .. }
        ));
        pool.execute("CREATE TABLE t_plain (id BIGINT PRIMARY KEY, status TEXT NOT NULL)")
            .await
            .unwrap();
        sqlx::query("INSERT INTO t_plain SELECT g, 'a' FROM generate_series(1, $1) g")
            .bind(rows)
            .execute(&pool)
            .await
            .unwrap();
        let tagged = Plain::MACHINE
            .transition("advance")
            .unwrap()
            .update_sql()
            .postgres();
        // The literal's text, between its quotes: `stateguard <16 hex>`.
        let at = tagged.find("'stateguard ").unwrap() + 1;
        let tag = &tagged[at..at + "stateguard 0123456789abcdef".len()];
        let untagged = batches::untagged(tagged);
        if let Ok(count) = std::env::var("STATEGUARD_TAG_COUNT") {
            let (way, calls) = count
                .split_once(':')
                .expect("STATEGUARD_TAG_COUNT=<way>:<calls>");
            let (way, calls): (usize, i64) = (way.parse().unwrap(), calls.parse().unwrap());
            assert!(
                way < WAYS.len() && calls <= rows,
                "no such way, or too many calls"
            );
            for id in 1..=calls {
                run_way(way, id, &pool, &untagged_pool, tagged, untagged, tag).await;
            }
            println!("{}: {calls} calls", WAYS[way].0);
            return;
        }
        let mut next = 1;
        for (setting, set) in [
            ("WAL flushed at each commit", "SET synchronous_commit = on"),
            ("synchronous_commit = off", "SET synchronous_commit = off"),
        ] {
            pool.execute(set).await.unwrap();
            untagged_pool.execute(set).await.unwrap();
            let mut rates = vec![Vec::new(); WAYS.len()];
            // The ways of one pool in rotation, then the other's: the first
            // statements after a switch of pools run at another speed, so
            // no way follows a switch more often than another of its pool.
            for ways in [0..4, 4..WAYS.len()] {
                for round in 0..ROUNDS {
                    for turn in 0..ways.len() {
                        let way = ways.start + (turn + round) % ways.len();
                        let from = next;
                        next += CALLS;
                        let started = Instant::now();
                        for id in from..from + CALLS {
                            run_way(way, id, &pool, &untagged_pool, tagged, untagged, tag).await;
                        }
                        rates[way].push(CALLS as f64 / started.elapsed().as_secs_f64());
                    }
                }
            }
            println!("\nPostgreSQL, {setting}: calls per second, median of {ROUNDS} rounds");
            println!("| way | calls/s | ratio | paired |");
            println!("| --- | ---: | ---: | ---: |");
            for (way, &(name, against)) in WAYS.iter().enumerate() {
                let base = support::median(rates[against].clone());
                let rate = support::median(rates[way].clone());
                let paired: Vec<f64> = rates[way]
                    .iter()
                    .zip(&rates[against])
                    .map(|(a, b)| a / b)
                    .collect();
                println!(
                    "| {name} | {rate:.0} | {:.3} | {:.3} |",
                    rate / base,
                    support::median(paired)
                );
            }
        }
    })
    .await;
}

/// One call of `way` on the row `id`, checked.
async fn run_way(
    way: usize,
    id: i64,
    pool: &sqlx::PgPool,
    untagged_pool: &sqlx::PgPool,
    tagged: &'static str,
    untagged: &'static str,
    tag: &str,
) {
    match way {
        0 => {
            let done = sqlx::query(untagged).bind(id).execute(pool).await;
            assert_eq!(done.unwrap().rows_affected(), 1);
        }
        1 => {
            let rows = sqlx::query(tagged).bind(id).bind(tag).fetch_all(pool).await;
            let rows = rows.unwrap();
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].try_get::<&str, _>(0).unwrap(), tag);
        }
        2 => {
            let done = sqlx::query(tagged).bind(id).bind(tag).execute(pool).await;
            assert_eq!(done.unwrap().rows_affected(), 1);
        }
        3 => {
            let won = Plain::advance().apply(pool, id).await.unwrap();
            assert!(won.is_applied());
        }
        4 => {
            let done = sqlx::query(untagged).bind(id).execute(untagged_pool).await;
            assert_eq!(done.unwrap().rows_affected(), 1);
        }
        _ => {
            let won = Plain::advance().apply(untagged_pool, id).await.unwrap();
            assert!(won.is_applied());
        }
    }
}
