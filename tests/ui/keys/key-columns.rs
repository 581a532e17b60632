use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// A column listed twice.
#[state_machine(table = "a", column = "status", key = "tenant_id, TENANT_ID")]
pub enum Twice {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// An empty column name.
#[state_machine(table = "a", column = "status", key = "tenant_id, ")]
pub enum Empty {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// Not a column name.
#[state_machine(table = "a", column = "status", key = "tenant_id, id; DROP TABLE a")]
pub enum NotAName {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// More columns than a key has.
#[state_machine(table = "a", column = "status", key = "a, b, c, d, e")]
pub enum TooMany {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
// A key column is the status column, or the version column, or written by `set`.
#[state_machine(table = "a", column = "status", key = "tenant_id, status")]
pub enum StatusInKey {
    #[state(initial)]
    #[transition(go -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "a", column = "status", key = "tenant_id, id", version = "tenant_id")]
pub enum VersionInKey {
    #[state(initial)]
    #[transition(go -> B, set(id = "id + 1"))]
    A,
    B,
}

fn main() {}
