//! Each statement as generated code: one literal per dialect, with its
//! bind plan and result columns, kept by the runtime only where the
//! dialect's backend is on; and the enforcement DDL.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ddl::{self, DdlText};
use crate::dialect::{DIALECTS, Dialect};
use crate::model::Model;
use crate::plan::{self, Col, Rendered, Slot};

/// `sql(postgres, sqlite, mysql)`: one statement per dialect, each a
/// literal with its bind plan (`plan.rs`).
pub(super) fn sql_per_dialect(
    private: &TokenStream,
    build: impl Fn(Dialect) -> String,
) -> TokenStream {
    let [pg, lite, my] = DIALECTS.map(|d| match plan::render(d, &build(d)) {
        // Kept by the runtime only where the dialect's backend is on.
        Ok(Rendered {
            text,
            plan,
            returns,
        }) => {
            let binds = plan.iter().map(|slot| bind(private, *slot));
            let columns = returns.iter().map(|col| column(private, *col));
            let kept = format_ident!("{}", d.name());
            quote! {
                #private::#kept!(#private::statement(#text, &[#(#binds),*], &[#(#columns),*]))
            }
        }
        // A builder that wrote a placeholder of its own: a bug here, said
        // at the derive rather than at run time.
        Err(message) => {
            let message = format!("stateguard: a generated statement is malformed: {message}");
            quote!(::core::compile_error!(#message))
        }
    });
    quote!(#private::sql(#pg, #lite, #my))
}

/// The runtime's `Column` for `col`.
pub(super) fn column(private: &TokenStream, col: Col) -> TokenStream {
    let column = quote!(#private::Column);
    match col {
        Col::Key(n) => {
            let n = proc_macro2::Literal::u8_unsuffixed(n);
            quote!(#column::Key(#n))
        }
        Col::Status => quote!(#column::Status),
        Col::Version => quote!(#column::Version),
        Col::Meets => quote!(#column::Meets),
        Col::Token => quote!(#column::Token),
        Col::Transition => quote!(#column::Transition),
        Col::From => quote!(#column::From),
        Col::To => quote!(#column::To),
        Col::At => quote!(#column::At),
        Col::Actor => quote!(#column::Actor),
        Col::Reason => quote!(#column::Reason),
        Col::Details => quote!(#column::Details),
    }
}

/// The runtime's `Bind` for `slot`.
pub(super) fn bind(private: &TokenStream, slot: Slot) -> TokenStream {
    let bind = quote!(#private::Bind);
    let column = |n: u8| proc_macro2::Literal::u8_unsuffixed(n);
    match slot {
        Slot::Keys(n) => {
            let n = column(n);
            quote!(#bind::Keys(#n))
        }
        Slot::Key(n) => {
            let n = column(n);
            quote!(#bind::Key(#n))
        }
        Slot::Value(n) => {
            let n = column(n);
            quote!(#bind::Value(#n))
        }
        Slot::Age => quote!(#bind::Age),
        Slot::Expected => quote!(#bind::Expected),
        Slot::Token => quote!(#bind::Token),
        Slot::Limit => quote!(#bind::Limit),
        Slot::Actor => quote!(#bind::Actor),
        Slot::Reason => quote!(#bind::Reason),
        Slot::Details => quote!(#bind::Details),
    }
}

/// The enforcement DDL of the machine, as literals per dialect.
pub(super) fn ddl_per_dialect(private: &TokenStream, model: &Model) -> TokenStream {
    let [pg, lite, my] = DIALECTS.map(|d| {
        let DdlText {
            constraint,
            trigger,
            check_clause,
            up,
            down,
            migration,
            down_migration,
        } = ddl::ddl(model, d);
        quote! {
            #private::ddl(#private::DdlParts {
                constraint: #constraint,
                trigger: #trigger,
                check_clause: #check_clause,
                up: &[#(#up),*],
                down: &[#(#down),*],
                migration: #migration,
                down_migration: #down_migration,
            })
        }
    });
    quote!(#private::sql(#pg, #lite, #my))
}
