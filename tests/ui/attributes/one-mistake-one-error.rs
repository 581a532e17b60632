use stateguard::StateMachine;

// One mistake (an unknown target) is one error: the constructors keep the
// arguments they declare, so the calls below do not fail as well, and the
// machine and its transitions are still there in a `const`.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending, guard("amount_cents <= :limit", limit = bind(i64)))]
    Pending,
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failedd)]
    Sending,
    Sent,
    Failed,
}

const FAIL: stateguard::Transition<PayoutStatus> = PayoutStatus::fail();
const NAME: &str = <PayoutStatus as StateMachine>::MACHINE.name();

fn main() {
    let _ = (FAIL, NAME);
    let _ = PayoutStatus::start(95_000);
    let _ = PayoutStatus::confirm("ref-1".to_owned());
    let _ = PayoutStatus::fail();
}
