use stateguard::StateMachine;

// Comments, terminators and escapes that end or hide part of the statement.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum NoteStatus {
    #[state(initial)]
    #[transition(a -> Done, set(note = "1--1"))]
    #[transition(b -> Done, set(note = "1 /* no */"))]
    #[transition(c -> Done, set(note = "1 # no"))]
    #[transition(d -> Done, set(note = "1; DELETE FROM notes"))]
    #[transition(e -> Done, set(note = "{fn NOW()}"))]
    Open,
    Done,
}

fn main() {}
