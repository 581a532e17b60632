use stateguard::{Outcome, StateMachine};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

async fn send(pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
    match PayoutStatus::start().apply(&pool, 1_i64).await? {
        Outcome::Applied(won) => won.run(|_| async {}).await,
        // A replay holds no token: there is nothing to run the effect with.
        Outcome::AlreadyInState(state) => state.run(|_| async {}).await,
        Outcome::Conflict { current } => current.run(|_| async {}).await,
        Outcome::NotFound | Outcome::Stale { .. } | Outcome::Refused { .. } => {}
    }
    Ok(())
}

fn main() {
    let _ = send;
}
