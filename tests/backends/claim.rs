//! Work queues: `transition.claim(pool, n)` moves up to `n` rows and hands
//! out one committed win per row; concurrent claimers never get the same
//! row.

use crate::common;
use crate::common::KeyColumn;

use std::collections::HashSet;
use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::{Batched, Key, ManyKeys};
use stateguard::key::shape::One;
use stateguard::{Effect, Error, Finished, StateMachine, recover};

/// The `transfers` table as a queue: `start` claims a transfer into an
/// in-flight state.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Queue {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// The `payouts` table, claimed by fewest attempts first, and only even
/// ids.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", order = "attempts")]
enum Picked {
    #[state(initial)]
    #[transition(pick -> Sending, guard = "id % 2 = 0", set(attempts = "attempts + 1"))]
    Pending,
    Sending,
}

/// The `transfers` table, where a transfer that waits in `sending` for
/// too long is failed by a sweep.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Sweep {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(since = "sending_since", timeout = "50m")]
    #[transition(expire -> Failed)]
    Sending,
    Failed,
}

const ROWS: i64 = 5_000;
const CLAIMERS: usize = 8;
const BATCH: u32 = 50;

backend_tests! {
    impl Tests {
        "claim_drain" => claimers_drain_the_queue_exactly_once (flavor = "multi_thread", worker_threads = 4),
        "claim_order" => claims_follow_the_order_and_the_guard,
        "claim_in_flight" => a_claim_stamps_leases_that_finish_and_recovery_honour,
        "claim_sweep" => a_sweep_moves_rows_that_waited_too_long,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
    String: Key<DB>,
{
    /// 8 claimers take batches of 50 until the queue is empty: every row is
    /// claimed exactly once.
    pub(crate) async fn claimers_drain_the_queue_exactly_once(db: Db<DB>) {
        db.transfers(ROWS).await;
        let mut tasks = Vec::new();
        for _ in 0..CLAIMERS {
            let pool = db.pool.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine: Vec<(i64, String)> = Vec::new();
                loop {
                    let batch = Queue::start().claim::<_, i64>(&pool, BATCH).await.unwrap();
                    if batch.is_empty() {
                        return mine;
                    }
                    assert!(batch.len() <= BATCH as usize);
                    // Each batch comes oldest first.
                    assert!(batch.windows(2).all(|w| w[0].key() < w[1].key()));
                    for won in batch {
                        assert_eq!(won.state(), Queue::Sending);
                        assert_eq!(won.occurrence(), 1);
                        mine.push((*won.key(), won.effect_key()));
                    }
                }
            }));
        }
        let mut keys = HashSet::new();
        let mut claimed = 0;
        for task in tasks {
            for (key, effect_key) in task.await.unwrap() {
                assert_eq!(effect_key, format!("transfers.status:{key}:sending:1"));
                assert!(keys.insert(key), "transfer {key} claimed twice");
                claimed += 1;
            }
        }
        assert_eq!(claimed, ROWS);
        assert_eq!(keys, (1..=ROWS).collect::<HashSet<_>>());
        for id in [1, ROWS / 2, ROWS] {
            assert_eq!(db.transfer(id).await, ("sending".to_owned(), 1));
        }
    }

    /// Rows come in the machine's `order`, the key breaking ties; a guard
    /// holds for every row claimed, and rows that fail it stay.
    async fn claims_follow_the_order_and_the_guard(db: Db<DB>) {
        db.seed(10).await;
        let mut conn = db.pool.acquire().await.unwrap();
        // Row 10 has the fewest attempts, row 1 the most; rows 3 and 4 tie.
        DB::execute(&mut conn, "UPDATE payouts SET attempts = 100 - id", &[])
            .await
            .unwrap();
        DB::execute(
            &mut conn,
            "UPDATE payouts SET attempts = 0 WHERE id IN (3, 4)",
            &[],
        )
        .await
        .unwrap();
        drop(conn);
        let keys = |wins: Vec<stateguard::Won<Picked, i64>>| -> Vec<i64> {
            wins.iter().map(|w| *w.key()).collect()
        };
        let first = Picked::pick().claim::<_, i64>(&db.pool, 3).await.unwrap();
        assert_eq!(keys(first), [4, 10, 8]);
        let rest = Picked::pick().claim::<_, i64>(&db.pool, 10).await.unwrap();
        assert_eq!(keys(rest), [6, 2]);
        assert!(
            Picked::pick()
                .claim::<_, i64>(&db.pool, 10)
                .await
                .unwrap()
                .is_empty()
        );
        for id in 1..=10 {
            let expected = if id % 2 == 0 { "sending" } else { "pending" };
            assert_eq!(db.status(id).await.as_deref(), Some(expected), "row {id}");
        }
        // The `set` of the transition ran on every row claimed, once.
        // 100 - id for each row, 0 for rows 3 and 4: 752; five rows claimed.
        assert_eq!(db.total_attempts().await, 757);
        // An occurrence names one row (of a machine with a version column:
        // elsewhere `expecting` does not compile).
        assert!(matches!(
            Sweep::start()
                .expecting(0)
                .claim::<_, i64>(&db.pool, 1)
                .await,
            Err(Error::Misuse(stateguard::Misuse::ExpectingMany { .. }))
        ));
    }

    /// A claim into an in-flight state stamps each row's lease: the claimer
    /// finishes its rows, and a claimer that dies leaves its rows to recovery,
    /// under the same effect keys.
    pub(crate) async fn a_claim_stamps_leases_that_finish_and_recovery_honour(db: Db<DB>) {
        db.transfers(4).await;
        let claimed = Queue::start().claim::<_, i64>(&db.pool, 2).await.unwrap();
        assert_eq!(claimed.iter().map(|w| *w.key()).collect::<Vec<_>>(), [1, 2]);
        for won in claimed {
            let finished = won
                .finish(&db.pool, |effect: Effect<Queue, i64>| async move {
                    Queue::confirm(format!("ref-{}", effect.key())).into()
                })
                .await
                .unwrap();
            assert!(
                matches!(
                    finished,
                    Finished::Done {
                        state: Queue::Sent,
                        ..
                    }
                ),
                "{finished:?}"
            );
        }
        // This claimer dies with its batch.
        let lost = Queue::start().claim::<_, i64>(&db.pool, 10).await.unwrap();
        let lost_keys: Vec<String> = lost.iter().map(|w| w.effect_key()).collect();
        assert_eq!(
            lost_keys,
            [
                "transfers.status:3:sending:1",
                "transfers.status:4:sending:1"
            ]
        );
        drop(lost);
        db.backdate_leases().await;
        let seen = std::sync::Mutex::new(Vec::new());
        let report = recover(
            &db.pool,
            Queue::Sending,
            10,
            |effect: Effect<Queue, i64>| {
                seen.lock().unwrap().push(effect.effect_key().to_owned());
                async { Queue::fail().into() }
            },
        )
        .await
        .unwrap();
        assert_eq!((report.claimed, report.failed), (2, 2), "{report:?}");
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, lost_keys);
        assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
        assert_eq!(db.transfer(4).await, ("failed".to_owned(), 2));
    }

    /// Rows stamped an hour ago (by the database's clock) move; fresh rows
    /// stay.
    async fn a_sweep_moves_rows_that_waited_too_long(db: Db<DB>) {
        db.transfers(4).await;
        for id in [1_i64, 2] {
            assert!(
                Sweep::start()
                    .apply(&db.pool, id)
                    .await
                    .unwrap()
                    .is_applied()
            );
        }
        // Transfers 1 and 2 entered `sending` an hour ago; 3 and 4 now.
        db.backdate_leases().await;
        for id in [3_i64, 4] {
            assert!(
                Sweep::start()
                    .apply(&db.pool, id)
                    .await
                    .unwrap()
                    .is_applied()
            );
        }
        let keys = |wins: Vec<stateguard::Won<Sweep, i64>>| -> Vec<i64> {
            wins.iter().map(|w| *w.key()).collect()
        };
        let day = std::time::Duration::from_secs(86_400);
        assert!(
            Sweep::expire()
                .claim_older_than::<_, i64>(&db.pool, day, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // The declared timeout, 50 minutes.
        let expired = Sweep::expire()
            .claim_timed_out::<_, i64>(&db.pool, 10)
            .await
            .unwrap();
        assert_eq!(keys(expired), [1, 2]);
        let ten_minutes = std::time::Duration::from_secs(600);
        assert!(
            Sweep::expire()
                .claim_older_than::<_, i64>(&db.pool, ten_minutes, 10)
                .await
                .unwrap()
                .is_empty()
        );
        for (id, status) in [(1, "failed"), (2, "failed"), (3, "sending"), (4, "sending")] {
            assert_eq!(db.transfer(id).await.0, status, "transfer {id}");
        }
        // `start` leaves `pending`, which records no entry time.
        assert!(matches!(
            Sweep::start()
                .claim_older_than::<_, i64>(&db.pool, day, 10)
                .await,
            Err(Error::Misuse(stateguard::Misuse::NoSinceColumn { .. }))
        ));
        assert!(matches!(
            Queue::start().claim_timed_out::<_, i64>(&db.pool, 10).await,
            Err(Error::Misuse(stateguard::Misuse::NoTimeout { .. }))
        ));
    }
}

#[test]
fn the_docs_show_the_timeout() {
    let markdown = stateguard::docs::markdown::<Sweep>();
    assert!(
        markdown.contains("| `Sending` | `sending` | | timeout 50m | `sending_since` |"),
        "{markdown}"
    );
    let mermaid = stateguard::docs::mermaid::<Sweep>();
    assert!(
        mermaid
            .contains("note right of Sending : times out after 50m (since column sending_since)"),
        "{mermaid}"
    );
    let dot = stateguard::docs::dot::<Sweep>();
    assert!(dot.contains("timeout 50m\\nsince sending_since"), "{dot}");
    let sending = Sweep::MACHINE.state(Sweep::Sending).unwrap();
    assert_eq!(sending.since_column(), Some("sending_since"));
    assert_eq!(
        sending.timeout(),
        Some(std::time::Duration::from_secs(3_000))
    );
}
