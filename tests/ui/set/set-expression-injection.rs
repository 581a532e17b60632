use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id")]
pub enum NoteStatus {
    #[state(initial)]
    #[transition(close -> Closed, set(closed_at = "CURRENT_TIMESTAMP -- stamp it"))]
    #[transition(archive -> Archived, set(note = "'x'; DELETE FROM notes"))]
    #[transition(flag -> Flagged, set(flagged_by = "?"))]
    #[transition(pin -> Pinned, set(pinned = "(1 + 2"))]
    #[transition(tag -> Tagged, set(tag = "'unterminated"))]
    #[transition(mark -> Marked, set(mark = "$1"))]
    Open,
    Closed,
    Archived,
    Flagged,
    Pinned,
    Tagged,
    Marked,
}

fn main() {}
