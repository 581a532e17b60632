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

// Each PostgreSQL statement binds its own tag last, as every statement of
// the library does (`Statement::tag`); the tests hold each tag to its text.
macro_rules! tag {
    ($hex:literal, $bound:literal) => {
        $crate::__stateguard_store_tag!($hex, [], $bound)
    };
}

/// A table's columns: name, `NOT NULL` (1 or 0), most characters, enum
/// values as a JSON array, type. PostgreSQL: `$1` the table as a quoted
/// name; SQLite: `?1` the table, `?2` the schema (`main`); MySQL: the
/// schema (empty for the connection's database), then the table.
static COLUMNS: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        concat!(
            "SELECT ",
            tag!("c6e92b16858df147", "$2"),
            ", a.attname::text, CAST(CASE WHEN a.attnotnull THEN 1 ELSE 0 END AS BIGINT), \
             CAST(CASE WHEN t.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4 THEN \
             a.atttypmod - 4 END AS BIGINT), CASE WHEN t.typtype = 'e' THEN (SELECT \
             json_agg(e.enumlabel::text ORDER BY e.enumsortorder)::text FROM pg_enum AS e WHERE \
             e.enumtypid = t.oid) END, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS \
             a JOIN pg_type AS t ON t.oid = a.atttypid WHERE a.attrelid = to_regclass($1) AND \
             a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
        ),
        &[Field::Table, Field::Tag],
    ),
    sqlite: Statement::new(
        "SELECT name, \"notnull\", NULL, NULL, type FROM pragma_table_info(?1, ?2) ORDER BY cid",
        &[Field::Table, Field::Schema],
    ),
    mysql: Statement::new(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(CASE WHEN IS_NULLABLE = 'NO' THEN 1 ELSE 0 END AS \
         SIGNED), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), CASE WHEN DATA_TYPE = 'enum' THEN \
         CAST(COLUMN_TYPE AS CHAR) END, CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? ORDER BY \
         ORDINAL_POSITION",
        &[Field::Schema, Field::Table],
    ),
};

/// The column sets of a table's unique indexes (and primary key), each a
/// JSON array of names; binds as [`COLUMNS`].
static UNIQUE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        concat!(
            "SELECT ",
            tag!("a580aef95e55b521", "$2"),
            ", json_agg(a.attname::text)::text FROM pg_index AS i JOIN pg_attribute AS a ON \
             a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = \
             to_regclass($1) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid"
        ),
        &[Field::Table, Field::Tag],
    ),
    sqlite: Statement::new(
        "SELECT json_group_array(ii.name) FROM pragma_index_list(?1, ?2) AS il, \
         pragma_index_info(il.name, ?2) AS ii WHERE il.\"unique\" = 1 AND il.partial = 0 GROUP BY \
         il.name UNION ALL SELECT json_group_array(name) FROM pragma_table_info(?1, ?2) WHERE pk > \
         0 HAVING COUNT(*) > 0",
        &[Field::Table, Field::Schema],
    ),
    mysql: Statement::new(
        "SELECT CAST(CONCAT('[', GROUP_CONCAT(JSON_QUOTE(COLUMN_NAME)), ']') AS CHAR) FROM \
         information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) \
         AND TABLE_NAME = ? AND NON_UNIQUE = 0 GROUP BY INDEX_NAME",
        &[Field::Schema, Field::Table],
    ),
};

/// The definitions that enforce a table's states and transitions: each
/// trigger's body (`trigger`) and each CHECK constraint's clause
/// (`check`; on SQLite, whose checks live in the table's `CREATE TABLE`,
/// that text). Binds as [`COLUMNS`], MySQL's twice.
static ENFORCEMENT: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        concat!(
            "SELECT ",
            tag!("8c2a44ad9171acb2", "$2"),
            ", 'trigger', p.prosrc FROM pg_trigger AS t JOIN pg_proc AS p ON p.oid = t.tgfoid \
             WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal UNION ALL SELECT ",
            tag!("8c2a44ad9171acb2", "$2"),
            ", 'check', pg_get_constraintdef(c.oid) FROM pg_constraint AS c WHERE c.conrelid = \
             to_regclass($1) AND c.contype = 'c'"
        ),
        &[Field::Table, Field::Tag],
    ),
    sqlite: Statement::new(
        "SELECT CASE type WHEN 'trigger' THEN 'trigger' ELSE 'check' END, sql FROM sqlite_master \
         WHERE tbl_name = ?1 AND type IN ('trigger', 'table')",
        &[Field::Table],
    ),
    mysql: Statement::new(
        "SELECT 'trigger', CAST(ACTION_STATEMENT AS CHAR) FROM information_schema.TRIGGERS WHERE \
         EVENT_OBJECT_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND EVENT_OBJECT_TABLE = ? \
         UNION ALL SELECT 'check', CAST(cc.CHECK_CLAUSE AS CHAR) FROM \
         information_schema.TABLE_CONSTRAINTS AS tc JOIN information_schema.CHECK_CONSTRAINTS AS \
         cc ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = \
         tc.CONSTRAINT_NAME WHERE tc.CONSTRAINT_TYPE = 'CHECK' AND tc.TABLE_SCHEMA = \
         COALESCE(NULLIF(?, ''), DATABASE()) AND tc.TABLE_NAME = ?",
        &[Field::Schema, Field::Table, Field::Schema, Field::Table],
    ),
};

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
    let at = DB::choose(&COLUMNS).after_tag();
    let mut out = Vec::new();
    for row in rows::<DB>(conn, &COLUMNS, table).await? {
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
    let at = DB::choose(&UNIQUE).after_tag();
    let mut out = Vec::new();
    for row in rows::<DB>(conn, &UNIQUE, table).await? {
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
    let at = DB::choose(&ENFORCEMENT).after_tag();
    let (mut triggers, mut checks) = (Vec::new(), Vec::new());
    for row in rows::<DB>(conn, &ENFORCEMENT, table).await? {
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

    #[test]
    fn every_statement_is_tagged_and_planned() {
        for (name, sql) in [
            ("VERIFY COLUMNS", &super::COLUMNS),
            ("VERIFY UNIQUE", &super::UNIQUE),
            ("VERIFY ENFORCEMENT", &super::ENFORCEMENT),
        ] {
            crate::transition::bind::assert_plans_fit(name, sql);
        }
    }
}
