//! The fault matrix of the moves that write rows beside them: a machine
//! with a history table and `emit(…)`, under the enforcement DDL's
//! trigger. On SQLite and MySQL each move runs its inserts and its update
//! in a transaction (or savepoint) of its own, and MariaDB reads back the
//! id its trigger made it drop; on PostgreSQL the inserts ride on the
//! move's statement. Each run is held to G10 by `faults::matrix`, reading
//! the transfers' states, as for the machine without them.

use crate::common;
use crate::common::KeyColumn;
use crate::faults::{
    DEADLINE, Failure, KEYS, Reported, commit_anyway, matrix, reset_transfers, transfers,
};

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Mutex;

use common::{Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::key::shape::One;
use stateguard::{Finished, StateMachine, Tx, Verdict, Won, outbox};

/// `TransferStatus`'s table and states, each move writing its history row
/// and, but for `fail`, its message.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version",
    history = "transfer_history"
)]
enum Announced {
    #[state(initial)]
    #[transition(start -> Sending, emit("announced.sending"))]
    #[transition(cancel -> Cancelled, emit("announced.cancelled"))]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, emit("announced.sent"))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled, emit("announced.cancelled"), supersedes_effect)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

backend_tests! {
    impl Tests {
        "faults_hi_apply" => apply,
        "faults_hi_apply_many" => apply_many,
        "faults_hi_apply_many_tx" => apply_many_in_a_transaction,
        "faults_hi_claim" => claim,
        "faults_hi_finish" => finish,
    }
}

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    /// `apply` of row 1 into the in-flight state.
    pub(crate) async fn apply(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let outcome = Announced::start()
                .within(DEADLINE)
                .apply(&db.pool, 1_i64)
                .await?;
            Ok(outcome.won().map(|won| *won.key()).into_iter().collect())
        };
        matrix(
            &db,
            "apply with history",
            reset::<DB>,
            call,
            transfers::<DB>,
        )
        .await;
    }

    /// `apply_many` of every key: rows 1–4 move.
    pub(crate) async fn apply_many(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let outcomes = Announced::start()
                .within(DEADLINE)
                .apply_many(&db.pool, &KEYS)
                .await?;
            Ok(outcomes
                .into_iter()
                .filter_map(|o| o.won().map(|won| *won.key()))
                .collect())
        };
        let name = "apply_many with history";
        matrix(&db, name, reset::<DB>, call, transfers::<DB>).await;
    }

    /// `apply_many` in the caller's transaction, and its commit: the
    /// inserts run in a savepoint there.
    pub(crate) async fn apply_many_in_a_transaction(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE)
                .within(DEADLINE)
                .await?;
            let applied = Announced::start()
                .within(DEADLINE)
                .apply_many(&mut tx, &KEYS)
                .await;
            let wins =
                applied.map(|outcomes| outcomes.into_iter().filter_map(|o| o.won()).collect());
            commit_anyway(tx, wins).await
        };
        let name = "apply_many with history in a transaction";
        matrix(&db, name, reset::<DB>, call, transfers::<DB>).await;
    }

    /// `claim` of up to three pending rows.
    pub(crate) async fn claim(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let wins: Vec<Won<Announced, i64>> = Announced::start()
                .within(DEADLINE)
                .claim(&db.pool, 3)
                .await?;
            Ok(wins.iter().map(|won| *won.key()).collect())
        };
        matrix(
            &db,
            "claim with history",
            reset::<DB>,
            call,
            transfers::<DB>,
        )
        .await;
    }

    /// `finish` of row 1's committed win: the follow-up writes its history
    /// row and message beside the move. The win is made by `reset`.
    pub(crate) async fn finish(db: Db<DB>) {
        let slot: Mutex<Option<Won<Announced, i64>>> = Mutex::new(None);
        let reset = async |db: &Db<DB>| {
            reset::<DB>(db).await;
            let outcome = Announced::start().apply(&db.pool, 1_i64).await.unwrap();
            *slot.lock().unwrap() = outcome.won();
        };
        let call = async |db: &Db<DB>| -> Reported {
            let won = slot.lock().unwrap().take().expect("row 1 moved");
            let done = won
                .within(DEADLINE)
                .finish(&db.pool, async |_effect| Verdict::done())
                .await;
            match done {
                Ok(Finished::Done { .. } | Finished::Failed { .. }) => Ok(BTreeSet::from([1])),
                Ok(_) => Ok(BTreeSet::new()),
                Err(error) => Err(Failure::of(error.error())),
            }
        };
        matrix(&db, "finish with history", reset, call, transfers::<DB>).await;
    }
}

/// `transfers` as `faults::reset_transfers` leaves it (rows 1–4 pending,
/// 5 sending, 6 cancelled), with the enforcement DDL, the history table
/// and the outbox made on first use, and the outbox empty: a move of a
/// reseeded row has the effect key, and so the message id, of the run
/// before. The history, append-only, keeps its rows.
async fn reset<DB: TestBackend>(db: &Db<DB>) {
    reset_transfers(db).await;
    let mut conn = db.pool.acquire().await.unwrap();
    if DB::execute(&mut conn, "DELETE FROM stateguard_outbox", &[])
        .await
        .is_err()
    {
        let ddl = stateguard::ddl::generate::<Announced>(DB::DIALECT);
        for statement in outbox::ddl(DB::DIALECT).iter().copied().chain(ddl.up()) {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
    }
}
