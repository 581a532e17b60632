use stateguard::StateMachine;

/// Not a type sqlx can bind.
#[derive(Debug)]
pub struct Reference(pub Vec<u8>);

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(cancel -> Cancelled, set(reason = bind(Reference)))]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(Reference)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

async fn run(pool: sqlx::SqlitePool) -> Option<()> {
    // The values must be bindable on the pool's database.
    let _ = PayoutStatus::cancel(Reference(vec![1])).apply(&pool, 1_i64).await;
    Some(())
}

fn main() {
    let _ = run;
}
