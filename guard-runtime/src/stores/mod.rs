//! The fixed-table stores: idempotency keys for the requests a client may
//! retry ([`idempotency`]) and the consumer's inbox of messages already
//! handled ([`inbox`]).
//!
//! **Architecture Invariant:** each store's table has a fixed name
//! (`error::store`), so that every statement here is a literal written by
//! hand beside its plan of `bind::Field`s, bound by `bind::store_arguments`
//! and held to its text by a unit test; no value is ever formatted into one.
//!
//! **Architecture Invariant:** no connection is held while waiting for
//! another: a call that uses two pooled connections at once
//! (`idempotency::begin_tx`) takes the second only if it is idle now
//! (`Run::try_idle`).

pub mod idempotency;
pub mod inbox;
