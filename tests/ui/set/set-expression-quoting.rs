use stateguard::StateMachine;

// Quoting a backend reads its own way: each would let the text end
// somewhere else than it seems to.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum NoteStatus {
    #[state(initial)]
    // PostgreSQL dollar quoting (issue 8).
    #[transition(a -> Done, set(note = "$$'$$) WHERE $1 IS NOT NULL OR true --'"))]
    // SQLite bracket quoting (issue 8).
    #[transition(b -> Done, set(note = "CAST(1 AS [']) ) WHERE 1 --')"))]
    #[transition(c -> Done, set(note = "\"other\""))]
    #[transition(d -> Done, set(note = "`other`"))]
    #[transition(e -> Done, set(note = "'a\\' || other"))]
    #[transition(f -> Done, set(note = "E'x'"))]
    #[transition(g -> Done, set(note = "'$1'"))]
    Open,
    Done,
}

fn main() {}
