use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version", outbox = "payouts")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(send -> Sent, emit("payout.sent"))]
    Pending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "orders", column = "status", key = "id", version = "version", outbox = "out box")]
pub enum OrderStatus {
    #[state(initial)]
    #[transition(ship -> Shipped, emit("order.shipped"))]
    Open,
    Shipped,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "refunds", column = "status", key = "id", version = "version", outbox = "billing.refund_events")]
pub enum RefundStatus {
    #[state(initial)]
    #[transition(pay -> Paid, emit("refund.paid"))]
    Open,
    Paid,
}

fn main() {}
