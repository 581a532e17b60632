//! Outbox rows: the message a winning move writes with it (`emit(…)`),
//! in the move's own statement on PostgreSQL and just before it, in one
//! transaction, on SQLite and MySQL, where it is read from the row the
//! move is about to change and holds what the move leaves in it.

use crate::dialect::Dialect;
use crate::model::{Assign, Emit, Model, Transition};
use crate::plan::Slot;

use super::Match;

/// The column of a batch's rows that holds each row's effect key up to
/// its occurrence ([`Slot::EffectKeys`], [`Slot::RowEffectKey`]).
pub(super) const EFFECT: &str = "__sg_e";

/// The row a message is written for, as expressions: its key columns, its
/// new occurrence, its payload (a JSON object), and its effect key up to
/// its occurrence.
///
/// **Architecture Invariant:** the effect key is never built here. The
/// runtime computes it (`guard-runtime/src/outcome.rs`,
/// `effect_key_prefix`, from the row's key and the transition's target,
/// which is fixed per transition) and binds it: one row's as
/// [`Slot::EffectKey`], a batch's as [`Slot::EffectKeys`] or
/// [`Slot::RowEffectKey`] beside its keys. The statement only appends the
/// occurrence the move writes, which it alone may know.
#[derive(Clone, Copy)]
struct Moved<'a> {
    keys: &'a [String],
    occurrence: &'a str,
    payload: &'a str,
    prefix: &'a str,
}

impl Dialect {
    /// `a || b || …`, or MySQL's `CONCAT(a, b, …)`.
    fn concat(self, parts: &[String]) -> String {
        match self {
            Dialect::MySql => format!("CONCAT({})", parts.join(", ")),
            Dialect::Postgres | Dialect::Sqlite => parts.join(" || "),
        }
    }

    /// `expr` as text.
    fn as_text(self, expr: &str) -> String {
        match self {
            Dialect::MySql => format!("CAST({expr} AS CHAR)"),
            Dialect::Postgres | Dialect::Sqlite => format!("CAST({expr} AS TEXT)"),
        }
    }

    /// The row's key as effect keys write it: one column's text, or each
    /// column's with `%` and `/` escaped, joined by `/`
    /// (`guard-runtime/src/machine/key.rs`, `KeyText`).
    fn key_text(self, keys: &[String]) -> String {
        if let [one] = keys {
            return self.as_text(one);
        }
        let mut parts = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                parts.push("'/'".to_owned());
            }
            parts.push(format!(
                "REPLACE(REPLACE({}, '%', '%25'), '/', '%2F')",
                self.as_text(k)
            ));
        }
        self.concat(&parts)
    }

    /// The order key `full` (`table.column:key`, an expression over the
    /// row's columns, which it repeats) as the outbox stores it. On MySQL,
    /// whose column holds 255 characters, as the order keys `enqueue`
    /// takes, one longer is its first 169 characters, `~` and the SHA-256
    /// of the whole in hex (234 characters), as an effect key is
    /// shortened, so that a long row key neither fails the move nor makes
    /// two rows share an order; PostgreSQL and SQLite keep it whole.
    fn order_key(self, full: String) -> String {
        match self {
            Dialect::MySql => format!(
                "CASE WHEN CHAR_LENGTH({full}) <= 255 THEN {full} \
                 ELSE CONCAT(LEFT({full}, 169), '~', SHA2({full}, 256)) END"
            ),
            Dialect::Postgres | Dialect::Sqlite => full,
        }
    }

    /// A JSON object of `(name, expression)` pairs.
    fn json_object(self, pairs: &[(String, String)]) -> String {
        let items: Vec<String> = pairs
            .iter()
            .map(|(name, value)| format!("'{name}', {value}"))
            .collect();
        let function = match self {
            Dialect::Postgres => "json_build_object",
            Dialect::Sqlite => "json_object",
            Dialect::MySql => "JSON_OBJECT",
        };
        format!("{function}({})", items.join(", "))
    }

    /// The payload's names: the key's columns, then `payload(…)`'s.
    fn payload_names<'m>(model: &'m Model, emit: &'m Emit) -> impl Iterator<Item = &'m String> {
        model.key.iter().chain(&emit.payload)
    }

    /// PostgreSQL: the payload read from the moved row, in the
    /// `RETURNING` of the move (each column qualified by the table).
    pub(super) fn payload_returned(self, model: &Model, emit: &Emit) -> String {
        let table = self.quote(&model.table);
        let pairs: Vec<(String, String)> = Self::payload_names(model, emit)
            .map(|c| (c.clone(), format!("{table}.{}", self.quote(c))))
            .collect();
        self.json_object(&pairs)
    }

    /// SQLite and MySQL: the payload as the move will leave the row, read
    /// from the row before it: the target state, the next version, the
    /// `since` stamp, each `set` value (a bound value by its placeholder,
    /// an expression over the row as it is, as the `UPDATE` reads it), and
    /// the other columns as they are.
    fn payload_after(self, model: &Model, transition: &Transition, emit: &Emit) -> String {
        let target = &model.states[transition.target];
        let since = target.since_column();
        let value = |column: &str| -> String {
            let same = |other: &str| other.eq_ignore_ascii_case(column);
            if same(&model.column) {
                return format!("'{}'", target.db);
            }
            if let Some(version) = model.version.as_deref().filter(|v| same(v)) {
                return format!("{} + 1", self.version_value(version));
            }
            let mut bound = 0;
            for (col, assign) in &transition.set {
                match assign {
                    Assign::Expr(expr) if same(col) => return format!("({expr})"),
                    Assign::Bind(_) if same(col) => return Slot::Value(bound).mark(),
                    Assign::Bind(_) => bound += 1,
                    Assign::Expr(_) => {}
                }
            }
            if since.is_some_and(same) {
                return self.now().to_owned();
            }
            if let Some(retry) = target.in_flight.as_ref().and_then(|f| f.retry.as_ref()) {
                if same(&retry.attempts) {
                    return "1".to_owned();
                }
                if same(&retry.next_attempt) || retry.last_error.as_deref().is_some_and(same) {
                    return "NULL".to_owned();
                }
            }
            self.quote(column)
        };
        let pairs: Vec<(String, String)> = Self::payload_names(model, emit)
            .map(|c| (c.clone(), value(c)))
            .collect();
        self.json_object(&pairs)
    }

    /// The outbox's columns and the values of `transition`'s message for
    /// the row `moved`: the message id, which is the win's effect key
    /// (its bound part, then the occurrence), the order key that keeps a
    /// row's messages in order (`table.column:key`), the occurrence, the
    /// topic, the payload as bytes, and the times.
    fn outbox_row(self, model: &Model, emit: &Emit, moved: Moved<'_>) -> (String, String) {
        let d = self;
        let Moved {
            keys,
            occurrence,
            payload,
            prefix,
        } = moved;
        let id = d.concat(&[prefix.to_owned(), d.as_text(occurrence)]);
        let row = format!("'{}.{}:'", model.table, model.column);
        let order_key = d.order_key(d.concat(&[row, d.key_text(keys)]));
        let bytes = match d {
            Dialect::Postgres => format!("convert_to(CAST({payload} AS TEXT), 'UTF8')"),
            Dialect::Sqlite => format!("CAST({payload} AS BLOB)"),
            Dialect::MySql => format!("CAST({payload} AS BINARY)"),
        };
        let columns = [
            "message_id",
            "order_key",
            "occurrence",
            "topic",
            "payload",
            "created_at",
            "next_attempt_at",
        ]
        .join(", ");
        let values = [
            id,
            order_key,
            occurrence.to_owned(),
            format!("'{}'", emit.topic),
            bytes,
            d.now().to_owned(),
            d.now().to_owned(),
        ]
        .join(", ");
        (columns, values)
    }

    /// PostgreSQL: `, __sg_out AS (INSERT INTO outbox … SELECT … FROM
    /// moved)`, the message of each row that `moved` (a CTE, or a CTE
    /// joined to the rows' effect keys) holds, whose key columns are
    /// `keys`, new occurrence `occurrence`, payload `__sg_p` and effect key
    /// up to its occurrence `prefix`; empty for a transition that emits
    /// nothing.
    pub(super) fn outbox_cte(
        self,
        model: &Model,
        transition: &Transition,
        moved: &str,
        keys: &[String],
        occurrence: &str,
        prefix: &str,
    ) -> String {
        let Some(emit) = &transition.emit else {
            return String::new();
        };
        let row = Moved {
            keys,
            occurrence,
            payload: "__sg_p",
            prefix,
        };
        let (columns, values) = self.outbox_row(model, emit, row);
        format!(
            ", __sg_out AS (INSERT INTO {} ({columns}) SELECT {values} FROM {moved})",
            self.quote(&model.outbox)
        )
    }

    /// PostgreSQL: `, payload AS __sg_p` for the move's `RETURNING`, where
    /// the transition emits a message; empty otherwise.
    pub(super) fn payload_item(self, model: &Model, transition: &Transition) -> String {
        match &transition.emit {
            Some(emit) => format!(", {} AS __sg_p", self.payload_returned(model, emit)),
            None => String::new(),
        }
    }

    /// SQLite and MySQL: the message of `transition` for each row that
    /// `from_where` (`FROM … WHERE …`) finds, whose effect key up to its
    /// occurrence is `prefix`, inserted from it just before the move, in
    /// one transaction with it. Empty for a transition that emits nothing.
    pub(super) fn outbox_insert_from(
        self,
        model: &Model,
        transition: &Transition,
        from_where: &str,
        prefix: &str,
    ) -> String {
        let (Some(emit), false) = (&transition.emit, self == Dialect::Postgres) else {
            return String::new();
        };
        let keys: Vec<String> = model.key.iter().map(|k| self.quote(k)).collect();
        let occurrence = match &model.version {
            Some(version) => format!("{} + 1", self.version_value(version)),
            None => "0".to_owned(),
        };
        let payload = self.payload_after(model, transition, emit);
        let moved = Moved {
            keys: &keys,
            occurrence: &occurrence,
            payload: &payload,
            prefix,
        };
        let (columns, values) = self.outbox_row(model, emit, moved);
        format!(
            "INSERT INTO {} ({columns}) SELECT {values} {from_where}",
            self.quote(&model.outbox),
        )
    }

    /// SQLite and MySQL: the message of `transition` for the row that
    /// `predicate` finds, inserted from it just before the move (on MySQL
    /// the row is locked, `FOR UPDATE`, so nothing moves it in between).
    pub(super) fn outbox_row_insert(
        self,
        model: &Model,
        transition: &Transition,
        predicate: &str,
    ) -> String {
        let from_where = format!(
            "FROM {} WHERE {predicate}{}",
            self.quote(&model.table),
            if self == Dialect::MySql {
                " FOR UPDATE"
            } else {
                ""
            },
        );
        self.outbox_insert_from(model, transition, &from_where, &Slot::EffectKey.mark())
    }

    /// SQLite and MySQL: the message of `update` (with `expecting`), as
    /// [`Self::history_insert`] inserts the history row.
    pub fn outbox_insert(&self, model: &Model, transition: &Transition, expecting: bool) -> String {
        let predicate = self.move_predicate(model, transition, expecting);
        self.outbox_row_insert(model, transition, &predicate)
    }

    /// SQLite and MySQL: the messages of `apply_many`'s update, from the
    /// rows it is about to move, as [`Self::many_history_insert`] inserts
    /// their history rows, each with its effect key from the batch's rows
    /// ([`Slot::EffectKeys`]).
    pub fn many_outbox_insert(&self, model: &Model, transition: &Transition) -> String {
        self.outbox_insert_from(
            model,
            transition,
            &self.many_rows(model, transition, true),
            &format!("__sg_i.{EFFECT}"),
        )
    }

    /// PostgreSQL: `moved`, a CTE of moved rows whose key columns are
    /// `keys`, each joined to its effect key up to its occurrence
    /// (`__sg_ek.`[`EFFECT`]), which the batch binds beside its keys: the
    /// arrays of the keys and of the effect keys ([`Slot::EffectKeys`])
    /// unnested side by side, matched to the moved row's key as the
    /// statement matched the row (`by`). Each moved row's key is one of
    /// the batch's distinct keys, so it finds its effect key once; a
    /// `LEFT JOIN`, so that a row that found none would write a NULL
    /// message id, which the outbox refuses (`NOT NULL`), failing the
    /// statement rather than losing the message.
    pub(super) fn with_effect_keys(
        self,
        model: &Model,
        moved: &str,
        keys: &[String],
        by: Match,
    ) -> String {
        let n = model.key.len();
        let arrays: Vec<String> = (0..n)
            .map(|i| Slot::Keys(i as u8).mark())
            .chain([Slot::EffectKeys.mark()])
            .collect();
        let columns: Vec<String> = (0..n)
            .map(|i| format!("__sg_ek{i}"))
            .chain([EFFECT.to_owned()])
            .collect();
        let on: Vec<String> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let (k, v) = (format!("{moved}.{k}"), format!("__sg_ek.__sg_ek{i}"));
                match by {
                    Match::Exact => self.exact_eq(&k, &v),
                    Match::ByValue => format!("{k} = {v}"),
                }
            })
            .collect();
        format!(
            "{moved} LEFT JOIN unnest({}) AS __sg_ek({}) ON {}",
            arrays.join(", "),
            columns.join(", "),
            on.join(" AND ")
        )
    }
}
