//! What an effect is to the calls that run it: a closure from the row's
//! [`Effect`] to a future of its [`Verdict`], named by one bound.

use core::future::Future;

use crate::StateMachine;
use crate::effects::effect::Effect;
use crate::effects::verdict::Verdict;

/// The effect of one in-flight row of machine `S` with key `K`, for the
/// calls that run it on many rows ([`finish_many`](crate::finish_many),
/// [`recover`](crate::recover), [`recover_many`](crate::recover_many)):
/// any `Fn(Effect<S, K>) -> impl Future<Output = Verdict<S>>`, such as
/// `|effect| async move { … }`.
///
/// A blanket impl covers every such closure or function; nothing else
/// implements it. It is the effect's one bound in those calls'
/// signatures, as axum's `Handler` is a handler's, and the closure's
/// parameter is still inferred.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect of `{S}`'s rows",
    label = "an effect takes an `Effect<{S}, {K}>` and returns a future of a `Verdict<{S}>`",
    note = "write it as `|effect| async move {{ …; Verdict::done() }}`"
)]
pub trait EffectFn<S: StateMachine, K>: Fn(Effect<S, K>) -> Self::Future {
    /// What the effect returns: a future of its verdict.
    type Future: Future<Output = Verdict<S>>;
}

impl<S: StateMachine, K, F, Fut> EffectFn<S, K> for F
where
    F: Fn(Effect<S, K>) -> Fut,
    Fut: Future<Output = Verdict<S>>,
{
    type Future = Fut;
}

/// The effect of one win, for [`Won::finish`](crate::Won::finish), which
/// runs it once: any `FnOnce(Effect<S, K>) -> impl Future<Output =
/// Verdict<S>>`, such as `|effect| async move { … }`. See [`EffectFn`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect of `{S}`'s rows",
    label = "an effect takes an `Effect<{S}, {K}>` and returns a future of a `Verdict<{S}>`",
    note = "write it as `|effect| async move {{ …; Verdict::done() }}`"
)]
pub trait EffectFnOnce<S: StateMachine, K>: FnOnce(Effect<S, K>) -> Self::Future {
    /// What the effect returns: a future of its verdict.
    type Future: Future<Output = Verdict<S>>;
}

impl<S: StateMachine, K, F, Fut> EffectFnOnce<S, K> for F
where
    F: FnOnce(Effect<S, K>) -> Fut,
    Fut: Future<Output = Verdict<S>>,
{
    type Future = Fut;
}
