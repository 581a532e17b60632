//! The compare-and-set (`apply`): its `UPDATE`, MySQL's read-back, the
//! losing path's fresh reads and, on PostgreSQL with a history table, the
//! move and its history row in one statement.

use crate::dialect::Dialect;
use crate::model::{Assign, InFlight, Model, Transition};
use crate::plan::{Col, Slot};

impl Dialect {
    /// `c = 'target'[, col = (expr)…][, since = now][, version = version + 1]`:
    /// what a transition writes.
    ///
    /// With a version column, PostgreSQL and SQLite return the new version
    /// (see [`Self::update`]); MySQL has no `RETURNING`, so the new version
    /// goes through `LAST_INSERT_ID(expr)`, which the same connection reads
    /// back.
    ///
    /// The values bound per call are the call's first values
    /// ([`Slot::Value`]).
    pub(super) fn assignments(self, model: &Model, transition: &Transition) -> String {
        let d = self;
        let column = d.quote(&model.column);
        let target = &model.states[transition.target];
        let mut value = 0;
        let sets: Vec<String> = transition
            .set
            .iter()
            .map(|(col, assign)| match assign {
                Assign::Expr(expr) => format!("{} = ({expr})", d.quote(col)),
                Assign::Bind(_) => {
                    value += 1;
                    format!("{} = {}", d.quote(col), Slot::Value(value - 1).mark())
                }
            })
            .collect();
        let status = format!("{column} = '{}'", target.db);
        // MySQL evaluates assignments left to right, each seeing the ones
        // before it. A `set` expression reads no column the statement writes
        // except its own (`check/set.rs` refuses the rest), and no column is set
        // twice; with the `set` assignments first, nothing has written that
        // column yet when its expression reads it, so every expression reads
        // the row as it was, as on PostgreSQL and SQLite.
        let mut assignments = match d {
            Dialect::MySql => sets.into_iter().chain([status]).collect::<Vec<_>>(),
            Dialect::Postgres | Dialect::Sqlite => [status].into_iter().chain(sets).collect(),
        }
        .join(", ");
        if let Some(since) = target.since_column() {
            assignments.push_str(&format!(", {} = {}", d.quote(since), d.now()));
        }
        // Entering a state that counts its effect's attempts starts the
        // first one, with no retry's reason yet.
        if let Some(retry) = target.in_flight.as_ref().and_then(|f| f.retry.as_ref()) {
            assignments.push_str(&format!(
                ", {} = 1, {} = NULL",
                d.quote(&retry.attempts),
                d.quote(&retry.next_attempt)
            ));
            if let Some(last_error) = &retry.last_error {
                assignments.push_str(&format!(", {} = NULL", d.quote(last_error)));
            }
        }
        if let Some(version) = &model.version {
            let v = d.quote(version);
            let next = format!("{} + 1", d.version_value(version));
            match d {
                Dialect::MySql => assignments.push_str(&format!(", {v} = LAST_INSERT_ID({next})")),
                Dialect::Postgres | Dialect::Sqlite => {
                    assignments.push_str(&format!(", {v} = {next}"));
                }
            }
        }
        assignments
    }

    /// ` RETURNING version[, lease token]` on PostgreSQL and SQLite: the
    /// new version when there is a version column, and the lease token
    /// when the transition enters an in-flight state. Empty on MySQL, and
    /// when there is nothing to return.
    pub(super) fn returning(
        self,
        model: &Model,
        version: bool,
        lease_of: Option<&InFlight>,
    ) -> String {
        let mut items = Vec::new();
        if version {
            items.push(Col::Occurrence.of(&self.version_read(model.version.as_deref())));
        }
        if let Some(in_flight) = lease_of {
            items.push(Col::Token.of(&self.lease_token(&in_flight.since)));
        }
        match self {
            Dialect::MySql => String::new(),
            _ if items.is_empty() => String::new(),
            Dialect::Postgres | Dialect::Sqlite => format!(" RETURNING {}", items.join(", ")),
        }
    }

    /// `UPDATE t SET … WHERE k = $1 AND c IN ('source', …)[ RETURNING …]`:
    /// the compare-and-set.
    ///
    /// `expecting` adds `AND version = $2`: the row must still be at the
    /// occurrence the caller saw (`Transition::expecting`).
    pub fn update(&self, model: &Model, transition: &Transition, expecting: bool) -> String {
        let d = *self;
        format!(
            "UPDATE {} SET {} WHERE {}{}",
            d.quote(&model.table),
            d.assignments(model, transition),
            d.move_predicate(model, transition, expecting),
            d.returning(
                model,
                model.version.is_some(),
                model.states[transition.target].in_flight.as_ref()
            ),
        )
    }

    /// What MySQL reads back on the same connection after a winning
    /// `UPDATE` into an in-flight state, for want of `RETURNING`: the new
    /// version (`LAST_INSERT_ID()`) and the lease token of the row at that
    /// version (the key is bound for it). Empty otherwise: the `UPDATE`'s
    /// own result (its OK packet) carries the version it stored with
    /// `LAST_INSERT_ID(expr)`, and the other dialects return it.
    pub fn read_back(&self, model: &Model, transition: &Transition) -> String {
        let d = *self;
        if d != Dialect::MySql {
            return String::new();
        }
        // The new version where there is one; an unversioned row's
        // occurrence is 0, as every other statement reads it.
        let occurrence = match model.version {
            Some(_) => "CAST(LAST_INSERT_ID() AS SIGNED)",
            None => "CAST(0 AS SIGNED)",
        };
        match &model.states[transition.target].in_flight {
            // The update's own result carries the version.
            None => String::new(),
            Some(in_flight) => {
                let same_version = match &model.version {
                    Some(version) => {
                        format!(" AND {} = LAST_INSERT_ID()", d.version_value(version))
                    }
                    None => String::new(),
                };
                let token = format!(
                    "(SELECT {} FROM {} WHERE {}{same_version})",
                    d.lease_token(&in_flight.since),
                    d.quote(&model.table),
                    d.key_match(&model.key),
                );
                format!(
                    "SELECT {}, {}",
                    Col::Occurrence.of(occurrence),
                    Col::Token.of(&token)
                )
            }
        }
    }

    /// The compare-and-set's `WHERE`: key, sources, guard, expected
    /// version.
    pub(super) fn move_predicate(
        self,
        model: &Model,
        transition: &Transition,
        expecting: bool,
    ) -> String {
        let d = self;
        let guard = match &transition.guard {
            Some(guard) => format!(" AND ({})", guard.sql(transition.set_binds())),
            None => String::new(),
        };
        let same_occurrence = match (&model.version, expecting) {
            (Some(version), true) => format!(
                " AND {} = {}",
                d.version_value(version),
                Slot::Expected.mark()
            ),
            _ => String::new(),
        };
        format!(
            "{} AND {}{guard}{same_occurrence}",
            d.key_match(&model.key),
            d.in_sources(model, transition),
        )
    }

    /// PostgreSQL, for a machine with a history table or a transition
    /// that emits a message: the compare-and-set, its history row and its
    /// outbox row in one statement. With a history table the row is read
    /// and locked first (`FOR UPDATE`, which under READ COMMITTED re-reads
    /// the latest version of a row another transaction just changed), so
    /// the state recorded as left is the one the row really left;
    /// `PostgreSQL` 15 has no `OLD` in `RETURNING`. Returns what
    /// [`Self::update`] returns.
    pub fn update_with_history(
        &self,
        model: &Model,
        transition: &Transition,
        expecting: bool,
    ) -> String {
        let d = *self;
        if d != Dialect::Postgres || (model.history.is_none() && transition.emit.is_none()) {
            return d.update(model, transition, expecting);
        }
        let table = d.quote(&model.table);
        let target = &model.states[transition.target];
        let mut returned = vec![d.version_read(model.version.as_deref()) + " AS __sg_v"];
        returned.push(match &target.in_flight {
            Some(in_flight) => d.lease_token(&in_flight.since) + " AS __sg_l",
            None => d.int64("0") + " AS __sg_l",
        });
        let mut out = Vec::new();
        if model.version.is_some() {
            out.push(Col::Occurrence.of("__sg_v"));
        }
        if target.in_flight.is_some() {
            out.push(Col::Token.of("__sg_l"));
        }
        let aliases: Vec<String> = (0..model.key.len()).map(|i| format!("__sg_k{i}")).collect();
        let outbox = d.outbox_cte(
            model,
            transition,
            "__sg_moved",
            &aliases,
            "__sg_v",
            &Slot::EffectKey.mark(),
        );
        let payload = d.payload_item(model, transition);
        // The final SELECT gives what `update` returns: the version and the
        // lease token where they exist, or, without either, one row per row
        // moved (its count is the rows affected), holding the tag.
        let select = match out.is_empty() {
            true => Col::Tag.of(crate::plan::TAG),
            false => out.join(", "),
        };
        let Some(history) = &model.history else {
            return format!(
                "WITH __sg_moved AS (UPDATE {table} SET {} WHERE {} RETURNING {}, {}{payload}){outbox} \
                 SELECT {select} FROM __sg_moved",
                d.assignments(model, transition),
                d.move_predicate(model, transition, expecting),
                d.key_aliases(model, Some(&table), "__sg_k"),
                returned.join(", "),
            );
        };
        let (columns, values) = d.history_row(
            model,
            transition,
            aliases,
            "__sg_from".to_owned(),
            "__sg_v".to_owned(),
            true,
        );
        let last = model.table.rsplit('.').next().unwrap_or(&model.table);
        format!(
            "WITH __sg_old AS (SELECT {}, {} AS __sg_from FROM {table} WHERE {} FOR UPDATE OF {}), \
             __sg_moved AS (UPDATE {table} SET {} FROM __sg_old WHERE {} RETURNING {}, __sg_from, \
             {}{payload}), __sg_log AS (INSERT INTO {} ({columns}) SELECT {values} FROM \
             __sg_moved){outbox} SELECT {select} FROM __sg_moved",
            d.key_aliases(model, None, "__sg_k"),
            d.status_read(&model.column),
            d.move_predicate(model, transition, expecting),
            d.quote(last),
            d.assignments(model, transition),
            d.join_old(model),
            d.key_aliases(model, Some(&table), "__sg_k"),
            returned.join(", "),
            d.quote(history),
        )
    }

    /// `SELECT c, version FROM t WHERE k = $1` (version 0 without a version
    /// column), with the status read as text, as a
    /// locking read where [`Self::read_lock`] says so.
    pub fn select(self, model: &Model, in_transaction: bool) -> String {
        self.one_row(
            vec![
                (Col::Status, self.status_read(&model.column)),
                (Col::Occurrence, self.version_read(model.version.as_deref())),
            ],
            &format!(
                "FROM {} WHERE {}{}",
                self.quote(&model.table),
                self.key_match(&model.key),
                self.read_lock(in_transaction),
            ),
        )
    }

    /// `SELECT columns from_where`: the read of one row by its key. On
    /// PostgreSQL it returns exactly one row whether or not the key is
    /// there, [`Col::Found`] saying which, so that a statement that
    /// returns no row at all is known to be another statement's answer
    /// (see `plan.rs`): the row is read in a `LATERAL` subquery, joined to
    /// a row of its own.
    pub(super) fn one_row(self, columns: Vec<(Col, String)>, from_where: &str) -> String {
        match self {
            Dialect::Postgres => {
                let inner: Vec<String> = columns
                    .iter()
                    .enumerate()
                    .map(|(i, (_, expr))| format!("{expr} AS __sg_c{i}"))
                    .collect();
                let outer: Vec<String> = columns
                    .iter()
                    .enumerate()
                    .map(|(i, (col, _))| col.of(&format!("__sg_r.__sg_c{i}")))
                    .collect();
                format!(
                    "SELECT {}, {} FROM (SELECT 1) AS __sg_one LEFT JOIN LATERAL (SELECT {} AS \
                     __sg_f, {} {from_where}) AS __sg_r ON true",
                    Col::Found.of("__sg_r.__sg_f"),
                    outer.join(", "),
                    self.int64("1"),
                    inner.join(", "),
                )
            }
            Dialect::Sqlite | Dialect::MySql => {
                let list: Vec<String> = columns.iter().map(|(col, expr)| col.of(expr)).collect();
                format!("SELECT {} {from_where}", list.join(", "))
            }
        }
    }

    /// `Machine::available`'s read: the row's status and version, and in
    /// one integer whether each guard that binds no values passes now, bit
    /// `i` for the `i`-th such transition in declaration order
    /// ([`Model::available_bits`]); a NULL condition counts as unmet, as
    /// in the `UPDATE`'s `WHERE`. One row whatever the key finds, on
    /// PostgreSQL (see [`Self::one_row`]).
    pub fn available(self, model: &Model) -> String {
        let terms: Vec<String> = model
            .transitions
            .iter()
            .zip(model.available_bits())
            .filter_map(|(t, bit)| {
                let guard = t.guard.as_ref()?.sql(t.set_binds());
                Some(format!(
                    "CASE WHEN ({guard}) THEN {} ELSE 0 END",
                    1_i64 << bit?
                ))
            })
            .collect();
        let mask = match terms.is_empty() {
            true => "0".to_owned(),
            false => terms.join(" + "),
        };
        let mut columns = vec![
            (Col::Status, self.status_read(&model.column)),
            (Col::Occurrence, self.version_read(model.version.as_deref())),
            (Col::Meets, self.int64(&format!("({mask})"))),
        ];
        // In a state that counts attempts: how many, how long until the
        // next is due, and the last retry's reason where it is kept.
        let next_in = |retry: &crate::model::Retry| {
            format!("0 - {}", self.ms_since(&self.quote(&retry.next_attempt)))
        };
        columns.extend(self.retry_columns(model, "", Some(&next_in)));
        self.one_row(
            columns,
            &format!(
                "FROM {} WHERE {}",
                self.quote(&model.table),
                self.key_match(&model.key),
            ),
        )
    }

    /// Of a machine with states that count attempts (`retry(…)`), each
    /// row's attempts ([`Col::Attempt`]), `next_in`'s value where given
    /// ([`Col::NextIn`]) and, where a state keeps it, the last retry's
    /// reason ([`Col::Reason`]): each a `CASE` on the row's status, NULL
    /// in a state that does not count them. The row's columns are those
    /// of `alias` (`"__sg_t."`, or `""`). Nothing for another machine.
    pub(super) fn retry_columns(
        self,
        model: &Model,
        alias: &str,
        next_in: Option<&dyn Fn(&crate::model::Retry) -> String>,
    ) -> Vec<(Col, String)> {
        let retrying: Vec<(&crate::model::State, &crate::model::Retry)> = model
            .states
            .iter()
            .filter_map(|s| Some((s, s.in_flight.as_ref()?.retry.as_ref()?)))
            .collect();
        if retrying.is_empty() {
            return Vec::new();
        }
        let column = format!("{alias}{}", self.quote(&model.column));
        let case = |value: &dyn Fn(&crate::model::Retry) -> String| {
            let arms: Vec<String> = (retrying.iter())
                .map(|(state, retry)| {
                    let test = self.status_is(&column, &format!("= '{}'", state.db));
                    format!("WHEN {test} THEN {}", value(retry))
                })
                .collect();
            format!("CASE {} END", arms.join(" "))
        };
        let attempts =
            case(&|retry| self.int64(&format!("{alias}{}", self.quote(&retry.attempts))));
        let mut columns = vec![(Col::Attempt, attempts)];
        if let Some(next_in) = next_in {
            columns.push((Col::NextIn, self.int64(&case(next_in))));
        }
        if retrying.iter().any(|(_, retry)| retry.last_error.is_some()) {
            let reason = case(&|retry| match &retry.last_error {
                Some(kept) => self.status_text(&format!("{alias}{}", self.quote(kept))),
                None => self.status_text("NULL"),
            });
            columns.push((Col::Reason, reason));
        }
        columns
    }

    /// The losing read of a guarded transition: the status, the version
    /// and whether the row meets the guard now (1 or 0; a NULL condition
    /// counts as unmet, as it does in the `UPDATE`'s `WHERE`).
    pub fn select_guarded(
        self,
        model: &Model,
        transition: &Transition,
        in_transaction: bool,
    ) -> Option<String> {
        let guard = transition.guard.as_ref()?.sql(transition.set_binds());
        Some(self.one_row(
            vec![
                (Col::Status, self.status_read(&model.column)),
                (Col::Occurrence, self.version_read(model.version.as_deref())),
                (
                    Col::Meets,
                    self.int64(&format!("CASE WHEN ({guard}) THEN 1 ELSE 0 END")),
                ),
            ],
            &format!(
                "FROM {} WHERE {}{}",
                self.quote(&model.table),
                self.key_match(&model.key),
                self.read_lock(in_transaction),
            ),
        ))
    }
}
