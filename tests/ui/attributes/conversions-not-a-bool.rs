// `conversions` takes `true` or `false`, not a string.
use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "t", column = "status", key = "id", conversions = "no")]
enum Status {
    #[state(initial)]
    #[transition(close -> Closed)]
    Open,
    Closed,
}

fn main() {}
