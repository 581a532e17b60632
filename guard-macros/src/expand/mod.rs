//! Code generation: what `#[derive(StateMachine)]` writes for an enum
//! whose [`Model`] passed every check, or stubs after an error.
//!
//! - `machine.rs`: the `MACHINE` constant's block, the machine's metadata
//!   with its states and transitions.
//! - `impls.rs`: the items beside the `StateMachine` impl, the transition
//!   constructors first.
//! - `statement.rs`: each statement as literals per dialect, and the DDL.
//! - `docs.rs`: the constructors' rustdoc.
//! - `fallback.rs`: the stubs after a derive error.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::DeriveInput;
use syn::ext::IdentExt;

use crate::ast::Input;
use crate::check;
use crate::ctxt::Ctxt;
use crate::dialect::{DIALECTS, Dialect};
use crate::model::Model;

mod docs;
mod fallback;
mod impls;
mod machine;
mod statement;
#[cfg(test)]
mod tests;

use fallback::fallback;
use statement::sql_per_dialect;

/// `#[derive(StateMachine)]` on `node`: the expansion, or the errors with
/// stubs that keep them from multiplying.
pub fn derive(node: &DeriveInput) -> TokenStream {
    let mut cx = Ctxt::default();
    let model = Input::from_syn(&mut cx, node)
        .as_ref()
        .and_then(|input| check::check(&mut cx, input).map(|model| expand(input, &model)));
    match (cx.finish(), model) {
        (Ok(()), Some(tokens)) => tokens,
        (Err(errors), _) => {
            let mut tokens = errors.into_compile_error();
            tokens.extend(fallback(node));
            tokens
        }
        // Validation produced no model without reporting why; say so
        // rather than expanding to nothing.
        (Ok(()), None) => {
            syn::Error::new_spanned(&node.ident, "StateMachine: invalid input").into_compile_error()
        }
    }
}

/// What every part of the expansion reads: the enum, its model, and the
/// paths by which the generated code names the runtime.
struct Gen<'a> {
    /// The enum as parsed, for its visibility and attributes.
    input: &'a Input<'a>,
    /// The machine its checks built.
    model: &'a Model<'a>,
    /// The `stateguard` crate: `crate = "…"`, by default `::stateguard`.
    krate: TokenStream,
    /// `#krate::__private`: the runtime's hidden items.
    private: TokenStream,
    /// How the `MACHINE` block names `private`: `__sg` where `short`,
    /// else the full path.
    sg: TokenStream,
    /// Inside the `MACHINE` block the metadata names the runtime's hidden
    /// items through a short alias, and `Option`'s variants bare, so that
    /// it reads as a description of the machine. An enum named like one of
    /// those keeps the full paths.
    short: bool,
}

impl<'a> Gen<'a> {
    /// The parts' context for `model`, checked from `input`.
    fn new(input: &'a Input<'a>, model: &'a Model<'a>) -> Self {
        let krate = match &input.attrs.krate {
            Some(path) => quote!(#path),
            None => quote!(::stateguard),
        };
        let private = quote!(#krate::__private);
        let short = !matches!(
            model.ident.unraw().to_string().as_str(),
            "None" | "Some" | "__sg"
        );
        let sg = match short {
            true => quote!(__sg),
            false => private.clone(),
        };
        Gen {
            input,
            model,
            krate,
            private,
            sg,
            short,
        }
    }

    /// `Some(value)` or `None`, as tokens of a constant: bare where the
    /// block is `short`.
    fn option(&self, value: Option<TokenStream>) -> TokenStream {
        match (value, self.short) {
            (Some(value), true) => quote!(Some(#value)),
            (None, true) => quote!(None),
            (Some(value), false) => quote!(::core::option::Option::Some(#value)),
            (None, false) => quote!(::core::option::Option::None),
        }
    }

    /// `sql! { … }`: the statement `build` writes, for each dialect that
    /// has it.
    fn sql(&self, build: impl Fn(Dialect) -> String) -> TokenStream {
        sql_per_dialect(&self.sg, build)
    }

    /// `Some(sql! { … })`, or `None` where no dialect has the statement.
    fn sql_if_any(&self, build: impl Fn(Dialect) -> String) -> TokenStream {
        let any = DIALECTS.iter().any(|d| !build(*d).is_empty());
        self.option(any.then(|| self.sql(&build)))
    }
}

/// The derive's output for a checked enum: the `StateMachine` impl, whose
/// `MACHINE` is the block `machine.rs` writes, and the items `impls.rs`
/// writes beside it.
fn expand(input: &Input, model: &Model) -> TokenStream {
    let g = Gen::new(input, model);
    let (krate, private, ident) = (&g.krate, &g.private, model.ident);
    let key_shape = match model.key.len() {
        1 => format_ident!("One"),
        2 => format_ident!("Two"),
        3 => format_ident!("Three"),
        _ => format_ident!("Four"),
    };
    let idents: Vec<_> = model.states.iter().map(|s| s.ident).collect();
    let dbs: Vec<_> = model.states.iter().map(|s| s.db.as_str()).collect();

    let machine = g.machine();
    let follow_up_values = g.follow_up_values();
    let column_types = g.column_types();
    let plain_verdicts = g.plain_verdicts();
    let has_history = g.has_history();
    let has_version = g.has_version();
    let key_type = g.key_type();
    let constructors = g.constructors();
    let text = g.text();

    quote! {
        #[automatically_derived]
        impl #krate::StateMachine for #ident {
            type KeyShape = #krate::key::shape::#key_shape;

            const MACHINE: &'static #private::Machine<Self> = #machine;

            #[inline]
            fn as_str(self) -> &'static str {
                match self {
                    #(#ident::#idents => #dbs,)*
                }
            }

            #[inline]
            fn from_db_str(value: &str) -> ::core::option::Option<Self> {
                match value {
                    #(#dbs => ::core::option::Option::Some(#ident::#idents),)*
                    _ => ::core::option::Option::None,
                }
            }
        }

        #follow_up_values
        #column_types
        #plain_verdicts

        #has_history

        #has_version

        #key_type

        #constructors

        #text
    }
}
