//! The runtime half of [stateguard](https://docs.rs/stateguard): everything
//! that touches a database. Depend on `stateguard`, which re-exports this
//! crate together with the derive.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
// With no backend feature there is nothing to run transitions on, and the
// executor and dialect plumbing goes unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused)
)]

mod batch;
pub mod ddl;
mod deadline;
mod dialect;
pub mod docs;
mod effects;
mod error;
mod executor;
mod history;
mod machine;
mod outcome;
mod stores;
pub mod telemetry;
mod transition;

// Public modules that live in their concept's folder, at their short paths.
pub use crate::machine::key;
pub use crate::stores::{idempotency, inbox};

pub use crate::batch::batched::Batched;
pub use crate::batch::many::APPLY_MANY_CHUNK;
pub use crate::deadline::call::Call;
pub use crate::deadline::retry::DEFAULT_DEADLINE;
pub use crate::dialect::{Backend, Key};
pub use crate::effects::effect::{Effect, FinishError, Finished};
pub use crate::effects::recovery::{
    Recovered, SupersededRow, claim_expired, recover, recover_within,
};
pub use crate::effects::verdict::{FollowUp, FollowUpValues, Verdict};
pub use crate::error::{Error, ErrorKind};
pub use crate::executor::Executor;
pub use crate::executor::tx::{Begin, Savepoint, Staged, Tx};
pub use crate::history::{HasHistory, HistoryRow, Noted};
pub use crate::machine::key::{BatchKey, DecodeKey, KeyShape, KeyText, ManyKeys, RowKey};
pub use crate::machine::{HasVersion, StateMachine, UnknownState};
pub use crate::outcome::{Committed, Current, Outcome, Uncommitted, Won};
pub use crate::transition::note::{Note, NoteSlot};
pub use crate::transition::{Bound, Params, Transition};

/// What a derived machine knows about itself, read through
/// [`StateMachine::MACHINE`]: its table and columns, states, transitions,
/// in-flight states and the SQL text of each statement per dialect. The
/// [`docs`] renderers and the [`ddl`] generators read it; so can a caller.
pub mod meta {
    pub use crate::dialect::{Bind, Column, Sql, Statement};
    pub use crate::machine::{InFlightDef, Machine, ManySql, SetColumn, StateDef, TransitionDef};
}

/// A statement in generated code, kept only where its backend's feature
/// is on: a binary that talks to one database carries one dialect's text.
#[cfg(feature = "postgres")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_postgres {
    ($statement:expr) => {
        $statement
    };
}

#[cfg(not(feature = "postgres"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_postgres {
    ($statement:expr) => {
        $crate::__private::NO_STATEMENT
    };
}

/// See [`__stateguard_postgres!`].
#[cfg(feature = "sqlite")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_sqlite {
    ($statement:expr) => {
        $statement
    };
}

#[cfg(not(feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_sqlite {
    ($statement:expr) => {
        $crate::__private::NO_STATEMENT
    };
}

/// See [`__stateguard_postgres!`].
#[cfg(feature = "mysql")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_mysql {
    ($statement:expr) => {
        $statement
    };
}

#[cfg(not(feature = "mysql"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_mysql {
    ($statement:expr) => {
        $crate::__private::NO_STATEMENT
    };
}

/// Items the derive's generated code names. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    /// Each dialect's statement, or [`NO_STATEMENT`] where its backend's
    /// feature is off.
    pub use crate::{
        __stateguard_mysql as mysql, __stateguard_postgres as postgres,
        __stateguard_sqlite as sqlite,
    };

    /// The runtime's clock text per dialect, for the test that holds the
    /// derive's statements to it (`tests/derive/metadata.rs`).
    pub const NOW: [&str; 3] = [
        crate::dialect::NOW.postgres,
        crate::dialect::NOW.sqlite,
        crate::dialect::NOW.mysql,
    ];

    /// What a dialect whose backend's feature is off holds.
    pub const NO_STATEMENT: crate::meta::Statement =
        crate::machine::construct::statement("", &[], &[]);

    pub use sqlx;

    pub use crate::dialect::{Bind, Column};
    pub use crate::effects::verdict::Binder;
    pub use crate::effects::verdict::construct::binder;
    pub use crate::machine::construct::{
        DdlParts, InFlightParts, MachineParts, StateParts, TransitionParts, ddl, in_flight,
        machine, set_column, sql, state, statement, transition,
    };
    pub use crate::machine::{Machine, StateDef, TransitionDef};

    /// How `docs::mermaid` writes a label and a state's quoted
    /// description, for the test that draws arbitrary text with real
    /// Mermaid.
    pub use crate::docs::mermaid::{mermaid_quoted, mermaid_text};

    /// A transition constructor with `bind(Type)` values returns the
    /// transition with them.
    pub const fn bound<S: crate::StateMachine, P>(
        transition: crate::Transition<S>,
        params: P,
    ) -> crate::Bound<S, P> {
        transition.bind(params)
    }

    /// Decoding a status string inside `sqlx::Decode`.
    pub fn unknown_state<S: crate::StateMachine>(value: &str) -> sqlx::error::BoxDynError {
        Box::new(crate::UnknownState::new::<S>(value))
    }
}
