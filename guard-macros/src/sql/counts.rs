//! What an operator's console reads: how many rows are in each state,
//! and the rows of one state, page by page.

use crate::dialect::Dialect;
use crate::model::Model;
use crate::plan::{Col, Slot};

/// How far each state is counted: a state with more rows reads as
/// `COUNT_CAP` and more.
pub const COUNT_CAP: u64 = 10_000;

impl Dialect {
    /// `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM t WHERE c = 'a' LIMIT
    /// cap + 1) …), …`: one row, one column per state in declaration order
    /// ([`Col::Count`]), each counted up to one past [`COUNT_CAP`], so that
    /// the read stops there however large the table. With an index on the
    /// status column each count reads at most that many index entries.
    ///
    /// An in-flight state adds the rows recovery may take over now
    /// ([`Col::Due`]), and one that counts attempts the rows waiting for
    /// their next attempt ([`Col::Waiting`]) and the rows of its `failed`
    /// follow-up's state whose attempts ran out ([`Col::GaveUp`]), each
    /// counted the same way.
    pub fn counts(self, model: &Model) -> String {
        let column = self.quote(&model.column);
        let table = self.quote(&model.table);
        let mut counts: Vec<String> = Vec::new();
        for (i, state) in model.states.iter().enumerate() {
            let test = self.status_is(&column, &format!("= '{}'", state.db));
            let count_in = |test: &str, name: &str, filter: &str| {
                format!(
                    "(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {test}{filter} LIMIT {}) \
                     AS __sg_{name}{i})",
                    COUNT_CAP + 1
                )
            };
            let count = |name: &str, filter: &str| count_in(&test, name, filter);
            // The derive refuses a machine of more states than a column
            // index holds (`check`).
            let n = u8::try_from(i).unwrap_or(u8::MAX);
            counts.push(Col::Count(n).of(&count("n", "")));
            let Some(in_flight) = &state.in_flight else {
                continue;
            };
            let due = format!(" AND {}", self.due(in_flight));
            counts.push(Col::Due(n).of(&count("d", &due)));
            if let Some(retry) = &in_flight.retry {
                let next = self.quote(&retry.next_attempt);
                let waiting = format!(" AND {next} > {}", self.now());
                counts.push(Col::Waiting(n).of(&count("w", &waiting)));
                // A row that gave up keeps its attempts in the state its
                // `failed` follow-up leads to: `max`, or one more where a
                // takeover counted an attempt that could not start.
                if let Some(failed) = in_flight.failed {
                    let target = &model.states[model.transitions[failed].target];
                    let test = self.status_is(&column, &format!("= '{}'", target.db));
                    let ran_out = format!(" AND {} >= {}", self.quote(&retry.attempts), retry.max);
                    counts.push(Col::GaveUp(n).of(&count_in(&test, "g", &ran_out)));
                }
            }
        }
        format!("SELECT {}", counts.join(", "))
    }
}

impl Dialect {
    /// `SELECT <key>, <age> FROM t WHERE <status> = $state [AND (<key>) >
    /// ($key)] ORDER BY <key> LIMIT $limit`: the rows of the state bound
    /// as a value, in key order, from the first (`after` false) or after
    /// the key bound ([`Slot::Key`]). With an index on the status and the
    /// key columns each page is one range of it, however deep; MySQL,
    /// which serves a row-value comparison poorly, compares column by
    /// column (`a > ? OR (a = ? AND b > ?)`). Each row's [`Col::Age`] is
    /// the milliseconds since the history's last move into its state, or
    /// else since its state's `since` stamp (an in-flight state's is its
    /// lease's, stamped again by each takeover), or NULL.
    pub fn rows(self, model: &Model, after: bool) -> String {
        let d = self;
        let table = d.quote(&model.table);
        let column = d.quote(&model.column);
        let keys: Vec<String> = (model.key.iter())
            .map(|k| format!("__sg_t.{}", d.quote(k)))
            .collect();
        let select_keys = keys
            .iter()
            .enumerate()
            .map(|(i, k)| Col::Key(i as u8).of(k))
            .collect::<Vec<_>>()
            .join(", ");
        // A state's own stamp, where it has one.
        let stamped: Vec<String> = model
            .states
            .iter()
            .filter_map(|state| {
                let since = state.since_column()?;
                Some(format!(
                    "WHEN {} THEN {}",
                    d.status_is(&format!("__sg_t.{column}"), &format!("= '{}'", state.db)),
                    d.ms_since(&format!("__sg_t.{}", d.quote(since))),
                ))
            })
            .collect();
        let mut ages = Vec::new();
        if let Some(history) = &model.history {
            let same_key = model
                .key
                .iter()
                .map(|k| format!("__sg_h.{q} = __sg_t.{q}", q = d.quote(k)))
                .collect::<Vec<_>>()
                .join(" AND ");
            // MySQL compares the bytes: a cast's collation may not meet
            // the history column's (error 1267), and statuses are exact.
            let to_state = format!("__sg_h.{}", d.quote("to_state"));
            let status = d.status_text(&format!("__sg_t.{column}"));
            let same_state = match d {
                Dialect::MySql => format!("{} = {}", d.bytes(&to_state), d.bytes(&status)),
                Dialect::Postgres | Dialect::Sqlite => format!("{to_state} = {status}"),
            };
            ages.push(format!(
                "(SELECT {} FROM {} AS __sg_h WHERE {same_key} AND {same_state})",
                d.ms_since(&format!("MAX(__sg_h.{})", d.quote("moved_at"))),
                d.quote(history),
            ));
        }
        if !stamped.is_empty() {
            ages.push(format!("CASE {} END", stamped.join(" ")));
        }
        let age = match ages.len() {
            0 => d.int64("NULL"),
            1 => ages.remove(0),
            _ => format!("COALESCE({})", ages.join(", ")),
        };
        // The state is bound as text: PostgreSQL compares an enum column's
        // text, which a text or varchar column's index still serves.
        let state = format!("= {}", Slot::State.mark());
        let mut filter = match d {
            Dialect::Postgres => format!("{} {state}", d.status_text(&format!("__sg_t.{column}"))),
            Dialect::Sqlite | Dialect::MySql => d.status_is(&format!("__sg_t.{column}"), &state),
        };
        if after {
            let bound: Vec<String> = (0..keys.len()).map(|i| Slot::Key(i as u8).mark()).collect();
            let later = match (d, keys.len()) {
                (Dialect::MySql, 2..) => (0..keys.len())
                    .map(|i| {
                        let equal = (0..i).map(|j| format!("{} = {} AND ", keys[j], bound[j]));
                        format!("({}{} > {})", equal.collect::<String>(), keys[i], bound[i])
                    })
                    .collect::<Vec<_>>()
                    .join(" OR "),
                _ => format!("({}) > ({})", keys.join(", "), bound.join(", ")),
            };
            filter = format!("{filter} AND ({later})");
        }
        // In a state that counts attempts, each row's, and the last
        // retry's reason where the state keeps it.
        let retry_columns: String = (d.retry_columns(model, "__sg_t.", None).into_iter())
            .map(|(col, expr)| format!(", {}", col.of(&expr)))
            .collect();
        format!(
            "SELECT {select_keys}, {}{retry_columns} FROM {table} AS __sg_t WHERE {filter} ORDER BY \
             {} LIMIT {}",
            Col::Age.of(&age),
            keys.join(", "),
            Slot::Limit.mark(),
        )
    }
}
