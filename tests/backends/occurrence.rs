//! An expected occurrence: a transition applied only to the row as the
//! caller saw it (`Transition::expecting`), and `Machine::load` to see it.

use crate::common;

use std::marker::PhantomData;
use std::sync::Arc;

use common::{Db, PayoutStatus, TestBackend, TransferStatus};
use stateguard::bounds::Key;
use stateguard::{Current, Error, Outcome, StateMachine, Tx};

/// The `transfers` table as a machine with a cycle: a payout put on hold
/// and released, again and again.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Hold {
    #[state(initial)]
    #[transition(hold -> Held)]
    Pending,
    #[transition(release -> Pending)]
    Held,
}

/// The `transfers` table without its version column, declaring by hand
/// that it has one: what the derive never does.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "transfers", column = "status", key = "id")]
enum Unversioned {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

impl stateguard::HasVersion for Unversioned {}

backend_tests! {
    impl Tests {
        "occ_two_operators" => two_operators_on_the_same_page_one_wins,
        "occ_race" => racing_operators_at_one_occurrence_win_once (flavor = "multi_thread", worker_threads = 4),
        "occ_cycle" => a_late_replay_in_a_cycle_is_refused,
        "occ_load" => load_reads_state_and_occurrence,
        "occ_stored" => a_win_carries_the_stored_version,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    /// Two operators load the same payout and both cancel it with the
    /// occurrence they saw: one wins, the other learns it moved on.
    async fn two_operators_on_the_same_page_one_wins(db: Db<DB>) {
        db.transfers(1).await;
        let seen_by_a = TransferStatus::MACHINE.load(&db.pool, 1_i64).await.unwrap();
        let seen_by_b = TransferStatus::MACHINE.load(&db.pool, 1_i64).await.unwrap();
        let seen = seen_by_a.expect("row 1");
        assert_eq!(seen_by_b, Some(seen));
        assert_eq!(
            (seen.state(), seen.occurrence()),
            (TransferStatus::Pending, 0)
        );
        let a = TransferStatus::cancel()
            .expecting(seen.occurrence())
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        let won = a.won().expect("the first operator wins");
        assert_eq!(won.occurrence(), 1);
        let b = TransferStatus::cancel()
            .expecting(seen.occurrence())
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert_eq!(
            b,
            Outcome::Stale {
                current: TransferStatus::Cancelled,
                occurrence: 1
            }
        );
        assert_eq!(db.transfer(1).await, ("cancelled".to_owned(), 1));
    }

    /// Sixteen operators at once, all expecting occurrence 0: exactly one
    /// moves the row, every other is told it moved on.
    async fn racing_operators_at_one_occurrence_win_once(db: Db<DB>) {
        const ROWS: i64 = 20;
        const OPERATORS: usize = 16;
        db.transfers(ROWS).await;
        let pool = Arc::new(db.pool.clone());
        let mut tasks = Vec::new();
        for id in 1..=ROWS {
            for _ in 0..OPERATORS {
                let pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    let outcome = Hold::hold().expecting(0).apply(&*pool, id).await;
                    (id, outcome.map(|o| (o.is_applied(), o)))
                }));
            }
        }
        let mut applied = vec![0; ROWS as usize + 1];
        let mut stale = vec![0; ROWS as usize + 1];
        for task in tasks {
            let (id, outcome) = task.await.unwrap();
            match outcome.unwrap() {
                (true, _) => applied[id as usize] += 1,
                (
                    false,
                    Outcome::Stale {
                        current: Hold::Held,
                        occurrence: 1,
                    },
                ) => stale[id as usize] += 1,
                (false, other) => panic!("row {id}: {other:?}"),
            }
        }
        for id in 1..=ROWS as usize {
            assert_eq!((applied[id], stale[id]), (1, OPERATORS - 1), "row {id}");
        }
    }

    /// In a machine with a cycle, a late replay of `hold` wins the next pass
    /// unless it carries the occurrence it was meant for.
    async fn a_late_replay_in_a_cycle_is_refused(db: Db<DB>) {
        db.transfers(1).await;
        let held = Hold::hold()
            .expecting(0)
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert!(held.is_applied());
        assert!(
            Hold::release()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        // The first request, delivered again.
        let replay = Hold::hold()
            .expecting(0)
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert_eq!(
            replay,
            Outcome::Stale {
                current: Hold::Pending,
                occurrence: 2
            }
        );
        assert_eq!(db.transfer(1).await, ("pending".to_owned(), 2));
    }

    /// `load` reads the state and occurrence, inside a transaction too, and
    /// says when there is no row; a machine without a version column cannot
    /// expect an occurrence.
    async fn load_reads_state_and_occurrence(db: Db<DB>) {
        db.transfers(1).await;
        assert_eq!(
            TransferStatus::MACHINE.load(&db.pool, 2_i64).await.unwrap(),
            None
        );
        assert!(
            TransferStatus::start()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let current: Option<Current<TransferStatus>> =
            TransferStatus::MACHINE.load(&db.pool, 1_i64).await.unwrap();
        let current = current.expect("row 1");
        assert_eq!(
            (current.state(), current.occurrence()),
            (TransferStatus::Sending, 1)
        );
        let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
        let inside = TransferStatus::MACHINE.load(&mut tx, 1_i64).await.unwrap();
        assert_eq!(inside, Some(current));
        tx.rollback().await.unwrap();
        // PayoutStatus declares no version column: `load` still reads its
        // state, with occurrence 0; `expecting` does not compile on it
        // (tests/ui/api/expecting-without-version.rs).
        db.seed(1).await;
        let current = PayoutStatus::MACHINE.load(&db.pool, 1_i64).await.unwrap();
        let current = current.expect("payout 1");
        assert_eq!(
            (current.state(), current.occurrence()),
            (PayoutStatus::Pending, 0)
        );
        // A hand-written `HasVersion` lets it compile; the call is refused
        // before it sends anything, and nothing moves.
        let error = Unversioned::start()
            .expecting(0)
            .apply(&db.pool, 1_i64)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                Error::Misuse(stateguard::Misuse::NoVersionColumn { .. })
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("version"), "{error}");
        assert!(error.is_misuse(), "{error:?}");
        assert_eq!(db.transfer(1).await.0, "sending");
    }

    /// A win's occurrence is the version the row now holds, whichever way the
    /// backend learns it (PostgreSQL and SQLite `RETURNING`; MySQL the
    /// `UPDATE`'s own result, or a read-back for an in-flight target): on a
    /// pool, on a connection and inside a transaction, and above 2^31.
    async fn a_win_carries_the_stored_version(db: Db<DB>) {
        db.transfers(12).await;
        let mut conn = db.pool.acquire().await.unwrap();
        let widen = match DB::DIALECT {
            stateguard::ddl::Dialect::Postgres => {
                "ALTER TABLE transfers ALTER COLUMN version TYPE BIGINT"
            }
            stateguard::ddl::Dialect::MySql => {
                "ALTER TABLE transfers MODIFY version BIGINT NOT NULL DEFAULT 0"
            }
            // SQLite's INTEGER holds 64 bits.
            _ => "SELECT 1",
        };
        for statement in [
            widen,
            "UPDATE transfers SET version = 2147483653 WHERE id > 6",
        ] {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        drop(conn);

        // Ids 1..=6 start at version 0, 7..=12 above 2^31; odd ids move into
        // an in-flight state (`start`), even ones out of the machine's flow
        // (`cancel`).
        for base in [0_i64, 6] {
            for (offset, executor) in [(1, "pool"), (3, "connection"), (5, "transaction")] {
                for id in [base + offset, base + offset + 1] {
                    let transition = match id % 2 {
                        1 => TransferStatus::start(),
                        _ => TransferStatus::cancel(),
                    };
                    let occurrence = match executor {
                        "pool" => transition
                            .apply(&db.pool, id)
                            .await
                            .unwrap()
                            .won()
                            .unwrap()
                            .occurrence(),
                        "connection" => {
                            let mut conn = db.pool.acquire().await.unwrap();
                            let outcome = transition.apply(&mut conn, id).await.unwrap();
                            outcome.won().unwrap().occurrence()
                        }
                        _ => {
                            let mut tx = Tx::begin(&db.pool).await.unwrap();
                            let outcome = transition.apply(&mut tx, id).await.unwrap();
                            let won = tx.commit(outcome.won()).await.unwrap().unwrap();
                            won.occurrence()
                        }
                    };
                    let stored = db.transfer(id).await.1;
                    assert_eq!(occurrence, stored, "{executor}, transfer {id}");
                    let expected = if base == 0 { 1 } else { 2_147_483_654 };
                    assert_eq!(stored, expected, "{executor}, transfer {id}");
                }
            }
        }
    }
}
