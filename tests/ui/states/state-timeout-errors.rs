use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(hold -> Held)]
    #[transition(park -> Parked)]
    #[transition(wait -> Waiting)]
    Pending,
    // An in-flight state names its `since` inside `in_flight(…)`, and has a lease, not a timeout.
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail), since = "other_since", timeout = "1h")]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    // A timeout needs the column that says when the row entered the state.
    #[state(timeout = "1h")]
    #[transition(release -> Sent)]
    Held,
    // Not a duration.
    #[state(since = "parked_since", timeout = "tomorrow")]
    #[transition(unpark -> Sent)]
    Parked,
    // Not a column name.
    #[state(since = "waiting since")]
    #[transition(go -> Sent)]
    Waiting,
    Sent,
    Failed,
}

fn main() {}
