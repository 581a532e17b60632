use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[transition(confirm -> Sent)]
    #[transition(cancel -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

fn main() {}
