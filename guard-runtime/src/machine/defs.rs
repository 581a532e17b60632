//! The metadata of a machine's states and transitions: whether a state
//! is initial, its `since` column and timeout, an in-flight state's lease,
//! follow-ups and retries; a transition's sources, target, `set` columns
//! and statements.

use crate::StateMachine;
use crate::dialect::Sql;
use crate::machine::batch_sql::ManySql;

/// One state: its variant and the string stored for it.
#[derive(Debug)]
pub struct StateDef<S: 'static> {
    pub(super) value: S,
    pub(super) variant: &'static str,
    pub(super) db: &'static str,
    pub(super) initial: bool,
    pub(super) in_flight: Option<&'static InFlightDef<S>>,
    pub(super) stamp: Option<&'static str>,
    pub(super) timeout_ms: Option<u64>,
}

impl<S: Copy> StateDef<S> {
    /// The column every transition into the state stamps with the current
    /// time: an in-flight state's `since`, or `#[state(since = "…")]`.
    pub const fn since_column(&self) -> Option<&'static str> {
        match (self.in_flight, self.stamp) {
            (Some(in_flight), _) => Some(in_flight.since),
            (None, stamp) => stamp,
        }
    }

    /// `#[state(timeout = "…")]`: how long a row may wait in the state
    /// before [`claim_timed_out`](crate::Transition::claim_timed_out)
    /// takes it.
    pub const fn timeout(&self) -> Option<core::time::Duration> {
        match self.timeout_ms {
            Some(ms) => Some(core::time::Duration::from_millis(ms)),
            None => None,
        }
    }

    /// The lease and follow-ups of an `#[state(in_flight(…))]` state.
    pub const fn in_flight(&self) -> Option<&'static InFlightDef<S>> {
        self.in_flight
    }

    /// The enum value.
    pub const fn value(&self) -> S {
        self.value
    }

    /// The variant's Rust name, e.g. `Pending`.
    pub const fn variant(&self) -> &'static str {
        self.variant
    }

    /// The string stored in the status column, e.g. `pending`.
    pub const fn db_str(&self) -> &'static str {
        self.db
    }

    /// Whether this is the `#[state(initial)]` state.
    pub const fn is_initial(&self) -> bool {
        self.initial
    }
}

/// An in-flight state: entering it starts an external effect, and a row
/// left in it past its lease is taken over by recovery.
#[derive(Debug)]
pub struct InFlightDef<S: 'static> {
    pub(super) lease_ms: u64,
    pub(super) since: &'static str,
    pub(crate) done: &'static TransitionDef<S>,
    pub(crate) failed: Option<&'static TransitionDef<S>>,
    pub(super) expired: Sql,
    pub(super) claim: Sql,
    pub(super) take_over: Sql,
    pub(super) renew: Sql,
    pub(super) lease_read: Sql,
    pub(super) follow_up_read: Sql,
    pub(super) done_sql: Sql,
    pub(super) failed_sql: Option<Sql>,
    /// With a history table, on SQLite and MySQL: the history rows of the
    /// `done` and `failed` follow-ups, inserted just before them.
    pub(super) logs: [Sql; 2],
    /// On SQLite and MySQL: the messages the `done` and `failed`
    /// follow-ups emit, inserted just before them.
    pub(super) messages: [Sql; 2],
    /// The batch heartbeat of `finish_many`.
    pub(super) renew_many: Sql,
    /// The release of a batch's rows whose effect never started.
    pub(super) release_many: Sql,
    /// How long the oldest row recovery may take over has been due.
    pub(super) behind: Sql,
    /// PostgreSQL: the trigger that wakes listening workers.
    pub(super) wake_up: &'static str,
    /// MySQL: expired rows, locked, for a takeover in one transaction.
    pub(super) expired_locked: Sql,
    /// MySQL: the takeover of the rows `expired_locked` locked.
    pub(super) take_over_keyed: Sql,
    /// The read of a batch's rows.
    pub(super) read_many: Sql,
    /// The `done` and `failed` follow-ups of a batch, `[done, failed]`:
    /// empty for one that binds values, and for a missing `failed`.
    pub(super) follow_up_many: [Sql; 2],
    /// On SQLite and MySQL: their history rows' inserts, `[done, failed]`.
    pub(super) follow_up_many_logs: [Sql; 2],
    /// On SQLite and MySQL: their messages' inserts, `[done, failed]`.
    pub(super) follow_up_many_messages: [Sql; 2],
    pub(crate) retry: Option<RetryDef>,
}

/// `retry(max = …, backoff = "…..…", attempts = "…", next_attempt = "…")`
/// of an in-flight state: its effect's attempts are counted, a
/// [`Verdict::RetryLater`](crate::Verdict::RetryLater) waits a growing
/// backoff, and the attempt that would exceed the maximum ends the row in
/// the state's `failed` follow-up instead.
#[derive(Debug)]
pub struct RetryDef {
    pub(crate) max: u32,
    pub(crate) backoff_min_ms: u64,
    pub(crate) backoff_max_ms: u64,
    pub(crate) attempts: &'static str,
    pub(crate) next_attempt: &'static str,
    pub(crate) last_error: Option<&'static str>,
    pub(crate) postpone: Sql,
    pub(crate) postpone_many: Sql,
}

impl RetryDef {
    /// How many times the effect runs at most.
    pub const fn max_attempts(&self) -> u32 {
        self.max
    }

    /// The wait after the first attempt, and the longest wait.
    pub const fn backoff(&self) -> (core::time::Duration, core::time::Duration) {
        (
            core::time::Duration::from_millis(self.backoff_min_ms),
            core::time::Duration::from_millis(self.backoff_max_ms),
        )
    }

    /// The integer column counting the attempts.
    pub const fn attempts_column(&self) -> &'static str {
        self.attempts
    }

    /// The timestamp column holding when the next attempt is due.
    pub const fn next_attempt_column(&self) -> &'static str {
        self.next_attempt
    }

    /// The text column holding the reason the last retry gave
    /// ([`Retry::because`](crate::Retry::because)), where the state
    /// declares one (`last_error = "…"`).
    pub const fn last_error_column(&self) -> Option<&'static str> {
        self.last_error
    }

    /// `UPDATE … SET next_attempt = now + $delay[, last_error = $reason]
    /// WHERE` the caller holds the lease.
    pub const fn postpone_sql(&self) -> &Sql {
        &self.postpone
    }

    /// [`postpone_sql`](Self::postpone_sql) for a batch of rows, each with
    /// a wait of its own.
    pub const fn postpone_many_sql(&self) -> &Sql {
        &self.postpone_many
    }
}

impl<S> InFlightDef<S> {
    /// How long a row may stay in this state before recovery takes it over.
    pub const fn lease(&self) -> core::time::Duration {
        core::time::Duration::from_millis(self.lease_ms)
    }

    /// The timestamp column each transition into this state sets.
    pub const fn since_column(&self) -> &'static str {
        self.since
    }

    /// `SELECT key, version … WHERE status = 'state' AND since < now - lease
    /// ORDER BY since LIMIT $1`
    pub const fn expired_sql(&self) -> &Sql {
        &self.expired
    }

    /// `UPDATE … SET since = now WHERE key = $1 AND status = 'state' AND
    /// since < now - lease [AND version = $2] [RETURNING token]`: a takeover,
    /// which gives the lease a new token.
    pub const fn claim_sql(&self) -> &Sql {
        &self.claim
    }

    /// PostgreSQL and SQLite: [`expired_sql`](Self::expired_sql) and
    /// [`claim_sql`](Self::claim_sql) for up to `$1` rows in one statement
    /// (PostgreSQL's `FOR UPDATE SKIP LOCKED`, in a `MATERIALIZED` CTE, so
    /// that the rows are chosen once whatever the plan), returning each
    /// row's key, version and new token (PostgreSQL's oldest first). Empty
    /// on MySQL.
    pub const fn take_over_sql(&self) -> &Sql {
        &self.take_over
    }

    /// `UPDATE … SET since = now WHERE key = $1 AND status = 'state'
    /// [AND version = $2] AND token = $n [RETURNING token]`: the lease
    /// holder's renewal (heartbeat).
    pub const fn renew_sql(&self) -> &Sql {
        &self.renew
    }

    /// The row's lease token, read back after a claim or renewal where
    /// there is no `RETURNING` (MySQL).
    pub const fn lease_read_sql(&self) -> &Sql {
        &self.lease_read
    }

    /// `SELECT status, version, token`: the losing path of a follow-up.
    pub const fn follow_up_read_sql(&self) -> &Sql {
        &self.follow_up_read
    }

    /// The `done` transition's `UPDATE`, tied to the occurrence and to the
    /// lease: a worker whose lease was taken over cannot move the row.
    pub const fn done_sql(&self) -> &Sql {
        &self.done_sql
    }

    /// The `failed` transition's `UPDATE`, tied like [`Self::done_sql`].
    pub const fn failed_sql(&self) -> Option<&Sql> {
        self.failed_sql.as_ref()
    }

    /// With a history table, on SQLite and MySQL: the history row's insert
    /// before the `done` and the `failed` follow-up, `[done, failed]`
    /// (empty without one, and on PostgreSQL, whose follow-up writes it).
    pub const fn follow_up_history_insert_sql(&self) -> &[Sql; 2] {
        &self.logs
    }

    /// On SQLite and MySQL: the outbox row's insert before the `done` and
    /// the `failed` follow-up, `[done, failed]`, where the follow-up emits
    /// a message (empty otherwise, and on PostgreSQL, whose follow-up
    /// writes it).
    pub const fn follow_up_outbox_insert_sql(&self) -> &[Sql; 2] {
        &self.messages
    }

    /// `UPDATE … SET since = now FROM` a batch of rows `WHERE` each is
    /// still in its occurrence under its lease `RETURNING key, token`: the
    /// heartbeat of [`finish_many`](crate::finish_many).
    pub const fn renew_many_sql(&self) -> &Sql {
        &self.renew_many
    }

    /// `UPDATE … SET since = ` a second past the lease `FROM` a batch of
    /// rows `WHERE` each is still in its occurrence under its lease
    /// `RETURNING key`: the release of held rows whose effect never
    /// started, which recovery may take over at once. Where the state
    /// counts attempts, it gives back the attempt the claim counted.
    pub const fn release_many_sql(&self) -> &Sql {
        &self.release_many
    }

    /// `SELECT` how long, in milliseconds, the oldest row of the state
    /// that recovery may take over (its lease run out, or its next attempt
    /// come) has been due, or -1 when none is: what a worker's health
    /// reports as how far behind it is.
    pub const fn behind_sql(&self) -> &Sql {
        &self.behind
    }

    /// PostgreSQL: `CREATE OR REPLACE TRIGGER` that notifies listening
    /// workers when a row is inserted into, or moves into, a state a
    /// transition into this one takes rows from (what a worker's
    /// `WakeUps` collects); empty when no transition leads here.
    pub const fn wake_up_sql(&self) -> &'static str {
        self.wake_up
    }

    /// MySQL: [`expired_sql`](Self::expired_sql) `FOR UPDATE SKIP
    /// LOCKED`, the first statement of a takeover in one transaction;
    /// empty on the other dialects, whose [`take_over_sql`](Self::take_over_sql)
    /// does it all.
    pub const fn expired_locked_sql(&self) -> &Sql {
        &self.expired_locked
    }

    /// MySQL: the takeover of a batch of rows that
    /// [`expired_locked_sql`](Self::expired_locked_sql) locked.
    pub const fn take_over_keyed_sql(&self) -> &Sql {
        &self.take_over_keyed
    }

    /// `SELECT key, status, version, token` of a batch's rows: what a
    /// batch statement did not move (MySQL: locking them first).
    pub const fn read_many_sql(&self) -> &Sql {
        &self.read_many
    }

    /// The `done` and `failed` follow-ups of a batch of rows, each fenced
    /// by its own occurrence and lease, `[done, failed]`: empty for one
    /// that binds values per call (its rows finish one statement each).
    pub const fn follow_up_many_sql(&self) -> &[Sql; 2] {
        &self.follow_up_many
    }

    /// With a history table, on SQLite and MySQL: the history rows'
    /// inserts before [`Self::follow_up_many_sql`], `[done, failed]`.
    pub const fn follow_up_many_history_insert_sql(&self) -> &[Sql; 2] {
        &self.follow_up_many_logs
    }

    /// On SQLite and MySQL: the messages' inserts before
    /// [`Self::follow_up_many_sql`], `[done, failed]`.
    pub const fn follow_up_many_outbox_insert_sql(&self) -> &[Sql; 2] {
        &self.follow_up_many_messages
    }

    /// How the effect is retried, where the state declares `retry(…)`.
    pub const fn retry(&self) -> Option<&RetryDef> {
        self.retry.as_ref()
    }
}

/// A column that a transition writes besides the status:
/// `set(sent_at = "CURRENT_TIMESTAMP")`.
#[derive(Debug, Clone, Copy)]
pub struct SetColumn {
    pub(super) column: &'static str,
    pub(super) expr: &'static str,
}

impl SetColumn {
    /// The column written.
    pub const fn column(&self) -> &'static str {
        self.column
    }

    /// The SQL expression written into it, as given in the attribute.
    pub const fn expr(&self) -> &'static str {
        self.expr
    }
}

/// One named transition: its source states, its target and its SQL.
#[derive(Debug)]
pub struct TransitionDef<S: 'static> {
    pub(super) name: &'static str,
    pub(super) sources: &'static [S],
    pub(super) target: S,
    pub(super) set: &'static [SetColumn],
    pub(super) update: Sql,
    pub(super) update_expecting: Option<Sql>,
    pub(super) read_back: Sql,
    pub(super) guard: Option<&'static str>,
    pub(super) select_guarded: Option<[Sql; 2]>,
    pub(super) claim: Sql,
    pub(super) claim_older: Option<Sql>,
    /// With a history table, on SQLite and MySQL: the history row's insert
    /// before the compare-and-set, `[plain, expecting]`.
    pub(super) history_insert: Option<[Sql; 2]>,
    /// `emit("…")`: the topic of the message a winning move writes.
    pub(super) emit: Option<&'static str>,
    /// For a transition that emits a message, on SQLite and MySQL: the
    /// outbox row's insert before the compare-and-set, `[plain,
    /// expecting]`.
    pub(super) outbox_insert: Option<[Sql; 2]>,
    /// `apply_many`'s statements.
    pub(super) many: ManySql,
    /// PostgreSQL's update and read of `many` for keys compared by value.
    pub(super) many_by_value: [Sql; 2],
    /// The bit of [`Machine::available`](super::Machine::available)'s guard mask for this
    /// transition's guard, if it has one that binds no values.
    pub(super) available_bit: Option<u8>,
}

impl<S: StateMachine> TransitionDef<S> {
    /// The transition's name, e.g. `start`.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The states it may start from.
    pub const fn sources(&self) -> &'static [S] {
        self.sources
    }

    /// The state it moves the row to.
    pub const fn target(&self) -> S {
        self.target
    }

    /// Columns written besides the status, in declaration order.
    pub const fn set_columns(&self) -> &'static [SetColumn] {
        self.set
    }

    /// The compare-and-set `UPDATE` for each dialect.
    pub const fn update_sql(&self) -> &Sql {
        &self.update
    }

    /// The bit of the guard mask that [`Machine::available_sql`](super::Machine::available_sql) reads
    /// for this transition: `Some` for a guard that binds no values,
    /// `None` without a guard or for one that needs the call's values.
    pub const fn available_bit(&self) -> Option<u8> {
        self.available_bit
    }

    /// The transition's guard, `guard = "…"`: a condition the row must meet
    /// for the transition to move it, checked in the compare-and-set's
    /// `WHERE`.
    pub const fn guard(&self) -> Option<&'static str> {
        self.guard
    }

    /// The losing read of a guarded transition: status, version and whether
    /// the row meets the guard now; `[outside a transaction, inside one]`.
    pub const fn select_guarded_sql(&self) -> Option<&[Sql; 2]> {
        self.select_guarded.as_ref()
    }

    /// What [`Transition::claim`](crate::Transition::claim) runs: on
    /// PostgreSQL one statement that moves up to `$n` rows in a source state
    /// (`FOR UPDATE SKIP LOCKED`) and returns their keys, versions and lease
    /// tokens in the machine's `order`; on SQLite and MySQL, and on
    /// PostgreSQL for a transition that emits a message, the candidates'
    /// `SELECT` (`SKIP LOCKED` on MySQL and PostgreSQL), which a short
    /// transaction follows with one `UPDATE` for all of them
    /// ([`Self::apply_many_sql`]), whose messages take the effect keys
    /// bound beside the keys.
    pub const fn claim_sql(&self) -> &Sql {
        &self.claim
    }

    /// For a machine with a history table, on SQLite and MySQL: the history
    /// row's `INSERT … SELECT` that runs just before the compare-and-set,
    /// in one transaction with it, `[plain, expecting an occurrence]`
    /// (empty on PostgreSQL, whose compare-and-set writes the history row
    /// itself).
    pub const fn history_insert_sql(&self) -> Option<&[Sql; 2]> {
        self.history_insert.as_ref()
    }

    /// The topic of the message a winning move writes to the outbox,
    /// `emit("…")`: in the move's own statement on PostgreSQL, in its
    /// transaction on SQLite and MySQL.
    pub const fn emit(&self) -> Option<&'static str> {
        self.emit
    }

    /// For a transition that emits a message, on SQLite and MySQL: the
    /// outbox row's `INSERT … SELECT` that runs just before the
    /// compare-and-set, in one transaction with it, `[plain, expecting an
    /// occurrence]` (empty on PostgreSQL, whose compare-and-set writes the
    /// outbox row itself).
    pub const fn outbox_insert_sql(&self) -> Option<&[Sql; 2]> {
        self.outbox_insert.as_ref()
    }

    /// What [`Transition::claim_older_than`](crate::Transition::claim_older_than)
    /// runs: [`claim_sql`](Self::claim_sql) for rows whose `since` stamp is
    /// older than a number of milliseconds bound after the guard's values.
    /// `None` unless every source state stamps the same `since` column.
    pub const fn claim_older_sql(&self) -> Option<&Sql> {
        self.claim_older.as_ref()
    }

    /// What [`Transition::apply_many`](crate::Transition::apply_many) runs.
    pub const fn apply_many_sql(&self) -> &ManySql {
        &self.many
    }

    /// `[update, read]` of [`apply_many_sql`](Self::apply_many_sql)'s for
    /// keys that bind as integers or UUIDs, whose equality is exact by
    /// value: on PostgreSQL without the text comparison that keeps text
    /// keys exact under a nondeterministic collation. Empty on SQLite and
    /// MySQL, which use `apply_many_sql` for every key.
    pub const fn apply_many_by_value_sql(&self) -> &[Sql; 2] {
        &self.many_by_value
    }

    /// The compare-and-set that also requires the row's version to be the
    /// occurrence the caller expects (`$2`). Only for a machine with a
    /// version column.
    pub const fn update_expecting_sql(&self) -> Option<&Sql> {
        self.update_expecting.as_ref()
    }

    /// What MySQL reads back after a winning `UPDATE` on the same
    /// connection, for want of `RETURNING`: the new version and, into an
    /// in-flight state, the lease token. Empty for the other dialects.
    pub const fn read_back_sql(&self) -> &Sql {
        &self.read_back
    }

    /// The `since` column this transition stamps: its target's, when the
    /// target is in flight.
    pub fn since_column(&self) -> Option<&'static str> {
        S::MACHINE
            .state(self.target)
            .and_then(StateDef::in_flight)
            .map(InFlightDef::since_column)
    }
}
