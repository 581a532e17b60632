use stateguard::StateMachine;

// No `version = "…"`: a row has no occurrence to expect.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled, set(reason = bind(String)))]
    Pending,
    Sending,
    Cancelled,
}

fn main() {
    let _ = PayoutStatus::start().expecting(3);
    let _ = PayoutStatus::cancel("duplicate".to_owned()).expecting(3);
}
