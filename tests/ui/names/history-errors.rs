use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// Not a table name.
#[state_machine(table = "payouts", column = "status", key = "id", history = "payout history")]
pub enum NotAName {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// The history needs a table of its own.
#[state_machine(table = "payouts", column = "status", key = "id", history = "PAYOUTS")]
pub enum SameTable {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// A key column named like one of the history's own columns.
#[state_machine(table = "payouts", column = "status", key = "transition", history = "payout_history")]
pub enum KeyClash {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

fn main() {}
