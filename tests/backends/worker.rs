//! `Worker`: the claim, effect and recovery loops run by the library, many
//! workers at once, and their shutdown.

use crate::common;
use crate::common::KeyColumn;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Bind, Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::key::shape::One;
use stateguard::outbox::{self, Message, Published, Publisher, Relay};
use stateguard::worker::{Poll, Prune, Rate, Worker, WorkerReport};
use stateguard::{Effect, Error, StateMachine, Tx, Verdict};
use stateguard_runtime::fault::{Fault, Plan};

/// The common `transfers` table's machine with a lease no loaded machine
/// outlives by accident: a test that wants a lease gone backdates it.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
pub(crate) enum TransferStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// Each effect key's runs.
#[derive(Default)]
struct Calls(Mutex<HashMap<String, u32>>);

impl Calls {
    fn record(&self, effect: &Effect<TransferStatus, i64>) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(effect.effect_key().to_owned())
            .or_default() += 1;
    }

    fn counts(&self) -> HashMap<String, u32> {
        self.0.lock().unwrap().clone()
    }
}

/// How many transfers are in `status`.
async fn count<DB: TestBackend>(db: &Db<DB>, status: &str) -> i64 {
    let sql = match DB::DIALECT {
        Dialect::Postgres => "SELECT COUNT(*)::BIGINT FROM transfers WHERE status = $1",
        Dialect::Sqlite => "SELECT COUNT(*) FROM transfers WHERE status = ?1",
        _ => "SELECT CAST(COUNT(*) AS SIGNED) FROM transfers WHERE status = ?",
    };
    let mut conn = db.pool.acquire().await.expect("a connection");
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[Bind::Text(status)])
        .await
        .expect("count transfers");
    n
}

/// Resolves once `n` transfers are `sent`; fails the test after two
/// minutes without, rather than waiting for ever.
async fn all_sent<DB: TestBackend>(db: &Db<DB>, n: i64) {
    let sent = async {
        while count(db, "sent").await < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), sent)
        .await
        .is_err()
    {
        panic!(
            "{} of {n} transfers sent after two minutes",
            count(db, "sent").await
        );
    }
}

/// `signal`, or a failed test after two minutes without it.
async fn bounded(signal: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(Duration::from_secs(120), signal)
        .await
        .is_err()
    {
        panic!("the signal did not come within two minutes");
    }
}

/// A recovery pass over `transfers` in `sending`, of at most `limit` rows,
/// `concurrency` effects at once, whose effects record their keys in
/// `calls` and succeed.
async fn recover_recorded<DB: TestBackend + Batched>(
    db: &Db<DB>,
    calls: &Arc<Calls>,
    limit: u32,
    concurrency: usize,
) -> stateguard::Recovered
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    let recorded = calls.clone();
    stateguard::recover_many(
        &db.pool,
        TransferStatus::Sending,
        limit,
        concurrency,
        move |effect: Effect<TransferStatus, i64>| {
            recorded.record(&effect);
            async { Verdict::done() }
        },
    )
    .await
    .unwrap()
}

/// A poll quick enough for a test: from 5 ms up to 50 ms.
fn quick() -> Poll {
    Poll::new(Duration::from_millis(5), Duration::from_millis(50))
}

backend_tests! {
    "worker_drain" => workers_finish_every_row_once (flavor = "multi_thread", worker_threads = 4),
    "worker_recover" => a_dead_workers_rows_are_recovered,
    "worker_shutdown" => shutdown_stops_claiming_and_finishes_what_runs,
    "worker_cut_off" => effects_past_the_drain_are_left_to_their_lease,
    "worker_release" => unstarted_claims_are_released_to_another_worker_at_once,
    "worker_release_attempt" => a_released_row_keeps_its_attempt,
    "worker_release_fails" => a_failed_release_leaves_rows_to_recovery,
    "worker_rate" => a_rate_spaces_the_effects_starts,
    "worker_busy_recovery" => a_busy_loop_still_recovers_due_rows,
    "worker_behind" => health_tells_how_far_behind_recovery_is,
    "worker_drain_5000" => a_shutdown_mid_run_hands_every_unstarted_claim_over (flavor = "multi_thread", worker_threads = 4),
    "worker_refused" => a_claim_out_of_flight_is_refused_before_any_loop,
    "worker_relay" => the_relay_and_prune_loops_empty_the_outbox,
    "worker_health" => health_tells_each_loops_last_success_and_failures,
}

/// Three workers on one table: every row is claimed by one of them, its
/// effect runs once, and every worker drains when told to.
async fn workers_finish_every_row_once<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    const ROWS: i64 = 600;
    db.transfers(ROWS).await;
    let calls = Arc::new(Calls::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (pool, calls, mut stopped) = (db.pool.clone(), calls.clone(), stopped.clone());
        workers.push(tokio::spawn(async move {
            Worker::new(pool)
                .effects(
                    TransferStatus::start(),
                    50,
                    8,
                    move |effect: Effect<TransferStatus, i64>| {
                        calls.record(&effect);
                        async move {
                            tokio::task::yield_now().await;
                            Verdict::done()
                        }
                    },
                )
                .poll(quick())
                .run(async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await
        }));
    }
    all_sent(&db, ROWS).await;
    stop.send(true).unwrap();
    let mut claimed = 0;
    for worker in workers {
        let report: WorkerReport = worker.await.unwrap().unwrap();
        assert!(report.drained);
        let [lp] = &report.loops[..] else {
            panic!("one loop: {report:?}");
        };
        assert_eq!(lp.errors, 0, "{lp:?}");
        claimed += lp.claimed + lp.recovered;
    }
    assert_eq!(claimed, ROWS as usize, "each row claimed once");
    let counts = calls.counts();
    assert_eq!(counts.len(), ROWS as usize, "one effect key per row");
    assert!(counts.values().all(|&n| n == 1), "an effect ran twice");
    assert_eq!(count(&db, "sending").await, 0);
}

/// Rows a dead worker left in flight: once their lease runs out, a worker
/// with nothing to claim takes them over and runs their effect again,
/// under the effect key the first attempt had.
async fn a_dead_workers_rows_are_recovered<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(3).await;
    let mut keys = Vec::new();
    for id in 1..=3_i64 {
        let won = TransferStatus::start().apply(&db.pool, id).await.unwrap();
        let won = won.won().expect("pending");
        keys.push(won.effect_key().to_owned());
        drop(won); // the worker dies before its effect
    }
    db.backdate_leases().await;
    let calls = Arc::new(Calls::default());
    let report = until_sent(&db, &calls, 3).await;
    let [lp] = &report.loops[..] else {
        panic!("one loop: {report:?}");
    };
    assert_eq!((lp.claimed, lp.recovered, lp.done), (0, 3, 3), "{lp:?}");
    let mut ran: Vec<String> = calls.counts().into_keys().collect();
    ran.sort();
    keys.sort();
    assert_eq!(
        ran, keys,
        "recovery runs the effect under the first attempt's key"
    );
}

/// A worker over `transfers` whose effects record their keys in `calls`
/// and succeed, run until `n` transfers are sent.
async fn until_sent<DB: TestBackend + Batched>(
    db: &Db<DB>,
    calls: &Arc<Calls>,
    n: i64,
) -> WorkerReport
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    let recorded = calls.clone();
    Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            10,
            4,
            move |effect: Effect<TransferStatus, i64>| {
                recorded.record(&effect);
                async { Verdict::done() }
            },
        )
        .poll(quick())
        .run(all_sent(db, n))
        .await
        .unwrap()
}

/// A worker over `transfers` in batches of 10, whose effects each take
/// `effect_time`, at most `concurrency` at once, told to stop as soon as
/// the first one starts, with `drain` to finish.
async fn stop_at_the_first_effect<DB: TestBackend + Batched>(
    db: &Db<DB>,
    calls: &Arc<Calls>,
    (effect_time, concurrency): (Duration, usize),
    drain: Duration,
) -> WorkerReport
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    let started = Arc::new(tokio::sync::Notify::new());
    let (recorded, first) = (calls.clone(), started.clone());
    Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            10,
            concurrency,
            move |effect: Effect<TransferStatus, i64>| {
                recorded.record(&effect);
                first.notify_one();
                async move {
                    tokio::time::sleep(effect_time).await;
                    Verdict::done()
                }
            },
        )
        .poll(quick())
        .drain_within(drain)
        .run(async move { bounded(started.notified()).await })
        .await
        .unwrap()
}

/// The shutdown signal arrives while effects run: the worker claims no
/// more rows, lets the running effects finish and their follow-ups land,
/// and leaves nothing in flight.
async fn shutdown_stops_claiming_and_finishes_what_runs<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    const ROWS: i64 = 40;
    db.transfers(ROWS).await;
    let calls = Arc::new(Calls::default());
    let report = stop_at_the_first_effect(
        &db,
        &calls,
        (Duration::from_millis(100), 10),
        Duration::from_secs(10),
    )
    .await;
    assert!(report.drained);
    let [lp] = &report.loops[..] else {
        panic!("one loop: {report:?}");
    };
    assert_eq!(
        lp.claimed, 10,
        "one batch, then no claim after the signal: {lp:?}"
    );
    assert_eq!(lp.done, 10, "{lp:?}");
    assert_eq!(count(&db, "sent").await, 10);
    assert_eq!(count(&db, "sending").await, 0, "nothing left in flight");
    assert_eq!(count(&db, "pending").await, ROWS - 10);
    assert!(calls.counts().values().all(|&n| n == 1));
}

/// Effects still running when the drain runs out are left to their lease:
/// the worker returns, its rows stay in flight, and another worker
/// recovers them once the lease has run out (backdated here), under the
/// same effect keys.
async fn effects_past_the_drain_are_left_to_their_lease<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(2).await;
    let calls = Arc::new(Calls::default());
    let report = stop_at_the_first_effect(
        &db,
        &calls,
        (Duration::from_secs(30), 10),
        Duration::from_millis(100),
    )
    .await;
    assert!(!report.drained, "{report:?}");
    assert_eq!(
        count(&db, "sending").await,
        2,
        "left in flight, to the lease"
    );
    db.backdate_leases().await;
    let first_keys: Vec<String> = calls.counts().into_keys().collect();
    until_sent(&db, &calls, 2).await;
    let counts = calls.counts();
    assert_eq!(counts.len(), 2, "the same two effect keys: {counts:?}");
    for key in first_keys {
        assert_eq!(counts[&key], 2, "cut off once, recovered once: {key}");
    }
}

/// Claims whose effect had not started when the signal came are released:
/// the worker finishes the two effects that run, and ends the leases of
/// the other eight of its batch, so that another worker's recovery takes
/// them at once, with their 30 s leases nowhere near their end, and runs
/// each once, under the effect key of its claim.
async fn unstarted_claims_are_released_to_another_worker_at_once<DB: TestBackend + Batched>(
    db: Db<DB>,
) where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(20).await;
    let calls = Arc::new(Calls::default());
    let report = stop_at_the_first_effect(
        &db,
        &calls,
        (Duration::from_millis(100), 2),
        Duration::from_secs(10),
    )
    .await;
    assert!(report.drained);
    let [lp] = &report.loops[..] else {
        panic!("one loop: {report:?}");
    };
    assert_eq!(
        (lp.claimed, lp.done, lp.released, lp.errors),
        (10, 2, 8, 0),
        "{lp:?}"
    );
    assert_eq!(count(&db, "sending").await, 8, "released, still in flight");
    let pass = recover_recorded(&db, &calls, 20, 4).await;
    assert_eq!((pass.claimed, pass.done), (8, 8), "{pass:?}");
    assert_eq!(count(&db, "sent").await, 10);
    assert_eq!(count(&db, "pending").await, 10, "no claim after the signal");
    let counts = calls.counts();
    assert_eq!(counts.len(), 10, "one effect key per claimed row");
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
}

/// G10 for the release at shutdown, whose statement the fault hook fails
/// three ways: refused, cut off after it ran, and left without an answer.
/// The loop counts the error and reports no row released, since it cannot
/// vouch for any; the eight rows stay in flight, still leased or released,
/// and a recovery once their leases are over runs each of them once,
/// under the effect key of its claim. Nothing is lost and nothing runs
/// twice, whichever way the statement failed.
async fn a_failed_release_leaves_rows_to_recovery<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    let release = TransferStatus::MACHINE
        .state(TransferStatus::Sending)
        .and_then(|state| state.in_flight())
        .expect("an in-flight state")
        .release_many_sql();
    let text = match DB::DIALECT {
        Dialect::Postgres => release.postgres(),
        Dialect::Sqlite => release.sqlite(),
        _ => release.mysql(),
    };
    db.transfers(20).await;
    for fault in [Fault::Refuse, Fault::Cut, Fault::Hang] {
        db.execute("DELETE FROM transfers", &[])
            .await
            .expect("emptied");
        db.execute(DB::SEED_TRANSFERS, &[Bind::Int(20)])
            .await
            .expect("seeded");
        let calls = Arc::new(Calls::default());
        let plan = Plan::fail_text(text, fault, Duration::from_millis(800));
        let report = plan
            .run(stop_at_the_first_effect(
                &db,
                &calls,
                (Duration::from_millis(100), 2),
                Duration::from_secs(10),
            ))
            .await;
        assert!(plan.sent().contains(&text), "{fault:?}: the release ran");
        let [lp] = &report.loops[..] else {
            panic!("one loop: {report:?}");
        };
        assert_eq!(
            (lp.claimed, lp.done, lp.released),
            (10, 2, 0),
            "{fault:?}: {lp:?}"
        );
        assert!(
            lp.errors >= 1,
            "{fault:?}: the failed release counts: {lp:?}"
        );
        assert_eq!(count(&db, "sending").await, 8, "{fault:?}: still in flight");
        db.execute(DB::BACKDATE_LEASES, &[])
            .await
            .expect("leases over");
        let pass = recover_recorded(&db, &calls, 20, 4).await;
        assert_eq!((pass.claimed, pass.done), (8, 8), "{fault:?}: {pass:?}");
        assert_eq!(count(&db, "sent").await, 10, "{fault:?}");
        let counts = calls.counts();
        assert_eq!(
            counts.len(),
            10,
            "{fault:?}: one effect key per claimed row"
        );
        assert!(counts.values().all(|&n| n == 1), "{fault:?}: {counts:?}");
    }
}

/// A shutdown in the middle of a run of 5,000 payouts: the worker
/// finishes the effects it started, releases every other row it claimed,
/// and leaves no row held: a recovery pass right after it takes over every
/// row still in `sending` (their 30 s leases are nowhere near their end),
/// and a second worker finishes the run. No effect runs twice.
async fn a_shutdown_mid_run_hands_every_unstarted_claim_over<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    const ROWS: i64 = 5_000;
    db.transfers(ROWS).await;
    let calls = Arc::new(Calls::default());
    let (recorded, counted) = (calls.clone(), calls.clone());
    let report = Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            250,
            16,
            move |effect: Effect<TransferStatus, i64>| {
                recorded.record(&effect);
                async {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Verdict::done()
                }
            },
        )
        .poll(quick())
        .drain_within(Duration::from_secs(30))
        .run(bounded(async move {
            // Halfway through the fifth batch of 250.
            while counted.counts().len() < 1_125 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }))
        .await
        .unwrap();
    let stopped = std::time::Instant::now();
    assert!(report.drained, "{report:?}");
    let [lp] = &report.loops[..] else {
        panic!("one loop: {report:?}");
    };
    assert_eq!(lp.errors, 0, "{lp:?}");
    assert!(lp.released > 0, "a batch was under way: {lp:?}");
    let in_flight = count(&db, "sending").await;
    assert_eq!(in_flight as usize, lp.released, "{lp:?}");
    // Every row still in flight was released: a recovery takes them all
    // at once.
    let pass = recover_recorded(&db, &calls, ROWS as u32, 64).await;
    eprintln!(
        "{} rows released at shutdown, all taken over {:?} after the worker returned",
        lp.released,
        stopped.elapsed()
    );
    assert_eq!(
        (pass.claimed, pass.done),
        (lp.released, lp.released),
        "{pass:?}"
    );
    until_sent(&db, &calls, ROWS).await;
    let counts = calls.counts();
    assert_eq!(counts.len(), ROWS as usize, "one effect key per row");
    assert!(counts.values().all(|&n| n == 1), "an effect ran twice");
}

/// A `Rate` of 50 calls a second holds 20 effects, which a concurrency
/// of 20 would start at once, to one every 20 ms: start `i` comes `i`
/// turns after the first.
async fn a_rate_spaces_the_effects_starts<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(20).await;
    let starts = Arc::new(Mutex::new(Vec::new()));
    let seen = starts.clone();
    let rate = Rate::new(NonZeroU32::new(50).unwrap(), Duration::from_secs(1));
    let effect = move |_: Effect<TransferStatus, i64>| {
        seen.lock().unwrap().push(std::time::Instant::now());
        async { Verdict::done() }
    };
    let report = Worker::new(db.pool.clone())
        .effects(TransferStatus::start(), 20, 20, rate.limit(effect))
        .poll(quick())
        .run(all_sent(&db, 20))
        .await
        .unwrap();
    assert_eq!(report.loops[0].done, 20, "{report:?}");
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 20);
    // Turn `i` comes `i` turns after the first was due; a start may come
    // late (a busy runtime), which only shortens the gap to the next, and
    // the first is measured from its own start, at most a little late.
    let turn = Duration::from_millis(20);
    for (i, start) in starts.iter().enumerate() {
        let due = turn * i as u32;
        let earliest = due - Duration::from_millis(10).min(due);
        assert!(*start - starts[0] >= earliest, "start {i}: {starts:?}");
    }
}

/// Rows a dead worker left in flight are recovered while new work keeps
/// every claim full: the loop looks for them once per longest poll wait,
/// not only once the pending rows run out.
async fn a_busy_loop_still_recovers_due_rows<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    const ROWS: i64 = 400;
    db.transfers(ROWS).await;
    for id in 1..=2_i64 {
        let won = TransferStatus::start().apply(&db.pool, id).await.unwrap();
        drop(won.won().expect("pending")); // its worker dies
    }
    db.backdate_leases().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let report = Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            10,
            10,
            move |effect: Effect<TransferStatus, i64>| {
                seen.lock().unwrap().push(*effect.key());
                async {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Verdict::done()
                }
            },
        )
        .poll(Poll::new(
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .run(all_sent(&db, ROWS))
        .await
        .unwrap();
    assert_eq!(report.loops[0].recovered, 2, "{report:?}");
    let order = order.lock().unwrap().clone();
    let last = |id: i64| order.iter().position(|k| *k == id).unwrap();
    // Of the 398 claimed, far fewer than all ran before the two recovered.
    assert!(
        last(1).max(last(2)) < 200,
        "recovered after {} of {} effects",
        last(1).max(last(2)),
        order.len()
    );
}

/// Ten rows whose leases ran out an hour ago, recovered two at a time:
/// while they wait, the loop's health says recovery is about an hour
/// behind; once they are done, that it is not behind at all.
async fn health_tells_how_far_behind_recovery_is<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(10).await;
    for id in 1..=10_i64 {
        let won = TransferStatus::start().apply(&db.pool, id).await.unwrap();
        drop(won.won().expect("pending")); // its worker dies
    }
    db.backdate_leases().await;
    let worker = Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            2,
            2,
            |_: Effect<TransferStatus, i64>| async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Verdict::done()
            },
        )
        .poll(quick());
    let health = worker.health();
    let watched = health.clone();
    let seen = Arc::new(Mutex::new(None));
    let noted = seen.clone();
    let db_ = &db;
    worker
        .run(bounded(async move {
            loop {
                let behind = watched.loops()[0].behind;
                if let Some(behind) = behind {
                    noted.lock().unwrap().get_or_insert(behind);
                }
                if behind.is_none() && count(db_, "sent").await == 10 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }))
        .await
        .unwrap();
    let behind = seen
        .lock()
        .unwrap()
        .expect("recovery was behind while rows waited");
    // Due since the lease (30 s) ran out, an hour after it began.
    let hour = Duration::from_secs(3600);
    assert!(
        behind >= hour - Duration::from_secs(60) && behind <= hour,
        "{behind:?}"
    );
    assert_eq!(health.loops()[0].behind, None);
}

/// A released row gives back the attempt its claim counted: its effect
/// never ran, so the takeover that runs it counts it as the first.
async fn a_released_row_keeps_its_attempt<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    use crate::retry::Retried;
    crate::retry::setup(&db, 6).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let first = started.clone();
    let report = Worker::new(db.pool.clone())
        .effects(Retried::start(), 6, 1, move |_: Effect<Retried, i64>| {
            first.notify_one();
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Verdict::done()
            }
        })
        .poll(quick())
        .run(async move { bounded(started.notified()).await })
        .await
        .unwrap();
    let [lp] = &report.loops[..] else {
        panic!("one loop: {report:?}");
    };
    assert_eq!((lp.claimed, lp.done, lp.released), (6, 1, 5), "{lp:?}");
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = attempts.clone();
    let pass = stateguard::recover_many(
        &db.pool,
        Retried::Sending,
        10,
        5,
        move |effect: Effect<Retried, i64>| {
            seen.lock().unwrap().push(effect.attempt());
            async { Verdict::done() }
        },
    )
    .await
    .unwrap();
    assert_eq!((pass.claimed, pass.done), (5, 5), "{pass:?}");
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(
        attempts,
        vec![Some(1); 5],
        "the first attempt, not the second"
    );
}

/// A claim into a state that is not in flight has no effect to run: the
/// worker says so before any loop starts, and moves no row.
async fn a_claim_out_of_flight_is_refused_before_any_loop<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(1).await;
    let error = Worker::new(db.pool.clone())
        .effects(
            TransferStatus::cancel(),
            10,
            1,
            |_: Effect<TransferStatus, i64>| async { Verdict::done() },
        )
        .run(std::future::pending())
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Misuse(stateguard::Misuse::NotInFlight { .. })),
        "{error:?}"
    );
    assert_eq!(count(&db, "pending").await, 1);
}

/// A publisher that accepts every message and records its id.
pub(crate) struct Record(pub(crate) Arc<Mutex<Vec<String>>>);

impl Publisher for Record {
    type Error = std::convert::Infallible;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        self.0.lock().unwrap().push(message.id.to_owned());
        Ok(Published::new(false))
    }
}

/// How many messages the outbox table holds.
async fn outbox_rows<DB: TestBackend>(db: &Db<DB>) -> i64 {
    let sql = match DB::DIALECT {
        Dialect::Postgres => "SELECT COUNT(*)::BIGINT FROM stateguard_outbox",
        Dialect::Sqlite => "SELECT COUNT(*) FROM stateguard_outbox",
        _ => "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox",
    };
    let mut conn = db.pool.acquire().await.expect("a connection");
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[])
        .await
        .expect("count messages");
    n
}

/// A worker's relay publishes every waiting message once, and its prune
/// loop removes them once published: the outbox ends empty.
async fn the_relay_and_prune_loops_empty_the_outbox<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    const MESSAGES: usize = 30;
    {
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in outbox::ddl(DB::DIALECT) {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
    }
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    for i in 0..MESSAGES {
        let id = format!("payout:{i}:sent:1");
        let message = Message {
            id: &id,
            topic: "payout.sent",
            payload: b"{}",
        };
        outbox::enqueue(&mut tx, &format!("{}", i % 4), message)
            .await
            .unwrap();
    }
    tx.commit(()).await.unwrap();
    let published = Arc::new(Mutex::new(Vec::new()));
    let report = Worker::new(db.pool.clone())
        .relay(Relay::new(Record(published.clone())).batch(7))
        .prune(Prune::every(Duration::from_millis(10)).outbox(Duration::ZERO))
        .poll(quick())
        .run(bounded(async {
            while outbox_rows(&db).await > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }))
        .await
        .unwrap();
    let [relay, prune] = &report.loops[..] else {
        panic!("two loops: {report:?}");
    };
    assert_eq!((relay.done, relay.errors), (MESSAGES, 0), "{relay:?}");
    assert_eq!((prune.done, prune.errors), (MESSAGES, 0), "{prune:?}");
    let mut ids = published.lock().unwrap().clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), MESSAGES, "each message published once");
}

/// The health handle, taken before the run, tells while it runs when each
/// loop last looked for work without an error, and the failures since: a
/// relay whose outbox table is missing fails each pass and says why, and
/// the machine's loop beside it stays healthy.
async fn health_tells_each_loops_last_success_and_failures<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    db.transfers(1).await;
    let published = Arc::new(Mutex::new(Vec::new()));
    let worker = Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            10,
            1,
            |_: Effect<TransferStatus, i64>| async { Verdict::done() },
        )
        .relay(Relay::new(Record(published)))
        .poll(quick());
    let health = worker.health();
    let before = health.loops();
    assert_eq!(before.len(), 2);
    assert!(before.iter().all(|lp| lp.last_success.is_none()));
    assert!(!health.is_healthy(Duration::from_secs(60)));
    let watched = health.clone();
    let report = worker
        .run(bounded(async move {
            loop {
                let loops = watched.loops();
                if loops[0].last_success.is_some() && loops[1].failures_in_a_row >= 2 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }))
        .await
        .unwrap();
    assert!(report.drained);
    let [effects, relay] = &health.loops()[..] else {
        panic!("two loops");
    };
    assert_eq!(
        (effects.machine, effects.transition),
        ("TransferStatus", "start")
    );
    assert_eq!(effects.failures_in_a_row, 0, "{effects:?}");
    assert!(effects.last_success.is_some());
    assert_eq!(
        (relay.machine, relay.transition),
        ("stateguard_outbox", "relay")
    );
    assert!(relay.last_success.is_none(), "{relay:?}");
    assert!(relay.failures_in_a_row >= 2, "{relay:?}");
    let why = relay.last_error.as_deref().unwrap_or_default();
    assert!(why.contains("stateguard_outbox"), "{why}");
    assert!(!health.is_healthy(Duration::from_secs(60)));
}
