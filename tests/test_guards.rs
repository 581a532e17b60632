//! Guards: a condition in the compare-and-set's `WHERE`, so a business rule
//! holds when the row moves, not when the application last read it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Db, Isolation, TestBackend};
use sqlx::Pool;
use stateguard::{Committed, Executor, Key, Outcome, StateMachine};
use tokio::sync::Barrier;

/// The `payouts` table, where only odd ids pass the guard of `approve`.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
enum Approval {
    #[state(initial)]
    #[transition(approve -> Sending, guard = "id % 2 = 1", set(attempts = "attempts + 1"))]
    Pending,
    Sending,
}

const ROWS: i64 = 100;
const ATTEMPTS_PER_ROW: usize = 32;

/// 32 racing `approve` attempts per row: on a row that meets the guard
/// exactly one wins and the rest find it done; on a row that fails it every
/// attempt is `Refused` with the row's real state, nothing moves, and
/// nothing is retried into a contention error.
async fn guarded_race<DB: TestBackend>(db: Db<DB>)
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    i64: Key<DB>,
{
    db.seed(ROWS).await;
    let attempts = ROWS as usize * ATTEMPTS_PER_ROW;
    let barrier = Arc::new(Barrier::new(attempts));
    let effects = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(attempts);
    for id in 1..=ROWS {
        for _ in 0..ATTEMPTS_PER_ROW {
            let (pool, barrier, effects) = (db.pool.clone(), barrier.clone(), effects.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let outcome = Approval::approve().apply(&pool, id).await;
                if let Ok(Outcome::Applied(_won)) = &outcome {
                    effects.fetch_add(1, Ordering::SeqCst);
                }
                (id, outcome)
            }));
        }
    }
    let mut tally = vec![(0, 0, 0); ROWS as usize + 1];
    for task in tasks {
        let (id, outcome) = task.await.expect("attempt task");
        let row = &mut tally[id as usize];
        match outcome.unwrap_or_else(|e| panic!("row {id}: {e}")) {
            Outcome::Applied(_) => row.0 += 1,
            Outcome::AlreadyInState(Approval::Sending) => row.1 += 1,
            Outcome::Refused {
                current: Approval::Pending,
            } => row.2 += 1,
            other => panic!("row {id}: {other:?}"),
        }
    }
    for id in 1..=ROWS {
        let expected = match id % 2 {
            1 => (1, ATTEMPTS_PER_ROW - 1, 0),
            _ => (0, 0, ATTEMPTS_PER_ROW),
        };
        assert_eq!(tally[id as usize], expected, "row {id}");
        let (status, attempts) = (db.status(id).await, db.columns(id).await.0);
        match id % 2 {
            1 => assert_eq!(
                (status.as_deref(), attempts),
                (Some("sending"), 1),
                "row {id}"
            ),
            _ => assert_eq!(
                (status.as_deref(), attempts),
                (Some("pending"), 0),
                "row {id}"
            ),
        }
    }
    assert_eq!(effects.load(Ordering::SeqCst), ROWS as usize / 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_guarded_race() {
    let Some(db) = open!(Sqlite, "guard_race") else {
        return;
    };
    guarded_race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_guarded_race_read_committed() {
    let Some(db) = open!(Postgres, "guard_rc", Isolation::ReadCommitted) else {
        return;
    };
    guarded_race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_guarded_race_repeatable_read() {
    let Some(db) = open!(Postgres, "guard_rr", Isolation::RepeatableRead) else {
        return;
    };
    guarded_race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_guarded_race_serializable() {
    let Some(db) = open!(Postgres, "guard_ser", Isolation::Serializable) else {
        return;
    };
    guarded_race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_guarded_race_read_committed() {
    let Some(db) = open!(Mysql, "guard_rc", Isolation::ReadCommitted) else {
        return;
    };
    guarded_race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_guarded_race_repeatable_read() {
    let Some(db) = open!(Mysql, "guard_rr", Isolation::RepeatableRead) else {
        return;
    };
    guarded_race(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_guarded_race_snapshot_isolation() {
    let Some(db) = open!(Mysql, "guard_si", Isolation::Snapshot) else {
        return;
    };
    guarded_race(db).await;
}

/// The guard is part of the compare-and-set statement, and of the losing
/// read that tells a refusal from a lost race.
#[test]
fn the_guard_is_in_the_statement() {
    let approve = Approval::approve().def();
    assert_eq!(approve.guard(), Some("id % 2 = 1"));
    assert!(
        approve
            .update_sql()
            .postgres()
            .contains(r#"AND "status" IN ('pending') AND (id % 2 = 1)"#),
        "{}",
        approve.update_sql().postgres()
    );
    let [plain, locked] = approve.select_guarded_sql().expect("guarded read");
    assert!(
        plain
            .mysql()
            .contains("CASE WHEN (id % 2 = 1) THEN 1 ELSE 0 END")
    );
    assert!(locked.postgres().ends_with(" FOR SHARE"));
    assert!(!plain.postgres().ends_with(" FOR SHARE"));
}

/// The docs show the guard on the edge and in the transitions table.
#[test]
fn the_docs_show_the_guard() {
    let dot = stateguard::docs::dot::<Approval>();
    assert!(
        dot.contains(r#""Pending" -> "Sending" [label="approve [id % 2 = 1]"];"#),
        "{dot}"
    );
    let markdown = stateguard::docs::markdown::<Approval>();
    assert!(
        markdown.contains("| transition | from | to | guard | also sets |"),
        "{markdown}"
    );
    assert!(markdown.contains("`id % 2 = 1`"), "{markdown}");
    let mermaid = stateguard::docs::mermaid::<Approval>();
    assert!(
        mermaid.contains("Pending --> Sending : approve"),
        "{mermaid}"
    );
}
