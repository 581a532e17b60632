//! The examples under test: the recovery workflow killed over and over
//! (`examples/recovery/workflow.rs`), and the payout HTTP service
//! (`examples/payouts_api`) driven over real HTTP and killed mid-request.
//!
//! Apart from `backends`, because these tests spawn processes (this very
//! binary, re-run as a crash child, and the example's own binary).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod bank_crash;
mod crash;
mod outbox_crash;
mod outbox_loop;
mod outbox_rabbitmq;
mod payouts_api;
mod payouts_api_crash;
