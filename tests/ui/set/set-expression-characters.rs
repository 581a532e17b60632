use stateguard::StateMachine;

// Characters that start no token of the allowed grammar.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum NoteStatus {
    #[state(initial)]
    #[transition(a -> Done, set(note = "1\u{0}"))]
    #[transition(b -> Done, set(note = "1 \u{2212} 1"))]
    #[transition(c -> Done, set(note = "flags & 1"))]
    #[transition(d -> Done, set(note = "other ~ 'x'"))]
    #[transition(e -> Done, set(note = "0x1F"))]
    #[transition(f -> Done, set(note = "notes.*"))]
    Open,
    Done,
}

fn main() {}
