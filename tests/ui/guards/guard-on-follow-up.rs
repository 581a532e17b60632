use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    // A follow-up of an in-flight state must be able to move the row.
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, guard = "amount_cents > 0")]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

fn main() {}
