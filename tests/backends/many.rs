//! Batches: `transition.apply_many(pool, &keys)` gives one outcome per key,
//! in input order, with at most one win per row.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::Arc;

use common::{Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::{Error, Outcome, StateMachine};
use tokio::sync::Barrier;

/// The `transfers` table: `cancel` from `pending` or `sending`.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Transfer {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled, supersedes_effect)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// The `payouts` table, where only even ids may be picked.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
enum Picked {
    #[state(initial)]
    #[transition(pick -> Sending, guard = "id % 2 = 0", set(attempts = "attempts + 1"))]
    Pending,
    Sending,
}

backend_tests! {
    impl Tests {
        "many_mixed" => every_key_gets_its_outcome_in_input_order,
        "many_race" => racing_batches_win_each_row_once (flavor = "multi_thread", worker_threads = 4),
        "many_large" => a_hundred_thousand_keys_in_chunks (flavor = "multi_thread", worker_threads = 2),
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, stateguard::key::shape::One>,
{
    /// Keys in a source state, in the target, in another state, missing and
    /// repeated, in one batch; a guard refuses in a batch as it does alone.
    pub(crate) async fn every_key_gets_its_outcome_in_input_order(db: Db<DB>) {
        db.transfers(6).await;
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in [
            "UPDATE transfers SET status = 'sent' WHERE id = 3",
            "UPDATE transfers SET status = 'cancelled' WHERE id = 4",
            "UPDATE transfers SET status = 'failed' WHERE id = 5",
        ] {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        drop(conn);
        // Transfer 6 is in flight: cancel moves it too.
        assert!(
            Transfer::start()
                .apply(&db.pool, 6_i64)
                .await
                .unwrap()
                .is_applied()
        );

        let keys = [2_i64, 99, 1, 3, 4, 2, 5, 1, 6];
        let outcomes = Transfer::cancel()
            .apply_many(&db.pool, &keys)
            .await
            .unwrap();
        assert_eq!(outcomes.len(), keys.len());
        let mut won = Vec::new();
        for (key, outcome) in keys.iter().zip(outcomes) {
            match outcome {
                Outcome::Applied(w) => {
                    assert_eq!(w.key(), key);
                    won.push((*key, w.occurrence(), w.effect_key()));
                }
                other => {
                    let expected = match key {
                        99 => Outcome::NotFound,
                        3 => Outcome::Conflict {
                            current: Transfer::Sent,
                        },
                        5 => Outcome::Conflict {
                            current: Transfer::Failed,
                        },
                        // Already cancelled, or cancelled by this batch's first
                        // occurrence of the key.
                        _ => Outcome::AlreadyInState(Transfer::Cancelled),
                    };
                    assert_eq!(other, expected, "key {key}");
                }
            }
        }
        assert_eq!(
            won,
            [
                (2, 1, "transfers.status:2:cancelled:1".to_owned()),
                (1, 1, "transfers.status:1:cancelled:1".to_owned()),
                (6, 2, "transfers.status:6:cancelled:2".to_owned()),
            ]
        );
        for (id, status) in [
            (1, "cancelled"),
            (2, "cancelled"),
            (3, "sent"),
            (6, "cancelled"),
        ] {
            assert_eq!(db.transfer(id).await.0, status, "transfer {id}");
        }

        // An empty batch is an empty answer.
        let none: [i64; 0] = [];
        assert!(
            Transfer::cancel()
                .apply_many(&db.pool, &none)
                .await
                .unwrap()
                .is_empty()
        );
        // An occurrence names one row.
        assert!(matches!(
            Transfer::cancel()
                .expecting(1)
                .apply_many(&db.pool, &keys)
                .await,
            Err(Error::Misuse(stateguard::Misuse::ExpectingMany { .. }))
        ));

        // A guard refuses odd ids, with their real state.
        db.seed(6).await;
        let outcomes = Picked::pick()
            .apply_many(&db.pool, &[1_i64, 2, 3, 4, 4])
            .await
            .unwrap();
        let applied: Vec<bool> = outcomes.iter().map(Outcome::is_applied).collect();
        assert_eq!(applied, [false, true, false, true, false]);
        assert_eq!(
            outcomes[0],
            Outcome::Refused {
                current: Picked::Pending
            }
        );
        assert_eq!(outcomes[4], Outcome::AlreadyInState(Picked::Sending));
        // `set` ran once per row moved.
        assert_eq!(db.total_attempts().await, 2);
    }

    /// 8 tasks apply `start` to the same 2,000 keys, each in its own order:
    /// one win per row overall, every other outcome `AlreadyInState`, and no
    /// deadlock reaches a caller.
    pub(crate) async fn racing_batches_win_each_row_once(db: Db<DB>) {
        db.transfers(RACE_ROWS).await;
        let barrier = Arc::new(Barrier::new(RACERS));
        let mut tasks = Vec::new();
        for racer in 0..RACERS {
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            // A different order per racer: a stride through the keys.
            let stride = [1, 7, 13, 17, 19, 23, 29, 31][racer];
            let keys: Vec<i64> = (0..RACE_ROWS)
                .map(|i| (i * stride) % RACE_ROWS + 1)
                .collect();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let outcomes = Transfer::start().apply_many(&pool, &keys).await.unwrap();
                (keys, outcomes)
            }));
        }
        let mut wins = vec![0; RACE_ROWS as usize + 1];
        for task in tasks {
            let (keys, outcomes) = task.await.unwrap();
            assert_eq!(outcomes.len(), keys.len());
            for (key, outcome) in keys.iter().zip(outcomes) {
                match outcome {
                    Outcome::Applied(won) => {
                        assert_eq!(won.key(), key);
                        wins[*key as usize] += 1;
                    }
                    Outcome::AlreadyInState(Transfer::Sending) => {}
                    other => panic!("key {key}: {other:?}"),
                }
            }
        }
        assert!(wins[1..].iter().all(|&w| w == 1), "{wins:?}");
    }

    /// 100,000 keys, split into chunks; every row moves once.
    async fn a_hundred_thousand_keys_in_chunks(db: Db<DB>) {
        db.transfers(LARGE).await;
        let keys: Vec<i64> = (1..=LARGE).rev().collect();
        let outcomes = Transfer::cancel()
            .apply_many(&db.pool, &keys)
            .await
            .unwrap();
        assert_eq!(outcomes.len(), keys.len());
        assert!(outcomes.iter().all(Outcome::is_applied));
        for id in [1, LARGE / 2, LARGE] {
            assert_eq!(db.transfer(id).await, ("cancelled".to_owned(), 1));
        }
    }
}

const RACE_ROWS: i64 = 2_000;
const RACERS: usize = 8;

const LARGE: i64 = 100_000;
