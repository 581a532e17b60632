//! What an effect is told ([`Effect`]), and its shape: a closure from its
//! `Effect` to a future of its [`Verdict`] ([`EffectFn`],
//! [`EffectFnOnce`]). `calls.rs` adds what the database asks of the
//! machine and its key; [`Visit`] hands a body those bounds.

use core::future::Future;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::effects::verdict::{FollowUpValues, Verdict};
use crate::machine::key::{BatchKey, KeyType};

/// The shape of the effect of one in-flight row of machine `S` with key
/// `K`, run once per row: any `Fn(Effect<S, K>) -> impl Future<Output =
/// Verdict<S>>`, such as `|effect| async move { … }`.
///
/// A blanket impl covers every such closure or function; nothing else
/// implements it. The calls that run an effect name it through
/// [`FinishFn`](crate::FinishFn), which adds what the database asks of the machine and its
/// key; code that wraps an effect before any database is known (a
/// worker's `Rate::limit`) names this one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect of `{S}`'s rows",
    label = "an effect takes an `Effect<{S}, {K}>` and returns a future of a `Verdict<{S}>`",
    note = "write it as `|effect| async move {{ …; Verdict::done() }}`"
)]
pub trait EffectFn<S, K>: Fn(Effect<S, K>) -> Self::Future {
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

/// The shape of the effect of one win, run once: any `FnOnce(Effect<S, K>)
/// -> impl Future<Output = Verdict<S>>`, such as `|effect| async move { …
/// }`. [`Won::finish`](crate::Won::finish) names it through
/// [`FinishFnOnce`](crate::FinishFnOnce). See [`EffectFn`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an effect of `{S}`'s rows",
    label = "an effect takes an `Effect<{S}, {K}>` and returns a future of a `Verdict<{S}>`",
    note = "write it as `|effect| async move {{ …; Verdict::done() }}`"
)]
pub trait EffectFnOnce<S, K>: FnOnce(Effect<S, K>) -> Self::Future {
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

/// A body that needs what [`FinishFn`](crate::FinishFn) stands for: `visit` runs with
/// those bounds in scope.
#[doc(hidden)]
pub trait Visit<S, K, DB: Backend> {
    /// What the body returns.
    type Output;

    /// The body.
    fn visit(self) -> Self::Output
    where
        S: FollowUpValues<DB> + KeyType<K>,
        K: BatchKey<S, DB>;
}

/// What an effect is told: which row, which state, and the key to make the
/// external call idempotent with.
#[derive(Debug, Clone)]
pub struct Effect<S, K> {
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
