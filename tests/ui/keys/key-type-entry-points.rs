// A machine that declares its key's type takes keys of that type alone, on
// every call that takes one: a key of another type is refused at compile
// time, naming both types, where it used to fail at run time (or, on
// PostgreSQL, to decode the wrong bytes).
use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "payouts",
    column = "status",
    key = "id",
    key_type = "i64",
    history = "payout_history"
)]
enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

async fn calls(pool: &sqlx::SqlitePool) -> Result<(), stateguard::Error> {
    PayoutStatus::start().apply(pool, 2_i32).await?;
    PayoutStatus::start().apply_many(pool, &[15_i32, 16]).await?;
    PayoutStatus::start().apply(pool, "2").await?;
    PayoutStatus::MACHINE.load(pool, 2_u64).await?;
    PayoutStatus::available(pool, String::from("2")).await?;
    PayoutStatus::history(pool, 2_i16).await?;
    // An integer literal is of the declared type.
    PayoutStatus::start().apply(pool, 2).await?;
    Ok(())
}

fn main() {
    let _ = calls;
}
