//! Deadlines that cut a write off while it waits on a lock held elsewhere:
//! the `Error::Timeout` names the statement that was cut off and says the
//! outcome is open, since that statement may still commit. A session
//! killed while its recovery statement waits leaves the outcome open too.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Db, TestBackend, TransferStatus};
use sqlx::Pool;
use sqlx::pool::PoolConnection;
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::key::shape::One;
use stateguard::{Effect, Error, FinishError, StateMachine, Verdict, recover};

/// The `transfers` table with a lease long enough that no renewal runs
/// while a test waits on a lock.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Slow {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const DEADLINE: Duration = Duration::from_millis(300);

/// A lock on `transfers` that every write to it waits for, and that
/// `SKIP LOCKED` does not skip (it is the table's, not a row's); plain
/// reads go on.
trait Hold: TestBackend {
    /// The statements that take it, on a connection of its own.
    const TAKE: &'static [&'static str];
    /// The statement that lets it go.
    const RELEASE: &'static str;
}

impl Hold for sqlx::Postgres {
    // SHARE conflicts with the ROW EXCLUSIVE that an UPDATE takes first.
    const TAKE: &'static [&'static str] = &["BEGIN", "LOCK TABLE transfers IN SHARE MODE"];
    const RELEASE: &'static str = "ROLLBACK";
}

impl Hold for sqlx::MySql {
    const TAKE: &'static [&'static str] = &["LOCK TABLES transfers READ"];
    const RELEASE: &'static str = "UNLOCK TABLES";
}

impl Hold for sqlx::Sqlite {
    const TAKE: &'static [&'static str] = &["BEGIN IMMEDIATE"];
    const RELEASE: &'static str = "ROLLBACK";
}

/// The lock, held until [`Held::release`].
struct Held<DB: Hold>(PoolConnection<DB>);

impl<DB: Hold> Held<DB> {
    async fn take(pool: &Pool<DB>) -> Self {
        let mut conn = pool.acquire().await.unwrap();
        for statement in DB::TAKE {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        Held(conn)
    }

    async fn release(mut self) {
        DB::execute(&mut self.0, DB::RELEASE, &[]).await.unwrap();
    }
}

/// Whether `error` is a timeout of `transition` whose outcome is known,
/// after checking that `is_outcome_unknown` agrees.
#[track_caller]
fn timeout_of(error: &Error, transition: &str) -> bool {
    let Error::Timeout {
        transition: named,
        outcome_known,
        ..
    } = error
    else {
        panic!("expected a timeout, got {error:?}");
    };
    assert_eq!(*named, transition, "{error:?}");
    assert_eq!(error.is_outcome_unknown(), !outcome_known, "{error:?}");
    *outcome_known
}

/// `error` is a timeout of `transition` whose outcome is open.
#[track_caller]
fn assert_open_timeout(error: &Error, transition: &str) {
    assert!(!timeout_of(error, transition), "{error:?}");
    assert!(error.to_string().contains("may still commit"), "{error}");
}

/// A timeout of `transition` cut off before it wrote anything.
#[track_caller]
fn assert_known_timeout(error: &Error, transition: &str) {
    assert!(timeout_of(error, transition), "{error:?}");
}

// Each body below, as `sqlite::name`, `postgres::name` and `mysql::name`.
backend_tests! {
    impl Tests {
        "deadline_take_over" => a_takeover_cut_off_may_still_commit,
        "deadline_follow_up" => a_follow_up_cut_off_is_named_and_may_still_commit,
        "deadline_writes" => apply_claim_and_apply_many_cut_off_may_still_commit,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: Hold + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    /// Recovery's takeover waits on the lock and is cut off: on PostgreSQL the
    /// pass's one statement (the pass fails), on SQLite and MySQL each row's
    /// (the pass records it per row). Either may still renew the leases, so
    /// the outcome is open, and the error names the takeover, not the
    /// follow-up. No effect runs.
    async fn a_takeover_cut_off_may_still_commit(db: Db<DB>) {
        db.transfers(2).await;
        for id in 1..=2_i64 {
            let won = TransferStatus::start().apply(&db.pool, id).await.unwrap();
            drop(won.won().unwrap()); // each worker dies before its effect
        }
        db.backdate_leases().await;
        let held = Held::take(&db.pool).await;
        let effects = AtomicUsize::new(0);
        let pass = recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |_: Effect<_, i64>| async {
                effects.fetch_add(1, Ordering::SeqCst);
                Verdict::done()
            },
        )
        .within(DEADLINE)
        .await;
        let errors = match pass {
            Err(error) => vec![error],
            Ok(report) => {
                assert_eq!(report.claimed, 0, "{report:?}");
                report.errors
            }
        };
        assert!(!errors.is_empty());
        for error in &errors {
            assert_open_timeout(error, "take_over");
        }
        assert_eq!(effects.load(Ordering::SeqCst), 0);
        held.release().await;
    }

    /// The effect's verdict chooses `fail`, whose follow-up then waits on the
    /// lock and is cut off: the error names `fail` (not `done`'s `confirm`)
    /// and says the outcome is open.
    async fn a_follow_up_cut_off_is_named_and_may_still_commit(db: Db<DB>) {
        db.transfers(1).await;
        let won = Slow::start()
            .within(DEADLINE)
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let held = tokio::sync::Mutex::new(None);
        let error = won
            .finish(&db.pool, |_| async {
                // Taken during the effect: the follow-up is the first write
                // that meets it.
                *held.lock().await = Some(Held::take(&db.pool).await);
                Verdict::failed()
            })
            .await
            .unwrap_err();
        let FinishError::Unfinished(error) = error else {
            panic!("expected the follow-up cut off, got {error:?}");
        };
        assert_open_timeout(&error, "fail");
        held.into_inner().unwrap().release().await;
    }

    /// `apply`, `claim` and `apply_many` wait on the lock and are cut off, each
    /// with its statements possibly sent: the outcome is open, and the error
    /// names the transition.
    async fn apply_claim_and_apply_many_cut_off_may_still_commit(db: Db<DB>) {
        db.transfers(3).await;
        let held = Held::take(&db.pool).await;
        let start = Slow::start().within(DEADLINE);
        let error = start.apply(&db.pool, 1_i64).await.unwrap_err();
        assert_open_timeout(&error, "start");
        // SQLite's claim waits at its `BEGIN IMMEDIATE`, before anything is
        // written: the outcome is known there.
        let cut_off = |error: &Error| match DB::DIALECT {
            stateguard::ddl::Dialect::Sqlite => assert_known_timeout(error, "start"),
            _ => assert_open_timeout(error, "start"),
        };
        let error = start.claim::<_, i64>(&db.pool, 1).await.unwrap_err();
        cut_off(&error);
        let error = start.apply_many(&db.pool, &[2_i64, 3]).await.unwrap_err();
        assert_open_timeout(&error, "start");
        held.release().await;
    }
}

/// A session killed while recovery's takeover waits on the lock (PostgreSQL
/// `pg_terminate_backend`, MySQL `KILL`): the takeover may have committed
/// before the session ended, so the outcome is open.
async fn a_killed_takeover_leaves_the_outcome_open<DB: Hold>(
    db: Db<DB>,
    pid: &'static str,
    kill: &'static str,
) where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    db.transfers(1).await;
    let won = TransferStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    drop(won.won().unwrap());
    db.backdate_leases().await;
    let held = Held::take(&db.pool).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let (id,): (i64,) = DB::fetch_one(&mut conn, pid, &[]).await.unwrap();
    let pool = db.pool.clone();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut conn = pool.acquire().await.unwrap();
        DB::execute(&mut conn, kill, &[common::Bind::Int(id)])
            .await
            .unwrap();
    });
    let effects = AtomicUsize::new(0);
    let pass = recover(
        &mut conn,
        TransferStatus::Sending,
        10,
        |_: Effect<_, i64>| async {
            effects.fetch_add(1, Ordering::SeqCst);
            Verdict::done()
        },
    )
    .await;
    killer.await.unwrap();
    let error = match pass {
        Err(error) => error,
        Ok(mut report) => {
            assert!(!report.errors.is_empty(), "{report:?}");
            report.errors.remove(0)
        }
    };
    assert!(matches!(error, Error::Recovery { .. }), "{error:?}");
    assert!(error.is_outcome_unknown(), "{error:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 0);
    held.release().await;
}

#[tokio::test]
async fn postgres_a_killed_takeover_leaves_the_outcome_open() {
    let Some(db) = open!(Postgres, "deadline_killed") else {
        return;
    };
    a_killed_takeover_leaves_the_outcome_open(
        db,
        "SELECT pg_backend_pid()::int8",
        "SELECT pg_terminate_backend($1::int4)",
    )
    .await;
}

#[tokio::test]
async fn mysql_a_killed_takeover_leaves_the_outcome_open() {
    let Some(db) = open!(Mysql, "deadline_killed") else {
        return;
    };
    a_killed_takeover_leaves_the_outcome_open(
        db,
        "SELECT CAST(CONNECTION_ID() AS SIGNED)",
        "KILL ?",
    )
    .await;
}
