//! `Machine::verify`: the database's schema read against the machine
//! before the first move: the tables and columns it uses, the key's
//! uniqueness, the version column's `NOT NULL`, and room for every state
//! string in the status column.

use core::fmt;

use crate::StateMachine;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::{Backend, Sql, Statement};
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::machine::Machine;
use crate::transition::bind::{Field, Fields, store_arguments};

/// One way the schema does not fit the machine: the table and, where it
/// concerns one, the column, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    table: String,
    column: Option<String>,
    problem: String,
}

impl SchemaProblem {
    fn new(table: &str, column: Option<&str>, problem: impl Into<String>) -> Self {
        SchemaProblem {
            table: table.to_owned(),
            column: column.map(str::to_owned),
            problem: problem.into(),
        }
    }

    /// The table, as the machine names it.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The column, where the problem is one column's.
    pub fn column(&self) -> Option<&str> {
        self.column.as_deref()
    }

    /// What is wrong, in words.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some(column) => write!(f, "{}.{}: {}", self.table, column, self.problem),
            None => write!(f, "{}: {}", self.table, self.problem),
        }
    }
}

/// What the catalog says of one column.
struct ColumnInfo {
    name: String,
    not_null: bool,
    /// The most characters it holds, where the type says.
    max_chars: Option<i64>,
    /// The values of an enum type (PostgreSQL) or `ENUM` (MySQL).
    labels: Option<Vec<String>>,
    /// The type as the catalog writes it.
    type_name: String,
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
        &[Field::Scope, Field::Tag],
    ),
    sqlite: Statement::new(
        "SELECT name, \"notnull\", NULL, NULL, type FROM pragma_table_info(?1, ?2) ORDER BY cid",
        &[Field::Scope, Field::Key],
    ),
    mysql: Statement::new(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(CASE WHEN IS_NULLABLE = 'NO' THEN 1 ELSE 0 END AS \
         SIGNED), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), CASE WHEN DATA_TYPE = 'enum' THEN \
         CAST(COLUMN_TYPE AS CHAR) END, CAST(COLUMN_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? ORDER BY \
         ORDINAL_POSITION",
        &[Field::Key, Field::Scope],
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
        &[Field::Scope, Field::Tag],
    ),
    sqlite: Statement::new(
        "SELECT json_group_array(ii.name) FROM pragma_index_list(?1, ?2) AS il, \
         pragma_index_info(il.name, ?2) AS ii WHERE il.\"unique\" = 1 AND il.partial = 0 GROUP BY \
         il.name UNION ALL SELECT json_group_array(name) FROM pragma_table_info(?1, ?2) WHERE pk > \
         0 HAVING COUNT(*) > 0",
        &[Field::Scope, Field::Key],
    ),
    mysql: Statement::new(
        "SELECT CAST(CONCAT('[', GROUP_CONCAT(JSON_QUOTE(COLUMN_NAME)), ']') AS CHAR) FROM \
         information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) \
         AND TABLE_NAME = ? AND NON_UNIQUE = 0 GROUP BY INDEX_NAME",
        &[Field::Key, Field::Scope],
    ),
};

/// Which dialect `DB` speaks: 0 PostgreSQL, 1 SQLite, 2 MySQL.
fn dialect<DB: Backend>() -> u8 {
    DB::choose(&Sql {
        postgres: 0,
        sqlite: 1,
        mysql: 2,
    })
}

/// `table` as each statement binds it: `(name, schema)`; on PostgreSQL
/// the name is the quoted, qualified name `to_regclass` reads.
fn place<DB: Backend>(table: &str) -> (String, String) {
    let (schema, bare) = match table.split_once('.') {
        Some((schema, bare)) => (Some(schema), bare),
        None => (None, table),
    };
    match dialect::<DB>() {
        0 => (
            table
                .split('.')
                .map(|part| format!("\"{part}\""))
                .collect::<Vec<_>>()
                .join("."),
            String::new(),
        ),
        1 => (bare.to_owned(), schema.unwrap_or("main").to_owned()),
        _ => (bare.to_owned(), schema.unwrap_or("").to_owned()),
    }
}

/// Whether two column names are the same column: exactly on PostgreSQL,
/// whose quoted names keep their case, without regard to case elsewhere.
fn same<DB: Backend>(a: &str, b: &str) -> bool {
    match dialect::<DB>() {
        0 => a == b,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// The rows of `sql` for `table`.
async fn rows<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    sql: &'static Sql<Statement<Field>>,
    table: &str,
) -> Result<Vec<DB::Row>, sqlx::Error> {
    let statement = DB::choose(sql);
    let (name, schema) = place::<DB>(table);
    let fields = Fields {
        scope: Some(&name),
        key: Some(&schema),
        ..Fields::default()
    };
    let args = store_arguments::<DB>(statement, fields)?;
    let mut executor = pool;
    Proven::rows(&mut executor, statement, args).await
}

async fn columns<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    table: &str,
) -> Result<Vec<ColumnInfo>, sqlx::Error> {
    let at = DB::choose(&COLUMNS).after_tag();
    let mut out = Vec::new();
    for row in rows::<DB>(pool, &COLUMNS, table).await? {
        let labels = match DB::text_opt(&row, at + 3)? {
            None => None,
            Some(text) if dialect::<DB>() == 2 => Some(mysql_enum(&text)),
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
async fn unique_sets<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    table: &str,
) -> Result<Vec<Vec<String>>, sqlx::Error> {
    let at = DB::choose(&UNIQUE).after_tag();
    let mut out = Vec::new();
    for row in rows::<DB>(pool, &UNIQUE, table).await? {
        let json = DB::text_opt(&row, at)?.unwrap_or_default();
        out.push(serde_json::from_str(&json).map_err(|e| {
            sqlx::Error::Protocol(format!("index columns {json:?} are not a JSON array: {e}"))
        })?);
    }
    Ok(out)
}

impl<S: StateMachine> Machine<S> {
    /// Reads the schema of the machine's tables and reports every way it
    /// does not fit the machine, all at once (an empty list when it fits):
    ///
    /// - the table, and every column the machine writes (the status, the
    ///   key, the version, each `since` stamp and each `set` column), exist;
    /// - the key's columns are unique together (a primary key or a unique
    ///   index on them, or on some of them): without it one `UPDATE` can
    ///   move several rows, and [`Error::AmbiguousKey`] comes only after
    ///   they committed;
    /// - the version column is `NOT NULL`;
    /// - every state string fits the status column: its length, and the
    ///   values of a PostgreSQL enum type or a MySQL `ENUM`;
    /// - the history table, where the machine declares one, and the
    ///   outbox table, where a transition emits, exist.
    ///
    /// A few catalog reads: cheap enough for start-up, where a service
    /// should refuse to start on any problem. It does not read the
    /// columns `set` expressions and guards read, nor whether the
    /// enforcement DDL is installed.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `PayoutStatus::MACHINE.verify(&pool).within(d)` ([`Call`]).
    pub fn verify<'p, DB: Backend>(
        &'static self,
        pool: &'p sqlx::Pool<DB>,
    ) -> Call<'p, Vec<SchemaProblem>> {
        Call::new(move |deadline| async move {
            let sent = Sent::default();
            let work = async {
                self.problems(pool)
                    .await
                    .map_err(|source| Error::store(self.table(), "verify", source))
            };
            bounded(self.table(), "verify", deadline, &sent, work).await
        })
    }

    async fn problems<DB: Backend>(
        &'static self,
        pool: &sqlx::Pool<DB>,
    ) -> Result<Vec<SchemaProblem>, sqlx::Error> {
        let table = self.table();
        let mut problems = Vec::new();
        let present = columns::<DB>(pool, table).await?;
        if present.is_empty() {
            problems.push(SchemaProblem::new(table, None, "the table does not exist"));
        } else {
            let find = |name: &str| present.iter().find(|c| same::<DB>(&c.name, name));
            // Every column the machine writes, each once.
            let mut used: Vec<(&str, &str)> = vec![(self.column(), "the status column")];
            used.extend(self.key_columns().iter().map(|k| (*k, "a key column")));
            if let Some(version) = self.version() {
                used.push((version, "the version column"));
            }
            for state in self.states() {
                if let Some(since) = state.since_column() {
                    used.push((since, "a `since` column"));
                }
            }
            for transition in self.transitions() {
                for set in transition.set_columns() {
                    used.push((set.column(), "a `set` column"));
                }
            }
            let mut seen: Vec<&str> = Vec::new();
            for (name, what) in used {
                if seen.iter().any(|s| same::<DB>(s, name)) {
                    continue;
                }
                seen.push(name);
                if find(name).is_none() {
                    problems.push(SchemaProblem::new(
                        table,
                        Some(name),
                        format!("{what}, missing from the table"),
                    ));
                }
            }
            if let Some(status) = find(self.column()) {
                for state in self.states() {
                    let value = state.value().as_str();
                    if let Some(max) = status.max_chars
                        && value.chars().count() as i64 > max
                    {
                        problems.push(SchemaProblem::new(
                            table,
                            Some(self.column()),
                            format!(
                                "the state string {value:?} has {} characters, more than the \
                                 column's {max} ({})",
                                value.chars().count(),
                                status.type_name
                            ),
                        ));
                    }
                    if let Some(labels) = &status.labels
                        && !labels.iter().any(|l| l == value)
                    {
                        problems.push(SchemaProblem::new(
                            table,
                            Some(self.column()),
                            format!(
                                "the state string {value:?} is not one of the column's values \
                                 ({})",
                                status.type_name
                            ),
                        ));
                    }
                }
            }
            if let Some(version) = self.version().and_then(find)
                && !version.not_null
            {
                problems.push(SchemaProblem::new(
                    table,
                    self.version(),
                    "the version column is nullable; declare it NOT NULL (with DEFAULT 0)",
                ));
            }
            let keys = self.key_columns();
            let unique = unique_sets::<DB>(pool, table).await?;
            let covered = unique.iter().any(|set| {
                !set.is_empty() && set.iter().all(|c| keys.iter().any(|k| same::<DB>(k, c)))
            });
            if !covered {
                problems.push(SchemaProblem::new(
                    table,
                    None,
                    format!(
                        "no primary key or unique index on the key ({}): one move could change \
                         several rows",
                        self.key()
                    ),
                ));
            }
        }
        let emits = self.transitions().iter().any(|t| t.emit().is_some());
        let mut others: Vec<(&str, &str)> = Vec::new();
        if let Some(history) = self.history_table() {
            others.push((history, "the history table"));
        }
        if emits {
            others.push((
                self.outbox_table(),
                "the outbox table, which `emit` writes to,",
            ));
        }
        for (other, what) in others {
            if columns::<DB>(pool, other).await?.is_empty() {
                problems.push(SchemaProblem::new(
                    other,
                    None,
                    format!("{what} does not exist"),
                ));
            }
        }
        Ok(problems)
    }
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
        ] {
            crate::transition::bind::assert_plans_fit(name, sql);
        }
    }
}
