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
    let mut tx = stateguard::Tx::begin(&pool).await?;
    if let Outcome::Applied(won) = PayoutStatus::start().apply(&mut tx, 1_i64).await? {
        // The transaction has not committed: the effect must not run yet.
        won.run(|_| async {}).await;
    }
    tx.commit(()).await?;
    Ok(())
}

fn main() {
    let _ = send;
}
