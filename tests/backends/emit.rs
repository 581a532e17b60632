//! `emit(…)`: a winning move writes its message to the outbox in the same
//! atomic act, on every path that moves rows: `apply`, `expecting`,
//! `finish`'s follow-ups, recovery, `claim` and `apply_many`, with and
//! without a history table. A losing or rolled-back move writes none, and
//! the message id is the win's effect key.

use crate::common;
use crate::common::KeyColumn;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use common::{Db, Isolation, TestBackend};
use stateguard::bounds::{Batched, Key, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::{Effect, Finished, Outcome, StateMachine, Tx, Verdict, outbox, recover};
use tokio::sync::Barrier;

/// The `transfers` table, every move of which announces itself; `confirm`
/// stores the bank's reference, which its message carries.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Wire {
    #[state(initial)]
    #[transition(start -> Sending, emit("wire.sending"))]
    #[transition(cancel -> Cancelled, emit("wire.cancelled", payload(status, version)))]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = decline))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)), emit("wire.sent", payload(status, version, bank_ref)))]
    #[transition(decline -> Failed, emit("wire.failed"))]
    #[transition(cancel -> Cancelled, emit("wire.cancelled", payload(status, version)), supersedes_effect)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// The same table with a history: each move writes its history row and
/// its message beside it.
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
    #[transition(start -> Sending, emit("logged.sending"))]
    #[transition(cancel -> Cancelled, emit("logged.cancelled"))]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, emit("logged.sent", payload(status)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

backend_tests! {
    impl Tests {
        "emit_paths" => every_path_writes_one_message_per_win,
        "emit_history" => messages_ride_beside_history_rows,
        "emit_race" => racing_moves_leave_one_message_per_committed_win (flavor = "multi_thread", worker_threads = 4),
    }
}

/// The race at PostgreSQL's and MariaDB's isolation levels beside their
/// defaults, which `backend_tests!` runs.
mod isolation {
    use super::*;

    macro_rules! at {
        ($($name:ident: $backend:ident, $db:literal, $isolation:ident;)*) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let Some(db) = crate::open!($backend, $db, Isolation::$isolation) else {
                    return;
                };
                Tests::racing_moves_leave_one_message_per_committed_win(db).await;
            }
        )*};
    }

    at! {
        postgres_repeatable_read: Postgres, "emit_race_rr", RepeatableRead;
        postgres_serializable: Postgres, "emit_race_ser", Serializable;
        mysql_read_committed: Mysql, "emit_race_rc", ReadCommitted;
        mysql_snapshot: Mysql, "emit_race_si", Snapshot;
    }
}

/// One message as the outbox holds it.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    id: String,
    order_key: String,
    occurrence: Option<i64>,
    topic: String,
    payload: serde_json::Value,
}

/// Every message in the outbox, in the order written.
async fn stored<DB: TestBackend>(db: &Db<DB>) -> Vec<Stored> {
    let mut conn = db.pool.acquire().await.unwrap();
    let (count, nth) = match DB::DIALECT {
        Dialect::MySql => (
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox",
            "SELECT CAST(message_id AS CHAR), CAST(order_key AS CHAR), CAST(occurrence AS \
             SIGNED), CAST(topic AS CHAR), CAST(payload AS CHAR) FROM stateguard_outbox ORDER BY \
             seq LIMIT 1 OFFSET ?",
        ),
        Dialect::Postgres => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox",
            "SELECT message_id, order_key, occurrence, topic, convert_from(payload, 'UTF8') FROM \
             stateguard_outbox ORDER BY seq LIMIT 1 OFFSET $1",
        ),
        _ => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox",
            "SELECT message_id, order_key, occurrence, topic, CAST(payload AS TEXT) FROM \
             stateguard_outbox ORDER BY seq LIMIT 1 OFFSET ?1",
        ),
    };
    let (n,): (i64,) = DB::fetch_one(&mut conn, count, &[]).await.unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let (id, order_key, occurrence, topic, payload): (
            String,
            String,
            Option<i64>,
            String,
            String,
        ) = DB::fetch_one(&mut conn, nth, &[common::Bind::Int(i)])
            .await
            .unwrap();
        out.push(Stored {
            id,
            order_key,
            occurrence,
            topic,
            payload: serde_json::from_str(&payload).unwrap_or_else(|e| panic!("{payload}: {e}")),
        });
    }
    out
}

/// The messages of transfer `id`, in order.
async fn of<DB: TestBackend>(db: &Db<DB>, id: i64) -> Vec<Stored> {
    let order_key = format!("transfers.status:{id}");
    stored(db)
        .await
        .into_iter()
        .filter(|m| m.order_key == order_key)
        .collect()
}

/// The transfers table with `rows` pending rows and the outbox.
async fn setup<DB: TestBackend>(db: &Db<DB>, rows: i64) {
    db.transfers(rows).await;
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in outbox::ddl(DB::DIALECT) {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

/// The bodies `backend_tests!` runs on each backend.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, stateguard::key::shape::One>,
    String: Key<DB>,
{
    /// Each path that moves a row writes one message per win, whose id is
    /// the win's effect key and whose payload is the row as the move left
    /// it; a replay, a stale attempt and a rolled-back move write none.
    pub(crate) async fn every_path_writes_one_message_per_win(db: Db<DB>) {
        setup(&db, 9).await;
        // apply, then a replay.
        let won = Wire::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        assert_eq!(
            Wire::start().apply(&db.pool, 1_i64).await.unwrap(),
            Outcome::AlreadyInState(Wire::Sending)
        );
        let messages = of(&db, 1).await;
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0].id, won.effect_key());
        assert_eq!(messages[0].id, "transfers.status:1:sending:1");
        assert_eq!(messages[0].topic, "wire.sending");
        assert_eq!(messages[0].payload, serde_json::json!({ "id": 1 }));

        // finish: the `done` follow-up writes its message, with the value
        // its verdict bound.
        let finished = won
            .finish(&db.pool, |_: Effect<Wire, i64>| async {
                Wire::confirm("ref-1".to_owned()).into()
            })
            .await
            .unwrap();
        assert!(matches!(finished, Finished::Done { .. }), "{finished:?}");
        let messages = of(&db, 1).await;
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert_eq!(messages[1].id, "transfers.status:1:sent:2");
        let occurrences: Vec<Option<i64>> = messages.iter().map(|m| m.occurrence).collect();
        assert_eq!(occurrences, [Some(1), Some(2)]);
        assert_eq!(messages[1].topic, "wire.sent");
        assert_eq!(
            messages[1].payload,
            serde_json::json!({ "id": 1, "status": "sent", "version": 2, "bank_ref": "ref-1" })
        );

        // expecting: a stale attempt writes nothing, a current one writes.
        assert!(matches!(
            Wire::cancel()
                .expecting(5)
                .apply(&db.pool, 2_i64)
                .await
                .unwrap(),
            Outcome::Stale { .. }
        ));
        assert!(of(&db, 2).await.is_empty());
        let cancelled = Wire::cancel()
            .expecting(0)
            .apply(&db.pool, 2_i64)
            .await
            .unwrap();
        assert!(cancelled.is_applied());
        let messages = of(&db, 2).await;
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(
            messages[0].payload,
            serde_json::json!({ "id": 2, "status": "cancelled", "version": 1 })
        );

        // A move in a transaction that rolls back writes nothing; one that
        // commits writes its message.
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        assert!(
            Wire::start()
                .apply(&mut tx, 3_i64)
                .await
                .unwrap()
                .is_applied()
        );
        tx.rollback().await.unwrap();
        assert!(of(&db, 3).await.is_empty());
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        assert!(
            Wire::start()
                .apply(&mut tx, 3_i64)
                .await
                .unwrap()
                .is_applied()
        );
        tx.commit(()).await.unwrap();
        assert_eq!(of(&db, 3).await.len(), 1);

        // A claim, then recovery after the claimer died: the claim's
        // messages, then the recovered follow-ups'.
        let claimed = Wire::start().claim::<_, i64>(&db.pool, 2).await.unwrap();
        let keys: Vec<i64> = claimed.iter().map(|w| *w.key()).collect();
        assert_eq!(keys, [4, 5]);
        let claim_keys: Vec<String> = claimed.iter().map(|w| w.effect_key()).collect();
        drop(claimed);
        for (id, key) in [4, 5].into_iter().zip(&claim_keys) {
            let messages = of(&db, id).await;
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert_eq!(&messages[0].id, key);
        }
        db.backdate_leases().await;
        let report = recover(
            &db.pool,
            Wire::Sending,
            10,
            |effect: Effect<Wire, i64>| async move {
                match *effect.key() {
                    4 => Wire::confirm("ref-4".to_owned()).into(),
                    _ => Verdict::failed(),
                }
            },
        )
        .await
        .unwrap();
        // Row 3 is in flight too, and its lease ran out with the others':
        // it fails with row 5.
        assert_eq!((report.done, report.failed), (1, 2), "{report:?}");
        assert_eq!(of(&db, 3).await.len(), 2);
        let topics = |messages: Vec<Stored>| -> Vec<String> {
            messages.into_iter().map(|m| m.topic).collect()
        };
        assert_eq!(topics(of(&db, 4).await), ["wire.sending", "wire.sent"]);
        assert_eq!(topics(of(&db, 5).await), ["wire.sending", "wire.failed"]);

        // A batch: moved rows get one message each, the rest none.
        let outcomes = Wire::cancel()
            .apply_many(&db.pool, &[6_i64, 7, 7, 1, 99])
            .await
            .unwrap();
        let applied: Vec<bool> = outcomes.iter().map(Outcome::is_applied).collect();
        assert_eq!(applied, [true, true, false, false, false]);
        for id in [6, 7] {
            let messages = of(&db, id).await;
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert_eq!(messages[0].id, format!("transfers.status:{id}:cancelled:1"));
            assert_eq!(
                messages[0].payload,
                serde_json::json!({ "id": id, "status": "cancelled", "version": 1 })
            );
        }
        // Nothing else was written; every id is unique.
        let all = stored(&db).await;
        assert_eq!(all.len(), 2 + 1 + 1 + 2 + 2 + 1 + 2, "{all:?}");
        let mut ids: Vec<&String> = all.iter().map(|m| &m.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), all.len());
        // A message written by hand names no occurrence.
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let message = outbox::Message {
            id: "by-hand:1",
            topic: "wire.note",
            payload: b"{}",
        };
        outbox::enqueue(&mut tx, "by-hand", message).await.unwrap();
        tx.commit(()).await.unwrap();
        let all = stored(&db).await;
        let by_hand = all.iter().find(|m| m.id == "by-hand:1").unwrap();
        assert_eq!(by_hand.occurrence, None);
        assert!(
            all.iter()
                .filter(|m| m.id != "by-hand:1")
                .all(|m| m.occurrence.is_some())
        );
    }

    /// With a history table, each move writes its history row and its
    /// message, on every path; a move that emits nothing writes no message.
    pub(crate) async fn messages_ride_beside_history_rows(db: Db<DB>) {
        setup(&db, 6).await;
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in stateguard::ddl::generate::<Logged>(DB::DIALECT).up() {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        drop(conn);
        let won = Logged::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let finished = won
            .finish(&db.pool, |_: Effect<Logged, i64>| async { Verdict::done() })
            .await
            .unwrap();
        assert!(matches!(finished, Finished::Done { .. }), "{finished:?}");
        let claimed = Logged::start().claim::<_, i64>(&db.pool, 2).await.unwrap();
        for won in claimed {
            let finished = won
                .finish(&db.pool, |_: Effect<Logged, i64>| async {
                    Verdict::failed()
                })
                .await
                .unwrap();
            assert!(matches!(finished, Finished::Failed { .. }), "{finished:?}");
        }
        Logged::cancel()
            .apply_many(&db.pool, &[4_i64, 5])
            .await
            .unwrap();
        let topics = |messages: Vec<Stored>| -> Vec<String> {
            messages.into_iter().map(|m| m.topic).collect()
        };
        let first = of(&db, 1).await;
        assert_eq!(topics(first.clone()), ["logged.sending", "logged.sent"]);
        assert_eq!(
            first[1].payload,
            serde_json::json!({ "id": 1, "status": "sent" })
        );
        // `fail` emits nothing.
        assert_eq!(topics(of(&db, 2).await), ["logged.sending"]);
        assert_eq!(topics(of(&db, 3).await), ["logged.sending"]);
        assert_eq!(topics(of(&db, 4).await), ["logged.cancelled"]);
        assert_eq!(topics(of(&db, 5).await), ["logged.cancelled"]);
        assert!(of(&db, 6).await.is_empty());
        for id in 1..=5_i64 {
            let history = Logged::history(&db.pool, id).await.unwrap();
            let emitted = history
                .iter()
                .filter(|row| row.transition.name() != "fail")
                .count();
            assert_eq!(
                emitted,
                of(&db, id).await.len(),
                "transfer {id}: {history:?}"
            );
        }
    }

    /// 32 attempts race on each row, a third of them in transactions that
    /// roll back: each row ends with as many messages as committed wins
    /// (one), each naming the occurrence the row stores.
    pub(crate) async fn racing_moves_leave_one_message_per_committed_win(db: Db<DB>) {
        const ROWS: i64 = 8;
        const ATTEMPTS: usize = 32;
        setup(&db, ROWS).await;
        let barrier = Arc::new(Barrier::new(ROWS as usize * ATTEMPTS));
        let mut tasks = Vec::new();
        for id in 1..=ROWS {
            for attempt in 0..ATTEMPTS {
                let (pool, barrier) = (db.pool.clone(), barrier.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    if attempt % 3 == 0 {
                        // A move whose transaction rolls back, or that its
                        // isolation level refuses: no committed win.
                        let Ok(mut tx) = Tx::begin_with(&pool, DB::BEGIN_WRITE).await else {
                            return (id, 0);
                        };
                        let _ = Wire::start().apply(&mut tx, id).await;
                        let _ = tx.rollback().await;
                        return (id, 0);
                    }
                    let outcome = Wire::start().apply(&pool, id).await.unwrap();
                    (id, usize::from(outcome.is_applied()))
                }));
            }
        }
        let mut wins: BTreeMap<i64, usize> = BTreeMap::new();
        for task in tasks {
            let (id, won) = task.await.unwrap();
            *wins.entry(id).or_default() += won;
        }
        for id in 1..=ROWS {
            let messages = of(&db, id).await;
            let (status, version) = db.transfer(id).await;
            let won = wins.get(&id).copied().unwrap_or(0);
            assert!(won <= 1, "transfer {id}: {won} wins");
            assert_eq!(messages.len(), won, "transfer {id}: {messages:?}");
            match won {
                1 => {
                    assert_eq!((status.as_str(), version), ("sending", 1));
                    assert_eq!(messages[0].id, format!("transfers.status:{id}:sending:1"));
                }
                _ => assert_eq!((status.as_str(), version), ("pending", 0)),
            }
        }
    }
}
