use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum MissingParts {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight())]
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum BadValues {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(skip -> Sent)]
    Pending,
    #[state(in_flight(lease = "soon", since = "status", done = skip, failed = confirm))]
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum ZeroLease {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "0s", since = "sending_since", done = confirm))]
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum SetsSince {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm))]
    #[transition(confirm -> Sent, set(sending_since = "NULL"))]
    Sending,
    Sent,
}

fn main() {}
