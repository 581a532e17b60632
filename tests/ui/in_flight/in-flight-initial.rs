use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial, in_flight(lease = "30s", since = "since", done = send, failed = drop_it))]
    #[transition(send -> Sent)]
    #[transition(drop_it -> Dropped)]
    Pending,
    Sent,
    Dropped,
}

fn main() {}
