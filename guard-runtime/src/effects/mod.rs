//! After the win: the side effect only the winner runs (`effect.rs`; a
//! closure that runs it is an `EffectFn`, `effect_fn.rs`; how it ended,
//! `finished.rs`), the lease an in-flight row is held by while it runs
//! (`lease.rs`), what the effect decided (`verdict.rs`) and the follow-up
//! that ends the state (`follow_up.rs`),
//! the effects of many wins under one heartbeat with batched follow-ups
//! (`finish_many/`, on the fenced batch statements of `fenced.rs`), the
//! recovery of rows whose worker died (`recovery/`), and a ready effect
//! that calls an HTTP endpoint with the effect key (`http.rs`, feature
//! `reqwest`).
//!
//! **Architecture Invariant:** an effect runs only from a committed
//! `Won`, and its effect key is computed from the row as stored (the state
//! entered and its occurrence), so the winner, a retry and a recovery all
//! name the same occurrence with the same key.
//!
//! **Architecture Invariant:** every move here is fenced by the lease
//! token: a worker whose lease ran out or was taken over holds a token the
//! row no longer has, and its follow-up matches nothing. Recovery takes a
//! row over only once its lease has run out.

pub(crate) mod calls;
pub(crate) mod effect;
pub(crate) mod effect_fn;
mod fenced;
pub(crate) mod finish_many;
pub(crate) mod finished;
pub(crate) mod follow_up;
#[cfg(feature = "reqwest")]
pub(crate) mod http;
pub(crate) mod lease;
pub(crate) mod recovery;
pub(crate) mod verdict;
