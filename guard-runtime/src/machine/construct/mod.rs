//! Construction of the metadata, for the derive's generated code only.
//!
//! The metadata types keep their fields private and have no public
//! constructor, so that a `Machine` (which holds SQL text that is run as
//! it is) comes from the derive, whose names and fragments are validated.
//! These functions are re-exported from the hidden `__private` module, as
//! pin-project does with what its generated code needs, instead of hidden
//! methods on the public types. Each one is `const`: the whole machine is a
//! `const` built at compile time.

use super::{
    DdlText, InFlightDef, Machine, ManySql, RetryDef, SetColumn, Sql, StateDef, StateMachine,
    TableText, TransitionDef,
};
use crate::dialect::Statement;

mod text;

pub use self::text::{
    DdlParts, PerDialect, Statements, TableParts, ddl, per_dialect, rust_typed, statement,
    table_text, typed, untyped,
};

/// The `const MACHINE` of `impl StateMachine`: one per enum.
///
/// Each field is the `Machine` field of the same name, documented at its
/// accessor; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct MachineParts<S: 'static> {
    pub name: &'static str,
    pub table: &'static str,
    pub column: &'static str,
    pub key: &'static str,
    pub key_columns: &'static [&'static str],
    pub version: Option<&'static str>,
    pub initial: S,
    pub states: &'static [StateDef<S>],
    pub transitions: &'static [TransitionDef<S>],
    pub select: Sql,
    pub select_in_transaction: Sql,
    pub history: Option<&'static str>,
    pub history_read: Option<Sql>,
    pub available: Sql,
    pub counts: Sql,
    pub rows: Sql,
    pub rows_after: Sql,
    pub outbox: &'static str,
    pub fingerprint: &'static str,
    pub ddl: Sql<DdlText>,
    pub table_text: Sql<TableText>,
}

/// The machine, from its parts.
pub const fn machine<S: StateMachine>(parts: MachineParts<S>) -> Machine<S> {
    let MachineParts {
        name,
        table,
        column,
        key,
        key_columns,
        version,
        initial,
        states,
        transitions,
        select,
        select_in_transaction,
        history,
        history_read,
        available,
        counts,
        rows,
        rows_after,
        outbox,
        fingerprint,
        ddl,
        table_text,
    } = parts;
    let history = match (history, history_read) {
        (Some(table), Some(read)) => Some((table, read)),
        _ => None,
    };
    Machine {
        name,
        table,
        column,
        key,
        key_columns,
        version,
        initial,
        states,
        transitions,
        select,
        select_in_transaction,
        history,
        available,
        counts,
        rows: [rows, rows_after],
        outbox,
        fingerprint,
        ddl,
        table_text,
    }
}

/// The machine after a derive error: its name, a state and its
/// transitions (each a [`TransitionParts::of`] with its name), and nothing
/// else. The derive's fallback gives it to `MACHINE`, so that a constructor
/// evaluated in a `const` still has a transition to return and the user
/// sees the derive's error alone. Nothing reads it: the crate does not
/// compile.
pub const fn placeholder<S: StateMachine>(
    name: &'static str,
    initial: S,
    transitions: &'static [TransitionDef<S>],
) -> Machine<S> {
    const DDL: DdlText = DdlText {
        constraint: "",
        trigger: "",
        check_clause: "",
        up: &[],
        down: &[],
        migration: "",
        down_migration: "",
    };
    const TABLE: TableText = TableText {
        create: "",
        columns: &[],
        primary_key: "",
        history: &[],
    };
    machine(MachineParts {
        name,
        table: "",
        column: "",
        key: "",
        key_columns: &[],
        version: None,
        initial,
        states: &[],
        transitions,
        select: NONE,
        select_in_transaction: NONE,
        history: None,
        history_read: None,
        available: NONE,
        counts: NONE,
        rows: NONE,
        rows_after: NONE,
        outbox: "",
        fingerprint: "",
        ddl: Sql {
            postgres: DDL,
            sqlite: DDL,
            mysql: DDL,
        },
        table_text: Sql {
            postgres: TABLE,
            sqlite: TABLE,
            mysql: TABLE,
        },
    })
}

/// One variant of the enum.
///
/// Each field is the `StateDef` field of the same name, documented at its
/// accessor; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct StateParts<S: 'static> {
    pub value: S,
    pub variant: &'static str,
    pub db: &'static str,
    pub initial: bool,
    pub in_flight: Option<&'static InFlightDef<S>>,
    pub since: Option<&'static str>,
    pub timeout_ms: Option<u64>,
}

impl<S: Copy> StateParts<S> {
    /// The parts of a plain state `value`: not initial, not in flight,
    /// with no since column and no timeout. The derive names a state's
    /// variant and text, and what else differs, before `..` this.
    pub const fn of(value: S) -> Self {
        StateParts {
            value,
            variant: "",
            db: "",
            initial: false,
            in_flight: None,
            since: None,
            timeout_ms: None,
        }
    }
}

/// One state, from its parts.
pub const fn state<S: Copy>(parts: StateParts<S>) -> StateDef<S> {
    let StateParts {
        value,
        variant,
        db,
        initial,
        in_flight,
        since,
        timeout_ms,
    } = parts;
    StateDef {
        value,
        variant,
        db,
        initial,
        in_flight,
        stamp: since,
        timeout_ms,
    }
}

/// The lease, follow-ups and recovery SQL of a
/// `#[state(in_flight(…))]` variant. `done` and `failed` are elements
/// of the machine's transitions.
///
/// Each field is the `InFlightDef` field of the same name, documented at its
/// accessor; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct InFlightParts<S: 'static> {
    pub lease_ms: u64,
    pub since: &'static str,
    pub done: &'static TransitionDef<S>,
    pub failed: Option<&'static TransitionDef<S>>,
    pub expired: Sql,
    pub claim: Sql,
    pub take_over: Sql,
    pub renew: Sql,
    pub lease_read: Sql,
    pub follow_up_read: Sql,
    pub done_sql: Sql,
    pub failed_sql: Option<Sql>,
    pub done_history_insert: Option<Sql>,
    pub failed_history_insert: Option<Sql>,
    pub done_outbox_insert: Option<Sql>,
    pub failed_outbox_insert: Option<Sql>,
    pub renew_many: Sql,
    pub release_many: Sql,
    pub behind: Sql,
    pub wake_up: &'static str,
    pub expired_locked: Sql,
    pub take_over_keyed: Sql,
    pub read_many: Sql,
    pub done_many: Sql,
    pub failed_many: Option<Sql>,
    pub done_many_history_insert: Option<Sql>,
    pub failed_many_history_insert: Option<Sql>,
    pub done_many_outbox_insert: Option<Sql>,
    pub failed_many_outbox_insert: Option<Sql>,
    pub retry: Option<RetryParts>,
}

/// `retry(…)` of an in-flight state: each field is the [`RetryDef`] field
/// of the same name.
#[allow(missing_docs)]
pub struct RetryParts {
    pub max: u32,
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
    pub attempts: &'static str,
    pub next_attempt: &'static str,
    pub last_error: Option<&'static str>,
    pub postpone: Sql,
    pub postpone_many: Sql,
}

/// An in-flight state, from its parts.
pub const fn in_flight<S>(parts: InFlightParts<S>) -> InFlightDef<S> {
    let InFlightParts {
        lease_ms,
        since,
        done,
        failed,
        expired,
        claim,
        take_over,
        renew,
        lease_read,
        follow_up_read,
        done_sql,
        failed_sql,
        done_history_insert,
        failed_history_insert,
        done_outbox_insert,
        failed_outbox_insert,
        renew_many,
        release_many,
        behind,
        wake_up,
        expired_locked,
        take_over_keyed,
        read_many,
        done_many,
        failed_many,
        done_many_history_insert,
        failed_many_history_insert,
        done_many_outbox_insert,
        failed_many_outbox_insert,
        retry,
    } = parts;
    InFlightDef {
        lease_ms,
        since,
        done,
        failed,
        expired,
        claim,
        take_over,
        renew,
        lease_read,
        follow_up_read,
        done_sql,
        failed_sql,
        logs: [or_none(done_history_insert), or_none(failed_history_insert)],
        messages: [or_none(done_outbox_insert), or_none(failed_outbox_insert)],
        renew_many,
        release_many,
        behind,
        wake_up,
        expired_locked,
        take_over_keyed,
        read_many,
        follow_up_many: [done_many, or_none(failed_many)],
        follow_up_many_logs: [
            or_none(done_many_history_insert),
            or_none(failed_many_history_insert),
        ],
        follow_up_many_messages: [
            or_none(done_many_outbox_insert),
            or_none(failed_many_outbox_insert),
        ],
        retry: match retry {
            Some(RetryParts {
                max,
                backoff_min_ms,
                backoff_max_ms,
                attempts,
                next_attempt,
                last_error,
                postpone,
                postpone_many,
            }) => Some(RetryDef {
                max,
                backoff_min_ms,
                backoff_max_ms,
                attempts,
                next_attempt,
                last_error,
                postpone,
                postpone_many,
            }),
            None => None,
        },
    }
}

/// One named transition, with its compare-and-set statement.
///
/// Each field is the `TransitionDef` field of the same name, documented at its
/// accessor; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct TransitionParts<S: 'static> {
    pub name: &'static str,
    pub sources: &'static [S],
    pub target: S,
    pub set: &'static [SetColumn],
    pub update: Sql,
    pub update_expecting: Option<Sql>,
    pub read_back: Option<Sql>,
    pub guard: Option<&'static str>,
    pub guarded_select: Option<Sql>,
    pub guarded_select_in_transaction: Option<Sql>,
    pub claim: Sql,
    pub claim_older: Option<Sql>,
    pub history_insert: Option<Sql>,
    pub history_insert_expecting: Option<Sql>,
    pub emit: Option<&'static str>,
    pub outbox_insert: Option<Sql>,
    pub outbox_insert_expecting: Option<Sql>,
    pub many_update: Sql,
    pub many_read: Sql,
    pub many_lease_read: Option<Sql>,
    pub many_history_insert: Option<Sql>,
    pub many_outbox_insert: Option<Sql>,
    pub many_update_by_value: Sql,
    pub many_read_by_value: Sql,
    pub available_bit: Option<u8>,
}

impl<S: 'static> TransitionParts<S> {
    /// The parts of a transition into `target` with nothing else: no
    /// statements, no guard, no history, no outbox. The derive names every
    /// statement the transition has, and what else it has, before `..`
    /// this, and leaves out each that is `None`.
    pub const fn of(target: S) -> Self {
        TransitionParts {
            name: "",
            sources: &[],
            target,
            set: &[],
            update: NONE,
            update_expecting: None,
            read_back: None,
            guard: None,
            guarded_select: None,
            guarded_select_in_transaction: None,
            claim: NONE,
            claim_older: None,
            history_insert: None,
            history_insert_expecting: None,
            emit: None,
            outbox_insert: None,
            outbox_insert_expecting: None,
            many_update: NONE,
            many_read: NONE,
            many_lease_read: None,
            many_history_insert: None,
            many_outbox_insert: None,
            many_update_by_value: NONE,
            many_read_by_value: NONE,
            available_bit: None,
        }
    }
}

/// One transition, from its parts.
pub const fn transition<S: StateMachine>(parts: TransitionParts<S>) -> TransitionDef<S> {
    let TransitionParts {
        name,
        sources,
        target,
        set,
        update,
        update_expecting,
        read_back,
        guard,
        guarded_select,
        guarded_select_in_transaction,
        claim,
        claim_older,
        history_insert,
        history_insert_expecting,
        emit,
        outbox_insert,
        outbox_insert_expecting,
        many_update,
        many_read,
        many_lease_read,
        many_history_insert,
        many_outbox_insert,
        many_update_by_value,
        many_read_by_value,
        available_bit,
    } = parts;
    let select_guarded = match (guarded_select, guarded_select_in_transaction) {
        (Some(plain), Some(locking)) => Some([plain, locking]),
        _ => None,
    };
    let history_insert = match (history_insert, history_insert_expecting) {
        (Some(plain), Some(expecting)) => Some([plain, expecting]),
        _ => None,
    };
    let outbox_insert = match (outbox_insert, outbox_insert_expecting) {
        (Some(plain), Some(expecting)) => Some([plain, expecting]),
        _ => None,
    };
    TransitionDef {
        name,
        sources,
        target,
        set,
        update,
        update_expecting,
        read_back: or_none(read_back),
        guard,
        select_guarded,
        claim,
        claim_older,
        history_insert,
        emit,
        outbox_insert,
        many: ManySql {
            update: many_update,
            read: many_read,
            lease_read: or_none(many_lease_read),
            history_insert: or_none(many_history_insert),
            outbox_insert: or_none(many_outbox_insert),
        },
        many_by_value: [many_update_by_value, many_read_by_value],
        available_bit,
    }
}

/// `set(column = "expr")` of a transition.
#[allow(missing_docs)]
pub struct SetParts {
    pub column: &'static str,
    pub expr: &'static str,
}

/// One `set` assignment, from its parts.
pub const fn set_column(parts: SetParts) -> SetColumn {
    let SetParts { column, expr } = parts;
    SetColumn { column, expr }
}

/// A statement the machine does not have: empty in every dialect, the
/// metadata's own spelling of absence (the generated code says `None`).
const fn or_none(sql: Option<Sql>) -> Sql {
    match sql {
        Some(sql) => sql,
        None => NONE,
    }
}

pub(crate) const NONE: Sql = Sql {
    postgres: Statement::returning("", &[], &[]),
    sqlite: Statement::returning("", &[], &[]),
    mysql: Statement::returning("", &[], &[]),
};
