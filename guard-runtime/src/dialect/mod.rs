//! What differs between databases: which SQL text runs, how rows-affected is
//! read, and which errors are worth retrying.

use core::pin::Pin;

/// The future type sqlx's own executors return.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub(crate) mod connection;
mod statement;

pub use statement::{Bind, Column, Statement};

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// A value that statements of `DB` can bind as a key, or a key column's
/// part of one: `i64`, `String`, `&str`, a UUID, … — any type sqlx encodes
/// for `DB`. Written once here, implemented for every such type. A machine
/// keyed by several columns takes a tuple of them
/// ([`RowKey`](crate::RowKey)).
pub trait Key<DB: sqlx::Database>:
    for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send + Sync
{
}

impl<DB, T> Key<DB> for T
where
    DB: sqlx::Database,
    T: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + Send + Sync + ?Sized,
{
}

/// A database that stateguard can run transitions on: `sqlx::Postgres`,
/// `sqlx::Sqlite` or `sqlx::MySql`, each behind its cargo feature.
pub trait Backend: sealed::Driver + connection::OnConnection {
    /// Whether `error` is a serialization failure, deadlock or busy database
    /// that a fresh attempt may get past.
    fn is_retryable(error: &sqlx::Error) -> bool;
}

pub(crate) mod sealed {
    use super::BoxFuture;
    use super::{Sql, Statement};

    /// What the library needs of a database, out of callers' reach: the
    /// dialect's SQL text, and reading rows and binding arguments the same
    /// way on every backend.
    pub trait Driver: sqlx::Database {
        /// `Self::Arguments`, named again so that its `IntoArguments` bound is
        /// known to generic code.
        type Args: sqlx::Arguments<Database = Self> + sqlx::IntoArguments<Self> + Send;

        /// The dialect's member of `sql`.
        fn choose<T: Copy>(sql: &Sql<T>) -> T;

        /// The dialect's statement of `sql`: its text and bind plan.
        fn statement(sql: &Sql) -> Statement {
            Self::choose(sql)
        }

        /// The dialect's text of `sql`.
        fn sql(sql: &Sql) -> &'static str {
            Self::statement(sql).text()
        }

        /// The dialect's texts of `statements`, leaving out those it does
        /// without (an empty text): what a transaction prepares first
        /// ([`Driver::PREPARES_FIRST`]).
        fn texts<'s>(statements: impl IntoIterator<Item = &'s Sql>) -> Vec<&'static str> {
            (statements.into_iter())
                .map(Self::sql)
                .filter(|text| !text.is_empty())
                .collect()
        }

        fn rows_affected(result: &Self::QueryResult) -> u64;

        /// The value an `UPDATE … SET v = LAST_INSERT_ID(v + 1)` stored, as
        /// MySQL's OK packet carries it (0 when no row matched); 0 on the
        /// backends that return it with `RETURNING` instead.
        fn last_insert_id(result: &Self::QueryResult) -> u64 {
            let _ = result;
            0
        }

        /// Whether the statement that gave `result` changed a row: when
        /// the second statement of `execute_then_fetch` reads what it
        /// stamped.
        fn changed(result: &Self::QueryResult) -> bool {
            Self::rows_affected(result) != 0
        }

        /// Whether an `UPDATE … LAST_INSERT_ID(expr)` that changed its row
        /// came back without the value: MariaDB's OK packet carries 0 for a
        /// statement that fired a trigger (any trigger on the table: the
        /// generated enforcement trigger, an audit trigger, an online
        /// schema change tool's), while `LAST_INSERT_ID()` on the same
        /// connection still holds it. Then [`Self::LAST_ID`] reads it back.
        /// Never on the backends with `RETURNING`.
        fn id_lost(result: &Self::QueryResult) -> bool {
            let _ = result;
            false
        }

        /// Reads the connection's `LAST_INSERT_ID()` (MySQL), as a signed
        /// integer; empty on the other backends, which never need it.
        const LAST_ID: &'static str = "";

        /// Whether `UPDATE … RETURNING` exists; without it the new version
        /// comes with the `UPDATE`'s own result (`LAST_INSERT_ID(expr)`),
        /// and a lease token is read back on the same connection.
        const RETURNING: bool;

        /// OpenTelemetry's `db.system.name` for spans.
        const SYSTEM: &'static str;

        /// Whether the database runs inside the process (SQLite): a
        /// statement costs no round trip, and one writer at a time holds
        /// the whole database.
        const EMBEDDED: bool;

        /// Whether a transaction the library runs prepares its statements
        /// before its first write (MySQL and MariaDB): a move with its
        /// inserts before its `BEGIN`, a claim before its locking read
        /// (the executors' `Run::prepare_first`).
        /// On a MariaDB Galera
        /// cluster, a transaction that a replicated one aborted while its
        /// connection prepared a statement (its first use there) has been
        /// seen to answer that statement and its `COMMIT` as if nothing
        /// had happened: two callers were told of a win of which one
        /// committed. Prepared first, every statement after the first
        /// write is an execution, whose abort the server reports.
        const PREPARES_FIRST: bool;

        fn text_opt(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error>;

        /// Whether column `index` of `row` holds `expected`, read in
        /// place: a statement's tag, checked on every row it returns.
        fn text_is(row: &Self::Row, index: usize, expected: &str) -> bool;

        fn int(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error>;

        fn int_opt(row: &Self::Row, index: usize) -> Result<Option<i64>, sqlx::Error>;

        fn bind_int(args: &mut Self::Args, value: i64) -> Result<(), sqlx::Error>;

        fn bind_int_opt(args: &mut Self::Args, value: Option<i64>) -> Result<(), sqlx::Error>;

        fn bind_text(args: &mut Self::Args, value: Option<String>) -> Result<(), sqlx::Error>;

        fn bytes_opt(row: &Self::Row, index: usize) -> Result<Option<Vec<u8>>, sqlx::Error>;

        fn bind_bytes(args: &mut Self::Args, value: Vec<u8>) -> Result<(), sqlx::Error>;

        fn column<T>(row: &Self::Row, index: usize) -> Result<T, sqlx::Error>
        where
            T: for<'r> sqlx::Decode<'r, Self> + sqlx::Type<Self>;

        /// Asked just before `COMMIT`: whether the connection's transaction is
        /// still open and not aborted, so that the `COMMIT` really commits.
        fn transaction_open(
            conn: &mut Self::Connection,
        ) -> BoxFuture<'_, Result<bool, sqlx::Error>>;
    }
}

/// The accessors that read rows and extend arguments the same way on every
/// backend; only the row type differs.
macro_rules! row_access {
    ($row:ty) => {
        fn text_opt(row: &$row, index: usize) -> Result<Option<String>, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn text_is(row: &$row, index: usize, expected: &str) -> bool {
            // Unchecked: no column type is asked for. A column of another
            // type whose bytes are not the text fails to decode, or
            // differs, and is not `expected` either way.
            let found = sqlx::Row::try_get_unchecked::<Option<&str>, _>(row, index);
            matches!(found, Ok(Some(found)) if found == expected)
        }

        fn int(row: &$row, index: usize) -> Result<i64, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn int_opt(row: &$row, index: usize) -> Result<Option<i64>, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn bind_int(args: &mut Self::Args, value: i64) -> Result<(), sqlx::Error> {
            sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
        }

        fn bind_int_opt(args: &mut Self::Args, value: Option<i64>) -> Result<(), sqlx::Error> {
            sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
        }

        fn bind_text(args: &mut Self::Args, value: Option<String>) -> Result<(), sqlx::Error> {
            sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
        }

        fn bytes_opt(row: &$row, index: usize) -> Result<Option<Vec<u8>>, sqlx::Error> {
            sqlx::Row::try_get(row, index)
        }

        fn bind_bytes(args: &mut Self::Args, value: Vec<u8>) -> Result<(), sqlx::Error> {
            sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
        }

        fn column<T>(row: &$row, index: usize) -> Result<T, sqlx::Error>
        where
            T: for<'r> sqlx::Decode<'r, Self> + sqlx::Type<Self>,
        {
            sqlx::Row::try_get(row, index)
        }
    };
}
#[allow(unused_imports)] // unused when no backend feature is enabled
use row_access;

/// The database's own error code, for the backends that report one as text.
#[allow(dead_code)] // unused when no backend feature is enabled
pub(crate) fn db_code(error: &sqlx::Error) -> Option<std::borrow::Cow<'_, str>> {
    match error {
        sqlx::Error::Database(db) => db.code(),
        _ => None,
    }
}

/// The current time as every statement stores and compares it: the
/// statement's time (not the transaction's), in UTC, with milliseconds;
/// SQLite's as text that sorts as it compares. The derive writes the same
/// text into the machines' statements (`guard-macros/src/sql/mod.rs`,
/// `Driver::now`), which `tests/derive/metadata.rs` holds equal to this;
/// the fixed-table stores' statements use it and no other clock, which
/// [`assert_clock`] holds.
pub(crate) const NOW: Sql<&'static str> = Sql {
    postgres: "statement_timestamp()",
    sqlite: "strftime('%Y-%m-%d %H:%M:%f', 'now')",
    mysql: "UTC_TIMESTAMP(3)",
};

/// Fails if `text`, a statement of `dialect` (`postgres`, `sqlite`,
/// `mysql`), reads the clock other than through [`NOW`]: another time
/// function, or the same one at another precision or format.
#[cfg(test)]
pub(crate) fn assert_clock(name: &str, dialect: &str, text: &str) {
    let lower = text.to_lowercase();
    let (canonical, foreign): (&str, &[&str]) = match dialect {
        "postgres" => (
            NOW.postgres,
            &[
                "now()",
                "current_timestamp",
                "clock_timestamp",
                "transaction_timestamp",
                "localtimestamp",
            ],
        ),
        "sqlite" => (
            "strftime('%y-%m-%d %h:%m:%f', 'now'",
            &[
                "datetime(",
                "julianday(",
                "current_timestamp",
                "unixepoch('now'",
            ],
        ),
        _ => (
            NOW.mysql,
            &[
                "now(",
                "current_timestamp",
                "sysdate",
                "localtime",
                "unix_timestamp",
            ],
        ),
    };
    for bad in foreign {
        assert!(
            !lower.contains(bad),
            "{name} on {dialect} reads the clock with {bad}: {text}"
        );
    }
    let stem = match dialect {
        "postgres" => "statement_timestamp",
        "sqlite" => "strftime(",
        _ => "utc_timestamp",
    };
    let canonical = canonical.to_lowercase();
    for (at, _) in lower.match_indices(stem) {
        assert!(
            lower[at..].starts_with(&canonical),
            "{name} on {dialect} reads the clock other than as {canonical}: {text}"
        );
    }
}

/// SQL for each dialect, fixed at compile time: one [`Statement`] (the
/// default), or the enforcement DDL of a machine.
///
/// This is the one place that lists the dialects: a new dialect is one
/// field here.
#[derive(Debug, Clone, Copy)]
pub struct Sql<T: 'static = Statement> {
    pub(crate) postgres: T,
    pub(crate) sqlite: T,
    pub(crate) mysql: T,
}

/// A binary keeps only the dialects whose backend's feature is on: the
/// statements of the others are empty there.
impl Sql {
    /// The statement's text as PostgreSQL runs it (`"quoted"` names, `$1`).
    pub const fn postgres(&self) -> &'static str {
        self.postgres.text()
    }

    /// The statement's text as SQLite runs it (`"quoted"` names, `?1`).
    pub const fn sqlite(&self) -> &'static str {
        self.sqlite.text()
    }

    /// The statement's text as MySQL and MariaDB run it (`` `quoted` ``
    /// names, `?`).
    pub const fn mysql(&self) -> &'static str {
        self.mysql.text()
    }

    /// The statement in each dialect, text and bind plan:
    /// `[postgres, sqlite, mysql]`.
    pub const fn statements(&self) -> [Statement; 3] {
        [self.postgres, self.sqlite, self.mysql]
    }
}

#[cfg(test)]
mod clock {
    use super::{NOW, assert_clock};

    #[test]
    fn the_canonical_clock_passes() {
        assert_clock("now", "postgres", &format!("SELECT {}", NOW.postgres));
        assert_clock("now", "sqlite", &format!("SELECT {}", NOW.sqlite));
        assert_clock(
            "now",
            "mysql",
            &format!("SELECT {} - INTERVAL 1 SECOND", NOW.mysql),
        );
    }

    #[test]
    #[should_panic(expected = "reads the clock with now(")]
    fn another_time_function_fails() {
        assert_clock("now", "mysql", "SELECT NOW(3)");
    }

    #[test]
    #[should_panic(expected = "other than as utc_timestamp(3)")]
    fn another_precision_fails() {
        assert_clock("now", "mysql", "SELECT UTC_TIMESTAMP()");
    }

    #[test]
    #[should_panic(expected = "other than as strftime")]
    fn another_format_fails() {
        assert_clock(
            "now",
            "sqlite",
            "SELECT strftime('%Y-%m-%d %H:%M:%S', 'now')",
        );
    }
}
