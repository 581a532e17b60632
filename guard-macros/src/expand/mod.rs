//! Code generation.

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote};
use syn::DeriveInput;
use syn::ext::IdentExt;

use crate::ast::Input;
use crate::check;
use crate::ctxt::Ctxt;
use crate::dialect::{DIALECTS, Dialect};
use crate::model::Model;
use crate::sql::Match;

mod docs;
mod statement;
#[cfg(test)]
mod tests;

use docs::constructor_doc;
use statement::{ddl_per_dialect, sql_per_dialect, table_per_dialect};

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

fn expand(input: &Input, model: &Model) -> TokenStream {
    let krate = match &input.attrs.krate {
        Some(path) => quote!(#path),
        None => quote!(::stateguard),
    };
    let private = quote!(#krate::__private);
    let ident = model.ident;
    // Inside the `MACHINE` block the metadata names the runtime's hidden
    // items through a short alias, and `Option`'s variants bare, so that
    // it reads as a description of the machine. An enum named like one of
    // those keeps the full paths.
    let short = !matches!(ident.unraw().to_string().as_str(), "None" | "Some" | "__sg");
    let (sg, prelude) = match short {
        true => (
            quote!(__sg),
            quote! {
                use #private as __sg;
                use ::core::option::Option::{None, Some};
            },
        ),
        false => (private.clone(), TokenStream::new()),
    };
    let option = |value: Option<TokenStream>| match (value, short) {
        (Some(value), true) => quote!(Some(#value)),
        (None, true) => quote!(None),
        (value, false) => option(value),
    };
    // `Some(sql! { … })`, or `None` where no dialect has the statement.
    let sql_if_any = |build: &dyn Fn(Dialect) -> String| {
        option(
            DIALECTS
                .iter()
                .any(|d| !build(*d).is_empty())
                .then(|| sql_per_dialect(&sg, build)),
        )
    };
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
    // Each state names only what differs from a plain state
    // (`StateParts::of`): its initial flag, in-flight lease, since column
    // and timeout.
    let initials = (0..idents.len()).map(|i| (i == model.initial).then(|| quote!(initial: true,)));
    let sinces = model.states.iter().map(|state| {
        (state.since.as_ref())
            .filter(|_| state.in_flight.is_none())
            .map(|since| {
                let since = option(Some(quote!(#since)));
                quote!(since: #since,)
            })
    });
    let timeouts = (model.states.iter()).map(|state| {
        let ms = state.timeout_ms?;
        let ms = option(Some(quote!(#ms)));
        Some(quote!(timeout_ms: #ms,))
    });
    let in_flights = model.states.iter().map(|state| {
        let f = state.in_flight.as_ref()?;
        let (lease_ms, since, done) = (f.lease_ms, &f.since, f.done);
        let transitions = format_ident!("__TRANSITIONS");
        let done = quote!(&#transitions[#done]);
        let failed = option(f.failed.map(|i| quote!(&#transitions[#i])));
        let expired = sql_per_dialect(&sg, |d| d.expired(model, state, f));
        let claim = sql_per_dialect(&sg, |d| d.claim(model, state, f));
        let take_over = sql_per_dialect(&sg, |d| d.take_over(model, state, f));
        let renew = sql_per_dialect(&sg, |d| d.renew(model, state, f));
        let lease_read = sql_per_dialect(&sg, |d| d.lease_read(model, f));
        let follow_up_read = sql_per_dialect(&sg, |d| d.follow_up_read(model, f));
        let follow_up = |i: usize| {
            sql_per_dialect(&sg, |d| d.follow_up(model, state, f, &model.transitions[i]))
        };
        let follow_up_history_insert = |i: usize| {
            sql_if_any(&|d| d.follow_up_history_insert(model, state, f, &model.transitions[i]))
        };
        let follow_up_outbox_insert = |i: usize| {
            sql_if_any(&|d| d.follow_up_outbox_insert(model, state, f, &model.transitions[i]))
        };
        let done_sql = follow_up(f.done);
        let done_history_insert = follow_up_history_insert(f.done);
        let done_outbox_insert = follow_up_outbox_insert(f.done);
        let failed_sql = option(f.failed.map(follow_up));
        let (failed_history_insert, failed_outbox_insert) = match f.failed {
            Some(i) => (follow_up_history_insert(i), follow_up_outbox_insert(i)),
            None => (option(None), option(None)),
        };
        let renew_many = sql_per_dialect(&sg, |d| d.renew_many(model, state, f));
        let expired_locked = sql_per_dialect(&sg, |d| d.expired_locked(model, state, f));
        let take_over_keyed = sql_per_dialect(&sg, |d| d.take_over_keyed(model, state, f));
        let read_many = sql_per_dialect(&sg, |d| d.read_many(model, f));
        let follow_up_many = |i: usize| {
            sql_per_dialect(&sg, |d| {
                d.follow_up_many(model, state, f, &model.transitions[i])
            })
        };
        let follow_up_many_history_insert = |i: usize| {
            sql_if_any(&|d| d.follow_up_many_history_insert(model, state, f, &model.transitions[i]))
        };
        let follow_up_many_outbox_insert = |i: usize| {
            sql_if_any(&|d| d.follow_up_many_outbox_insert(model, state, f, &model.transitions[i]))
        };
        let done_many = follow_up_many(f.done);
        let done_many_history_insert = follow_up_many_history_insert(f.done);
        let done_many_outbox_insert = follow_up_many_outbox_insert(f.done);
        let failed_many = option(f.failed.map(follow_up_many));
        let (failed_many_history_insert, failed_many_outbox_insert) = match f.failed {
            Some(i) => (
                follow_up_many_history_insert(i),
                follow_up_many_outbox_insert(i),
            ),
            None => (option(None), option(None)),
        };
        let retry = option(f.retry.as_ref().map(|retry| {
            let crate::model::Retry {
                max,
                backoff_min_ms,
                backoff_max_ms,
                attempts,
                next_attempt,
            } = retry;
            let postpone = sql_per_dialect(&sg, |d| d.postpone(model, state, f));
            let postpone_many = sql_per_dialect(&sg, |d| d.postpone_many(model, state, f));
            quote! {
                #sg::RetryParts {
                    max: #max,
                    backoff_min_ms: #backoff_min_ms,
                    backoff_max_ms: #backoff_max_ms,
                    attempts: #attempts,
                    next_attempt: #next_attempt,
                    postpone: #postpone,
                    postpone_many: #postpone_many,
                }
            }
        }));
        let in_flight = quote! {
            #sg::in_flight(#sg::InFlightParts {
                lease_ms: #lease_ms,
                since: #since,
                done: #done,
                failed: #failed,
                expired: #expired,
                claim: #claim,
                take_over: #take_over,
                renew: #renew,
                lease_read: #lease_read,
                follow_up_read: #follow_up_read,
                done_sql: #done_sql,
                failed_sql: #failed_sql,
                done_history_insert: #done_history_insert,
                failed_history_insert: #failed_history_insert,
                done_outbox_insert: #done_outbox_insert,
                failed_outbox_insert: #failed_outbox_insert,
                renew_many: #renew_many,
                expired_locked: #expired_locked,
                take_over_keyed: #take_over_keyed,
                read_many: #read_many,
                done_many: #done_many,
                failed_many: #failed_many,
                done_many_history_insert: #done_many_history_insert,
                failed_many_history_insert: #failed_many_history_insert,
                done_many_outbox_insert: #done_many_outbox_insert,
                failed_many_outbox_insert: #failed_many_outbox_insert,
                retry: #retry,
            })
        };
        let in_flight = option(Some(quote!(&#in_flight)));
        Some(quote!(in_flight: #in_flight,))
    });
    let version = option(model.version.as_ref().map(|version| quote!(#version)));
    let initial = idents[model.initial];

    let select = sql_per_dialect(&sg, |d| d.select(model, false));
    let select_in_transaction = sql_per_dialect(&sg, |d| d.select(model, true));
    let history = option(model.history.as_ref().map(|table| quote!(#table)));
    let history_read = sql_if_any(&|d| d.history_read(model));
    let available = sql_per_dialect(&sg, |d| d.available(model));
    let available_bits = model.available_bits();
    let outbox = &model.outbox;
    let fingerprint = crate::ddl::fingerprint(model);
    let ddl = ddl_per_dialect(&sg, model);
    let table_text = table_per_dialect(&sg, model);

    let transition_defs = model
        .transitions
        .iter()
        .zip(&available_bits)
        .map(|(t, bit)| {
            let available_bit = option(bit.map(|bit| quote!(#bit)));
            let name = t.name.unraw().to_string();
            let sources = t.sources.iter().map(|&i| idents[i]);
            let target = idents[t.target];
            let update = sql_per_dialect(&sg, |d| d.update_with_history(model, t, false));
            let update_expecting = option(
                (model.version.as_ref())
                    .map(|_| sql_per_dialect(&sg, |d| d.update_with_history(model, t, true))),
            );
            let read_back = sql_if_any(&|d| d.read_back(model, t));
            let claim = sql_per_dialect(&sg, |d| d.claim_next(model, t));
            let history_insert = sql_if_any(&|d| d.history_insert(model, t, false));
            let history_insert_expecting = sql_if_any(&|d| d.history_insert(model, t, true));
            let outbox_insert = sql_if_any(&|d| d.outbox_insert(model, t, false));
            let outbox_insert_expecting = sql_if_any(&|d| d.outbox_insert(model, t, true));
            let emit = option(t.emit.as_ref().map(|emit| {
                let topic = &emit.topic;
                quote!(#topic)
            }));
            // Only where every dialect can claim by age.
            let claim_older = option(
                DIALECTS
                    .iter()
                    .all(|d| !d.claim_older(model, t).is_empty())
                    .then(|| sql_per_dialect(&sg, |d| d.claim_older(model, t))),
            );
            let many_update = sql_per_dialect(&sg, |d| d.many_update(model, t, Match::Exact));
            let many_read = sql_per_dialect(&sg, |d| d.many_read(model, t, Match::Exact));
            let many_update_by_value =
                sql_per_dialect(&sg, |d| d.many_update(model, t, Match::ByValue));
            let many_read_by_value =
                sql_per_dialect(&sg, |d| d.many_read(model, t, Match::ByValue));
            let many_lease_read = sql_if_any(&|d| d.many_lease(model, t));
            let many_history_insert = sql_if_any(&|d| d.many_history_insert(model, t));
            let many_outbox_insert = sql_if_any(&|d| d.many_outbox_insert(model, t));
            let guard = option(t.guard.as_ref().map(|guard| {
                let text = &guard.text;
                quote!(#text)
            }));
            let guarded_select =
                sql_if_any(&|d| d.select_guarded(model, t, false).unwrap_or_default());
            let guarded_select_in_transaction =
                sql_if_any(&|d| d.select_guarded(model, t, true).unwrap_or_default());
            let set = t.set.iter().map(|(col, value)| {
                let written = value.written();
                quote!(#sg::set_column(#sg::SetParts { column: #col, expr: #written }))
            });
            let fields = present(
                &option(None),
                [
                    ("name", quote!(#name)),
                    ("sources", quote!(&[#(#ident::#sources),*])),
                    ("set", quote!(&[#(#set),*])),
                    ("update", update),
                    ("update_expecting", update_expecting),
                    ("read_back", read_back),
                    ("guard", guard),
                    ("guarded_select", guarded_select),
                    (
                        "guarded_select_in_transaction",
                        guarded_select_in_transaction,
                    ),
                    ("claim", claim),
                    ("claim_older", claim_older),
                    ("history_insert", history_insert),
                    ("history_insert_expecting", history_insert_expecting),
                    ("emit", emit),
                    ("outbox_insert", outbox_insert),
                    ("outbox_insert_expecting", outbox_insert_expecting),
                    ("many_update", many_update),
                    ("many_read", many_read),
                    ("many_lease_read", many_lease_read),
                    ("many_history_insert", many_history_insert),
                    ("many_outbox_insert", many_outbox_insert),
                    ("many_update_by_value", many_update_by_value),
                    ("many_read_by_value", many_read_by_value),
                    ("available_bit", available_bit),
                ],
            );
            quote! {
                #sg::transition(#sg::TransitionParts {
                    #fields
                    ..#sg::TransitionParts::of(#ident::#target)
                })
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
    // Each by its position among the machine's transitions.
    let follow_up_indexes = follow_ups.iter();
    let follow_up_types: Vec<_> = follow_ups
        .iter()
        .map(|&i| {
            let types = model.transitions[i].params().map(|(_, ty)| ty);
            quote!((#(#types,)*))
        })
        .collect();
    let follow_up_types2 = follow_up_types.iter();
    // A machine without such follow-ups keeps the trait's default: none
    // binds values.
    let binders = (!follow_ups.is_empty()).then(|| {
        quote! {
            fn follow_up_values(transition: usize) -> #private::Binder<__DB> {
                match transition {
                    #(#follow_up_indexes => #private::binder::<__DB, #follow_up_types2>(),)*
                    _ => #private::binder::<__DB, ()>(),
                }
            }
        }
    });
    let follow_up_values = quote! {
        #[automatically_derived]
        impl<__DB: #krate::Backend> #private::FollowUpValues<__DB> for #ident
        where
            #(#follow_up_types: #private::Params<__DB>,)*
        {
            #binders
        }
    };

    // The SQL type sqlx gives each Rust type the machine declares for a
    // column (`key_type`, `bind(Type)`), for `ddl::table`: on every
    // backend that has one for each of them.
    let rust_types: Vec<syn::Type> = (crate::ddl::table::rust_types(model).into_iter())
        .map(lifetimes_named)
        .collect();
    let column_types = quote! {
        #[automatically_derived]
        impl<__DB: #krate::Backend> #private::ColumnTypes<__DB> for #ident
        where
            #(#rust_types: #private::sqlx::Type<__DB>,)*
        {
            const COLUMN_TYPES: &'static [#private::SqlTypeFn] =
                &[#(#private::sql_type::<__DB, #rust_types>),*];
        }
    };

    // `Verdict::done()` and `Verdict::failed()` end a row without values:
    // only for a machine where every in-flight state's follow-up of that
    // kind binds none, so that a verdict without the values
    // its follow-up writes is a compile error, not a failure after the
    // effect ran.
    let in_flight: Vec<_> = model
        .states
        .iter()
        .filter_map(|s| s.in_flight.as_ref())
        .collect();
    let plain =
        |follow_up: Option<usize>| follow_up.is_some_and(|i| model.transitions[i].binds() == 0);
    // A machine without in-flight states has no follow-up to end: neither.
    let any = !in_flight.is_empty();
    let plain_done = (any && in_flight.iter().all(|f| plain(Some(f.done)))).then(|| {
        quote! {
            #[automatically_derived]
            impl #private::PlainDone for #ident {}
        }
    });
    let plain_failed = (any && in_flight.iter().all(|f| plain(f.failed))).then(|| {
        quote! {
            #[automatically_derived]
            impl #private::PlainFailed for #ident {}
        }
    });

    // `Display`, `FromStr` and the sqlx (and serde) impls over the database
    // strings, unless the enum has its own (`conversions = false`).
    let text = match input.attrs.conversions {
        Some(false) => TokenStream::new(),
        _ => quote!(#private::text!(#ident);),
    };

    // The key type `claim` and `recover` read rows' keys back as: the
    // declared one alone, so that they infer it, or any.
    let key_type = match &input.attrs.key_type {
        Some(ty) => quote! {
            #[automatically_derived]
            impl #private::KeyType<#ty> for #ident {}
        },
        None => quote! {
            #[automatically_derived]
            impl<__K> #private::KeyType<__K> for #ident {}
        },
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

    let n_states = proc_macro2::Literal::usize_unsuffixed(idents.len());
    let n_transitions = proc_macro2::Literal::usize_unsuffixed(model.transitions.len());
    // Scoped inside the `MACHINE` block, so fixed names cannot clash.
    let states_const = format_ident!("__STATES");
    let transitions_const = format_ident!("__TRANSITIONS");
    let machine_const = format_ident!("__MACHINE");

    quote! {
        #[automatically_derived]
        impl #krate::StateMachine for #ident {
            type KeyShape = #krate::key::shape::#key_shape;

            const MACHINE: &'static #private::Machine<Self> = {
                #prelude
                // Statics, not constants: the metadata exists once in the
                // binary, and every use reads it there instead of a copy.
                static #states_const: [#sg::StateDef<#ident>; #n_states] = [
                    #(#sg::state(#sg::StateParts {
                        variant: #variant_names,
                        db: #dbs,
                        #initials
                        #in_flights
                        #sinces
                        #timeouts
                        ..#sg::StateParts::of(#ident::#idents)
                    })),*
                ];
                static #transitions_const: [#sg::TransitionDef<#ident>; #n_transitions] = [
                    #(#transition_defs),*
                ];
                static #machine_const: #sg::Machine<#ident> =
                    #sg::machine(#sg::MachineParts {
                        name: #name,
                        table: #table,
                        column: #column,
                        key: #key,
                        key_columns: &[#(#key_columns),*],
                        version: #version,
                        initial: #ident::#initial,
                        states: &#states_const,
                        transitions: &#transitions_const,
                        select: #select,
                        select_in_transaction: #select_in_transaction,
                        history: #history,
                        history_read: #history_read,
                        available: #available,
                        outbox: #outbox,
                        fingerprint: #fingerprint,
                        ddl: #ddl,
                        table_text: #table_text,
                    });
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
        #column_types
        #plain_done
        #plain_failed

        #has_history

        #has_version

        #key_type

        // No `#[automatically_derived]`: rustc accepts it only on trait
        // impls and is phasing it out elsewhere. A transition may share the
        // enum's name (`Hold::hold()`), which clippy would flag in the
        // user's crate.
        #[allow(clippy::self_named_constructors)]
        impl #ident {
            #(#constructors)*
        }

        #text
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
    // Each constructor once, with the parameters its first declaration
    // gives it (`set(col = bind(T))`, then the guard's `name = bind(T)`),
    // so that calls with arguments meet the signature they will have.
    let mut constructors: Vec<(syn::Ident, Vec<(syn::Ident, syn::Type)>)> = Vec::new();
    for variant in &data.variants {
        for transition in crate::attr::variant(&mut cx, variant).transitions {
            if constructors
                .iter()
                .any(|(name, _)| *name == transition.name)
            {
                continue;
            }
            let set = transition.set.iter().filter_map(|item| match &item.value {
                crate::attr::SetValue::Bind(ty) => Some((item.column.clone(), (**ty).clone())),
                crate::attr::SetValue::Expr(_) => None,
            });
            let guard = transition
                .guard
                .iter()
                .flat_map(|g| g.params.iter().map(|p| (p.name.clone(), (*p.ty).clone())));
            constructors.push((transition.name, set.chain(guard).collect()));
        }
    }
    let constructors = constructors.iter().map(|(name, params)| {
        if params.is_empty() {
            return quote! {
                #vis const fn #name() -> #krate::Transition<Self> {
                    ::core::unimplemented!()
                }
            };
        }
        // A name declared twice is an error reported already; the
        // parameters stay apart.
        let names = params.iter().enumerate().map(|(i, (name, _))| {
            match params[..i].iter().any(|(earlier, _)| earlier == name) {
                true => format_ident!("{}_{}", name, i),
                false => name.clone(),
            }
        });
        let types = params.iter().map(|(_, ty)| ty);
        let types2 = params.iter().map(|(_, ty)| ty);
        quote! {
            #[allow(unused_variables)]
            #vis fn #name(#(#names: #types),*) -> #krate::Bound<Self, (#(#types2,)*)> {
                ::core::unimplemented!()
            }
        }
    });
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
        impl<__K> #krate::__private::KeyType<__K> for #ident {}

        #[automatically_derived]
        impl<__DB: #krate::Backend> #krate::__private::FollowUpValues<__DB> for #ident {
            fn follow_up_values(_: usize) -> #krate::__private::Binder<__DB> {
                ::core::unimplemented!()
            }
        }

        #[automatically_derived]
        impl<__DB: #krate::Backend> #krate::__private::ColumnTypes<__DB> for #ident {
            const COLUMN_TYPES: &'static [#krate::__private::SqlTypeFn] = &[];
        }

        #[automatically_derived]
        impl #krate::__private::PlainDone for #ident {}

        #[automatically_derived]
        impl #krate::__private::PlainFailed for #ident {}

        impl #ident {
            #(#constructors)*
        }
    }
}

/// `ty` with each elided lifetime, and each `'_`, named `'static`: a type
/// in a `where` clause names its lifetimes, and `bind(&str)` names none.
fn lifetimes_named(ty: &syn::Type) -> syn::Type {
    fn name(ty: &mut syn::Type) {
        let named = |lifetime: &mut syn::Lifetime| {
            if lifetime.ident == "_" {
                *lifetime = syn::Lifetime::new("'static", lifetime.span());
            }
        };
        match ty {
            syn::Type::Reference(reference) => {
                match &mut reference.lifetime {
                    Some(lifetime) => named(lifetime),
                    None => {
                        let span = reference.and_token.span;
                        reference.lifetime = Some(syn::Lifetime::new("'static", span));
                    }
                }
                name(&mut reference.elem);
            }
            syn::Type::Path(path) => {
                if let Some(qself) = &mut path.qself {
                    name(&mut qself.ty);
                }
                for segment in &mut path.path.segments {
                    if let syn::PathArguments::AngleBracketed(args) = &mut segment.arguments {
                        for arg in &mut args.args {
                            match arg {
                                syn::GenericArgument::Type(ty) => name(ty),
                                syn::GenericArgument::Lifetime(lifetime) => named(lifetime),
                                _ => {}
                            }
                        }
                    }
                }
            }
            syn::Type::Tuple(tuple) => tuple.elems.iter_mut().for_each(name),
            syn::Type::Array(array) => name(&mut array.elem),
            syn::Type::Slice(slice) => name(&mut slice.elem),
            syn::Type::Paren(paren) => name(&mut paren.elem),
            syn::Type::Group(group) => name(&mut group.elem),
            _ => {}
        }
    }
    let mut ty = ty.clone();
    name(&mut ty);
    ty
}

/// `Some(value)` or `None`, as tokens of a constant.
/// A struct literal's fields, each that is not `none` nor an empty list:
/// the `..` default after them supplies the rest.
fn present<const N: usize>(none: &TokenStream, fields: [(&str, TokenStream); N]) -> TokenStream {
    let none = none.to_string();
    fields
        .into_iter()
        .filter(|(_, value)| ![none.as_str(), "& []"].contains(&value.to_string().as_str()))
        .map(|(name, value)| {
            let name = format_ident!("{name}");
            quote!(#name: #value,)
        })
        .collect()
}

fn option(value: Option<impl ToTokens>) -> TokenStream {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}
