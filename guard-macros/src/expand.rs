//! Code generation.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};
use syn::DeriveInput;
use syn::ext::IdentExt;

use crate::ast::Input;
use crate::ctxt::Ctxt;
use crate::ddl::{self, DdlText};
use crate::dialect::{DIALECTS, Dialect};
use crate::plan::{self, Col, Rendered, Slot};
use crate::sql::Match;
use crate::valid::{self, Model};

pub fn derive(node: &DeriveInput) -> TokenStream {
    let mut cx = Ctxt::default();
    let model = Input::from_syn(&mut cx, node)
        .as_ref()
        .and_then(|input| valid::check(&mut cx, input).map(|model| expand(input, &model)));
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

fn expand(input: &Input, model: &Model) -> TokenStream {
    let krate = match &input.attrs.krate {
        Some(path) => quote!(#path),
        None => quote!(::stateguard),
    };
    let private = quote!(#krate::__private);
    let sqlx = quote!(#private::sqlx);
    let ident = model.ident;
    let vis = &input.original.vis;
    let name = ident.unraw().to_string();
    let (table, column) = (&model.table, &model.column);
    let key = model.key_text();
    let key_columns = &model.key;
    let key_shape = match model.key.len() {
        1 => format_ident!("One"),
        2 => format_ident!("Two"),
        3 => format_ident!("Three"),
        _ => format_ident!("Four"),
    };
    let idents: Vec<_> = model.states.iter().map(|s| s.ident).collect();
    let dbs: Vec<_> = model.states.iter().map(|s| s.db.as_str()).collect();
    let variant_names: Vec<_> = idents.iter().map(|i| i.unraw().to_string()).collect();
    let initials: Vec<_> = (0..idents.len()).map(|i| i == model.initial).collect();
    let stamps = model
        .states
        .iter()
        .map(|state| option(state.stamp.as_ref().filter(|_| state.in_flight.is_none())));
    let timeouts = model.states.iter().map(|state| option(state.timeout_ms));
    let in_flights = model.states.iter().map(|state| {
        let Some(f) = &state.in_flight else {
            return quote!(::core::option::Option::None);
        };
        let (lease_ms, since, done) = (f.lease_ms, &f.since, f.done);
        let transitions = format_ident!("__TRANSITIONS");
        let done = quote!(&#transitions[#done]);
        let failed = option(f.failed.map(|i| quote!(&#transitions[#i])));
        let expired = sql_per_dialect(&private, |d| d.expired(model, state, f));
        let claim = sql_per_dialect(&private, |d| d.claim(model, state, f));
        let take_over = sql_per_dialect(&private, |d| d.take_over(model, state, f));
        let renew = sql_per_dialect(&private, |d| d.renew(model, state, f));
        let lease_read = sql_per_dialect(&private, |d| d.lease_read(model, f));
        let follow_up_read = sql_per_dialect(&private, |d| d.follow_up_read(model, f));
        let done_sql = sql_per_dialect(&private, |d| {
            d.follow_up(model, state, f, &model.transitions[f.done])
        });
        let done_log = sql_per_dialect(&private, |d| {
            d.follow_up_log(model, state, f, &model.transitions[f.done])
        });
        let failed_log = match f.failed {
            Some(i) => sql_per_dialect(&private, |d| {
                d.follow_up_log(model, state, f, &model.transitions[i])
            }),
            None => sql_per_dialect(&private, |_| String::new()),
        };
        let failed_sql = option(f.failed.map(|i| {
            sql_per_dialect(&private, |d| {
                d.follow_up(model, state, f, &model.transitions[i])
            })
        }));
        quote! {
            ::core::option::Option::Some(&#private::in_flight(
                #lease_ms, #since, #done, #failed, #expired, #claim, #take_over, #renew, #lease_read,
                #follow_up_read, #done_sql, #failed_sql, [#done_log, #failed_log],
            ))
        }
    });
    let version = option(model.version.as_ref());
    let initial = idents[model.initial];

    let select = sql_per_dialect(&private, |d| d.select(model, false));
    let history = option(model.history.as_ref().map(|table| {
        let read = sql_per_dialect(&private, |d| d.history_read(model));
        quote!((#table, #read))
    }));
    let select_in_transaction = sql_per_dialect(&private, |d| d.select(model, true));
    let ddl = ddl_per_dialect(&private, model);

    let transition_defs = model.transitions.iter().map(|t| {
        let name = t.name.unraw().to_string();
        let sources = t.sources.iter().map(|&i| idents[i]);
        let target = idents[t.target];
        let update = sql_per_dialect(&private, |d| d.update_logged(model, t, false));
        let update_expecting = option(
            (model.version.as_ref())
                .map(|_| sql_per_dialect(&private, |d| d.update_logged(model, t, true))),
        );
        let read_back = sql_per_dialect(&private, |d| d.read_back(model, t));
        let claim = sql_per_dialect(&private, |d| d.claim_next(model, t));
        let log = option(model.history.as_ref().map(|_| {
            let plain = sql_per_dialect(&private, |d| d.log(model, t, false));
            let expecting = sql_per_dialect(&private, |d| d.log(model, t, true));
            quote!([#plain, #expecting])
        }));
        let claim_older = option(
            DIALECTS
                .iter()
                .all(|d| !d.claim_older(model, t).is_empty())
                .then(|| sql_per_dialect(&private, |d| d.claim_older(model, t))),
        );
        let many_update = sql_per_dialect(&private, |d| d.many_update(model, t, Match::Exact));
        let many_read = sql_per_dialect(&private, |d| d.many_read(model, t, Match::Exact));
        let many_update_by_value =
            sql_per_dialect(&private, |d| d.many_update(model, t, Match::ByValue));
        let many_read_by_value =
            sql_per_dialect(&private, |d| d.many_read(model, t, Match::ByValue));
        let many_lease = sql_per_dialect(&private, |d| d.many_lease(model, t));
        let many_log = sql_per_dialect(&private, |d| d.many_log(model, t));
        let guard = option(t.guard.as_ref().map(|guard| &guard.text));
        let select_guarded = option(t.guard.as_ref().map(|_| {
            let plain = sql_per_dialect(&private, |d| {
                d.select_guarded(model, t, false).unwrap_or_default()
            });
            let locked = sql_per_dialect(&private, |d| {
                d.select_guarded(model, t, true).unwrap_or_default()
            });
            quote!([#plain, #locked])
        }));
        let set = t.set.iter().map(|(col, value)| {
            let written = value.written();
            quote!(#private::set_column(#col, #written))
        });
        quote! {
            #private::transition(
                #name,
                &[#(#ident::#sources),*],
                #ident::#target,
                &[#(#set),*],
                #update,
                #update_expecting,
                #read_back,
                #guard,
                #select_guarded,
                #claim,
                #claim_older,
                #log,
                [#many_update, #many_read, #many_lease, #many_log],
                [#many_update_by_value, #many_read_by_value],
            )
        }
    });

    let constructors = model.transitions.iter().enumerate().map(|(i, t)| {
        let fn_name = t.name;
        let doc = constructor_doc(model, i);
        // set(bank_ref = bind(String)): one parameter per bound column, in
        // declaration order, bound in that order.
        let params: Vec<_> = t
            .params()
            .map(|(col, ty)| (format_ident!("{}", col), ty))
            .collect();
        if params.is_empty() {
            return quote! {
                #[doc = #doc]
                #[inline]
                #[must_use]
                #vis const fn #fn_name() -> #krate::Transition<Self> {
                    <Self as #krate::StateMachine>::MACHINE.transitions()[#i].transition()
                }
            };
        }
        let names = params.iter().map(|(name, _)| name);
        let names2 = params.iter().map(|(name, _)| name);
        let types = params.iter().map(|(_, ty)| ty);
        let types2 = params.iter().map(|(_, ty)| ty);
        quote! {
            #[doc = #doc]
            #[inline]
            #[must_use]
            #vis fn #fn_name(#(#names: #types),*) -> #krate::Bound<Self, (#(#types2,)*)> {
                #private::bound(
                    <Self as #krate::StateMachine>::MACHINE.transitions()[#i].transition(),
                    (#(#names2,)*),
                )
            }
        }
    });

    // The follow-ups of in-flight states that bind values take them from
    // the verdict: one binder per such transition, for every backend that
    // can bind its types.
    let mut follow_ups: Vec<usize> = model
        .states
        .iter()
        .filter_map(|s| s.in_flight.as_ref())
        .flat_map(|f| [Some(f.done), f.failed])
        .flatten()
        .filter(|&i| model.transitions[i].binds() > 0)
        .collect();
    follow_ups.sort_unstable();
    follow_ups.dedup();
    let follow_up_names = follow_ups
        .iter()
        .map(|&i| model.transitions[i].name.unraw().to_string());
    let follow_up_types: Vec<_> = follow_ups
        .iter()
        .map(|&i| {
            let types = model.transitions[i].params().map(|(_, ty)| ty);
            quote!((#(#types,)*))
        })
        .collect();
    let follow_up_types2 = follow_up_types.iter();
    let no_values = quote!(#private::binder::<__DB, ()>());
    let binders = match follow_ups.is_empty() {
        true => quote!(let _ = transition; #no_values),
        false => quote! {
            match transition {
                #(#follow_up_names => #private::binder::<__DB, #follow_up_types2>(),)*
                _ => #no_values,
            }
        },
    };
    let follow_up_values = quote! {
        #[automatically_derived]
        impl<__DB: #krate::Backend> #krate::FollowUpValues<__DB> for #ident
        where
            #(#follow_up_types: #krate::Params<__DB>,)*
        {
            fn follow_up_values(transition: &str) -> #private::Binder<__DB> {
                #binders
            }
        }
    };

    // Only a machine with a history table takes notes: `noted` asks for it.
    let has_history = model.history.as_ref().map(|_| {
        quote! {
            #[automatically_derived]
            impl #krate::HasHistory for #ident {}
        }
    });

    // Only a machine with a version column has an occurrence to expect:
    // `expecting` asks for it.
    let has_version = model.version.as_ref().map(|_| {
        quote! {
            #[automatically_derived]
            impl #krate::HasVersion for #ident {}
        }
    });

    let n_states = idents.len();
    let n_transitions = model.transitions.len();
    // Scoped inside the `MACHINE` block, so fixed names cannot clash.
    let states_const = format_ident!("__STATES");
    let transitions_const = format_ident!("__TRANSITIONS");
    let machine_const = format_ident!("__MACHINE");

    quote! {
        #[automatically_derived]
        impl #krate::StateMachine for #ident {
            type KeyShape = #krate::key::shape::#key_shape;

            const MACHINE: &'static #private::Machine<Self> = {
                // Statics, not constants: the metadata exists once in the
                // binary, and every use reads it there instead of a copy.
                static #states_const: [#private::StateDef<#ident>; #n_states] = [
                    #(#private::state(
                        #ident::#idents, #variant_names, #dbs, #initials, #in_flights, #stamps,
                        #timeouts,
                    )),*
                ];
                static #transitions_const: [#private::TransitionDef<#ident>; #n_transitions] = [
                    #(#transition_defs),*
                ];
                static #machine_const: #private::Machine<#ident> = #private::machine(
                    #name,
                    #table,
                    #column,
                    #key,
                    &[#(#key_columns),*],
                    #version,
                    #ident::#initial,
                    &#states_const,
                    &#transitions_const,
                    #select,
                    #select_in_transaction,
                    #history,
                    #ddl,
                );
                &#machine_const
            };

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

        #has_history

        #has_version

        // No `#[automatically_derived]`: rustc accepts it only on trait
        // impls and is phasing it out elsewhere. A transition may share the
        // enum's name (`Hold::hold()`), which clippy would flag in the
        // user's crate.
        #[allow(clippy::self_named_constructors)]
        impl #ident {
            #(#constructors)*
        }

        #[automatically_derived]
        impl ::core::fmt::Display for #ident {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(#krate::StateMachine::as_str(*self))
            }
        }

        #[automatically_derived]
        impl ::core::str::FromStr for #ident {
            type Err = #krate::UnknownState;

            fn from_str(value: &str) -> ::core::result::Result<Self, Self::Err> {
                <Self as #krate::StateMachine>::parse_db_str(value)
            }
        }

        #[automatically_derived]
        impl<__DB: #sqlx::Database> #sqlx::Type<__DB> for #ident
        where
            str: #sqlx::Type<__DB>,
        {
            fn type_info() -> <__DB as #sqlx::Database>::TypeInfo {
                <str as #sqlx::Type<__DB>>::type_info()
            }

            fn compatible(ty: &<__DB as #sqlx::Database>::TypeInfo) -> bool {
                <str as #sqlx::Type<__DB>>::compatible(ty)
            }
        }

        #[automatically_derived]
        impl<'__q, __DB: #sqlx::Database> #sqlx::Encode<'__q, __DB> for #ident
        where
            &'__q str: #sqlx::Encode<'__q, __DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <__DB as #sqlx::Database>::ArgumentBuffer,
            ) -> ::core::result::Result<#sqlx::encode::IsNull, #sqlx::error::BoxDynError> {
                <&'__q str as #sqlx::Encode<'__q, __DB>>::encode(
                    #krate::StateMachine::as_str(*self),
                    buf,
                )
            }
        }

        #[automatically_derived]
        impl<'__r, __DB: #sqlx::Database> #sqlx::Decode<'__r, __DB> for #ident
        where
            &'__r str: #sqlx::Decode<'__r, __DB>,
        {
            fn decode(
                value: <__DB as #sqlx::Database>::ValueRef<'__r>,
            ) -> ::core::result::Result<Self, #sqlx::error::BoxDynError> {
                let __text = <&'__r str as #sqlx::Decode<'__r, __DB>>::decode(value)?;
                <Self as #krate::StateMachine>::from_db_str(__text)
                    .ok_or_else(|| #private::unknown_state::<Self>(__text))
            }
        }
    }
}

/// After an error, stub impls of what the derive would have generated, so
/// that the user sees the real error and not one follow-up per use of the
/// enum. Nothing here runs: the crate does not compile.
fn fallback(node: &DeriveInput) -> TokenStream {
    let syn::Data::Enum(data) = &node.data else {
        return TokenStream::new();
    };
    if !node.generics.params.is_empty() {
        return TokenStream::new();
    }
    let mut cx = Ctxt::default();
    let krate = match crate::attr::machine_attrs(&mut cx, &node.attrs).krate {
        Some(path) => quote!(#path),
        None => quote!(::stateguard),
    };
    let (ident, vis) = (&node.ident, &node.vis);
    let mut names: Vec<syn::Ident> = Vec::new();
    for variant in &data.variants {
        for transition in crate::attr::variant(&mut cx, variant).transitions {
            if !names.contains(&transition.name) {
                names.push(transition.name);
            }
        }
    }
    quote! {
        #[automatically_derived]
        impl #krate::StateMachine for #ident {
            type KeyShape = #krate::key::shape::One;

            const MACHINE: &'static #krate::__private::Machine<Self> = ::core::unimplemented!();

            fn as_str(self) -> &'static str {
                ::core::unimplemented!()
            }

            fn from_db_str(_: &str) -> ::core::option::Option<Self> {
                ::core::unimplemented!()
            }
        }

        #[automatically_derived]
        impl<__DB: #krate::Backend> #krate::FollowUpValues<__DB> for #ident {
            fn follow_up_values(_: &str) -> #krate::__private::Binder<__DB> {
                ::core::unimplemented!()
            }
        }

        impl #ident {
            #(
                #vis const fn #names() -> #krate::Transition<Self> {
                    ::core::unimplemented!()
                }
            )*
        }
    }
}

/// `Some(value)` or `None`, as tokens of a constant.
fn option(value: Option<impl ToTokens>) -> TokenStream {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}

/// `sql(postgres, sqlite, mysql)`: one statement per dialect, each a
/// literal with its bind plan (`plan.rs`).
fn sql_per_dialect(private: &TokenStream, build: impl Fn(Dialect) -> String) -> TokenStream {
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
fn column(private: &TokenStream, col: Col) -> TokenStream {
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
fn bind(private: &TokenStream, slot: Slot) -> TokenStream {
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
fn ddl_per_dialect(private: &TokenStream, model: &Model) -> TokenStream {
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
            #private::ddl(
                #constraint,
                #trigger,
                #check_clause,
                &[#(#up),*],
                &[#(#down),*],
                #migration,
                #down_migration,
            )
        }
    });
    quote!(#private::sql(#pg, #lite, #my))
}

/// The rustdoc of a transition constructor: sources, target, columns.
fn constructor_doc(model: &Model, i: usize) -> String {
    let t = &model.transitions[i];
    let state = |i: usize| {
        let s = &model.states[i];
        format!("[`{}`](Self::{}) (`'{}'`)", s.ident, s.ident, s.db)
    };
    let sources: Vec<String> = t.sources.iter().map(|&s| state(s)).collect();
    let mut doc = format!(
        " Transition `{}`: from {} to {}.\n\n Sets `{}` to `'{}'` on the row whose `{}` is the \
         key, only if it is in a source state.",
        t.name,
        sources.join(" or "),
        state(t.target),
        model.column,
        model.states[t.target].db,
        model.key_text(),
    );
    let set_binds = t.set_binds();
    let params: Vec<String> = t
        .params()
        .enumerate()
        .map(|(i, (name, ty))| {
            let ty = ty.to_token_stream();
            match i < set_binds {
                true => format!("`{name}: {ty}`, written to `{name}`"),
                false => format!("`{name}: {ty}`, read by the guard as `:{name}`"),
            }
        })
        .collect();
    if !params.is_empty() {
        doc.push_str(
            "\n\n Parameters, bound into the statement in this order, never written into its \
             text:\n",
        );
        for line in params {
            doc.push_str(&format!("\n - {line}"));
        }
        doc.push_str("\n\n");
    }
    let mut also: Vec<String> = t
        .set
        .iter()
        .map(|(col, value)| format!("`{col} = {}`", value.written()))
        .collect();
    if let Some(in_flight) = &model.states[t.target].in_flight {
        also.push(format!(
            "`{}` to the current time (the target is in flight, lease {} ms)",
            in_flight.since, in_flight.lease_ms
        ));
    }
    if let Some(version) = &model.version {
        also.push(format!("`{version} = {version} + 1`"));
    }
    if !also.is_empty() {
        doc.push_str(" Also sets:\n");
        for line in also {
            doc.push_str(&format!("\n - {line}"));
        }
    }
    for state in &model.states {
        let Some(in_flight) = &state.in_flight else {
            continue;
        };
        let role = if in_flight.done == i {
            "done"
        } else if in_flight.failed == Some(i) {
            "failed"
        } else {
            continue;
        };
        let verdict = match t.binds() {
            0 => format!(
                "`Verdict::{}`",
                if role == "done" { "Done" } else { "Failed" }
            ),
            _ => format!("this constructor's value, `Self::{}(…).into()`", t.name),
        };
        doc.push_str(&format!(
            "\n\n The `{role}` follow-up of the in-flight state [`{}`](Self::{}): `finish` and \
             recovery run it when the effect's verdict is {verdict}.",
            state.ident, state.ident
        ));
    }
    if let Some(guard) = t.guard.as_ref().map(|g| &g.text) {
        doc.push_str(&format!(
            "\n\n Guard: the row must also meet `{guard}`; a row in a source state that does \
             not is `Outcome::Refused`."
        ));
    }
    doc
}

#[cfg(test)]
mod tests {
    //! The expansion snapshot: `tests/expand/payouts.expanded.rs` at the
    //! workspace root holds what the derive writes for the payout enum of
    //! `examples/payouts/status.rs`, formatted, so that a change to the
    //! generated code shows up in review as a diff. `STATEGUARD_BLESS=1`
    //! rewrites it, as for the docs and the DDL golden files.

    use std::path::{Path, PathBuf};

    use quote::ToTokens;

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

    /// The formatted expansion of the first `#[derive(StateMachine)]` enum
    /// in `source`.
    fn expansion(source: &str) -> TestResult<String> {
        let file: syn::File = syn::parse_str(source)?;
        let item = file
            .items
            .into_iter()
            .find_map(|item| match item {
                syn::Item::Enum(item) => Some(item),
                _ => None,
            })
            .ok_or("the example has no enum")?;
        let input: syn::DeriveInput = syn::parse2(item.into_token_stream())?;
        let tokens = super::derive(&input);
        let expanded: syn::File = syn::parse2(tokens)?;
        Ok(prettyplease::unparse(&expanded))
    }

    /// The lines around the first difference of `expected` (the file) and
    /// `actual`.
    fn first_difference(expected: &str, actual: &str) -> String {
        let old: Vec<&str> = expected.lines().collect();
        let new: Vec<&str> = actual.lines().collect();
        let at = (0..old.len().max(new.len()))
            .find(|&i| old.get(i) != new.get(i))
            .unwrap_or(0);
        let from = at.saturating_sub(3);
        let mut out = format!("first difference at line {}:\n", at + 1);
        for (i, line) in old.iter().enumerate().skip(from).take(at - from + 4) {
            let mark = if i >= at { '-' } else { ' ' };
            out.push_str(&format!("{mark} {line}\n"));
        }
        for line in new.iter().skip(at).take(4) {
            out.push_str(&format!("+ {line}\n"));
        }
        out
    }

    #[test]
    fn the_payouts_expansion_matches_its_snapshot() -> TestResult {
        let root = workspace();
        let source = std::fs::read_to_string(root.join("examples/payouts/status.rs"))?;
        let actual = format!(
            "// The expansion of `#[derive(StateMachine)]` on `PayoutStatus`\n\
             // (examples/payouts/status.rs), formatted with prettyplease.\n\
             // Generated by guard-macros' unit tests; `STATEGUARD_BLESS=1 cargo test\n\
             // -p guard-macros` writes it anew. tests/test_expand.rs compiles it.\n\n{}",
            expansion(&source)?
        );
        let path = root.join("tests/expand/payouts.expanded.rs");
        if std::env::var_os("STATEGUARD_BLESS").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(root.join("tests/expand"))?;
            std::fs::write(&path, &actual)?;
            return Ok(());
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == actual,
            "{} is out of date ({}).\n{}\nIf the change is intended, run \
             `STATEGUARD_BLESS=1 cargo test -p guard-macros` and review the diff.",
            path.display(),
            if expected.is_empty() {
                "missing"
            } else {
                "differs"
            },
            first_difference(&expected, &actual),
        );
        Ok(())
    }

    #[test]
    fn an_invalid_enum_expands_to_its_errors_and_stubs() {
        let input: syn::DeriveInput = syn::parse_quote! {
            #[state_machine(table = "t", column = "status")]
            enum Broken {
                #[state(initial)]
                #[transition(go -> Nowhere)]
                A,
            }
        };
        let text = super::derive(&input).to_string();
        assert!(text.contains("compile_error"), "{text}");
        assert!(text.contains("missing `key"), "{text}");
        assert!(text.contains("unknown target state `Nowhere`"), "{text}");
        // The stubs keep uses of the enum from adding errors of their own.
        assert!(text.contains("const fn go"), "{text}");
    }
}
