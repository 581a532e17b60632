use stateguard::StateMachine;

// The message id names the occurrence: without a version column two
// passes through `sent` would share one.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(send -> Sent, emit("payout.sent"))]
    Pending,
    Sent,
}

fn main() {}
