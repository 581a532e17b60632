use stateguard::StateMachine;

#[derive(StateMachine)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub union PayoutStatus {
    a: u8,
}

fn main() {}
