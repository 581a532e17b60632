//! Real databases for the integration tests: SQLite in a temporary file,
//! PostgreSQL in a schema of its own per test.
//!
//! Server-backed tests read `STATEGUARD_POSTGRES_URL`. Without it they print
//! why they were skipped and pass, unless `STATEGUARD_REQUIRE_SERVERS=1`
//! (set by CI) turns a missing server into a failure.

#![allow(dead_code)] // each test file uses its own part of the harness

use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Connection, MySqlPool, PgPool, SqlitePool};
use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending, set(attempts = "attempts + 1"))]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// A transfer with an in-flight state, a version column and a cycle
/// (`retry` leads back into `Sending`).
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
pub enum TransferStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    #[transition(retry -> Sending)]
    Failed,
    Cancelled,
}

/// Prints past libtest's output capture, so a skip is visible in a normal
/// `cargo test` run.
pub fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

fn require_servers() -> bool {
    std::env::var("STATEGUARD_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// The server URL in `var`, or `None` after saying why the test is skipped.
fn server_url(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !require_servers(),
                "{var} is unset but STATEGUARD_REQUIRE_SERVERS=1: `{test}` needs that server"
            );
            say(&format!("skipped `{test}`: {var} is unset"));
            None
        }
    }
}

/// PostgreSQL isolation levels, set as each connection's default so that
/// autocommit statements and `begin()` both run under it.
#[derive(Debug, Clone, Copy)]
pub enum Isolation {
    ReadCommitted,
    RepeatableRead,
    Serializable,
    /// MariaDB's REPEATABLE READ with `innodb_snapshot_isolation`: a write
    /// to a row changed since the snapshot fails with error 1020.
    Snapshot,
}

impl Isolation {
    /// `SET SESSION …` for MySQL and MariaDB.
    fn mysql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            Isolation::RepeatableRead => "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            Isolation::Serializable => "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            Isolation::Snapshot => {
                // MariaDB only, as is the setting.
                "SET SESSION tx_isolation = 'REPEATABLE-READ', \
                 SESSION innodb_snapshot_isolation = ON"
            }
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
            Isolation::Serializable => "serializable",
            Isolation::Snapshot => "repeatable read",
        }
    }
}

/// `open!(Sqlite, "name")`, `open!(Postgres, "name")` or
/// `open!(Postgres, "name", Isolation::Serializable)`: the test's own
/// database, or `None` when its server is not configured.
#[macro_export]
macro_rules! open {
    (Sqlite, $test:literal) => {
        $crate::common::Sqlite::open($test).await
    };
    (Postgres, $test:literal) => {
        $crate::open!(Postgres, $test, $crate::common::Isolation::ReadCommitted)
    };
    (Mysql, $test:literal) => {
        $crate::open!(Mysql, $test, $crate::common::Isolation::RepeatableRead)
    };
    (Mysql, $test:literal, $isolation:expr) => {
        $crate::common::Mysql::open_with(
            $test,
            [
                concat!("DROP DATABASE IF EXISTS sg_", $test),
                concat!("CREATE DATABASE sg_", $test),
            ],
            $isolation,
        )
        .await
    };
    (Postgres, $test:literal, $isolation:expr) => {
        $crate::common::Postgres::open_with(
            $test,
            [
                concat!("DROP SCHEMA IF EXISTS sg_", $test, " CASCADE"),
                concat!("CREATE SCHEMA sg_", $test),
            ],
            $isolation,
        )
        .await
    };
}

/// Seeds row 1, opens a transaction that reads it (`pending`), then moves the
/// row on from outside: the transaction is left holding a stale snapshot.
#[macro_export]
macro_rules! stale_transaction {
    ($db:expr) => {{
        $db.seed(1).await;
        let mut tx = stateguard::Tx::begin(&$db.pool).await.unwrap();
        let seen: String = sqlx::query_scalar("SELECT status FROM payouts WHERE id = 1")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(seen, "pending");
        let moved = $crate::common::PayoutStatus::start()
            .apply(&$db.pool, 1_i64)
            .await
            .unwrap();
        assert!(moved.is_applied());
        tx
    }};
}

pub struct Sqlite {
    pub pool: SqlitePool,
    _dir: tempfile::TempDir,
}

impl Sqlite {
    /// Moves every transfer's lease an hour into the past, as if its
    /// worker had stalled that long: the lease has run out, and its token
    /// changed.
    pub async fn backdate_leases(&self) {
        sqlx::query("UPDATE transfers SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours')")
            .execute(&self.pool)
            .await
            .expect("backdate leases");
    }

    /// A fresh file database in WAL mode with a pool of 8 connections.
    pub async fn open(_test: &str) -> Option<Self> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("test.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .expect("open SQLite");
        sqlx::query(
            "CREATE TABLE payouts (
                id INTEGER PRIMARY KEY,
                status TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                sent_at TEXT
            )",
        )
        .execute(&pool)
        .await
        .expect("create table");
        Some(Sqlite { pool, _dir: dir })
    }

    /// Rows `1..=n`, all `pending`.
    pub async fn seed(&self, n: i64) {
        sqlx::query(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
             INSERT INTO payouts (id, status) SELECT i, 'pending' FROM s",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed");
    }

    pub async fn status(&self, id: i64) -> Option<String> {
        sqlx::query_scalar("SELECT status FROM payouts WHERE id = ?1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .expect("read status")
    }

    pub async fn insert(&self, id: i64, status: &str) {
        sqlx::query("INSERT INTO payouts (id, status) VALUES (?1, ?2)")
            .bind(id)
            .bind(status)
            .execute(&self.pool)
            .await
            .expect("insert");
    }

    /// The status decoded through the derived `sqlx::Decode`.
    pub async fn status_as_enum(&self, id: i64) -> Result<PayoutStatus, sqlx::Error> {
        sqlx::query_scalar("SELECT status FROM payouts WHERE id = ?1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
    }

    pub async fn set_status_raw(&self, id: i64, status: &str) {
        sqlx::query("UPDATE payouts SET status = ?1 WHERE id = ?2")
            .bind(status)
            .bind(id)
            .execute(&self.pool)
            .await
            .expect("raw update");
    }

    /// `(attempts, sent_at IS NOT NULL)` of a row.
    pub async fn columns(&self, id: i64) -> (i64, bool) {
        sqlx::query_as("SELECT attempts, sent_at IS NOT NULL FROM payouts WHERE id = ?1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .expect("read columns")
    }

    pub async fn count_in(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM payouts WHERE status = ?1")
            .bind(status)
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    pub async fn total_attempts(&self) -> i64 {
        sqlx::query_scalar("SELECT SUM(attempts) FROM payouts")
            .fetch_one(&self.pool)
            .await
            .expect("sum attempts")
    }

    /// The `transfers` table of [`TransferStatus`], rows `1..=n` pending.
    pub async fn transfers(&self, n: i64) {
        sqlx::query(
            "CREATE TABLE transfers (
                id INTEGER PRIMARY KEY,
                status TEXT NOT NULL DEFAULT 'pending',
                version INTEGER NOT NULL DEFAULT 0,
                sending_since TEXT,
                sent_at TEXT
            )",
        )
        .execute(&self.pool)
        .await
        .expect("create transfers");
        sqlx::query(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
             INSERT INTO transfers (id) SELECT i FROM s",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed transfers");
    }

    /// `(status, version)` of a transfer.
    pub async fn transfer(&self, id: i64) -> (String, i64) {
        sqlx::query_as("SELECT status, version FROM transfers WHERE id = ?1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .expect("read transfer")
    }
}

pub struct Postgres {
    pub pool: PgPool,
}

impl Postgres {
    /// Moves every transfer's lease an hour into the past, as if its
    /// worker had stalled that long: the lease has run out, and its token
    /// changed.
    pub async fn backdate_leases(&self) {
        sqlx::query("UPDATE transfers SET sending_since = sending_since - INTERVAL '1 hour'")
            .execute(&self.pool)
            .await
            .expect("backdate leases");
    }

    /// A schema of the test's own, dropped and made anew, with every
    /// connection's default isolation set to `isolation`. Called through
    /// [`open!`], which writes the schema statements as literals.
    pub async fn open_with(
        test: &str,
        schema_sql: [&'static str; 2],
        isolation: Isolation,
    ) -> Option<Self> {
        let url = server_url("STATEGUARD_POSTGRES_URL", test)?;
        let schema = format!("sg_{test}");
        let mut admin = sqlx::PgConnection::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to PostgreSQL at {url}: {e}"));
        for statement in schema_sql {
            sqlx::query(statement)
                .execute(&mut admin)
                .await
                .expect("make schema");
        }
        admin.close().await.ok();
        let options = PgConnectOptions::from_str(&url)
            .expect("PostgreSQL URL")
            .options([
                ("search_path", schema.as_str()),
                ("default_transaction_isolation", isolation.sql()),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await
            .expect("PostgreSQL pool");
        sqlx::query(
            "CREATE TABLE payouts (
                id BIGINT PRIMARY KEY,
                status TEXT NOT NULL,
                attempts INT NOT NULL DEFAULT 0,
                sent_at TIMESTAMPTZ
            )",
        )
        .execute(&pool)
        .await
        .expect("create table");
        Some(Postgres { pool })
    }

    pub async fn seed(&self, n: i64) {
        sqlx::query(
            "INSERT INTO payouts (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed");
    }

    pub async fn status(&self, id: i64) -> Option<String> {
        sqlx::query_scalar("SELECT status FROM payouts WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .expect("read status")
    }

    pub async fn insert(&self, id: i64, status: &str) {
        sqlx::query("INSERT INTO payouts (id, status) VALUES ($1, $2)")
            .bind(id)
            .bind(status)
            .execute(&self.pool)
            .await
            .expect("insert");
    }

    /// The status decoded through the derived `sqlx::Decode`.
    pub async fn status_as_enum(&self, id: i64) -> Result<PayoutStatus, sqlx::Error> {
        sqlx::query_scalar("SELECT status FROM payouts WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
    }

    pub async fn set_status_raw(&self, id: i64, status: &str) {
        sqlx::query("UPDATE payouts SET status = $1 WHERE id = $2")
            .bind(status)
            .bind(id)
            .execute(&self.pool)
            .await
            .expect("raw update");
    }

    pub async fn columns(&self, id: i64) -> (i64, bool) {
        let (attempts, sent): (i32, bool) =
            sqlx::query_as("SELECT attempts, sent_at IS NOT NULL FROM payouts WHERE id = $1")
                .bind(id)
                .fetch_one(&self.pool)
                .await
                .expect("read columns");
        (i64::from(attempts), sent)
    }

    pub async fn count_in(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM payouts WHERE status = $1")
            .bind(status)
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    pub async fn total_attempts(&self) -> i64 {
        sqlx::query_scalar("SELECT SUM(attempts)::BIGINT FROM payouts")
            .fetch_one(&self.pool)
            .await
            .expect("sum attempts")
    }

    /// The `transfers` table of [`TransferStatus`], rows `1..=n` pending.
    pub async fn transfers(&self, n: i64) {
        sqlx::query(
            "CREATE TABLE transfers (
                id BIGINT PRIMARY KEY,
                status TEXT NOT NULL DEFAULT 'pending',
                version INT NOT NULL DEFAULT 0,
                sending_since TIMESTAMPTZ,
                sent_at TIMESTAMPTZ
            )",
        )
        .execute(&self.pool)
        .await
        .expect("create transfers");
        sqlx::query("INSERT INTO transfers (id) SELECT g FROM generate_series(1, $1) g")
            .bind(n)
            .execute(&self.pool)
            .await
            .expect("seed transfers");
    }

    /// `(status, version)` of a transfer.
    pub async fn transfer(&self, id: i64) -> (String, i64) {
        let (status, version): (String, i32) =
            sqlx::query_as("SELECT status, version FROM transfers WHERE id = $1")
                .bind(id)
                .fetch_one(&self.pool)
                .await
                .expect("read transfer");
        (status, i64::from(version))
    }
}

pub struct Mysql {
    pub pool: MySqlPool,
}

impl Mysql {
    /// Moves every transfer's lease an hour into the past, as if its
    /// worker had stalled that long: the lease has run out, and its token
    /// changed.
    pub async fn backdate_leases(&self) {
        sqlx::query("UPDATE transfers SET sending_since = sending_since - INTERVAL 1 HOUR")
            .execute(&self.pool)
            .await
            .expect("backdate leases");
    }

    /// A database of the test's own, dropped and made anew, with every
    /// connection's session isolation set to `isolation`.
    pub async fn open_with(
        test: &str,
        database_sql: [&'static str; 2],
        isolation: Isolation,
    ) -> Option<Self> {
        let url = server_url("STATEGUARD_MYSQL_URL", test)?;
        let mut admin = sqlx::MySqlConnection::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect to MySQL/MariaDB at {url}: {e}"));
        for statement in database_sql {
            sqlx::query(statement)
                .execute(&mut admin)
                .await
                .expect("make database");
        }
        admin.close().await.ok();
        let options = MySqlConnectOptions::from_str(&url)
            .expect("MySQL URL")
            .database(&format!("sg_{test}"));
        let set_isolation = isolation.mysql();
        let pool = MySqlPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(60))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    sqlx::query(set_isolation).execute(conn).await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await
            .expect("MySQL pool");
        sqlx::query(
            "CREATE TABLE payouts (
                id BIGINT PRIMARY KEY,
                status VARCHAR(32) NOT NULL,
                attempts INT NOT NULL DEFAULT 0,
                sent_at DATETIME(3) NULL
            )",
        )
        .execute(&pool)
        .await
        .expect("create table");
        Some(Mysql { pool })
    }

    pub async fn seed(&self, n: i64) {
        sqlx::query(
            "INSERT INTO payouts (id, status)
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
             SELECT i, 'pending' FROM s",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed");
    }

    pub async fn insert(&self, id: i64, status: &str) {
        sqlx::query("INSERT INTO payouts (id, status) VALUES (?, ?)")
            .bind(id)
            .bind(status)
            .execute(&self.pool)
            .await
            .expect("insert");
    }

    pub async fn status_as_enum(&self, id: i64) -> Result<PayoutStatus, sqlx::Error> {
        sqlx::query_scalar("SELECT status FROM payouts WHERE id = ?")
            .bind(id)
            .fetch_one(&self.pool)
            .await
    }

    pub async fn status(&self, id: i64) -> Option<String> {
        sqlx::query_scalar("SELECT status FROM payouts WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .expect("read status")
    }

    pub async fn set_status_raw(&self, id: i64, status: &str) {
        sqlx::query("UPDATE payouts SET status = ? WHERE id = ?")
            .bind(status)
            .bind(id)
            .execute(&self.pool)
            .await
            .expect("raw update");
    }

    pub async fn columns(&self, id: i64) -> (i64, bool) {
        let (attempts, sent): (i64, i64) = sqlx::query_as(
            "SELECT CAST(attempts AS SIGNED), CAST(sent_at IS NOT NULL AS SIGNED)
             FROM payouts WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .expect("read columns");
        (attempts, sent != 0)
    }

    pub async fn count_in(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM payouts WHERE status = ?")
            .bind(status)
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    pub async fn total_attempts(&self) -> i64 {
        sqlx::query_scalar("SELECT CAST(SUM(attempts) AS SIGNED) FROM payouts")
            .fetch_one(&self.pool)
            .await
            .expect("sum attempts")
    }

    /// The `transfers` table of [`TransferStatus`], rows `1..=n` pending.
    pub async fn transfers(&self, n: i64) {
        sqlx::query(
            "CREATE TABLE transfers (
                id BIGINT PRIMARY KEY,
                status VARCHAR(32) NOT NULL DEFAULT 'pending',
                version INT NOT NULL DEFAULT 0,
                sending_since DATETIME(3) NULL,
                sent_at DATETIME(3) NULL
            )",
        )
        .execute(&self.pool)
        .await
        .expect("create transfers");
        sqlx::query(
            "INSERT INTO transfers (id)
             WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
             SELECT i FROM s",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed transfers");
    }

    /// `(status, version)` of a transfer.
    pub async fn transfer(&self, id: i64) -> (String, i64) {
        sqlx::query_as("SELECT status, CAST(version AS SIGNED) FROM transfers WHERE id = ?")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .expect("read transfer")
    }
}
