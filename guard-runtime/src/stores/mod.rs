//! The fixed-table stores: idempotency keys for the requests a client may
//! retry ([`idempotency`]) and the consumer's inbox of messages already
//! handled ([`inbox`]).
//!
//! **Architecture Invariant:** each store's table has a fixed name, in the
//! connection's search path or in a schema named at compile time
//! ([`stores!`](crate::stores!)), so that every statement is a literal,
//! written by hand once (`schema.rs`, `concat!` puts the schema's quoted
//! name before each table name) beside its plan of `bind::Field`s, bound
//! by `bind::store_arguments` and held to its text by a unit test; no
//! value is ever formatted into one.
//!
//! **Architecture Invariant:** no connection is held while waiting for
//! another: a call that uses two pooled connections at once
//! (`idempotency::begin_tx`) takes the second only if it is idle now
//! (`Run::try_idle`).

pub mod idempotency;
pub mod inbox;
pub(crate) mod schema;
mod texts;

pub use self::schema::Stores;
