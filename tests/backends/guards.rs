//! Guards: a condition in the compare-and-set's `WHERE`, so a business rule
//! holds when the row moves, not when the application last read it.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Db, Isolation, TestBackend};
use stateguard::bounds::Key;
use stateguard::{Outcome, StateMachine};
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

/// Requests approved by someone other than their requester, up to a limit
/// the caller gives: a guard with values bound per call, after two bound
/// `set` values.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "requests", column = "status", key = "id", version = "version")]
enum Request {
    #[state(initial)]
    #[transition(
        approve -> Approved,
        set(approved_by = bind(String), note = bind(String)),
        guard("requested_by <> :approver AND amount_cents <= :limit", approver = bind(String), limit = bind(i64))
    )]
    Open,
    #[transition(reopen -> Open)]
    Approved,
}

backend_tests! {
    "guard_params" => guard_values_are_bound_per_call (flavor = "multi_thread", worker_threads = 4),
}

const ROWS: i64 = 100;
const ATTEMPTS_PER_ROW: usize = 32;

/// 32 racing `approve` attempts per row: on a row that meets the guard
/// exactly one wins and the rest find it done; on a row that fails it every
/// attempt is `Refused` with the row's real state, nothing moves, and
/// nothing is retried into a contention error.
async fn guarded_race<DB: TestBackend>(db: Db<DB>)
where
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
/// Portable DDL, run on a connection of the test's pool.
async fn requests<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        "CREATE TABLE requests (
            id BIGINT PRIMARY KEY,
            status VARCHAR(32) NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            requested_by VARCHAR(32) NOT NULL,
            amount_cents BIGINT NOT NULL,
            approved_by VARCHAR(32),
            note VARCHAR(200)
        )",
        "INSERT INTO requests (id, status, requested_by, amount_cents) VALUES
            (1, 'open', 'alice', 500), (2, 'open', 'bob', 5000), (3, 'open', 'alice', 500)",
    ] {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

/// `(status, approved_by, note, version)` of request `id` (1 to 3).
async fn request<DB: TestBackend>(
    db: &Db<DB>,
    id: i64,
) -> (String, Option<String>, Option<String>, i64) {
    let mut conn = db.pool.acquire().await.unwrap();
    let sql = match id {
        1 => "SELECT status, approved_by, note, version FROM requests WHERE id = 1",
        2 => "SELECT status, approved_by, note, version FROM requests WHERE id = 2",
        _ => "SELECT status, approved_by, note, version FROM requests WHERE id = 3",
    };
    DB::fetch_one(&mut conn, sql, &[]).await.unwrap()
}

/// The guard's values are bound in the compare-and-set and in the losing
/// read that decides `Refused`, after the `set` values and before the
/// expected occurrence; of racing approvers only one who is not the
/// requester wins.
async fn guard_values_are_bound_per_call<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
    String: Key<DB>,
{
    requests(&db).await;
    let approve = |by: &str, limit: i64| {
        Request::approve(
            by.to_owned(),
            format!("approved by {by}"),
            by.to_owned(),
            limit,
        )
    };
    // The requester cannot approve; nothing is written.
    assert_eq!(
        approve("alice", 1_000)
            .apply(&db.pool, 1_i64)
            .await
            .unwrap(),
        Outcome::Refused {
            current: Request::Open
        }
    );
    assert_eq!(request(&db, 1).await, ("open".to_owned(), None, None, 0));
    // Someone else can, at the occurrence they saw.
    let won = approve("bob", 1_000)
        .expecting(0)
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert!(won.is_applied(), "{won:?}");
    assert_eq!(
        request(&db, 1).await,
        (
            "approved".to_owned(),
            Some("bob".to_owned()),
            Some("approved by bob".to_owned()),
            1
        )
    );
    // Over the caller's limit: refused; under a higher one: approved.
    assert_eq!(
        approve("carol", 1_000)
            .apply(&db.pool, 2_i64)
            .await
            .unwrap(),
        Outcome::Refused {
            current: Request::Open
        }
    );
    assert!(
        approve("carol", 10_000)
            .apply(&db.pool, 2_i64)
            .await
            .unwrap()
            .is_applied()
    );

    // 16 racing approvals of request 3, half by its requester.
    let barrier = Arc::new(Barrier::new(16));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (pool, barrier) = (db.pool.clone(), barrier.clone());
        let by = if i % 2 == 0 { "alice" } else { "carol" };
        let attempt = approve(by, 1_000);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (by, attempt.apply(&pool, 3_i64).await)
        }));
    }
    let mut applied = 0;
    for task in tasks {
        let (by, outcome) = task.await.unwrap();
        match outcome.unwrap() {
            Outcome::Applied(_) => {
                assert_eq!(by, "carol");
                applied += 1;
            }
            Outcome::AlreadyInState(Request::Approved) => {}
            Outcome::Refused {
                current: Request::Open,
            } => assert_eq!(by, "alice"),
            other => panic!("{by}: {other:?}"),
        }
    }
    assert_eq!(applied, 1);
    assert_eq!(request(&db, 3).await.1, Some("carol".to_owned()));
}

#[test]
fn guard_values_are_numbered_after_the_set_values() {
    let def = Request::approve(String::new(), String::new(), String::new(), 0)
        .transition()
        .def();
    let update = def.update_sql();
    assert!(
        update
            .postgres()
            .contains(r#""approved_by" = $2, "note" = $3"#),
        "{}",
        update.postgres()
    );
    assert!(
        update
            .postgres()
            .contains("(requested_by <> $4 AND amount_cents <= $5)"),
        "{}",
        update.postgres()
    );
    assert!(
        update
            .mysql()
            .contains("(requested_by <> ? AND amount_cents <= ?)"),
        "{}",
        update.mysql()
    );
    let expecting = def.update_expecting_sql().unwrap();
    assert!(
        expecting.sqlite().contains("?4 AND amount_cents <= ?5)")
            && expecting.sqlite().contains(r#""version", 0) = ?6"#),
        "{}",
        expecting.sqlite()
    );
    let [read, _] = def.select_guarded_sql().unwrap();
    assert!(
        read.postgres()
            .contains("CASE WHEN (requested_by <> $2 AND amount_cents <= $3)"),
        "{}",
        read.postgres()
    );
    assert_eq!(
        def.guard(),
        Some("requested_by <> :approver AND amount_cents <= :limit")
    );
}

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
    assert!(locked.postgres().contains(" FOR SHARE) AS __sg_r"));
    assert!(!plain.postgres().contains(" FOR SHARE"));
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
