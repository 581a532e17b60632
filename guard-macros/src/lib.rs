//! The derive half of [stateguard](https://docs.rs/stateguard). Depend on
//! `stateguard`, which re-exports it.

#![forbid(unsafe_code)]

extern crate proc_macro;

mod ast;
mod attr;
mod case;
mod check;
mod ctxt;
mod ddl;
/// The state diagram, drawn into each machine's rustdoc: the runtime's
/// `docs/diagram/`, whose files this folder links to.
mod diagram;
mod dialect;
mod expand;
mod ident;
mod model;
mod plan;
mod sql;
mod sqltext;
mod stores;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Derives `stateguard::StateMachine`, the transition constructors, `Display`,
/// `FromStr` and the sqlx `Type`/`Encode`/`Decode` impls for a text column.
///
/// See the `stateguard` crate documentation for the attributes.
#[proc_macro_derive(StateMachine, attributes(state_machine, state, transition))]
pub fn derive_state_machine(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}

/// The runtime's `Stores` of the library's own tables: `(krate)` for those
/// the search path finds, `(krate, "schema")` for those in a schema. Used
/// by the runtime and by `stateguard::stores!`; not an API.
#[doc(hidden)]
#[proc_macro]
pub fn __store_statements(input: TokenStream) -> TokenStream {
    stores::expand(input.into()).into()
}

/// The catalog reads of `Machine::verify`, `(krate)`. Used by the
/// runtime; not an API.
#[doc(hidden)]
#[proc_macro]
pub fn __catalog_statements(input: TokenStream) -> TokenStream {
    stores::expand_catalog(input.into()).into()
}
