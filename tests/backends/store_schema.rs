//! The fixed-table stores in a schema named at compile time
//! (`stateguard::stores!`): every statement finds its table there, not
//! through the search path, on every backend: a PostgreSQL schema, a
//! MySQL/MariaDB database, an attached SQLite database.

use crate::common::TestBackend;

use std::time::Duration;

use sqlx::Pool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use stateguard::idempotency::{self, Begun, Request};
use stateguard::inbox::Received;
use stateguard::outbox::{Enqueued, Message, Published, Publisher, Relay};
use stateguard::{Stores, Tx};

/// The schema the tests' stores live in. Fixed at compile time, as in an
/// application: one test per backend uses it, each dropping its tables
/// first.
static SCHEMA: Stores = stateguard::stores!(schema = "sg_store_schema");

/// The stores' rows in the schema: keys, messages received, messages to
/// publish.
const COUNTS: &str = "SELECT (SELECT CAST(COUNT(*) AS BIGINT) FROM \"sg_store_schema\".stateguard_idempotency), \
                      (SELECT CAST(COUNT(*) AS BIGINT) FROM \"sg_store_schema\".stateguard_inbox), \
                      (SELECT CAST(COUNT(*) AS BIGINT) FROM \"sg_store_schema\".stateguard_outbox)";
const COUNTS_MYSQL: &str = "SELECT (SELECT CAST(COUNT(*) AS SIGNED) FROM `sg_store_schema`.stateguard_idempotency), \
                            (SELECT CAST(COUNT(*) AS SIGNED) FROM `sg_store_schema`.stateguard_inbox), \
                            (SELECT CAST(COUNT(*) AS SIGNED) FROM `sg_store_schema`.stateguard_outbox)";

/// The same, of the tables found through the search path: the test's own
/// schema or database, SQLite's `main`.
const SEARCH_PATH_POSTGRES: &str = "SELECT (SELECT CAST(COUNT(*) AS BIGINT) FROM sg_store_in_schema.stateguard_idempotency), \
                                    (SELECT CAST(COUNT(*) AS BIGINT) FROM sg_store_in_schema.stateguard_inbox), \
                                    (SELECT CAST(COUNT(*) AS BIGINT) FROM sg_store_in_schema.stateguard_outbox)";
const SEARCH_PATH_MYSQL: &str = "SELECT (SELECT CAST(COUNT(*) AS SIGNED) FROM sg_store_in_schema.stateguard_idempotency), \
                                 (SELECT CAST(COUNT(*) AS SIGNED) FROM sg_store_in_schema.stateguard_inbox), \
                                 (SELECT CAST(COUNT(*) AS SIGNED) FROM sg_store_in_schema.stateguard_outbox)";
const SEARCH_PATH_SQLITE: &str = "SELECT (SELECT COUNT(*) FROM main.stateguard_idempotency), \
                                  (SELECT COUNT(*) FROM main.stateguard_inbox), \
                                  (SELECT COUNT(*) FROM main.stateguard_outbox)";

/// Claims, completes and replays a key, receives a message twice, writes
/// a message to publish, and prunes the keys and the received messages,
/// all through `SCHEMA`; the same tables found through the search path
/// (made here too) stay empty.
async fn the_stores_live_in_their_schema<DB: TestBackend>(
    pool: &Pool<DB>,
    unqualified: &'static str,
) where
    i64: stateguard::bounds::Key<DB>,
{
    let (store, inbox, outbox) = (SCHEMA.idempotency(), SCHEMA.inbox(), SCHEMA.outbox());
    assert_eq!(outbox.table(), "sg_store_schema.stateguard_outbox");
    assert_eq!(store.table(), "sg_store_schema.stateguard_idempotency");
    let mut conn = pool.acquire().await.unwrap();
    let search_path = Stores::search_path();
    for statement in [store, search_path.idempotency()]
        .iter()
        .flat_map(|s| s.ddl(DB::DIALECT))
        .chain(inbox.ddl(DB::DIALECT))
        .chain(search_path.inbox().ddl(DB::DIALECT))
        .chain(outbox.ddl(DB::DIALECT))
        .chain(search_path.outbox().ddl(DB::DIALECT))
    {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    drop(conn);

    let request = Request::new("acme:POST /payouts", "key-1", "fingerprint").unwrap();
    let Begun::New(ticket) = store
        .begin(pool, &request, idempotency::DEFAULT_LEASE)
        .await
        .unwrap()
    else {
        panic!("a new key");
    };
    let mut tx = Tx::begin(pool).await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "bank", "event-1").await.unwrap(),
        Received::First
    );
    let message = Message {
        id: "payout:1:created:0",
        topic: "payout.created",
        payload: b"{}",
    };
    assert_eq!(
        outbox.enqueue(&mut tx, "1", message).await.unwrap(),
        Enqueued::New
    );
    ticket
        .complete(&mut tx, 201, b"created".to_vec())
        .await
        .unwrap();
    tx.commit(()).await.unwrap();

    match store
        .begin(pool, &request, idempotency::DEFAULT_LEASE)
        .await
        .unwrap()
    {
        Begun::Replay(stored) => {
            assert_eq!((stored.status(), stored.body()), (201, &b"created"[..]))
        }
        other => panic!("a replay, not {other:?}"),
    }
    let mut tx = Tx::begin(pool).await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "bank", "event-1").await.unwrap(),
        Received::Duplicate
    );
    tx.rollback().await.unwrap();

    let counts = match DB::DIALECT {
        stateguard::ddl::Dialect::MySql => COUNTS_MYSQL,
        _ => COUNTS,
    };
    let mut conn = pool.acquire().await.unwrap();
    let rows: (i64, i64, i64) = DB::fetch_one(&mut conn, counts, &[]).await.unwrap();
    assert_eq!(rows, (1, 1, 1), "one key and two messages, in the schema");

    let rows: (i64, i64, i64) = DB::fetch_one(&mut conn, unqualified, &[]).await.unwrap();
    assert_eq!(rows, (0, 0, 0), "nothing in the tables of the search path");
    drop(conn);

    assert_eq!(store.prune(pool, Duration::ZERO, 10).await.unwrap(), 1);
    assert_eq!(inbox.prune(pool, Duration::ZERO, 10).await.unwrap(), 1);
    let mut conn = pool.acquire().await.unwrap();
    let rows: (i64, i64, i64) = DB::fetch_one(&mut conn, counts, &[]).await.unwrap();
    assert_eq!(
        rows,
        (0, 0, 1),
        "the message to publish waits for its relay"
    );

    // A machine whose `outbox = "…"` names the schema's table: its move
    // writes its message there, and the schema's relay publishes both.
    for statement in [
        "DROP TABLE IF EXISTS announced",
        "CREATE TABLE announced (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, version \
         BIGINT NOT NULL DEFAULT 0)",
        "INSERT INTO announced (id, status) VALUES (1, 'open')",
    ] {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    drop(conn);
    assert!(
        Announced::close()
            .apply(pool, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    let mut conn = pool.acquire().await.unwrap();
    let rows: (i64, i64, i64) = DB::fetch_one(&mut conn, counts, &[]).await.unwrap();
    assert_eq!(rows, (0, 0, 2), "the move's message, in the schema");
    let rows: (i64, i64, i64) = DB::fetch_one(&mut conn, unqualified, &[]).await.unwrap();
    assert_eq!(rows, (0, 0, 0), "nothing in the tables of the search path");
    drop(conn);
    let relay = Relay::new(Accept).outbox(SCHEMA.outbox());
    assert_eq!(relay.pass(pool).await.unwrap().published(), 2);
    assert_eq!(relay.pass(pool).await.unwrap().taken(), 0);
}

/// An order closed once, announced in the schema's outbox.
#[derive(stateguard::StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "announced",
    column = "status",
    key = "id",
    version = "version",
    outbox = "sg_store_schema.stateguard_outbox"
)]
enum Announced {
    #[state(initial)]
    #[transition(close -> Closed, emit("order.closed"))]
    Open,
    Closed,
}

/// A publisher that accepts every message.
struct Accept;

impl Publisher for Accept {
    type Error = std::convert::Infallible;

    async fn publish(&self, _: Message<'_>) -> Result<Published, Self::Error> {
        Ok(Published::new(false))
    }
}

#[tokio::test]
async fn postgres() {
    let Some(db) = open!(Postgres, "store_in_schema") else {
        return;
    };
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        "CREATE SCHEMA IF NOT EXISTS sg_store_schema",
        "DROP TABLE IF EXISTS sg_store_schema.stateguard_idempotency, sg_store_schema.stateguard_inbox, \
         sg_store_schema.stateguard_outbox",
    ] {
        <sqlx::Postgres as TestBackend>::execute(&mut conn, statement, &[])
            .await
            .unwrap();
    }
    drop(conn);
    the_stores_live_in_their_schema(&db.pool, SEARCH_PATH_POSTGRES).await;
}

#[tokio::test]
async fn mysql() {
    let Some(db) = open!(Mysql, "store_in_schema") else {
        return;
    };
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        "CREATE DATABASE IF NOT EXISTS sg_store_schema",
        "DROP TABLE IF EXISTS sg_store_schema.stateguard_idempotency, sg_store_schema.stateguard_inbox, \
         sg_store_schema.stateguard_outbox",
    ] {
        <sqlx::MySql as TestBackend>::execute(&mut conn, statement, &[])
            .await
            .unwrap();
    }
    drop(conn);
    the_stores_live_in_their_schema(&db.pool, SEARCH_PATH_MYSQL).await;
}

/// SQLite's schema is a database attached to every connection under the
/// schema's name. (SQLite looks an unqualified name up in `main`, then in
/// each attached database: the tables in `main` keep the default store's
/// statements off the attached ones.)
#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let attached = dir
        .path()
        .join("store_schema.db")
        .to_string_lossy()
        .into_owned();
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .after_connect(move |conn, _| {
            let attached = attached.clone();
            Box::pin(async move {
                sqlx::query("ATTACH DATABASE ?1 AS sg_store_schema")
                    .bind(attached)
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        })
        .connect_with(
            SqliteConnectOptions::new()
                .filename(dir.path().join("main.db"))
                .create_if_missing(true),
        )
        .await
        .unwrap();
    the_stores_live_in_their_schema(&pool, SEARCH_PATH_SQLITE).await;
}
