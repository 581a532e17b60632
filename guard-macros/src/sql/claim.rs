//! `claim` and `claim_older_than`: up to `n` rows in a source state, taken
//! in the machine's order, skipping rows another claimer holds.

use crate::dialect::Dialect;
use crate::model::{Model, Transition};
use crate::plan::{Col, Slot};

use super::key_columns;

impl Dialect {
    /// `transition.claim(pool, n)`: up to `n` rows in a source state (and
    /// meeting the guard), in `order`, skipping rows another claimer holds.
    ///
    /// PostgreSQL moves them in one statement (unless the transition
    /// emits a message, below) and returns their keys, versions and lease
    /// tokens in order: `WITH __sg_c AS MATERIALIZED
    /// (SELECT k … ORDER BY o LIMIT $n FOR UPDATE SKIP LOCKED), moved AS
    /// (UPDATE … WHERE (k) IN (SELECT k FROM __sg_c) … RETURNING …) SELECT
    /// … FROM moved ORDER BY o`: the candidates are chosen once, whatever
    /// the plan (see the module's invariant). SQLite and MySQL have
    /// no `UPDATE` in a `WITH`, so this is the candidates' `SELECT` (a
    /// locking `SKIP LOCKED` one on MySQL), run in a short transaction
    /// that then moves them all with the `apply_many` statements.
    ///
    /// A transition that emits a message claims on PostgreSQL as on
    /// MySQL: each message's id is its row's effect key, which the
    /// runtime computes from the row's key (`outcome.rs`) and so must
    /// know before the move writes the message. The candidates' locking
    /// `SELECT` names the keys, and `apply_many`'s statement moves the rows
    /// with the effect keys bound beside them.
    pub fn claim_next(&self, model: &Model, transition: &Transition) -> String {
        self.claim_sql(model, transition, None)
    }

    /// `transition.claim_older_than(pool, age, n)`: [`Self::claim_next`]
    /// for rows whose source state's `since` is older than the age bound
    /// after the guard's values (milliseconds), by the database's clock.
    /// Empty unless every source state stamps one `since` column (a NULL
    /// stamp is never old: give the column a default).
    pub fn claim_older(&self, model: &Model, transition: &Transition) -> String {
        let mut since = transition
            .sources
            .iter()
            .map(|&s| model.states[s].since_column());
        let Some(Some(first)) = since.next() else {
            return String::new();
        };
        if !since.all(|s| s.is_some_and(|s| s.eq_ignore_ascii_case(first))) {
            return String::new();
        }
        self.claim_sql(model, transition, Some(first))
    }

    pub(super) fn claim_sql(
        &self,
        model: &Model,
        transition: &Transition,
        older: Option<&str>,
    ) -> String {
        let d = *self;
        let table = d.quote(&model.table);
        let status = d.in_sources(model, transition);
        let mut guard = match &transition.guard {
            Some(guard) => format!(" AND ({})", guard.sql(transition.set_binds())),
            None => String::new(),
        };
        if let Some(since) = older {
            guard.push_str(&format!(
                " AND {} < {}",
                d.quote(since),
                d.ago(&Slot::Age.mark())
            ));
        }
        let limit = Slot::Limit.mark();
        let quoted =
            |columns: &[String]| -> Vec<String> { columns.iter().map(|c| d.quote(c)).collect() };
        let keys = quoted(&model.key).join(", ");
        // The key breaks ties, so the order is total.
        let mut order = model.order.clone();
        for k in &model.key {
            if !order.iter().any(|o| o.eq_ignore_ascii_case(k)) {
                order.push(k.clone());
            }
        }
        let order_by = quoted(&order).join(", ");
        let candidates = format!(
            "SELECT {keys} FROM {table} WHERE {status}{guard} ORDER BY {order_by} LIMIT {limit}"
        );
        // SQLite and MySQL return the candidates' keys; PostgreSQL moves
        // them in the same statement.
        let returned = format!(
            "SELECT {} FROM {table} WHERE {status}{guard} ORDER BY {order_by} LIMIT {limit}",
            key_columns(quoted(&model.key))
        );
        match d {
            Dialect::Sqlite => returned,
            Dialect::MySql => format!("{returned} FOR UPDATE SKIP LOCKED"),
            Dialect::Postgres if transition.emit.is_some() => {
                format!("{returned} FOR UPDATE SKIP LOCKED")
            }
            Dialect::Postgres => {
                let target = &model.states[transition.target];
                let lease = match &target.in_flight {
                    Some(in_flight) => d.lease_token(&in_flight.since),
                    None => d.int64("0"),
                };
                let returned_keys = d.key_aliases(model, None, "c");
                let returned_order: Vec<String> = order
                    .iter()
                    .enumerate()
                    .map(|(i, o)| format!("{} AS o{i}", d.quote(o)))
                    .collect();
                let key_aliases: Vec<String> =
                    (0..model.key.len()).map(|i| format!("c{i}")).collect();
                // One key column: the candidates as one array, which the
                // key's index serves. As an `IN` list or a join, the
                // planner may hash the candidates and scan the whole table
                // for them, which costs the table's size, not the batch's.
                let single = model.key.len() == 1;
                let order_aliases: Vec<String> =
                    (0..order.len()).map(|i| format!("o{i}")).collect();
                if let Some(history) = &model.history {
                    // The candidates with the state each leaves, locked, then
                    // moved, then their history rows, in one statement.
                    let returned_keys = d.key_aliases(model, Some(&table), "c");
                    let returned_order: Vec<String> = order
                        .iter()
                        .enumerate()
                        .map(|(i, o)| format!("{table}.{} AS o{i}", d.quote(o)))
                        .collect();
                    let (columns, values) = d.history_row(
                        model,
                        transition,
                        key_aliases.clone(),
                        "__sg_from".to_owned(),
                        "v".to_owned(),
                        true,
                    );
                    return format!(
                        "WITH __sg_old AS MATERIALIZED (SELECT {}, {} AS __sg_from FROM {table} \
                         WHERE {status}{guard} ORDER BY {order_by} LIMIT {limit} FOR UPDATE SKIP \
                         LOCKED), moved AS (UPDATE {table} SET {} FROM __sg_old WHERE {} RETURNING {}, {} AS \
                         v, {lease} AS l, {}, __sg_old.__sg_from), __sg_log AS (INSERT \
                         INTO {} ({columns}) SELECT {values} FROM moved) SELECT {}, {}, {} \
                         FROM moved ORDER BY {}",
                        d.key_aliases(model, None, "__sg_k"),
                        d.status_read(&model.column),
                        d.assignments(model, transition),
                        match single {
                            true => format!(
                                "{} AND {table}.{keys} = ANY (ARRAY(SELECT __sg_k0 FROM \
                                 __sg_old))",
                                d.join_old(model)
                            ),
                            false => d.join_old(model),
                        },
                        returned_keys,
                        d.version_read(model.version.as_deref()),
                        returned_order.join(", "),
                        d.quote(history),
                        key_columns(key_aliases.clone()),
                        Col::Occurrence.of("v"),
                        Col::Token.of("l"),
                        [order_aliases.clone(), key_aliases.clone()]
                            .concat()
                            .join(", "),
                    );
                }
                let chosen = match single {
                    true => format!("{keys} = ANY (ARRAY(SELECT {keys} FROM __sg_c))"),
                    false => format!("({keys}) IN (SELECT {keys} FROM __sg_c)"),
                };
                format!(
                    "WITH __sg_c AS MATERIALIZED ({candidates} FOR UPDATE SKIP LOCKED), moved AS \
                     (UPDATE {table} SET {} WHERE {chosen} AND {status}{guard} RETURNING {}, {} \
                     AS v, {lease} AS l, {}) SELECT {}, {}, {} FROM moved ORDER BY {}",
                    d.assignments(model, transition),
                    returned_keys,
                    d.version_read(model.version.as_deref()),
                    returned_order.join(", "),
                    key_columns(key_aliases),
                    Col::Occurrence.of("v"),
                    Col::Token.of("l"),
                    order_aliases.join(", "),
                )
            }
        }
    }
}
