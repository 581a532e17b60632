use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    // One transition is one statement: the same values on every source.
    #[transition(cancel -> Cancelled, set(reason = bind(String)))]
    #[transition(start -> Sending)]
    Pending,
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled, set(reason = bind(i64)))]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

fn main() {}
