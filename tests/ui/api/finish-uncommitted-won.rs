use stateguard::{Outcome, StateMachine, Verdict};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "transfers", column = "status", key = "id")]
pub enum TransferStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

async fn send(pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = stateguard::Tx::begin(&pool).await?;
    if let Outcome::Applied(won) = TransferStatus::start().apply(&mut tx, 1_i64).await? {
        // The transaction has not committed: the effect must not run yet.
        let _ = won.finish(&pool, |_| async { Verdict::done() }).await;
    }
    tx.commit(()).await?;
    Ok(())
}

fn main() {
    let _ = send;
}
