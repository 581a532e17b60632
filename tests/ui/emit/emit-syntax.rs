use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(send -> Sent, emit = "payout.sent")]
    #[transition(fail -> Failed, emit("payout.failed", columns(amount)))]
    #[transition(cancel -> Cancelled, emit("payout.cancelled"), emit("payout.gone"))]
    #[transition(hold -> Held, emit(payout.held))]
    Pending,
    Sent,
    Failed,
    Cancelled,
    Held,
}

fn main() {}
