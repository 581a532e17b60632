use stateguard::{Note, StateMachine, Verdict};

// No `history = "…"`: nowhere to record a note.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled, set(reason = bind(String)))]
    Pending,
    #[state(in_flight(lease = "1m", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

fn main() {
    let _ = PayoutStatus::start().noted(Note::by("alice"));
    let _ = PayoutStatus::cancel("duplicate".to_owned()).noted(Note::by("alice"));
    let _ = Verdict::from(PayoutStatus::fail().noted(Note::by("bank")));
}
