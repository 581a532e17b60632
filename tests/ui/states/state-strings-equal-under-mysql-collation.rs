use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "reviews", column = "status", key = "id")]
pub enum ReviewStatus {
    #[state(initial)]
    #[transition(approve -> Approved)]
    #[transition(shout -> Shouted)]
    Pending,
    Approved,
    #[state(rename = "APPROVED ")]
    Shouted,
}

fn main() {}
