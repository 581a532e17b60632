use stateguard::{StateMachine, Won};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

fn main() {
    let forged: Won<PayoutStatus, i64> = Won::new(PayoutStatus::Sending, 1, 0, 0, 0);
    let _ = forged;
}
