use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "pay outs", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts; drop table payouts", column = "status", key = "id")]
pub enum RefundStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "a.b.c", column = "status", key = "id")]
pub enum InvoiceStatus {
    #[state(initial)]
    #[transition(start -> Sent)]
    Pending,
    Sent,
}

fn main() {}
