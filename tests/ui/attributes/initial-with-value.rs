use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial = true)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

fn main() {}
