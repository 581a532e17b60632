//! `apply_many`: a batch of keys bound as one value, moved in one
//! statement, with the read of the rows it did not move.

use super::outbox::EFFECT;
use crate::dialect::Dialect;
use crate::model::{Model, Transition};
use crate::plan::{Col, Slot};

use super::{MYSQL_KEY, Match, key_columns};

impl Dialect {
    /// `apply_many`'s keys as rows, `__sg_i(__sg_k0, …)`: an array per key
    /// column unnested on PostgreSQL, the JSON through `JSON_TABLE` on
    /// MySQL and `json_each` on SQLite (each value as text, compared exactly
    /// below). SQLite's `json_each` sits in a subquery that names only
    /// `__sg_k0`, …, so that its own columns (`id`, `key`, `value`, `type`,
    /// …) cannot shadow the table's in a guard or a `set`.
    pub(super) fn many_input(self, model: &Model) -> String {
        let n = model.key.len();
        match self {
            Dialect::Postgres => {
                let arrays: Vec<String> = (0..n).map(|i| Slot::Keys(i as u8).mark()).collect();
                let columns: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
                format!(
                    "unnest({}) AS __sg_i({})",
                    arrays.join(", "),
                    columns.join(", ")
                )
            }
            Dialect::Sqlite => {
                let columns: Vec<String> = (0..n)
                    .map(|i| match n {
                        1 => "value AS __sg_k0".to_owned(),
                        _ => format!("json_extract(value, '$[{i}]') AS __sg_k{i}"),
                    })
                    .collect();
                format!(
                    "(SELECT {} FROM json_each({})) AS __sg_i",
                    columns.join(", "),
                    Slot::Keys(0).mark()
                )
            }
            Dialect::MySql => {
                let columns: Vec<String> = (0..n)
                    .map(|i| {
                        let path = if n == 1 {
                            "$".to_owned()
                        } else {
                            format!("$[{i}]")
                        };
                        format!("__sg_k{i} {MYSQL_KEY} PATH '{path}'")
                    })
                    .collect();
                format!(
                    "JSON_TABLE({}, '$[*]' COLUMNS ({})) AS __sg_i",
                    Slot::Keys(0).mark(),
                    columns.join(", ")
                )
            }
        }
    }

    /// The table's key columns equal to `__sg_i`'s, exactly (see
    /// [`Self::key_match`]), or [`Match::ByValue`].
    pub(super) fn many_match(self, model: &Model, by: Match) -> String {
        let table = self.quote(&model.table);
        model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let (k, v) = (
                    format!("{table}.{}", self.quote(k)),
                    format!("__sg_i.__sg_k{i}"),
                );
                match by {
                    Match::Exact => self.exact_eq(&k, &v),
                    Match::ByValue => format!("{k} = {v}"),
                }
            })
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// `transition.apply_many(pool, keys)`, the winning part: every row
    /// among the keys that is in a source state (and meets the guard)
    /// moves, in one statement, which returns their keys, and versions and
    /// lease tokens where the machine has them; MySQL's rows are already
    /// locked by [`Self::many_read`] in the same transaction, and
    /// [`Self::many_lease`] reads the leases.
    ///
    /// [`Match::ByValue`] is PostgreSQL's statement for keys whose equality
    /// is exact by value (integers, UUIDs), without the text comparison;
    /// empty on the other dialects.
    pub fn many_update(&self, model: &Model, transition: &Transition, by: Match) -> String {
        let d = *self;
        if by == Match::ByValue && d != Dialect::Postgres {
            return String::new();
        }
        let table = d.quote(&model.table);
        let status = d.in_sources(model, transition);
        let guard = match &transition.guard {
            Some(guard) => format!(" AND ({})", guard.sql(transition.set_binds())),
            None => String::new(),
        };
        let assignments = d.assignments(model, transition);
        let target = &model.states[transition.target];
        let keys: Vec<String> = model
            .key
            .iter()
            .map(|k| format!("{table}.{}", d.quote(k)))
            .collect();
        let keys = keys.join(", ");
        // The keys, then the version and the lease token where they exist
        // (the runtime reads what the machine has).
        let marked_keys = key_columns(model.key.iter().map(|k| format!("{table}.{}", d.quote(k))));
        let mut returning = format!(" RETURNING {marked_keys}");
        if model.version.is_some() {
            let version = d.version_read(model.version.as_deref());
            returning.push_str(&format!(", {}", Col::Occurrence.of(&version)));
        }
        if let Some(in_flight) = &target.in_flight {
            let token = d.lease_token(&in_flight.since);
            returning.push_str(&format!(", {}", Col::Token.of(&token)));
        }
        // PostgreSQL: the rows among the keys. One column: `= ANY($1)`,
        // which the key's index serves in key order, so that overlapping
        // batches lock rows in the same order. The text comparison (a
        // hashed subplan) keeps the match exact under a nondeterministic
        // collation.
        let array = Slot::Keys(0).mark();
        let pg_keys = match (model.key.len(), by) {
            (1, Match::ByValue) => format!("{keys} = ANY({array})"),
            (n, Match::ByValue) => {
                let columns: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
                format!(
                    "({keys}) IN (SELECT {} FROM {})",
                    columns.join(", "),
                    d.many_input(model),
                )
            }
            (1, Match::Exact) => format!(
                "{keys} = ANY({array}) AND CAST({keys} AS TEXT) COLLATE \"C\" IN (SELECT \
                 CAST(__sg_k0 AS TEXT) COLLATE \"C\" FROM unnest({array}) AS __sg_i(__sg_k0))"
            ),
            (n, Match::Exact) => {
                let columns: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
                let texts: Vec<String> = (0..n)
                    .map(|i| format!("CAST(__sg_k{i} AS TEXT) COLLATE \"C\""))
                    .collect();
                let key_texts: Vec<String> = model
                    .key
                    .iter()
                    .map(|k| format!("CAST({table}.{} AS TEXT) COLLATE \"C\"", d.quote(k)))
                    .collect();
                format!(
                    "({keys}) IN (SELECT {} FROM {}) AND ({}) IN (SELECT {} FROM {})",
                    columns.join(", "),
                    d.many_input(model),
                    key_texts.join(", "),
                    texts.join(", "),
                    d.many_input(model),
                )
            }
        };
        // PostgreSQL with a history table or a message to emit: the moved
        // rows' keys, version and lease as the CTEs read them, and what the
        // statement returns of them.
        let n = model.key.len();
        let old = d.key_aliases(model, Some(&table), "__sg_k");
        let aliases: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
        let mut out = vec![key_columns(aliases.clone())];
        if model.version.is_some() {
            out.push(Col::Occurrence.of("__sg_v"));
        }
        if target.in_flight.is_some() {
            out.push(Col::Token.of("__sg_l"));
        }
        let lease = match &target.in_flight {
            Some(in_flight) => d.lease_token(&in_flight.since),
            None => d.int64("0"),
        };
        let payload = d.payload_item(model, transition);
        let outbox = d.outbox_cte(
            model,
            transition,
            &d.with_effect_keys(model, "__sg_moved", &aliases, by),
            &aliases,
            "__sg_v",
            &format!("__sg_ek.{EFFECT}"),
        );
        match (d, &model.history) {
            // With a history table: the rows read and locked in key order
            // first, so the state each row leaves is the one recorded; once
            // (`MATERIALIZED`), so that no plan locks them again per row.
            (Dialect::Postgres, Some(history)) => {
                let (columns, values) = d.history_row(
                    model,
                    transition,
                    aliases.clone(),
                    "__sg_from".to_owned(),
                    "__sg_v".to_owned(),
                    true,
                );
                let last = model.table.rsplit('.').next().unwrap_or(&model.table);
                format!(
                    "WITH __sg_old AS MATERIALIZED (SELECT {}, {} AS __sg_from FROM {table} \
                     WHERE {pg_keys} AND {status}{guard} ORDER BY {keys} FOR UPDATE OF {}), \
                     __sg_moved AS (UPDATE {table} SET {assignments} FROM __sg_old WHERE {} RETURNING {}, {} AS __sg_v, \
                     {lease} AS __sg_l, __sg_old.__sg_from{payload}), __sg_log AS (INSERT INTO {} \
                     ({columns}) SELECT {values} FROM __sg_moved){outbox} SELECT {} FROM __sg_moved",
                    old,
                    d.status_read(&model.column),
                    d.quote(last),
                    d.join_old(model),
                    old,
                    d.version_read(model.version.as_deref()),
                    d.quote(history),
                    out.join(", "),
                )
            }
            (Dialect::Postgres, None) if transition.emit.is_some() => format!(
                "WITH __sg_moved AS (UPDATE {table} SET {assignments} WHERE {pg_keys} AND \
                 {status}{guard} RETURNING {old}, {} AS __sg_v, {lease} AS __sg_l{payload}){outbox} \
                 SELECT {} FROM __sg_moved",
                d.version_read(model.version.as_deref()),
                out.join(", "),
            ),
            (Dialect::Postgres, None) => {
                format!(
                    "UPDATE {table} SET {assignments} WHERE {pg_keys} AND {status}{guard}{returning}"
                )
            }
            // `UPDATE … FROM`: each key finds its row by the key's index,
            // as a hand-written `id IN (SELECT value FROM json_each(?1))`
            // does, and is compared exactly on that one row.
            (Dialect::Sqlite, _) => format!(
                "UPDATE {table} SET {assignments} FROM {} WHERE {} AND {}{guard}{returning}",
                d.many_input(model),
                d.many_match(model, by),
                d.in_sources_keyed(model, transition),
            ),
            // A join driven by the keys, not `IN (SELECT …)`: MySQL runs
            // that as a dependent subquery over the whole table.
            (Dialect::MySql, _) => format!(
                "UPDATE {} STRAIGHT_JOIN {table} ON {} SET {assignments} WHERE {status}{guard}",
                d.many_input(model),
                d.many_match(model, by),
            ),
        }
    }

    /// SQLite and MySQL, for a machine with a history table: the history
    /// rows of `apply_many`'s update, inserted just before it in one
    /// transaction, from the same rows (on MySQL already locked by
    /// [`Self::many_read`]).
    pub fn many_history_insert(&self, model: &Model, transition: &Transition) -> String {
        let d = *self;
        let (Some(history), false) = (&model.history, d == Dialect::Postgres) else {
            return String::new();
        };
        let (columns, values) = d.history_columns(model, transition, true);
        format!(
            "INSERT INTO {} ({columns}) SELECT {values} {}",
            d.quote(history),
            d.many_rows(model, transition, false),
        )
    }

    /// SQLite and MySQL: `FROM … WHERE …`, the rows among the keys that
    /// `apply_many`'s update is about to move: in a source state, meeting
    /// the guard; `effect`, with each row's effect key up to its
    /// occurrence (`__sg_i.__sg_e`), the keys then coming from the
    /// document that carries both ([`Slot::EffectKeys`]).
    pub(super) fn many_rows(self, model: &Model, transition: &Transition, effect: bool) -> String {
        let d = self;
        let table = d.quote(&model.table);
        let status = d.in_sources_keyed(model, transition);
        let guard = match &transition.guard {
            Some(guard) => format!(" AND ({})", guard.sql(transition.set_binds())),
            None => String::new(),
        };
        let join = match d {
            Dialect::MySql => "STRAIGHT_JOIN",
            Dialect::Sqlite | Dialect::Postgres => "JOIN",
        };
        let input = match effect {
            true => d.fenced_input(model, &[], true),
            false => d.many_input(model),
        };
        format!(
            "FROM {input} {join} {table} ON {} WHERE {status}{guard}",
            d.many_match(model, Match::Exact),
        )
    }

    /// `apply_many`'s read of the rows among the keys: their keys, status,
    /// version and whether they meet the guard (1 without one). The losing
    /// part on PostgreSQL and SQLite; on MySQL the first statement of the
    /// transaction, a locking read that takes the rows in key order.
    ///
    /// [`Match::ByValue`]: as for [`Self::many_update`].
    pub fn many_read(&self, model: &Model, transition: &Transition, by: Match) -> String {
        let d = *self;
        if by == Match::ByValue && d != Dialect::Postgres {
            return String::new();
        }
        let table = d.quote(&model.table);
        let meets = match &transition.guard {
            Some(guard) => d.int64(&format!(
                "CASE WHEN ({}) THEN 1 ELSE 0 END",
                guard.sql(transition.set_binds())
            )),
            None => d.int64("1"),
        };
        let keys: Vec<String> = model
            .key
            .iter()
            .map(|k| format!("{table}.{}", d.quote(k)))
            .collect();
        let columns = format!(
            "{}, {}, {}, {}",
            key_columns(keys),
            Col::Status.of(&d.status_read(&model.column)),
            Col::Occurrence.of(&d.version_read(model.version.as_deref())),
            Col::Meets.of(&meets),
        );
        match d {
            // One more row at the end, whatever the keys found, so that a
            // result without it is known to be another statement's (see
            // `plan.rs`): the same tag, NULL elsewhere, and `End`.
            Dialect::Postgres => format!(
                "SELECT {}, {columns}, {} FROM {} JOIN {table} ON {} UNION ALL SELECT {}{}, \
                 NULL, NULL, NULL, 1",
                Col::Tag.of(crate::plan::TAG),
                Col::End.of("CAST(NULL AS BIGINT)"),
                d.many_input(model),
                d.many_match(model, by),
                crate::plan::TAG,
                ", NULL".repeat(model.key.len()),
            ),
            Dialect::Sqlite => format!(
                "SELECT {columns} FROM {} JOIN {table} ON {}",
                d.many_input(model),
                d.many_match(model, by),
            ),
            // The keys drive the join (`STRAIGHT_JOIN`): each row is found
            // by its key, and locked in the keys' order.
            Dialect::MySql => format!(
                "SELECT {columns} FROM {} STRAIGHT_JOIN {table} ON {} FOR UPDATE",
                d.many_input(model),
                d.many_match(model, by),
            ),
        }
    }

    /// MySQL, after `apply_many`'s update into an in-flight state: the
    /// lease tokens of the rows among the keys (the JSON `?`). Empty on the
    /// other dialects, which return them from the update.
    pub fn many_lease(&self, model: &Model, transition: &Transition) -> String {
        let d = *self;
        let target = &model.states[transition.target];
        let (Dialect::MySql, Some(in_flight)) = (d, &target.in_flight) else {
            return String::new();
        };
        let table = d.quote(&model.table);
        let keys: Vec<String> = model
            .key
            .iter()
            .map(|k| format!("{table}.{}", d.quote(k)))
            .collect();
        format!(
            "SELECT {}, {} FROM {} STRAIGHT_JOIN {table} ON {}",
            key_columns(keys),
            Col::Token.of(&d.lease_token(&in_flight.since)),
            d.many_input(model),
            d.many_match(model, Match::Exact),
        )
    }
}
