//! Leases on in-flight rows: a worker keeps its lease while its effect
//! runs, and a worker whose lease was taken over cannot move the row.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Db, TestBackend, TransferStatus};
use stateguard::{Effect, Error, FinishError, Finished, Verdict, claim_expired, recover};

/// The `transfers` table with a 600 ms lease, renewed every 200 ms: only a
/// stall of 400 ms would let recovery in, however loaded the machine.
#[derive(stateguard::StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Renewed {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "600ms", since = "sending_since", done = confirm, failed = fail))]
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
        "lease_skip" => a_worker_taken_over_before_its_effect_skips_it,
        "lease_lost" => a_worker_taken_over_during_its_effect_cannot_move_the_row,
        "lease_renewed" => a_long_effect_keeps_its_lease,
        "lease_deadline" => finish_keeps_its_deadline_and_leaves_the_row_to_recovery,
        "lease_waiting" => a_row_that_waited_past_its_lease_in_a_pass_is_left_to_its_taker,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    /// A recovery pass whose first effect runs long: the rows waiting behind it
    /// (taken over with the pass on PostgreSQL, listed on SQLite and MySQL) see
    /// their leases run out, and a second pass takes them over and finishes
    /// them. When the first pass reaches them it finds their leases gone and
    /// counts them lost: every effect key runs once.
    async fn a_row_that_waited_past_its_lease_in_a_pass_is_left_to_its_taker(db: Db<DB>) {
        db.transfers(3).await;
        for id in 1..=3_i64 {
            let won = TransferStatus::start()
                .apply(&db.pool, id)
                .await
                .unwrap()
                .won()
                .unwrap();
            drop(won); // each worker dies before its effect
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        outlive_the_lease().await;
        let seen = std::sync::Mutex::new(Vec::<String>::new());
        let slow_first = AtomicUsize::new(0);
        let first_pass = recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |effect: Effect<_, i64>| {
                seen.lock().unwrap().push(effect.effect_key().to_owned());
                let first = slow_first.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if first {
                        // Long enough for the others' leases to run out twice over.
                        tokio::time::sleep(Duration::from_millis(700)).await;
                    }
                    Verdict::done()
                }
            },
        );
        let second_pass = async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            recover(
                &db.pool,
                TransferStatus::Sending,
                10,
                |effect: Effect<_, i64>| {
                    seen.lock().unwrap().push(effect.effect_key().to_owned());
                    async { Verdict::done() }
                },
            )
            .await
        };
        let (first, second) = tokio::join!(first_pass, second_pass);
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_eq!((first.done, first.lost), (1, 2), "{first:?}");
        assert_eq!((second.claimed, second.done), (2, 2), "{second:?}");
        let mut keys = seen.into_inner().unwrap();
        keys.sort();
        let before = keys.len();
        keys.dedup();
        assert_eq!(
            (before, keys.len()),
            (3, 3),
            "each effect key once: {keys:?}"
        );
        for id in 1..=3 {
            assert_eq!(db.transfer(id).await.0, "sent");
        }
    }

    /// A worker that stalled past its lease before it called `finish`
    /// finds the row taken over: its effect does not run, and the new
    /// holder finishes the row.
    async fn a_worker_taken_over_before_its_effect_skips_it(db: Db<DB>) {
        db.transfers(1).await;
        let stalled = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        outlive_the_lease().await;
        let mut taken = claim_expired::<_, i64, _>(&db.pool, TransferStatus::Sending, 10)
            .await
            .unwrap();
        assert_eq!(taken.len(), 1);
        let effects = AtomicUsize::new(0);
        let late = stalled
            .finish(&db.pool, |_| async {
                effects.fetch_add(1, Ordering::SeqCst);
                Verdict::failed()
            })
            .await
            .unwrap();
        assert_eq!(
            late,
            Finished::Skipped {
                current: Some(TransferStatus::Sending)
            }
        );
        assert_eq!(effects.load(Ordering::SeqCst), 0);
        let holder = taken.pop().unwrap();
        let finished = holder
            .finish(&db.pool, |_| async {
                effects.fetch_add(1, Ordering::SeqCst);
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
        assert_eq!(effects.load(Ordering::SeqCst), 1);
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
    }

    /// The lease is taken over while the effect runs (the worker
    /// stalled: here its lease is backdated and claimed by another
    /// worker). Its verdict cannot move the row; the new holder's can.
    async fn a_worker_taken_over_during_its_effect_cannot_move_the_row(db: Db<DB>) {
        db.transfers(1).await;
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let late = won
            .finish(&db.pool, |_| async {
                db.backdate_leases().await;
                let taken = claim_expired::<_, i64, _>(&db.pool, TransferStatus::Sending, 10)
                    .await
                    .unwrap();
                assert_eq!(taken.len(), 1, "the backdated lease is taken over");
                drop(taken);
                // This worker's verdict: it must not move the row.
                Verdict::failed()
            })
            .await
            .unwrap();
        assert_eq!(
            late,
            Finished::LeaseLost {
                current: TransferStatus::Sending
            }
        );
        assert_eq!(db.transfer(1).await, ("sending".to_owned(), 1));
    }

    /// An effect four times longer than the lease keeps its row: the
    /// lease is renewed while it runs, so recovery takes nothing over.
    async fn a_long_effect_keeps_its_lease(db: Db<DB>) {
        db.transfers(1).await;
        let won = Renewed::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let effects = AtomicUsize::new(0);
        let finish = won.finish(&db.pool, |_| async {
            effects.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2400)).await;
            Verdict::done()
        });
        let sweep = async {
            let mut claimed = 0;
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let report = recover(&db.pool, Renewed::Sending, 10, |_: Effect<_, i64>| async {
                    effects.fetch_add(1, Ordering::SeqCst);
                    Verdict::done()
                })
                .await
                .unwrap();
                claimed += report.claimed;
            }
            claimed
        };
        let (finished, claimed) = tokio::join!(finish, sweep);
        let finished = finished.unwrap();
        assert!(
            matches!(
                finished,
                Finished::Done {
                    state: Renewed::Sent,
                    ..
                }
            ),
            "{finished:?}"
        );
        assert_eq!(
            claimed, 0,
            "recovery took over a row whose worker was alive"
        );
        assert_eq!(effects.load(Ordering::SeqCst), 1);
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
    }

    /// An effect that outlasts the win's deadline is cut off: the
    /// error says the outcome is unknown, the row stays in flight, and
    /// recovery runs the effect again under the same effect key.
    async fn finish_keeps_its_deadline_and_leaves_the_row_to_recovery(db: Db<DB>) {
        db.transfers(1).await;
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap()
            .within(Duration::from_millis(300));
        assert_eq!(won.deadline(), Duration::from_millis(300));
        let key = won.effect_key();
        let error = won
            .finish(&db.pool, |_| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Verdict::done()
            })
            .await
            .unwrap_err();
        let FinishError::Unfinished(Error::Timeout { outcome_known, .. }) = &error else {
            panic!("expected a timeout, got {error:?}");
        };
        assert!(!outcome_known);
        assert!(error.error().is_outcome_unknown());
        assert_eq!(db.transfer(1).await, ("sending".to_owned(), 1));
        outlive_the_lease().await;
        let seen = std::sync::Mutex::new(Vec::new());
        let report = recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |effect: Effect<_, i64>| {
                seen.lock().unwrap().push(effect.effect_key().to_owned());
                async { Verdict::done() }
            },
        )
        .await
        .unwrap();
        assert_eq!(report.done, 1, "{report:?}");
        assert_eq!(*seen.lock().unwrap(), [key]);
    }
}

/// A lock held elsewhere keeps `finish` from renewing a lease a third of
/// whose length has gone by before the effect: the deadline refuses the
/// call and hands the win back, and the effect has not run; the renewal
/// may still commit, so the outcome is open. A recovery pass takes its
/// rows over with `SKIP LOCKED`: it skips the locked row, without waiting or an error, and
/// finishes the other; the locked row waits for a later pass.
#[tokio::test]
async fn postgres_a_held_lock_times_out_finish_and_recovery_skips_it() {
    let Some(db) = open!(Postgres, "lease_locked") else {
        return;
    };
    db.transfers(2).await;
    let won = TransferStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap()
        .won()
        .unwrap()
        .within(Duration::from_millis(300));
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM transfers WHERE id = 1 FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    // A third of the lease goes by, so `finish` renews it before the
    // effect (a lease stamped just now it would not).
    tokio::time::sleep(Duration::from_millis(60)).await;
    let effects = AtomicUsize::new(0);
    let refused = won
        .finish(&db.pool, |_| async {
            effects.fetch_add(1, Ordering::SeqCst);
            Verdict::done()
        })
        .await
        .unwrap_err();
    // The renewal was cut off, and may still commit: the outcome is open.
    assert!(
        matches!(
            refused.error(),
            Error::Timeout {
                transition: "renew",
                outcome_known: false,
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(refused.error().is_outcome_unknown());
    assert_eq!(effects.load(Ordering::SeqCst), 0);
    let won = refused.into_won().expect("the win is handed back");
    // Row 2 expires too; row 1 stays locked.
    assert!(
        TransferStatus::start()
            .apply(&db.pool, 2_i64)
            .await
            .unwrap()
            .is_applied()
    );
    outlive_the_lease().await;
    let report = stateguard::recover(
        &db.pool,
        TransferStatus::Sending,
        10,
        |_: Effect<_, i64>| async {
            effects.fetch_add(1, Ordering::SeqCst);
            Verdict::done()
        },
    )
    .within(Duration::from_millis(300))
    .await
    .unwrap();
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 1);
    holder.rollback().await.unwrap();
    drop(won);
    // Unlocked, the row is the next pass's once its lease has run out (the
    // renewal cut off above may still have gone through at the unlock).
    outlive_the_lease().await;
    let report = stateguard::recover(
        &db.pool,
        TransferStatus::Sending,
        10,
        |_: Effect<_, i64>| {
            effects.fetch_add(1, Ordering::SeqCst);
            async { Verdict::done() }
        },
    )
    .await
    .unwrap();
    assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 2);
}
