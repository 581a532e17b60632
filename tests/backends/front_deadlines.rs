//! Every call of the front doors (the idempotency store, the inbox), of
//! recovery's `claim_expired` and of a history read keeps a deadline: over
//! a network that stops answering (a proxy in front of the real server
//! holds the server's answers back) it ends in `Error::Timeout`, naming
//! the call and saying whether a write may have been applied, instead of
//! waiting as long as the operating system does. On SQLite the deadline
//! bounds the wait for the write lock.
//!
//! Each test runs under an outer guard far longer than the deadline under
//! test: a call that keeps no deadline fails the test there instead of
//! hanging it.

use crate::common;

use std::future::IntoFuture;
use std::time::Duration;

use common::proxy::{Proxied, proxied};
use common::{Db, TestBackend, TransferStatus};
use sqlx::Pool;
use stateguard::bounds::Key;
use stateguard::idempotency::{self, Begun, Request, Ticket, Work};
use stateguard::inbox::{self, Received};
use stateguard::{DEFAULT_DEADLINE, Error, ErrorKind, HistoryRow, StateMachine, Tx, claim_expired};

/// The deadline under test.
const DEADLINE: Duration = Duration::from_millis(300);
/// How long a test may run before it counts as hung.
const GUARD: Duration = Duration::from_secs(20);

const STORE: &str = "stateguard_idempotency";
const INBOX: &str = "stateguard_inbox";

/// `work`, or a failure naming `what` once [`GUARD`] has passed.
async fn guarded<T>(what: &str, work: impl IntoFuture<Output = T>) -> T {
    tokio::time::timeout(GUARD, work)
        .await
        .unwrap_or_else(|_| panic!("{what} still waited after {GUARD:?}: it keeps no deadline"))
}

/// `error` is the deadline of `call` on `table`, with the outcome `known`
/// or not, and of the kind that says so.
fn assert_timed_out(error: &Error, table: &str, call: &str, known: bool) {
    match error {
        Error::Timeout {
            table: t,
            transition,
            deadline,
            outcome_known,
        } => {
            assert_eq!((*t, *transition), (table, call), "{error}");
            assert_eq!(*deadline, DEADLINE, "{error}");
            assert_eq!(*outcome_known, known, "{error}");
        }
        other => panic!("expected `{call}` to time out, got {other:?}"),
    }
    let kind = match known {
        true => ErrorKind::Transient,
        false => ErrorKind::OutcomeUnknown,
    };
    assert_eq!(error.kind(), kind, "{error}");
}

/// The store's and the inbox's tables, from their DDL.
async fn tables<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in idempotency::ddl(DB::DIALECT)
        .iter()
        .chain(inbox::ddl(DB::DIALECT))
    {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

fn request(key: &str) -> Request {
    Request::new("acme:POST /payouts", key, "fingerprint").unwrap()
}

/// A `New` key's ticket, claimed on `pool`.
async fn ticket<DB: TestBackend>(pool: &Pool<DB>, key: &str) -> Ticket {
    match idempotency::begin(pool, &request(key), idempotency::DEFAULT_LEASE)
        .await
        .unwrap()
    {
        Begun::New(ticket) => ticket,
        other => panic!("expected a new key, got {other:?}"),
    }
}

// The server-backed bodies, as `postgres::name` and `mysql::name`.
mod sqlite {
    crate::backend_tests!(@in Sqlite:
        "frontd_begin_tx_deadline" => begin_tx_hands_its_deadline_to_the_transaction,
        "frontd_claimed_deadline" => claimed_rows_keep_the_claims_deadline,
    );
}

mod postgres {
    crate::backend_tests!(@in Postgres:
        "frontd_begin" => a_begin_without_an_answer_leaves_the_claim_open,
        "frontd_begin_tx" => a_begin_tx_without_an_answer_times_out,
        "frontd_complete" => a_cut_off_complete_leaves_a_transaction_that_cannot_commit,
        "frontd_release" => a_release_without_an_answer_times_out,
        "frontd_prune" => prunes_without_an_answer_time_out,
        "frontd_receive" => a_cut_off_receive_leaves_a_transaction_that_cannot_commit,
        "frontd_claim_expired" => a_claim_of_expired_rows_without_an_answer_times_out,
        "frontd_history" => a_history_read_without_an_answer_times_out,
        "frontd_load" => a_load_without_an_answer_times_out,
        "frontd_begin_tx_deadline" => begin_tx_hands_its_deadline_to_the_transaction,
        "frontd_claimed_deadline" => claimed_rows_keep_the_claims_deadline,
    );
}

mod mysql {
    crate::backend_tests!(@in Mysql:
        "frontd_begin" => a_begin_without_an_answer_leaves_the_claim_open,
        "frontd_begin_tx" => a_begin_tx_without_an_answer_times_out,
        "frontd_complete" => a_cut_off_complete_leaves_a_transaction_that_cannot_commit,
        "frontd_release" => a_release_without_an_answer_times_out,
        "frontd_prune" => prunes_without_an_answer_time_out,
        "frontd_receive" => a_cut_off_receive_leaves_a_transaction_that_cannot_commit,
        "frontd_claim_expired" => a_claim_of_expired_rows_without_an_answer_times_out,
        "frontd_history" => a_history_read_without_an_answer_times_out,
        "frontd_load" => a_load_without_an_answer_times_out,
        "frontd_begin_tx_deadline" => begin_tx_hands_its_deadline_to_the_transaction,
        "frontd_claimed_deadline" => claimed_rows_keep_the_claims_deadline,
    );
}

/// The claim reaches the server and its answer never comes back:
/// `Timeout` naming `begin`, outcome unknown. It was right to say so: the
/// claim committed, and a retry finds the key running. (A first claim
/// prepares the statement on the pool's one connection, so that the held
/// one is executed at once instead of waiting for its preparation's
/// answer; the hold waits for the pool's check of the returned
/// connection.)
async fn a_begin_without_an_answer_leaves_the_claim_open<DB: Proxied>(db: Db<DB>) {
    tables(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    let _prepared = ticket(&through, "k0").await;
    guarded("the connection's return to the pool", async {
        while through.num_idle() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let request = request("k1");
    let call = idempotency::begin(&through, &request, idempotency::DEFAULT_LEASE);
    assert_eq!(call.deadline(), DEFAULT_DEADLINE);
    proxy.hold();
    let begun = guarded("idempotency::begin", call.within(DEADLINE)).await;
    assert_timed_out(&begun.unwrap_err(), STORE, "begin", false);
    let retry = idempotency::begin(&db.pool, &request, idempotency::DEFAULT_LEASE);
    let retry = guarded("a retry of the cut-off begin", retry)
        .await
        .unwrap();
    assert!(matches!(retry, Begun::InProgress), "{retry:?}");
    proxy.release();
}

/// The claim of `begin_tx` gets no answer: `Timeout` naming `begin_tx`,
/// outcome unknown.
async fn a_begin_tx_without_an_answer_times_out<DB: Proxied>(db: Db<DB>) {
    tables(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    proxy.hold();
    let request = request("k1");
    let call = idempotency::begin_tx(&through, &request, idempotency::DEFAULT_LEASE);
    let begun = guarded("idempotency::begin_tx", call.within(DEADLINE)).await;
    assert_timed_out(&begun.unwrap_err(), STORE, "begin_tx", false);
    proxy.release();
}

/// With the answers flowing, `begin_tx(..).within(d)` hands out a
/// transaction that keeps `d`; `begin_tx_with` does the same.
async fn begin_tx_hands_its_deadline_to_the_transaction<DB: TestBackend>(db: Db<DB>) {
    tables(&db).await;
    let longer = Duration::from_secs(7);
    let (first, second) = (request("k1"), request("k2"));
    let calls = [
        idempotency::begin_tx(&db.pool, &first, idempotency::DEFAULT_LEASE),
        idempotency::begin_tx_with(
            &db.pool,
            &second,
            idempotency::DEFAULT_LEASE,
            DB::BEGIN_WRITE,
        ),
    ];
    for call in calls {
        match call.within(longer).await.unwrap() {
            Begun::New(Work { ticket, tx }) => {
                assert_eq!(tx.deadline(), longer);
                tx.rollback().await.unwrap();
                ticket.release(&db.pool).await.unwrap();
            }
            other => panic!("expected a new key, got {other:?}"),
        }
    }
}

/// `complete`'s `UPDATE` gets no answer: `Timeout` naming `complete`,
/// outcome unknown, and the transaction refuses to commit: the response
/// is never stored.
async fn a_cut_off_complete_leaves_a_transaction_that_cannot_commit<DB: Proxied>(db: Db<DB>) {
    tables(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    let ticket = ticket(&through, "k1").await;
    let mut tx = Tx::begin(&through).await.unwrap();
    proxy.hold();
    let completed = ticket.complete(&mut tx, 201, b"{}".to_vec());
    let completed = guarded("Ticket::complete", completed.within(DEADLINE)).await;
    assert_timed_out(&completed.unwrap_err(), STORE, "complete", false);
    proxy.release();
    let error = guarded("Tx::commit", tx.commit(())).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    let request = request("k1");
    let retry = idempotency::begin(&db.pool, &request, idempotency::DEFAULT_LEASE);
    let retry = guarded("a retry", retry).await.unwrap();
    assert!(matches!(retry, Begun::InProgress), "{retry:?}");
}

/// `release`'s `DELETE` gets no answer: `Timeout` naming `release`,
/// outcome unknown.
async fn a_release_without_an_answer_times_out<DB: Proxied>(db: Db<DB>) {
    tables(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    let ticket = ticket(&through, "k1").await;
    proxy.hold();
    let released = guarded("Ticket::release", ticket.release(&through).within(DEADLINE)).await;
    assert_timed_out(&released.unwrap_err(), STORE, "release", false);
    proxy.release();
}

/// Each prune's `DELETE` gets no answer: `Timeout` naming `prune` and its
/// table, outcome unknown.
async fn prunes_without_an_answer_time_out<DB: Proxied>(db: Db<DB>) {
    tables(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    proxy.hold();
    let window = idempotency::DEFAULT_WINDOW;
    let pruned = idempotency::prune(&through, window, 100).within(DEADLINE);
    let pruned = guarded("idempotency::prune", pruned).await;
    assert_timed_out(&pruned.unwrap_err(), STORE, "prune", false);
    // The pool's one connection went with the cut-off statement; a new
    // one never finishes its handshake: that wait is cut off too.
    let pruned = inbox::prune(&through, window, 100).within(DEADLINE);
    let pruned = guarded("inbox::prune", pruned).await;
    assert_timed_out(&pruned.unwrap_err(), INBOX, "prune", false);
    proxy.release();
}

/// `receive`'s `INSERT` gets no answer: `Timeout` naming `receive`,
/// outcome unknown, and the transaction refuses to commit: the message was
/// not received, and its next delivery is `First`.
async fn a_cut_off_receive_leaves_a_transaction_that_cannot_commit<DB: Proxied>(db: Db<DB>) {
    tables(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    let mut tx = Tx::begin(&through).await.unwrap();
    proxy.hold();
    let received = inbox::receive(&mut tx, "bank", "evt-1").within(DEADLINE);
    let received = guarded("inbox::receive", received).await;
    assert_timed_out(&received.unwrap_err(), INBOX, "receive", false);
    proxy.release();
    let error = guarded("Tx::commit", tx.commit(())).await.unwrap_err();
    assert!(matches!(error, Error::RolledBack { .. }), "{error:?}");
    let redelivered = guarded("the next delivery", async {
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let received = inbox::receive(&mut tx, "bank", "evt-1").await.unwrap();
        tx.commit(()).await.unwrap();
        received
    })
    .await;
    assert_eq!(redelivered, Received::First);
}

/// A transfer left in flight past its lease, for `claim_expired`.
async fn expired_transfer<DB: TestBackend>(db: &Db<DB>)
where
    i64: Key<DB>,
{
    db.transfers(1).await;
    let outcome = TransferStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    db.backdate_leases().await;
}

/// `claim_expired` gets no answer: `Timeout` naming `claim_expired` on the
/// machine's table. PostgreSQL lists and takes over in one `UPDATE`
/// (outcome unknown); MySQL's listing is a read (outcome known).
async fn a_claim_of_expired_rows_without_an_answer_times_out<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    for<'r> i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    expired_transfer(&db).await;
    let (proxy, through) = proxied(&db.pool).await;
    proxy.hold();
    let claimed = claim_expired::<_, i64, _>(&through, TransferStatus::Sending, 10);
    let claimed = guarded("claim_expired", claimed.within(DEADLINE)).await;
    let known = DB::DIALECT != stateguard::ddl::Dialect::Postgres;
    assert_timed_out(&claimed.unwrap_err(), "transfers", "claim_expired", known);
    proxy.release();
}

/// The rows `claim_expired` takes over keep its deadline for `finish`.
async fn claimed_rows_keep_the_claims_deadline<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    for<'r> i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    expired_transfer(&db).await;
    let longer = Duration::from_secs(7);
    let claimed = claim_expired::<_, i64, _>(&db.pool, TransferStatus::Sending, 10)
        .within(longer)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(claimed.iter().all(|won| won.deadline() == longer));
}

/// The `transfers` table with a history.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version",
    history = "transfer_history"
)]
enum Logged {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

/// A history read gets no answer: `Timeout` naming `history`, outcome
/// known (it only reads).
async fn a_history_read_without_an_answer_times_out<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.transfers(1).await;
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in stateguard::ddl::generate::<Logged>(DB::DIALECT).up() {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    drop(conn);
    let (proxy, through) = proxied(&db.pool).await;
    proxy.hold();
    let read = Logged::history(&through, 1_i64).within(DEADLINE);
    let read: Result<Vec<HistoryRow<Logged>>, Error> = guarded("history", read).await;
    assert_timed_out(&read.unwrap_err(), "transfers", "history", true);
    proxy.release();
}

/// A load gets no answer: `Timeout` naming `load`, outcome known (it only
/// reads), after the deadline set on the call.
async fn a_load_without_an_answer_times_out<DB: Proxied>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.transfers(1).await;
    let (proxy, through) = proxied(&db.pool).await;
    proxy.hold();
    let read = Logged::MACHINE.load(&through, 1_i64).within(DEADLINE);
    let read = guarded("load", read).await;
    assert_timed_out(&read.unwrap_err(), "transfers", "load", true);
    proxy.release();
}

/// SQLite has no network; the deadline bounds the wait for the write lock.
/// With another transaction holding it, the claim of `begin` (after its
/// read) and `receive` in a transaction end in `Timeout`, outcome unknown,
/// long before the connection's `busy_timeout`.
#[tokio::test]
async fn sqlite_front_doors_behind_a_held_write_lock_time_out() {
    let Some(db) = open!(Sqlite, "frontd_lock") else {
        return;
    };
    tables(&db).await;
    let holder = Tx::begin_with(&db.pool, "BEGIN IMMEDIATE").await.unwrap();
    let request = request("k1");
    let begun = idempotency::begin(&db.pool, &request, idempotency::DEFAULT_LEASE);
    let begun = guarded("idempotency::begin behind a lock", begun.within(DEADLINE)).await;
    assert_timed_out(&begun.unwrap_err(), STORE, "begin", false);
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let received = inbox::receive(&mut tx, "bank", "evt-1").within(DEADLINE);
    let received = guarded("inbox::receive behind a lock", received).await;
    assert_timed_out(&received.unwrap_err(), INBOX, "receive", false);
    drop(tx);
    holder.rollback().await.unwrap();
}
