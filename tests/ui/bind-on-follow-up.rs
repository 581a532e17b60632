use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    // A follow-up runs from `finish` and recovery, which have no values yet.
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

fn main() {}
