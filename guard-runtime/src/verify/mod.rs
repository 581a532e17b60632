//! `Machine::verify`: the database's schema read against the machine
//! before the first move: the tables and columns it uses, the key's
//! uniqueness, the version column's `NOT NULL`, and room for every state
//! string in the status column.

mod prepared;
mod problem;

pub use self::problem::{SchemaProblem, SchemaProblemKind};

use self::prepared::{Present, prepared};
use self::problem::once;
use crate::StateMachine;
use crate::ddl::Dialect;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::{Backend, Sql, Statement};
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::machine::Machine;
use crate::transition::bind::{Field, Fields, store_arguments};

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
        &[Field::Scope, Field::Tag],
    ),
    sqlite: Statement::new(
        "SELECT CASE type WHEN 'trigger' THEN 'trigger' ELSE 'check' END, sql FROM sqlite_master \
         WHERE tbl_name = ?1 AND type IN ('trigger', 'table')",
        &[Field::Scope],
    ),
    mysql: Statement::new(
        "SELECT 'trigger', CAST(ACTION_STATEMENT AS CHAR) FROM information_schema.TRIGGERS WHERE \
         EVENT_OBJECT_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND EVENT_OBJECT_TABLE = ? \
         UNION ALL SELECT 'check', CAST(cc.CHECK_CLAUSE AS CHAR) FROM \
         information_schema.TABLE_CONSTRAINTS AS tc JOIN information_schema.CHECK_CONSTRAINTS AS \
         cc ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = \
         tc.CONSTRAINT_NAME WHERE tc.CONSTRAINT_TYPE = 'CHECK' AND tc.TABLE_SCHEMA = \
         COALESCE(NULLIF(?, ''), DATABASE()) AND tc.TABLE_NAME = ?",
        &[Field::Key, Field::Scope, Field::Key, Field::Scope],
    ),
};

/// The marker the generated transitions trigger carries its fingerprint
/// after.
const STAMP: &str = "stateguard fingerprint ";

/// Which dialect `DB` speaks.
pub(super) fn dialect<DB: Backend>() -> Dialect {
    DB::choose(&Sql {
        postgres: Dialect::Postgres,
        sqlite: Dialect::Sqlite,
        mysql: Dialect::MySql,
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
    match dialect::<DB>() {
        Dialect::Postgres => a == b,
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
            Some(text) if dialect::<DB>() == Dialect::MySql => Some(mysql_enum(&text)),
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

/// What a column the machine uses must hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holds {
    /// The status: text, or an enum of the state strings.
    Text,
    /// The version: an integer.
    Integer,
    /// A `since` stamp: a time.
    Time,
    /// A key or `set` column: whatever the caller binds.
    Any,
}

/// Whether a column of type `type_name` (as the catalog writes it, in
/// lower case) can hold what `holds` says, on dialect `dialect`. SQLite
/// stores any value in any column: it passes.
fn fits(dialect: Dialect, holds: Holds, type_name: &str, is_enum: bool) -> bool {
    let t = type_name.to_ascii_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| t.contains(w));
    match (dialect, holds) {
        (Dialect::Sqlite, _) | (_, Holds::Any) => true,
        (_, Holds::Text) => is_enum || any(&["char", "text"]),
        (_, Holds::Integer) => any(&["int", "numeric", "decimal"]),
        (_, Holds::Time) => any(&["timestamp", "datetime"]),
    }
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

/// The problems of the enforcement DDL on the machine's table: none
/// installed, one made from another version of the enum, or no CHECK
/// (SQLite: no trigger) that lists the states.
async fn enforcement<S: StateMachine, DB: Backend>(
    machine: &'static Machine<S>,
    pool: &sqlx::Pool<DB>,
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let (table, status) = (machine.table(), machine.column());
    // SQLite's catalog of an attached database is that database's own
    // `sqlite_master`, which no bound value can name.
    if dialect::<DB>() == Dialect::Sqlite && table.contains('.') {
        return Ok(Vec::new());
    }
    let at = DB::choose(&ENFORCEMENT).after_tag();
    let (mut triggers, mut checks) = (Vec::new(), Vec::new());
    for row in rows::<DB>(pool, &ENFORCEMENT, table).await? {
        let text = DB::text_opt(&row, at + 1)?.unwrap_or_default();
        match DB::text_opt(&row, at)?.as_deref() {
            Some("trigger") => triggers.push(text),
            _ => checks.push(text),
        }
    }
    let fingerprint = machine.enforcement_fingerprint();
    let stamps: Vec<&str> = triggers
        .iter()
        .filter_map(|body| {
            let at = body.find(STAMP)? + STAMP.len();
            body.get(at..at + 16)
        })
        .collect();
    let mut problems = Vec::new();
    if stamps.is_empty() {
        problems.push(SchemaProblem::new(
            SchemaProblemKind::EnforcementMissing,
            table,
            Some(status),
            "the enforcement DDL is not installed: no trigger of stateguard's on the table \
             (install what `stateguard::ddl` generates)",
        ));
        return Ok(problems);
    }
    if !stamps.contains(&fingerprint) {
        problems.push(SchemaProblem::new(
            SchemaProblemKind::EnforcementStale,
            table,
            Some(status),
            format!(
                "the enforcement DDL was generated from another version of the enum (fingerprint \
                 {}, this one's is {fingerprint}): generate it again and install it",
                stamps[0]
            ),
        ));
    }
    // The states' check: a CHECK constraint, or SQLite's triggers, that
    // names every state string.
    let lists_states = |text: &String| {
        machine
            .states()
            .iter()
            .all(|state| text.contains(&format!("'{}'", state.value().as_str())))
    };
    let states_checked = match dialect::<DB>() {
        // The states' triggers (`… NOT IN (…)`), or the table's own CHECK;
        // not the transitions trigger, which names states too.
        Dialect::Sqlite => triggers
            .iter()
            .filter(|body| body.contains("NOT IN"))
            .chain(&checks)
            .any(lists_states),
        _ => checks.iter().any(lists_states),
    };
    if !states_checked {
        problems.push(SchemaProblem::new(
            SchemaProblemKind::StatesUnchecked,
            table,
            Some(status),
            "no CHECK constraint lists every state string: install the enforcement DDL's \
             constraint",
        ));
    }
    Ok(problems)
}

impl<S: StateMachine> Machine<S> {
    /// Reads the schema of the machine's tables and reports every way it
    /// does not fit the machine, all at once (an empty list when it fits),
    /// each a [`SchemaProblem`] whose [kind](SchemaProblem::kind) says
    /// what to do about it:
    ///
    /// - the table, and every column the machine writes (the status, the
    ///   key, the version, each `since` stamp, a retry's columns and each
    ///   `set` column), exist ([`MissingTable`], [`MissingColumn`]), and
    ///   the status holds text (or an enum), the version an integer and
    ///   each `since` a timestamp ([`WrongType`]; SQLite, which stores any
    ///   value in any column, is not held to types);
    /// - the key's columns are unique together (a primary key or a unique
    ///   index on them, or on some of them): without it one `UPDATE` can
    ///   move several rows, and [`Error::AmbiguousKey`] comes only after
    ///   they committed ([`KeyNotUnique`]);
    /// - the version column is `NOT NULL` ([`VersionNullable`]);
    /// - every state string fits the status column: its length
    ///   ([`StateTooLong`]), or, for a PostgreSQL enum type or a MySQL
    ///   `ENUM`, its labels alone ([`StateNotALabel`]; an enum is not held
    ///   to a length);
    /// - the history table, where the machine declares one, and the
    ///   outbox table, where a transition emits, exist ([`MissingTable`]);
    /// - the enforcement DDL ([`ddl`](crate::ddl)) is installed
    ///   ([`EnforcementMissing`]), and was generated from this version of
    ///   the enum: its transitions trigger carries the machine's
    ///   [fingerprint](Machine::enforcement_fingerprint)
    ///   ([`EnforcementStale`]), and a CHECK constraint lists every state
    ///   string ([`StatesUnchecked`]). These problems say so
    ///   ([`SchemaProblem::is_enforcement`]), for a service that does
    ///   without the DDL to leave out. (SQLite: for a table in the main
    ///   database only.)
    ///
    /// Once those fit, every statement of the machine is prepared
    /// (planned, not run) on one connection, which finds what the catalog
    /// reads do not ([`DoesNotPrepare`]): a column that a `set` expression
    /// or a guard reads, a history or outbox table whose columns are not
    /// the generated ones. (PostgreSQL's batch statements, whose key arrays
    /// take their type from the call, are left out; their fragments are
    /// the compare-and-set's.)
    ///
    /// **Each defect is reported once.** Two problems are the same defect
    /// when they have the same kind, table, [column](SchemaProblem::column)
    /// and [state string](SchemaProblem::state); for a statement that does
    /// not prepare and whose failure names no column of the machine's
    /// tables, the database's message stands in for the column. So a
    /// column that a guard reads, missing, is one problem however many
    /// statements read it (its words name the first and count the others),
    /// and each state string missing from an enum is one problem.
    ///
    /// A few catalog reads and one prepare per statement: cheap enough for
    /// start-up, where a service should refuse to start on any problem.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `PayoutStatus::MACHINE.verify(&pool).within(d)` ([`Call`]).
    ///
    /// ```
    /// use stateguard::{SchemaProblemKind, StateMachine};
    ///
    /// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// #[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
    /// enum PayoutStatus {
    ///     #[state(initial)]
    ///     #[transition(pay -> Paid, guard = "amount > 0")]
    ///     Pending,
    ///     Paid,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// // No `amount`, which the guard reads; no enforcement DDL.
    /// sqlx::raw_sql(
    ///     "CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
    ///      version INTEGER NOT NULL DEFAULT 0)",
    /// )
    /// .execute(&pool)
    /// .await?;
    /// let mut missing = Vec::new();
    /// for problem in PayoutStatus::verify(&pool).await? {
    ///     match problem.kind() {
    ///         // This service runs without the enforcement DDL.
    ///         kind if kind.is_enforcement() => {}
    ///         SchemaProblemKind::MissingColumn | SchemaProblemKind::DoesNotPrepare => {
    ///             missing.extend(problem.column().map(str::to_owned));
    ///         }
    ///         _ => return Err(problem.to_string().into()),
    ///     }
    /// }
    /// // The guard's column, once, although several statements read it.
    /// assert_eq!(missing, ["amount"]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`MissingTable`]: SchemaProblemKind::MissingTable
    /// [`MissingColumn`]: SchemaProblemKind::MissingColumn
    /// [`WrongType`]: SchemaProblemKind::WrongType
    /// [`KeyNotUnique`]: SchemaProblemKind::KeyNotUnique
    /// [`VersionNullable`]: SchemaProblemKind::VersionNullable
    /// [`StateTooLong`]: SchemaProblemKind::StateTooLong
    /// [`StateNotALabel`]: SchemaProblemKind::StateNotALabel
    /// [`EnforcementMissing`]: SchemaProblemKind::EnforcementMissing
    /// [`EnforcementStale`]: SchemaProblemKind::EnforcementStale
    /// [`StatesUnchecked`]: SchemaProblemKind::StatesUnchecked
    /// [`DoesNotPrepare`]: SchemaProblemKind::DoesNotPrepare
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
            problems.push(SchemaProblem::new(
                SchemaProblemKind::MissingTable,
                table,
                None,
                "the table does not exist",
            ));
        } else {
            let find = |name: &str| present.iter().find(|c| same::<DB>(&c.name, name));
            // Every column the machine writes, each once, with what it
            // must hold.
            let mut used: Vec<(&str, &str, Holds)> =
                vec![(self.column(), "the status column", Holds::Text)];
            used.extend(
                self.key_columns()
                    .iter()
                    .map(|k| (*k, "a key column", Holds::Any)),
            );
            if let Some(version) = self.version() {
                used.push((version, "the version column", Holds::Integer));
            }
            for state in self.states() {
                if let Some(since) = state.since_column() {
                    used.push((since, "a `since` column", Holds::Time));
                }
                if let Some(retry) = state.in_flight().and_then(|f| f.retry()) {
                    let attempts = retry.attempts_column();
                    used.push((attempts, "a retry's attempts column", Holds::Integer));
                    let next = retry.next_attempt_column();
                    used.push((next, "a retry's next_attempt column", Holds::Time));
                }
            }
            for transition in self.transitions() {
                for set in transition.set_columns() {
                    used.push((set.column(), "a `set` column", Holds::Any));
                }
            }
            let mut seen: Vec<&str> = Vec::new();
            for (name, what, holds) in used {
                if seen.iter().any(|s| same::<DB>(s, name)) {
                    continue;
                }
                seen.push(name);
                match find(name) {
                    None => problems.push(SchemaProblem::new(
                        SchemaProblemKind::MissingColumn,
                        table,
                        Some(name),
                        format!("{what}, missing from the table"),
                    )),
                    Some(column)
                        if !fits(
                            dialect::<DB>(),
                            holds,
                            &column.type_name,
                            column.labels.is_some(),
                        ) =>
                    {
                        let wanted = match holds {
                            Holds::Text => "text or an enum of the state strings",
                            Holds::Integer => "an integer",
                            Holds::Time => "a timestamp",
                            Holds::Any => "a value",
                        };
                        problems.push(SchemaProblem::new(
                            SchemaProblemKind::WrongType,
                            table,
                            Some(name),
                            format!("{what} is {}; it must hold {wanted}", column.type_name),
                        ));
                    }
                    Some(_) => {}
                }
            }
            if let Some(status) = find(self.column()) {
                for state in self.states() {
                    let value = state.value().as_str();
                    match &status.labels {
                        // An enum holds its labels whatever their length
                        // (MySQL gives an `ENUM` the length of its longest
                        // label): a state is held to the labels alone.
                        Some(labels) if !labels.iter().any(|l| l == value) => {
                            problems.push(
                                SchemaProblem::new(
                                    SchemaProblemKind::StateNotALabel,
                                    table,
                                    Some(self.column()),
                                    format!(
                                        "the state string {value:?} is not one of the column's \
                                         values ({})",
                                        status.type_name
                                    ),
                                )
                                .of_state(value),
                            );
                        }
                        Some(_) => {}
                        None => {
                            if let Some(max) = status.max_chars
                                && value.chars().count() as i64 > max
                            {
                                problems.push(
                                    SchemaProblem::new(
                                        SchemaProblemKind::StateTooLong,
                                        table,
                                        Some(self.column()),
                                        format!(
                                            "the state string {value:?} has {} characters, more \
                                             than the column's {max} ({})",
                                            value.chars().count(),
                                            status.type_name
                                        ),
                                    )
                                    .of_state(value),
                                );
                            }
                        }
                    }
                }
            }
            if let Some(version) = self.version().and_then(find)
                && !version.not_null
            {
                problems.push(SchemaProblem::new(
                    SchemaProblemKind::VersionNullable,
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
                    SchemaProblemKind::KeyNotUnique,
                    table,
                    Some(self.key()),
                    format!(
                        "no primary key or unique index on the key ({}): one move could change \
                         several rows",
                        self.key()
                    ),
                ));
            }
            problems.extend(enforcement::<S, DB>(self, pool).await?);
        }
        let emits = self.transitions().iter().any(|t| t.emit().is_some());
        let tables_fit = problems.iter().all(SchemaProblem::is_enforcement);
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
        let mut others_exist = true;
        let mut tables = vec![Present {
            table,
            columns: present.into_iter().map(|c| c.name).collect(),
        }];
        for (other, what) in others {
            let columns = columns::<DB>(pool, other).await?;
            if columns.is_empty() {
                others_exist = false;
                problems.push(SchemaProblem::new(
                    SchemaProblemKind::MissingTable,
                    other,
                    None,
                    format!("{what} does not exist"),
                ));
            }
            tables.push(Present {
                table: other,
                columns: columns.into_iter().map(|c| c.name).collect(),
            });
        }
        // Once the tables fit as far as the catalog tells, each statement
        // must plan (before, every one would fail for the same reason).
        if tables_fit && others_exist {
            problems.extend(prepared::<S, DB>(self, pool, &tables).await?);
        }
        Ok(once(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::mysql_enum;

    #[test]
    fn types_that_fit() {
        use super::{Dialect, Holds, fits};
        const PG: Dialect = Dialect::Postgres;
        const MY: Dialect = Dialect::MySql;
        for (dialect, holds, t) in [
            (PG, Holds::Text, "character varying(32)"),
            (PG, Holds::Text, "text"),
            (PG, Holds::Integer, "bigint"),
            (PG, Holds::Time, "timestamp with time zone"),
            (MY, Holds::Text, "varchar(16)"),
            (MY, Holds::Integer, "bigint(20)"),
            (MY, Holds::Time, "datetime(3)"),
            (Dialect::Sqlite, Holds::Integer, "TEXT"),
        ] {
            assert!(fits(dialect, holds, t, false), "{t}");
        }
        for (dialect, holds, t) in [
            (PG, Holds::Text, "bigint"),
            (PG, Holds::Integer, "text"),
            (PG, Holds::Time, "text"),
            (MY, Holds::Integer, "varchar(10)"),
            (MY, Holds::Time, "bigint(20)"),
        ] {
            assert!(!fits(dialect, holds, t, false), "{t}");
        }
        assert!(fits(PG, Holds::Text, "loose_status", true));
    }

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
