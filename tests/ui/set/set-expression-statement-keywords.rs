use stateguard::StateMachine;

// A `set` value is one expression of the row: no subquery, no clause of
// the surrounding statement, even inside balanced parentheses.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum NoteStatus {
    #[state(initial)]
    #[transition(a -> Done, set(note = "(SELECT max(id) FROM notes)"))]
    #[transition(b -> Done, set(note = "(1) WHERE (1 = 1)"))]
    #[transition(c -> Done, set(note = "1 RETURNING id"))]
    #[transition(d -> Done, set(note = "(1 union all values (2))"))]
    Open,
    Done,
}

fn main() {}
