//! What the derive generates, checked without a workflow around it: the
//! metadata, the expansion snapshot, the DDL and its golden files, the
//! drawn and written docs, and the compile errors of `tests/ui/`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

/// The payout enum of `examples/payouts`, which `docs` draws and whose
/// expansion `expand` compiles: one module, loaded once.
#[path = "../../examples/payouts/status.rs"]
mod status;

mod compile_errors;
mod ddl;
mod diagram;
mod docs;
mod expand;
mod metadata;
mod send;
mod serde_strings;
