use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    #[state(rename = "sent') OR 1=1 --")]
    Sent,
}

fn main() {}
