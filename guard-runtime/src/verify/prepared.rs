//! `verify`'s last step: every statement of the machine prepared
//! (planned, not run), which finds what the catalog reads cannot see.

use super::problem::{SchemaProblem, SchemaProblemKind};
use super::{dialect, same};
use crate::StateMachine;
use crate::ddl::Dialect;
use crate::dialect::{Backend, Sql};
use crate::machine::Machine;

/// Every statement of `machine`, named: what [`prepared`] plans.
fn statements<S: StateMachine>(machine: &'static Machine<S>) -> Vec<(String, &'static Sql)> {
    let mut out: Vec<(String, &'static Sql)> = vec![
        ("the read of a row".to_owned(), machine.select_sql()),
        ("`available`".to_owned(), machine.available_sql()),
    ];
    if let Some(history) = machine.history_sql() {
        out.push(("the history read".to_owned(), history));
    }
    for t in machine.transitions() {
        let name = |what: &str| format!("`{}`'s {what}", t.name());
        out.push((name("compare-and-set"), t.update_sql()));
        if let Some(sql) = t.update_expecting_sql() {
            out.push((name("compare-and-set with `expecting`"), sql));
        }
        out.push((name("read-back"), t.read_back_sql()));
        if let Some([plain, locking]) = t.select_guarded_sql() {
            out.push((name("guard read"), plain));
            out.push((name("guard read in a transaction"), locking));
        }
        out.push((name("claim"), t.claim_sql()));
        if let Some(sql) = t.claim_older_sql() {
            out.push((name("claim by age"), sql));
        }
        if let Some([plain, expecting]) = t.history_insert_sql() {
            out.push((name("history insert"), plain));
            out.push((name("history insert with `expecting`"), expecting));
        }
        if let Some([plain, expecting]) = t.outbox_insert_sql() {
            out.push((name("outbox insert"), plain));
            out.push((name("outbox insert with `expecting`"), expecting));
        }
        let many = t.apply_many_sql();
        out.push((name("batch update"), many.update()));
        out.push((name("batch read"), many.read()));
        out.push((name("batch lease read"), many.lease_read()));
        out.push((name("batch history insert"), many.history_insert()));
        out.push((name("batch outbox insert"), many.outbox_insert()));
    }
    for state in machine.states() {
        let Some(f) = state.in_flight() else {
            continue;
        };
        let name = |what: &str| format!("in-flight `{}`'s {what}", state.value().as_str());
        out.push((name("expired read"), f.expired_sql()));
        out.push((name("claim"), f.claim_sql()));
        out.push((name("takeover"), f.take_over_sql()));
        out.push((name("renewal"), f.renew_sql()));
        out.push((name("lease read"), f.lease_read_sql()));
        out.push((name("follow-up read"), f.follow_up_read_sql()));
        out.push((name("`done`"), f.done_sql()));
        if let Some(sql) = f.failed_sql() {
            out.push((name("`failed`"), sql));
        }
        let [done, failed] = f.follow_up_history_insert_sql();
        out.push((name("`done` history insert"), done));
        out.push((name("`failed` history insert"), failed));
        let [done, failed] = f.follow_up_outbox_insert_sql();
        out.push((name("`done` outbox insert"), done));
        out.push((name("`failed` outbox insert"), failed));
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
    pool: &sqlx::Pool<DB>,
    present: &[Present<'_>],
) -> Result<Vec<SchemaProblem>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    // Each defect, with the first statement that showed it and how many
    // others did.
    let mut found: Vec<(SchemaProblem, String, String, usize)> = Vec::new();
    for (name, sql) in statements(machine) {
        let statement = DB::choose(sql);
        let batch = statement.binds().iter().any(|b| {
            matches!(
                b,
                crate::dialect::Bind::Keys(_) | crate::dialect::Bind::Row(..)
            )
        });
        if statement.is_empty() || (batch && dialect::<DB>() == Dialect::Postgres) {
            continue;
        }
        let Err(error) = DB::prepare_on(&mut conn, statement.text()).await else {
            continue;
        };
        let message = match &error {
            sqlx::Error::Database(e) => e.message().to_owned(),
            other => other.to_string(),
        };
        // The table that lacks the column the database names, the
        // machine's own first.
        let missing = missing_column(dialect::<DB>(), &message).and_then(|column| {
            present
                .iter()
                .find(|p| !p.columns.iter().any(|c| same::<DB>(c, &column)))
                .map(|p| (p.table, column))
        });
        let problem = match &missing {
            Some((table, column)) => SchemaProblem::new(
                SchemaProblemKind::DoesNotPrepare,
                table,
                Some(column),
                String::new(),
            ),
            None => SchemaProblem::new(
                SchemaProblemKind::DoesNotPrepare,
                machine.table(),
                None,
                String::new(),
            )
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

/// The column a database's message on a statement that does not prepare
/// names as missing, without its table's qualifier: PostgreSQL's
/// `column "c" does not exist` (42703, also `… of relation "t" …`),
/// SQLite's `no such column: c` and `table t has no column named c`,
/// MySQL's `Unknown column 'c' in '…'` (1054).
fn missing_column(dialect: Dialect, message: &str) -> Option<String> {
    let named = match dialect {
        Dialect::Postgres => {
            let rest = message.strip_prefix("column ")?;
            let end = rest
                .find(" of relation ")
                .or_else(|| rest.find(" does not exist"))?;
            rest[..end].trim_matches('"')
        }
        Dialect::Sqlite => match message.strip_prefix("no such column: ") {
            Some(rest) => rest,
            None => message.split_once(" has no column named ")?.1,
        },
        _ => {
            let rest = message.strip_prefix("Unknown column '")?;
            &rest[..rest.find("' in ")?]
        }
    };
    let bare = named.rsplit('.').next().unwrap_or(named).trim_matches('"');
    (!bare.is_empty()).then(|| bare.to_owned())
}

#[cfg(test)]
mod tests {
    use super::{Dialect, missing_column};

    #[test]
    fn missing_columns_named() {
        for (dialect, message, column) in [
            (
                Dialect::Postgres,
                "column \"risk\" does not exist",
                Some("risk"),
            ),
            (
                Dialect::Postgres,
                "column t.risk does not exist",
                Some("risk"),
            ),
            (
                Dialect::Postgres,
                "column \"reason\" of relation \"history\" does not exist",
                Some("reason"),
            ),
            (Dialect::Postgres, "function f(bigint) does not exist", None),
            (Dialect::Sqlite, "no such column: risk", Some("risk")),
            (Dialect::Sqlite, "no such column: t.risk", Some("risk")),
            (
                Dialect::Sqlite,
                "table h has no column named reason",
                Some("reason"),
            ),
            (Dialect::Sqlite, "no such function: f", None),
            (
                Dialect::MySql,
                "Unknown column 'risk' in 'WHERE'",
                Some("risk"),
            ),
            (
                Dialect::MySql,
                "Unknown column 't.risk' in 'SELECT'",
                Some("risk"),
            ),
            (Dialect::MySql, "FUNCTION test.f does not exist", None),
        ] {
            assert_eq!(
                missing_column(dialect, message).as_deref(),
                column,
                "{message}"
            );
        }
    }
}
