//! Construction of the metadata, for the derive's generated code only.
//!
//! The metadata types keep their fields private and have no public
//! constructor, so that a `Machine` (which holds SQL text that is run as
//! it is) comes from the derive, whose names and fragments are validated.
//! These functions are re-exported from the hidden `__private` module, as
//! pin-project does with what its generated code needs, instead of hidden
//! methods on the public types. Each one is `const`: the whole machine is a
//! `const` built at compile time.

use super::{DdlText, InFlightDef, Machine, SetColumn, Sql, StateDef, StateMachine, TransitionDef};
use crate::dialect::{Bind, Column, Statement};

/// The `const MACHINE` of `impl StateMachine`: one per enum.
#[allow(clippy::too_many_arguments)]
pub const fn machine<S: StateMachine>(
    name: &'static str,
    table: &'static str,
    column: &'static str,
    key: &'static str,
    key_columns: &'static [&'static str],
    version: Option<&'static str>,
    initial: S,
    states: &'static [StateDef<S>],
    transitions: &'static [TransitionDef<S>],
    select: Sql,
    select_in_transaction: Sql,
    history: Option<(&'static str, Sql)>,
    ddl: Sql<DdlText>,
) -> Machine<S> {
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
pub const fn state<S: Copy>(
    value: S,
    variant: &'static str,
    db: &'static str,
    initial: bool,
    in_flight: Option<&'static InFlightDef<S>>,
    stamp: Option<&'static str>,
    timeout_ms: Option<u64>,
) -> StateDef<S> {
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
#[allow(clippy::too_many_arguments)]
pub const fn in_flight<S>(
    lease_ms: u64,
    since: &'static str,
    done: &'static TransitionDef<S>,
    failed: Option<&'static TransitionDef<S>>,
    expired: Sql,
    claim: Sql,
    take_over: Sql,
    renew: Sql,
    lease_read: Sql,
    follow_up_read: Sql,
    done_sql: Sql,
    failed_sql: Option<Sql>,
    logs: [Sql; 2],
) -> InFlightDef<S> {
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
#[allow(clippy::too_many_arguments)]
pub const fn transition<S: StateMachine>(
    name: &'static str,
    sources: &'static [S],
    target: S,
    set: &'static [SetColumn],
    update: Sql,
    update_expecting: Option<Sql>,
    read_back: Sql,
    guard: Option<&'static str>,
    select_guarded: Option<[Sql; 2]>,
    claim: Sql,
    claim_older: Option<Sql>,
    log: Option<[Sql; 2]>,
    many: [Sql; 4],
    many_by_value: [Sql; 2],
) -> TransitionDef<S> {
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
        many,
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
pub const fn ddl(
    constraint: &'static str,
    trigger: &'static str,
    check_clause: &'static str,
    up: &'static [&'static str],
    down: &'static [&'static str],
    migration: &'static str,
    down_migration: &'static str,
) -> DdlText {
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
