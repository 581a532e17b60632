//! What only MySQL and MariaDB need proven: found rows, ENUM columns,
//! InnoDB's snapshot reads and MariaDB's snapshot isolation. The behaviour
//! shared with the other backends runs in `transitions.rs`,
//! `race.rs` and `effects.rs`.

use crate::common;

use common::{Isolation, PayoutStatus};
use stateguard::{Error, Outcome, StateMachine};

/// The MySQL/MariaDB error number of a database error.
fn mysql_error_number(error: &sqlx::Error) -> Option<u16> {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(|e| e.number())
}

/// sqlx sets CLIENT_FOUND_ROWS, so rows-affected counts the rows an UPDATE
/// matched, even those it left as they were. `apply` relies on this: a
/// winning UPDATE is one that matched its row.
#[tokio::test]
async fn rows_affected_counts_matched_rows() {
    let Some(db) = open!(Mysql, "found_rows") else {
        return;
    };
    db.seed(1).await;
    let unchanged = sqlx::query("UPDATE payouts SET status = status WHERE id = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(unchanged.rows_affected(), 1);
    let none = sqlx::query("UPDATE payouts SET status = status WHERE id = 2")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(none.rows_affected(), 0);
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "orders", column = "state", key = "id")]
enum OrderState {
    #[state(initial)]
    #[transition(pay -> Paid)]
    Open,
    #[transition(ship -> Shipped)]
    Paid,
    Shipped,
}

/// A MySQL `ENUM(...)` status column works as well as a VARCHAR one.
#[tokio::test]
async fn enum_columns_decode_and_transition() {
    let Some(db) = open!(Mysql, "enum_column") else {
        return;
    };
    sqlx::query(
        "CREATE TABLE orders (
            id BIGINT PRIMARY KEY,
            state ENUM('open', 'paid', 'shipped') NOT NULL DEFAULT 'open'
        )",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (1), (2)")
        .execute(&db.pool)
        .await
        .unwrap();
    assert!(
        OrderState::pay()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        OrderState::pay().apply(&db.pool, 1_i64).await.unwrap(),
        Outcome::AlreadyInState(OrderState::Paid)
    );
    assert_eq!(
        OrderState::ship().apply(&db.pool, 2_i64).await.unwrap(),
        Outcome::Conflict {
            current: OrderState::Open
        }
    );
    let states: Vec<OrderState> = sqlx::query_scalar("SELECT state FROM orders ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(states, [OrderState::Paid, OrderState::Open]);
    // Binding the enum writes its string into the ENUM column.
    sqlx::query("UPDATE orders SET state = ? WHERE id = 2")
        .bind(OrderState::Shipped)
        .execute(&db.pool)
        .await
        .unwrap();
    let shipped: OrderState = sqlx::query_scalar("SELECT state FROM orders WHERE id = 2")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(shipped, OrderState::Shipped);
}

/// Inside a REPEATABLE READ transaction InnoDB's UPDATE sees the latest
/// committed row while a plain SELECT sees the transaction's snapshot. A
/// lost race must still be reported as `AlreadyInState`, not mistaken for a
/// row still in its source state.
#[tokio::test]
async fn a_lost_race_inside_a_repeatable_read_transaction_sees_the_winner() {
    let Some(db) = open!(Mysql, "rr_snapshot", Isolation::RepeatableRead) else {
        return;
    };
    let mut tx = common::stale_transaction(&db).await;
    let replay = PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap();
    assert_eq!(replay, Outcome::AlreadyInState(PayoutStatus::Sending));
    tx.rollback().await.unwrap();
}

/// With MariaDB's snapshot isolation, writing a row changed since the
/// snapshot fails with error 1020; inside the caller's transaction that
/// means: retry the whole transaction.
#[tokio::test]
async fn mariadb_snapshot_isolation_conflict_must_be_retried_whole() {
    let Some(db) = open!(Mysql, "snapshot_tx", Isolation::Snapshot) else {
        return;
    };
    let mut tx = common::stale_transaction(&db).await;
    let error = PayoutStatus::cancel()
        .apply(&mut tx, 1_i64)
        .await
        .unwrap_err();
    let Error::RetryTransaction { source, .. } = &error else {
        panic!("expected RetryTransaction, got {error:?}");
    };
    let number = mysql_error_number(source);
    assert_eq!(number, Some(1020));
    tx.rollback().await.unwrap();
    // In autocommit the library retries and the cancel goes through.
    assert!(
        PayoutStatus::cancel()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(db.status(1).await.as_deref(), Some("cancelled"));
}

/// Two transactions that lock the same two rows in opposite order deadlock;
/// the one InnoDB picks as the victim gets error 1213, reported as
/// `RetryTransaction`.
#[tokio::test]
async fn a_deadlock_inside_a_transaction_must_be_retried_whole() {
    let Some(db) = open!(Mysql, "deadlock") else {
        return;
    };
    db.seed(2).await;
    let mut a = stateguard::Tx::begin(&db.pool).await.unwrap();
    let mut b = stateguard::Tx::begin(&db.pool).await.unwrap();
    assert!(
        PayoutStatus::start()
            .apply(&mut a, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(
        PayoutStatus::start()
            .apply(&mut b, 2_i64)
            .await
            .unwrap()
            .is_applied()
    );
    let (ra, rb) = tokio::join!(
        PayoutStatus::cancel().apply(&mut a, 2_i64),
        PayoutStatus::cancel().apply(&mut b, 1_i64),
    );
    let errors: Vec<Error> = [ra.err(), rb.err()].into_iter().flatten().collect();
    assert_eq!(errors.len(), 1, "exactly one victim: {errors:?}");
    let Error::RetryTransaction { source, .. } = &errors[0] else {
        panic!("expected RetryTransaction, got {:?}", errors[0]);
    };
    let number = mysql_error_number(source);
    assert_eq!(number, Some(1213));
    a.rollback().await.ok();
    b.rollback().await.ok();
}

/// MySQL's default collations would let `'Pending'` pass for `'pending'`;
/// the compare-and-set compares bytes, so such a row is an unknown state.
#[tokio::test]
async fn state_strings_compare_exactly() {
    let Some(db) = open!(Mysql, "exact_states") else {
        return;
    };
    db.insert(1, "Pending").await;
    let error = PayoutStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap_err();
    let Error::UnknownState(unknown) = &error else {
        panic!("expected UnknownState, got {error:?}");
    };
    assert_eq!(unknown.value(), "Pending");
    assert_eq!(db.status(1).await.as_deref(), Some("Pending"));
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
enum Remembering {
    #[state(initial)]
    #[transition(cancel -> Cancelled, set(attempts = "attempts * 10 + 7"))]
    Pending,
    Cancelled,
}

/// MySQL evaluates assignments left to right. A `set` expression may read
/// only its own column of those the statement writes (the macro refuses the
/// rest: `tests/ui/set/set-reads-written-column.rs`), and reads it as it was.
#[tokio::test]
async fn set_expressions_read_the_row_before_the_transition() {
    let Some(db) = open!(Mysql, "set_order") else {
        return;
    };
    db.seed(1).await;
    sqlx::query("UPDATE payouts SET attempts = 4 WHERE id = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    assert!(
        Remembering::cancel()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(db.columns(1).await, (47, false));
}

/// A session the server ends while `apply` waits (killed by an operator,
/// as during a failover) leaves the outcome unknown, and the error says so.
#[tokio::test]
async fn a_killed_session_leaves_the_outcome_unknown() {
    let Some(db) = open!(Mysql, "killed") else {
        return;
    };
    db.seed(1).await;
    // Another transaction holds the row, so that `apply` waits on it.
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM payouts WHERE id = 1 FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let pool = db.pool.clone();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        sqlx::query("KILL CONNECTION ?")
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
    });
    let error = PayoutStatus::start()
        .apply(&mut *conn, 1_i64)
        .await
        .unwrap_err();
    killer.await.unwrap();
    assert!(error.is_outcome_unknown(), "{error:?}");
    holder.rollback().await.unwrap();
}

/// The statements this session has run, by MariaDB's and MySQL's own
/// counters: `(UPDATE, SELECT)`.
async fn statements(conn: &mut sqlx::MySqlConnection) -> (i64, i64) {
    let mut counts = (0, 0);
    let rows: Vec<(String, String)> =
        sqlx::query_as("SHOW SESSION STATUS WHERE Variable_name IN ('Com_update', 'Com_select')")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    for (name, value) in rows {
        let value: i64 = value.parse().unwrap();
        match name.as_str() {
            "Com_update" => counts.0 = value,
            _ => counts.1 = value,
        }
    }
    counts
}

/// The floor of each path, counted by the server: a win that leaves the
/// in-flight path is one `UPDATE` (its version comes in the `UPDATE`'s own
/// result), a win into an in-flight state adds the lease's read, and a
/// losing attempt is the `UPDATE` and the fresh read, nothing more.
#[tokio::test]
async fn each_path_runs_its_fewest_statements() {
    use common::TransferStatus;
    let Some(db) = open!(Mysql, "round_trips") else {
        return;
    };
    db.transfers(3).await;
    let mut conn = db.pool.acquire().await.unwrap();

    let before = statements(&mut conn).await;
    let outcome = TransferStatus::cancel()
        .apply(&mut *conn, 1_i64)
        .await
        .unwrap();
    assert!(outcome.is_applied());
    let after = statements(&mut conn).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 0),
        "a versioned win"
    );

    let before = after;
    let outcome = TransferStatus::start()
        .apply(&mut *conn, 2_i64)
        .await
        .unwrap();
    assert!(outcome.is_applied());
    let after = statements(&mut conn).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "a win into flight"
    );

    let before = after;
    let outcome = TransferStatus::start()
        .apply(&mut *conn, 2_i64)
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AlreadyInState(TransferStatus::Sending));
    let after = statements(&mut conn).await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "a loss");

    // A win, then its effect and `done` at once: the fresh lease is not
    // renewed first, so the follow-up is the one statement after the win.
    let won = TransferStatus::start()
        .apply(&mut *conn, 3_i64)
        .await
        .unwrap()
        .won()
        .unwrap();
    let before = statements(&mut conn).await;
    let finished = won
        .finish(&mut *conn, |_| async { stateguard::Verdict::done() })
        .await
        .unwrap();
    assert!(
        matches!(finished, stateguard::Finished::Done { .. }),
        "{finished:?}"
    );
    let after = statements(&mut conn).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 0),
        "a finish right after its win"
    );
}

/// MariaDB's OK packet carries 0 for `LAST_INSERT_ID(expr)` in a statement
/// that fired a trigger, any trigger: an idempotency key taken over on a
/// store table with one (an audit trigger, an online schema change tool's)
/// still gets the lease it stored, and completes under it.
#[tokio::test]
async fn a_takeover_under_a_trigger_holds_the_stored_lease() {
    use stateguard::idempotency::{self, Begun, Request};
    let Some(db) = open!(Mysql, "idem_trigger") else {
        return;
    };
    for statement in idempotency::ddl(stateguard::ddl::Dialect::MySql) {
        sqlx::query(*statement).execute(&db.pool).await.unwrap();
    }
    sqlx::query(
        "CREATE TRIGGER stateguard_idempotency_audit AFTER UPDATE ON stateguard_idempotency \
         FOR EACH ROW SET @audited = 1",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let request = Request::new("acme:POST /payouts", "k1", "amount=100").unwrap();
    let lease = std::time::Duration::from_millis(100);
    let Begun::New(first) = idempotency::begin(&db.pool, &request, lease).await.unwrap() else {
        panic!("a new key");
    };
    drop(first);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let Begun::New(second) = idempotency::begin(&db.pool, &request, lease).await.unwrap() else {
        panic!("a key whose lease ran out is taken over");
    };
    let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
    second
        .complete(&mut tx, 201, b"payout 1".to_vec())
        .await
        .expect("the retry completes under the lease its takeover stored");
    tx.commit(()).await.unwrap();
    match idempotency::begin(&db.pool, &request, lease).await.unwrap() {
        Begun::Replay(stored) => assert_eq!(stored.body(), b"payout 1"),
        other => panic!("{other:?}"),
    }
}
