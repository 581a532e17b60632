use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "pay outs", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(fail -> Nowhere)]
    Pending,
    #[state(rename = "it's sending")]
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

fn main() {}
