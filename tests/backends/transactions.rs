//! Wins inside a caller's transaction: tied to that transaction and its
//! savepoints, handed out only by a commit that really committed, and
//! losers that see the row as it is, not as a snapshot had it.

use crate::common;

use std::future::IntoFuture;
use std::marker::PhantomData;
use std::time::Duration;

use common::{
    Db, Isolation, PayoutStatus, TestBackend, TransferStatus, abandon_at_every_poll,
    stale_transaction,
};
use stateguard::bounds::Key;
use stateguard::{Error, Outcome, StateMachine, Tx, Uncommitted, Won};

type Staged = Won<TransferStatus, i64, Uncommitted>;

fn won(outcome: Outcome<TransferStatus, i64, Uncommitted>) -> Staged {
    match outcome {
        Outcome::Applied(won) => won,
        other => panic!("expected a win, got {other:?}"),
    }
}

// Each body below, as `sqlite::name`, `postgres::name` and `mysql::name`.
backend_tests! {
    impl Tests {
        "tx_savepoint_rollback" => a_win_in_a_rolled_back_savepoint_never_commits,
        "tx_savepoint_release" => a_released_savepoint_commits_its_wins_with_the_transaction,
        "tx_savepoint_foreign" => a_savepoint_releases_only_its_own_wins,
        "tx_foreign" => a_win_cannot_commit_with_another_transaction,
        "tx_abandoned_begin" => an_abandoned_begin_leaves_no_transaction_behind,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    /// A caller stops waiting for `Tx::begin` half-way (a client hung up, a
    /// timeout fired), at every point from just after it started to just
    /// before it finished. The pool's one connection must not come back inside
    /// a transaction that sqlx does not know of: a win through the pool right
    /// after is committed, seen from another connection. (A `BEGIN` sqlx had
    /// sent when its future was dropped left the connection in a transaction
    /// whose later autocommit statements never committed.)
    async fn an_abandoned_begin_leaves_no_transaction_behind(db: Db<DB>) {
        let one = sqlx::pool::PoolOptions::<DB>::new()
            .max_connections(1)
            .connect_with((*db.pool.connect_options()).clone())
            .await
            .unwrap();
        let (db, one) = (&db, &one);
        abandon_at_every_poll(
            |_| Tx::begin(one).into_future(),
            |at| async move {
                let id = at.round;
                db.insert(id, "pending").await;
                let outcome = PayoutStatus::start().apply(one, id).await.unwrap();
                assert!(outcome.is_applied(), "{at:?}: {outcome:?}");
                assert_eq!(
                    db.status(id).await.as_deref(),
                    Some("sending"),
                    "{at:?}: the win through the pool did not commit"
                );
            },
        )
        .await;
    }

    /// ROLLBACK TO SAVEPOINT undoes the move: its win must not commit
    /// with the enclosing transaction.
    pub(crate) async fn a_win_in_a_rolled_back_savepoint_never_commits(db: Db<DB>) {
        db.transfers(2).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let first = won(TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap());
        let mut savepoint = tx.savepoint().await.unwrap();
        let second = won(TransferStatus::start()
            .apply(&mut savepoint, 2_i64)
            .await
            .unwrap());
        savepoint.rollback().await.unwrap();
        let error = tx.commit((first, second)).await.unwrap_err();
        assert!(
            matches!(error, Error::Misuse(stateguard::Misuse::ForeignWin)),
            "{error:?}"
        );
        // Nothing was committed: the transaction rolled back whole.
        assert_eq!(db.transfer(1).await, ("pending".to_owned(), 0));
        assert_eq!(db.transfer(2).await, ("pending".to_owned(), 0));
    }

    /// A released savepoint hands its wins to the transaction, and a
    /// nested one to its parent savepoint.
    pub(crate) async fn a_released_savepoint_commits_its_wins_with_the_transaction(db: Db<DB>) {
        db.transfers(3).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let first = won(TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap());
        let mut outer = tx.savepoint().await.unwrap();
        let second = won(TransferStatus::start()
            .apply(&mut outer, 2_i64)
            .await
            .unwrap());
        let mut inner = outer.savepoint().await.unwrap();
        let third = won(TransferStatus::start()
            .apply(&mut inner, 3_i64)
            .await
            .unwrap());
        // The inner win is not the outer savepoint's until released.
        let third = inner.release(third).await.unwrap();
        let (second, third) = outer.release((second, third)).await.unwrap();
        let (first, second, third) = tx.commit((first, second, third)).await.unwrap();
        let keys: Vec<String> = [first, second, third]
            .iter()
            .map(|won| won.effect_key())
            .collect();
        assert_eq!(
            keys,
            [
                "transfers.status:1:sending:1",
                "transfers.status:2:sending:1",
                "transfers.status:3:sending:1"
            ]
        );
        for id in 1..=3 {
            assert_eq!(db.transfer(id).await, ("sending".to_owned(), 1));
        }
    }

    /// A savepoint cannot release a win that is not its own.
    async fn a_savepoint_releases_only_its_own_wins(db: Db<DB>) {
        db.transfers(1).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let first = won(TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap());
        let savepoint = tx.savepoint().await.unwrap();
        let error = savepoint.release(first).await.unwrap_err();
        assert!(
            matches!(error, Error::Misuse(stateguard::Misuse::ForeignWin)),
            "{error:?}"
        );
    }

    /// `tx.rollback()`, then the win offered to a fresh transaction: it
    /// belongs to the rolled-back one, so it never commits.
    async fn a_win_cannot_commit_with_another_transaction(db: Db<DB>) {
        db.transfers(1).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let staged = won(TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap());
        tx.rollback().await.unwrap();
        let other = Tx::begin(&db.pool).await.unwrap();
        let error = staged.commit(other).await.unwrap_err();
        assert!(
            matches!(error, Error::Misuse(stateguard::Misuse::ForeignWin)),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("nothing was committed"),
            "{error}"
        );
        assert_eq!(db.transfer(1).await, ("pending".to_owned(), 0));
    }
}

/// After `RetryTransaction` the transaction must be retried whole: a caller
/// who ignores it cannot commit what came before.
async fn an_ignored_retry_transaction_error_blocks_the_commit<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
{
    let mut tx = stale_transaction(&db).await;
    let error = PayoutStatus::cancel()
        .apply(&mut tx, 1_i64)
        .await
        .unwrap_err();
    assert!(error.is_retry_transaction(), "{error:?}");
    let error = tx.commit(()).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    assert!(error.is_retry_transaction());
    assert_eq!(db.status(1).await.as_deref(), Some("sending"));
}

// SQLITE_BUSY_SNAPSHOT, PostgreSQL 40001, MariaDB snapshot isolation 1020.
#[tokio::test]
async fn sqlite_an_ignored_retry_transaction_error_blocks_the_commit() {
    let Some(db) = open!(Sqlite, "tx_ignored_retry") else {
        return;
    };
    an_ignored_retry_transaction_error_blocks_the_commit(db).await;
}

#[tokio::test]
async fn postgres_an_ignored_retry_transaction_error_blocks_the_commit() {
    let Some(db) = open!(Postgres, "tx_ignored_retry", Isolation::RepeatableRead) else {
        return;
    };
    an_ignored_retry_transaction_error_blocks_the_commit(db).await;
}

#[tokio::test]
async fn mariadb_an_ignored_retry_transaction_error_blocks_the_commit() {
    let Some(db) = open!(Mysql, "tx_ignored_retry", Isolation::Snapshot) else {
        return;
    };
    an_ignored_retry_transaction_error_blocks_the_commit(db).await;
}

/// PostgreSQL answers the COMMIT of an aborted transaction with ROLLBACK and
/// no error. A win from before the error must not come out committed.
#[tokio::test]
async fn postgres_commit_of_an_aborted_transaction_is_an_error() {
    let Some(db) = open!(Postgres, "tx_aborted") else {
        return;
    };
    db.transfers(1).await;
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let staged = won(TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap());
    // The caller's own statement fails, and the caller goes on regardless.
    let ignored = sqlx::query("SELECT 1 / 0").execute(&mut *tx).await;
    assert!(ignored.is_err());
    let error = staged.commit(tx).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    assert!(error.to_string().contains("rolled back"), "{error}");
    assert_eq!(db.transfer(1).await, ("pending".to_owned(), 0));
}

/// A savepoint that caught the error keeps the transaction alive: its wins
/// from before the savepoint still commit.
#[tokio::test]
async fn postgres_an_error_inside_a_rolled_back_savepoint_spares_the_transaction() {
    let Some(db) = open!(Postgres, "tx_savepoint_error") else {
        return;
    };
    db.transfers(1).await;
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let staged = won(TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap());
    let mut savepoint = tx.savepoint().await.unwrap();
    assert!(
        sqlx::query("SELECT 1 / 0")
            .execute(&mut *savepoint)
            .await
            .is_err()
    );
    savepoint.rollback().await.unwrap();
    let committed = staged.commit(tx).await.unwrap();
    assert_eq!(committed.occurrence(), 1);
    assert_eq!(db.transfer(1).await, ("sending".to_owned(), 1));
}

/// A deadlock rolls the victim's whole transaction back, and MySQL runs its
/// later statements outside any transaction, so its COMMIT would succeed
/// and commit nothing. Here the deadlock hits the caller's own statements,
/// which the library does not see: the check before COMMIT does.
#[tokio::test]
async fn mariadb_commit_after_a_deadlock_in_the_callers_statements_is_an_error() {
    let Some(db) = open!(Mysql, "tx_deadlock_own") else {
        return;
    };
    db.transfers(2).await;
    let mut a = Tx::begin(&db.pool).await.unwrap();
    let mut b = Tx::begin(&db.pool).await.unwrap();
    let won_a = won(TransferStatus::start().apply(&mut a, 1_i64).await.unwrap());
    let won_b = won(TransferStatus::start().apply(&mut b, 2_i64).await.unwrap());
    // Each now locks the other's row: one of them is the victim.
    let (ra, rb) = tokio::join!(
        sqlx::query("UPDATE transfers SET sent_at = NULL WHERE id = 2").execute(&mut *a),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sqlx::query("UPDATE transfers SET sent_at = NULL WHERE id = 1")
                .execute(&mut *b)
                .await
        },
    );
    let (victim, victim_win, survivor, survivor_win, victim_row) = match (ra, rb) {
        (Err(_), Ok(_)) => (a, won_a, b, won_b, 1),
        (Ok(_), Err(_)) => (b, won_b, a, won_a, 2),
        other => panic!("expected exactly one deadlock victim: {other:?}"),
    };
    let error = victim.commit(victim_win).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    let committed = survivor.commit(survivor_win).await.unwrap();
    assert_eq!(committed.state(), TransferStatus::Sending);
    assert_eq!(db.transfer(victim_row).await, ("pending".to_owned(), 0));
}

/// The same, with the deadlock in the library's own statement: the victim
/// was told to retry the whole transaction, a later move or read of the
/// library's in it is not sent (it would run outside any transaction and
/// commit on its own), and its commit refuses.
#[tokio::test]
async fn mariadb_commit_after_a_deadlock_in_apply_is_an_error() {
    let Some(db) = open!(Mysql, "tx_deadlock_apply") else {
        return;
    };
    db.transfers(2).await;
    let mut a = Tx::begin(&db.pool).await.unwrap();
    let mut b = Tx::begin(&db.pool).await.unwrap();
    let won_a = won(TransferStatus::start().apply(&mut a, 1_i64).await.unwrap());
    let won_b = won(TransferStatus::start().apply(&mut b, 2_i64).await.unwrap());
    let (ra, rb) = tokio::join!(TransferStatus::cancel().apply(&mut a, 2_i64), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        TransferStatus::cancel().apply(&mut b, 1_i64).await
    },);
    let (mut victim, victim_win, survivor, victim_row) = match (ra, rb) {
        (Err(error), Ok(_)) => {
            assert!(error.is_retry_transaction(), "{error:?}");
            (a, won_a, b, 1_i64)
        }
        (Ok(_), Err(error)) => {
            assert!(error.is_retry_transaction(), "{error:?}");
            (b, won_b, a, 2_i64)
        }
        other => panic!("expected exactly one deadlock victim: {other:?}"),
    };
    // The victim's row is `pending` again, and no lock is left on it.
    survivor.rollback().await.unwrap();
    let error = TransferStatus::start()
        .apply(&mut victim, victim_row)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    let read = TransferStatus::MACHINE
        .load(&mut victim, victim_row)
        .await
        .unwrap_err();
    assert!(
        read.is_retry_transaction() && read.is_transient(),
        "{read:?}"
    );
    assert_eq!(db.transfer(victim_row).await, ("pending".to_owned(), 0));
    let error = victim.commit(victim_win).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    assert_eq!(db.transfer(victim_row).await, ("pending".to_owned(), 0));
}

/// REPEATABLE READ, snapshot `pending`; another session moves the row to
/// `sending`. `confirm` (legal from `sending`) matches nothing against the
/// snapshot; a plain read would report `Conflict { current: Pending }`. The
/// locking read sees the row changed and asks for a retry instead.
#[tokio::test]
async fn postgres_repeatable_read_loser_is_told_to_retry_not_a_stale_conflict() {
    let Some(db) = open!(Postgres, "tx_rr_loser", Isolation::RepeatableRead) else {
        return;
    };
    let mut tx = stale_transaction(&db).await;
    let error = PayoutStatus::confirm()
        .apply(&mut tx, 1_i64)
        .await
        .unwrap_err();
    assert!(error.is_retry_transaction(), "{error:?}");
    drop(tx);
    // Retried whole, it sees the row as it is and wins.
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let outcome = PayoutStatus::confirm().apply(&mut tx, 1_i64).await.unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    tx.commit(outcome.won()).await.unwrap();
    assert_eq!(db.status(1).await.as_deref(), Some("sent"));
}

/// SERIALIZABLE, snapshot `sending`; another session puts the row back to
/// `pending`. `start` matches nothing against the snapshot; a plain read
/// would answer `AlreadyInState(Sending)` while the row is `pending`.
#[tokio::test]
async fn postgres_serializable_loser_is_told_to_retry_not_already_in_state() {
    let Some(db) = open!(Postgres, "tx_ser_loser", Isolation::Serializable) else {
        return;
    };
    db.seed(1).await;
    assert!(
        PayoutStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let seen: String = sqlx::query_scalar("SELECT status FROM payouts WHERE id = 1")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(seen, "sending");
    db.set_status_raw(1, "pending").await;
    let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await;
    let error = outcome.expect_err("a snapshot answer would be AlreadyInState(Sending)");
    assert!(error.is_retry_transaction(), "{error:?}");
    drop(tx);
    assert_eq!(db.status(1).await.as_deref(), Some("pending"));
    assert!(
        PayoutStatus::MACHINE
            .select_in_transaction_sql()
            .postgres()
            .contains(" FOR SHARE) AS __sg_r")
    );
}

/// READ COMMITTED inside a transaction: a lost race waits for the winner
/// and reports the state it committed.
#[tokio::test]
async fn postgres_read_committed_loser_in_a_transaction_sees_the_winner() {
    let Some(db) = open!(Postgres, "tx_rc_loser") else {
        return;
    };
    let mut tx = stale_transaction(&db).await;
    let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap();
    assert_eq!(outcome, Outcome::AlreadyInState(PayoutStatus::Sending));
    tx.commit(()).await.unwrap();
}
