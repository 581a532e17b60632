//! What `verify` reads of the database's catalog, per dialect: a
//! table's columns, its unique indexes, and the definitions that enforce
//! its states.

use crate::ddl::Dialect;
use crate::dialect::{Backend, Sql, Statement};
use crate::executor::proven::Proven;
use crate::transition::bind::{Field, Fields, store_arguments};
use sqlx::pool::PoolConnection;

/// What the catalog says of one column.
pub(super) struct ColumnInfo {
    pub(super) name: String,
    pub(super) not_null: bool,
    /// The most characters it holds, where the type says.
    pub(super) max_chars: Option<i64>,
    /// The values of an enum type (PostgreSQL) or `ENUM` (MySQL).
    pub(super) labels: Option<Vec<String>>,
    /// The type as the catalog writes it.
    pub(super) type_name: String,
}

/// The catalog reads, written by the derive crate through the same bind
/// plans as every statement (`guard-macros/src/stores/catalog.rs`), which
/// says what each returns:
/// - `COLUMNS`: a table's columns (name, `NOT NULL`, most characters,
///   enum values, type);
/// - `UNIQUE`: the column sets of its unique indexes and primary key;
/// - `ENFORCEMENT`: the trigger bodies and CHECK clauses that enforce its
///   states.
static CATALOG: [Sql<Statement<Field>>; 3] = stateguard_macros::__catalog_statements!(crate);
static COLUMNS: &Sql<Statement<Field>> = &CATALOG[0];
static UNIQUE: &Sql<Statement<Field>> = &CATALOG[1];
static ENFORCEMENT: &Sql<Statement<Field>> = &CATALOG[2];

/// `table` as each statement binds it: `(name, schema)`; on PostgreSQL
/// the name is the quoted, qualified name `to_regclass` reads.
fn place<DB: Backend>(table: &str) -> (String, String) {
    let (schema, bare) = match table.split_once('.') {
        Some((schema, bare)) => (Some(schema), bare),
        None => (None, table),
    };
    match Dialect::of::<DB>() {
        Dialect::Postgres => (
            table
                .split('.')
                .map(|part| format!("\"{part}\""))
                .collect::<Vec<_>>()
                .join("."),
            String::new(),
        ),
        Dialect::Sqlite => (bare.to_owned(), schema.unwrap_or("main").to_owned()),
        _ => (bare.to_owned(), schema.unwrap_or("").to_owned()),
    }
}

/// Whether two column names are the same column: exactly on PostgreSQL,
/// whose quoted names keep their case, without regard to case elsewhere.
pub(super) fn same<DB: Backend>(a: &str, b: &str) -> bool {
    match Dialect::of::<DB>() {
        Dialect::Postgres => a == b,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// The rows of `sql` for `table`.
async fn rows<DB: Backend>(
    conn: &mut PoolConnection<DB>,
    sql: &'static Sql<Statement<Field>>,
    table: &str,
) -> Result<Vec<DB::Row>, sqlx::Error> {
    let statement = DB::choose(sql);
    let (name, schema) = place::<DB>(table);
    let fields = Fields {
        table: Some(&name),
        schema: Some(&schema),
        ..Fields::default()
    };
    let args = store_arguments::<DB>(statement, fields)?;
    let mut executor = conn;
    Proven::rows(&mut executor, statement, args).await
}

pub(super) async fn columns<DB: Backend>(
    conn: &mut PoolConnection<DB>,
    table: &str,
) -> Result<Vec<ColumnInfo>, sqlx::Error> {
    let at = DB::choose(COLUMNS).after_tag();
    let mut out = Vec::new();
    for row in rows::<DB>(conn, COLUMNS, table).await? {
        let labels = match DB::text_opt(&row, at + 3)? {
            None => None,
            Some(text) if Dialect::of::<DB>() == Dialect::MySql => Some(mysql_enum(&text)),
            Some(json) => Some(serde_json::from_str(&json).map_err(|e| {
                sqlx::Error::Protocol(format!("enum values {json:?} are not a JSON array: {e}"))
            })?),
        };
        out.push(ColumnInfo {
            name: DB::text_opt(&row, at)?.unwrap_or_default(),
            not_null: DB::int_opt(&row, at + 1)?.unwrap_or(0) != 0,
            max_chars: DB::int_opt(&row, at + 2)?,
            labels,
            type_name: DB::text_opt(&row, at + 4)?.unwrap_or_default(),
        });
    }
    Ok(out)
}

/// The values of MySQL's `enum('a','b')`, each `''` read as `'`.
fn mysql_enum(column_type: &str) -> Vec<String> {
    let inner = column_type
        .trim()
        .strip_prefix("enum(")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or("");
    let mut values = Vec::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    value.push('\'');
                }
                '\'' => break,
                c => value.push(c),
            }
        }
        values.push(value);
    }
    values
}

/// The column sets of `table`'s unique indexes.
pub(super) async fn unique_sets<DB: Backend>(
    conn: &mut PoolConnection<DB>,
    table: &str,
) -> Result<Vec<Vec<String>>, sqlx::Error> {
    let at = DB::choose(UNIQUE).after_tag();
    let mut out = Vec::new();
    for row in rows::<DB>(conn, UNIQUE, table).await? {
        let json = DB::text_opt(&row, at)?.unwrap_or_default();
        out.push(serde_json::from_str(&json).map_err(|e| {
            sqlx::Error::Protocol(format!("index columns {json:?} are not a JSON array: {e}"))
        })?);
    }
    Ok(out)
}

/// The bodies of `table`'s triggers and the texts of its CHECK
/// constraints (on SQLite, the table's `CREATE TABLE`).
pub(super) async fn enforcement_texts<DB: Backend>(
    conn: &mut PoolConnection<DB>,
    table: &str,
) -> Result<(Vec<String>, Vec<String>), sqlx::Error> {
    let at = DB::choose(ENFORCEMENT).after_tag();
    let (mut triggers, mut checks) = (Vec::new(), Vec::new());
    for row in rows::<DB>(conn, ENFORCEMENT, table).await? {
        let text = DB::text_opt(&row, at + 1)?.unwrap_or_default();
        match DB::text_opt(&row, at)?.as_deref() {
            Some("trigger") => triggers.push(text),
            _ => checks.push(text),
        }
    }
    Ok((triggers, checks))
}

#[cfg(test)]
mod tests {
    use super::mysql_enum;

    #[test]
    fn mysql_enum_values() {
        assert_eq!(mysql_enum("enum('pending','sent')"), ["pending", "sent"]);
        assert_eq!(mysql_enum("enum('it''s','a,b')"), ["it's", "a,b"]);
        assert!(mysql_enum("varchar(32)").is_empty());
    }
}
