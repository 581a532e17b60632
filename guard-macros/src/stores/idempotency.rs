//! The idempotency store's statements and table, in the order of the
//! runtime's `IdempotencySql`.

use super::{Place, tag};
use crate::dialect::Dialect;
use crate::plan::{Field, TAG};

pub(super) const TABLE: &str = "stateguard_idempotency";

pub(super) const STATEMENTS: [fn(Dialect, &Place) -> String; 7] =
    [read, claim, take_over, complete, release, prune, running];

/// `scope = … AND idem_key = …`: one key's row.
fn keyed() -> String {
    format!(
        "scope = {} AND idem_key = {}",
        Field::Scope.mark(),
        Field::Key.mark()
    )
}

/// The columns a caller reads of a key's row: fingerprint, state, lease,
/// response status and body, whether the lease ran out (1 or 0), headers.
fn row_columns(d: Dialect) -> String {
    let (int, now) = (int(d), d.now());
    format!(
        "fingerprint, state, lease, {}, response_body, \
         {}, response_headers",
        cast(d, "response_status", int),
        cast(
            d,
            &format!("CASE WHEN locked_until < {now} THEN 1 ELSE 0 END"),
            int
        ),
    )
}

/// The integer type a column is read as.
fn int(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "BIGINT",
        Dialect::Sqlite => "",
        Dialect::MySql => "SIGNED",
    }
}

/// `expr` cast to `ty`, or as it is where SQLite needs no cast.
fn cast(d: Dialect, expr: &str, ty: &str) -> String {
    match d {
        Dialect::Sqlite => expr.to_owned(),
        Dialect::Postgres | Dialect::MySql => format!("CAST({expr} AS {ty})"),
    }
}

/// The key's row: as [`row_columns`].
fn read(d: Dialect, at: &Place) -> String {
    format!(
        "SELECT {}{} FROM {} WHERE {}",
        tag(d),
        row_columns(d),
        at.table(d, TABLE),
        keyed()
    )
}

/// A new key's row, running under lease 1 for a number of milliseconds;
/// on PostgreSQL also the existing row, after a first column that says
/// which (1 for a new row), committed without waiting for its WAL flush
/// (the runtime's `IdempotencySql::claim` says why).
fn claim(d: Dialect, at: &Place) -> String {
    let table = at.table(d, TABLE);
    let (now, until) = (d.now(), d.later(&Field::Millis.mark()));
    let values = format!(
        "(scope, idem_key, fingerprint, state, lease, locked_until, created_at) VALUES ({}, {}, \
         {}, 'running', 1, {until}, {now})",
        Field::Scope.mark(),
        Field::Key.mark(),
        Field::Fingerprint.mark(),
    );
    match d {
        Dialect::Postgres => format!(
            "WITH __sg_new AS (INSERT INTO {table} {values} ON CONFLICT (scope, idem_key) DO \
             NOTHING RETURNING lease) SELECT {}CAST(1 AS BIGINT), CAST(NULL AS TEXT), CAST(NULL \
             AS TEXT), lease, CAST(NULL AS BIGINT), CAST(NULL AS BYTEA), CAST(0 AS BIGINT), \
             CAST(NULL AS TEXT), set_config('synchronous_commit', 'off', true) FROM __sg_new \
             UNION ALL SELECT {TAG}, CAST(0 AS BIGINT), {}, CAST(NULL AS TEXT) FROM {table} \
             WHERE {} AND NOT EXISTS (SELECT 1 FROM __sg_new)",
            tag(d),
            row_columns(d),
            keyed(),
        ),
        Dialect::Sqlite => format!(
            "INSERT INTO {table} {values} ON CONFLICT (scope, idem_key) DO NOTHING RETURNING 1"
        ),
        // Safe here: every value was checked to fit.
        Dialect::MySql => format!("INSERT IGNORE INTO {table} {values}"),
    }
}

/// A running key whose lease ran out, taken over under the next lease;
/// returns the new lease (MySQL: through `LAST_INSERT_ID`).
fn take_over(d: Dialect, at: &Place) -> String {
    let lease = match d {
        Dialect::MySql => "LAST_INSERT_ID(lease + 1)",
        Dialect::Postgres | Dialect::Sqlite => "lease + 1",
    };
    let returning = match d {
        Dialect::Postgres => format!(" RETURNING {}lease", tag(d)),
        Dialect::Sqlite => " RETURNING lease".to_owned(),
        Dialect::MySql => String::new(),
    };
    format!(
        "UPDATE {} SET lease = {lease}, locked_until = {} WHERE {} AND state = 'running' AND \
         lease = {} AND locked_until < {}{returning}",
        at.table(d, TABLE),
        d.later(&Field::Millis.mark()),
        keyed(),
        Field::Lease.mark(),
        d.now(),
    )
}

/// `WHERE` the key is running under the caller's lease.
fn held() -> String {
    format!(
        "{} AND state = 'running' AND lease = {}",
        keyed(),
        Field::Lease.mark()
    )
}

/// The response of the running key the caller holds.
fn complete(d: Dialect, at: &Place) -> String {
    format!(
        "UPDATE {} SET state = 'done', response_status = {}, response_body = {}, \
         response_headers = {}, locked_until = NULL, completed_at = {} WHERE {}",
        at.table(d, TABLE),
        Field::Status.mark(),
        Field::Body.mark(),
        Field::Headers.mark(),
        d.now(),
        held(),
    )
}

/// The running key the caller holds, removed.
fn release(d: Dialect, at: &Place) -> String {
    format!("DELETE FROM {} WHERE {}", at.table(d, TABLE), held())
}

/// Up to a number of keys created more than a number of milliseconds ago
/// that no lease holds, oldest first, removed.
fn prune(d: Dialect, at: &Place) -> String {
    let table = at.table(d, TABLE);
    let due = format!(
        "created_at < {} AND (state = 'done' OR locked_until < {}) ORDER BY created_at LIMIT {}",
        d.ago(&Field::Millis.mark()),
        d.now(),
        Field::Limit.mark(),
    );
    match d {
        Dialect::Postgres => format!(
            "WITH __sg_p AS MATERIALIZED (SELECT scope, idem_key FROM {table} WHERE {due} FOR \
             UPDATE SKIP LOCKED) DELETE FROM {table} WHERE (scope, idem_key) IN (SELECT scope, \
             idem_key FROM __sg_p)"
        ),
        Dialect::Sqlite => {
            format!("DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {due})")
        }
        Dialect::MySql => format!("DELETE FROM {table} WHERE {due}"),
    }
}

/// How many keys are running, counted up to a number of rows: one past
/// the most a caller shows.
fn running(d: Dialect, at: &Place) -> String {
    super::count(d, &at.table(d, TABLE), "state = 'running'")
}

/// The table and its index.
pub(super) fn ddl(d: Dialect, at: &Place) -> Vec<String> {
    let table = at.table(d, TABLE);
    let index = "stateguard_idempotency_created_at";
    match d {
        Dialect::Postgres => vec![
            format!(
                "CREATE TABLE {table} (
    scope TEXT COLLATE \"C\" NOT NULL,
    idem_key TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT COLLATE \"C\" NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease BIGINT NOT NULL,
    locked_until TIMESTAMPTZ,
    response_status INTEGER,
    response_body BYTEA,
    response_headers TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    completed_at TIMESTAMPTZ,
    PRIMARY KEY (scope, idem_key)
)"
            ),
            format!(
                "CREATE INDEX {} ON {} (created_at)",
                at.index(d, index),
                at.indexed(d, TABLE)
            ),
        ],
        Dialect::Sqlite => vec![
            format!(
                "CREATE TABLE {table} (
    scope TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease INTEGER NOT NULL,
    locked_until TEXT,
    response_status INTEGER,
    response_body BLOB,
    response_headers TEXT,
    created_at TEXT NOT NULL,
    completed_at TEXT,
    PRIMARY KEY (scope, idem_key)
)"
            ),
            format!(
                "CREATE INDEX {} ON {} (created_at)",
                at.index(d, index),
                at.indexed(d, TABLE)
            ),
        ],
        Dialect::MySql => vec![format!(
            "CREATE TABLE {table} (
    scope VARBINARY(1020) NOT NULL,
    idem_key VARBINARY(1020) NOT NULL,
    fingerprint VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state VARCHAR(16) NOT NULL,
    lease BIGINT NOT NULL,
    locked_until DATETIME(3) NULL,
    response_status INT NULL,
    response_body LONGBLOB NULL,
    response_headers LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    created_at DATETIME(3) NOT NULL,
    completed_at DATETIME(3) NULL,
    PRIMARY KEY (scope, idem_key),
    KEY {index} (created_at)
)"
        )],
    }
}
