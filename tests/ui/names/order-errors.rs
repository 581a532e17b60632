use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// A claim's order lists column names, not SQL.
#[state_machine(table = "a", column = "status", key = "id", order = "created_at DESC")]
pub enum Descending {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "a", column = "status", key = "id", order = "created_at, CREATED_AT")]
pub enum Twice {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

fn main() {}
