use stateguard::StateMachine;

// Payload columns: each once, not a key column (every payload holds the
// key), and a valid identifier.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(send -> Sent, emit("payout.sent", payload(amount, amount)))]
    #[transition(fail -> Failed, emit("payout.failed", payload(id)))]
    Pending,
    Sent,
    Failed,
}

fn main() {}
