use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "jobs", column = "state", key = "id")]
pub enum JobState {
    #[state(initial)]
    #[transition(claim -> Running)]
    Queued,
    #[transition(requeue -> Queued)]
    #[transition(finish -> Done)]
    Running,
    Done,
}

fn main() {}
