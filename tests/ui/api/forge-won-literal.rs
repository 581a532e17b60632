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
    let literal: Won<PayoutStatus, i64> = Won {
        state: PayoutStatus::Sending,
        key: 1,
        occurrence: 0,
        lease: 0,
        scope: 0,
        deadline: Default::default(),
        commit: Default::default(),
    };
    let _ = literal;
}
