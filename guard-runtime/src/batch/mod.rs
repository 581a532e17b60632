//! Many rows at once: `apply_many` (one transition on many keys, one
//! winning statement and one read for the rest) and `claim` (a work queue
//! that hands out up to `n` rows, oldest first).
//!
//! **Architecture Invariant:** the sealed [`Batched`] trait, and the
//! `Batch`, `Claim`, `Found` and `Took` values its methods pass, live in
//! `batched.rs`,
//! which depends on neither `claim/` nor `many.rs`: `many.rs` calls it,
//! `claim/backends.rs` implements it per backend, and the statements both run are
//! in `run.rs`.
//!
//! **Architecture Invariant:** what runs a batch's and a claim's
//! statements knows no machine's type nor the values': it takes a
//! [`Batch`](batched::Batch) (the transition's names, deadline and
//! statements, and a closure that places a status text) and the values
//! erased for binding, and is generic over the backend and the key only.
//! It reports status texts (`Found`) and moved rows (`Took`); the entry
//! points in `many.rs` and `claim/` turn them into outcomes and wins.
//!
//! **Architecture Invariant:** a batch wins as one statement does: each
//! key gets exactly one outcome, in input order, and a claimer never gets
//! a row another claimer holds, nor waits for it.

pub(crate) mod batched;
mod claim;
pub(crate) mod many;
mod run;
