//! The `StateMachine` trait and the metadata the derive emits for it.
//!
//! Everything here is `'static` data built at compile time: the runtime, the
//! docs renderers and the DDL generators read it generically.

use core::fmt::Debug;

use crate::transition::Transition;

/// An enum whose variants are the states of a row, with the transitions
/// between them.
///
/// Implemented by `#[derive(StateMachine)]`; see the crate documentation for
/// the attributes. Implementing it by hand is not supported: the SQL text in
/// the metadata is generated and validated by the derive.
pub trait StateMachine: Copy + Eq + Debug + Send + Sync + 'static {
    /// The table, columns, states and transitions of this machine.
    const MACHINE: &'static Machine<Self>;

    /// The string stored in the status column for this state.
    fn as_str(self) -> &'static str;

    /// The state stored as `value` in the status column, if there is one.
    fn from_db_str(value: &str) -> Option<Self>;

    /// Parses a status string, or says which string was not a state.
    fn parse_db_str(value: &str) -> Result<Self, crate::UnknownState> {
        Self::from_db_str(value).ok_or_else(|| crate::UnknownState::new::<Self>(value))
    }
}

/// SQL text for each dialect, fixed at compile time.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    pub(crate) postgres: &'static str,
    pub(crate) sqlite: &'static str,
    pub(crate) mysql: &'static str,
}

impl Sql {
    #[doc(hidden)]
    pub const fn __new(postgres: &'static str, sqlite: &'static str, mysql: &'static str) -> Self {
        Sql {
            postgres,
            sqlite,
            mysql,
        }
    }

    /// The statement as PostgreSQL runs it (`"quoted"` names, `$1`).
    pub const fn postgres(&self) -> &'static str {
        self.postgres
    }

    /// The statement as SQLite runs it (`"quoted"` names, `?1`).
    pub const fn sqlite(&self) -> &'static str {
        self.sqlite
    }

    /// The statement as MySQL and MariaDB run it (`` `quoted` `` names, `?`).
    pub const fn mysql(&self) -> &'static str {
        self.mysql
    }
}

/// The whole machine: where it lives and what it allows.
#[derive(Debug)]
pub struct Machine<S: 'static> {
    name: &'static str,
    table: &'static str,
    column: &'static str,
    key: &'static str,
    version: Option<&'static str>,
    initial: S,
    states: &'static [StateDef<S>],
    transitions: &'static [TransitionDef<S>],
    select: Sql,
    select_in_transaction: Sql,
}

impl<S: StateMachine> Machine<S> {
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn __new(
        name: &'static str,
        table: &'static str,
        column: &'static str,
        key: &'static str,
        version: Option<&'static str>,
        initial: S,
        states: &'static [StateDef<S>],
        transitions: &'static [TransitionDef<S>],
        select: Sql,
        select_in_transaction: Sql,
    ) -> Self {
        Machine {
            name,
            table,
            column,
            key,
            version,
            initial,
            states,
            transitions,
            select,
            select_in_transaction,
        }
    }

    /// The Rust name of the enum, e.g. `PayoutStatus`.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The table the rows live in, as written in `#[state_machine(table = …)]`.
    pub const fn table(&self) -> &'static str {
        self.table
    }

    /// The status column.
    pub const fn column(&self) -> &'static str {
        self.column
    }

    /// The key column that `apply` matches on.
    pub const fn key(&self) -> &'static str {
        self.key
    }

    /// The occurrence counter column, `version = "…"`, that every
    /// transition increments in the same statement.
    pub const fn version(&self) -> Option<&'static str> {
        self.version
    }

    /// Every state, in declaration order.
    pub const fn states(&self) -> &'static [StateDef<S>] {
        self.states
    }

    /// Every transition, in order of first declaration.
    pub const fn transitions(&self) -> &'static [TransitionDef<S>] {
        self.transitions
    }

    /// `SELECT <column> FROM <table> WHERE <key> = <param>`: the fresh read
    /// of the losing path (a locking read on MySQL).
    pub const fn select_sql(&self) -> &Sql {
        &self.select
    }

    /// The losing path's read inside a caller's transaction: a locking read
    /// on PostgreSQL and MySQL, so that it sees the row as it is now, or
    /// fails with a serialization error, instead of reading the
    /// transaction's snapshot.
    pub const fn select_in_transaction_sql(&self) -> &Sql {
        &self.select_in_transaction
    }

    /// The state marked `#[state(initial)]`.
    pub const fn initial(&self) -> S {
        self.initial
    }

    /// The metadata of `state`.
    pub fn state(&self, state: S) -> Option<&'static StateDef<S>> {
        self.states.iter().find(|s| s.value == state)
    }

    /// A state is terminal when no transition starts from it.
    pub fn is_terminal(&self, state: S) -> bool {
        !self.transitions.iter().any(|t| t.sources.contains(&state))
    }

    /// The transitions that may start from `state`.
    pub fn transitions_from(&self, state: S) -> impl Iterator<Item = &'static TransitionDef<S>> {
        self.transitions
            .iter()
            .filter(move |t| t.sources.contains(&state))
    }

    /// The transition called `name`.
    pub fn transition(&self, name: &str) -> Option<&'static TransitionDef<S>> {
        self.transitions.iter().find(|t| t.name == name)
    }
}

/// One state: its variant and the string stored for it.
#[derive(Debug)]
pub struct StateDef<S: 'static> {
    value: S,
    variant: &'static str,
    db: &'static str,
    initial: bool,
    in_flight: Option<&'static InFlightDef>,
}

impl<S: Copy> StateDef<S> {
    #[doc(hidden)]
    pub const fn __new(
        value: S,
        variant: &'static str,
        db: &'static str,
        initial: bool,
        in_flight: Option<&'static InFlightDef>,
    ) -> Self {
        StateDef {
            value,
            variant,
            db,
            initial,
            in_flight,
        }
    }

    /// The lease and follow-ups of an `#[state(in_flight(…))]` state.
    pub const fn in_flight(&self) -> Option<&'static InFlightDef> {
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
pub struct InFlightDef {
    lease_ms: u64,
    since: &'static str,
    done: usize,
    failed: Option<usize>,
    expired: Sql,
    claim: Sql,
    renew: Sql,
    lease_read: Sql,
    follow_up_read: Sql,
    done_sql: Sql,
    failed_sql: Option<Sql>,
}

impl InFlightDef {
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub const fn __new(
        lease_ms: u64,
        since: &'static str,
        done: usize,
        failed: Option<usize>,
        expired: Sql,
        claim: Sql,
        renew: Sql,
        lease_read: Sql,
        follow_up_read: Sql,
        done_sql: Sql,
        failed_sql: Option<Sql>,
    ) -> Self {
        InFlightDef {
            lease_ms,
            since,
            done,
            failed,
            expired,
            claim,
            renew,
            lease_read,
            follow_up_read,
            done_sql,
            failed_sql,
        }
    }

    /// How long a row may stay in this state before recovery takes it over.
    pub const fn lease(&self) -> core::time::Duration {
        core::time::Duration::from_millis(self.lease_ms)
    }

    /// The timestamp column each transition into this state sets.
    pub const fn since_column(&self) -> &'static str {
        self.since
    }

    /// The transition that ends this state when the effect succeeded.
    pub fn done<S: StateMachine>(&self) -> Transition<S> {
        S::MACHINE.transitions()[self.done].transition()
    }

    /// The transition that ends this state when the effect failed for good.
    pub fn failed<S: StateMachine>(&self) -> Option<Transition<S>> {
        self.failed
            .map(|i| S::MACHINE.transitions()[i].transition())
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
}

/// A column that a transition writes besides the status:
/// `set(sent_at = "CURRENT_TIMESTAMP")`.
#[derive(Debug, Clone, Copy)]
pub struct SetColumn {
    column: &'static str,
    expr: &'static str,
}

impl SetColumn {
    #[doc(hidden)]
    pub const fn __new(column: &'static str, expr: &'static str) -> Self {
        SetColumn { column, expr }
    }

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
    name: &'static str,
    sources: &'static [S],
    target: S,
    set: &'static [SetColumn],
    update: Sql,
    read_back: Sql,
}

impl<S: StateMachine> TransitionDef<S> {
    #[doc(hidden)]
    pub const fn __new(
        name: &'static str,
        sources: &'static [S],
        target: S,
        set: &'static [SetColumn],
        update: Sql,
        read_back: Sql,
    ) -> Self {
        TransitionDef {
            name,
            sources,
            target,
            set,
            update,
            read_back,
        }
    }

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

    /// What MySQL reads back after a winning `UPDATE` on the same
    /// connection, for want of `RETURNING`: the new version and, into an
    /// in-flight state, the lease token. Empty for the other dialects.
    pub const fn read_back_sql(&self) -> &Sql {
        &self.read_back
    }

    /// The `since` column this transition stamps: its target's, when the
    /// target is in flight.
    pub fn stamps(&self) -> Option<&'static str> {
        S::MACHINE
            .state(self.target)
            .and_then(StateDef::in_flight)
            .map(InFlightDef::since_column)
    }

    /// This transition as a value that can be applied.
    pub const fn transition(&'static self) -> Transition<S> {
        Transition::from_def(self)
    }
}
