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

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum Note {
    #[state(initial)]
    // Seven values are one more than a transition binds.
    #[transition(close -> Closed, set(a = bind(i64), b = bind(i64), c = bind(i64), d = bind(i64), e = bind(i64), f = bind(i64), g = bind(i64)))]
    Open,
    Closed,
}

fn main() {}
