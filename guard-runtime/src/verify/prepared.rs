//! `verify`'s last step: every statement of the machine prepared
//! (planned, not run), which finds what the catalog reads cannot see.

use super::catalog::same;
use super::problem::{SchemaProblem, SchemaProblemKind};
use crate::StateMachine;
use crate::ddl::Dialect;
use crate::dialect::{Backend, Sql};
use crate::machine::Machine;
use sqlx::pool::PoolConnection;

/// Which of the machine's tables a statement is written for: a column
/// that only statements of the history table or the outbox miss is
/// theirs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Home {
    /// The machine's own table.
    Own,
    History,
    Outbox,
}

/// Every statement of `machine`, named, with its table: what
/// [`prepared`] plans.
fn statements<S: StateMachine>(machine: &'static Machine<S>) -> Vec<(String, Home, &'static Sql)> {
    let mut out: Vec<(String, Home, &'static Sql)> = vec![
        (
            "the read of a row".to_owned(),
            Home::Own,
            machine.select_sql(),
        ),
        ("`available`".to_owned(), Home::Own, machine.available_sql()),
    ];
    if let Some(history) = machine.history_sql() {
        out.push(("the history read".to_owned(), Home::History, history));
    }
    for t in machine.transitions() {
        let name = |what: &str| format!("`{}`'s {what}", t.name());
        out.push((name("compare-and-set"), Home::Own, t.update_sql()));
        if let Some(sql) = t.update_expecting_sql() {
            out.push((name("compare-and-set with `expecting`"), Home::Own, sql));
        }
        out.push((name("read-back"), Home::Own, t.read_back_sql()));
        if let Some([plain, locking]) = t.select_guarded_sql() {
            out.push((name("guard read"), Home::Own, plain));
            out.push((name("guard read in a transaction"), Home::Own, locking));
        }
        out.push((name("claim"), Home::Own, t.claim_sql()));
        if let Some(sql) = t.claim_older_sql() {
            out.push((name("claim by age"), Home::Own, sql));
        }
        if let Some([plain, expecting]) = t.history_insert_sql() {
            out.push((name("history insert"), Home::History, plain));
            out.push((
                name("history insert with `expecting`"),
                Home::History,
                expecting,
            ));
        }
        if let Some([plain, expecting]) = t.outbox_insert_sql() {
            out.push((name("outbox insert"), Home::Outbox, plain));
            out.push((
                name("outbox insert with `expecting`"),
                Home::Outbox,
                expecting,
            ));
        }
        let many = t.apply_many_sql();
        out.push((name("batch update"), Home::Own, many.update()));
        out.push((name("batch read"), Home::Own, many.read()));
        out.push((name("batch lease read"), Home::Own, many.lease_read()));
        out.push((
            name("batch history insert"),
            Home::History,
            many.history_insert(),
        ));
        out.push((
            name("batch outbox insert"),
            Home::Outbox,
            many.outbox_insert(),
        ));
    }
    for state in machine.states() {
        let Some(f) = state.in_flight() else {
            continue;
        };
        let name = |what: &str| format!("in-flight `{}`'s {what}", state.value().as_str());
        out.push((name("expired read"), Home::Own, f.expired_sql()));
        out.push((name("claim"), Home::Own, f.claim_sql()));
        out.push((name("takeover"), Home::Own, f.take_over_sql()));
        out.push((name("renewal"), Home::Own, f.renew_sql()));
        out.push((name("lease read"), Home::Own, f.lease_read_sql()));
        out.push((name("follow-up read"), Home::Own, f.follow_up_read_sql()));
        out.push((name("`done`"), Home::Own, f.done_sql()));
        if let Some(sql) = f.failed_sql() {
            out.push((name("`failed`"), Home::Own, sql));
        }
        let [done, failed] = f.follow_up_history_insert_sql();
        out.push((name("`done` history insert"), Home::History, done));
        out.push((name("`failed` history insert"), Home::History, failed));
        let [done, failed] = f.follow_up_outbox_insert_sql();
        out.push((name("`done` outbox insert"), Home::Outbox, done));
        out.push((name("`failed` outbox insert"), Home::Outbox, failed));
    }
    out
}

/// A table the machine uses and the columns the catalog gives it, to
/// tell which table a missing column belongs on.
pub(super) struct Present<'a> {
    pub(super) table: &'a str,
    pub(super) columns: Vec<String>,
}

/// Each statement of `machine` prepared (planned, not run) on one
/// connection: what the catalog reads cannot see, such as a column that a
/// `set` expression or a guard reads, fails here. PostgreSQL's batch
/// statements, whose key arrays take their type from the call, are left
/// out; their `set` and guard fragments are the compare-and-set's.
///
/// Several statements failing for one missing column are one problem,
/// which names the first of them and counts the others; so are several
/// failing with one message where the database names no column.
pub(super) async fn prepared<S: StateMachine, DB: Backend>(
    machine: &'static Machine<S>,
    conn: &mut PoolConnection<DB>,
    present: &[Present<'_>],
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    // A statement the connection prepared before comes from its cache,
    // as it was planned then: each is planned again, against the schema
    // as it is now.
    DB::forget_prepared_on(conn).await?;
    // Each failure: the statement, its table, the database's message and
    // the column that message names as missing.
    let mut failures: Vec<(String, &str, String, Option<Missing>)> = Vec::new();
    for (name, home, sql) in statements(machine) {
        let statement = DB::choose(sql);
        let batch = statement.binds().iter().any(|b| {
            matches!(
                b,
                crate::dialect::Bind::Keys(_)
                    | crate::dialect::Bind::Row(..)
                    | crate::dialect::Bind::EffectKeys
                    | crate::dialect::Bind::RowEffectKey(_)
            )
        });
        if statement.is_empty() || (batch && Dialect::of::<DB>() == Dialect::Postgres) {
            continue;
        }
        let Err(error) = DB::prepare_on(conn, statement.text()).await else {
            continue;
        };
        let message = match &error {
            sqlx::Error::Database(e) => e.message().to_owned(),
            other => other.to_string(),
        };
        let home = match home {
            Home::Own => machine.table(),
            Home::History => machine.history_table().unwrap_or(machine.table()),
            Home::Outbox => machine.outbox_table(),
        };
        let missing = missing_column(Dialect::of::<DB>(), &message);
        failures.push((name, home, message, missing));
    }
    let lacks = |table: &str, column: &str| {
        present
            .iter()
            .find(|p| p.table == table)
            .is_some_and(|p| !p.columns.iter().any(|c| same::<DB>(c, column)))
    };
    let own = machine.table();
    // Each defect, with the first statement that showed it and how many
    // others did.
    let mut found: Vec<(SchemaProblem, &str, &str, usize)> = Vec::new();
    for (name, _, message, missing) in &failures {
        let column = missing.as_ref().map(|m| m.column.as_str());
        // The table the column is missing from, the same for each
        // statement that misses it: one the database names, else the
        // table of the first statement that misses it (the reads of one
        // table come first), else any of the machine's that lacks it.
        let table = column.and_then(|column| {
            let missing_it = failures
                .iter()
                .filter(|(.., m)| m.as_ref().is_some_and(|m| same::<DB>(&m.column, column)));
            let named = missing_it.clone().filter_map(|(.., m)| {
                let relation = m.as_ref()?.table.as_deref()?;
                present
                    .iter()
                    .map(|p| p.table)
                    .find(|t| same::<DB>(t.rsplit('.').next().unwrap_or(t), relation))
            });
            let first = missing_it.map(|(_, home, ..)| *home).take(1);
            named
                .chain(first)
                .chain([own])
                .chain(present.iter().map(|p| p.table))
                .find(|t| lacks(t, column))
        });
        let problem = match (table, column) {
            (Some(table), Some(column)) => SchemaProblem::new(
                SchemaProblemKind::DoesNotPrepare,
                table,
                Some(column),
                String::new(),
            ),
            _ => SchemaProblem::new(SchemaProblemKind::DoesNotPrepare, own, None, String::new())
                .detailed(message.clone()),
        };
        match found.iter_mut().find(|(p, ..)| p.same_defect(&problem)) {
            Some((.., others)) => *others += 1,
            None => found.push((problem, name, message, 0)),
        }
    }
    Ok(found
        .into_iter()
        .map(|(problem, name, message, others)| {
            let also = match others {
                0 => String::new(),
                1 => " (and 1 other statement)".to_owned(),
                n => format!(" (and {n} other statements)"),
            };
            problem.worded(format!(
                "{name}{also} does not prepare against the schema: {message}"
            ))
        })
        .collect())
}

/// A column a statement misses, as the database's message names it.
#[derive(Debug, PartialEq, Eq)]
struct Missing {
    /// Without its table's qualifier.
    column: String,
    /// The table the message says lacks it, where it says.
    table: Option<String>,
}

/// The column a database's message on a statement that does not prepare
/// names as missing: PostgreSQL's `column "c" does not exist` (42703,
/// also `… of relation "t" …`), SQLite's `no such column: c` and `table t
/// has no column named c`, MySQL's `Unknown column 'c' in '…'` (1054).
fn missing_column(dialect: Dialect, message: &str) -> Option<Missing> {
    let (named, table) = match dialect {
        Dialect::Postgres => {
            let rest = message.strip_prefix("column ")?;
            match rest.split_once(" of relation ") {
                Some((column, relation)) => {
                    let relation = relation.strip_suffix(" does not exist")?;
                    (column, Some(relation.trim_matches('"')))
                }
                None => (rest.strip_suffix(" does not exist")?, None),
            }
        }
        Dialect::Sqlite => match message.strip_prefix("no such column: ") {
            Some(rest) => (rest, None),
            None => {
                let (table, column) = message.split_once(" has no column named ")?;
                (column, Some(table.strip_prefix("table ")?))
            }
        },
        _ => {
            let rest = message.strip_prefix("Unknown column '")?;
            (&rest[..rest.find("' in ")?], None)
        }
    };
    let named = named.trim_matches('"');
    let bare = named.rsplit('.').next().unwrap_or(named).trim_matches('"');
    (!bare.is_empty()).then(|| Missing {
        column: bare.to_owned(),
        table: table.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::{Dialect, missing_column};

    #[test]
    fn missing_columns_named() {
        for (dialect, message, column, table) in [
            (
                Dialect::Postgres,
                "column \"risk\" does not exist",
                Some("risk"),
                None,
            ),
            (
                Dialect::Postgres,
                "column t.risk does not exist",
                Some("risk"),
                None,
            ),
            (
                Dialect::Postgres,
                "column \"reason\" of relation \"history\" does not exist",
                Some("reason"),
                Some("history"),
            ),
            (
                Dialect::Postgres,
                "function f(bigint) does not exist",
                None,
                None,
            ),
            (Dialect::Sqlite, "no such column: risk", Some("risk"), None),
            (
                Dialect::Sqlite,
                "no such column: t.risk",
                Some("risk"),
                None,
            ),
            (
                Dialect::Sqlite,
                "table h has no column named reason",
                Some("reason"),
                Some("h"),
            ),
            (Dialect::Sqlite, "no such function: f", None, None),
            (
                Dialect::MySql,
                "Unknown column 'risk' in 'WHERE'",
                Some("risk"),
                None,
            ),
            (
                Dialect::MySql,
                "Unknown column 't.risk' in 'SELECT'",
                Some("risk"),
                None,
            ),
            (Dialect::MySql, "FUNCTION test.f does not exist", None, None),
        ] {
            let missing = missing_column(dialect, message);
            assert_eq!(
                missing.as_ref().map(|m| m.column.as_str()),
                column,
                "{message}"
            );
            assert_eq!(
                missing.as_ref().and_then(|m| m.table.as_deref()),
                table,
                "{message}"
            );
        }
    }
}
