use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, retries = 3))]
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

fn main() {}
