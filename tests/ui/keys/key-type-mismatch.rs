// A machine that declares its key's type reads its rows' keys back as
// that type: a claim that names another is refused.
use stateguard::{StateMachine, Won};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64")]
enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

async fn claim(pool: &sqlx::SqlitePool) -> Result<Vec<Won<PayoutStatus, String>>, stateguard::Error> {
    PayoutStatus::start().claim(pool, 10).await
}

fn main() {
    let _ = claim;
}
