//! The store's table: its `CREATE TABLE` per dialect.

use crate::ddl::Dialect as DdlDialect;

/// The statements of the store, in [`ddl`]'s order.
const DDL_POSTGRES: &[&str] = &[
    "CREATE TABLE stateguard_idempotency (
    scope TEXT COLLATE \"C\" NOT NULL,
    idem_key TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT COLLATE \"C\" NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease BIGINT NOT NULL,
    locked_until TIMESTAMPTZ,
    response_status INTEGER,
    response_body BYTEA,
    created_at TIMESTAMPTZ NOT NULL,
    completed_at TIMESTAMPTZ,
    PRIMARY KEY (scope, idem_key)
)",
    "CREATE INDEX stateguard_idempotency_created_at ON stateguard_idempotency (created_at)",
];

const DDL_SQLITE: &[&str] = &[
    "CREATE TABLE stateguard_idempotency (
    scope TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease INTEGER NOT NULL,
    locked_until TEXT,
    response_status INTEGER,
    response_body BLOB,
    created_at TEXT NOT NULL,
    completed_at TEXT,
    PRIMARY KEY (scope, idem_key)
)",
    "CREATE INDEX stateguard_idempotency_created_at ON stateguard_idempotency (created_at)",
];

// Scope and key are bytes (VARBINARY), compared exactly: MySQL's string
// collations, `_bin` ones included, ignore trailing spaces.
const DDL_MYSQL: &[&str] = &["CREATE TABLE stateguard_idempotency (
    scope VARBINARY(1020) NOT NULL,
    idem_key VARBINARY(1020) NOT NULL,
    fingerprint VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state VARCHAR(16) NOT NULL,
    lease BIGINT NOT NULL,
    locked_until DATETIME(3) NULL,
    response_status INT NULL,
    response_body LONGBLOB NULL,
    created_at DATETIME(3) NOT NULL,
    completed_at DATETIME(3) NULL,
    PRIMARY KEY (scope, idem_key),
    KEY stateguard_idempotency_created_at (created_at)
)"];

/// The statements that create the store's table and its index in
/// `dialect`, without trailing `;`. Run them once, in a migration.
pub fn ddl(dialect: DdlDialect) -> &'static [&'static str] {
    match dialect {
        DdlDialect::Postgres => DDL_POSTGRES,
        DdlDialect::Sqlite => DDL_SQLITE,
        DdlDialect::MySql => DDL_MYSQL,
    }
}
