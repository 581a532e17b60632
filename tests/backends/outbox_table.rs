//! The outbox table: `outbox::enqueue` writes a message in the
//! transaction of the work it announces, on every backend. A message
//! commits with its work and only then; a rollback writes nothing; an id
//! written before is a duplicate.

use crate::common;

use std::sync::Arc;

use common::{Db, PayoutStatus, TestBackend};
use stateguard::bounds::Key;
use stateguard::ddl::Dialect;
use stateguard::outbox::{self, Enqueued, Message};
use stateguard::{Error, Outcome, Tx};
use tokio::sync::Barrier;

backend_tests! {
    impl Tests {
        "outbox_once" => a_message_commits_with_its_work_once,
        "outbox_race" => only_committed_wins_leave_a_message (flavor = "multi_thread", worker_threads = 4),
        "outbox_bad_input" => bad_messages_are_refused_before_anything_is_written,
    }
}

/// The outbox table, from its DDL.
async fn table<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in outbox::ddl(DB::DIALECT) {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

/// How many messages the outbox holds with id `id` (every message, with
/// `None`).
async fn messages<DB: TestBackend>(db: &Db<DB>, id: Option<&str>) -> i64 {
    let mut conn = db.pool.acquire().await.unwrap();
    let (sql, binds): (&'static str, Vec<common::Bind<'_>>) = match (DB::DIALECT, id) {
        (Dialect::MySql, None) => (
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox",
            vec![],
        ),
        (_, None) => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox",
            vec![],
        ),
        (Dialect::MySql, Some(id)) => (
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox WHERE message_id = ?",
            vec![common::Bind::Text(id)],
        ),
        (Dialect::Postgres, Some(id)) => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE message_id = $1",
            vec![common::Bind::Text(id)],
        ),
        (_, Some(id)) => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE message_id = ?1",
            vec![common::Bind::Text(id)],
        ),
    };
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &binds).await.unwrap();
    n
}

/// The stored message `id`: order key, topic and payload, each as text.
async fn stored<DB: TestBackend>(db: &Db<DB>, id: &str) -> (String, String, String) {
    let mut conn = db.pool.acquire().await.unwrap();
    let sql = match DB::DIALECT {
        Dialect::MySql => {
            "SELECT CAST(order_key AS CHAR), CAST(topic AS CHAR), CAST(payload AS CHAR) \
             FROM stateguard_outbox WHERE message_id = ?"
        }
        Dialect::Postgres => {
            "SELECT order_key, topic, convert_from(payload, 'UTF8') FROM stateguard_outbox \
             WHERE message_id = $1"
        }
        _ => {
            "SELECT order_key, topic, CAST(payload AS TEXT) FROM stateguard_outbox \
             WHERE message_id = ?1"
        }
    };
    DB::fetch_one(&mut conn, sql, &[common::Bind::Text(id)])
        .await
        .unwrap()
}

struct Tests<DB>(std::marker::PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    /// Written in a transaction that commits: `New`, then `Duplicate` for
    /// the same id in a later one; written in a transaction that rolls
    /// back: nothing, and the next write of that id is `New`.
    async fn a_message_commits_with_its_work_once(db: Db<DB>) {
        table(&db).await;
        let message = |id| Message {
            id,
            topic: "payout.sent",
            payload: br#"{"id":42}"#,
        };
        for expected in [Enqueued::New, Enqueued::Duplicate] {
            let mut tx = Tx::begin(&db.pool).await.unwrap();
            let enqueued = outbox::enqueue(&mut tx, "42", message("payout:42:sent:1"));
            assert_eq!(enqueued.await.unwrap(), expected);
            tx.commit(()).await.unwrap();
        }
        assert_eq!(messages(&db, Some("payout:42:sent:1")).await, 1);
        assert_eq!(
            stored(&db, "payout:42:sent:1").await,
            ("42".into(), "payout.sent".into(), r#"{"id":42}"#.into())
        );
        // Rolled back: not written, so the same id is new afterwards.
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let enqueued = outbox::enqueue(&mut tx, "43", message("payout:43:sent:1"));
        assert_eq!(enqueued.await.unwrap(), Enqueued::New);
        tx.rollback().await.unwrap();
        assert_eq!(messages(&db, Some("payout:43:sent:1")).await, 0);
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        let enqueued = outbox::enqueue(&mut tx, "43", message("payout:43:sent:1"));
        assert_eq!(enqueued.await.unwrap(), Enqueued::New);
        tx.commit(()).await.unwrap();
        assert_eq!(messages(&db, None).await, 2);
    }

    /// 32 attempts per row, each in its own transaction: the attempt that
    /// wins writes a message under its effect key. On odd rows the winner
    /// commits; on even rows every winner rolls back. Each odd row ends
    /// with exactly one message, under its one committed win's key, and
    /// the even rows with none.
    async fn only_committed_wins_leave_a_message(db: Db<DB>) {
        const ROWS: i64 = 10;
        const ATTEMPTS: usize = 32;
        table(&db).await;
        db.seed(ROWS).await;
        let barrier = Arc::new(Barrier::new(ROWS as usize * ATTEMPTS));
        let mut tasks = Vec::new();
        for id in 1..=ROWS {
            for _ in 0..ATTEMPTS {
                let (pool, barrier) = (db.pool.clone(), barrier.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let mut tx = Tx::begin_with(&pool, DB::BEGIN_WRITE).await.unwrap();
                    let Outcome::Applied(won) =
                        PayoutStatus::start().apply(&mut tx, id).await.unwrap()
                    else {
                        tx.rollback().await.unwrap();
                        return None;
                    };
                    let key = won.effect_key();
                    let message = Message {
                        id: &key,
                        topic: "payout.started",
                        payload: b"{}",
                    };
                    let order_key = id.to_string();
                    let enqueued = outbox::enqueue(&mut tx, &order_key, message).await;
                    assert_eq!(enqueued.unwrap(), Enqueued::New);
                    if id % 2 == 0 {
                        tx.rollback().await.unwrap();
                        return None;
                    }
                    let won = tx.commit(won).await.unwrap();
                    assert_eq!(won.effect_key(), key);
                    Some((id, key))
                }));
            }
        }
        let mut committed = Vec::new();
        for task in tasks {
            committed.extend(task.await.unwrap());
        }
        committed.sort();
        let ids: Vec<i64> = committed.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [1, 3, 5, 7, 9], "one committed win per odd row");
        for (_, key) in &committed {
            assert_eq!(messages(&db, Some(key)).await, 1, "{key}");
        }
        assert_eq!(messages(&db, None).await, 5);
        for id in [2_i64, 4, 6, 8, 10] {
            assert_eq!(db.status(id).await.as_deref(), Some("pending"));
        }
    }

    /// An empty or over-long id, order key or topic is `BadKey`, naming
    /// the field, and nothing is written.
    async fn bad_messages_are_refused_before_anything_is_written(db: Db<DB>) {
        table(&db).await;
        let long = "x".repeat(256);
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        for (id, order_key, topic, field) in [
            ("", "1", "t", "message id"),
            (long.as_str(), "1", "t", "message id"),
            ("m", "", "t", "order key"),
            ("m", long.as_str(), "t", "order key"),
            ("m", "1", "", "topic"),
            ("m", "1", long.as_str(), "topic"),
        ] {
            let message = Message {
                id,
                topic,
                payload: b"",
            };
            match outbox::enqueue(&mut tx, order_key, message).await {
                Err(Error::BadKey { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{other:?}"),
            }
        }
        tx.commit(()).await.unwrap();
        assert_eq!(messages(&db, None).await, 0);
    }
}
