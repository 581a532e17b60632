use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
    #[transition(retry -> Sending)]
    Failed,
}

fn main() {}
