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
    DdlText, InFlightDef, Machine, ManySql, SetColumn, Sql, StateDef, StateMachine, TransitionDef,
};
use crate::dialect::{Bind, Column, Statement};

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
    pub history: Option<(&'static str, Sql)>,
    pub ddl: Sql<DdlText>,
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
        ddl,
    } = parts;
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
        ddl,
    }
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
    pub stamp: Option<&'static str>,
    pub timeout_ms: Option<u64>,
}

/// One state, from its parts.
pub const fn state<S: Copy>(parts: StateParts<S>) -> StateDef<S> {
    let StateParts {
        value,
        variant,
        db,
        initial,
        in_flight,
        stamp,
        timeout_ms,
    } = parts;
    StateDef {
        value,
        variant,
        db,
        initial,
        in_flight,
        stamp,
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
    pub logs: [Sql; 2],
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
        logs,
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
        logs,
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
    pub read_back: Sql,
    pub guard: Option<&'static str>,
    pub select_guarded: Option<[Sql; 2]>,
    pub claim: Sql,
    pub claim_older: Option<Sql>,
    pub log: Option<[Sql; 2]>,
    pub many_update: Sql,
    pub many_read: Sql,
    pub many_lease_read: Sql,
    pub many_log: Sql,
    pub many_by_value: [Sql; 2],
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
        select_guarded,
        claim,
        claim_older,
        log,
        many_update,
        many_read,
        many_lease_read,
        many_log,
        many_by_value,
    } = parts;
    TransitionDef {
        name,
        sources,
        target,
        set,
        update,
        update_expecting,
        read_back,
        guard,
        select_guarded,
        claim,
        claim_older,
        log,
        many: ManySql {
            update: many_update,
            read: many_read,
            lease_read: many_lease_read,
            log: many_log,
        },
        many_by_value,
    }
}

/// `set(column = "expr")` of a transition.
pub const fn set_column(column: &'static str, expr: &'static str) -> SetColumn {
    SetColumn { column, expr }
}

/// One statement, or one machine's DDL, in every dialect.
pub const fn sql<T: 'static>(postgres: T, sqlite: T, mysql: T) -> Sql<T> {
    Sql {
        postgres,
        sqlite,
        mysql,
    }
}

/// One statement in one dialect: its text, its bind plan and the
/// columns it returns.
pub const fn statement(
    text: &'static str,
    binds: &'static [Bind],
    returns: &'static [Column],
) -> Statement {
    Statement::returning(text, binds, returns)
}

/// The enforcement DDL of a machine in one dialect.
///
/// Each field is the `DdlText` field of the same name, documented at its
/// accessor; the names make the generated code read as a description.
#[allow(missing_docs)]
pub struct DdlParts {
    pub constraint: &'static str,
    pub trigger: &'static str,
    pub check_clause: &'static str,
    pub up: &'static [&'static str],
    pub down: &'static [&'static str],
    pub migration: &'static str,
    pub down_migration: &'static str,
}

/// One dialect's DDL, from its parts.
pub const fn ddl(parts: DdlParts) -> DdlText {
    let DdlParts {
        constraint,
        trigger,
        check_clause,
        up,
        down,
        migration,
        down_migration,
    } = parts;
    DdlText {
        constraint,
        trigger,
        check_clause,
        up,
        down,
        migration,
        down_migration,
    }
}
