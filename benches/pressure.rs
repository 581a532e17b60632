//! A system under pressure, on PostgreSQL: claim and relay throughput
//! over a long run while another session holds a snapshot open, so that
//! vacuum can remove none of the rows the run leaves dead, against the
//! same run without it. Reported, not gated.
//!
//! Two loops run side by side for the whole run: one inserts 250 pending
//! payouts, claims them and finishes them with `finish_many` (no-op
//! effects, a concurrency of 32); the other enqueues 100 outbox messages
//! of 100 order keys and relays them with `Relay` to a publisher that
//! accepts at once (the database's work alone, without a broker's). Rows
//! and messages per second are printed for each tenth of the run.
//!
//! `cargo bench --bench pressure`, with `STATEGUARD_POSTGRES_URL`; the
//! run lasts `STATEGUARD_PRESSURE_SECS` seconds per phase (600 by
//! default). The schema `stateguard_pressure` is made anew and removed at
//! the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::{Connection as _, Executor as _};
use stateguard::outbox::{Message, Published, Publisher, Relay};
use stateguard::{Effect, StateMachine, Verdict, finish_many};

#[allow(dead_code)]
mod support;

const PLACE: support::Place = support::Place {
    name: "stateguard_pressure",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_pressure CASCADE",
        "CREATE SCHEMA stateguard_pressure",
    ],
    drop: "DROP SCHEMA stateguard_pressure CASCADE",
    connections: 6,
    delay: Duration::ZERO,
};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "pr_payouts",
    column = "status",
    key = "id",
    key_type = "i64",
    version = "version"
)]
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

const CREATE: &str = "CREATE TABLE pr_payouts (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status TEXT NOT NULL DEFAULT 'pending',
    version BIGINT NOT NULL DEFAULT 0,
    sending_since TIMESTAMPTZ
);
CREATE INDEX pr_payouts_status ON pr_payouts (status, id);";

const PAYOUTS: &str = "INSERT INTO pr_payouts (status) SELECT 'pending' FROM \
    generate_series(1, 250)";

const MESSAGES: &str = "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, \
    created_at, next_attempt_at) SELECT $1 || g, CAST(g % 100 AS TEXT), 'pressure', \
    CAST('{}' AS BYTEA), now(), now() FROM generate_series(1, 100) g";

/// A broker that accepts every message at once.
struct Accepting;

impl Publisher for Accepting {
    type Error = std::io::Error;

    async fn publish(&self, _: Message<'_>) -> Result<Published, Self::Error> {
        Ok(Published::new(false))
    }
}

/// The claim loop until `stop`: rows finished, counted into `done`.
async fn payouts(pool: sqlx::PgPool, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        pool.execute(PAYOUTS).await.unwrap();
        let wins = Payout::start().claim(&pool, 250).await.unwrap();
        let rows = finish_many(&pool, wins, 32, |_: Effect<Payout, i64>| async {
            Verdict::done()
        })
        .await
        .unwrap();
        done.fetch_add(rows.len() as u64, Ordering::Relaxed);
    }
}

/// The relay loop until `stop`: messages published, counted into `done`.
async fn relay(pool: sqlx::PgPool, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let relay = Relay::new(Accepting).batch(100);
    let mut round = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        sqlx::query(MESSAGES)
            .bind(format!("{round}-"))
            .execute(&pool)
            .await
            .unwrap();
        let mut taken = 0;
        while taken < 100 {
            let pass = relay.pass(&pool).await.unwrap();
            if pass.taken() == 0 {
                break;
            }
            taken += pass.taken();
            done.fetch_add(pass.published() as u64, Ordering::Relaxed);
        }
    }
}

/// One phase: both loops for `run`, the rates of each tenth of it.
async fn phase(pool: &sqlx::PgPool, run: Duration) -> Vec<(f64, f64)> {
    pool.execute("TRUNCATE pr_payouts, stateguard_outbox")
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (rows, messages) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let loops = [
        tokio::spawn(payouts(pool.clone(), stop.clone(), rows.clone())),
        tokio::spawn(relay(pool.clone(), stop.clone(), messages.clone())),
    ];
    let tenth = run / 10;
    let mut rates = Vec::new();
    let (mut last_rows, mut last_messages) = (0, 0);
    for _ in 0..10 {
        let started = Instant::now();
        tokio::time::sleep(tenth).await;
        let seconds = started.elapsed().as_secs_f64();
        let (r, m) = (
            rows.load(Ordering::Relaxed),
            messages.load(Ordering::Relaxed),
        );
        rates.push((
            (r - last_rows) as f64 / seconds,
            (m - last_messages) as f64 / seconds,
        ));
        (last_rows, last_messages) = (r, m);
    }
    stop.store(true, Ordering::Relaxed);
    for handle in loops {
        handle.await.unwrap();
    }
    rates
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = std::env::var("STATEGUARD_PRESSURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let run = Duration::from_secs(seconds);
    let url = std::env::var("STATEGUARD_POSTGRES_URL").ok();
    support::on_postgres(PLACE, |pool| async move {
        pool.execute(CREATE).await.unwrap();
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Postgres) {
            sqlx::raw_sql(*statement).execute(&pool).await.unwrap();
        }
        let free = phase(&pool, run).await;
        // Another session's snapshot, held for the whole phase: no row
        // either loop leaves dead can be vacuumed while it stands.
        let mut holder = sqlx::PgConnection::connect(url.as_deref().unwrap())
            .await
            .unwrap();
        holder
            .execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .unwrap();
        holder.execute("SELECT 1").await.unwrap();
        let held = phase(&pool, run).await;
        holder.execute("ROLLBACK").await.unwrap();
        println!(
            "PostgreSQL, {seconds} s a phase: claimed and finished rows per second, and messages \
             relayed per second, in each tenth of the run"
        );
        println!(
            "| tenth | rows/s, vacuum free | rows/s, snapshot held | ratio | messages/s, vacuum \
             free | messages/s, snapshot held | ratio |"
        );
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (i, ((fr, fm), (hr, hm))) in free.iter().zip(&held).enumerate() {
            println!(
                "| {} | {fr:.0} | {hr:.0} | {:.2} | {fm:.0} | {hm:.0} | {:.2} |",
                i + 1,
                hr / fr,
                hm / fm
            );
        }
    })
    .await;
}
