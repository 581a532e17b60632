//! History rows: what a move records, the inserts that run beside the
//! move on SQLite and MySQL, and the read of a row's history.

use crate::dialect::Dialect;
use crate::model::{Model, Transition};
use crate::plan::{Col, Slot};

use super::transition_name;

impl Dialect {
    /// The history row of a move, as `INSERT INTO h (…) SELECT …` reads it
    /// from the row being moved, whose status is the state it leaves:
    /// `(columns, values)`.
    ///
    /// With `note`, the call's note too (`actor`, `reason`, `details`).
    pub(super) fn history_columns(
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
    pub(super) fn history_row(
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
            let (note_columns, note_values) = d.note_columns();
            columns.push(note_columns);
            values.push(note_values);
        }
        (columns.join(", "), values.join(", "))
    }

    /// The note's columns and placeholders: the actor, the reason, and the
    /// details as JSON (parsed by the database, so that a document that is
    /// not JSON is refused with the move).
    pub(super) fn note_columns(self) -> (String, String) {
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

    /// SQLite and MySQL, for a machine with a history table: the history
    /// row of `update` (with `expecting`), inserted from the row the
    /// compare-and-set is about to move, in the same transaction and just
    /// before it. The same `WHERE`, so it inserts a row exactly when the
    /// update moves one; on MySQL it locks the row (`FOR UPDATE`), so
    /// nothing moves it in between. Empty on PostgreSQL, whose
    /// [`Self::update_with_history`] does both in one statement.
    pub fn history_insert(
        &self,
        model: &Model,
        transition: &Transition,
        expecting: bool,
    ) -> String {
        let d = *self;
        let (Some(history), false) = (&model.history, d == Dialect::Postgres) else {
            return String::new();
        };
        let predicate = d.move_predicate(model, transition, expecting);
        d.history_row_insert(model, history, transition, &predicate)
    }

    /// SQLite and MySQL: the history row of `transition` for the row that
    /// `predicate` finds, inserted from it; on MySQL the row is locked
    /// (`FOR UPDATE`), so nothing moves it before the statement that
    /// follows in the same transaction.
    pub(super) fn history_row_insert(
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

    /// A machine's history, newest first, up to a number of rows:
    /// transition, from, to, occurrence and the time as text, for the key
    /// `$1`…. The runtime turns it oldest first.
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
            "SELECT {}, {}, {}, {}, CAST({} AS {text}), {}, {}, {}, CAST({} AS {text}) FROM {} \
             WHERE {} ORDER BY {} DESC LIMIT {}",
            Col::Transition.of(&d.quote("transition")),
            Col::From.of(&d.quote("from_state")),
            Col::To.of(&d.quote("to_state")),
            Col::Occurrence.of(&d.int64(&d.quote("occurrence"))),
            Col::At.of(&d.quote("moved_at")),
            Col::AtMicros.of(&d.epoch_micros("moved_at")),
            Col::Actor.of(&d.quote("actor")),
            Col::Reason.of(&d.quote("reason")),
            Col::Details.of(&d.quote("details")),
            d.quote(history),
            d.key_match(&model.key),
            d.quote("history_id"),
            Slot::Limit.mark(),
        )
    }
}
