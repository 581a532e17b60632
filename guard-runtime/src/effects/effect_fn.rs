//! What an effect is told ([`Effect`]), and what it is to the calls that
//! run it: a closure from its `Effect` to a future of its [`Verdict`],
//! named by one bound.

use core::future::Future;

use crate::StateMachine;
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

/// What an effect is told: which row, which state, and the key to make the
/// external call idempotent with.
#[derive(Debug, Clone)]
pub struct Effect<S: StateMachine, K> {
    state: S,
    key: K,
    occurrence: i64,
    effect_key: String,
    attempt: Option<u32>,
}

impl<S: StateMachine, K> Effect<S, K> {
    pub(crate) fn new(
        state: S,
        key: K,
        occurrence: i64,
        effect_key: String,
        attempt: Option<u32>,
    ) -> Self {
        Effect {
            state,
            key,
            occurrence,
            effect_key,
            attempt,
        }
    }

    /// Which attempt at the effect this is, where the state counts them
    /// (`retry(…)`): 1 for the win's own, then one more for each
    /// recovery that took the row over. See [`Won::attempt`](crate::Won::attempt).
    pub fn attempt(&self) -> Option<u32> {
        self.attempt
    }

    /// The key of the row.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The state the win moved the row into.
    pub fn state(&self) -> S {
        self.state
    }

    /// See [`Won::occurrence`](crate::Won::occurrence).
    pub fn occurrence(&self) -> i64 {
        self.occurrence
    }

    /// The idempotency key to send with the external call (an HTTP
    /// `Idempotency-Key` header, a message id). See [`Won::effect_key`](crate::Won::effect_key).
    pub fn effect_key(&self) -> &str {
        &self.effect_key
    }
}
