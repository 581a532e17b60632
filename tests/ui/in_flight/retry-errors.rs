use stateguard::StateMachine;

// `retry` with only its maximum: every other part it needs is named.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum MissingParts {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail, retry(max = 8)))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

// Bad values, each on its own token.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum BadValues {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail,
        retry(max = 0, backoff = "2s", attempts = "bad name", next_attempt = "sending_since",
            last_error = "status")))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

// A backoff that shrinks, one column for both, and a column that is the
// status.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum Overlaps {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail,
        retry(max = 1001, backoff = "1h..2s", attempts = "tries", next_attempt = "TRIES",
            last_error = "Tries")))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

// A transition that writes a retry column itself.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum SetsAttempts {
    #[state(initial)]
    #[transition(start -> Sending, set(attempts = "0"))]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail,
        retry(max = 8, backoff = "2s..1h", attempts = "attempts", next_attempt = "retry_at",
            last_error = "why")))]
    #[transition(confirm -> Sent, set(why = "NULL"))]
    #[transition(fail -> Failed, set(retry_at = "NULL"))]
    Sending,
    Sent,
    Failed,
}

// Giving up runs `failed` with no verdict, so it cannot bind values.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum FailedBinds {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail,
        retry(max = 8, backoff = "2s..1h", attempts = "attempts", next_attempt = "retry_at")))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed, set(reason = bind(String)))]
    Sending,
    Sent,
    Failed,
}

// An option retry does not know, and one given twice.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum Unknown {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail,
        retry(max = 8, max = 9, backoff = "2s..1h", attempts = "attempts", next_attempt = "retry_at", jitter = "full")))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

fn main() {}
