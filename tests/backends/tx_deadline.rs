//! Every call of a `Tx` or `Savepoint` keeps a deadline: over a network
//! that stops answering (a proxy in front of the real server holds the
//! server's answers back) it ends in `Error::Timeout`, saying whether the
//! outcome is known, instead of waiting as long as the operating system
//! does. On SQLite the deadline bounds the wait for the write lock.
//!
//! Each test runs under an outer guard far longer than the deadline under
//! test: a call that keeps no deadline fails the test there instead of
//! hanging it.

use crate::common;

use std::future::IntoFuture;
use std::time::Duration;

use common::proxy::{Proxied, Proxy, proxied};
use common::{Db, PayoutStatus};
use stateguard::bounds::Key;
use stateguard::{DEFAULT_DEADLINE, Error, Outcome, Tx, Won};

/// The deadline under test.
const DEADLINE: Duration = Duration::from_millis(300);
/// How long a test may run before it counts as hung.
const GUARD: Duration = Duration::from_secs(20);

/// `work`, or a failure naming `what` once [`GUARD`] has passed.
async fn guarded<T>(what: &str, work: impl IntoFuture<Output = T>) -> T {
    tokio::time::timeout(GUARD, work)
        .await
        .unwrap_or_else(|_| panic!("{what} still waited after {GUARD:?}: it keeps no deadline"))
}

/// `error` is the deadline of the transaction's own `statement`, with the
/// outcome `known` or not.
fn assert_timed_out(error: &Error, statement: &str, known: bool) {
    match error {
        Error::Timeout {
            table,
            transition,
            deadline,
            outcome_known,
        } => {
            assert_eq!((*table, *transition), ("", statement), "{error}");
            assert_eq!(*deadline, DEADLINE, "{error}");
            assert_eq!(*outcome_known, known, "{error}");
        }
        other => panic!("expected the {statement} to time out, got {other:?}"),
    }
    assert_eq!(error.is_outcome_unknown(), !known, "{error}");
}

fn won<C: std::fmt::Debug>(outcome: Outcome<PayoutStatus, i64, C>) -> Won<PayoutStatus, i64, C> {
    match outcome {
        Outcome::Applied(won) => won,
        other => panic!("expected a win, got {other:?}"),
    }
}

// The server-backed bodies, as `postgres::name` and `mysql::name`.
mod postgres {
    crate::backend_tests!(@in Postgres:
        "txd_begin" => a_begin_without_an_answer_times_out,
        "txd_connect" => waiting_for_a_connection_counts_against_the_deadline,
        "txd_commit" => a_commit_without_an_answer_leaves_the_outcome_open,
        "txd_savepoint" => a_cut_off_savepoint_leaves_a_transaction_that_cannot_commit,
        "txd_release" => a_cut_off_release_leaves_a_transaction_that_cannot_commit,
    );
}

mod mysql {
    crate::backend_tests!(@in Mysql:
        "txd_begin" => a_begin_without_an_answer_times_out,
        "txd_connect" => waiting_for_a_connection_counts_against_the_deadline,
        "txd_commit" => a_commit_without_an_answer_leaves_the_outcome_open,
        "txd_savepoint" => a_cut_off_savepoint_leaves_a_transaction_that_cannot_commit,
        "txd_release" => a_cut_off_release_leaves_a_transaction_that_cannot_commit,
    );
}

/// The `BEGIN` reaches the server and its answer never comes back: the
/// caller gets `Timeout` with the outcome known (no transaction, nothing
/// committed). Once the answer arrives, the pool's one connection comes
/// back outside any transaction: a win through the pool commits.
async fn a_begin_without_an_answer_times_out<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.seed(1).await;
    let (proxy, through) = proxied(&db.pool).await;
    proxy.hold();
    let begun = guarded("Tx::begin", Tx::begin(&through).within(DEADLINE)).await;
    assert_timed_out(&begun.unwrap_err(), "BEGIN", true);
    proxy.release();
    let outcome = guarded("a move after the cut-off BEGIN", async {
        PayoutStatus::start().apply(&through, 1_i64).await.unwrap()
    })
    .await;
    assert!(outcome.is_applied(), "{outcome:?}");
    assert_eq!(db.status(1).await.as_deref(), Some("sending"));
}

/// A new connection to a server that does not answer: the wait for it is
/// part of `Tx::begin`'s deadline, well inside the pool's own
/// `acquire_timeout` (a minute).
async fn waiting_for_a_connection_counts_against_the_deadline<DB: Proxied>(db: Db<DB>) {
    let (host, port) = DB::upstream(&db.pool);
    let proxy = Proxy::start(&host, port).await;
    proxy.hold();
    let lazy = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(60))
        .connect_lazy_with(DB::via(&db.pool, proxy.addr()));
    let begun = guarded(
        "Tx::begin waiting for a connection",
        Tx::begin(&lazy).within(DEADLINE),
    )
    .await;
    assert_timed_out(&begun.unwrap_err(), "BEGIN", true);
}

/// The `COMMIT` reaches the server and its answer never comes back: the
/// caller gets `Timeout` with the outcome open, and no win. The row, read
/// on a connection of its own, shows what happened: it committed.
async fn a_commit_without_an_answer_leaves_the_outcome_open<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.seed(1).await;
    let (proxy, through) = proxied(&db.pool).await;
    let mut tx = Tx::begin(&through).await.unwrap().within(DEADLINE);
    let staged = won(PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap());
    proxy.hold();
    let committed = guarded("Tx::commit", tx.commit(staged)).await;
    assert_timed_out(&committed.unwrap_err(), "COMMIT", false);
    guarded("the row committing", async {
        while db.status(1).await.as_deref() != Some("sending") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    proxy.release();
}

/// The `SAVEPOINT`'s answer never comes back: `Timeout`, with the outcome
/// known because the transaction can no longer commit. Once the answers
/// flow again, a move in it is refused before it is sent (on PostgreSQL
/// sqlx has rolled the whole transaction back, and the move would commit
/// on its own), its commit is refused, and its earlier move never commits.
async fn a_cut_off_savepoint_leaves_a_transaction_that_cannot_commit<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.seed(2).await;
    let (proxy, through) = proxied(&db.pool).await;
    let mut tx = Tx::begin(&through).await.unwrap().within(DEADLINE);
    let staged = won(PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap());
    proxy.hold();
    let opened = guarded("Tx::savepoint", tx.savepoint()).await;
    assert_timed_out(&opened.unwrap_err(), "SAVEPOINT", true);
    proxy.release();
    assert_refused(&mut tx, 2).await;
    let error = guarded("Tx::commit", tx.commit(staged)).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    assert_eq!(db.status(1).await.as_deref(), Some("pending"));
    assert_eq!(db.status(2).await.as_deref(), Some("pending"));
}

/// A move through `tx`, which can no longer commit, is refused with
/// `RolledBack` before it is sent (the caller reads its row on a
/// connection of its own), and so is a savepoint.
async fn assert_refused<DB: Proxied>(tx: &mut Tx<'_, DB>, id: i64)
where
    i64: Key<DB>,
{
    let refused = guarded("a move after the cut-off", async {
        PayoutStatus::cancel().apply(&mut *tx, id).await
    })
    .await;
    let error = refused.expect_err("a move in a transaction that cannot commit");
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    assert!(
        error.is_retry_transaction() && error.is_transient(),
        "{error:?}"
    );
    let opened = guarded("a savepoint after the cut-off", tx.savepoint()).await;
    let error = opened.expect_err("a savepoint in a transaction that cannot commit");
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
}

/// The `RELEASE SAVEPOINT`'s answer never comes back: `Timeout`, the
/// savepoint's win is gone, and the transaction can no longer commit.
async fn a_cut_off_release_leaves_a_transaction_that_cannot_commit<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.seed(2).await;
    let (proxy, through) = proxied(&db.pool).await;
    let mut tx = Tx::begin(&through).await.unwrap().within(DEADLINE);
    let mut savepoint = tx.savepoint().await.unwrap();
    assert_eq!(savepoint.deadline(), DEADLINE);
    let staged = won(PayoutStatus::start()
        .apply(&mut savepoint, 1_i64)
        .await
        .unwrap());
    proxy.hold();
    let released = guarded("Savepoint::release", savepoint.release(staged)).await;
    assert_timed_out(&released.unwrap_err(), "RELEASE SAVEPOINT", true);
    proxy.release();
    assert_refused(&mut tx, 2).await;
    let error = guarded("Tx::commit", tx.commit(())).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    assert_eq!(db.status(1).await.as_deref(), Some("pending"));
    assert_eq!(db.status(2).await.as_deref(), Some("pending"));
}

/// SQLite has no network; its deadline bounds the wait for the write lock.
/// With another transaction holding it, `BEGIN IMMEDIATE` ends in
/// `Timeout` (outcome known) long before the connection's 30 s
/// `busy_timeout`; once the lock is free, the pool begins and commits as
/// before.
#[tokio::test]
async fn sqlite_a_begin_behind_a_held_write_lock_times_out() {
    let Some(db) = open!(Sqlite, "txd_lock") else {
        return;
    };
    db.seed(1).await;
    assert_eq!(Tx::begin(&db.pool).deadline(), DEFAULT_DEADLINE);
    let holder = Tx::begin_with(&db.pool, "BEGIN IMMEDIATE").await.unwrap();
    assert_eq!(holder.deadline(), DEFAULT_DEADLINE);
    let begun = guarded(
        "Tx::begin_with behind a write lock",
        Tx::begin_with(&db.pool, "BEGIN IMMEDIATE").within(DEADLINE),
    )
    .await;
    assert_timed_out(&begun.unwrap_err(), "BEGIN", true);
    holder.rollback().await.unwrap();
    // The cut-off `BEGIN IMMEDIATE` may take the freed lock first, for as
    // long as its rollback takes: a longer deadline here.
    let longer = Duration::from_secs(10);
    let mut tx = guarded(
        "Tx::begin_with after the lock was freed",
        Tx::begin_with(&db.pool, "BEGIN IMMEDIATE").within(longer),
    )
    .await
    .unwrap();
    assert_eq!(tx.deadline(), longer);
    let staged = won(PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap());
    let _committed = guarded("Tx::commit", tx.commit(staged)).await.unwrap();
    assert_eq!(db.status(1).await.as_deref(), Some("sending"));
}
