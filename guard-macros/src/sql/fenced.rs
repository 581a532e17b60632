//! `finish_many`: an in-flight state's statements over a batch of rows,
//! each row fenced by its own occurrence and lease token, as the one-row
//! statements of `lease.rs` are by theirs: the batch heartbeat, the
//! batched follow-ups (with their history rows and messages on SQLite and
//! MySQL), the batched "try again later", and the read of the rows a
//! batch statement did not move.
//!
//! The batch travels as one bound value per column on PostgreSQL (an
//! array per key column, [`Slot::Keys`], and one per integer,
//! [`Slot::Ints`]), and as one JSON document of rows
//! `[key…, occurrence, token(, delay)]` on SQLite and MySQL
//! ([`Slot::Keys`]`(0)`). A follow-up that emits a message reads each
//! row's effect key up to its occurrence beside its key: one more array
//! on PostgreSQL, the rows' last item on SQLite and MySQL
//! ([`Slot::EffectKeys`]).
//!
//! A follow-up that binds values per row (`set(bank_ref = bind(String))`)
//! takes its batch spelled out instead: [`ROWS`] rows of placeholders
//! ([`Slot::Row`]), each row's key, occurrence, token and values bound as
//! the one-row statement binds them, so that a value of any type the
//! follow-up declares travels exactly as `finish` would send it (a JSON
//! document could not carry bytes, and an array needs a PostgreSQL array
//! type). The runtime sends a batch in runs of [`ROWS`], the last one
//! padded with rows that match nothing (a NULL token).

use super::outbox::EFFECT;
use crate::dialect::Dialect;
use crate::model::{InFlight, Model, State, Transition};
use crate::plan::{Col, Slot};

use super::{MYSQL_KEY, Match, key_columns};

/// The integers each row of a fenced batch carries after its key, in
/// order: the occurrence and the lease token, and for a postponement the
/// wait in milliseconds.
const FENCE: [&str; 2] = ["__sg_o", "__sg_t"];
const DELAY: &str = "__sg_d";

/// How many rows one statement of a batch spelled out row by row takes
/// ([`Dialect::cells_input`]).
pub const ROWS: u8 = 64;

/// Where a fenced statement takes its rows from, and whether it reads
/// each row's effect key up to its occurrence (`__sg_i.__sg_e`), for the
/// messages of a follow-up that emits one.
#[derive(Clone, Copy)]
enum Input<'a> {
    /// One value per column (PostgreSQL) or one JSON document (SQLite,
    /// MySQL), carrying these integers after each key.
    Batch { ints: &'a [&'a str], effect: bool },
    /// [`ROWS`] rows of placeholders, each with this many values after its
    /// fence.
    Cells { values: usize, effect: bool },
}

impl Dialect {
    /// The batch's rows, `__sg_i(__sg_k0, …, ints…)`: PostgreSQL's arrays
    /// unnested side by side, SQLite's `json_each` and MySQL's
    /// `JSON_TABLE` over rows `[key…, int…]`. On SQLite and MySQL the
    /// document always carries the fence, which a statement that needs
    /// fewer integers does not read.
    ///
    /// `effect`: with each row's effect key up to its occurrence,
    /// `__sg_e` ([`Slot::EffectKeys`]): one more array on PostgreSQL; on
    /// SQLite and MySQL the document that ends each row with it, read in
    /// place of the keys' own, which must then name every integer the
    /// document carries.
    pub(super) fn fenced_input(self, model: &Model, ints: &[&str], effect: bool) -> String {
        let n = model.key.len();
        let names: Vec<String> = (0..n)
            .map(|i| format!("__sg_k{i}"))
            .chain(ints.iter().map(|c| c.to_string()))
            .chain(effect.then(|| EFFECT.to_owned()))
            .collect();
        let document = match effect {
            true => Slot::EffectKeys.mark(),
            false => Slot::Keys(0).mark(),
        };
        match self {
            Dialect::Postgres => {
                let arrays: Vec<String> = (0..n)
                    .map(|i| Slot::Keys(i as u8).mark())
                    .chain((0..ints.len()).map(|j| Slot::Ints(j as u8).mark()))
                    .chain(effect.then(|| Slot::EffectKeys.mark()))
                    .collect();
                format!(
                    "unnest({}) AS __sg_i({})",
                    arrays.join(", "),
                    names.join(", ")
                )
            }
            Dialect::Sqlite => {
                let columns: Vec<String> = (names.iter().enumerate())
                    .map(|(i, c)| format!("json_extract(value, '$[{i}]') AS {c}"))
                    .collect();
                format!(
                    "(SELECT {} FROM json_each({document})) AS __sg_i",
                    columns.join(", "),
                )
            }
            Dialect::MySql => {
                let columns: Vec<String> = (names.iter().enumerate())
                    .map(|(i, c)| {
                        let kind = match i {
                            i if i < n => MYSQL_KEY,
                            i if i < n + ints.len() => "BIGINT",
                            // At most 235 characters (`outcome.rs`).
                            _ => "VARCHAR(255)",
                        };
                        format!("{c} {kind} PATH '$[{i}]'")
                    })
                    .collect();
                format!(
                    "JSON_TABLE({document}, '$[*]' COLUMNS ({})) AS __sg_i",
                    columns.join(", ")
                )
            }
        }
    }

    /// [`ROWS`] rows of placeholders, `__sg_i(__sg_k0, …, __sg_o, __sg_t,
    /// __sg_v0, …)`: each row's key columns, occurrence, lease token and
    /// `values` values, one [`Slot::Row`] each, as a `UNION ALL` of
    /// one-row `SELECT`s (which every dialect takes as a derived table);
    /// `effect`, and its effect key up to its occurrence, `__sg_e`
    /// ([`Slot::RowEffectKey`]).
    fn cells_input(self, model: &Model, values: usize, effect: bool) -> String {
        let names: Vec<String> = (0..model.key.len())
            .map(|i| format!("__sg_k{i}"))
            .chain(FENCE.iter().map(|c| c.to_string()))
            .chain((0..values).map(|v| format!("__sg_v{v}")))
            .collect();
        let rows: Vec<String> = (0..ROWS)
            .map(|row| {
                let named = |cell: String, name: &str| match row {
                    0 => format!("{cell} AS {name}"),
                    _ => cell,
                };
                let cells: Vec<String> = (names.iter().enumerate())
                    .map(|(part, name)| named(Slot::Row(row, part as u8).mark(), name))
                    .chain(effect.then(|| named(Slot::RowEffectKey(row).mark(), EFFECT)))
                    .collect();
                format!("SELECT {}", cells.join(", "))
            })
            .collect();
        format!("({}) AS __sg_i", rows.join(" UNION ALL "))
    }

    fn input(self, model: &Model, input: Input<'_>) -> String {
        match input {
            Input::Batch { ints, effect } => self.fenced_input(model, ints, effect),
            Input::Cells { values, effect } => self.cells_input(model, values, effect),
        }
    }

    /// Each row still in its own occurrence of the in-flight state, under
    /// its own lease: [`Self::leased`] with the batch's columns for the
    /// call's values.
    fn fenced(self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = self;
        let same_occurrence = match &model.version {
            Some(version) => format!(" AND {} = __sg_i.__sg_o", d.version_value(version)),
            None => String::new(),
        };
        format!(
            "{} AND {}{same_occurrence} AND {} = __sg_i.__sg_t",
            d.many_match(model, Match::Exact),
            d.status_is_keyed(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.lease_token(&in_flight.since),
        )
    }

    /// `UPDATE … FROM rows WHERE fenced` on PostgreSQL and SQLite, a join
    /// driven by the rows on MySQL (as `apply_many`'s).
    fn fenced_update(
        self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        assignments: &str,
        input: Input<'_>,
    ) -> String {
        let d = self;
        let table = d.quote(&model.table);
        let input = d.input(model, input);
        let fenced = d.fenced(model, state, in_flight);
        match d {
            Dialect::Postgres | Dialect::Sqlite => {
                format!("UPDATE {table} SET {assignments} FROM {input} WHERE {fenced}")
            }
            Dialect::MySql => {
                format!("UPDATE {input} STRAIGHT_JOIN {table} ON {fenced} SET {assignments}")
            }
        }
    }

    /// ` RETURNING key…[, token]`: the rows a fenced batch statement moved
    /// (PostgreSQL and SQLite; MySQL locks and reads them first, with
    /// [`Self::read_many`]).
    fn fenced_returning(self, model: &Model, token: Option<&InFlight>) -> String {
        let d = self;
        if d == Dialect::MySql {
            return String::new();
        }
        let table = d.quote(&model.table);
        let mut items = vec![key_columns(
            model.key.iter().map(|k| format!("{table}.{}", d.quote(k))),
        )];
        if let Some(in_flight) = token {
            items.push(Col::Token.of(&d.lease_token(&in_flight.since)));
        }
        format!(" RETURNING {}", items.join(", "))
    }

    /// The batch heartbeat: renews every row's lease that its holder still
    /// has, in one statement, and returns each renewed row's key and new
    /// token. MySQL, without `RETURNING`, locks the rows first with
    /// [`Self::read_many`] and reads the tokens back with it.
    pub fn renew_many(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let assignments = format!("{} = {}", d.quote(&in_flight.since), d.now());
        format!(
            "{}{}",
            d.fenced_update(model, state, in_flight, &assignments, batch(&FENCE)),
            d.fenced_returning(model, Some(in_flight)),
        )
    }

    /// The release of held rows whose effect never started (a worker
    /// shutting down): each row's lease is ended now, its `since` set a
    /// second past the lease's length, so that recovery takes it at once;
    /// where the state counts attempts, the attempt the claim counted is
    /// given back, so that the takeover counts it again. Returns the
    /// released rows' keys (PostgreSQL, SQLite).
    pub fn release_many(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let mut assignments = format!(
            "{} = {}",
            d.quote(&in_flight.since),
            d.lease_expiry(in_flight.lease_ms.saturating_add(1000))
        );
        if let Some(retry) = &in_flight.retry {
            let attempts = d.quote(&retry.attempts);
            assignments.push_str(&format!(", {attempts} = {attempts} - 1"));
        }
        format!(
            "{}{}",
            d.fenced_update(model, state, in_flight, &assignments, batch(&FENCE)),
            d.fenced_returning(model, None),
        )
    }

    /// The rows of a batch as they are: key, status, version and lease
    /// token (and the attempts, where the state counts them), which tell a
    /// row still held from one finished, superseded or taken over. PostgreSQL ends the result with a row of its own
    /// ([`Col::End`], as `apply_many`'s read); MySQL locks the rows
    /// (`FOR UPDATE`), as the first statement of a batch's transaction.
    pub fn read_many(&self, model: &Model, in_flight: &InFlight) -> String {
        let d = *self;
        let table = d.quote(&model.table);
        let keys: Vec<String> = model
            .key
            .iter()
            .map(|k| format!("{table}.{}", d.quote(k)))
            .collect();
        let columns = format!(
            "{}, {}, {}, {}{}",
            key_columns(keys),
            Col::Status.of(&d.status_read(&model.column)),
            Col::Occurrence.of(&d.version_read(model.version.as_deref())),
            Col::Token.of(&d.lease_token(&in_flight.since)),
            d.attempt_column(in_flight),
        );
        let join = format!(
            "{} JOIN {table} ON {}",
            d.fenced_input(model, &[], false),
            d.many_match(model, Match::Exact)
        );
        match d {
            Dialect::Postgres => format!(
                "SELECT {}, {columns}, {} FROM {join} UNION ALL SELECT {}{}, NULL, NULL, NULL{}, 1",
                Col::Tag.of(crate::plan::TAG),
                Col::End.of("CAST(NULL AS BIGINT)"),
                crate::plan::TAG,
                ", NULL".repeat(model.key.len()),
                match in_flight.retry {
                    Some(_) => ", NULL",
                    None => "",
                },
            ),
            Dialect::Sqlite => format!("SELECT {columns} FROM {join}"),
            Dialect::MySql => format!(
                "SELECT {columns} FROM {} STRAIGHT_JOIN {table} ON {} FOR UPDATE",
                d.fenced_input(model, &[], false),
                d.many_match(model, Match::Exact)
            ),
        }
    }

    /// The follow-up `transition` (`done` or `failed`) of many rows in one
    /// statement, each row moving only while its holder still has its
    /// lease; returns the moved rows' keys (PostgreSQL, SQLite). A
    /// follow-up that binds values per row takes [`ROWS`] rows spelled out
    /// ([`Self::cells_input`]), its values read from them.
    pub fn follow_up_many(
        &self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        transition: &Transition,
    ) -> String {
        let d = *self;
        // PostgreSQL writes the messages from the moved rows, each with
        // its effect key from the batch's rows.
        let effect = d == Dialect::Postgres && transition.emit.is_some();
        let input = follow_up_input(transition, effect);
        let update = d.fenced_update(
            model,
            state,
            in_flight,
            &d.assignments(model, transition),
            input,
        );
        if d != Dialect::Postgres || (model.history.is_none() && transition.emit.is_none()) {
            return from_rows(
                transition,
                format!("{update}{}", d.fenced_returning(model, None)),
            );
        }
        // PostgreSQL writes the history rows and the messages in the same
        // statement, from the moved rows, and returns their keys.
        let table = d.quote(&model.table);
        let aliases: Vec<String> = (0..model.key.len()).map(|i| format!("__sg_k{i}")).collect();
        let effect = match effect {
            true => format!(", __sg_i.{EFFECT} AS {EFFECT}"),
            false => String::new(),
        };
        let moved = format!(
            "WITH __sg_moved AS ({update} RETURNING {}, {} AS __sg_v{effect}{})",
            d.key_aliases(model, Some(&table), "__sg_k"),
            d.version_read(model.version.as_deref()),
            d.payload_item(model, transition),
        );
        let outbox = d.outbox_cte(model, transition, "__sg_moved", &aliases, "__sg_v", EFFECT);
        let log = match &model.history {
            Some(history) => {
                let (columns, values) = d.history_row(
                    model,
                    transition,
                    aliases.clone(),
                    format!("'{}'", state.db),
                    "__sg_v".to_owned(),
                    true,
                );
                format!(
                    ", __sg_log AS (INSERT INTO {} ({columns}) SELECT {values} FROM __sg_moved)",
                    d.quote(history)
                )
            }
            None => String::new(),
        };
        from_rows(
            transition,
            format!(
                "{moved}{log}{outbox} SELECT {} FROM __sg_moved",
                key_columns(aliases)
            ),
        )
    }

    /// `FROM rows JOIN t … WHERE fenced`: the rows a batched follow-up is
    /// about to move, for its history rows and messages (SQLite, MySQL).
    fn fenced_rows(
        self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        input: Input<'_>,
    ) -> String {
        let d = self;
        let join = match d {
            Dialect::MySql => "STRAIGHT_JOIN",
            Dialect::Sqlite | Dialect::Postgres => "JOIN",
        };
        format!(
            "FROM {} {join} {} ON {}",
            d.input(model, input),
            d.quote(&model.table),
            d.fenced(model, state, in_flight),
        )
    }

    /// SQLite and MySQL, for a machine with a history table: the history
    /// rows of [`Self::follow_up_many`], inserted just before it in one
    /// transaction from the same rows.
    pub fn follow_up_many_history_insert(
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
        let (columns, values) = d.history_columns(model, transition, true);
        let rows = d.fenced_rows(model, state, in_flight, follow_up_input(transition, false));
        from_rows(
            transition,
            format!(
                "INSERT INTO {} ({columns}) SELECT {values} {rows}",
                d.quote(history),
            ),
        )
    }

    /// SQLite and MySQL, for a follow-up that emits a message: the
    /// messages of [`Self::follow_up_many`], as
    /// [`Self::follow_up_many_history_insert`] inserts the history rows.
    pub fn follow_up_many_outbox_insert(
        &self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        transition: &Transition,
    ) -> String {
        let input = follow_up_input(transition, true);
        let from_where = self.fenced_rows(model, state, in_flight, input);
        from_rows(
            transition,
            self.outbox_insert_from(model, transition, &from_where, &format!("__sg_i.{EFFECT}")),
        )
    }

    /// Where the state counts attempts: many rows' "try again later", each
    /// with a wait of its own (milliseconds, the row's third integer),
    /// fenced by its lease. Empty otherwise.
    pub fn postpone_many(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let Some(retry) = &in_flight.retry else {
            return String::new();
        };
        let mut assignments = format!(
            "{} = {}",
            d.quote(&retry.next_attempt),
            d.later(&format!("__sg_i.{DELAY}"))
        );
        // A batch postpones only retries without a reason (`finish_many`
        // writes the rest one row each).
        if let Some(last_error) = &retry.last_error {
            assignments.push_str(&format!(", {} = NULL", d.quote(last_error)));
        }
        format!(
            "{}{}",
            d.fenced_update(
                model,
                state,
                in_flight,
                &assignments,
                batch(&[FENCE[0], FENCE[1], DELAY]),
            ),
            d.fenced_returning(model, None),
        )
    }

    /// MySQL: up to `?` expired rows of the state, oldest first, locked,
    /// skipping those another recovery holds: the first statement of a
    /// takeover in one transaction ([`Self::take_over_keyed`], then
    /// [`Self::read_many`]). Empty on the other dialects, which take over
    /// in one statement ([`Self::take_over`]).
    pub fn expired_locked(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        match self {
            Dialect::MySql => format!(
                "{} FOR UPDATE SKIP LOCKED",
                self.expired(model, state, in_flight)
            ),
            Dialect::Postgres | Dialect::Sqlite => String::new(),
        }
    }

    /// MySQL: takes over the rows [`Self::expired_locked`] locked, a
    /// batch of keys (JSON rows `[key…]`), stamping each a new lease (and
    /// counting its attempt, where the state counts them). Empty on the
    /// other dialects.
    pub fn take_over_keyed(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        if d != Dialect::MySql {
            return String::new();
        }
        format!(
            "UPDATE {} STRAIGHT_JOIN {} ON {} SET {} WHERE {} AND {}",
            d.fenced_input(model, &[], false),
            d.quote(&model.table),
            d.many_match(model, Match::Exact),
            d.take_over_assignments(in_flight),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.due(in_flight),
        )
    }
}

/// Rows of one value per column (one document), with these integers
/// after each key, and no effect keys.
fn batch<'a>(ints: &'a [&'a str]) -> Input<'a> {
    Input::Batch {
        ints,
        effect: false,
    }
}

/// Where a follow-up's batch statements take their rows: spelled out when
/// it binds values per row, one document (or array per column) otherwise;
/// `effect`, with each row's effect key up to its occurrence.
fn follow_up_input(transition: &Transition, effect: bool) -> Input<'static> {
    match transition.set_binds() {
        0 => Input::Batch {
            ints: &FENCE,
            effect,
        },
        values => Input::Cells { values, effect },
    }
}

/// `statement` with the call's values (`set(… = bind(T))`, [`Slot::Value`])
/// read from each row's cells instead, `__sg_i.__sg_v{n}`.
fn from_rows(transition: &Transition, statement: String) -> String {
    (0..transition.set_binds()).fold(statement, |statement, v| {
        statement.replace(&Slot::Value(v as u8).mark(), &format!("__sg_i.__sg_v{v}"))
    })
}
