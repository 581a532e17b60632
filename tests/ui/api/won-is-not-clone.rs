use stateguard::{StateMachine, Won};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

// A win runs its effect once: it cannot be copied to run it twice.
fn twice(won: Won<PayoutStatus, i64>) -> (Won<PayoutStatus, i64>, Won<PayoutStatus, i64>) {
    (won.clone(), won)
}

fn main() {
    let _ = twice;
}
