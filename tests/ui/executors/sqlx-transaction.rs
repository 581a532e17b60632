use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

// A `sqlx::Transaction` is not an executor: its wins could not wait for
// its commit. Wrapped with `Tx::new`, it is.
async fn start(pool: sqlx::SqlitePool) -> Result<(), stateguard::Error> {
    let mut tx = pool.begin().await.map_err(|source| stateguard::Error::Begin { source })?;
    PayoutStatus::start().apply(&mut tx, 1_i64).await?;
    Ok(())
}

// A pool by value, not by reference.
async fn start_on_pool(pool: sqlx::SqlitePool) -> Result<(), stateguard::Error> {
    PayoutStatus::start().apply(pool, 1_i64).await?;
    Ok(())
}

fn main() {
    let _ = start;
    let _ = start_on_pool;
}
