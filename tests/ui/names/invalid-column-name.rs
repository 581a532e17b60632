use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "1status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "refunds", column = "status\" = 1 --", key = "id")]
pub enum RefundStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

fn main() {}
