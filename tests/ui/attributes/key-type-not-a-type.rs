// `key_type` names a Rust type.
use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "t", column = "status", key = "id", key_type = "i64 i64")]
enum Status {
    #[state(initial)]
    #[transition(close -> Closed)]
    Open,
    Closed,
}

fn main() {}
