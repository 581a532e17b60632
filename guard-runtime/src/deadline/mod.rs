//! How long a call may take and how often it tries: the deadline every
//! public async call keeps ([`call`] for the front doors, claims, loads and
//! history reads), and the bounded, jittered retries of autocommit
//! statements ([`retry`]).
//!
//! **Architecture Invariant:** every public async call returns within a
//! deadline a caller can set, [`DEFAULT_DEADLINE`](retry::DEFAULT_DEADLINE)
//! unless told otherwise, with an error that says whether a write was in
//! flight when it ran out ([`call::Sent`]).
//!
//! **Architecture Invariant:** this folder depends on nothing but the
//! error type; the compare-and-set, the executors and the stores all read
//! their deadline and their retry budget from here.

pub(crate) mod call;
pub(crate) mod retry;
