//! Side effects that only the winner runs: effect keys, effects after
//! commit, in-flight states and their recovery.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Db, TestBackend, TransferStatus};
use stateguard::{
    Committed, Effect, Error, Finished, Outcome, Runner, StateMachine, Uncommitted, Verdict, Won,
};

/// The same table as `TransferStatus`, with a lease no test outlives.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum LongLease {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "1h", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// Lets the 150 ms lease of `TransferStatus::Sending` run out.
async fn outlive_the_lease() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}

// Each body below, as `sqlite::name`, `postgres::name` and `mysql::name`.
backend_tests! {
    impl Tests {
        "effect_once" => only_the_winner_runs_the_effect_with_its_key (flavor = "multi_thread", worker_threads = 4),
        "effect_passes" => each_pass_through_a_state_gets_its_own_effect_key,
        "effect_rollback" => a_win_in_a_rolled_back_transaction_never_runs_its_effect,
        "effect_commit" => a_win_in_a_committed_transaction_runs_once_after_the_commit,
        "effect_commit_one" => one_staged_win_commits_with_its_transaction,
        "effect_finish" => finish_runs_the_effect_then_done_or_failed,
        "effect_superseded" => finish_reports_a_row_that_left_the_in_flight_state_meanwhile,
        "effect_recover_superseded" => recovery_names_the_rows_that_left_the_in_flight_state_meanwhile,
        "effect_recover" => recovery_redrives_an_expired_row_with_the_original_key,
        "effect_recover_race" => racing_recoveries_take_each_row_once (flavor = "multi_thread", worker_threads = 4),
        "effect_conn_in_tx" => a_connection_inside_a_transaction_is_refused,
        "effect_savepoint" => a_savepoint_cannot_pass_for_a_transaction,
        "effect_late_follow_up" => a_late_follow_up_does_not_finish_a_later_pass,
        "effect_follow_up_done" => a_follow_up_that_recovery_already_did_counts_as_done,
        "effect_not_in_flight" => in_flight_operations_need_an_in_flight_state,
        "effect_finish_refused" => finish_on_a_connection_inside_a_transaction_hands_the_win_back,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    // The bare connection under a transaction (`&mut *tx`), which the
    // refusal tests pass on purpose.
    for<'c> &'c mut DB::Connection: Runner<Database = DB, Commit = Committed>,
{
    async fn only_the_winner_runs_the_effect_with_its_key(db: Db<DB>) {
        db.transfers(1).await;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (pool, calls) = (db.pool.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                match TransferStatus::start().apply(&pool, 1_i64).await.unwrap() {
                    Outcome::Applied(won) => {
                        won.run(|effect| async move {
                            calls.lock().unwrap().push(effect.effect_key().to_owned());
                        })
                        .await
                    }
                    Outcome::AlreadyInState(TransferStatus::Sending) => {}
                    other => panic!("{other:?}"),
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // version 0 -> 1 on the win.
        assert_eq!(*calls.lock().unwrap(), ["transfers.status:1:sending:1"]);
        assert_eq!(db.transfer(1).await, ("sending".to_owned(), 1));
    }

    async fn each_pass_through_a_state_gets_its_own_effect_key(db: Db<DB>) {
        db.transfers(1).await;
        let first = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        let first = first.won().expect("first pass wins");
        assert_eq!(first.occurrence(), 1);
        assert!(
            TransferStatus::fail()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let second = TransferStatus::retry()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        let second = second.won().expect("second pass wins");
        // start (1), fail (2), retry (3): the version column counts them.
        assert_eq!(second.occurrence(), 3);
        assert_eq!(db.transfer(1).await, ("sending".to_owned(), 3));
        assert_eq!(first.effect_key(), "transfers.status:1:sending:1");
        assert_eq!(second.effect_key(), "transfers.status:1:sending:3");
    }

    async fn a_win_in_a_rolled_back_transaction_never_runs_its_effect(db: Db<DB>) {
        db.transfers(1).await;
        let effects = AtomicUsize::new(0);
        let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
        let staged: Won<TransferStatus, i64, Uncommitted> =
            match TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap() {
                Outcome::Applied(won) => won,
                other => panic!("{other:?}"),
            };
        // `staged.run(...)` does not compile: only `commit` leads to an
        // effect. Rolling back drops the only way there.
        tx.rollback().await.unwrap();
        drop(staged);
        assert_eq!(effects.load(Ordering::SeqCst), 0);
        assert_eq!(db.transfer(1).await, ("pending".to_owned(), 0));
        // The next attempt wins for real, and runs the effect once.
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        won.won()
            .expect("wins after the rollback")
            .run(|_| async { effects.fetch_add(1, Ordering::SeqCst) })
            .await;
        assert_eq!(effects.load(Ordering::SeqCst), 1);
    }

    async fn a_win_in_a_committed_transaction_runs_once_after_the_commit(db: Db<DB>) {
        db.transfers(2).await;
        let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
        let one = TransferStatus::start()
            .apply(&mut tx, 1_i64)
            .await
            .unwrap()
            .won();
        let two = TransferStatus::start()
            .apply(&mut tx, 2_i64)
            .await
            .unwrap()
            .won();
        let (one, two): (Option<Won<_, _, Committed>>, Option<Won<_, _, Committed>>) =
            tx.commit((one, two)).await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for won in [one.expect("row 1 won"), two.expect("row 2 won")] {
            let (pool, seen) = (db.pool.clone(), seen.clone());
            won.run(|effect| async move {
                // Another connection already sees the move: the effect
                // runs after the commit.
                let mut conn = pool.acquire().await.unwrap();
                let (status,): (String,) =
                    DB::fetch_one(&mut conn, "SELECT status FROM transfers WHERE id = 1", &[])
                        .await
                        .unwrap();
                seen.lock().unwrap().push((*effect.key(), status));
            })
            .await;
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [(1, "sending".to_owned()), (2, "sending".to_owned())]
        );
    }

    async fn one_staged_win_commits_with_its_transaction(db: Db<DB>) {
        db.transfers(1).await;
        let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
        let staged = TransferStatus::start().apply(&mut tx, 1_i64).await.unwrap();
        let won = staged.won().expect("wins").commit(tx).await.unwrap();
        assert_eq!(won.effect_key(), "transfers.status:1:sending:1");
        assert_eq!(db.transfer(1).await, ("sending".to_owned(), 1));
    }

    pub(crate) async fn finish_runs_the_effect_then_done_or_failed(db: Db<DB>) {
        db.transfers(5).await;
        let mut keys = Vec::new();
        for (id, verdict, expected) in [
            (
                1_i64,
                Verdict::done(),
                Finished::Done {
                    state: TransferStatus::Sent,
                    occurrence: 2,
                },
            ),
            (
                2,
                Verdict::failed(),
                Finished::Failed {
                    state: TransferStatus::Failed,
                    occurrence: 2,
                },
            ),
            (3, Verdict::RetryLater, Finished::RetryLater),
            // The follow-ups named, as a follow-up with values would be.
            (
                4,
                TransferStatus::confirm().into(),
                Finished::Done {
                    state: TransferStatus::Sent,
                    occurrence: 2,
                },
            ),
            (
                5,
                TransferStatus::fail().into(),
                Finished::Failed {
                    state: TransferStatus::Failed,
                    occurrence: 2,
                },
            ),
        ] {
            let won = TransferStatus::start()
                .apply(&db.pool, id)
                .await
                .unwrap()
                .won()
                .unwrap();
            let finished = won
                .finish(&db.pool, |effect| {
                    keys.push(effect.effect_key().to_owned());
                    async move { verdict }
                })
                .await
                .unwrap();
            assert_eq!(finished, expected);
        }
        assert_eq!(
            keys,
            [
                "transfers.status:1:sending:1",
                "transfers.status:2:sending:1",
                "transfers.status:3:sending:1",
                "transfers.status:4:sending:1",
                "transfers.status:5:sending:1"
            ]
        );
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
        assert_eq!(db.transfer(2).await, ("failed".to_owned(), 2));
        assert_eq!(db.transfer(3).await, ("sending".to_owned(), 1));
        assert_eq!(db.transfer(4).await, ("sent".to_owned(), 2));
        assert_eq!(db.transfer(5).await, ("failed".to_owned(), 2));
    }

    async fn finish_reports_a_row_that_left_the_in_flight_state_meanwhile(db: Db<DB>) {
        db.transfers(1).await;
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let pool = db.pool.clone();
        let finished = won
            .finish(&db.pool, |_| async move {
                // Cancelled while the bank call was in flight.
                let cancel = TransferStatus::cancel().apply(&pool, 1_i64).await.unwrap();
                assert!(cancel.is_applied());
                Verdict::done()
            })
            .await
            .unwrap();
        assert_eq!(
            finished,
            Finished::Superseded {
                current: TransferStatus::Cancelled
            }
        );
    }

    pub(crate) async fn recovery_names_the_rows_that_left_the_in_flight_state_meanwhile(
        db: Db<DB>,
    ) {
        db.transfers(2).await;
        for id in 1..=2 {
            let won = TransferStatus::start().apply(&db.pool, id).await.unwrap();
            drop(won); // the worker died before its effect
        }
        outlive_the_lease().await;
        let pool = db.pool.clone();
        let report = stateguard::recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |effect: Effect<_, i64>| {
                let pool = pool.clone();
                async move {
                    if *effect.key() == 2 {
                        // Cancelled while the bank call was in flight.
                        let cancel = TransferStatus::cancel().apply(&pool, 2_i64).await.unwrap();
                        assert!(cancel.is_applied());
                    }
                    Verdict::done()
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(report.done, 1);
        assert_eq!(report.superseded.len(), 1, "{report:?}");
        assert_eq!(
            report.superseded[0].effect_key,
            "transfers.status:2:sending:1"
        );
        assert_eq!(report.superseded[0].current, "cancelled");
    }

    async fn recovery_redrives_an_expired_row_with_the_original_key(db: Db<DB>) {
        db.transfers(2).await;
        // Row 1: the process died after the commit, before the effect.
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let original = won.effect_key();
        drop(won);
        // Row 2: a lease that has not run out is left alone.
        assert!(
            LongLease::start()
                .apply(&db.pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let early: Vec<Won<LongLease, i64>> =
            stateguard::claim_expired(&db.pool, LongLease::Sending, 10)
                .await
                .unwrap();
        assert!(early.is_empty(), "{early:?}");
        // (Row 2 shares the table: finish it so that the short lease
        // below does not see it.)
        assert!(
            LongLease::confirm()
                .apply(&db.pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );

        outlive_the_lease().await;
        let keys = Mutex::new(Vec::new());
        let report = stateguard::recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |effect: Effect<_, i64>| {
                keys.lock().unwrap().push(effect.effect_key().to_owned());
                async { Verdict::done() }
            },
        )
        .await
        .unwrap();
        assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
        assert_eq!(*keys.lock().unwrap(), [original]);
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
        // Nothing is left to recover.
        let again = stateguard::recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |_: Effect<_, i64>| async { Verdict::done() },
        )
        .await
        .unwrap();
        assert_eq!(again.claimed, 0);
    }

    async fn racing_recoveries_take_each_row_once(db: Db<DB>) {
        const ROWS: i64 = 40;
        db.transfers(ROWS).await;
        for id in 1..=ROWS {
            drop(LongLease::start().apply(&db.pool, id).await.unwrap());
        }
        // Expired by an hour, and then held for an hour by whoever takes them
        // over: however slow the machine, no recovery takes a row a second time
        // because its holder stalled past its lease.
        db.backdate_leases().await;
        let effects = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (pool, effects) = (db.pool.clone(), effects.clone());
            tasks.push(tokio::spawn(async move {
                stateguard::recover(
                    &pool,
                    LongLease::Sending,
                    ROWS as u32,
                    |_: Effect<_, i64>| {
                        effects.fetch_add(1, Ordering::SeqCst);
                        async { Verdict::done() }
                    },
                )
                .await
                .unwrap()
            }));
        }
        let mut claimed = 0;
        for task in tasks {
            claimed += task.await.unwrap().claimed;
        }
        assert_eq!(claimed, ROWS as usize);
        assert_eq!(effects.load(Ordering::SeqCst), ROWS as usize);
        for id in 1..=ROWS {
            assert_eq!(db.transfer(id).await, ("sent".to_owned(), 2), "row {id}");
        }
    }

    async fn a_connection_inside_a_transaction_is_refused(db: Db<DB>) {
        db.transfers(1).await;
        let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
        // `&mut *tx` is the connection under the transaction: a win on
        // it would look committed before the commit.
        let error = TransferStatus::start()
            .apply(&mut *tx, 1_i64)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Misuse(stateguard::Misuse::ConnectionInTransaction)
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("&mut tx"), "{error}");
        tx.rollback().await.unwrap();
        assert_eq!(db.transfer(1).await, ("pending".to_owned(), 0));
    }

    async fn a_savepoint_cannot_pass_for_a_transaction(db: Db<DB>) {
        db.transfers(1).await;
        let mut tx = db.pool.begin().await.unwrap();
        let savepoint = sqlx::Connection::begin(&mut *tx).await.unwrap();
        // Committing a savepoint commits nothing yet: it cannot be
        // taken for a transaction whose commit hands out wins.
        let error = stateguard::Tx::new(savepoint).unwrap_err();
        assert!(
            matches!(
                error,
                Error::Misuse(stateguard::Misuse::NestedTransaction { depth: 2 })
            ),
            "{error:?}"
        );
        tx.rollback().await.unwrap();
        assert_eq!(db.transfer(1).await, ("pending".to_owned(), 0));
    }

    async fn a_late_follow_up_does_not_finish_a_later_pass(db: Db<DB>) {
        db.transfers(1).await;
        // Worker 1 wins the first pass, and its bank call hangs.
        let first = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let second = Mutex::new(None);
        let late = first
            .finish(&db.pool, |_| async {
                // Meanwhile the pass is failed and retried: a second pass.
                assert!(
                    TransferStatus::fail()
                        .apply(&db.pool, 1_i64)
                        .await
                        .unwrap()
                        .is_applied()
                );
                let won = TransferStatus::retry()
                    .apply(&db.pool, 1_i64)
                    .await
                    .unwrap()
                    .won()
                    .unwrap();
                assert_eq!(won.occurrence(), 3);
                *second.lock().unwrap() = Some(won);
                // Worker 1's call finally fails: that must not fail
                // pass two.
                Verdict::failed()
            })
            .await
            .unwrap();
        let second = second.lock().unwrap().take().expect("pass two won");
        assert_eq!(
            late,
            Finished::Superseded {
                current: TransferStatus::Sending
            }
        );
        assert_eq!(db.transfer(1).await, ("sending".to_owned(), 3));
        // Pass two finishes normally.
        let done = second
            .finish(&db.pool, |_| async { Verdict::done() })
            .await
            .unwrap();
        assert!(
            matches!(
                done,
                Finished::Done {
                    state: TransferStatus::Sent,
                    ..
                }
            ),
            "{done:?}"
        );
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 4));
    }

    async fn a_follow_up_that_recovery_already_did_counts_as_done(db: Db<DB>) {
        db.transfers(1).await;
        let slow = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let finished = slow
            .finish(&db.pool, |_| async {
                // The slow worker stalls past its lease; recovery takes
                // the row over and finishes it.
                db.backdate_leases().await;
                let report = stateguard::recover(
                    &db.pool,
                    TransferStatus::Sending,
                    10,
                    |_: Effect<_, i64>| async { Verdict::done() },
                )
                .await
                .unwrap();
                assert_eq!(report.done, 1, "{report:?}");
                // The slow worker's call succeeds too (same key: the
                // bank deduplicated it); its follow-up finds its own
                // pass finished.
                Verdict::done()
            })
            .await
            .unwrap();
        assert!(
            matches!(
                finished,
                Finished::Done {
                    state: TransferStatus::Sent,
                    ..
                }
            ),
            "{finished:?}"
        );
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
    }

    async fn in_flight_operations_need_an_in_flight_state(db: Db<DB>) {
        db.transfers(1).await;
        let error = stateguard::claim_expired::<_, i64, _>(&db.pool, TransferStatus::Pending, 10)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Misuse(stateguard::Misuse::NotInFlight {
                    state: "pending",
                    ..
                })
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("in_flight"), "{error}");
        // Finishing a win into a state that is not in flight is refused
        // before the effect runs, and the win comes back.
        assert!(
            TransferStatus::start()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let won = TransferStatus::fail()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let ran = AtomicUsize::new(0);
        let refused = won
            .finish(&db.pool, |_| async {
                ran.fetch_add(1, Ordering::SeqCst);
                Verdict::done()
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                refused.error(),
                Error::Misuse(stateguard::Misuse::NotInFlight {
                    state: "failed",
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        let won = refused.into_won().expect("the win is handed back");
        assert_eq!(won.effect_key(), "transfers.status:1:failed:2");
        won.run(|_| async { ran.fetch_add(1, Ordering::SeqCst) })
            .await;
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    async fn finish_on_a_connection_inside_a_transaction_hands_the_win_back(db: Db<DB>) {
        db.transfers(1).await;
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let mut tx = db.pool.begin().await.unwrap();
        let ran = AtomicUsize::new(0);
        let refused = won
            .finish(&mut *tx, |_| async {
                ran.fetch_add(1, Ordering::SeqCst);
                Verdict::done()
            })
            .await
            .unwrap_err();
        assert!(
            matches!(
                refused.error(),
                Error::Misuse(stateguard::Misuse::ConnectionInTransaction)
            ),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("handed back"), "{refused}");
        tx.rollback().await.unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        // The win was not lost: it finishes on the pool.
        let won = refused.into_won().expect("the win is handed back");
        let finished = won
            .finish(&db.pool, |_| async {
                ran.fetch_add(1, Ordering::SeqCst);
                Verdict::done()
            })
            .await
            .unwrap();
        assert!(
            matches!(
                finished,
                Finished::Done {
                    state: TransferStatus::Sent,
                    ..
                }
            ),
            "{finished:?}"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
    }
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "accounts", column = "status", key = "name")]
enum AccountStatus {
    #[state(initial)]
    #[transition(open -> Open)]
    New,
    Open,
}

/// Effect keys fit an `Idempotency-Key` header however long the row key.
#[tokio::test]
async fn effect_keys_stay_within_255_characters() {
    let Some(db) = open!(Sqlite, "effect_key_length") else {
        return;
    };
    sqlx::query("CREATE TABLE accounts (name TEXT PRIMARY KEY, status TEXT NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let short = "alice".to_owned();
    let long_a = format!("{}a", "x".repeat(600));
    let long_b = format!("{}b", "x".repeat(600));
    let mut keys = Vec::new();
    for name in [&short, &long_a, &long_b] {
        sqlx::query("INSERT INTO accounts (name, status) VALUES (?1, 'new')")
            .bind(name)
            .execute(&db.pool)
            .await
            .unwrap();
        let won = AccountStatus::open()
            .apply(&db.pool, name.clone())
            .await
            .unwrap();
        keys.push(won.won().expect("wins").effect_key());
    }
    assert_eq!(keys[0], "accounts.status:alice:open:0");
    for key in &keys {
        assert!(key.len() <= 255, "{} characters", key.len());
    }
    assert_ne!(
        keys[1], keys[2],
        "long keys that differ only at the end must not collide"
    );
    assert!(keys[1].starts_with("accounts.status:xxxx"), "{}", keys[1]);
}

/// Long effect keys end in SHA-256, which an attacker who picks row keys
/// cannot collide: two row keys whose effect keys collided under the 64-bit
/// FNV-1a this used to end in (found by a distinguished-point search) get
/// two effect keys, and the shortened form is pinned to values computed
/// apart from the library (`printf '%s' "$prefix" | sha256sum`, where
/// `$prefix` is the effect key up to its occurrence).
#[tokio::test]
async fn long_effect_keys_end_in_sha256() {
    let Some(db) = open!(Sqlite, "effect_key_sha256") else {
        return;
    };
    sqlx::query("CREATE TABLE accounts (name TEXT PRIMARY KEY, status TEXT NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let pad = "x".repeat(232);
    let (a, b) = (
        format!("{pad}9b3a436696edd730"),
        format!("{pad}58bd39d6b85df1ba"),
    );
    // The pair is a real FNV-1a 64 collision of the whole key text, so the
    // old keys (the same 238-character prefix, `~`, the hash) were equal.
    let fnv1a64 = |text: &str| {
        text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    assert_eq!(
        fnv1a64(&format!("accounts.status:{a}:open:0")),
        fnv1a64(&format!("accounts.status:{b}:open:0")),
    );
    let mut keys = Vec::new();
    for name in [&a, &b] {
        sqlx::query("INSERT INTO accounts (name, status) VALUES (?1, 'new')")
            .bind(name)
            .execute(&db.pool)
            .await
            .unwrap();
        let won = AccountStatus::open()
            .apply(&db.pool, name.clone())
            .await
            .unwrap();
        keys.push(won.won().expect("wins").effect_key());
    }
    // The first 169 characters of `accounts.status:{name}:open:`, `~`,
    // the SHA-256 of that whole prefix, `:` and the occurrence.
    let prefix = format!("accounts.status:{}", "x".repeat(153));
    assert_eq!(
        keys[0],
        format!("{prefix}~01db7224b07770d29955d678620d35f38730d865d05a23addd83d7d634174fd8:0")
    );
    assert_eq!(
        keys[1],
        format!("{prefix}~76af82630fcc38c66ff33a8c56673f00fdfc11b10176d2a65ec09d50eca071a3:0")
    );
    assert_ne!(keys[0], keys[1]);
    assert_eq!(keys[0].len(), 236);
}

/// A row put into an in-flight state without a transition has no `since`
/// stamp; recovery must still find it rather than leave it in flight for
/// ever.
#[tokio::test]
async fn recovery_finds_in_flight_rows_without_a_stamp() {
    let Some(db) = open!(Sqlite, "effect_null_since") else {
        return;
    };
    db.transfers(1).await;
    sqlx::query("UPDATE transfers SET status = 'sending', version = 5 WHERE id = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let keys = Mutex::new(Vec::new());
    let report = stateguard::recover(
        &db.pool,
        TransferStatus::Sending,
        10,
        |effect: Effect<_, i64>| {
            keys.lock().unwrap().push(effect.effect_key().to_owned());
            async { Verdict::done() }
        },
    )
    .await
    .unwrap();
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(*keys.lock().unwrap(), ["transfers.status:1:sending:5"]);
    assert_eq!(db.transfer(1).await, ("sent".to_owned(), 6));
}

/// A version column added without a default holds NULL: it counts as 0,
/// the win still gets its occurrence, and recovery still finds the row.
#[tokio::test]
async fn a_null_version_counts_as_zero() {
    let Some(db) = open!(Sqlite, "effect_null_version") else {
        return;
    };
    sqlx::query(
        "CREATE TABLE transfers (
            id INTEGER PRIMARY KEY, status TEXT NOT NULL, version INTEGER,
            sending_since TEXT, sent_at TEXT
        )",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO transfers (id, status) VALUES (1, 'pending'), (2, 'sending')")
        .execute(&db.pool)
        .await
        .unwrap();
    let won = TransferStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap()
        .won()
        .unwrap();
    assert_eq!(won.effect_key(), "transfers.status:1:sending:1");
    // Row 2 is in flight with neither a version nor a stamp.
    let keys = Mutex::new(Vec::new());
    let report = stateguard::recover(
        &db.pool,
        TransferStatus::Sending,
        1,
        |effect: Effect<_, i64>| {
            keys.lock().unwrap().push(effect.effect_key().to_owned());
            async { Verdict::done() }
        },
    )
    .await
    .unwrap();
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    assert_eq!(*keys.lock().unwrap(), ["transfers.status:2:sending:0"]);
    assert_eq!(db.transfer(2).await, ("sent".to_owned(), 1));
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "tickets", column = "status", key = "id")]
enum TicketStatus {
    #[state(initial)]
    #[transition(close -> Closed)]
    Open,
    Closed,
}

/// A row whose status is NULL has no state: a clear error, not a guess.
#[tokio::test]
async fn a_null_status_is_an_error_of_its_own() {
    let Some(db) = open!(Sqlite, "null_status") else {
        return;
    };
    sqlx::query("CREATE TABLE tickets (id INTEGER PRIMARY KEY, status TEXT)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO tickets (id, status) VALUES (1, NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let error = TicketStatus::close()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::NullStatus {
                table: "tickets",
                column: "status"
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("is NULL"), "{error}");
}
