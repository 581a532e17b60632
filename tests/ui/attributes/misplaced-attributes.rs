use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
#[transition(start -> Sending)]
#[state(initial)]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[state_machine(table = "other")]
    Pending,
    Sending,
}

fn main() {}
