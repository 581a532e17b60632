//! The statements a transition runs (DML), built at expansion time from
//! validated names. The output is a string literal per dialect: nothing is
//! formatted into SQL at run time. The dialects' differences in quoting,
//! placeholders and comparison live in `dialect.rs`; the DDL is in `ddl.rs`.
//!
//! **Architecture Invariant:** a `LIMIT`, `SKIP LOCKED` or `ORDER BY` that
//! chooses the rows of an `UPDATE` or `DELETE` is evaluated once, whatever
//! plan the database picks, so that "at most `n`" holds. On PostgreSQL
//! the choice is a `WITH … AS MATERIALIZED (SELECT … LIMIT … FOR UPDATE
//! SKIP LOCKED)` that the write joins or filters by: a CTE scan reads the
//! stored rows again on a rescan and never runs its query twice. A plain
//! subquery is not safe there, neither `FROM (SELECT …)` nor `IN (SELECT
//! …)`: put on the inner side of a nested loop (or of a semi-join), it runs
//! again for each outer row, and each run skips the rows the statement
//! has already moved and takes the next ones. SQLite's `IN (SELECT …
//! LIMIT ?)` is an uncorrelated subquery, which it evaluates once into a
//! transient table before the write. MySQL chooses the rows with a
//! locking `SELECT … LIMIT ? FOR UPDATE SKIP LOCKED` of their own, then
//! writes by key (`claim.rs`, `fenced.rs`). A CTE that locks rows
//! without a `LIMIT` is `MATERIALIZED` too where it orders them
//! (`many.rs`), so that the locks are taken once, in order; one that
//! locks a single row by its key (`transition.rs`) chooses the same row
//! however often it runs. `tests/backends/limits.rs`
//! holds each such statement to its limit, on PostgreSQL also with the
//! planner pushed into nested loops.

use crate::dialect::Dialect;
use crate::model::{Model, Transition};
use crate::plan::{Col, Slot};

/// How a batch's keys are compared with the table's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Match {
    /// Equal, and equal exactly (see `Dialect::key_match`): for any key.
    Exact,
    /// Equal by value: for keys whose equality is exact by value
    /// (integers, UUIDs), on PostgreSQL, where the text comparison that
    /// [`Match::Exact`] adds for text keys costs a hashed subplan.
    ByValue,
}

/// MySQL: the type of a key column of a batch's rows read from JSON
/// (`JSON_TABLE`): as long as the longest key InnoDB can index (3,072
/// bytes), so that no key that a table can hold is cut short, and then
/// found by none of its rows.
const MYSQL_KEY: &str = "VARCHAR(3072)";

/// `columns` as the result's key columns, `Key(0)`, `Key(1)`, …, joined.
fn key_columns(columns: impl IntoIterator<Item = String>) -> String {
    columns
        .into_iter()
        .enumerate()
        .map(|(i, column)| Col::Key(i as u8).of(&column))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A transition's name as the history records it.
fn transition_name(transition: &Transition) -> String {
    syn::ext::IdentExt::unraw(transition.name).to_string()
}

mod claim;
mod counts;
mod fenced;
mod history;
mod lease;
mod many;
mod outbox;
mod transition;

impl Dialect {
    /// The current time as a value of a `since` column: the statement's
    /// time, not the transaction's, so that a lease starts when the row
    /// enters the state, however long the transaction ran before.
    /// PostgreSQL's `CURRENT_TIMESTAMP` is the transaction's start, hence
    /// `statement_timestamp()`; MySQL's `UTC_TIMESTAMP()` and SQLite's
    /// `'now'` already are the statement's time.
    pub(crate) fn now(self) -> &'static str {
        match self {
            Dialect::Postgres => "statement_timestamp()",
            // Text with milliseconds, which sorts as it compares.
            Dialect::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now')",
            // UTC, so that sessions in different time zones agree on when a
            // lease runs out in a DATETIME column.
            Dialect::MySql => "UTC_TIMESTAMP(3)",
        }
    }

    /// The time `ms` (a placeholder for a number of milliseconds) ago, in
    /// the same form as [`Self::now`].
    pub(crate) fn ago(self, ms: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("statement_timestamp() - CAST({ms} AS BIGINT) * INTERVAL '1 millisecond'")
            }
            Dialect::Sqlite => format!(
                "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', \
                 CAST({ms} AS INTEGER) / 1000.0))"
            ),
            Dialect::MySql => format!("UTC_TIMESTAMP(3) - INTERVAL ({ms} * 1000) MICROSECOND"),
        }
    }

    /// The time `ms` (a placeholder for a number of milliseconds) from
    /// now, in the same form as [`Self::now`].
    pub(crate) fn later(self, ms: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("statement_timestamp() + CAST({ms} AS BIGINT) * INTERVAL '1 millisecond'")
            }
            Dialect::Sqlite => format!(
                "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', \
                 CAST({ms} AS INTEGER) / 1000.0))"
            ),
            Dialect::MySql => format!("UTC_TIMESTAMP(3) + INTERVAL ({ms} * 1000) MICROSECOND"),
        }
    }

    /// The time `lease_ms` ago, in the same form as [`Self::now`].
    pub(super) fn lease_expiry(self, lease_ms: u64) -> String {
        match self {
            Dialect::Postgres => {
                format!("statement_timestamp() - INTERVAL '{lease_ms} milliseconds'")
            }
            Dialect::Sqlite => format!(
                "strftime('%Y-%m-%d %H:%M:%f', 'now', '-{}.{:03} seconds')",
                lease_ms / 1000,
                lease_ms % 1000
            ),
            Dialect::MySql => {
                format!(
                    "UTC_TIMESTAMP(3) - INTERVAL {} MICROSECOND",
                    lease_ms * 1000
                )
            }
        }
    }

    /// `key = $1`, matched exactly: equal as the database stores it, not
    /// only under the column's collation or after a type conversion
    /// (MySQL's default collations ignore case and trailing spaces and
    /// compare `'042'` with 42 as numbers; SQLite's `NOCASE` ignores case
    /// and turns `'1.0'` into 1). The effect key is built from the caller's
    /// key, so the row it names must be exactly that key. The plain
    /// equality comes first, so the key's index still finds the row.
    /// MySQL's `?` is positional: each key value is bound twice there.
    /// A key of several columns matches each, its values numbered `$1`,
    /// `$2`, … in the order declared.
    pub(super) fn key_match(self, key: &[String]) -> String {
        key.iter()
            .enumerate()
            .map(|(i, column)| self.exact_eq(&self.quote(column), &Slot::Key(i as u8).mark()))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// `k = v`, and equal exactly (see [`Self::key_match`]).
    pub(super) fn exact_eq(self, k: &str, v: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("{k} = {v} AND CAST({k} AS TEXT) COLLATE \"C\" = CAST({v} AS TEXT)")
            }
            Dialect::Sqlite => format!("{k} = {v} AND CAST({k} AS BLOB) = CAST({v} AS BLOB)"),
            Dialect::MySql => format!("{k} = {v} AND {} = {}", self.bytes(k), self.bytes(v)),
        }
    }

    /// `column` passes `test` (`IN ('a', 'b')`, `= 'a'`).
    ///
    /// MySQL's default collations ignore case and trailing spaces; comparing
    /// bytes (`CAST(c AS BINARY)`) keeps `'Pending'` from passing for
    /// `'pending'`. A cast column cannot use an index, so the plain
    /// comparison stays beside it: it selects the index range (a superset
    /// under any collation, since equal bytes compare equal) and the cast
    /// keeps the exact strings of it.
    pub(super) fn status_is(self, column: &str, test: &str) -> String {
        match self {
            Dialect::MySql => format!("{column} {test} AND {} {test}", self.bytes(column)),
            Dialect::Postgres | Dialect::Sqlite => format!("{column} {test}"),
        }
    }

    /// The status column among the transition's sources (`IN ('a', 'b')`).
    pub(super) fn in_sources(self, model: &Model, transition: &Transition) -> String {
        self.status_is(
            &self.quote(&model.column),
            &self.sources_in(model, transition),
        )
    }

    /// `IN ('a', 'b')`: the transition's sources.
    fn sources_in(self, model: &Model, transition: &Transition) -> String {
        let sources: Vec<String> = transition
            .sources
            .iter()
            .map(|&s| format!("'{}'", model.states[s].db))
            .collect();
        format!("IN ({})", sources.join(", "))
    }

    /// [`Self::status_is`] in a statement whose rows a batch's keys find:
    /// on SQLite written `+status`, which keeps the planner from scanning
    /// an index on the status column (the one claims want) for every key
    /// when the table has no statistics. The keys drive the join, each
    /// row found by its key.
    pub(super) fn status_is_keyed(self, column: &str, test: &str) -> String {
        match self {
            Dialect::Sqlite => format!("+{column} {test}"),
            Dialect::Postgres | Dialect::MySql => self.status_is(column, test),
        }
    }

    /// [`Self::in_sources`] where a batch's keys find the rows (see
    /// [`Self::status_is_keyed`]).
    pub(super) fn in_sources_keyed(self, model: &Model, transition: &Transition) -> String {
        self.status_is_keyed(
            &self.quote(&model.column),
            &self.sources_in(model, transition),
        )
    }

    /// The version column, with NULL (a column added without a default)
    /// read as 0, so that it still counts.
    pub(super) fn version_value(self, version: &str) -> String {
        format!("COALESCE({}, 0)", self.quote(version))
    }

    /// The version column read as a 64-bit integer.
    pub(super) fn version_read(self, version: Option<&str>) -> String {
        let column = match version {
            Some(version) => self.version_value(version),
            None => "0".to_owned(),
        };
        self.int64(&column)
    }

    /// `expr` read as a 64-bit integer.
    pub(super) fn int64(self, expr: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({expr} AS BIGINT)"),
            Dialect::Sqlite => format!("CAST({expr} AS INTEGER)"),
            Dialect::MySql => format!("CAST({expr} AS SIGNED)"),
        }
    }

    /// The lease token of a row in an in-flight state: its `since` stamp as
    /// an integer (microseconds on PostgreSQL and MySQL, milliseconds on
    /// SQLite), computed the same way every time, independent of the
    /// session's time zone. Entering the state, a takeover and a renewal
    /// each stamp a new `since`, so the token says which holder the lease
    /// is with. NULL (a row put there by hand) reads as 0.
    pub(super) fn lease_token(self, since: &str) -> String {
        let s = self.quote(since);
        match self {
            Dialect::Postgres => {
                format!("COALESCE(CAST(EXTRACT(EPOCH FROM {s}) * 1000000 AS BIGINT), 0)")
            }
            Dialect::Sqlite => {
                format!("COALESCE(CAST(ROUND(unixepoch({s}, 'subsec') * 1000) AS INTEGER), 0)")
            }
            Dialect::MySql => {
                format!("COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {s}), 0)")
            }
        }
    }

    /// `expr`, a time as [`Self::now`] writes one, `ms` milliseconds
    /// later.
    pub(super) fn after_ms(self, expr: &str, ms: u64) -> String {
        match self {
            Dialect::Postgres => format!("({expr} + INTERVAL '{ms} milliseconds')"),
            Dialect::Sqlite => format!(
                "strftime('%Y-%m-%d %H:%M:%f', {expr}, '+{}.{:03} seconds')",
                ms / 1000,
                ms % 1000
            ),
            Dialect::MySql => format!("({expr} + INTERVAL {} MICROSECOND)", ms * 1000),
        }
    }

    /// The milliseconds from `expr`, a time as [`Self::now`] writes one,
    /// to now, as an integer.
    pub(super) fn ms_since(self, expr: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!(
                    "CAST(EXTRACT(EPOCH FROM (statement_timestamp() - {expr})) * 1000 AS BIGINT)"
                )
            }
            Dialect::Sqlite => {
                format!("CAST(ROUND((julianday('now') - julianday({expr})) * 86400000) AS INTEGER)")
            }
            Dialect::MySql => {
                format!(
                    "CAST(TIMESTAMPDIFF(MICROSECOND, {expr}, UTC_TIMESTAMP(3)) / 1000 AS SIGNED)"
                )
            }
        }
    }

    /// The time in `column` as microseconds since the Unix epoch, UTC: a
    /// `TIMESTAMPTZ`, SQLite's UTC text, a `DATETIME(3)` written in UTC.
    pub(super) fn epoch_micros(self, column: &str) -> String {
        let c = self.quote(column);
        match self {
            Dialect::Postgres => format!("CAST(EXTRACT(EPOCH FROM {c}) * 1000000 AS BIGINT)"),
            Dialect::Sqlite => {
                format!("CAST(ROUND(unixepoch({c}, 'subsec') * 1000) AS INTEGER) * 1000")
            }
            Dialect::MySql => format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c})"),
        }
    }

    /// The status read as text even from a PostgreSQL enum or a MySQL
    /// ENUM column.
    pub(super) fn status_read(self, column: &str) -> String {
        self.status_text(&self.quote(column))
    }

    /// [`Self::status_read`] of a column already quoted (and qualified).
    pub(super) fn status_text(self, column: &str) -> String {
        let column = column.to_owned();
        match self {
            Dialect::Postgres => format!("{column}::text"),
            Dialect::Sqlite => column,
            Dialect::MySql => format!("CAST({column} AS CHAR)"),
        }
    }

    /// What makes the losing path's read see the row as it is now, not as
    /// a snapshot had it.
    ///
    /// InnoDB's plain SELECT inside a REPEATABLE READ transaction reads the
    /// transaction's snapshot, while its UPDATE reads the latest committed
    /// row: a lost compare-and-set would then see the stale source state. A
    /// locking read sees what the UPDATE saw. PostgreSQL's REPEATABLE READ
    /// and SERIALIZABLE transactions read their snapshot too; there a
    /// locking read of a row changed since the snapshot fails with 40001
    /// (retry the transaction) instead. In autocommit every PostgreSQL
    /// statement has a fresh snapshot, so the read takes no lock there.
    /// SQLite has one writer: a transaction that has written reads the
    /// latest row.
    pub(super) fn read_lock(self, in_transaction: bool) -> &'static str {
        match self {
            Dialect::MySql => " LOCK IN SHARE MODE",
            Dialect::Postgres if in_transaction => " FOR SHARE",
            Dialect::Postgres | Dialect::Sqlite => "",
        }
    }

    /// PostgreSQL: the key columns as `alias0`, `alias1`, …, qualified by
    /// `table` where one is given.
    pub(super) fn key_aliases(self, model: &Model, table: Option<&str>, alias: &str) -> String {
        model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| match table {
                Some(table) => format!("{table}.{} AS {alias}{i}", self.quote(k)),
                None => format!("{} AS {alias}{i}", self.quote(k)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// PostgreSQL: the table's row is the one `__sg_old` read and locked.
    pub(super) fn join_old(self, model: &Model) -> String {
        let table = self.quote(&model.table);
        model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{table}.{} = __sg_old.__sg_k{i}", self.quote(k)))
            .collect::<Vec<_>>()
            .join(" AND ")
    }
}

#[cfg(test)]
mod tests;
