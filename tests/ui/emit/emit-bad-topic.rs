use stateguard::StateMachine;

// A topic is written into the statement as a literal: only dot-separated
// words of letters, digits, `_` and `-` pass.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(send -> Sent, emit("payout's.sent"))]
    #[transition(fail -> Failed, emit("payout.*"))]
    #[transition(cancel -> Cancelled, emit("payout..cancelled"))]
    #[transition(hold -> Held, emit(""))]
    Pending,
    Sent,
    Failed,
    Cancelled,
    Held,
}

fn main() {}
