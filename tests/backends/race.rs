//! Many real attempts of the same transition race on every row. Exactly one
//! per row may win and run the side effect; every other attempt must learn
//! that the row is already where it wanted it.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Db, Isolation, PayoutStatus, TestBackend};
use stateguard::Outcome;
use stateguard::bounds::Key;
use tokio::sync::Barrier;

const ROWS: i64 = 200;
const ATTEMPTS_PER_ROW: usize = 32;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Tally {
    applied: usize,
    already: usize,
    conflict: usize,
    not_found: usize,
}

/// Spawns `ATTEMPTS_PER_ROW` attempts of `start` for each of the `ROWS`
/// rows, releases them all at once, and counts what they got and how many
/// side effects ran. `pooler.rs` runs it behind PgBouncer.
pub(crate) async fn race<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.seed(ROWS).await;
    let attempts = ROWS as usize * ATTEMPTS_PER_ROW;
    let barrier = Arc::new(Barrier::new(attempts));
    // The side effect: only a holder of the `Won` token may run it.
    let bank_calls = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(attempts);
    // Attempts on one row are queued next to each other, so that they
    // meet on the pool's connections at the same time.
    for id in 1..=ROWS {
        for _ in 0..ATTEMPTS_PER_ROW {
            let (pool, barrier, bank_calls) =
                (db.pool.clone(), barrier.clone(), bank_calls.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let outcome = PayoutStatus::start().apply(&pool, id).await;
                if let Ok(Outcome::Applied(_won)) = &outcome {
                    bank_calls.fetch_add(1, Ordering::SeqCst);
                }
                (id, outcome)
            }));
        }
    }
    let mut per_row = vec![Tally::default(); ROWS as usize + 1];
    for task in tasks {
        let (id, outcome) = task.await.expect("attempt task");
        let tally = &mut per_row[id as usize];
        match outcome {
            Ok(Outcome::Applied(won)) => {
                assert_eq!(won.state(), PayoutStatus::Sending);
                tally.applied += 1;
            }
            Ok(Outcome::AlreadyInState(state)) => {
                assert_eq!(state, PayoutStatus::Sending);
                tally.already += 1;
            }
            Ok(Outcome::Conflict { current }) => {
                panic!("row {id}: Conflict reporting {current:?} in a race of one transition")
            }
            Ok(Outcome::NotFound) => panic!("row {id}: NotFound for a seeded row"),
            Ok(Outcome::Stale { current, .. } | Outcome::Refused { current }) => {
                panic!("row {id}: Stale or Refused ({current:?}) without a guard or occurrence")
            }
            Err(error) => panic!("row {id}: {error}"),
        }
    }
    for (id, tally) in per_row.iter().enumerate().skip(1) {
        assert_eq!(
            *tally,
            Tally {
                applied: 1,
                already: ATTEMPTS_PER_ROW - 1,
                ..Tally::default()
            },
            "row {id}"
        );
    }
    assert_eq!(bank_calls.load(Ordering::SeqCst), ROWS as usize);
    // The database agrees: every row moved, and the winning statement's
    // `set(attempts = "attempts + 1")` ran once per row.
    assert_eq!(db.count_in("sending").await, ROWS);
    assert_eq!(db.total_attempts().await, ROWS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_wal_race() {
    let Some(db) = open!(Sqlite, "race") else {
        return;
    };
    race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_race_read_committed() {
    let Some(db) = open!(Postgres, "race_rc", Isolation::ReadCommitted) else {
        return;
    };
    race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_race_repeatable_read() {
    let Some(db) = open!(Postgres, "race_rr", Isolation::RepeatableRead) else {
        return;
    };
    race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_race_serializable() {
    let Some(db) = open!(Postgres, "race_ser", Isolation::Serializable) else {
        return;
    };
    race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_race_read_committed() {
    let Some(db) = open!(Mysql, "race_rc", Isolation::ReadCommitted) else {
        return;
    };
    race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_race_repeatable_read() {
    let Some(db) = open!(Mysql, "race_rr", Isolation::RepeatableRead) else {
        return;
    };
    race(db).await;
}

/// Under MariaDB's snapshot isolation the losers of a race may fail with
/// error 1020; in autocommit the library retries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_race_snapshot_isolation() {
    let Some(db) = open!(Mysql, "race_si", Isolation::Snapshot) else {
        return;
    };
    race(db).await;
}
