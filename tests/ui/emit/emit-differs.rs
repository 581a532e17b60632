use stateguard::StateMachine;

// One transition is one statement: every declaration emits the same.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(send -> Sending)]
    #[transition(cancel -> Cancelled, emit("payout.cancelled"))]
    Pending,
    #[transition(cancel -> Cancelled, emit("payout.dropped"))]
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
    Cancelled,
}

fn main() {}
