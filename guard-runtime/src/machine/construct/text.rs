//! The texts in the metadata, for the derive's generated code only: each
//! statement per dialect with its plan, the enforcement DDL, and the
//! machine's table (see the parent module).

use super::NONE;
use crate::dialect::{Bind, Column, Statement};
use crate::machine::{DdlText, DeclaredType, Sql, TableColumn, TableText};

/// A statement, dialect by dialect: what `sql!` builds.
pub struct Statements(Sql);

impl Statements {
    /// No dialect has it yet.
    pub const NONE: Statements = Statements(NONE);

    /// PostgreSQL's text.
    pub const fn postgres(self, statement: Statement) -> Self {
        Statements(Sql {
            postgres: statement,
            ..self.0
        })
    }

    /// SQLite's text.
    pub const fn sqlite(self, statement: Statement) -> Self {
        Statements(Sql {
            sqlite: statement,
            ..self.0
        })
    }

    /// MySQL's text.
    pub const fn mysql(self, statement: Statement) -> Self {
        Statements(Sql {
            mysql: statement,
            ..self.0
        })
    }

    /// The statement.
    pub const fn sql(self) -> Sql {
        self.0
    }
}

/// One statement, or one machine's DDL, in every dialect.
#[allow(missing_docs)]
pub struct PerDialect<T: 'static> {
    pub postgres: T,
    pub sqlite: T,
    pub mysql: T,
}

/// The dialects' members, from their parts.
pub const fn per_dialect<T: Copy + 'static>(parts: PerDialect<T>) -> Sql<T> {
    let PerDialect {
        postgres,
        sqlite,
        mysql,
    } = parts;
    Sql {
        postgres,
        sqlite,
        mysql,
    }
}

/// One statement in one dialect: its text, its bind plan and the
/// columns it returns.
pub const fn statement(
    text: &'static str,
    binds: &'static [Bind],
    returns: &'static [Column],
) -> Statement {
    Statement::returning(text, binds, returns)
}

/// The enforcement DDL of a machine in one dialect.
///
/// Each field is the `DdlText` field of the same name, documented at its
/// accessor; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct DdlParts {
    pub constraint: &'static str,
    pub trigger: &'static str,
    pub check_clause: &'static str,
    pub up: &'static [&'static str],
    pub down: &'static [&'static str],
    pub migration: &'static str,
    pub down_migration: &'static str,
}

/// One dialect's DDL, from its parts.
pub const fn ddl(parts: DdlParts) -> DdlText {
    let DdlParts {
        constraint,
        trigger,
        check_clause,
        up,
        down,
        migration,
        down_migration,
    } = parts;
    DdlText {
        constraint,
        trigger,
        check_clause,
        up,
        down,
        migration,
        down_migration,
    }
}

/// The machine's tables in one dialect.
///
/// Each field is the `TableText` field of the same name, documented
/// there; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct TableParts {
    pub create: &'static str,
    pub columns: &'static [TableColumn],
    pub primary_key: &'static str,
    pub history: &'static [&'static str],
}

/// One dialect's tables, from their parts.
pub const fn table_text(parts: TableParts) -> TableText {
    let TableParts {
        create,
        columns,
        primary_key,
        history,
    } = parts;
    TableText {
        create,
        columns,
        primary_key,
        history,
    }
}

/// A column of a type the derive wrote (`sql`), by its quoted name, with
/// what follows the type (` NOT NULL DEFAULT 0`, or nothing).
pub const fn typed(name: &'static str, sql: &'static str, rest: &'static str) -> TableColumn {
    TableColumn {
        name,
        declared: DeclaredType::Sql(sql),
        rest,
        note: "",
    }
}

/// A column of the Rust type numbered `n` among the machine's (`written`
/// as the attribute wrote it), a key column or not.
pub const fn rust_typed(
    name: &'static str,
    n: u16,
    written: &'static str,
    key: bool,
    rest: &'static str,
) -> TableColumn {
    TableColumn {
        name,
        declared: DeclaredType::Rust { n, written, key },
        rest,
        note: "",
    }
}

/// A column whose type is not known, with what follows the type and what
/// the machine says of it instead.
pub const fn untyped(name: &'static str, rest: &'static str, note: &'static str) -> TableColumn {
    TableColumn {
        name,
        declared: DeclaredType::Unknown,
        rest,
        note,
    }
}
