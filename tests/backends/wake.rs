//! Wake-ups on PostgreSQL: the triggers `WakeUps` writes notify a
//! listening worker (`Worker::listen`), which starts a row's effect long
//! before its next poll; without a notification, the poll still finds the
//! work.

use crate::worker::{Record, TransferStatus};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use stateguard::outbox::{self, Message, Relay};
use stateguard::worker::{Poll, WakeUps, Worker, WorkerReport};
use stateguard::{Effect, Tx, Verdict};
use tokio::sync::{mpsc, watch};

/// A listening worker over `transfers` whose effects report their key on
/// `started`, polling as `poll` says, until `stop` turns true.
fn listening_worker(
    pool: &PgPool,
    poll: Poll,
    started: mpsc::UnboundedSender<i64>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<WorkerReport> {
    let worker = Worker::new(pool.clone())
        .effects(
            TransferStatus::start(),
            10,
            4,
            move |effect: Effect<TransferStatus, i64>| {
                let _ = started.send(*effect.key());
                async { Verdict::done() }
            },
        )
        .poll(poll)
        .listen();
    tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stop.wait_for(|stop| *stop).await;
            })
            .await
            .unwrap()
    })
}

/// Inserts pending transfer `id`.
async fn insert(pool: &PgPool, id: i64) {
    sqlx::query("INSERT INTO transfers (id) VALUES ($1)")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
}

/// The next key an effect reports, or a failed test after two minutes.
async fn next(started: &mut mpsc::UnboundedReceiver<i64>) -> i64 {
    tokio::time::timeout(Duration::from_secs(120), started.recv())
        .await
        .expect("an effect within two minutes")
        .expect("the worker is running")
}

/// An idle worker that polls once a minute starts each new row's effect
/// on its notification: every one of 20 rows, inserted one at a time,
/// starts long before a poll could have found it.
#[tokio::test]
async fn a_notification_starts_the_effect_before_the_poll() {
    let Some(db) = crate::open!(Postgres, "wake_latency") else {
        return;
    };
    db.transfers(0).await;
    let ddl = WakeUps::new().machine::<TransferStatus>();
    for statement in ddl.statements() {
        sqlx::raw_sql(*statement).execute(&db.pool).await.unwrap();
    }
    let minute = Duration::from_secs(60);
    let (started, mut effects) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let worker = listening_worker(&db.pool, Poll::new(minute, minute), started, stopped);
    // The worker's first look, at its start, finds nothing; so does the
    // first row's, if the row is in before the worker listens.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waits = Vec::new();
    for id in 1..=20 {
        let at = Instant::now();
        insert(&db.pool, id).await;
        assert_eq!(next(&mut effects).await, id);
        waits.push(at.elapsed());
    }
    stop.send(true).unwrap();
    let report = worker.await.unwrap();
    assert_eq!(report.loops[0].done, 20, "{report:?}");
    waits.sort();
    eprintln!(
        "move to effect start with wake-ups: median {:?}, slowest {:?}",
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    // The poll waits a minute: only a wake-up starts an effect sooner.
    assert!(waits.iter().all(|wait| *wait < minute / 2), "{waits:?}");
}

/// Notifications that never come (no trigger in the database) leave the
/// work to the poll, which does it all, each row once.
#[tokio::test]
async fn without_notifications_the_poll_does_the_work() {
    let Some(db) = crate::open!(Postgres, "wake_dropped") else {
        return;
    };
    db.transfers(50).await;
    let (started, mut effects) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let quick = Poll::new(Duration::from_millis(10), Duration::from_millis(100));
    let worker = listening_worker(&db.pool, quick, started, stopped);
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen.push(next(&mut effects).await);
    }
    stop.send(true).unwrap();
    let report = worker.await.unwrap();
    assert_eq!(report.loops[0].done, 50, "{report:?}");
    seen.sort();
    assert_eq!(seen, (1..=50).collect::<Vec<_>>(), "each row once");
}

/// The listening connection is cut: the worker opens another, listens
/// again, and the next row's notification still starts its effect long
/// before the minute-long poll.
#[tokio::test]
async fn a_cut_listening_connection_listens_again() {
    let Some(db) = crate::open!(Postgres, "wake_cut") else {
        return;
    };
    db.transfers(0).await;
    for statement in WakeUps::new().machine::<TransferStatus>().statements() {
        sqlx::raw_sql(*statement).execute(&db.pool).await.unwrap();
    }
    let minute = Duration::from_secs(60);
    let (started, mut effects) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let worker = listening_worker(&db.pool, Poll::new(minute, minute), started, stopped);
    insert(&db.pool, 1).await;
    assert_eq!(next(&mut effects).await, 1);
    // Every session of the database waiting in `LISTEN`: this test's, and
    // any other wake-up test's, which opens another as this one does.
    let cut: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE query LIKE 'LISTEN%' AND datname = current_database()
           AND pid <> pg_backend_pid()",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(!cut.is_empty(), "a listening session to cut");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at = Instant::now();
    insert(&db.pool, 2).await;
    assert_eq!(next(&mut effects).await, 2);
    assert!(at.elapsed() < minute / 2, "{:?}", at.elapsed());
    stop.send(true).unwrap();
    let report = worker.await.unwrap();
    assert_eq!(report.loops[0].done, 2, "{report:?}");
}

/// The test's own schema as a store's, so that the outbox trigger is the
/// one a schema's outbox gets; the relay reads the same table through the
/// search path.
static WAKE_OUTBOX: stateguard::Stores = stateguard::stores!(schema = "sg_wake_outbox");

/// A message committed to the outbox wakes the relay loop of a worker
/// that polls once a minute: it is published long before that.
#[tokio::test]
async fn an_outbox_write_wakes_the_relay() {
    let Some(db) = crate::open!(Postgres, "wake_outbox") else {
        return;
    };
    for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Postgres) {
        sqlx::raw_sql(*statement).execute(&db.pool).await.unwrap();
    }
    let trigger = WakeUps::new().outbox(WAKE_OUTBOX.outbox());
    assert!(trigger.statements()[1].contains(r#"ON "sg_wake_outbox".stateguard_outbox"#));
    for statement in trigger.statements() {
        sqlx::raw_sql(*statement).execute(&db.pool).await.unwrap();
    }
    let minute = Duration::from_secs(60);
    let published = Arc::new(Mutex::new(Vec::new()));
    let (stop, mut stopped) = watch::channel(false);
    let worker = Worker::new(db.pool.clone())
        .relay(Relay::new(Record(published.clone())))
        .poll(Poll::new(minute, minute))
        .listen();
    let worker = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at = Instant::now();
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let message = Message {
        id: "payout:1:sent:1",
        topic: "payout.sent",
        payload: b"{}",
    };
    outbox::enqueue(&mut tx, "1", message).await.unwrap();
    tx.commit(()).await.unwrap();
    let sent = async {
        while published.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), sent)
        .await
        .expect("published within two minutes");
    assert!(at.elapsed() < minute / 2, "{:?}", at.elapsed());
    stop.send(true).unwrap();
    let report = worker.await.unwrap();
    assert_eq!(report.loops[0].done, 1, "{report:?}");
}
