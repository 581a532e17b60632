//! In-flight states: the follow-ups tied to a lease, renewals, the
//! follow-ups' losing read, and recovery's listing and takeover of expired
//! rows.

use crate::dialect::Dialect;
use crate::model::{InFlight, Model, State, Transition};
use crate::plan::{Col, Slot};

use super::key_columns;

impl Dialect {
    /// `WHERE k = $1 AND c = 'state'[ AND version = $2] AND token = $n`: the
    /// row still in the same occurrence of the in-flight state, with its
    /// lease still held by the caller.
    pub(super) fn leased(self, model: &Model, state: &State, in_flight: &InFlight) -> String {
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
        // PostgreSQL writes the history row and the message in the same
        // statement; the row left `state`, which the lease check pins.
        if d != Dialect::Postgres || (model.history.is_none() && transition.emit.is_none()) {
            return update;
        }
        let table = d.quote(&model.table);
        let aliases: Vec<String> = (0..model.key.len()).map(|i| format!("__sg_k{i}")).collect();
        let moved = format!(
            "WITH __sg_moved AS ({update} RETURNING {}, {} AS __sg_v{})",
            d.key_aliases(model, Some(&table), "__sg_k"),
            d.version_read(model.version.as_deref()),
            d.payload_item(model, transition),
        );
        let outbox = d.outbox_cte(
            model,
            transition,
            "__sg_moved",
            &aliases,
            "__sg_v",
            &Slot::EffectKey.mark(),
        );
        let Some(history) = &model.history else {
            // One row per row moved, holding the tag.
            return format!(
                "{moved}{outbox} SELECT {} FROM __sg_moved",
                Col::Tag.of(crate::plan::TAG)
            );
        };
        let (columns, values) = d.history_row(
            model,
            transition,
            aliases,
            format!("'{}'", state.db),
            "__sg_v".to_owned(),
            true,
        );
        format!(
            "{moved}{outbox} INSERT INTO {} ({columns}) SELECT {values} FROM __sg_moved",
            d.quote(history),
        )
    }

    /// SQLite and MySQL, for a machine with a history table: the history
    /// row of a follow-up, inserted just before it in one transaction
    /// (see [`Self::log`]).
    pub fn follow_up_history_insert(
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
        d.history_row_insert(model, history, transition, &predicate)
    }

    /// SQLite and MySQL, for a follow-up that emits a message: its outbox
    /// row, inserted just before it in one transaction, as
    /// [`Self::follow_up_history_insert`] inserts the history row.
    pub fn follow_up_outbox_insert(
        &self,
        model: &Model,
        state: &State,
        in_flight: &InFlight,
        transition: &Transition,
    ) -> String {
        let predicate = self.leased(model, state, in_flight);
        self.outbox_row_insert(model, transition, &predicate)
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
        let attempt = d.attempt_column(in_flight);
        format!(
            "SELECT {}{attempt} FROM {} WHERE {}",
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
        d.one_row(
            vec![
                (Col::Status, d.status_read(&model.column)),
                (Col::Occurrence, d.version_read(model.version.as_deref())),
                (Col::Token, d.lease_token(&in_flight.since)),
            ],
            &format!(
                "FROM {} WHERE {}{}",
                d.quote(&model.table),
                d.key_match(&model.key),
                d.read_lock(false),
            ),
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
            "SELECT {}, {} FROM {} WHERE {} AND {} \
             ORDER BY {since} IS NOT NULL, {since} LIMIT {}",
            key_columns(model.key.iter().map(|k| d.quote(k))),
            Col::Occurrence.of(&d.version_read(model.version.as_deref())),
            d.quote(&model.table),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.due(in_flight),
            Slot::Limit.mark(),
        )
    }

    /// PostgreSQL: takes over up to `$1` expired rows of an in-flight state
    /// in one statement, oldest first, skipping rows another recovery holds
    /// (`FOR UPDATE SKIP LOCKED`), and returns each one's key, version and
    /// new lease token, in the order of their old stamps: [`Self::expired`]
    /// and [`Self::claim`] for every row at once. SQLite, whose one writer
    /// leaves nothing to skip, does the same with `UPDATE … WHERE key IN
    /// (SELECT … LIMIT ?) RETURNING …` ([`Self::take_over_sqlite`]). Empty
    /// on MySQL, which lists, then claims row by row.
    pub fn take_over(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        match d {
            Dialect::Postgres => {}
            Dialect::Sqlite => return d.take_over_sqlite(model, state, in_flight),
            Dialect::MySql => return String::new(),
        }
        let table = d.quote(&model.table);
        let since = d.quote(&in_flight.since);
        let n = model.key.len();
        let expired = format!(
            "{} AND {}",
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.due(in_flight),
        );
        let same_row: Vec<String> = model
            .key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{table}.{} = __sg_o.__sg_k{i}", d.quote(k)))
            .collect();
        let aliases: Vec<String> = (0..n).map(|i| format!("__sg_k{i}")).collect();
        let (attempt, attempt_column) = match &in_flight.retry {
            Some(retry) => (
                format!(", {} AS __sg_n", d.int64(&d.quote(&retry.attempts))),
                format!(", {}", Col::Attempt.of("__sg_n")),
            ),
            None => (String::new(), String::new()),
        };
        format!(
            "WITH __sg_o AS MATERIALIZED (SELECT {}, {since} AS __sg_old FROM {table} WHERE \
             {expired} ORDER BY {since} IS NOT NULL, {since} LIMIT {} FOR UPDATE SKIP LOCKED), \
             __sg_taken AS (UPDATE {table} SET {} FROM __sg_o WHERE {} AND {expired} RETURNING \
             {}, {} AS __sg_v, {} AS __sg_l{attempt}, __sg_o.__sg_old) SELECT {}, {}, \
             {}{attempt_column} FROM __sg_taken ORDER BY __sg_old IS NOT NULL, __sg_old",
            d.key_aliases(model, None, "__sg_k"),
            Slot::Limit.mark(),
            d.take_over_assignments(in_flight),
            same_row.join(" AND "),
            d.key_aliases(model, Some(&table), "__sg_k"),
            d.version_read(model.version.as_deref()),
            d.lease_token(&in_flight.since),
            key_columns(aliases),
            Col::Occurrence.of("__sg_v"),
            Col::Token.of("__sg_l"),
        )
    }

    /// SQLite: up to `?` expired rows taken over in one statement, oldest
    /// first; the statement runs under the one write lock, so concurrent
    /// recoveries take different rows. The rows come back in no set order.
    fn take_over_sqlite(self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = self;
        let table = d.quote(&model.table);
        let since = d.quote(&in_flight.since);
        let expired = format!(
            "{} AND {}",
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.due(in_flight),
        );
        let keys: Vec<String> = model.key.iter().map(|k| d.quote(k)).collect();
        let keys = keys.join(", ");
        let returned: Vec<String> = model
            .key
            .iter()
            .map(|k| format!("{table}.{}", d.quote(k)))
            .collect();
        format!(
            "UPDATE {table} SET {} WHERE ({keys}) IN (SELECT {keys} FROM {table} WHERE {expired} \
             ORDER BY {since} IS NOT NULL, {since} LIMIT {}) AND {expired} RETURNING {}, {}, {}{}",
            d.take_over_assignments(in_flight),
            Slot::Limit.mark(),
            key_columns(returned),
            Col::Occurrence.of(&d.version_read(model.version.as_deref())),
            Col::Token.of(&d.lease_token(&in_flight.since)),
            d.attempt_column(in_flight),
        )
    }

    /// Takes over one expired row for recovery by renewing its lease, only
    /// if it is still in the same occurrence of the in-flight state.
    pub fn claim(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let same_occurrence = match &model.version {
            Some(version) => format!(
                " AND {} = {}",
                d.version_value(version),
                Slot::Expected.mark()
            ),
            None => String::new(),
        };
        let mut returning = d.returning(model, false, Some(in_flight));
        if !returning.is_empty() {
            returning.push_str(&d.attempt_column(in_flight));
        }
        format!(
            "UPDATE {} SET {} WHERE {} AND {} AND {}{same_occurrence}{returning}",
            d.quote(&model.table),
            d.take_over_assignments(in_flight),
            d.key_match(&model.key),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.due(in_flight),
        )
    }

    /// How far behind recovery is: how long, in milliseconds, the oldest
    /// row of the state that recovery may take over ([`Self::due`]) has
    /// been due, from when its lease ran out or its next attempt came, or
    /// -1 when no row is ([`Col::Behind`]). A row with neither stamp is
    /// due from now.
    pub fn behind(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let lease_end = d.after_ms(&d.quote(&in_flight.since), in_flight.lease_ms);
        let due_at = match &in_flight.retry {
            None => format!("COALESCE({lease_end}, {})", d.now()),
            Some(retry) => format!(
                "COALESCE({}, {lease_end}, {})",
                d.quote(&retry.next_attempt),
                d.now()
            ),
        };
        let age = format!("COALESCE({}, -1)", d.ms_since(&format!("MIN({due_at})")));
        format!(
            "SELECT {} FROM {} WHERE {} AND {}",
            Col::Behind.of(&age),
            d.quote(&model.table),
            d.status_is(&d.quote(&model.column), &format!("= '{}'", state.db)),
            d.due(in_flight),
        )
    }

    /// `, attempts` as the attempt a takeover counted ([`Col::Attempt`]),
    /// where the state counts attempts; empty otherwise.
    pub(super) fn attempt_column(self, in_flight: &InFlight) -> String {
        match &in_flight.retry {
            Some(retry) => format!(
                ", {}",
                Col::Attempt.of(&self.int64(&self.quote(&retry.attempts)))
            ),
            None => String::new(),
        }
    }

    /// The rows recovery may take over: past their lease, or, where the
    /// state counts attempts, whose next attempt is due. A row whose
    /// effect asked to be tried again has its next attempt set and its
    /// lease given up; every other row of the state waits out its lease.
    pub(super) fn due(self, in_flight: &InFlight) -> String {
        let d = self;
        let since = d.quote(&in_flight.since);
        let expired = format!(
            "({since} IS NULL OR {since} < {})",
            d.lease_expiry(in_flight.lease_ms)
        );
        match &in_flight.retry {
            None => expired,
            Some(retry) => {
                let next = d.quote(&retry.next_attempt);
                format!("(({next} IS NULL AND {expired}) OR {next} <= {})", d.now())
            }
        }
    }

    /// What a takeover writes: a new lease and, where the state counts
    /// attempts, the next attempt, which starts now.
    pub(super) fn take_over_assignments(self, in_flight: &InFlight) -> String {
        let d = self;
        let lease = format!("{} = {}", d.quote(&in_flight.since), d.now());
        match &in_flight.retry {
            None => lease,
            Some(retry) => {
                let attempts = d.quote(&retry.attempts);
                format!(
                    "{lease}, {attempts} = COALESCE({attempts}, 0) + 1, {} = NULL",
                    d.quote(&retry.next_attempt)
                )
            }
        }
    }

    /// Where the state counts attempts: the holder's "try again later",
    /// `UPDATE t SET next_attempt = now + $delay WHERE` the caller still
    /// holds the lease. From then on the row waits for that time, not for
    /// its lease. Empty otherwise.
    pub fn postpone(&self, model: &Model, state: &State, in_flight: &InFlight) -> String {
        let d = *self;
        let Some(retry) = &in_flight.retry else {
            return String::new();
        };
        // Where the state keeps it, the reason this retry gave (NULL for
        // none), as a note's reason is bound.
        let last_error = match &retry.last_error {
            Some(column) => format!(", {} = {}", d.quote(column), Slot::Reason.mark()),
            None => String::new(),
        };
        format!(
            "UPDATE {} SET {} = {}{last_error} WHERE {}",
            d.quote(&model.table),
            d.quote(&retry.next_attempt),
            d.later(&Slot::Delay.mark()),
            d.leased(model, state, in_flight),
        )
    }
}
