use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sent, set2(sent_at = "CURRENT_TIMESTAMP"))]
    Pending,
    Sent,
}

fn main() {}
