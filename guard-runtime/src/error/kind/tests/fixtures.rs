//! What the placement test builds its errors from: a one-state machine,
//! a database error with a code of our choosing, and the database errors
//! that decide a variant's kind.

use std::borrow::Cow;

use super::ErrorKind::{self, Database, Transient};
use crate::machine::construct;
use crate::machine::{DdlText, Machine};

/// A one-state machine, for an `UnknownState` of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lone {
    Only,
}

const NONE: crate::dialect::Statement = construct::statement("", &[], &[]);

const NO_DDL: DdlText = construct::ddl(construct::DdlParts {
    constraint: "",
    trigger: "",
    check_clause: "",
    up: &[],
    down: &[],
    migration: "",
    down_migration: "",
});

const NO_TABLE: crate::machine::TableText = construct::table_text(construct::TableParts {
    create: "",
    columns: &[],
    primary_key: "",
    history: &[],
});

impl crate::StateMachine for Lone {
    const MACHINE: &'static Machine<Self> = &construct::machine(construct::MachineParts {
        name: "Lone",
        table: "lones",
        column: "status",
        key: "id",
        key_columns: &["id"],
        version: None,
        initial: Lone::Only,
        states: &[],
        transitions: &[],
        select: construct::per_dialect(construct::PerDialect {
            postgres: NONE,
            sqlite: NONE,
            mysql: NONE,
        }),
        select_in_transaction: construct::per_dialect(construct::PerDialect {
            postgres: NONE,
            sqlite: NONE,
            mysql: NONE,
        }),
        history: None,
        history_read: None,
        available: construct::per_dialect(construct::PerDialect {
            postgres: NONE,
            sqlite: NONE,
            mysql: NONE,
        }),
        counts: construct::per_dialect(construct::PerDialect {
            postgres: NONE,
            sqlite: NONE,
            mysql: NONE,
        }),
        rows: construct::per_dialect(construct::PerDialect {
            postgres: NONE,
            sqlite: NONE,
            mysql: NONE,
        }),
        rows_after: construct::per_dialect(construct::PerDialect {
            postgres: NONE,
            sqlite: NONE,
            mysql: NONE,
        }),
        outbox: "stateguard_outbox",
        fingerprint: "",
        ddl: construct::per_dialect(construct::PerDialect {
            postgres: NO_DDL,
            sqlite: NO_DDL,
            mysql: NO_DDL,
        }),
        table_text: construct::per_dialect(construct::PerDialect {
            postgres: NO_TABLE,
            sqlite: NO_TABLE,
            mysql: NO_TABLE,
        }),
    });
    type KeyShape = crate::machine::key::shape::One;

    fn as_str(self) -> &'static str {
        "only"
    }

    fn from_db_str(value: &str) -> Option<Self> {
        (value == "only").then_some(Lone::Only)
    }
}

/// A database's error with a code, as a driver reports it.
#[derive(Debug)]
struct Coded(&'static str);

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error {}", self.0)
    }
}

impl std::error::Error for Coded {}

impl sqlx::error::DatabaseError for Coded {
    fn message(&self) -> &str {
        self.0
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.0))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

pub(super) fn coded(code: &'static str) -> sqlx::Error {
    sqlx::Error::Database(Box::new(Coded(code)))
}

pub(super) fn reset() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
}

/// Database errors and their kind where nothing was in flight (`Begin`,
/// where no write is ever in flight), and as the source of a `Store` or
/// `Recovery` error (whose writes may commit when the connection breaks).
/// MySQL's numbers need its driver's own error type: `test_errors.rs`
/// covers them with the server's.
pub(super) fn sources() -> Vec<(&'static str, sqlx::Error, ErrorKind)> {
    let mut sources = vec![
        (
            "PostgreSQL serialization failure",
            coded("40001"),
            Transient,
        ),
        ("PostgreSQL deadlock", coded("40P01"), Transient),
        ("PostgreSQL lock not available", coded("55P03"), Transient),
        ("PostgreSQL too many connections", coded("53300"), Transient),
        ("PostgreSQL connection failure", coded("08006"), Transient),
        ("PostgreSQL admin shutdown", coded("57P01"), Transient),
        ("PostgreSQL cannot connect now", coded("57P03"), Transient),
        ("pool timeout", sqlx::Error::PoolTimedOut, Transient),
        ("broken connection", reset(), Transient),
        (
            "protocol error",
            sqlx::Error::Protocol("eof".into()),
            Transient,
        ),
        ("worker crashed", sqlx::Error::WorkerCrashed, Transient),
        (
            "PostgreSQL read-only transaction",
            coded("25006"),
            Transient,
        ),
        ("PostgreSQL unique violation", coded("23505"), Database),
        ("PostgreSQL syntax error", coded("42601"), Database),
        ("PostgreSQL undefined table", coded("42P01"), Database),
        ("PostgreSQL invalid JSON text", coded("22P02"), Database),
        ("pool closed", sqlx::Error::PoolClosed, Database),
        ("row not found", sqlx::Error::RowNotFound, Database),
        (
            "column not found",
            sqlx::Error::ColumnNotFound("status".into()),
            Database,
        ),
    ];
    // SQLite's result codes are numbers that mean nothing to the other
    // backends: they are read as SQLite's only where its driver is built.
    #[cfg(feature = "sqlite")]
    sources.extend([
        ("SQLite busy", coded("5"), Transient),
        ("SQLite busy snapshot", coded("517"), Transient),
        ("SQLite locked", coded("6"), Transient),
        ("SQLite constraint (unique)", coded("2067"), Database),
        ("SQLite error (syntax)", coded("1"), Database),
    ]);
    sources
}
