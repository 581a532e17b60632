use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled, set(cancelled_at = "CURRENT_TIMESTAMP"))]
    Pending,
    #[transition(confirm -> Sent)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    Cancelled,
}

fn main() {}
