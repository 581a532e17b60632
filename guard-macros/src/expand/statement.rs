//! Each statement as generated code: one literal per dialect, with its
//! bind plan and result columns, kept by the runtime only where the
//! dialect's backend is on; and the enforcement DDL.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ddl::table::{self, DeclaredType, TableColumn, TableText};
use crate::ddl::{self, DdlText};
use crate::dialect::{DIALECTS, Dialect};
use crate::model::Model;
use crate::plan::{self, Col, Rendered, Slot};

/// `sql! { "…" on postgres, …; "…" on sqlite, …; … }`: one statement per
/// dialect, each a literal with its bind plan and result columns
/// (`plan.rs`). A dialect without the statement (an empty text) is left
/// out.
pub(super) fn sql_per_dialect(
    private: &TokenStream,
    build: impl Fn(Dialect) -> String,
) -> TokenStream {
    let mut entries = Vec::new();
    for d in DIALECTS {
        let source = build(d);
        if source.is_empty() {
            continue;
        }
        match plan::render(d, &source) {
            Ok(Rendered {
                text,
                plan,
                returns,
                ..
            }) => {
                let dialect = format_ident!("{}", d.name());
                let binds = (!plan.is_empty()).then(|| {
                    let binds = plan.iter().map(|slot| bind(*slot));
                    quote!(, binds = [#(#binds),*])
                });
                // The tag, where there is one, is the first column; the
                // runtime finds its literal in the text.
                let reads = (!returns.is_empty()).then(|| {
                    let columns = returns.iter().map(|col| column(*col));
                    quote!(, reads = [#(#columns),*])
                });
                entries.push(quote!(#text on #dialect #binds #reads;));
            }
            // A builder that wrote a placeholder of its own: a bug here,
            // said at the derive rather than at run time.
            Err(message) => {
                let message = format!("stateguard: a generated statement is malformed: {message}");
                return quote!(::core::compile_error!(#message));
            }
        }
    }
    quote!(#private::sql! { #(#entries)* })
}

/// How the generated code names `col` of the runtime's `Column`.
pub(super) fn column(col: Col) -> TokenStream {
    match col {
        Col::Tag => quote!(Tag),
        Col::Found => quote!(Found),
        Col::End => quote!(End),
        Col::Key(n) => {
            let n = proc_macro2::Literal::u8_unsuffixed(n);
            quote!(Key(#n))
        }
        Col::Status => quote!(Status),
        Col::Occurrence => quote!(Occurrence),
        Col::Meets => quote!(Meets),
        Col::Attempt => quote!(Attempt),
        Col::Token => quote!(Token),
        Col::Transition => quote!(Transition),
        Col::From => quote!(From),
        Col::To => quote!(To),
        Col::At => quote!(At),
        Col::AtMicros => quote!(AtMicros),
        Col::Behind => quote!(Behind),
        Col::Actor => quote!(Actor),
        Col::Reason => quote!(Reason),
        Col::Details => quote!(Details),
        Col::Count(n) => {
            let n = proc_macro2::Literal::u8_unsuffixed(n);
            quote!(Count(#n))
        }
        Col::Age => quote!(Age),
        Col::Due(n) => {
            let n = proc_macro2::Literal::u8_unsuffixed(n);
            quote!(Due(#n))
        }
        Col::Waiting(n) => {
            let n = proc_macro2::Literal::u8_unsuffixed(n);
            quote!(Waiting(#n))
        }
        Col::GaveUp(n) => {
            let n = proc_macro2::Literal::u8_unsuffixed(n);
            quote!(GaveUp(#n))
        }
        Col::NextIn => quote!(NextIn),
    }
}

/// How the generated code names `slot` of the runtime's `Bind`.
pub(super) fn bind(slot: Slot) -> TokenStream {
    let n = |n: u8| proc_macro2::Literal::u8_unsuffixed(n);
    match slot {
        Slot::Row(row, part) => {
            let (row, part) = (n(row), n(part));
            quote!(Row(#row, #part))
        }
        Slot::Keys(k) => {
            let k = n(k);
            quote!(Keys(#k))
        }
        Slot::Ints(j) => {
            let j = n(j);
            quote!(Ints(#j))
        }
        Slot::Key(k) => {
            let k = n(k);
            quote!(Key(#k))
        }
        Slot::Value(v) => {
            let v = n(v);
            quote!(Value(#v))
        }
        Slot::Age => quote!(Age),
        Slot::Delay => quote!(Delay),
        Slot::Expected => quote!(Expected),
        Slot::Token => quote!(Token),
        Slot::Limit => quote!(Limit),
        Slot::State => quote!(State),
        Slot::Actor => quote!(Actor),
        Slot::Reason => quote!(Reason),
        Slot::Details => quote!(Details),
        Slot::EffectKey => quote!(EffectKey),
        Slot::EffectKeys => quote!(EffectKeys),
        Slot::RowEffectKey(row) => {
            let row = n(row);
            quote!(RowEffectKey(#row))
        }
        // A machine's statement binds no store field; a store's plan is
        // emitted by `stores/`.
        Slot::Field(field) => {
            let field = format_ident!("{field:?}");
            quote!(#field)
        }
        Slot::Tag => quote!(Tag),
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
    quote!(#private::per_dialect(#private::PerDialect { postgres: #pg, sqlite: #lite, mysql: #my }))
}

/// The machine's tables for `stateguard::ddl::table`, as literals per
/// dialect, each column whose Rust type sqlx names at run time by its
/// number among `ColumnTypes::COLUMN_TYPES`.
pub(super) fn table_per_dialect(private: &TokenStream, model: &Model) -> TokenStream {
    let [pg, lite, my] = DIALECTS.map(|d| {
        let TableText {
            create,
            columns,
            primary_key,
            history,
        } = table::table(model, d);
        let columns = columns.iter().map(|column| {
            let TableColumn {
                name,
                ty,
                rest,
                note,
            } = column;
            match ty {
                DeclaredType::Sql(sql) => quote!(#private::typed(#name, #sql, #rest)),
                DeclaredType::Rust { n, written, key } => {
                    let n = proc_macro2::Literal::u16_unsuffixed(*n);
                    quote!(#private::rust_typed(#name, #n, #written, #key, #rest))
                }
                DeclaredType::Unknown => quote!(#private::untyped(#name, #rest, #note)),
            }
        });
        quote! {
            #private::table_text(#private::TableParts {
                create: #create,
                columns: &[#(#columns),*],
                primary_key: #primary_key,
                history: &[#(#history),*],
            })
        }
    });
    quote!(#private::per_dialect(#private::PerDialect { postgres: #pg, sqlite: #lite, mysql: #my }))
}
