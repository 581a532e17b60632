//! The operators' console (feature `console`): an axum `Router` that a
//! service mounts under a path of its choosing, behind its own
//! authentication, and that shows the machines it is given.
//!
//! Its first page is the overview: each machine's diagram
//! ([`docs::svg`](crate::docs::svg))
//! beside the rows in each state, read with [`Machine::counts`], one
//! statement per machine, each count stopping past
//! [`COUNT_CAP`](crate::COUNT_CAP).
//!
//! **Architecture Invariant:** every page is server-rendered HTML that
//! works without JavaScript, every value in it is escaped by the
//! templates (`maud`), no SQL is built from a request, and every read is
//! a statement the derive wrote, bounded by a deadline and a row limit.
//!
//! [`Machine::counts`]: crate::meta::Machine::counts
//!
//! Feature `console`; without it the module is empty.

#[cfg(feature = "console")]
mod pages;

#[cfg(feature = "console")]
pub use self::pages::*;
