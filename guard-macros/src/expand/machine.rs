//! The `MACHINE` constant's block: the machine's metadata as statics, its
//! states (with their in-flight and retry parts) and its transitions.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::ext::IdentExt;

use crate::dialect::DIALECTS;
use crate::model::{InFlight, Retry, State, Transition};
use crate::sql::Match;

use super::Gen;
use super::statement::{ddl_per_dialect, table_per_dialect};

impl Gen<'_> {
    /// The block the `MACHINE` constant is: the states, the transitions
    /// and the machine, each a static, and the machine's reference.
    pub(super) fn machine(&self) -> TokenStream {
        let (model, private, sg, ident) = (self.model, &self.private, &self.sg, self.model.ident);
        // The alias and the bare variants of a `short` block.
        let prelude = self.short.then(|| {
            quote! {
                use #private as __sg;
                use ::core::option::Option::{None, Some};
            }
        });
        let name = ident.unraw().to_string();
        let (table, column) = (&model.table, &model.column);
        let key = model.key_text();
        let key_columns = &model.key;
        let version = self.option(model.version.as_ref().map(|version| quote!(#version)));
        let initial = model.states[model.initial].ident;

        let select = self.sql(|d| d.select(model, false));
        let select_in_transaction = self.sql(|d| d.select(model, true));
        let history = self.option(model.history.as_ref().map(|table| quote!(#table)));
        let history_read = self.sql_if_any(|d| d.history_read(model));
        let available = self.sql(|d| d.available(model));
        let counts = self.sql(|d| d.counts(model));
        let rows = self.sql(|d| d.rows(model, false));
        let rows_after = self.sql(|d| d.rows(model, true));
        let outbox = &model.outbox;
        let fingerprint = crate::ddl::fingerprint(model);
        let ddl = ddl_per_dialect(sg, model);
        let table_text = table_per_dialect(sg, model);

        // `apply_many`'s reads of an unguarded transition depend on the
        // machine alone: one constant each, which every such transition
        // names.
        let unguarded = model.transitions.iter().find(|t| t.guard.is_none());
        let unguarded_reads = unguarded.map(|t| {
            let read = self.sql(|d| d.many_read(model, t, Match::Exact));
            let by_value = self.sql(|d| d.many_read(model, t, Match::ByValue));
            quote! {
                const __MANY_READ: #sg::Sql = #read;
                const __MANY_READ_BY_VALUE: #sg::Sql = #by_value;
            }
        });
        let states = (model.states.iter().enumerate()).map(|(i, state)| self.state(i, state));
        let transitions = (model.transitions.iter())
            .zip(model.available_bits())
            .map(|(t, bit)| self.transition(t, bit));

        let n_states = proc_macro2::Literal::usize_unsuffixed(model.states.len());
        let n_transitions = proc_macro2::Literal::usize_unsuffixed(model.transitions.len());
        // Scoped inside the `MACHINE` block, so fixed names cannot clash.
        let states_const = format_ident!("__STATES");
        let transitions_const = format_ident!("__TRANSITIONS");
        let machine_const = format_ident!("__MACHINE");

        quote! {
            {
                #prelude
                #unguarded_reads
                // Statics, not constants: the metadata exists once in the
                // binary, and every use reads it there instead of a copy.
                static #states_const: [#sg::StateDef<#ident>; #n_states] = [
                    #(#states),*
                ];
                static #transitions_const: [#sg::TransitionDef<#ident>; #n_transitions] = [
                    #(#transitions),*
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
                        counts: #counts,
                        rows: #rows,
                        rows_after: #rows_after,
                        outbox: #outbox,
                        fingerprint: #fingerprint,
                        ddl: #ddl,
                        table_text: #table_text,
                    });
                &#machine_const
            }
        }
    }

    /// The `StateDef` of `state`, the `i`th. It names only what differs
    /// from a plain state (`StateParts::of`): its initial flag, in-flight
    /// lease, since column and timeout.
    fn state(&self, i: usize, state: &State) -> TokenStream {
        let (sg, ident, variant) = (&self.sg, self.model.ident, state.ident);
        let variant_name = variant.unraw().to_string();
        let db = state.db.as_str();
        let initial = (i == self.model.initial).then(|| quote!(initial: true,));
        let in_flight = state.in_flight.as_ref().map(|f| {
            let in_flight = self.in_flight(state, f);
            let in_flight = self.option(Some(quote!(&#in_flight)));
            quote!(in_flight: #in_flight,)
        });
        let since = (state.since.as_ref())
            .filter(|_| state.in_flight.is_none())
            .map(|since| {
                let since = self.option(Some(quote!(#since)));
                quote!(since: #since,)
            });
        let timeout = state.timeout_ms.map(|ms| {
            let ms = self.option(Some(quote!(#ms)));
            quote!(timeout_ms: #ms,)
        });
        quote! {
            #sg::state(#sg::StateParts {
                variant: #variant_name,
                db: #db,
                #initial
                #in_flight
                #since
                #timeout
                ..#sg::StateParts::of(#ident::#variant)
            })
        }
    }

    /// The in-flight parts of `state`: its lease, its follow-ups and the
    /// statements that claim, renew, take over and end its rows.
    fn in_flight(&self, state: &State, f: &InFlight) -> TokenStream {
        let (model, sg) = (self.model, &self.sg);
        let (lease_ms, since, done) = (f.lease_ms, &f.since, f.done);
        let transitions = format_ident!("__TRANSITIONS");
        let done = quote!(&#transitions[#done]);
        let failed = self.option(f.failed.map(|i| quote!(&#transitions[#i])));
        let expired = self.sql(|d| d.expired(model, state, f));
        let claim = self.sql(|d| d.claim(model, state, f));
        let take_over = self.sql(|d| d.take_over(model, state, f));
        let renew = self.sql(|d| d.renew(model, state, f));
        let lease_read = self.sql(|d| d.lease_read(model, f));
        let follow_up_read = self.sql(|d| d.follow_up_read(model, f));
        let follow_up =
            |i: usize| self.sql(|d| d.follow_up(model, state, f, &model.transitions[i]));
        let follow_up_history_insert = |i: usize| {
            self.sql_if_any(|d| d.follow_up_history_insert(model, state, f, &model.transitions[i]))
        };
        let follow_up_outbox_insert = |i: usize| {
            self.sql_if_any(|d| d.follow_up_outbox_insert(model, state, f, &model.transitions[i]))
        };
        let done_sql = follow_up(f.done);
        let done_history_insert = follow_up_history_insert(f.done);
        let done_outbox_insert = follow_up_outbox_insert(f.done);
        let failed_sql = self.option(f.failed.map(follow_up));
        let (failed_history_insert, failed_outbox_insert) = match f.failed {
            Some(i) => (follow_up_history_insert(i), follow_up_outbox_insert(i)),
            None => (self.option(None), self.option(None)),
        };
        let renew_many = self.sql(|d| d.renew_many(model, state, f));
        let release_many = self.sql(|d| d.release_many(model, state, f));
        let behind = self.sql(|d| d.behind(model, state, f));
        let wake_up = crate::ddl::wake_up(model, state);
        let expired_locked = self.sql(|d| d.expired_locked(model, state, f));
        let take_over_keyed = self.sql(|d| d.take_over_keyed(model, state, f));
        let read_many = self.sql(|d| d.read_many(model, f));
        let follow_up_many =
            |i: usize| self.sql(|d| d.follow_up_many(model, state, f, &model.transitions[i]));
        let follow_up_many_history_insert = |i: usize| {
            self.sql_if_any(|d| {
                d.follow_up_many_history_insert(model, state, f, &model.transitions[i])
            })
        };
        let follow_up_many_outbox_insert = |i: usize| {
            self.sql_if_any(|d| {
                d.follow_up_many_outbox_insert(model, state, f, &model.transitions[i])
            })
        };
        let done_many = follow_up_many(f.done);
        let done_many_history_insert = follow_up_many_history_insert(f.done);
        let done_many_outbox_insert = follow_up_many_outbox_insert(f.done);
        let failed_many = self.option(f.failed.map(follow_up_many));
        let (failed_many_history_insert, failed_many_outbox_insert) = match f.failed {
            Some(i) => (
                follow_up_many_history_insert(i),
                follow_up_many_outbox_insert(i),
            ),
            None => (self.option(None), self.option(None)),
        };
        let retry = self.option(f.retry.as_ref().map(|retry| self.retry(state, f, retry)));
        quote! {
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
                release_many: #release_many,
                behind: #behind,
                wake_up: #wake_up,
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
        }
    }

    /// The `RetryParts` of the in-flight `state`: its attempts, backoff
    /// and the statements that postpone its rows.
    fn retry(&self, state: &State, f: &InFlight, retry: &Retry) -> TokenStream {
        let (model, sg) = (self.model, &self.sg);
        let Retry {
            max,
            backoff_min_ms,
            backoff_max_ms,
            attempts,
            next_attempt,
            last_error,
        } = retry;
        let last_error = self.option(last_error.as_ref().map(|column| quote!(#column)));
        let postpone = self.sql(|d| d.postpone(model, state, f));
        let postpone_many = self.sql(|d| d.postpone_many(model, state, f));
        quote! {
            #sg::RetryParts {
                max: #max,
                backoff_min_ms: #backoff_min_ms,
                backoff_max_ms: #backoff_max_ms,
                attempts: #attempts,
                next_attempt: #next_attempt,
                last_error: #last_error,
                postpone: #postpone,
                postpone_many: #postpone_many,
            }
        }
    }

    /// The `TransitionDef` of `t`, whose guard is bit `bit` of
    /// `available`'s mask. It names only the parts `t` has
    /// (`TransitionParts::of`).
    fn transition(&self, t: &Transition, bit: Option<u8>) -> TokenStream {
        let (model, sg, ident) = (self.model, &self.sg, self.model.ident);
        let available_bit = self.option(bit.map(|bit| quote!(#bit)));
        let name = t.name.unraw().to_string();
        let sources = t.sources.iter().map(|&i| model.states[i].ident);
        let target = model.states[t.target].ident;
        let update = self.sql(|d| d.update_with_history(model, t, false));
        let update_expecting = self.option(
            (model.version.as_ref()).map(|_| self.sql(|d| d.update_with_history(model, t, true))),
        );
        let read_back = self.sql_if_any(|d| d.read_back(model, t));
        let claim = self.sql(|d| d.claim_next(model, t));
        let history_insert = self.sql_if_any(|d| d.history_insert(model, t, false));
        let history_insert_expecting = self.sql_if_any(|d| d.history_insert(model, t, true));
        let outbox_insert = self.sql_if_any(|d| d.outbox_insert(model, t, false));
        let outbox_insert_expecting = self.sql_if_any(|d| d.outbox_insert(model, t, true));
        let emit = self.option(t.emit.as_ref().map(|emit| {
            let topic = &emit.topic;
            quote!(#topic)
        }));
        // Only where every dialect can claim by age.
        let claim_older = self.option(
            DIALECTS
                .iter()
                .all(|d| !d.claim_older(model, t).is_empty())
                .then(|| self.sql(|d| d.claim_older(model, t))),
        );
        let many_update = self.sql(|d| d.many_update(model, t, Match::Exact));
        let many_read = self.many_read(t, Match::Exact);
        let many_update_by_value = self.sql(|d| d.many_update(model, t, Match::ByValue));
        let many_read_by_value = self.many_read(t, Match::ByValue);
        let many_lease_read = self.sql_if_any(|d| d.many_lease(model, t));
        let many_history_insert = self.sql_if_any(|d| d.many_history_insert(model, t));
        let many_outbox_insert = self.sql_if_any(|d| d.many_outbox_insert(model, t));
        let guard = self.option(t.guard.as_ref().map(|guard| {
            let text = &guard.text;
            quote!(#text)
        }));
        let guarded_select =
            self.sql_if_any(|d| d.select_guarded(model, t, false).unwrap_or_default());
        let guarded_select_in_transaction =
            self.sql_if_any(|d| d.select_guarded(model, t, true).unwrap_or_default());
        let set = t.set.iter().map(|(col, value)| {
            let written = value.written();
            quote!(#sg::set_column(#sg::SetParts { column: #col, expr: #written }))
        });
        let fields = present(
            &self.option(None),
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
    }

    /// `apply_many`'s read for `t`, matching keys `by`: its own statement
    /// if `t` is guarded, else the name of the constant `machine` writes,
    /// whose text is the same for every unguarded transition.
    fn many_read(&self, t: &Transition, by: Match) -> TokenStream {
        match (&t.guard, by) {
            (Some(_), _) => self.sql(|d| d.many_read(self.model, t, by)),
            (None, Match::Exact) => quote!(__MANY_READ),
            (None, Match::ByValue) => quote!(__MANY_READ_BY_VALUE),
        }
    }
}

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
