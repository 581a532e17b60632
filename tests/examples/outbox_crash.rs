//! `examples/outbox_relay` SIGKILLed mid-batch, 20 times, while two of
//! its processes relay 5,000 messages of 50 order keys to the real NATS
//! JetStream server: afterwards the stream holds each message id exactly
//! once, each key's messages in the order written, and every outbox row
//! is marked published. What a killed relay had published but not marked
//! is published again by the next one under the same id, and the stream
//! keeps one copy (the rows taken more than once are counted and printed).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sqlx::{MySqlPool, PgPool, Pool, SqlitePool};
use stateguard::Backend;
use stateguard::ddl::Dialect;
use stateguard::outbox::{self, Message};

use crate::common::server_url;
use crate::payouts_api_crash::{example_binary, on_mariadb, on_postgres, runtime};

const KEYS: usize = 50;
const PER_KEY: usize = 100;
const KILLS: usize = 20;

/// A relay process, SIGKILLed if the test panics.
struct RelayProcess(Child);

impl RelayProcess {
    fn start(database: &str, nats: &str) -> Self {
        let child = Command::new(example_binary("outbox_relay"))
            .env("DATABASE_URL", database)
            .env("NATS_URL", nats)
            .env("OUTBOX_LEASE_MS", "500")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the relay");
        RelayProcess(child)
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The messages, written in one transaction.
async fn seed<DB: Backend>(pool: &Pool<DB>, dialect: Dialect, subject: &str)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    for statement in outbox::ddl(dialect) {
        sqlx::raw_sql(*statement)
            .execute(pool)
            .await
            .expect("the outbox table");
    }
    let mut tx = stateguard::Tx::begin(pool).await.expect("begin");
    for n in 0..PER_KEY {
        for key in 0..KEYS {
            let (id, payload) = (format!("payout:{key}:{n}"), format!("{key}:{n}"));
            let message = Message {
                id: &id,
                topic: subject,
                payload: payload.as_bytes(),
            };
            let order_key = key.to_string();
            outbox::enqueue(&mut tx, &order_key, message)
                .await
                .expect("enqueue");
        }
    }
    tx.commit(()).await.expect("commit");
}

/// How many rows are unpublished, and how many were taken more than once.
async fn rows<DB: Backend>(pool: &Pool<DB>, dialect: Dialect) -> (i64, i64)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
    DB::Arguments: for<'q> sqlx::IntoArguments<DB>,
{
    let sql = match dialect {
        Dialect::MySql => {
            "SELECT CAST(SUM(published_at IS NULL) AS SIGNED), CAST(SUM(attempts > 1) AS SIGNED) \
             FROM stateguard_outbox"
        }
        _ => {
            "SELECT CAST(SUM(CASE WHEN published_at IS NULL THEN 1 ELSE 0 END) AS BIGINT), \
             CAST(SUM(CASE WHEN attempts > 1 THEN 1 ELSE 0 END) AS BIGINT) FROM stateguard_outbox"
        }
    };
    sqlx::query_as(sql)
        .fetch_one(pool)
        .await
        .expect("the outbox's rows")
}

async fn kill_relays<DB: Backend>(pool: Pool<DB>, dialect: Dialect, database: &str, test: &str)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
    DB::Arguments: for<'q> sqlx::IntoArguments<DB>,
{
    let Some(nats) = server_url("STATEGUARD_NATS_URL", test) else {
        return;
    };
    let client = async_nats::connect(&nats).await.expect("the NATS server");
    let context = async_nats::jetstream::new(client);
    let name = format!("sg_relay_crash_{}_{:?}", std::process::id(), dialect);
    let _ = context.delete_stream(&name).await;
    context
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            duplicate_window: Duration::from_secs(600),
            ..Default::default()
        })
        .await
        .expect("a JetStream stream");
    seed(&pool, dialect, &format!("{name}.payout")).await;
    let mut relays = [
        RelayProcess::start(database, &nats),
        RelayProcess::start(database, &nats),
    ];
    for kill in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let relay = &mut relays[kill % 2];
        relay.kill();
        *relay = RelayProcess::start(database, &nats);
    }
    // Until every row is published; the killed ones' leases run out first.
    for _ in 0..1_200 {
        if rows(&pool, dialect).await.0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(relays);
    let (unpublished, taken_again) = rows(&pool, dialect).await;
    assert_eq!(unpublished, 0, "every row published");
    let mut stream = context.get_stream(&name).await.expect("the stream");
    let stored = stream.info().await.expect("stream info").state.messages;
    assert_eq!(stored, (KEYS * PER_KEY) as u64, "each message id once");
    let mut seen: Vec<Vec<usize>> = vec![Vec::new(); KEYS];
    for sequence in 1..=stored {
        let message = stream.get_raw_message(sequence).await.expect("a message");
        let payload = String::from_utf8(message.payload.to_vec()).expect("text");
        let (key, n) = payload.split_once(':').expect("key:n");
        seen[key.parse::<usize>().expect("key")].push(n.parse().expect("n"));
    }
    let in_order: Vec<usize> = (0..PER_KEY).collect();
    assert!(seen.iter().all(|ns| ns == &in_order), "order per key");
    crate::common::say(&format!(
        "{test}: {KILLS} relays killed; {taken_again} messages taken again after a kill, \
         the stream kept each id once"
    ));
    context
        .delete_stream(&name)
        .await
        .expect("delete the stream");
    pool.close().await;
}

#[test]
fn sqlite_relays_killed_mid_batch_publish_each_message_once() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("outbox.db").display()
    );
    runtime().block_on(async {
        let pool = SqlitePool::connect(&url).await.expect("SQLite");
        kill_relays(pool, Dialect::Sqlite, &url, "sqlite_relays_killed").await;
    });
}

#[test]
fn postgres_relays_killed_mid_batch_publish_each_message_once() {
    on_postgres(
        "postgres_relays_killed",
        "sg_relay_crash",
        [
            "DROP SCHEMA IF EXISTS sg_relay_crash CASCADE",
            "CREATE SCHEMA sg_relay_crash",
        ],
        |env| on_server(env, Dialect::Postgres, "postgres_relays_killed"),
    );
}

#[test]
fn mariadb_relays_killed_mid_batch_publish_each_message_once() {
    on_mariadb(
        "mariadb_relays_killed",
        "sg_relay_crash",
        [
            "DROP DATABASE IF EXISTS sg_relay_crash",
            "CREATE DATABASE sg_relay_crash",
        ],
        |env| on_server(env, Dialect::MySql, "mariadb_relays_killed"),
    );
}

/// [`kill_relays`] on the database of `env`'s `DATABASE_URL`.
fn on_server(env: Vec<(&'static str, String)>, dialect: Dialect, test: &str) {
    let url = env
        .into_iter()
        .find_map(|(name, value)| (name == "DATABASE_URL").then_some(value))
        .expect("DATABASE_URL");
    runtime().block_on(async {
        match dialect {
            Dialect::MySql => {
                let pool = MySqlPool::connect(&url).await.expect("MariaDB");
                kill_relays(pool, dialect, &url, test).await;
            }
            _ => {
                let pool = PgPool::connect(&url).await.expect("PostgreSQL");
                kill_relays(pool, dialect, &url, test).await;
            }
        }
    });
}
