//! The behaviour tests against real databases, one module per feature:
//! each writes its test bodies once, generic over `TestBackend`, and runs
//! them on SQLite, PostgreSQL and MySQL/MariaDB (`backend_tests!`), or on
//! the one backend a behaviour is specific to.
//!
//! One binary, so that the harness in `tests/common` is compiled and the
//! tests are linked once. `cargo test --test backends transitions::` runs
//! one module; `cargo test --test backends postgres::` one backend.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod available;
mod bad_input;
mod binds;
mod claim;
mod claim_tx;
mod console;
mod consumer;
mod counts;
mod deadlines;
mod effects;
mod emit;
mod emit_key;
mod errors;
mod faults;
mod faults_history;
mod faults_stores;
mod finish_many;
mod front_deadlines;
mod galera;
mod guards;
mod history;
mod http_effect;
mod idempotency;
mod keys;
mod layer;
mod layer_failures;
mod leases;
mod limits;
mod many;
mod metrics;
mod mix_up;
mod multiplexed;
mod mysql;
mod mysql_index;
mod occurrence;
mod outbox;
mod outbox_table;
mod pooler;
mod race;
mod read_only;
mod retry;
mod session;
mod store_schema;
mod stored_occurrence;
mod tables;
mod tenant_keys;
mod tracing;
mod transactions;
mod transitions;
mod tx_deadline;
mod untagged;
mod verify;
mod wake;
mod worker;
