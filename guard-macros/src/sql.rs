//! The statements a transition runs (DML), built at expansion time from
//! validated names. The output is a string literal per dialect: nothing is
//! formatted into SQL at run time. The dialects' differences in quoting,
//! placeholders and comparison live in `dialect.rs`; the DDL is in `ddl.rs`.

use crate::dialect::Dialect;
use crate::plan::{Col, Slot};
use crate::valid::{Assign, InFlight, Model, State, Transition};

/// How a batch's keys are compared with the table's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Match {
    /// Equal, and equal exactly (see `Dialect::key_match`): for any key.
    Exact,
    /// Equal by value: for keys whose equality is exact by value
    /// (integers, UUIDs), on PostgreSQL, where the text comparison that
    /// [`Match::Exact`] adds for text keys costs a hashed subplan.
    ByValue,
}

/// `columns` as the result's key columns, `Key(0)`, `Key(1)`, …, joined.
fn key_columns(columns: impl IntoIterator<Item = String>) -> String {
    columns
        .into_iter()
        .enumerate()
        .map(|(i, column)| Col::Key(i as u8).of(&column))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A transition's name as the history records it.
fn transition_name(transition: &Transition) -> String {
    syn::ext::IdentExt::unraw(transition.name).to_string()
}

impl Dialect {
    /// The current time as a value of a `since` column: the statement's
    /// time, not the transaction's, so that a lease starts when the row
    /// enters the state, however long the transaction ran before.
    /// PostgreSQL's `CURRENT_TIMESTAMP` is the transaction's start, hence
    /// `statement_timestamp()`; MySQL's `UTC_TIMESTAMP()` and SQLite's
    /// `'now'` already are the statement's time.
    fn now(self) -> &'static str {
        match self {
            Dialect::Postgres => "statement_timestamp()",
            // Text with milliseconds, which sorts as it compares.
            Dialect::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now')",
            // UTC, so that sessions in different time zones agree on when a
            // lease runs out in a DATETIME column.
            Dialect::MySql => "UTC_TIMESTAMP(3)",
        }
    }

    /// The time `ms` (a placeholder for a number of milliseconds) ago, in
    /// the same form as [`Self::now`].
    fn ago(self, ms: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("statement_timestamp() - CAST({ms} AS BIGINT) * INTERVAL '1 millisecond'")
            }
            Dialect::Sqlite => format!(
                "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', \
                 CAST({ms} AS INTEGER) / 1000.0))"
            ),
            Dialect::MySql => format!("UTC_TIMESTAMP(3) - INTERVAL ({ms} * 1000) MICROSECOND"),
        }
    }

    /// The time `lease_ms` ago, in the same form as [`Self::now`].
    fn lease_expiry(self, lease_ms: u64) -> String {
        match self {
            Dialect::Postgres => {
                format!("statement_timestamp() - INTERVAL '{lease_ms} milliseconds'")
            }
            Dialect::Sqlite => format!(
                "strftime('%Y-%m-%d %H:%M:%f', 'now', '-{}.{:03} seconds')",
                lease_ms / 1000,
                lease_ms % 1000
            ),
            Dialect::MySql => {
                format!(
                    "UTC_TIMESTAMP(3) - INTERVAL {} MICROSECOND",
                    lease_ms * 1000
                )
            }
        }
    }

    /// `key = $1`, matched exactly: equal as the database stores it, not
    /// only under the column's collation or after a type conversion
    /// (MySQL's default collations ignore case and trailing spaces and
    /// compare `'042'` with 42 as numbers; SQLite's `NOCASE` ignores case
    /// and turns `'1.0'` into 1). The effect key is built from the caller's
    /// key, so the row it names must be exactly that key. The plain
    /// equality comes first, so the key's index still finds the row.
    /// MySQL's `?` is positional: each key value is bound twice there.
    /// A key of several columns matches each, its values numbered `$1`,
    /// `$2`, … in the order declared.
    fn key_match(self, key: &[String]) -> String {
        key.iter()
            .enumerate()
            .map(|(i, column)| self.exact_eq(&self.quote(column), &Slot::Key(i as u8).mark()))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// `k = v`, and equal exactly (see [`Self::key_match`]).
    fn exact_eq(self, k: &str, v: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("{k} = {v} AND CAST({k} AS TEXT) COLLATE \"C\" = CAST({v} AS TEXT)")
            }
            Dialect::Sqlite => format!("{k} = {v} AND CAST({k} AS BLOB) = CAST({v} AS BLOB)"),
            Dialect::MySql => format!("{k} = {v} AND {} = {}", self.bytes(k), self.bytes(v)),
        }
    }

    /// `column` passes `test` (`IN ('a', 'b')`, `= 'a'`).
    ///
    /// MySQL's default collations ignore case and trailing spaces; comparing
    /// bytes (`CAST(c AS BINARY)`) keeps `'Pending'` from passing for
    /// `'pending'`. A cast column cannot use an index, so the plain
    /// comparison stays beside it: it selects the index range (a superset
    /// under any collation, since equal bytes compare equal) and the cast
    /// keeps the exact strings of it.
    fn status_is(self, column: &str, test: &str) -> String {
        match self {
            Dialect::MySql => format!("{column} {test} AND {} {test}", self.bytes(column)),
            Dialect::Postgres | Dialect::Sqlite => format!("{column} {test}"),
        }
    }

    /// The status column among the transition's sources (`IN ('a', 'b')`).
    fn in_sources(self, model: &Model, transition: &Transition) -> String {
        let sources: Vec<String> = transition
            .sources
            .iter()
            .map(|&s| format!("'{}'", model.states[s].db))
            .collect();
        self.status_is(
            &self.quote(&model.column),
            &format!("IN ({})", sources.join(", ")),
        )
    }

    /// The version column, with NULL (a column added without a default)
    /// read as 0, so that it still counts.
    fn version_value(self, version: &str) -> String {
        format!("COALESCE({}, 0)", self.quote(version))
    }

    /// The version column read as a 64-bit integer.
    fn version_read(self, version: Option<&str>) -> String {
        let column = match version {
            Some(version) => self.version_value(version),
            None => "0".to_owned(),
        };
        self.int64(&column)
    }

    /// `expr` read as a 64-bit integer.
    fn int64(self, expr: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({expr} AS BIGINT)"),
            Dialect::Sqlite => format!("CAST({expr} AS INTEGER)"),
            Dialect::MySql => format!("CAST({expr} AS SIGNED)"),
        }
    }

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
    fn assignments(self, model: &Model, transition: &Transition) -> String {
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
        // except its own (valid.rs refuses the rest), and no column is set
        // twice; with the `set` assignments first, nothing has written that
        // column yet when its expression reads it, so every expression reads
        // the row as it was, as on PostgreSQL and SQLite.
        let mut assignments = match d {
            Dialect::MySql => sets.into_iter().chain([status]).collect::<Vec<_>>(),
            Dialect::Postgres | Dialect::Sqlite => [status].into_iter().chain(sets).collect(),
        }
        .join(", ");
        if let Some(since) = target.since() {
            assignments.push_str(&format!(", {} = {}", d.quote(since), d.now()));
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
    fn returning(self, model: &Model, version: bool, lease_of: Option<&InFlight>) -> String {
        let mut items = Vec::new();
        if version {
            items.push(Col::Version.of(&self.version_read(model.version.as_deref())));
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
        let occurrence = "CAST(LAST_INSERT_ID() AS SIGNED)";
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
                    Col::Version.of(occurrence),
                    Col::Token.of(&token)
                )
            }
        }
    }

    /// The lease token of a row in an in-flight state: its `since` stamp as
    /// an integer (microseconds on PostgreSQL and MySQL, milliseconds on
    /// SQLite), computed the same way every time, independent of the
    /// session's time zone. Entering the state, a takeover and a renewal
    /// each stamp a new `since`, so the token says which holder the lease
    /// is with. NULL (a row put there by hand) reads as 0.
    fn lease_token(self, since: &str) -> String {
        let s = self.quote(since);
        match self {
            Dialect::Postgres => {
                format!("COALESCE(CAST(EXTRACT(EPOCH FROM {s}) * 1000000 AS BIGINT), 0)")
            }
            Dialect::Sqlite => {
                format!("COALESCE(CAST(ROUND(unixepoch({s}, 'subsec') * 1000) AS INTEGER), 0)")
            }
            Dialect::MySql => {
                format!("COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {s}), 0)")
            }
        }
    }

    /// `WHERE k = $1 AND c = 'state'[ AND version = $2] AND token = $n`: the
    /// row still in the same occurrence of the in-flight state, with its
    /// lease still held by the caller.
    fn leased(self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = self;
        let same_occurrence = match &model.version {
            Some(version) => format!(
                " AND {} = {}",
                d.version_value(version),
                Slot::Expected.mark()
            ),
            None => String::new(),
        };
        format!(
            "{} AND {}{same_occurrence} AND {} = {}",
            d.key_match(&model.key),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.lease_token(&in_flight.since),
            Slot::Token.mark(),
        )
    }

    /// The follow-up `transition` (`done` or `failed`) of an in-flight
    /// state, moving the row only while the caller still holds its lease:
    /// a worker whose lease was taken over cannot move the row.
    pub fn follow_up(
        &self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        transition: &Transition,
    ) -> String {
        let d = *self;
        let update = format!(
            "UPDATE {} SET {} WHERE {}",
            d.quote(&model.table),
            d.assignments(model, transition),
            d.leased(model, state, in_flight),
        );
        // PostgreSQL writes the history row in the same statement; the
        // row left `state`, which the lease check pins.
        let (Dialect::Postgres, Some(history)) = (d, &model.history) else {
            return update;
        };
        let table = d.quote(&model.table);
        let aliases = (0..model.key.len()).map(|i| format!("__sg_k{i}")).collect();
        let (columns, values) = d.history_row(
            model,
            transition,
            aliases,
            format!("'{}'", state.db),
            "__sg_v".to_owned(),
            true,
        );
        format!(
            "WITH __sg_moved AS ({update} RETURNING {}, {} AS __sg_v) INSERT INTO {} ({columns}) \
             SELECT {values} FROM __sg_moved",
            d.key_aliases(model, Some(&table), "__sg_k"),
            d.version_read(model.version.as_deref()),
            d.quote(history),
        )
    }

    /// SQLite and MySQL, for a machine with a history table: the history
    /// row of a follow-up, inserted just before it in one transaction
    /// (see [`Self::log`]).
    pub fn follow_up_log(
        &self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        transition: &Transition,
    ) -> String {
        let d = *self;
        let (Some(history), false) = (&model.history, d == Dialect::Postgres) else {
            return String::new();
        };
        let predicate = d.leased(model, state, in_flight);
        d.log_insert(model, history, transition, &predicate)
    }

    /// Renews the caller's lease on a row of an in-flight state: a
    /// heartbeat for an effect that outlasts the lease. Returns the new
    /// token (MySQL reads it with [`Self::lease_read`]).
    pub fn renew(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        format!(
            "UPDATE {} SET {} = {} WHERE {}{}",
            d.quote(&model.table),
            d.quote(&in_flight.since),
            d.now(),
            d.leased(model, state, in_flight),
            d.returning(model, false, Some(in_flight)),
        )
    }

    /// The lease token of the row as it is: what MySQL reads after a claim
    /// or a renewal, for want of `RETURNING`.
    pub fn lease_read(&self, model: &Model, in_flight: &InFlight) -> String {
        let d = *self;
        format!(
            "SELECT {} FROM {} WHERE {}",
            Col::Token.of(&d.lease_token(&in_flight.since)),
            d.quote(&model.table),
            d.key_match(&model.key),
        )
    }

    /// `SELECT c, version, token FROM t WHERE k = $1`: the losing path of
    /// a follow-up, which tells a finished, a superseded and a taken-over
    /// row apart.
    pub fn follow_up_read(&self, model: &Model, in_flight: &InFlight) -> String {
        let d = *self;
        format!(
            "SELECT {}, {}, {} FROM {} WHERE {}{}",
            Col::Status.of(&d.status_read(&model.column)),
            Col::Version.of(&d.version_read(model.version.as_deref())),
            Col::Token.of(&d.lease_token(&in_flight.since)),
            d.quote(&model.table),
            d.key_match(&model.key),
            d.read_lock(false),
        )
    }

    /// Rows of an in-flight state whose lease has run out, oldest first:
    /// `SELECT key, version FROM t WHERE c = 'state' AND since < now - lease`.
    /// A NULL `since` (a row put there without a transition) counts as
    /// expired, so that no such row is left in flight forever, and comes
    /// first.
    pub fn expired(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let since = d.quote(&in_flight.since);
        format!(
            "SELECT {}, {} FROM {} WHERE {} AND ({since} IS NULL OR {since} < {}) \
             ORDER BY {since} IS NOT NULL, {since} LIMIT {}",
            key_columns(model.key.iter().map(|k| d.quote(k))),
            Col::Version.of(&d.version_read(model.version.as_deref())),
            d.quote(&model.table),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.lease_expiry(in_flight.lease_ms),
            Slot::Limit.mark(),
        )
    }

    /// PostgreSQL: takes over up to `$1` expired rows of an in-flight state
    /// in one statement, oldest first, skipping rows another recovery holds
    /// (`FOR UPDATE SKIP LOCKED`), and returns each one's key, version and
    /// new lease token, in the order of their old stamps: [`Self::expired`]
    /// and [`Self::claim`] for every row at once. Empty on SQLite and
    /// MySQL, which list, then claim row by row.
    pub fn take_over(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        if d != Dialect::Postgres {
            return String::new();
        }
        let table = d.quote(&model.table);
        let since = d.quote(&in_flight.since);
        let n = model.key.len();
        let expired = format!(
            "{} AND ({since} IS NULL OR {since} < {})",
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.lease_expiry(in_flight.lease_ms),
        );
        let same_row: Vec<String> = model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{table}.{} = __sg_o.__sg_k{i}", d.quote(k)))
            .collect();
        let aliases: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
        format!(
            "WITH __sg_taken AS (UPDATE {table} SET {since} = {} FROM (SELECT {}, {since} AS \
             __sg_old FROM {table} WHERE {expired} ORDER BY {since} IS NOT NULL, {since} LIMIT {} \
             FOR UPDATE SKIP LOCKED) AS __sg_o WHERE {} AND {expired} RETURNING {}, {} AS __sg_v, \
             {} AS __sg_l, __sg_o.__sg_old) SELECT {}, {}, {} FROM __sg_taken ORDER BY \
             __sg_old IS NOT NULL, __sg_old",
            d.now(),
            d.key_aliases(model, None, "__sg_k"),
            Slot::Limit.mark(),
            same_row.join(" AND "),
            d.key_aliases(model, Some(&table), "__sg_k"),
            d.version_read(model.version.as_deref()),
            d.lease_token(&in_flight.since),
            key_columns(aliases),
            Col::Version.of("__sg_v"),
            Col::Token.of("__sg_l"),
        )
    }

    /// Takes over one expired row for recovery by renewing its lease, only
    /// if it is still in the same occurrence of the in-flight state.
    pub fn claim(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let since = d.quote(&in_flight.since);
        let same_occurrence = match &model.version {
            Some(version) => format!(
                " AND {} = {}",
                d.version_value(version),
                Slot::Expected.mark()
            ),
            None => String::new(),
        };
        format!(
            "UPDATE {} SET {since} = {} WHERE {} AND {} \
             AND ({since} IS NULL OR {since} < {}){same_occurrence}{}",
            d.quote(&model.table),
            d.now(),
            d.key_match(&model.key),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.lease_expiry(in_flight.lease_ms),
            d.returning(model, false, Some(in_flight)),
        )
    }

    /// The status read as text even from a PostgreSQL enum or a MySQL
    /// ENUM column.
    fn status_read(self, column: &str) -> String {
        let column = self.quote(column);
        match self {
            Dialect::Postgres => format!("{column}::text"),
            Dialect::Sqlite => column,
            Dialect::MySql => format!("CAST({column} AS CHAR)"),
        }
    }

    /// What makes the losing path's read see the row as it is now, not as
    /// a snapshot had it.
    ///
    /// InnoDB's plain SELECT inside a REPEATABLE READ transaction reads the
    /// transaction's snapshot, while its UPDATE reads the latest committed
    /// row: a lost compare-and-set would then see the stale source state. A
    /// locking read sees what the UPDATE saw. PostgreSQL's REPEATABLE READ
    /// and SERIALIZABLE transactions read their snapshot too; there a
    /// locking read of a row changed since the snapshot fails with 40001
    /// (retry the transaction) instead. In autocommit every PostgreSQL
    /// statement has a fresh snapshot, so the read takes no lock there.
    /// SQLite has one writer: a transaction that has written reads the
    /// latest row.
    fn read_lock(self, in_transaction: bool) -> &'static str {
        match self {
            Dialect::MySql => " LOCK IN SHARE MODE",
            Dialect::Postgres if in_transaction => " FOR SHARE",
            Dialect::Postgres | Dialect::Sqlite => "",
        }
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
        Some(format!(
            "SELECT {}, {}, {} FROM {} WHERE {}{}",
            Col::Status.of(&self.status_read(&model.column)),
            Col::Version.of(&self.version_read(model.version.as_deref())),
            Col::Meets.of(&self.int64(&format!("CASE WHEN ({guard}) THEN 1 ELSE 0 END"))),
            self.quote(&model.table),
            self.key_match(&model.key),
            self.read_lock(in_transaction),
        ))
    }

    /// `transition.claim(pool, n)`: up to `n` rows in a source state (and
    /// meeting the guard), in `order`, skipping rows another claimer holds.
    ///
    /// PostgreSQL moves them in one statement and returns their keys,
    /// versions and lease tokens in order: `WITH moved AS (UPDATE … WHERE
    /// (k) IN (SELECT k … ORDER BY o LIMIT $n FOR UPDATE SKIP LOCKED) …
    /// RETURNING …) SELECT … FROM moved ORDER BY o`. SQLite and MySQL have
    /// no `UPDATE` in a `WITH`, so this is the candidates' `SELECT` (a
    /// locking `SKIP LOCKED` one on MySQL), run in a short transaction
    /// that then moves them all with the `apply_many` statements.
    ///
    pub fn claim_next(&self, model: &Model, transition: &Transition) -> String {
        self.claim_sql(model, transition, None)
    }

    /// `transition.claim_older_than(pool, age, n)`: [`Self::claim_next`]
    /// for rows whose source state's `since` is older than the age bound
    /// after the guard's values (milliseconds), by the database's clock.
    /// Empty unless every source state stamps one `since` column (a NULL
    /// stamp is never old: give the column a default).
    pub fn claim_older(&self, model: &Model, transition: &Transition) -> String {
        let mut since = transition.sources.iter().map(|&s| model.states[s].since());
        let Some(Some(first)) = since.next() else {
            return String::new();
        };
        if !since.all(|s| s.is_some_and(|s| s.eq_ignore_ascii_case(first))) {
            return String::new();
        }
        self.claim_sql(model, transition, Some(first))
    }

    fn claim_sql(&self, model: &Model, transition: &Transition, older: Option<&str>) -> String {
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
                        "WITH __sg_old AS (SELECT {}, {} AS __sg_from FROM {table} WHERE \
                         {status}{guard} ORDER BY {order_by} LIMIT {limit} FOR UPDATE SKIP LOCKED), \
                         moved AS (UPDATE {table} SET {} FROM __sg_old WHERE {} RETURNING {}, {} AS \
                         v, {lease} AS l, {}, __sg_old.__sg_from), __sg_log AS (INSERT INTO {} \
                         ({columns}) SELECT {values} FROM moved) SELECT {}, {}, {} FROM moved ORDER \
                         BY {}",
                        d.key_aliases(model, None, "__sg_k"),
                        d.status_read(&model.column),
                        d.assignments(model, transition),
                        d.join_old(model),
                        returned_keys,
                        d.version_read(model.version.as_deref()),
                        returned_order.join(", "),
                        d.quote(history),
                        key_columns(key_aliases.clone()),
                        Col::Version.of("v"),
                        Col::Token.of("l"),
                        [order_aliases.clone(), key_aliases.clone()]
                            .concat()
                            .join(", "),
                    );
                }
                format!(
                    "WITH moved AS (UPDATE {table} SET {} WHERE ({keys}) IN ({candidates} FOR \
                     UPDATE SKIP LOCKED) AND {status}{guard} RETURNING {}, {} AS v, {lease} AS l, \
                     {}) SELECT {}, {}, {} FROM moved ORDER BY {}",
                    d.assignments(model, transition),
                    returned_keys,
                    d.version_read(model.version.as_deref()),
                    returned_order.join(", "),
                    key_columns(key_aliases),
                    Col::Version.of("v"),
                    Col::Token.of("l"),
                    order_aliases.join(", "),
                )
            }
        }
    }

    /// The history row of a move, as `INSERT INTO h (…) SELECT …` reads it
    /// from the row being moved, whose status is the state it leaves:
    /// `(columns, values)`.
    ///
    /// With `note`, the call's note too (`actor`, `reason`, `details`).
    fn history_columns(
        self,
        model: &Model,
        transition: &Transition,
        note: bool,
    ) -> (String, String) {
        let d = self;
        let occurrence = match &model.version {
            Some(version) => format!("{} + 1", d.version_value(version)),
            None => "0".to_owned(),
        };
        let keys = model.key.iter().map(|k| d.quote(k)).collect();
        d.history_row(
            model,
            transition,
            keys,
            d.status_read(&model.column),
            occurrence,
            note,
        )
    }

    /// The history table's columns and the values for them: the key
    /// (`keys`), the transition's name, the state left (`from`), the
    /// target, the new occurrence, the time, and with `note` the note's.
    fn history_row(
        self,
        model: &Model,
        transition: &Transition,
        keys: Vec<String>,
        from: String,
        occurrence: String,
        note: bool,
    ) -> (String, String) {
        let d = self;
        let mut columns: Vec<String> = model.key.iter().map(|k| d.quote(k)).collect();
        columns.extend(
            [
                "transition",
                "from_state",
                "to_state",
                "occurrence",
                "moved_at",
            ]
            .iter()
            .map(|c| d.quote(c)),
        );
        let mut values = keys;
        values.extend([
            format!("'{}'", transition_name(transition)),
            from,
            format!("'{}'", model.states[transition.target].db),
            occurrence,
            d.now().to_owned(),
        ]);
        if note {
            let (note_columns, note_values) = d.note();
            columns.push(note_columns);
            values.push(note_values);
        }
        (columns.join(", "), values.join(", "))
    }

    /// The note's columns and placeholders: the actor, the reason, and the
    /// details as JSON (parsed by the database, so that a document that is
    /// not JSON is refused with the move).
    fn note(self) -> (String, String) {
        let d = self;
        let details = match d {
            Dialect::Postgres => format!("CAST({} AS JSONB)", Slot::Details.mark()),
            Dialect::Sqlite => format!("json({})", Slot::Details.mark()),
            Dialect::MySql => Slot::Details.mark(),
        };
        (
            ["actor", "reason", "details"]
                .iter()
                .map(|c| d.quote(c))
                .collect::<Vec<_>>()
                .join(", "),
            format!("{}, {}, {details}", Slot::Actor.mark(), Slot::Reason.mark()),
        )
    }

    /// PostgreSQL: the key columns as `alias0`, `alias1`, …, qualified by
    /// `table` where one is given.
    fn key_aliases(self, model: &Model, table: Option<&str>, alias: &str) -> String {
        model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| match table {
                Some(table) => format!("{table}.{} AS {alias}{i}", self.quote(k)),
                None => format!("{} AS {alias}{i}", self.quote(k)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// PostgreSQL: the table's row is the one `__sg_old` read and locked.
    fn join_old(self, model: &Model) -> String {
        let table = self.quote(&model.table);
        model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{table}.{} = __sg_old.__sg_k{i}", self.quote(k)))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// SQLite and MySQL, for a machine with a history table: the history
    /// row of `update` (with `expecting`), inserted from the row the
    /// compare-and-set is about to move, in the same transaction and just
    /// before it. The same `WHERE`, so it inserts a row exactly when the
    /// update moves one; on MySQL it locks the row (`FOR UPDATE`), so
    /// nothing moves it in between. Empty on PostgreSQL, whose
    /// [`Self::update_logged`] does both in one statement.
    pub fn log(&self, model: &Model, transition: &Transition, expecting: bool) -> String {
        let d = *self;
        let (Some(history), false) = (&model.history, d == Dialect::Postgres) else {
            return String::new();
        };
        let predicate = d.move_predicate(model, transition, expecting);
        d.log_insert(model, history, transition, &predicate)
    }

    /// SQLite and MySQL: the history row of `transition` for the row that
    /// `predicate` finds, inserted from it; on MySQL the row is locked
    /// (`FOR UPDATE`), so nothing moves it before the statement that
    /// follows in the same transaction.
    fn log_insert(
        self,
        model: &Model,
        history: &str,
        transition: &Transition,
        predicate: &str,
    ) -> String {
        let (columns, values) = self.history_columns(model, transition, true);
        format!(
            "INSERT INTO {} ({columns}) SELECT {values} FROM {} WHERE {predicate}{}",
            self.quote(history),
            self.quote(&model.table),
            if self == Dialect::MySql {
                " FOR UPDATE"
            } else {
                ""
            },
        )
    }

    /// The compare-and-set's `WHERE`: key, sources, guard, expected
    /// version.
    fn move_predicate(self, model: &Model, transition: &Transition, expecting: bool) -> String {
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

    /// PostgreSQL, for a machine with a history table: the compare-and-set
    /// and its history row in one statement. The row is read and locked
    /// first (`FOR UPDATE`, which under READ COMMITTED re-reads the latest
    /// version of a row another transaction just changed), so the state
    /// recorded as left is the one the row really left; `PostgreSQL` 15 has
    /// no `OLD` in `RETURNING`. Returns what [`Self::update`] returns.
    pub fn update_logged(&self, model: &Model, transition: &Transition, expecting: bool) -> String {
        let d = *self;
        let (Dialect::Postgres, Some(history)) = (d, &model.history) else {
            return d.update(model, transition, expecting);
        };
        let table = d.quote(&model.table);
        let target = &model.states[transition.target];
        let mut returned = vec![d.version_read(model.version.as_deref()) + " AS __sg_v"];
        returned.push(match &target.in_flight {
            Some(in_flight) => d.lease_token(&in_flight.since) + " AS __sg_l",
            None => d.int64("0") + " AS __sg_l",
        });
        let mut out = Vec::new();
        if model.version.is_some() {
            out.push(Col::Version.of("__sg_v"));
        }
        if target.in_flight.is_some() {
            out.push(Col::Token.of("__sg_l"));
        }
        let (columns, values) = d.history_row(
            model,
            transition,
            (0..model.key.len()).map(|i| format!("__sg_k{i}")).collect(),
            "__sg_from".to_owned(),
            "__sg_v".to_owned(),
            true,
        );
        let last = model.table.rsplit('.').next().unwrap_or(&model.table);
        // The final SELECT gives what `update` returns: the version and the
        // lease token where they exist, or, without either, one row per row
        // moved (its count is the rows affected).
        let select = match out.is_empty() {
            true => "1".to_owned(),
            false => out.join(", "),
        };
        format!(
            "WITH __sg_old AS (SELECT {}, {} AS __sg_from FROM {table} WHERE {} FOR UPDATE OF {}), \
             __sg_moved AS (UPDATE {table} SET {} FROM __sg_old WHERE {} RETURNING {}, __sg_from, \
             {}), __sg_log AS (INSERT INTO {} ({columns}) SELECT {values} FROM __sg_moved) SELECT \
             {select} FROM __sg_moved",
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

    /// A machine's history, oldest first: transition, from, to, occurrence
    /// and the time as text, for the key `$1`….
    pub fn history_read(&self, model: &Model) -> String {
        let d = *self;
        let Some(history) = &model.history else {
            return String::new();
        };
        let text = match d {
            Dialect::MySql => "CHAR",
            Dialect::Postgres | Dialect::Sqlite => "TEXT",
        };
        format!(
            "SELECT {}, {}, {}, {}, CAST({} AS {text}), {}, {}, CAST({} AS {text}) FROM {} WHERE \
             {} ORDER BY {}",
            Col::Transition.of(&d.quote("transition")),
            Col::From.of(&d.quote("from_state")),
            Col::To.of(&d.quote("to_state")),
            Col::Version.of(&d.int64(&d.quote("occurrence"))),
            Col::At.of(&d.quote("moved_at")),
            Col::Actor.of(&d.quote("actor")),
            Col::Reason.of(&d.quote("reason")),
            Col::Details.of(&d.quote("details")),
            d.quote(history),
            d.key_match(&model.key),
            d.quote("history_id"),
        )
    }

    /// `apply_many`'s keys as rows, `__sg_i(__sg_k0, …)`: an array per key
    /// column unnested on PostgreSQL, the JSON through `JSON_TABLE` on
    /// MySQL and `json_each` on SQLite (each value as text, compared exactly
    /// below). SQLite's `json_each` sits in a subquery that names only
    /// `__sg_k0`, …, so that its own columns (`id`, `key`, `value`, `type`,
    /// …) cannot shadow the table's in a guard or a `set`.
    fn many_input(self, model: &Model) -> String {
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
                        format!("__sg_k{i} VARCHAR(768) PATH '{path}'")
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
    fn many_match(self, model: &Model, by: Match) -> String {
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
            returning.push_str(&format!(", {}", Col::Version.of(&version)));
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
        match (d, &model.history) {
            // With a history table: the rows read and locked in key order
            // first, so the state each row leaves is the one recorded.
            (Dialect::Postgres, Some(history)) => {
                let n = model.key.len();
                let old = d.key_aliases(model, Some(&table), "__sg_k");
                let aliases: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
                let mut out = vec![key_columns(aliases.clone())];
                if model.version.is_some() {
                    out.push(Col::Version.of("__sg_v"));
                }
                if target.in_flight.is_some() {
                    out.push(Col::Token.of("__sg_l"));
                }
                let lease = match &target.in_flight {
                    Some(in_flight) => d.lease_token(&in_flight.since),
                    None => d.int64("0"),
                };
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
                    "WITH __sg_old AS (SELECT {}, {} AS __sg_from FROM {table} WHERE {pg_keys} AND \
                     {status}{guard} ORDER BY {keys} FOR UPDATE OF {}), __sg_moved AS (UPDATE \
                     {table} SET {assignments} FROM __sg_old WHERE {} RETURNING {}, {} AS __sg_v, \
                     {lease} AS __sg_l, __sg_old.__sg_from), __sg_log AS (INSERT INTO {} ({columns}) \
                     SELECT {values} FROM __sg_moved) SELECT {} FROM __sg_moved",
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
            (Dialect::Postgres, None) => {
                format!(
                    "UPDATE {table} SET {assignments} WHERE {pg_keys} AND {status}{guard}{returning}"
                )
            }
            // `UPDATE … FROM`: each key finds its row by the key's index,
            // as a hand-written `id IN (SELECT value FROM json_each(?1))`
            // does, and is compared exactly on that one row.
            (Dialect::Sqlite, _) => format!(
                "UPDATE {table} SET {assignments} FROM {} WHERE {} AND {status}{guard}{returning}",
                d.many_input(model),
                d.many_match(model, by),
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
    pub fn many_log(&self, model: &Model, transition: &Transition) -> String {
        let d = *self;
        let (Some(history), false) = (&model.history, d == Dialect::Postgres) else {
            return String::new();
        };
        let table = d.quote(&model.table);
        let status = d.in_sources(model, transition);
        let guard = match &transition.guard {
            Some(guard) => format!(" AND ({})", guard.sql(transition.set_binds())),
            None => String::new(),
        };
        let (columns, values) = d.history_columns(model, transition, true);
        match d {
            Dialect::MySql => format!(
                "INSERT INTO {} ({columns}) SELECT {values} FROM {} STRAIGHT_JOIN {table} ON {} \
                 WHERE {status}{guard}",
                d.quote(history),
                d.many_input(model),
                d.many_match(model, Match::Exact),
            ),
            Dialect::Sqlite | Dialect::Postgres => format!(
                "INSERT INTO {} ({columns}) SELECT {values} FROM {} JOIN {table} ON {} WHERE \
                 {status}{guard}",
                d.quote(history),
                d.many_input(model),
                d.many_match(model, Match::Exact),
            ),
        }
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
            Col::Version.of(&d.version_read(model.version.as_deref())),
            Col::Meets.of(&meets),
        );
        match d {
            Dialect::Postgres | Dialect::Sqlite => format!(
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

    /// `SELECT c, version FROM t WHERE k = $1` (version 0 without a version
    /// column), with the status read as text, as a
    /// locking read where [`Self::read_lock`] says so.
    pub fn select(self, model: &Model, in_transaction: bool) -> String {
        format!(
            "SELECT {}, {} FROM {} WHERE {}{}",
            Col::Status.of(&self.status_read(&model.column)),
            Col::Version.of(&self.version_read(model.version.as_deref())),
            self.quote(&model.table),
            self.key_match(&model.key),
            self.read_lock(in_transaction),
        )
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::Span;
    use syn::Ident;

    use crate::dialect::{DIALECTS, Dialect};
    use crate::plan::{Slot, render};
    use crate::valid::{InFlight, Model, State, Transition};

    /// A statement's text in `d`, or what is wrong with its placeholders.
    fn text(d: Dialect, marked: String) -> String {
        render(d, &marked).map_or_else(|error| error, |statement| statement.text)
    }

    /// `pending -start-> sending (in flight) -confirm-> sent`, on
    /// `billing.payouts` with a version column; `confirm` sets `sent_at`.
    fn with_model(check: impl FnOnce(&Model)) {
        let ident = |name: &str| Ident::new(name, Span::call_site());
        let (machine, pending, sending, sent) = (
            ident("Payout"),
            ident("Pending"),
            ident("Sending"),
            ident("Sent"),
        );
        let (start, confirm) = (ident("start"), ident("confirm"));
        let state = |ident, db: &str| State {
            ident,
            db: db.to_owned(),
            in_flight: None,
            stamp: None,
            timeout_ms: None,
        };
        let mut states = vec![
            state(&pending, "pending"),
            state(&sending, "sending"),
            state(&sent, "sent"),
        ];
        states[1].in_flight = Some(InFlight {
            lease_ms: 30_500,
            since: "sending_since".to_owned(),
            done: 1,
            failed: None,
        });
        let model = Model {
            ident: &machine,
            table: "billing.payouts".to_owned(),
            column: "status".to_owned(),
            key: vec!["id".to_owned()],
            order: vec!["id".to_owned()],
            history: None,
            version: Some("version".to_owned()),
            states,
            initial: 0,
            transitions: vec![
                Transition {
                    name: &start,
                    sources: vec![0],
                    target: 1,
                    set: Vec::new(),
                    guard: None,
                },
                Transition {
                    name: &confirm,
                    sources: vec![1],
                    target: 2,
                    set: vec![(
                        "sent_at".to_owned(),
                        crate::valid::Assign::Expr("CURRENT_TIMESTAMP".to_owned()),
                    )],
                    guard: None,
                },
            ],
        };
        check(&model);
    }

    #[test]
    fn the_compare_and_set_in_every_dialect() {
        with_model(|model| {
            let [pg, lite, my] =
                DIALECTS.map(|d| text(d, d.update(model, &model.transitions[0], false)));
            assert_eq!(
                pg,
                "UPDATE \"billing\".\"payouts\" SET \"status\" = 'sending', \"sending_since\" = \
                 statement_timestamp(), \"version\" = COALESCE(\"version\", 0) + 1 WHERE \"id\" = \
                 $1 AND CAST(\"id\" AS TEXT) COLLATE \"C\" = CAST($1 AS TEXT) AND \"status\" IN \
                 ('pending') RETURNING CAST(COALESCE(\"version\", 0) AS BIGINT), \
                 COALESCE(CAST(EXTRACT(EPOCH FROM \"sending_since\") * 1000000 AS BIGINT), 0)"
            );
            assert_eq!(
                lite,
                "UPDATE \"billing\".\"payouts\" SET \"status\" = 'sending', \"sending_since\" = \
                 strftime('%Y-%m-%d %H:%M:%f', 'now'), \"version\" = COALESCE(\"version\", 0) + 1 \
                 WHERE \"id\" = ?1 AND CAST(\"id\" AS BLOB) = CAST(?1 AS BLOB) AND \"status\" IN \
                 ('pending') RETURNING CAST(COALESCE(\"version\", 0) AS INTEGER), \
                 COALESCE(CAST(ROUND(unixepoch(\"sending_since\", 'subsec') * 1000) AS INTEGER), 0)"
            );
            // No RETURNING on MySQL: the new version goes through
            // LAST_INSERT_ID, and the status is compared as bytes too.
            assert_eq!(
                my,
                "UPDATE `billing`.`payouts` SET `status` = 'sending', `sending_since` = \
                 UTC_TIMESTAMP(3), `version` = LAST_INSERT_ID(COALESCE(`version`, 0) + 1) WHERE \
                 `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND `status` IN \
                 ('pending') AND CAST(`status` AS BINARY) IN ('pending')"
            );
        });
    }

    #[test]
    fn mysql_writes_set_columns_before_the_status() {
        with_model(|model| {
            let confirm = &model.transitions[1];
            let pg = text(
                Dialect::Postgres,
                Dialect::Postgres.update(model, confirm, false),
            );
            assert!(
                pg.contains("SET \"status\" = 'sent', \"sent_at\" = (CURRENT_TIMESTAMP), "),
                "{pg}"
            );
            let my = text(Dialect::MySql, Dialect::MySql.update(model, confirm, false));
            assert!(
                my.contains("SET `sent_at` = (CURRENT_TIMESTAMP), `status` = 'sent', "),
                "{my}"
            );
        });
    }

    #[test]
    fn only_mysql_reads_back() {
        with_model(|model| {
            let start = &model.transitions[0];
            assert_eq!(Dialect::Postgres.read_back(model, start), "");
            assert_eq!(Dialect::Sqlite.read_back(model, start), "");
            assert_eq!(
                text(Dialect::MySql, Dialect::MySql.read_back(model, start)),
                "SELECT CAST(LAST_INSERT_ID() AS SIGNED), (SELECT COALESCE(TIMESTAMPDIFF(\
                 MICROSECOND, '1970-01-01 00:00:00', `sending_since`), 0) FROM \
                 `billing`.`payouts` WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) \
                 AND COALESCE(`version`, 0) = LAST_INSERT_ID())"
            );
        });
    }

    #[test]
    fn the_losing_read_locks_where_a_snapshot_would_lie() {
        with_model(|model| {
            let select = |d: Dialect, tx| text(d, d.select(model, tx));
            assert_eq!(
                select(Dialect::Postgres, false),
                "SELECT \"status\"::text, CAST(COALESCE(\"version\", 0) AS BIGINT) FROM \
                 \"billing\".\"payouts\" WHERE \"id\" = $1 AND \
                 CAST(\"id\" AS TEXT) COLLATE \"C\" = CAST($1 AS TEXT)"
            );
            assert!(select(Dialect::Postgres, true).ends_with(" FOR SHARE"));
            assert!(!select(Dialect::Sqlite, true).contains("FOR"));
            assert!(select(Dialect::MySql, false).ends_with(" LOCK IN SHARE MODE"));
            assert!(select(Dialect::MySql, false).starts_with("SELECT CAST(`status` AS CHAR)"));
        });
    }

    #[test]
    fn each_dialect_gets_the_plan_of_its_placeholders() -> Result<(), String> {
        let mut plans = Vec::new();
        with_model(|model| {
            let state = &model.states[1];
            let Some(f) = &state.in_flight else { return };
            let confirm = &model.transitions[1];
            plans = DIALECTS
                .map(|d| render(d, &d.follow_up(model, state, f, confirm)))
                .into_iter()
                .collect();
        });
        let [pg, lite, my] = <[Result<_, _>; 3]>::try_from(plans)
            .map_err(|plans| format!("{} dialects", plans.len()))?;
        let (pg, lite, my) = (pg?, lite?, my?);
        // Numbered: each value once, the key first.
        assert_eq!(pg.plan, [Slot::Key(0), Slot::Expected, Slot::Token]);
        assert_eq!(lite.plan, pg.plan);
        // Positional: the key twice, for its exact match.
        assert_eq!(
            my.plan,
            [Slot::Key(0), Slot::Key(0), Slot::Expected, Slot::Token]
        );
        Ok(())
    }

    #[test]
    fn leases_and_their_placeholders() {
        with_model(|model| {
            let (state, in_flight) = (&model.states[1], &model.transitions[1]);
            assert!(state.in_flight.is_some(), "sending is in flight");
            let Some(f) = &state.in_flight else { return };
            // key, version, token: $1, $2, $3 (MySQL binds the key twice).
            let done = text(
                Dialect::Postgres,
                Dialect::Postgres.follow_up(model, state, f, in_flight),
            );
            assert!(
                done.ends_with(
                    "AND COALESCE(\"version\", 0) = $2 AND COALESCE(CAST(EXTRACT(EPOCH FROM \
                     \"sending_since\") * 1000000 AS BIGINT), 0) = $3"
                ),
                "{done}"
            );
            let expired = text(Dialect::Sqlite, Dialect::Sqlite.expired(model, state, f));
            assert!(
                expired.contains("'now', '-30.500 seconds')") && expired.ends_with("LIMIT ?1"),
                "{expired}"
            );
            let claim = text(Dialect::MySql, Dialect::MySql.claim(model, state, f));
            assert!(
                claim.contains("UTC_TIMESTAMP(3) - INTERVAL 30500000 MICROSECOND"),
                "{claim}"
            );
            let renew = text(Dialect::Postgres, Dialect::Postgres.renew(model, state, f));
            assert!(
                renew.starts_with(
                    "UPDATE \"billing\".\"payouts\" SET \"sending_since\" = statement_timestamp()"
                ) && renew.ends_with(
                    " RETURNING COALESCE(CAST(EXTRACT(EPOCH FROM \"sending_since\") * 1000000 AS \
                     BIGINT), 0)"
                ),
                "{renew}"
            );
        });
    }
}
