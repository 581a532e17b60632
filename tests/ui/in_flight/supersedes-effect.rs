use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    // Not in flight: nothing to supersede.
    #[transition(cancel -> Cancelled, supersedes_effect)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    // The effect's own verdict supersedes nothing.
    #[transition(confirm -> Sent, supersedes_effect)]
    #[transition(fail -> Failed)]
    // Leaves the state while the bank call may be running, unannounced.
    #[transition(cancel -> Cancelled)]
    #[transition(pause -> Pending)]
    // Announced: accepted.
    #[transition(hold -> Held, supersedes_effect)]
    Sending,
    #[transition(release -> Pending, supersedes_effect, supersedes_effect)]
    Held,
    Sent,
    Failed,
    Cancelled,
}

fn main() {}
