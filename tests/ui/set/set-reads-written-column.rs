use stateguard::StateMachine;

// MySQL applies assignments left to right: a `set` expression may read its
// own column, not another column the same UPDATE writes.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "jobs", column = "status", key = "id", version = "version")]
pub enum JobStatus {
    #[state(initial)]
    #[transition(swap -> Swapped, set(a = "b", b = "A + 1"))]
    #[transition(remember -> Remembered, set(previous = "jobs.STATUS"))]
    #[transition(count -> Counted, set(seen = "version * 2"))]
    #[transition(run -> Running, set(started = "COALESCE(running_since, started)"))]
    // Its own column, words that only look like columns, and the columns
    // the transition does not write, are all fine.
    #[transition(retry -> Retried, set(attempts = "attempts + 1", note = "CAST('status' AS CHAR)"))]
    Queued,
    Swapped,
    Remembered,
    Counted,
    #[state(in_flight(lease = "30s", since = "running_since", done = finish, failed = fail))]
    #[transition(finish -> Finished, set(took = "running_since"))]
    #[transition(fail -> Retried)]
    Running,
    Finished,
    Retried,
}

fn main() {}
