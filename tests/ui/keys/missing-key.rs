use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

fn main() {}
