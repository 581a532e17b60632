use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "transfers", column = "status", key = "tenant_id, id")]
pub enum Tenant {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum Single {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

async fn run(pool: sqlx::SqlitePool) {
    // A composite key takes one value per column, in a tuple.
    let _ = Tenant::start().apply(&pool, 7_i64).await;
    let _ = Tenant::start().apply(&pool, ("acme", 7_i64, 1_i64)).await;
    // A one-column key takes one value.
    let _ = Single::start().apply(&pool, (1_i64, 2_i64)).await;
    // Every part must be bindable.
    let _ = Tenant::start().apply(&pool, ("acme", vec![7_u8; 2].iter())).await;
}

fn main() {
    let _ = run;
}
