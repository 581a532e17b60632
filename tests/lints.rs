//! The generated code is lint-clean in a crate that denies the strict lints.

#![deny(warnings, unused_qualifications, unused_results, missing_docs)]
#![deny(clippy::all, clippy::pedantic)]
#![allow(clippy::missing_errors_doc)]

use stateguard::StateMachine;

/// A documented machine in a crate that denies missing docs.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "jobs", column = "state", key = "job_id", version = "version")]
pub enum JobState {
    /// Waiting for a worker.
    #[state(initial)]
    #[transition(claim -> Running, set(claimed_at = "CURRENT_TIMESTAMP"))]
    Queued,
    /// A worker has it.
    #[transition(finish -> Done)]
    #[transition(requeue -> Queued)]
    Running,
    /// Finished.
    Done,
}

#[test]
fn derived_code_compiles_under_strict_lints() {
    assert_eq!(JobState::claim().target(), JobState::Running);
    assert_eq!(JobState::requeue().sources(), [JobState::Running]);
}
