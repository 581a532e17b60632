//! The payout workflow's states. The README's diagram and `docs/payouts.md`
//! are generated from this enum, and a test keeps them in step with it.

use stateguard::StateMachine;

/// Where a payout is: created, being sent to the bank, or settled.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}
