//! The wins that [`Tx::commit`](super::Tx::commit) and
//! [`Savepoint::release`](super::Savepoint::release) take: one win, a tuple,
//! a `Vec`, an `Option` of them, or `()`.

use crate::StateMachine;
use crate::outcome::{Committed, Uncommitted, Won};

/// Wins from inside a transaction: one [`Won<S, K, Uncommitted>`], a tuple
/// of up to four, a `Vec` or an `Option` of them, or `()`.
pub trait Staged: sealed::Sealed {
    /// The same wins, committed.
    type Committed;
}

pub(crate) mod sealed {
    pub trait Sealed {}

    /// Out of reach of callers: only [`Tx::commit`](crate::Tx::commit) may
    /// turn uncommitted wins into committed ones, and only
    /// [`Savepoint::release`](crate::Savepoint::release) may move them to
    /// another scope.
    pub trait Convert: super::Staged + Sized {
        /// Whether every win was won in `scope`.
        fn all_in(&self, scope: u64) -> bool;
        fn rescope(self, scope: u64) -> Self;
        fn into_committed(self) -> Self::Committed;
    }
}

impl<S: StateMachine, K> sealed::Sealed for Won<S, K, Uncommitted> {}

impl<S: StateMachine, K> Staged for Won<S, K, Uncommitted> {
    type Committed = Won<S, K, Committed>;
}

impl<S: StateMachine, K> sealed::Convert for Won<S, K, Uncommitted> {
    fn all_in(&self, scope: u64) -> bool {
        self.scope() == scope
    }

    fn rescope(self, scope: u64) -> Self {
        Won::rescope(self, scope)
    }

    fn into_committed(self) -> Self::Committed {
        Won::rescope(self, 0)
    }
}

impl sealed::Sealed for () {}

impl Staged for () {
    type Committed = ();
}

impl sealed::Convert for () {
    fn all_in(&self, _: u64) -> bool {
        true
    }

    fn rescope(self, _: u64) -> Self {}

    fn into_committed(self) -> Self::Committed {}
}

impl<T: Staged> sealed::Sealed for Vec<T> {}

impl<T: Staged> Staged for Vec<T> {
    type Committed = Vec<T::Committed>;
}

impl<T: sealed::Convert> sealed::Convert for Vec<T> {
    fn all_in(&self, scope: u64) -> bool {
        self.iter().all(|t| t.all_in(scope))
    }

    fn rescope(self, scope: u64) -> Self {
        self.into_iter().map(|t| t.rescope(scope)).collect()
    }

    fn into_committed(self) -> Self::Committed {
        self.into_iter()
            .map(sealed::Convert::into_committed)
            .collect()
    }
}

impl<T: Staged> sealed::Sealed for Option<T> {}

impl<T: Staged> Staged for Option<T> {
    type Committed = Option<T::Committed>;
}

impl<T: sealed::Convert> sealed::Convert for Option<T> {
    fn all_in(&self, scope: u64) -> bool {
        self.as_ref().is_none_or(|t| t.all_in(scope))
    }

    fn rescope(self, scope: u64) -> Self {
        self.map(|t| t.rescope(scope))
    }

    fn into_committed(self) -> Self::Committed {
        self.map(sealed::Convert::into_committed)
    }
}

macro_rules! staged_tuple {
    ($($t:ident),+) => {
        impl<$($t: Staged),+> sealed::Sealed for ($($t,)+) {}

        impl<$($t: Staged),+> Staged for ($($t,)+) {
            type Committed = ($($t::Committed,)+);
        }

        #[allow(non_snake_case)]
        impl<$($t: sealed::Convert),+> sealed::Convert for ($($t,)+) {
            fn all_in(&self, scope: u64) -> bool {
                let ($($t,)+) = self;
                true $(&& $t.all_in(scope))+
            }

            fn rescope(self, scope: u64) -> Self {
                let ($($t,)+) = self;
                ($($t.rescope(scope),)+)
            }

            fn into_committed(self) -> Self::Committed {
                let ($($t,)+) = self;
                ($(sealed::Convert::into_committed($t),)+)
            }
        }
    };
}

staged_tuple!(A, B);
staged_tuple!(A, B, C);
staged_tuple!(A, B, C, D);
