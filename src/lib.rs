#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub use guard_macros::StateMachine;
pub use guard_runtime::{
    Backend, Error, Executor, Machine, Outcome, SetColumn, Sql, StateDef, StateMachine, Transition,
    TransitionDef, UnknownState, Won,
};

#[doc(hidden)]
pub mod __private {
    pub use guard_runtime::__private::*;
}
