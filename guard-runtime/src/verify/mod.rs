//! `Machine::verify`: the database's schema read against the machine
//! before the first move: the tables and columns it uses, the key's
//! uniqueness, the version column's `NOT NULL`, and room for every state
//! string in the status column.

mod catalog;
mod prepared;
mod problem;

pub use self::problem::{SchemaProblem, SchemaProblemKind};

use self::catalog::{columns, enforcement_texts, same, unique_sets};
use self::prepared::{Present, prepared};
use self::problem::once;
use crate::StateMachine;
use crate::ddl::Dialect;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Backend;
use crate::error::Error;
use crate::machine::Machine;
use sqlx::pool::PoolConnection;

/// The marker the generated transitions trigger carries its fingerprint
/// after.
const STAMP: &str = "stateguard fingerprint ";

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

/// The problems of the enforcement DDL on the machine's table: none
/// installed, one made from another version of the enum, or no CHECK
/// (SQLite: no trigger) that lists the states.
async fn enforcement<S: StateMachine, DB: Backend>(
    machine: &'static Machine<S>,
    conn: &mut PoolConnection<DB>,
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let (table, status) = (machine.table(), machine.column());
    // SQLite's catalog of an attached database is that database's own
    // `sqlite_master`, which no bound value can name.
    if Dialect::of::<DB>() == Dialect::Sqlite && table.contains('.') {
        return Ok(Vec::new());
    }
    let (triggers, checks) = enforcement_texts::<DB>(conn, table).await?;
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
    let states_checked = match Dialect::of::<DB>() {
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
    /// (planned, not run) on the connection the catalog reads ran on,
    /// whose cache of prepared statements is emptied first so that each
    /// is planned against the schema as it is now, a second call's too.
    /// That finds what the catalog reads do not ([`DoesNotPrepare`]): a column that a `set` expression
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
    /// A few catalog reads and one prepare per statement, on one of the
    /// pool's connections, which loses the statements it had cached:
    /// cheap enough for start-up, where a service should refuse to start
    /// on any problem.
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
        // One connection for every read and prepare: on SQLite, the
        // catalog reads bring its schema up to date for the prepares.
        let conn = &mut pool.acquire().await?;
        let present = columns::<DB>(conn, table).await?;
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
                    if let Some(last_error) = retry.last_error_column() {
                        used.push((last_error, "a retry's last_error column", Holds::Text));
                    }
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
                            Dialect::of::<DB>(),
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
            let unique = unique_sets::<DB>(conn, table).await?;
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
            problems.extend(enforcement::<S, DB>(self, conn).await?);
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
            let columns = columns::<DB>(conn, other).await?;
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
            problems.extend(prepared::<S, DB>(self, conn, &tables).await?);
        }
        Ok(once(problems))
    }
}

#[cfg(test)]
mod tests {
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
}
