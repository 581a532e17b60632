//! Many rows at once: `apply_many` (one transition on many keys, one
//! winning statement and one read for the rest) and `claim` (a work queue
//! that hands out up to `n` rows, oldest first).
//!
//! **Architecture Invariant:** the sealed [`Batched`] trait, and the
//! `Claim` and `Found` values its methods pass, live in `batched.rs`,
//! which depends on neither `claim.rs` nor `many.rs`: `many.rs` calls it,
//! `claim.rs` implements it per backend, and the statements both run are
//! in `run.rs`.
//!
//! **Architecture Invariant:** a batch wins as one statement does: each
//! key gets exactly one outcome, in input order, and a claimer never gets
//! a row another claimer holds, nor waits for it.

pub(crate) mod batched;
mod claim;
pub(crate) mod many;
mod run;
