//! The payout workflow's states. The README's diagram and `docs/payouts.md`
//! are generated from this enum, and a test keeps them in step with it.

use stateguard::StateMachine;

/// Where a payout is: created, being sent to the bank, or settled.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64")]
pub enum PayoutStatus {
    #[state(initial)]
    // Payouts above the limit wait for a person; the limit holds when the
    // row moves, not when a worker last read it.
    #[transition(start -> Sending, guard = "amount_cents <= 95000")]
    #[transition(cancel -> Cancelled)]
    Pending,
    // The bank's reference is stored by the statement that confirms.
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP", bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}
