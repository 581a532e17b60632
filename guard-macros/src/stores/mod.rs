//! The statements and tables of the library's own tables: the
//! idempotency keys' (`idempotency.rs`), the inbox's (`inbox.rs`), the
//! outbox's (`outbox.rs`), and the catalog reads of `verify`
//! (`catalog.rs`).
//!
//! They are built as the machines' statements are: a builder writes a
//! [`Field`](crate::plan::Field) marker where a value goes, and
//! [`plan::render`] numbers the placeholders, writes the plan beside the
//! text and, on PostgreSQL, the tag column and the tag bound last. No
//! code but `plan.rs` knows a dialect's placeholder order.
//!
//! `__store_statements!(krate)` emits the stores whose tables the search
//! path finds; `__store_statements!(krate, "payments")` those in the schema
//! `payments`, whose quoted name stands before each table name, fixed at
//! compile time. `__catalog_statements!(krate)` emits the catalog reads.

mod catalog;
mod idempotency;
mod inbox;
mod outbox;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote};

use crate::dialect::{DIALECTS, Dialect};
use crate::plan::{self, Col, Rendered, Slot, TAG};

/// Where the stores' tables are: the search path's, or a schema's.
pub(crate) struct Place {
    schema: Option<String>,
}

impl Place {
    /// `table` as a statement in `d` names it: after the quoted schema.
    fn table(&self, d: Dialect, table: &str) -> String {
        match &self.schema {
            Some(schema) => format!("{}.{table}", d.quote(schema)),
            None => table.to_owned(),
        }
    }

    /// The name of an index of the table: SQLite names the index's
    /// schema, PostgreSQL and MySQL its table's.
    fn index(&self, d: Dialect, index: &str) -> String {
        match (d, &self.schema) {
            (Dialect::Sqlite, Some(schema)) => format!("{}.{index}", d.quote(schema)),
            _ => index.to_owned(),
        }
    }

    /// The table of an index: see [`Place::index`].
    fn indexed(&self, d: Dialect, table: &str) -> String {
        match d {
            Dialect::Sqlite => table.to_owned(),
            Dialect::Postgres | Dialect::MySql => self.table(d, table),
        }
    }
}

/// PostgreSQL's tag column with the comma after it, first in a select
/// list; nothing in the other dialects.
fn tag(d: Dialect) -> String {
    match d {
        Dialect::Postgres => format!("{}, ", Col::Tag.of(TAG)),
        Dialect::Sqlite | Dialect::MySql => String::new(),
    }
}

/// `SELECT COUNT(*)` of the rows of `table` where `filter` holds, up to
/// the limit bound: a count that stops there however large the table.
fn count(d: Dialect, table: &str, filter: &str) -> String {
    let n = match d {
        Dialect::Postgres => "CAST(COUNT(*) AS BIGINT)",
        Dialect::Sqlite => "COUNT(*)",
        Dialect::MySql => "CAST(COUNT(*) AS SIGNED)",
    };
    format!(
        "SELECT {}{n} FROM (SELECT 1 FROM {table} WHERE {filter} LIMIT {}) AS __sg_n",
        tag(d),
        crate::plan::Field::Limit.mark(),
    )
}

/// The statements of one store, each as `build` writes it per dialect.
fn statements(
    krate: &TokenStream,
    builders: &[fn(Dialect, &Place) -> String],
    place: &Place,
) -> Result<TokenStream, String> {
    let statements = builders
        .iter()
        .map(|build| statement(krate, |d| build(d, place)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(quote!([#(#statements),*]))
}

/// One statement in each dialect, rendered, as
/// `store_statement([texts], [plans])`.
fn statement(
    krate: &TokenStream,
    build: impl Fn(Dialect) -> String,
) -> Result<TokenStream, String> {
    let mut texts = Vec::new();
    let mut plans = Vec::new();
    for d in DIALECTS {
        let Rendered { text, plan, .. } = plan::render(d, &build(d))?;
        let fields = plan
            .iter()
            .map(|slot| match slot {
                Slot::Field(field) => Ok(format_ident!("{field:?}")),
                Slot::Tag => Ok(format_ident!("Tag")),
                other => Err(format!("a machine's slot {other:?} in {text:?}")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        texts.push(text);
        plans.push(quote!(&[#(#krate::__private::Field::#fields),*]));
    }
    Ok(quote!(#krate::__private::store_statement([#(#texts),*], [#(#plans),*])))
}

/// The DDL texts of one table per dialect, as a tuple of arrays.
fn ddl(build: impl Fn(Dialect) -> Vec<String>) -> TokenStream {
    let [pg, lite, my] = DIALECTS.map(|d| {
        let texts = build(d);
        quote!([#(#texts),*])
    });
    quote!((#pg, #lite, #my))
}

/// What `__store_statements!` was given: the runtime's path, and the
/// schema if any.
fn parse(input: TokenStream) -> Result<(TokenStream, Option<syn::LitStr>), syn::Error> {
    let mut krate = TokenStream::new();
    let mut tokens = input.into_iter();
    for token in tokens.by_ref() {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => break,
            _ => krate.extend([token]),
        }
    }
    let rest: TokenStream = tokens.collect();
    if rest.is_empty() {
        return Ok((krate, None));
    }
    let schema: syn::LitStr = syn::parse2(rest)?;
    if !plain_identifier(&schema.value()) {
        return Err(syn::Error::new(
            schema.span(),
            "stateguard::stores!: the schema must be 1 to 63 ASCII letters, digits and `_`, \
             not starting with a digit",
        ));
    }
    Ok((krate, Some(schema)))
}

/// Whether `name` can stand quoted in every dialect without escaping: what
/// PostgreSQL takes as an identifier (at most 63 bytes) in ASCII.
fn plain_identifier(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && !bytes[0].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// `__store_statements!(krate)` or `(krate, "schema")`: the runtime's
/// `Stores` of those tables.
pub fn expand(input: TokenStream) -> TokenStream {
    let (krate, schema) = match parse(input) {
        Ok(parsed) => parsed,
        Err(error) => return error.to_compile_error(),
    };
    let place = Place {
        schema: schema.as_ref().map(syn::LitStr::value),
    };
    match stores(&krate, &place) {
        Ok(stores) => stores,
        Err(message) => {
            let message = format!("stateguard: a store statement is malformed: {message}");
            quote!(::core::compile_error!(#message))
        }
    }
}

fn stores(krate: &TokenStream, place: &Place) -> Result<TokenStream, String> {
    let schema = match &place.schema {
        Some(schema) => quote!(::core::option::Option::Some(#schema)),
        None => quote!(::core::option::Option::None),
    };
    let named = |table: &str| match &place.schema {
        Some(schema) => format!("{schema}.{table}"),
        None => table.to_owned(),
    };
    let (idempotency_table, inbox_table, outbox_table) = (
        named(idempotency::TABLE),
        named(inbox::TABLE),
        named(outbox::TABLE),
    );
    let idempotency = statements(krate, &idempotency::STATEMENTS, place)?;
    let inbox = statements(krate, &inbox::STATEMENTS, place)?;
    let outbox = statements(krate, &outbox::STATEMENTS, place)?;
    let (idempotency_ddl, inbox_ddl, outbox_ddl) = (
        ddl(|d| idempotency::ddl(d, place)),
        ddl(|d| inbox::ddl(d, place)),
        ddl(|d| outbox::ddl(d, place)),
    );
    let outbox_wake_up = outbox::wake_up(place);
    Ok(quote! {
        #krate::__private::stores(#krate::__private::StoreParts {
            schema: #schema,
            idempotency_table: #idempotency_table,
            idempotency: #idempotency,
            idempotency_ddl: #idempotency_ddl,
            inbox_table: #inbox_table,
            inbox: #inbox,
            inbox_ddl: #inbox_ddl,
            outbox_table: #outbox_table,
            outbox: #outbox,
            outbox_ddl: #outbox_ddl,
            outbox_wake_up: #outbox_wake_up,
        })
    })
}

/// `__catalog_statements!(krate)`: `verify`'s catalog reads, as
/// `[COLUMNS, UNIQUE, ENFORCEMENT]`.
pub fn expand_catalog(krate: TokenStream) -> TokenStream {
    let place = Place { schema: None };
    match statements(&krate, &catalog::STATEMENTS, &place) {
        Ok(statements) => statements,
        Err(message) => {
            let message = format!("stateguard: a catalog statement is malformed: {message}");
            quote::quote_spanned!(Span::call_site() => ::core::compile_error!(#message))
        }
    }
}

#[cfg(test)]
mod tests;
