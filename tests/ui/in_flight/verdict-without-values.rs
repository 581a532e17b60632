use stateguard::{Effect, Outcome, StateMachine, Verdict};

// `confirm` stores the bank's reference; `decline` stores the reason.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "transfers", column = "status", key = "id")]
pub enum Wire {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = decline))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(decline -> Failed, set(reason = bind(String)))]
    Sending,
    Sent,
    Failed,
}

// Only `done` binds a value: `Verdict::failed()` is fine, `done()` is not.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum Payout {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

async fn send(pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
    if let Outcome::Applied(won) = Wire::start().apply(&pool, 1_i64).await? {
        // The bank's reference would be lost: the follow-up writes it.
        let _ = won.finish(&pool, |_: Effect<Wire, i64>| async { Verdict::done() }).await;
    }
    if let Outcome::Applied(won) = Wire::start().apply(&pool, 2_i64).await? {
        let _ = won.finish(&pool, |_: Effect<Wire, i64>| async { Verdict::failed() }).await;
    }
    if let Outcome::Applied(won) = Payout::start().apply(&pool, 3_i64).await? {
        let _ = won.finish(&pool, |_: Effect<Payout, i64>| async { Verdict::failed() }).await;
    }
    if let Outcome::Applied(won) = Payout::start().apply(&pool, 4_i64).await? {
        let _ = won.finish(&pool, |_: Effect<Payout, i64>| async { Verdict::done() }).await;
    }
    Ok(())
}

fn main() {
    let _ = send;
}
