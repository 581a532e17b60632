//! Behaviour of `Transition::apply` on every backend, from one test body per
//! behaviour: multi-source transitions, Conflict, NotFound, `set` columns,
//! pools, connections and transactions, unknown status strings.

use crate::common;

use std::marker::PhantomData;

use common::{Db, PayoutStatus, TestBackend, stale_transaction};
use stateguard::bounds::Key;
use stateguard::{Error, Outcome, Tx};

// Each body below, as `sqlite::name`, `postgres::name` and `mysql::name`.
backend_tests! {
    impl Tests {
        "start_once" => start_wins_once_then_replays_are_already_in_state,
        "multi_source" => cancel_starts_from_either_source_state,
        "conflict" => cancel_after_sent_is_a_conflict,
        "not_found" => missing_row_is_not_found,
        "set_columns" => set_columns_are_written_by_the_winning_statement,
        "on_connection" => apply_on_a_connection,
        "tx_rollback" => apply_in_a_transaction_that_rolls_back_changes_nothing,
        "tx_commit" => apply_in_a_transaction_that_commits,
        "unknown_state" => unknown_status_string_is_an_error_that_names_it,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    async fn start_wins_once_then_replays_are_already_in_state(db: Db<DB>) {
        db.seed(1).await;
        let won = match PayoutStatus::start().apply(&db.pool, 1_i64).await.unwrap() {
            Outcome::Applied(won) => won,
            other => panic!("first attempt must win, got {other:?}"),
        };
        assert_eq!(won.state(), PayoutStatus::Sending);
        assert_eq!(*won.key(), 1);
        assert_eq!(won.effect_key(), "payouts.status:1:sending:0");
        for _ in 0..3 {
            let replay = PayoutStatus::start().apply(&db.pool, 1_i64).await.unwrap();
            assert_eq!(replay, Outcome::AlreadyInState(PayoutStatus::Sending));
        }
        assert_eq!(db.status(1).await.as_deref(), Some("sending"));
        // `set(attempts = "attempts + 1")` ran once, with the win only.
        assert_eq!(db.columns(1).await, (1, false));
    }

    async fn cancel_starts_from_either_source_state(db: Db<DB>) {
        db.seed(2).await;
        // Row 1 cancelled from Pending, row 2 from Sending.
        let from_pending = PayoutStatus::cancel().apply(&db.pool, 1_i64).await.unwrap();
        assert!(from_pending.is_applied(), "{from_pending:?}");
        assert!(
            PayoutStatus::start()
                .apply(&db.pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let from_sending = PayoutStatus::cancel().apply(&db.pool, 2_i64).await.unwrap();
        assert!(from_sending.is_applied(), "{from_sending:?}");
        assert_eq!(db.status(1).await.as_deref(), Some("cancelled"));
        assert_eq!(db.status(2).await.as_deref(), Some("cancelled"));
        assert_eq!(
            PayoutStatus::cancel().sources(),
            &[PayoutStatus::Pending, PayoutStatus::Sending]
        );
    }

    async fn cancel_after_sent_is_a_conflict(db: Db<DB>) {
        db.seed(1).await;
        assert!(
            PayoutStatus::start()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert!(
            PayoutStatus::confirm()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let late = PayoutStatus::cancel().apply(&db.pool, 1_i64).await.unwrap();
        assert_eq!(
            late,
            Outcome::Conflict {
                current: PayoutStatus::Sent
            }
        );
        assert_eq!(db.status(1).await.as_deref(), Some("sent"));
        // A transition that skips a step is a conflict too.
        let early = PayoutStatus::confirm()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert_eq!(early, Outcome::AlreadyInState(PayoutStatus::Sent));
        db.insert(2, "pending").await;
        let skip = PayoutStatus::confirm()
            .apply(&db.pool, 2_i64)
            .await
            .unwrap();
        assert_eq!(
            skip,
            Outcome::Conflict {
                current: PayoutStatus::Pending
            }
        );
        assert_eq!(db.status(2).await.as_deref(), Some("pending"));
    }

    async fn missing_row_is_not_found(db: Db<DB>) {
        db.seed(1).await;
        let outcome = PayoutStatus::start()
            .apply(&db.pool, 404_i64)
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::NotFound);
        assert_eq!(db.status(404).await, None);
    }

    async fn set_columns_are_written_by_the_winning_statement(db: Db<DB>) {
        db.seed(1).await;
        assert_eq!(db.columns(1).await, (0, false));
        assert!(
            PayoutStatus::start()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(db.columns(1).await, (1, false));
        assert!(
            PayoutStatus::confirm()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(db.columns(1).await, (1, true));
        // A lost attempt writes nothing.
        let replay = PayoutStatus::confirm()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert!(!replay.is_applied());
        assert_eq!(db.columns(1).await, (1, true));
    }

    async fn apply_on_a_connection(db: Db<DB>) {
        db.seed(1).await;
        let mut conn = db.pool.acquire().await.unwrap();
        assert!(
            PayoutStatus::start()
                .apply(&mut conn, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let replay = PayoutStatus::start().apply(&mut conn, 1_i64).await.unwrap();
        assert_eq!(replay, Outcome::AlreadyInState(PayoutStatus::Sending));
        drop(conn);
        assert_eq!(db.status(1).await.as_deref(), Some("sending"));
    }

    async fn apply_in_a_transaction_that_rolls_back_changes_nothing(db: Db<DB>) {
        db.seed(1).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        assert!(
            PayoutStatus::start()
                .apply(&mut tx, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        // Inside the transaction the move is visible...
        let again = PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap();
        assert_eq!(again, Outcome::AlreadyInState(PayoutStatus::Sending));
        tx.rollback().await.unwrap();
        // ...and after the rollback it never happened.
        assert_eq!(db.status(1).await.as_deref(), Some("pending"));
        assert_eq!(db.columns(1).await, (0, false));
    }

    async fn apply_in_a_transaction_that_commits(db: Db<DB>) {
        db.seed(1).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        assert!(
            PayoutStatus::start()
                .apply(&mut tx, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert!(
            PayoutStatus::confirm()
                .apply(&mut tx, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        tx.commit(()).await.unwrap();
        assert_eq!(db.status(1).await.as_deref(), Some("sent"));
        assert_eq!(db.columns(1).await, (1, true));
    }

    async fn unknown_status_string_is_an_error_that_names_it(db: Db<DB>) {
        db.seed(1).await;
        db.set_status_raw(1, "exploded").await;
        let error = PayoutStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap_err();
        let Error::UnknownState(unknown) = &error else {
            panic!("expected UnknownState, got {error:?}");
        };
        assert_eq!(unknown.value(), "exploded");
        assert_eq!(unknown.machine(), "PayoutStatus");
        let message = error.to_string();
        assert!(message.contains("\"exploded\""), "{message}");
        assert!(message.contains("payouts"), "{message}");
        // The row is untouched.
        assert_eq!(db.status(1).await.as_deref(), Some("exploded"));
        // Decoding the column as the enum fails the same way, without a panic.
        let decoded = db.status_as_enum(1).await;
        let message = decoded.unwrap_err().to_string();
        assert!(message.contains("exploded"), "{message}");
    }
}

/// A deferred SQLite transaction that read an old snapshot cannot write: the
/// statement fails with SQLITE_BUSY_SNAPSHOT and only a new transaction can
/// succeed, so the library must not retry the statement in place.
#[tokio::test]
async fn sqlite_stale_transaction_must_be_retried_whole() {
    let Some(db) = open!(Sqlite, "stale_tx") else {
        return;
    };
    let mut tx = stale_transaction(&db).await;
    let error = PayoutStatus::cancel()
        .apply(&mut tx, 1_i64)
        .await
        .unwrap_err();
    assert!(error.is_retry_transaction(), "{error:?}");
    assert!(
        error.to_string().contains("retry the whole transaction"),
        "{error}"
    );
    tx.rollback().await.unwrap();
    // Retried as a whole, the transaction sees the real state.
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let outcome = PayoutStatus::cancel().apply(&mut tx, 1_i64).await.unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    tx.commit(()).await.unwrap();
    assert_eq!(db.status(1).await.as_deref(), Some("cancelled"));
}

/// Under REPEATABLE READ, updating a row that changed after the
/// transaction's snapshot raises 40001 inside the caller's transaction.
#[tokio::test]
async fn postgres_serialization_failure_in_a_transaction_must_be_retried_whole() {
    let Some(db) = open!(Postgres, "stale_tx", common::Isolation::RepeatableRead) else {
        return;
    };
    let mut tx = stale_transaction(&db).await;
    let error = PayoutStatus::cancel()
        .apply(&mut tx, 1_i64)
        .await
        .unwrap_err();
    let Error::RetryTransaction { source, .. } = &error else {
        panic!("expected RetryTransaction, got {error:?}");
    };
    let code = source.as_database_error().and_then(|e| e.code());
    assert_eq!(code.as_deref(), Some("40001"));
    tx.rollback().await.unwrap();
    assert_eq!(db.status(1).await.as_deref(), Some("sending"));
    // The same statement in autocommit is retried by the library and settles.
    let outcome = PayoutStatus::cancel().apply(&db.pool, 1_i64).await.unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
}

/// A key that matches several rows is reported, not taken for a win.
#[tokio::test]
async fn a_key_matching_several_rows_is_an_error() {
    use stateguard::StateMachine;

    #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(table = "payouts", column = "status", key = "attempts")]
    enum ByAttempts {
        #[state(initial)]
        #[transition(start -> Sending)]
        Pending,
        Sending,
    }

    let Some(db) = open!(Sqlite, "ambiguous") else {
        return;
    };
    db.seed(3).await;
    let error = ByAttempts::start()
        .apply(&db.pool, 0_i64)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::AmbiguousKey {
                rows: 3,
                key: "attempts",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("must identify one row"),
        "{error}"
    );
}

/// `apply` futures are `Send` on every executor, so they can be spawned.
#[allow(dead_code)]
fn apply_futures_are_send(
    pg: &sqlx::PgPool,
    pg_conn: &mut sqlx::PgConnection,
    pg_tx: &mut stateguard::Tx<'_, sqlx::Postgres>,
    pg_savepoint: &mut stateguard::Savepoint<'_, sqlx::Postgres>,
    lite: &sqlx::SqlitePool,
    lite_conn: &mut sqlx::SqliteConnection,
    lite_tx: &mut stateguard::Tx<'_, sqlx::Sqlite>,
) {
    fn is_send<T: Send>(_: T) {}
    is_send(PayoutStatus::start().apply(pg, 1_i64));
    is_send(PayoutStatus::start().apply(pg_conn, 1_i64));
    is_send(PayoutStatus::start().apply(pg_tx, "uuid-or-text-keys-too"));
    is_send(PayoutStatus::start().apply(pg_savepoint, 1_i64));
    is_send(PayoutStatus::start().apply(lite, 1_i64));
    is_send(PayoutStatus::start().apply(lite_conn, 1_i64));
    is_send(PayoutStatus::start().apply(lite_tx, String::from("key")));
}

/// A session the server ends while `apply` waits (here killed by an
/// operator, as during a failover) leaves the outcome unknown, and the
/// error says so.
#[tokio::test]
async fn postgres_a_terminated_session_leaves_the_outcome_unknown() {
    let Some(db) = open!(Postgres, "terminated") else {
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
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let pool = db.pool.clone();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
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

/// An `UPDATE` that waits on a lock held elsewhere is cut off by the
/// deadline, and the error says the outcome is open. Inside a `Tx`, the
/// transaction then refuses to commit.
#[tokio::test]
async fn postgres_apply_keeps_its_deadline_behind_a_held_lock() {
    let Some(db) = open!(Postgres, "deadline") else {
        return;
    };
    db.seed(1).await;
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM payouts WHERE id = 1 FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let start = PayoutStatus::start().within(std::time::Duration::from_millis(300));
    assert_eq!(start.deadline(), std::time::Duration::from_millis(300));
    assert_eq!(
        PayoutStatus::start().deadline(),
        stateguard::DEFAULT_DEADLINE
    );
    let error = start.apply(&db.pool, 1_i64).await.unwrap_err();
    let Error::Timeout { outcome_known, .. } = error else {
        panic!("expected a timeout, got {error:?}");
    };
    assert!(!outcome_known);
    assert!(error.is_outcome_unknown());
    assert!(error.to_string().contains("may still commit"), "{error}");

    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let error = start.apply(&mut tx, 1_i64).await.unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    let error = tx.commit(()).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    holder.rollback().await.unwrap();
}
