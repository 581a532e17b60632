// An effect written for keys of another type than the machine's declared
// `key_type` is refused where it is passed, naming both types.
use stateguard::{Effect, StateMachine, Verdict};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "transfers", column = "status", key = "id", key_type = "i64")]
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

async fn recover(pool: sqlx::SqlitePool) -> Result<(), stateguard::Error> {
    let effect = |effect: Effect<TransferStatus, String>| async move {
        let _ = effect.effect_key();
        Verdict::done()
    };
    stateguard::recover(&pool, TransferStatus::Sending, 10, effect).await?;
    Ok(())
}

fn main() {
    let _ = recover;
}
