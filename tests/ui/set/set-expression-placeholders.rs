use stateguard::StateMachine;

// Placeholders and variables: values are bound by stateguard alone.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum NoteStatus {
    #[state(initial)]
    #[transition(a -> Done, set(note = "$2"))]
    #[transition(b -> Done, set(note = "?1"))]
    #[transition(c -> Done, set(note = ":note"))]
    #[transition(d -> Done, set(note = "other::text"))]
    #[transition(e -> Done, set(note = "@@version"))]
    Open,
    Done,
}

fn main() {}
