use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", rename_all = "lowercase")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> SentOut)]
    #[transition(skip -> Other)]
    Pending,
    SentOut,
    #[state(rename = "sentout")]
    Other,
}

fn main() {}
