use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "requests", column = "status", key = "id")]
pub enum Request {
    #[state(initial)]
    // The condition reads a parameter it does not declare.
    #[transition(approve -> Approved, guard("requested_by <> :approver"))]
    // A declared parameter the condition never reads.
    #[transition(hold -> Held, guard("amount_cents > 0", limit = bind(i64)))]
    // Parameters read in another order than declared (MySQL binds by position).
    #[transition(close -> Closed, guard("a < :low AND b > :high", high = bind(i64), low = bind(i64)))]
    // A name the `set` already binds.
    #[transition(reject -> Rejected, set(reason = bind(String)), guard("reason <> :reason", reason = bind(String)))]
    // A `set` expression cannot hold a parameter.
    #[transition(park -> Parked, set(note = ":note"))]
    // A guard parameter is a bound value, nothing else.
    #[transition(drop -> Dropped, guard("a < :x", x = "1"))]
    Open,
    Approved,
    Held,
    Closed,
    Rejected,
    Parked,
    Dropped,
}

fn main() {}
