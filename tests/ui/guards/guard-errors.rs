use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    // A guard passes the same allow-list as `set` expressions.
    #[transition(start -> Sending, guard = "1 = 1; DELETE FROM payouts")]
    #[transition(cancel -> Cancelled, guard = "amount_cents < 100")]
    #[transition(hold -> Held, guard = "")]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    // A follow-up of an in-flight state must be able to move the row.
    #[transition(confirm -> Sent, guard = "amount_cents > 0")]
    #[transition(fail -> Failed)]
    // One transition is one statement: one guard everywhere.
    #[transition(cancel -> Cancelled, guard = "amount_cents < 500", supersedes_effect)]
    Sending,
    Held,
    Sent,
    Failed,
    Cancelled,
}

fn main() {}
