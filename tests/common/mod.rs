//! Real databases for the integration tests: SQLite in a temporary file,
//! PostgreSQL in a schema of its own per test, MySQL/MariaDB in a database
//! of its own per test.
//!
//! One handle, [`Db`], over the three backends. What differs between them
//! lives in [`TestBackend`]: the SQL literals (placeholders and column
//! types), opening a database, and isolation. The helpers are written once,
//! on `Db<DB>`, and so are the behaviour tests: each is a generic async
//! function over `DB: TestBackend`, and [`backend_tests!`] calls it from one
//! `#[tokio::test]` per backend.
//!
//! Server-backed tests read `STATEGUARD_POSTGRES_URL` and
//! `STATEGUARD_MYSQL_URL`, and the pooler tests the PgBouncer instances'
//! `STATEGUARD_PGBOUNCER_TRANSACTION_URL`,
//! `STATEGUARD_PGBOUNCER_SESSION_URL` and
//! `STATEGUARD_PGBOUNCER_STATEMENT_URL` (`tools/pgbouncer/start.sh`). Without
//! them they print why they were skipped and pass, unless
//! `STATEGUARD_REQUIRE_SERVERS=1` (set by CI) turns a missing server into a
//! failure.

#![allow(dead_code)] // each test file uses its own part of the harness

pub mod proxy;

use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions, MySqlRow};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{Connection, Encode, FromRow, Pool, Type};
use stateguard::bounds::Key;
use stateguard::{StateMachine, Tx};

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
    #[transition(cancel -> Cancelled, supersedes_effect)]
    Sending,
    Sent,
    #[transition(retry -> Sending)]
    Failed,
    Cancelled,
}

/// A payout with every kind of column `stateguard::ddl::table` writes: a
/// key of a declared type, a version, an in-flight state's `since` stamp
/// and its `retry(…)` columns, a stamp of a state's own, a follow-up's
/// `bind(String)` and a history table. Its tables are made by the text
/// `ddl::table` generates, kept in `tests/ddl/every_column.*.table.sql`.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "sg_table_payouts",
    column = "status",
    key = "id",
    key_type = "i64",
    version = "version",
    history = "sg_table_payout_history"
)]
pub enum EveryColumn {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(
        lease = "30s",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(
            max = 3,
            backoff = "1s..1m",
            attempts = "attempts",
            next_attempt = "next_attempt_at",
            last_error = "last_error"
        )
    ))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    #[state(since = "sent_at")]
    Sent,
    Failed,
}

/// Prints past libtest's output capture, so a skip is visible in a normal
/// `cargo test` run.
pub fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

fn require_servers() -> bool {
    std::env::var("STATEGUARD_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// A PostgreSQL statement's tag column as its text writes it: the tag
/// where the value bound last is the tag, a failure of the statement
/// otherwise (`Statement::tag`).
pub fn tag_column(statement: &stateguard::meta::Statement) -> String {
    let tag = statement.tag().expect("a PostgreSQL statement has a tag");
    let bound = format!("${}", statement.binds().len());
    assert_eq!(
        statement.binds().last(),
        Some(&stateguard::meta::Bind::Tag),
        "the tag is bound last"
    );
    format!(
        "CASE WHEN {bound}::text = '{tag}' THEN '{tag}'::text ELSE CAST(concat('stateguard \
         mix-up: ran {tag} with ', {bound}::text) AS INTEGER)::text END"
    )
}

/// Whether the browser checks must run (`STATEGUARD_REQUIRE_BROWSER=1`, as
/// CI sets it): then a missing browser fails them instead of skipping.
pub fn require_browser() -> bool {
    std::env::var("STATEGUARD_REQUIRE_BROWSER").is_ok_and(|v| v == "1")
}

/// Why the checks in headless Chromium cannot run here, if they cannot:
/// they need Node.js, the npm packages of `tools/browser-check` (`npm ci`
/// there) and Chromium (`CHROMIUM`, or `/usr/bin/chromium`).
pub fn browser_missing() -> Option<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::process::Command::new("node").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => return Some(format!("`node --version` failed: {}", output.status)),
        Err(e) => return Some(format!("Node.js cannot run: {e}")),
    }
    if !root
        .join("tools/browser-check/node_modules/playwright-core")
        .is_dir()
    {
        return Some(
            "the playwright-core package is not installed (`npm ci` in tools/browser-check)".into(),
        );
    }
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !std::path::Path::new(&chromium).exists() {
        return Some(format!(
            "no Chromium at {chromium} (apt-get install chromium)"
        ));
    }
    None
}

/// The server URL in `var`, or `None` after saying why the test is skipped.
pub fn server_url(var: &str, test: &str) -> Option<String> {
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

/// Isolation levels, set as each connection's default (PostgreSQL) or
/// session level (MySQL/MariaDB), so that autocommit statements and
/// `begin()` both run under it. SQLite sets none: its transactions are
/// serializable.
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

    /// `default_transaction_isolation` for PostgreSQL.
    fn postgres(self) -> &'static str {
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
/// database, or `None` when its server is not configured. The statements
/// that make the schema or database anew are literals, written here.
#[macro_export]
macro_rules! open {
    (Sqlite, $test:literal) => {
        // Every SQLite transaction is serializable; nothing is set.
        $crate::common::Sqlite::open($test, &[], $crate::common::Isolation::Serializable).await
    };
    (Postgres, $test:literal) => {
        $crate::open!(Postgres, $test, $crate::common::Isolation::ReadCommitted)
    };
    (Mysql, $test:literal) => {
        $crate::open!(Mysql, $test, $crate::common::Isolation::RepeatableRead)
    };
    (Mysql, $test:literal, $isolation:expr) => {
        $crate::common::Mysql::open(
            $test,
            &[
                concat!("DROP DATABASE IF EXISTS sg_", $test),
                concat!("CREATE DATABASE sg_", $test),
            ],
            $isolation,
        )
        .await
    };
    (Postgres, $test:literal, $isolation:expr) => {
        $crate::common::Postgres::open(
            $test,
            &[
                concat!("DROP SCHEMA IF EXISTS sg_", $test, " CASCADE"),
                concat!("CREATE SCHEMA sg_", $test),
            ],
            $isolation,
        )
        .await
    };
}

/// One `#[tokio::test]` per backend for each generic test body:
/// `backend_tests! { "start_once" => start_wins_once, }` makes
/// `sqlite::start_wins_once`, `postgres::start_wins_once` and
/// `mysql::start_wins_once`, each of which opens the database `"start_once"`
/// with [`open!`] and awaits `start_wins_once(db)`. Arguments in
/// parentheses after the name go to `#[tokio::test(…)]`.
///
/// `backend_tests! { impl Tests { "start_once" => start_wins_once, } }`
/// awaits `Tests::start_wins_once(db)` instead: a module's bodies are then
/// associated functions of one `impl<DB: TestBackend> Tests<DB> where …`
/// block, which states the bounds they share once rather than on every
/// body. (A trait cannot state them for its users: Rust implies a trait's
/// bounds on `Self` only, and `i64: Key<DB>` is a bound on `i64`. The
/// executors need none: `&Pool<DB>`, `&mut Tx<'_, DB>` and a pooled
/// connection are executors for every `DB: Backend`.)
#[macro_export]
macro_rules! backend_tests {
    (impl $suite:ident { $($db:literal => $name:ident $(($($tokio:tt)*))?,)* }) => {
        mod sqlite { $crate::backend_tests!(@in Sqlite, $suite: $($db => $name $(($($tokio)*))?,)*); }
        mod postgres { $crate::backend_tests!(@in Postgres, $suite: $($db => $name $(($($tokio)*))?,)*); }
        mod mysql { $crate::backend_tests!(@in Mysql, $suite: $($db => $name $(($($tokio)*))?,)*); }
    };
    ($($db:literal => $name:ident $(($($tokio:tt)*))?,)*) => {
        mod sqlite { $crate::backend_tests!(@in Sqlite: $($db => $name $(($($tokio)*))?,)*); }
        mod postgres { $crate::backend_tests!(@in Postgres: $($db => $name $(($($tokio)*))?,)*); }
        mod mysql { $crate::backend_tests!(@in Mysql: $($db => $name $(($($tokio)*))?,)*); }
    };
    (@in $backend:ident, $suite:ident: $($db:literal => $name:ident $(($($tokio:tt)*))?,)*) => {$(
        #[tokio::test $(($($tokio)*))?]
        async fn $name() {
            let Some(db) = $crate::open!($backend, $db) else {
                return;
            };
            super::$suite::$name(db).await;
        }
    )*};
    (@in $backend:ident: $($db:literal => $name:ident $(($($tokio:tt)*))?,)*) => {$(
        #[tokio::test $(($($tokio)*))?]
        async fn $name() {
            let Some(db) = $crate::open!($backend, $db) else {
                return;
            };
            super::$name(db).await;
        }
    )*};
}

/// A value for a placeholder of a helper's statement.
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    Int(i64),
    Text(&'a str),
}

/// A key type the tests both bind and read back on `DB` (`i64: KeyColumn<DB>`):
/// a [`Key`] that decodes too. Named once, so that the bodies do not spell
/// out the higher-ranked `Decode` bound.
pub trait KeyColumn<DB: sqlx::Database>: Key<DB> + for<'r> sqlx::Decode<'r, DB> {}

impl<DB: sqlx::Database, T> KeyColumn<DB> for T where T: Key<DB> + for<'r> sqlx::Decode<'r, DB> {}

/// A row the helpers read: an owned tuple whose columns decode on every
/// backend.
pub trait AnyRow:
    for<'r> FromRow<'r, SqliteRow>
    + for<'r> FromRow<'r, PgRow>
    + for<'r> FromRow<'r, MySqlRow>
    + Send
    + Unpin
    + 'static
{
}

impl<T> AnyRow for T where
    T: for<'r> FromRow<'r, SqliteRow>
        + for<'r> FromRow<'r, PgRow>
        + for<'r> FromRow<'r, MySqlRow>
        + Send
        + Unpin
        + 'static
{
}

/// What differs between the backends: opening a test's database, and the
/// helpers' statements, each a literal with the backend's placeholders and
/// column types. Integer columns are read as `BIGINT`, so that every
/// backend's row decodes to the same Rust types.
pub trait TestBackend: stateguard::Backend {
    /// The `payouts` table of [`PayoutStatus`].
    const CREATE_PAYOUTS: &'static str;
    /// Rows `1..=?1` of `payouts`, all `pending`.
    const SEED: &'static str;
    /// `status` of row `?1`.
    const STATUS: &'static str;
    /// Row `?1` with status `?2`.
    const INSERT: &'static str;
    /// `status = ?1` on row `?2`.
    const SET_STATUS: &'static str;
    /// `(attempts, sent_at IS NOT NULL)` of row `?1`.
    const COLUMNS: &'static str;
    /// The number of rows with status `?1`.
    const COUNT_IN: &'static str;
    /// The sum of `attempts` over every row.
    const TOTAL_ATTEMPTS: &'static str;
    /// The `transfers` table of [`TransferStatus`].
    const CREATE_TRANSFERS: &'static str;
    /// Rows `1..=?1` of `transfers`, all `pending`.
    const SEED_TRANSFERS: &'static str;
    /// `(status, version)` of transfer `?1`.
    const TRANSFER: &'static str;
    /// Every transfer's `sending_since`, an hour earlier.
    const BACKDATE_LEASES: &'static str;
    /// The dialect `stateguard::ddl` generates for this backend.
    const DIALECT: stateguard::ddl::Dialect;
    /// How a transaction that writes begins (`BEGIN IMMEDIATE` on SQLite).
    const BEGIN_WRITE: &'static str;
    /// `tenant_transfers`: transfers keyed by `(tenant_id, id)`.
    const CREATE_TENANT_TRANSFERS: &'static str;
    /// Every tenant transfer's `sending_since`, an hour earlier.
    const BACKDATE_TENANT_LEASES: &'static str;

    /// A pool on the test's own database, made anew with `fresh` and with
    /// `isolation` as every connection's default (none of which SQLite,
    /// with a new file per test, needs), and the temporary directory that
    /// holds a SQLite file. `None` when the server is not configured.
    fn connect(
        test: &str,
        fresh: &[&'static str],
        isolation: Isolation,
    ) -> impl Future<Output = Option<(Pool<Self>, Option<tempfile::TempDir>)>> + Send;

    /// The first row `sql` returns on `conn`, if any. Each impl calls
    /// [`fetch_optional_on`], where sqlx's bounds hold.
    fn fetch_optional<'c, O: AnyRow>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        binds: &'c [Bind<'c>],
    ) -> impl Future<Output = sqlx::Result<Option<O>>> + Send + 'c;

    /// Runs `sql` on `conn` for its effect: a row it returns is read as `()`.
    fn execute<'c>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        binds: &'c [Bind<'c>],
    ) -> impl Future<Output = sqlx::Result<()>> + Send + 'c {
        let done = Self::fetch_optional::<()>(conn, sql, binds);
        async move { done.await.map(drop) }
    }

    /// The first row `sql` returns on `conn`; `RowNotFound` if none.
    fn fetch_one<'c, O: AnyRow>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        binds: &'c [Bind<'c>],
    ) -> impl Future<Output = sqlx::Result<O>> + Send + 'c {
        let row = Self::fetch_optional(conn, sql, binds);
        async move { row.await?.ok_or(sqlx::Error::RowNotFound) }
    }
}

/// [`TestBackend::fetch_optional`] on any backend that sqlx can bind `i64`
/// and `&str` on.
async fn fetch_optional_on<DB, O>(
    conn: &mut DB::Connection,
    sql: &'static str,
    binds: &[Bind<'_>],
) -> sqlx::Result<Option<O>>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    for<'s> &'s str: Encode<'s, DB> + Type<DB>,
    O: for<'r> FromRow<'r, DB::Row> + Send + Unpin,
{
    let mut query = sqlx::query_as::<DB, O>(sql);
    for bind in binds {
        query = match *bind {
            Bind::Int(value) => query.bind(value),
            Bind::Text(value) => query.bind(value),
        };
    }
    query.fetch_optional(conn).await
}

/// Runs `fresh` on a connection of its own to the server at `url`: the
/// test's schema or database, dropped and made anew.
async fn remake<DB: TestBackend>(url: &str, fresh: &[&'static str]) {
    let mut admin = DB::Connection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {} at {url}: {e}", DB::NAME));
    for &statement in fresh {
        DB::execute(&mut admin, statement, &[])
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    admin.close().await.ok();
}

impl TestBackend for sqlx::Sqlite {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Sqlite;
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const CREATE_PAYOUTS: &'static str = "CREATE TABLE payouts (
        id INTEGER PRIMARY KEY,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        sent_at TEXT
    )";
    const SEED: &'static str =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
         INSERT INTO payouts (id, status) SELECT i, 'pending' FROM s";
    const STATUS: &'static str = "SELECT status FROM payouts WHERE id = ?1";
    const INSERT: &'static str = "INSERT INTO payouts (id, status) VALUES (?1, ?2)";
    const SET_STATUS: &'static str = "UPDATE payouts SET status = ?1 WHERE id = ?2";
    const COLUMNS: &'static str = "SELECT attempts, sent_at IS NOT NULL FROM payouts WHERE id = ?1";
    const COUNT_IN: &'static str = "SELECT COUNT(*) FROM payouts WHERE status = ?1";
    const TOTAL_ATTEMPTS: &'static str = "SELECT SUM(attempts) FROM payouts";
    const CREATE_TRANSFERS: &'static str = "CREATE TABLE transfers (
        id INTEGER PRIMARY KEY,
        status TEXT NOT NULL DEFAULT 'pending',
        version INTEGER NOT NULL DEFAULT 0,
        sending_since TEXT,
        sent_at TEXT,
        bank_ref TEXT
    )";
    const SEED_TRANSFERS: &'static str =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
         INSERT INTO transfers (id) SELECT i FROM s";
    const TRANSFER: &'static str = "SELECT status, version FROM transfers WHERE id = ?1";
    const BACKDATE_LEASES: &'static str = "UPDATE transfers \
        SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours')";
    const CREATE_TENANT_TRANSFERS: &'static str = "CREATE TABLE tenant_transfers (
        tenant_id TEXT NOT NULL,
        id INTEGER NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        version INTEGER NOT NULL DEFAULT 0,
        sending_since TEXT,
        bank_ref TEXT,
        PRIMARY KEY (tenant_id, id)
    )";
    const BACKDATE_TENANT_LEASES: &'static str = "UPDATE tenant_transfers \
        SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours')";

    /// A fresh file database in WAL mode with a pool of 8 connections.
    async fn connect(
        _test: &str,
        _fresh: &[&'static str],
        _isolation: Isolation,
    ) -> Option<(Pool<Self>, Option<tempfile::TempDir>)> {
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
        Some((pool, Some(dir)))
    }

    fn fetch_optional<'c, O: AnyRow>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        binds: &'c [Bind<'c>],
    ) -> impl Future<Output = sqlx::Result<Option<O>>> + Send + 'c {
        fetch_optional_on::<Self, O>(conn, sql, binds)
    }
}

impl TestBackend for sqlx::Postgres {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Postgres;
    const BEGIN_WRITE: &'static str = "BEGIN";
    const CREATE_PAYOUTS: &'static str = "CREATE TABLE payouts (
        id BIGINT PRIMARY KEY,
        status TEXT NOT NULL,
        attempts INT NOT NULL DEFAULT 0,
        sent_at TIMESTAMPTZ
    )";
    const SEED: &'static str =
        "INSERT INTO payouts (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g";
    const STATUS: &'static str = "SELECT status FROM payouts WHERE id = $1";
    const INSERT: &'static str = "INSERT INTO payouts (id, status) VALUES ($1, $2)";
    const SET_STATUS: &'static str = "UPDATE payouts SET status = $1 WHERE id = $2";
    const COLUMNS: &'static str =
        "SELECT attempts::BIGINT, sent_at IS NOT NULL FROM payouts WHERE id = $1";
    const COUNT_IN: &'static str = "SELECT COUNT(*) FROM payouts WHERE status = $1";
    const TOTAL_ATTEMPTS: &'static str = "SELECT SUM(attempts)::BIGINT FROM payouts";
    const CREATE_TRANSFERS: &'static str = "CREATE TABLE transfers (
        id BIGINT PRIMARY KEY,
        status TEXT NOT NULL DEFAULT 'pending',
        version INT NOT NULL DEFAULT 0,
        sending_since TIMESTAMPTZ,
        sent_at TIMESTAMPTZ,
        bank_ref TEXT
    )";
    const SEED_TRANSFERS: &'static str =
        "INSERT INTO transfers (id) SELECT g FROM generate_series(1, $1) g";
    const TRANSFER: &'static str = "SELECT status, version::BIGINT FROM transfers WHERE id = $1";
    const BACKDATE_LEASES: &'static str =
        "UPDATE transfers SET sending_since = sending_since - INTERVAL '1 hour'";
    const CREATE_TENANT_TRANSFERS: &'static str = "CREATE TABLE tenant_transfers (
        tenant_id TEXT NOT NULL,
        id BIGINT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        version INT NOT NULL DEFAULT 0,
        sending_since TIMESTAMPTZ,
        bank_ref TEXT,
        PRIMARY KEY (tenant_id, id)
    )";
    const BACKDATE_TENANT_LEASES: &'static str =
        "UPDATE tenant_transfers SET sending_since = sending_since - INTERVAL '1 hour'";

    /// The schema `sg_<test>`, dropped and made anew by `fresh`, with every
    /// connection's default isolation set to `isolation`.
    async fn connect(
        test: &str,
        fresh: &[&'static str],
        isolation: Isolation,
    ) -> Option<(Pool<Self>, Option<tempfile::TempDir>)> {
        let url = server_url("STATEGUARD_POSTGRES_URL", test)?;
        remake::<Self>(&url, fresh).await;
        let schema = format!("sg_{test}");
        let options = PgConnectOptions::from_str(&url)
            .expect("PostgreSQL URL")
            .options([
                ("search_path", schema.as_str()),
                ("default_transaction_isolation", isolation.postgres()),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await
            .expect("PostgreSQL pool");
        Some((pool, None))
    }

    fn fetch_optional<'c, O: AnyRow>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        binds: &'c [Bind<'c>],
    ) -> impl Future<Output = sqlx::Result<Option<O>>> + Send + 'c {
        fetch_optional_on::<Self, O>(conn, sql, binds)
    }
}

/// `(SELECT … AS i …) s`: the numbers 1 to 100,000, for MySQL's seeds.
macro_rules! mysql_numbers {
    () => {
        concat!(
            "(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 1 AS i FROM ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) a, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) b, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) c, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) e, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) f) s"
        )
    };
}

impl TestBackend for sqlx::MySql {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::MySql;
    const BEGIN_WRITE: &'static str = "BEGIN";
    const CREATE_PAYOUTS: &'static str = "CREATE TABLE payouts (
        id BIGINT PRIMARY KEY,
        status VARCHAR(32) NOT NULL,
        attempts INT NOT NULL DEFAULT 0,
        sent_at DATETIME(3) NULL
    )";
    // Numbers from a cross join of digits: MariaDB stops a recursive CTE
    // after 1,000 rows.
    const SEED: &'static str = concat!(
        "INSERT INTO payouts (id, status) SELECT i, 'pending' FROM ",
        mysql_numbers!(),
        " WHERE i <= ?"
    );
    const STATUS: &'static str = "SELECT status FROM payouts WHERE id = ?";
    const INSERT: &'static str = "INSERT INTO payouts (id, status) VALUES (?, ?)";
    const SET_STATUS: &'static str = "UPDATE payouts SET status = ? WHERE id = ?";
    const COLUMNS: &'static str =
        "SELECT CAST(attempts AS SIGNED), sent_at IS NOT NULL FROM payouts WHERE id = ?";
    const COUNT_IN: &'static str = "SELECT COUNT(*) FROM payouts WHERE status = ?";
    const TOTAL_ATTEMPTS: &'static str = "SELECT CAST(SUM(attempts) AS SIGNED) FROM payouts";
    const CREATE_TRANSFERS: &'static str = "CREATE TABLE transfers (
        id BIGINT PRIMARY KEY,
        status VARCHAR(32) NOT NULL DEFAULT 'pending',
        version INT NOT NULL DEFAULT 0,
        sending_since DATETIME(3) NULL,
        sent_at DATETIME(3) NULL,
        bank_ref VARCHAR(64) NULL
    )";
    const SEED_TRANSFERS: &'static str = concat!(
        "INSERT INTO transfers (id) SELECT i FROM ",
        mysql_numbers!(),
        " WHERE i <= ?"
    );
    const TRANSFER: &'static str =
        "SELECT status, CAST(version AS SIGNED) FROM transfers WHERE id = ?";
    const BACKDATE_LEASES: &'static str =
        "UPDATE transfers SET sending_since = sending_since - INTERVAL 1 HOUR";
    const CREATE_TENANT_TRANSFERS: &'static str = "CREATE TABLE tenant_transfers (
        tenant_id VARCHAR(32) NOT NULL,
        id BIGINT NOT NULL,
        status VARCHAR(32) NOT NULL DEFAULT 'pending',
        version INT NOT NULL DEFAULT 0,
        sending_since DATETIME(3) NULL,
        bank_ref VARCHAR(64) NULL,
        PRIMARY KEY (tenant_id, id)
    )";
    const BACKDATE_TENANT_LEASES: &'static str =
        "UPDATE tenant_transfers SET sending_since = sending_since - INTERVAL 1 HOUR";

    /// The database `sg_<test>`, dropped and made anew by `fresh`, with
    /// every connection's session isolation set to `isolation`.
    async fn connect(
        test: &str,
        fresh: &[&'static str],
        isolation: Isolation,
    ) -> Option<(Pool<Self>, Option<tempfile::TempDir>)> {
        let url = server_url("STATEGUARD_MYSQL_URL", test)?;
        remake::<Self>(&url, fresh).await;
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
        Some((pool, None))
    }

    fn fetch_optional<'c, O: AnyRow>(
        conn: &'c mut Self::Connection,
        sql: &'static str,
        binds: &'c [Bind<'c>],
    ) -> impl Future<Output = sqlx::Result<Option<O>>> + Send + 'c {
        fetch_optional_on::<Self, O>(conn, sql, binds)
    }
}

/// A test's database on one backend, with the `payouts` table of
/// [`PayoutStatus`].
pub struct Db<DB: TestBackend> {
    pub pool: Pool<DB>,
    /// Holds a SQLite file; removed with the handle.
    _dir: Option<tempfile::TempDir>,
}

pub type Sqlite = Db<sqlx::Sqlite>;
pub type Postgres = Db<sqlx::Postgres>;
pub type Mysql = Db<sqlx::MySql>;

impl<DB: TestBackend> Db<DB> {
    /// The test's database, made anew, or `None` when its server is not
    /// configured. Called through [`open!`], which writes `fresh`.
    pub async fn open(test: &str, fresh: &[&'static str], isolation: Isolation) -> Option<Self> {
        let (pool, dir) = DB::connect(test, fresh, isolation).await?;
        let db = Db { pool, _dir: dir };
        db.execute(DB::CREATE_PAYOUTS, &[])
            .await
            .expect("create table");
        Some(db)
    }

    /// A handle on `pool`, whose connections already find the test's own
    /// schema or database, with the `payouts` table made there.
    pub async fn on_pool(pool: Pool<DB>) -> Self {
        let db = Db { pool, _dir: None };
        db.execute(DB::CREATE_PAYOUTS, &[])
            .await
            .expect("create table");
        db
    }

    /// Runs a helper statement on a connection of the pool.
    pub async fn execute(&self, sql: &'static str, binds: &[Bind<'_>]) -> sqlx::Result<()> {
        let mut conn = self.pool.acquire().await?;
        DB::execute(&mut conn, sql, binds).await
    }

    /// The first row of a helper statement on a connection of the pool.
    pub async fn fetch_one<O: AnyRow>(
        &self,
        sql: &'static str,
        binds: &[Bind<'_>],
    ) -> sqlx::Result<O> {
        let mut conn = self.pool.acquire().await?;
        DB::fetch_one(&mut conn, sql, binds).await
    }

    /// Rows `1..=n`, all `pending`.
    pub async fn seed(&self, n: i64) {
        self.execute(DB::SEED, &[Bind::Int(n)]).await.expect("seed");
    }

    pub async fn status(&self, id: i64) -> Option<String> {
        match self.fetch_one(DB::STATUS, &[Bind::Int(id)]).await {
            Ok((status,)) => Some(status),
            Err(sqlx::Error::RowNotFound) => None,
            Err(error) => panic!("read status: {error}"),
        }
    }

    pub async fn insert(&self, id: i64, status: &str) {
        self.execute(DB::INSERT, &[Bind::Int(id), Bind::Text(status)])
            .await
            .expect("insert");
    }

    /// The status decoded through the derived `sqlx::Decode`.
    pub async fn status_as_enum(&self, id: i64) -> Result<PayoutStatus, sqlx::Error> {
        self.fetch_one(DB::STATUS, &[Bind::Int(id)])
            .await
            .map(|(status,)| status)
    }

    pub async fn set_status_raw(&self, id: i64, status: &str) {
        self.execute(DB::SET_STATUS, &[Bind::Text(status), Bind::Int(id)])
            .await
            .expect("raw update");
    }

    /// `(attempts, sent_at IS NOT NULL)` of a row.
    pub async fn columns(&self, id: i64) -> (i64, bool) {
        self.fetch_one(DB::COLUMNS, &[Bind::Int(id)])
            .await
            .expect("read columns")
    }

    pub async fn count_in(&self, status: &str) -> i64 {
        self.fetch_one(DB::COUNT_IN, &[Bind::Text(status)])
            .await
            .map(|(count,)| count)
            .expect("count")
    }

    pub async fn total_attempts(&self) -> i64 {
        self.fetch_one(DB::TOTAL_ATTEMPTS, &[])
            .await
            .map(|(sum,)| sum)
            .expect("sum attempts")
    }

    /// The `transfers` table of [`TransferStatus`], rows `1..=n` pending.
    pub async fn transfers(&self, n: i64) {
        self.execute(DB::CREATE_TRANSFERS, &[])
            .await
            .expect("create transfers");
        self.execute(DB::SEED_TRANSFERS, &[Bind::Int(n)])
            .await
            .expect("seed transfers");
    }

    /// `(status, version)` of a transfer.
    pub async fn transfer(&self, id: i64) -> (String, i64) {
        self.fetch_one(DB::TRANSFER, &[Bind::Int(id)])
            .await
            .expect("read transfer")
    }

    /// Moves every transfer's lease an hour into the past, as if its
    /// worker had stalled that long: the lease has run out, and its token
    /// changed.
    pub async fn backdate_leases(&self) {
        self.execute(DB::BACKDATE_LEASES, &[])
            .await
            .expect("backdate leases");
    }
}

/// Seeds row 1, opens a transaction that reads it (`pending`), then moves the
/// row on from outside: the transaction is left holding a stale snapshot.
pub async fn stale_transaction<DB: TestBackend>(db: &Db<DB>) -> Tx<'static, DB>
where
    i64: Key<DB>,
{
    db.seed(1).await;
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    let (seen,): (String,) = DB::fetch_one(&mut tx, "SELECT status FROM payouts WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(seen, "pending");
    let moved = PayoutStatus::start().apply(&db.pool, 1_i64).await.unwrap();
    assert!(moved.is_applied());
    tx
}

/// Where [`abandon_at_every_poll`] dropped a future: in its `round` (from
/// 1, across the sweeps), after `polls` polls, `pause` apart.
#[derive(Debug, Clone, Copy)]
pub struct Abandoned {
    pub round: i64,
    pub polls: u32,
    pub pause: Duration,
}

/// Drops `start(round)`'s future after 1, 2, 3… polls, and runs
/// `after(abandoned)` after each drop, until the futures finish within
/// their polls: every step of their work is a point to stop at. Where the
/// server's answers fall between polls varies, so each count is tried
/// eight times, with polls 1 ms apart, then 2 ms, until all eight
/// finished.
pub async fn abandon_at_every_poll<S, F, A, AF>(mut start: S, mut after: A)
where
    S: FnMut(i64) -> F,
    F: std::future::IntoFuture,
    A: FnMut(Abandoned) -> AF,
    AF: std::future::Future<Output = ()>,
{
    const TRIES: usize = 8;
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut round = 0;
    for pause in [Duration::from_millis(1), Duration::from_millis(2)] {
        let mut polls = 0;
        loop {
            polls += 1;
            assert!(polls < 100_000, "the future never finished");
            let mut finished = 0;
            for _ in 0..TRIES {
                round += 1;
                // The connection `after` used is back in the pool, idle.
                tokio::time::sleep(Duration::from_millis(2)).await;
                {
                    let mut future = std::pin::pin!(start(round).into_future());
                    for _ in 0..polls {
                        if future.as_mut().poll(&mut cx).is_ready() {
                            finished += 1;
                            break;
                        }
                        tokio::time::sleep(pause).await;
                    }
                }
                after(Abandoned {
                    round,
                    polls,
                    pause,
                })
                .await;
            }
            if finished == TRIES {
                break;
            }
        }
    }
}
