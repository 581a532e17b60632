use stateguard::StateMachine;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum PayoutStatus<T> {
    #[state(initial)]
    #[transition(start -> Sent)]
    #[transition(other -> Other)]
    Pending,
    Sent,
    Other(core::marker::PhantomData<T>),
}

fn main() {}
