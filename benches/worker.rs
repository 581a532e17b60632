//! The worker's own costs on PostgreSQL, measured in one run:
//!
//! - **Throughput**: 8 `Worker`s, each claiming 50 rows at a time and
//!   running a no-op effect at a concurrency of 50, against the raw
//!   `FOR UPDATE SKIP LOCKED` claim-and-mark statement in batches of 50 by
//!   8 tasks (goal: at least 0.7×), and against the same loop by hand in
//!   the two statements any effect needs, a claim into `sending` and a
//!   mark as `sent` after the effects (the ceiling a worker can reach).
//! - **Latency**: the time from a row's insert (committed) into `pending`
//!   to its effect's start, p50 and p99, for a worker woken by
//!   `LISTEN/NOTIFY` (`Worker::listen`, the triggers of `WakeUps`) and for
//!   one that polls (the default `Poll`, 50 ms doubling up to 1 s). Each
//!   row is inserted alone, a random 0 to 100 ms after the last one
//!   started.
//!
//! Rounds alternate (ABBA…), each on rows of its own; "paired" is the
//! median of the per-round ratios. Runs with `STATEGUARD_POSTGRES_URL`;
//! SQLite and MySQL have no wake-ups, and their claims are measured by
//! `finish_many`'s bench.
//!
//! Run with `cargo bench --bench worker`.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use stateguard::worker::{Poll, WakeUps, Worker};
use stateguard::{Effect, StateMachine, Verdict};
use tokio::sync::{mpsc, watch};

// PostgreSQL alone of the backends the helpers serve.
#[allow(dead_code)]
mod support;

use support::median;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "wk_payouts", column = "status", key = "id", key_type = "i64")]
enum Payout {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const POSTGRES: support::Place = support::Place {
    name: "stateguard_bench_worker",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_bench_worker CASCADE",
        "CREATE SCHEMA stateguard_bench_worker",
    ],
    drop: "DROP SCHEMA stateguard_bench_worker CASCADE",
    connections: 12,
    delay: Duration::ZERO,
};

const CREATE: &str = "CREATE TABLE wk_payouts (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
    sending_since TIMESTAMPTZ); CREATE INDEX wk_payouts_by_status ON wk_payouts (status, id)";
const CLEAR: &str = "TRUNCATE wk_payouts";
const PENDING: &str =
    "INSERT INTO wk_payouts (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g";
const LEFT: &str = "SELECT COUNT(*) FROM wk_payouts WHERE status <> 'sent'";
/// The raw claim-and-mark: 50 pending rows, skipping those another
/// transaction holds, marked done in the same statement. The candidates
/// are a `MATERIALIZED` CTE, so that the planner runs their `LIMIT` once
/// (as a subquery in `IN (…)` it may run it again, and lock more rows).
const CLAIM_AND_MARK: &str = "WITH c AS MATERIALIZED (SELECT id FROM wk_payouts \
    WHERE status = 'pending' ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED) \
    UPDATE wk_payouts SET status = 'sent' FROM c WHERE wk_payouts.id = c.id";
/// The same as it is often written, the candidates in `IN (…)`.
const CLAIM_AND_MARK_IN: &str = "UPDATE wk_payouts SET status = 'sent' WHERE id IN (SELECT id \
    FROM wk_payouts WHERE status = 'pending' ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED)";
/// The same, the candidates as one array, which the key's index serves;
/// joined or in `IN (…)`, PostgreSQL may hash them and scan the whole
/// table. The form the library's claim uses.
const CLAIM_AND_MARK_ANY: &str = "WITH c AS MATERIALIZED (SELECT id FROM wk_payouts \
    WHERE status = 'pending' ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED) \
    UPDATE wk_payouts SET status = 'sent' WHERE id = ANY (ARRAY(SELECT id FROM c))";
/// The claim of the two-statement loop by hand, in the array form.
const HAND_CLAIM: &str = "WITH c AS MATERIALIZED (SELECT id FROM wk_payouts \
    WHERE status = 'pending' ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED) \
    UPDATE wk_payouts SET status = 'sending', sending_since = statement_timestamp() \
    WHERE id = ANY (ARRAY(SELECT id FROM c)) RETURNING wk_payouts.id";
/// Its mark, after the effects.
const HAND_MARK: &str =
    "UPDATE wk_payouts SET status = 'sent' WHERE id = ANY($1) AND status = 'sending'";

const ROWS: i64 = 20_000;
const WORKERS: usize = 8;
const BATCH: u32 = 50;
const ROUNDS: usize = 4;
const SAMPLES: usize = 100;

/// Rows per second of `run` over `ROWS` fresh pending rows.
async fn timed(pool: &PgPool, run: impl Future<Output = ()>) -> f64 {
    sqlx::query(CLEAR).execute(pool).await.unwrap();
    sqlx::query(PENDING).bind(ROWS).execute(pool).await.unwrap();
    let started = Instant::now();
    run.await;
    let rate = ROWS as f64 / started.elapsed().as_secs_f64();
    let (left,): (i64,) = sqlx::query_as(LEFT).fetch_one(pool).await.unwrap();
    assert_eq!(left, 0, "every row sent");
    rate
}

/// Resolves once no row is left unsent.
async fn all_sent(pool: &PgPool) {
    loop {
        let (left,): (i64,) = sqlx::query_as(LEFT).fetch_one(pool).await.unwrap();
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `WORKERS` workers with a no-op effect, until every row is sent.
async fn workers(pool: &PgPool) {
    let (stop, stopped) = watch::channel(false);
    let runs = (0..WORKERS).map(|_| {
        let mut stopped = stopped.clone();
        Worker::new(pool.clone())
            .effects(Payout::start(), BATCH, 50, |_: Effect<Payout, i64>| async {
                Verdict::done()
            })
            // Busy loops recover once per longest wait: the default's 1 s.
            .poll(Poll::new(Duration::from_millis(1), Duration::from_secs(1)))
            .run(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
    });
    let running = futures_util::future::join_all(runs);
    let watch = async {
        all_sent(pool).await;
        stop.send(true).unwrap();
    };
    let (reports, ()) = tokio::join!(running, watch);
    for report in reports {
        assert!(report.unwrap().drained);
    }
}

/// `WORKERS` tasks of the raw claim-and-mark `sql`, until it moves
/// nothing.
async fn claim_and_mark(pool: &PgPool, sql: &'static str) {
    let task = || async {
        while sqlx::query(sql)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected()
            > 0
        {}
    };
    futures_util::future::join_all((0..WORKERS).map(|_| task())).await;
}

/// `WORKERS` tasks of the two-statement loop by hand.
async fn claim_then_mark(pool: &PgPool) {
    let task = || async {
        loop {
            let ids: Vec<(i64,)> = sqlx::query_as(HAND_CLAIM).fetch_all(pool).await.unwrap();
            if ids.is_empty() {
                return;
            }
            let ids: Vec<i64> = ids.into_iter().map(|(id,)| id).collect();
            sqlx::query(HAND_MARK)
                .bind(ids)
                .execute(pool)
                .await
                .unwrap();
        }
    };
    futures_util::future::join_all((0..WORKERS).map(|_| task())).await;
}

/// 0 to 100 ms, at random.
fn pause() -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_millis(random % 101)
}

/// The times from each of `SAMPLES` rows' insert to its effect's start,
/// for one worker that listens or not.
async fn latencies(pool: &PgPool, listen: bool) -> Vec<Duration> {
    sqlx::query(CLEAR).execute(pool).await.unwrap();
    let (started, mut effects) = mpsc::unbounded_channel::<(i64, Instant)>();
    let (stop, mut stopped) = watch::channel(false);
    let mut worker = Worker::new(pool.clone()).effects(
        Payout::start(),
        BATCH,
        50,
        move |effect: Effect<Payout, i64>| {
            let _ = started.send((*effect.key(), Instant::now()));
            async { Verdict::done() }
        },
    );
    if listen {
        worker = worker.listen();
    }
    let running = tokio::spawn(worker.run(async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    }));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut waits = Vec::with_capacity(SAMPLES);
    for id in 1..=SAMPLES as i64 {
        let inserted = Instant::now();
        sqlx::query("INSERT INTO wk_payouts (id, status) VALUES ($1, 'pending')")
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
        let (key, at) = effects.recv().await.unwrap();
        assert_eq!(key, id);
        waits.push(at - inserted);
        tokio::time::sleep(pause()).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap().unwrap();
    waits.sort();
    waits
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    support::on_postgres(POSTGRES, |pool| async move {
        sqlx::raw_sql(CREATE).execute(&pool).await.unwrap();
        for statement in WakeUps::new().machine::<Payout>().statements() {
            sqlx::raw_sql(*statement)
                .execute(&pool)
                .await
                .unwrap();
        }
        let p = Arc::new(pool.clone());
        let mut rows = Vec::new();
        for (against, baseline) in [
            ("raw SKIP LOCKED claim-and-mark, batches of 50 (candidates MATERIALIZED)", 0),
            ("the same, candidates in `IN (…)`", 1),
            ("the same, candidates as one array (`= ANY (ARRAY(…))`)", 3),
            ("claim, then mark, by hand (two statements per batch of 50)", 2),
        ] {
            let (ours, theirs) = support::alternating(ROUNDS,
                || timed(&p, workers(&p)),
                || async {
                    match baseline {
                        0 => timed(&p, claim_and_mark(&p, CLAIM_AND_MARK)).await,
                        1 => timed(&p, claim_and_mark(&p, CLAIM_AND_MARK_IN)).await,
                        3 => timed(&p, claim_and_mark(&p, CLAIM_AND_MARK_ANY)).await,
                        _ => timed(&p, claim_then_mark(&p)).await,
                    }
                },
            )
            .await;
            let paired = support::paired(&ours, &theirs);
            rows.push((against, median(ours), median(theirs), paired));
        }
        println!();
        println!("| case | baseline | ours (rows/s) | baseline (rows/s) | paired ratio |");
        println!("| --- | --- | ---: | ---: | ---: |");
        for (against, ours, theirs, paired) in rows {
            println!(
                "| 8 workers, claim 50, no-op effect | {against} | {ours:.0} | {theirs:.0} | {paired:.2} |"
            );
        }
        println!();
        println!("| move to effect start | p50 | p99 |");
        println!("| --- | ---: | ---: |");
        for (name, listen) in [("wake-ups (LISTEN/NOTIFY)", true), ("polling, 50 ms to 1 s", false)] {
            let waits = latencies(&pool, listen).await;
            println!(
                "| {name} | {:.1} ms | {:.1} ms |",
                percentile(&waits, 50).as_secs_f64() * 1000.0,
                percentile(&waits, 99).as_secs_f64() * 1000.0
            );
        }
    })
    .await;
}
