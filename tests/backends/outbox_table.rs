//! The outbox table: `outbox::enqueue` writes a message in the
//! transaction of the work it announces, on every backend. A message
//! commits with its work and only then; a rollback writes nothing; an id
//! written before is a duplicate. The relay publishes what is due to the
//! real NATS JetStream server, each message once and each order key's in
//! order, and gives up on (and requeues) what a publisher refuses.

use crate::common;

use std::sync::Arc;

use common::{Db, PayoutStatus, TestBackend};
use stateguard::bounds::Key;
use stateguard::ddl::Dialect;
use stateguard::outbox::{
    self, Enqueued, JetStream, Message, MessageState, Published, Publisher, Relay,
};
use stateguard::{Error, Outcome, Tx};
use tokio::sync::Barrier;

backend_tests! {
    impl Tests {
        "outbox_once" => a_message_commits_with_its_work_once,
        "outbox_race" => only_committed_wins_leave_a_message (flavor = "multi_thread", worker_threads = 4),
        "outbox_bad_input" => bad_messages_are_refused_before_anything_is_written,
        "outbox_relay" => the_relay_publishes_each_message_once_in_order,
        "outbox_dead" => a_refused_message_is_given_up_and_requeued,
        "outbox_overtaken" => a_pass_that_lost_its_lease_marks_nothing,
        "outbox_prune" => published_messages_are_pruned_in_bounded_steps,
        "outbox_relays" => racing_relays_publish_each_message_once (flavor = "multi_thread", worker_threads = 4),
        "outbox_broker_down" => a_broker_down_loses_and_doubles_nothing (flavor = "multi_thread", worker_threads = 2),
    }
}

/// The outbox table, from its DDL.
pub(crate) async fn table<DB: TestBackend>(db: &Db<DB>) {
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

/// How many messages the outbox holds unpublished.
async fn unpublished<DB: TestBackend>(db: &Db<DB>) -> i64 {
    let sql = match DB::DIALECT {
        Dialect::MySql => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox WHERE published_at IS NULL"
        }
        _ => "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE published_at IS NULL",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (left,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    left
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

/// `per_key` messages for each of `keys` order keys, `payout:{key}:{n}`
/// with the payload `{key}:{n}`, written in one transaction.
async fn enqueue_keys<DB: TestBackend>(db: &Db<DB>, keys: usize, per_key: usize, topic: &str) {
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    for n in 0..per_key {
        for key in 0..keys {
            let (id, payload) = (format!("payout:{key}:{n}"), format!("{key}:{n}"));
            let message = Message {
                id: &id,
                topic,
                payload: payload.as_bytes(),
            };
            let order_key = key.to_string();
            let enqueued = outbox::enqueue(&mut tx, &order_key, message);
            assert_eq!(enqueued.await.unwrap(), Enqueued::New);
        }
    }
    tx.commit(()).await.unwrap();
}

/// Stream `name` holds the messages of [`enqueue_keys`], each once, and
/// each key's in the order written.
async fn assert_each_once_in_order(
    context: &async_nats::jetstream::Context,
    name: &str,
    keys: usize,
    per_key: usize,
) {
    let mut stream = context.get_stream(name).await.unwrap();
    let stored = stream.info().await.unwrap().state.messages;
    assert_eq!(stored, (keys * per_key) as u64, "each id once");
    let mut seen: Vec<Vec<usize>> = vec![Vec::new(); keys];
    for sequence in 1..=stored {
        let message = stream.get_raw_message(sequence).await.unwrap();
        let payload = String::from_utf8(message.payload.to_vec()).unwrap();
        let (key, n) = payload.split_once(':').unwrap();
        seen[key.parse::<usize>().unwrap()].push(n.parse().unwrap());
    }
    let in_order: Vec<usize> = (0..per_key).collect();
    assert!(seen.iter().all(|ns| ns == &in_order), "{seen:?}");
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

    /// 20 messages of 5 order keys, four each, relayed to a JetStream
    /// stream: each pass takes at most one message per key (the earliest
    /// unpublished), the stream ends with every id once and each key's in
    /// the order written, every row is marked published, and a pass after
    /// that takes nothing.
    async fn the_relay_publishes_each_message_once_in_order(db: Db<DB>) {
        let test = format!(
            "outbox_table::the_relay_publishes_each_message_once_{:?}",
            DB::DIALECT
        );
        let Some((context, name)) = crate::outbox::stream_of_its_own(&test).await else {
            return;
        };
        table(&db).await;
        let topic = format!("{name}.payout");
        enqueue_keys(&db, 5, 4, &topic).await;
        let relay = Relay::new(JetStream::new(context.clone()));
        let mut passes = Vec::new();
        loop {
            let pass = relay.pass(&db.pool).await.unwrap();
            if pass.taken() == 0 {
                break;
            }
            assert_eq!(pass.published(), pass.taken(), "{pass:?}");
            passes.push(pass.published());
        }
        assert_eq!(passes, [5, 5, 5, 5], "one message per key and pass");
        assert_each_once_in_order(&context, &name, 5, 4).await;
        assert_eq!(unpublished(&db).await, 0);
        context.delete_stream(&name).await.unwrap();
    }

    /// A publisher that refuses every message: with three attempts and no
    /// delay, the message is retried twice and given up at the third, a
    /// later message of its key waits behind it, and after a requeue a
    /// publisher that accepts sends both, in order.
    /// A pass whose lease ran out while it published, and whose message
    /// another pass took over, published and marked, marks nothing of
    /// that message and counts it lost; it marks the rest, in the one
    /// statement that marks a batch.
    async fn a_pass_that_lost_its_lease_marks_nothing(db: Db<DB>) {
        table(&db).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        for (key, id) in [("a", "a:1"), ("b", "b:1"), ("c", "c:1")] {
            let message = Message {
                id,
                topic: "payout.sent",
                payload: b"{}",
            };
            outbox::enqueue(&mut tx, key, message).await.unwrap();
        }
        tx.commit(()).await.unwrap();
        let other = Arc::new(std::sync::Mutex::new(Vec::new()));
        let overtaken = Relay::new(Overtaken {
            pool: db.pool.clone(),
            other: other.clone(),
        });
        let pass = overtaken.pass(&db.pool).await.unwrap();
        assert_eq!(
            (pass.taken(), pass.published(), pass.lost()),
            (3, 2, 1),
            "{pass:?}"
        );
        assert_eq!(*other.lock().unwrap(), ["b:1"]);
        assert_eq!(unpublished(&db).await, 0);
        assert_eq!(overtaken.pass(&db.pool).await.unwrap().taken(), 0);
    }

    /// `prune` removes published messages older than its window, at most
    /// its limit per call, oldest first; given-up and waiting messages
    /// stay.
    async fn published_messages_are_pruned_in_bounded_steps(db: Db<DB>) {
        table(&db).await;
        let enqueue = |ids: &'static [&'static str]| {
            let pool = db.pool.clone();
            async move {
                let mut tx = Tx::begin(&pool).await.unwrap();
                for id in ids {
                    let message = Message {
                        id,
                        topic: "payout.sent",
                        payload: b"{}",
                    };
                    outbox::enqueue(&mut tx, id, message).await.unwrap();
                }
                tx.commit(()).await.unwrap();
            }
        };
        enqueue(&["a:1", "b:1", "c:1", "d:1", "e:1", "x:1"]).await;
        let pass = Relay::new(RefuseX)
            .attempts(1)
            .pass(&db.pool)
            .await
            .unwrap();
        assert_eq!((pass.published(), pass.given_up()), (5, 1), "{pass:?}");
        enqueue(&["w:1"]).await;
        let window = std::time::Duration::from_secs(3600);
        assert_eq!(outbox::prune(&db.pool, window, 100).await.unwrap(), 0);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let prune = |limit| outbox::prune(&db.pool, std::time::Duration::ZERO, limit);
        assert_eq!(prune(2).await.unwrap(), 2);
        assert_eq!(messages(&db, Some("a:1")).await, 0, "oldest first");
        assert_eq!(messages(&db, Some("c:1")).await, 1);
        assert_eq!(prune(10).await.unwrap(), 3);
        assert_eq!(prune(10).await.unwrap(), 0);
        assert_eq!(messages(&db, None).await, 2);
        assert_eq!(outbox::dead_letters(&db.pool, 10).await.unwrap().len(), 1);
        assert_eq!(
            unpublished(&db).await,
            2,
            "the dead letter and the waiting message"
        );
    }

    async fn a_refused_message_is_given_up_and_requeued(db: Db<DB>) {
        table(&db).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        for id in ["payout:1:0", "payout:1:1"] {
            let message = Message {
                id,
                topic: "payout.sent",
                payload: b"{}",
            };
            outbox::enqueue(&mut tx, "1", message).await.unwrap();
        }
        tx.commit(()).await.unwrap();
        // What `status` tells of the first message: (state, attempts, last error).
        let status = |id: &'static str| {
            let pool = db.pool.clone();
            async move {
                let status = outbox::status(&pool, id).await.unwrap()?;
                let error = status.last_error().map(str::to_owned);
                Some((status.state(), status.attempts(), error))
            }
        };
        let down = || Some("the broker is down".to_owned());
        assert_eq!(
            status("payout:1:0").await,
            Some((MessageState::Waiting, 0, None))
        );
        let refusing = Relay::new(Refuse)
            .attempts(3)
            .retry(std::time::Duration::ZERO, std::time::Duration::ZERO);
        let passes: Vec<(usize, usize, usize)> = {
            let mut passes = Vec::new();
            for _ in 0..4 {
                let pass = refusing.pass(&db.pool).await.unwrap();
                passes.push((pass.taken(), pass.retried(), pass.given_up()));
                if passes.len() == 1 {
                    let waiting = Some((MessageState::Waiting, 1, down()));
                    assert_eq!(status("payout:1:0").await, waiting);
                }
            }
            passes
        };
        assert_eq!(passes, [(1, 1, 0), (1, 1, 0), (1, 0, 1), (0, 0, 0)]);
        assert_eq!(
            status("payout:1:0").await,
            Some((MessageState::Dead, 3, down()))
        );
        assert_eq!(
            status("payout:1:1").await,
            Some((MessageState::Waiting, 0, None))
        );
        assert_eq!(status("payout:7:0").await, None, "never written");
        let dead = outbox::dead_letters(&db.pool, 10).await.unwrap();
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!(
            (dead[0].id(), dead[0].topic(), dead[0].attempts()),
            ("payout:1:0", "payout.sent", 3)
        );
        assert_eq!(dead[0].last_error(), Some("the broker is down"));
        let requeue = |id| outbox::requeue(&db.pool, id);
        assert!(!requeue("payout:1:1").await.unwrap(), "not given up");
        assert!(!requeue("payout:7:0").await.unwrap(), "never written");
        assert!(requeue("payout:1:0").await.unwrap());
        assert!(outbox::dead_letters(&db.pool, 10).await.unwrap().is_empty());
        let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
        let accepting = Relay::new(Record(sent.clone()));
        for expected in [1, 1, 0] {
            assert_eq!(
                accepting.pass(&db.pool).await.unwrap().published(),
                expected
            );
        }
        assert_eq!(*sent.lock().unwrap(), ["payout:1:0", "payout:1:1"]);
        for id in ["payout:1:0", "payout:1:1"] {
            let status = status(id).await.map(|(state, ..)| state);
            assert_eq!(status, Some(MessageState::Published), "{id}");
        }
    }

    /// Four relays race over 200 messages of 20 order keys, through one
    /// JetStream publisher each: the stream ends with every id once, no
    /// relay published a message another had, and each key's messages are
    /// in the stream in the order written.
    async fn racing_relays_publish_each_message_once(db: Db<DB>) {
        const KEYS: usize = 20;
        const PER_KEY: usize = 10;
        let test = format!("outbox_table::racing_relays_{:?}", DB::DIALECT);
        let Some((context, name)) = crate::outbox::stream_of_its_own(&test).await else {
            return;
        };
        table(&db).await;
        let topic = format!("{name}.payout");
        enqueue_keys(&db, KEYS, PER_KEY, &topic).await;
        let mut relays = Vec::new();
        for _ in 0..4 {
            let (pool, context) = (db.pool.clone(), context.clone());
            relays.push(tokio::spawn(async move {
                let relay = Relay::new(JetStream::new(context)).batch(7);
                let (mut published, mut duplicates, mut idle) = (0, 0, 0);
                // Until no pass of this relay has found anything for a
                // while: the others may hold the rest.
                while idle < 20 {
                    let pass = relay.pass(&pool).await.unwrap();
                    assert_eq!(pass.lost(), 0, "{pass:?}");
                    published += pass.published();
                    duplicates += pass.duplicates();
                    idle = if pass.taken() == 0 { idle + 1 } else { 0 };
                    if pass.taken() == 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
                (published, duplicates)
            }));
        }
        let (mut published, mut duplicates) = (0, 0);
        for relay in relays {
            let (p, d) = relay.await.unwrap();
            published += p;
            duplicates += d;
        }
        assert_eq!((published, duplicates), (KEYS * PER_KEY, 0));
        assert_each_once_in_order(&context, &name, KEYS, PER_KEY).await;
        context.delete_stream(&name).await.unwrap();
    }

    /// A NATS server of the test's own, killed while a relay publishes 100
    /// messages of 10 order keys, and started again on the same storage
    /// half a second later: every pass returns, what the server did not
    /// take is retried with the publisher's typed error recorded, and in
    /// the end the stream holds each id once, each key's in the order
    /// written, and every row is marked published.
    async fn a_broker_down_loses_and_doubles_nothing(db: Db<DB>) {
        const KEYS: usize = 10;
        const PER_KEY: usize = 10;
        if common::server_url("STATEGUARD_NATS_URL", "outbox_table::a_broker_down").is_none() {
            return;
        }
        table(&db).await;
        let mut nats = PrivateNats::start().await;
        // A name of its own: were another test's server ever on this port
        // while this one is down, the streams would not mix.
        let stream = format!("down_{:?}_{}", DB::DIALECT, std::process::id());
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(nats.url())
            .await
            .unwrap();
        let context = async_nats::jetstream::new(client);
        context
            .create_stream(async_nats::jetstream::stream::Config {
                name: stream.clone(),
                subjects: vec![format!("{stream}.>")],
                duplicate_window: std::time::Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .unwrap();
        enqueue_keys(&db, KEYS, PER_KEY, &format!("{stream}.payout")).await;
        let relay = Relay::new(JetStream::new(context.clone()))
            .batch(5)
            .lease(std::time::Duration::from_millis(500))
            .attempts(1_000)
            .retry(
                std::time::Duration::from_millis(20),
                std::time::Duration::from_millis(200),
            );
        let (mut published, mut retried, mut duplicates, mut down) = (0, 0, 0, false);
        for _ in 0..2_000 {
            let pass = relay.pass(&db.pool).await.unwrap();
            published += pass.published();
            retried += pass.retried();
            duplicates += pass.duplicates();
            assert_eq!(pass.given_up(), 0, "{pass:?}");
            if !down && published >= 30 {
                nats.kill().await;
                down = true;
                // Passes while it is down, then it comes back.
                for _ in 0..2 {
                    let pass = relay.pass(&db.pool).await.unwrap();
                    published += pass.published();
                    retried += pass.retried();
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                nats.restart().await;
            }
            if pass.taken() == 0 {
                if unpublished(&db).await == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        assert!(
            down && retried > 0,
            "the server went down under the relay: down {down}, {published} published, {retried} retried"
        );
        common::say(&format!(
            "broker down under the relay ({:?}): {retried} publishes retried, {duplicates} \
             republished ids kept once by the stream",
            DB::DIALECT
        ));
        assert_eq!(unpublished(&db).await, 0);
        assert_eq!(
            published,
            KEYS * PER_KEY,
            "{retried} retried, {duplicates} duplicates"
        );
        assert_each_once_in_order(&context, &stream, KEYS, PER_KEY).await;
        nats.kill().await;
    }
}

/// A publisher that refuses every message, as a broker that is down.
pub(crate) struct Refuse;

impl Publisher for Refuse {
    type Error = std::io::Error;

    async fn publish(&self, _: Message<'_>) -> Result<Published, Self::Error> {
        Err(std::io::Error::other("the broker is down"))
    }
}

/// A publisher that, while it publishes `b:1`, lets that message's lease
/// run out and has another relay pass take it over, publish and mark it:
/// a relay that stalled past its lease, as seen from the outside.
struct Overtaken<DB: TestBackend> {
    pool: sqlx::Pool<DB>,
    other: Arc<std::sync::Mutex<Vec<String>>>,
}

impl<DB: TestBackend> Publisher for Overtaken<DB> {
    type Error = std::convert::Infallible;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        if message.id == "b:1" {
            let expire = match DB::DIALECT {
                Dialect::MySql => {
                    "UPDATE stateguard_outbox SET locked_until = UTC_TIMESTAMP(3) - INTERVAL 1 \
                     HOUR WHERE message_id = 'b:1'"
                }
                Dialect::Postgres => {
                    "UPDATE stateguard_outbox SET locked_until = statement_timestamp() - \
                     INTERVAL '1 hour' WHERE message_id = 'b:1'"
                }
                _ => {
                    "UPDATE stateguard_outbox SET locked_until = strftime('%Y-%m-%d %H:%M:%f', \
                     'now', '-1 hours') WHERE message_id = 'b:1'"
                }
            };
            let mut conn = self.pool.acquire().await.unwrap();
            DB::execute(&mut conn, expire, &[]).await.unwrap();
            drop(conn);
            let pass = Relay::new(Record(self.other.clone()))
                .pass(&self.pool)
                .await
                .unwrap();
            assert_eq!((pass.taken(), pass.published()), (1, 1), "{pass:?}");
        }
        Ok(Published::new(false))
    }
}

/// A publisher that refuses the messages whose id starts with `x` and
/// accepts the rest.
struct RefuseX;

impl Publisher for RefuseX {
    type Error = std::io::Error;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        match message.id.starts_with('x') {
            true => Err(std::io::Error::other("refused")),
            false => Ok(Published::new(false)),
        }
    }
}

/// A publisher that accepts every message and records its id.
struct Record(Arc<std::sync::Mutex<Vec<String>>>);

impl Publisher for Record {
    type Error = std::convert::Infallible;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        self.0.lock().unwrap().push(message.id.to_owned());
        Ok(Published::new(false))
    }
}

/// A NATS server with JetStream of the test's own, on a free port, its
/// storage in a temporary folder that outlives a kill, so that a restart
/// finds its streams again.
struct PrivateNats {
    port: u16,
    store: tempfile::TempDir,
    child: Option<tokio::process::Child>,
}

impl PrivateNats {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap();
        let mut nats = PrivateNats {
            port,
            store: tempfile::tempdir().unwrap(),
            child: None,
        };
        nats.restart().await;
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server, and waits until it takes connections.
    async fn restart(&mut self) {
        let child = tokio::process::Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .kill_on_drop(true)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server on the PATH");
        self.child = Some(child);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("nats-server did not start on port {}", self.port);
    }

    /// SIGKILLs the server, and waits until it is gone.
    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }
}
