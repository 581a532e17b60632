//! Checks of the whole machine, building its [`Model`]. Each error points
//! at the token that causes it, and all of them are reported.
//!
//! **Architecture Invariant:** a [`Model`] exists only for an enum that
//! passed every check; expansion (`expand/`, `sql/`, `ddl.rs`) trusts
//! its names and fragments and checks nothing again.
//!
//! - `names.rs`: the table, columns, key, order, history and version.
//! - `graph.rs`: states, the initial state and the transitions between
//!   them (no self-loops, a cycle only with a version column, every state
//!   reachable).
//! - `set.rs`: `set(...)` assignments and guards.
//! - `in_flight.rs`: in-flight states, their leases and `since` stamps.
//! - `emit.rs`: the messages winning moves write to the outbox.

mod emit;
mod graph;
mod in_flight;
mod names;
mod set;

use syn::LitStr;

use crate::ast::Input;
use crate::ctxt::Ctxt;
use crate::model::Model;

use graph::{check_acyclic, check_initial, check_reachable, check_states, check_transitions};
use in_flight::{check_in_flight, check_since_columns, check_superseding};
use names::{check_history, check_names, check_order, check_outbox, check_version};

pub fn check<'a>(cx: &mut Ctxt, input: &'a Input<'a>) -> Option<Model<'a>> {
    let node = input.original;
    if !node.generics.params.is_empty() {
        cx.error(
            &node.generics,
            "a StateMachine enum cannot have generic parameters",
        );
    }
    // `Machine::counts` reads one column per state, numbered by a byte.
    if let Some(extra) = input.variants.get(usize::from(u8::MAX) + 1) {
        cx.error(
            extra.ident,
            format!(
                "a StateMachine has at most {} states",
                usize::from(u8::MAX) + 1
            ),
        );
    }
    for variant in &input.variants {
        if !matches!(variant.original.fields, syn::Fields::Unit) {
            cx.error(
                &variant.original.fields,
                format!(
                    "state `{}` has fields; every state must be a unit variant",
                    variant.ident
                ),
            );
        }
    }

    let names = check_names(cx, input);
    let mut states = check_states(cx, input);
    let initial = check_initial(cx, input);
    // Columns stateguard writes itself, with what to say when `set` names one.
    let mut reserved: Vec<(&str, &str)> = Vec::new();
    if let Some((_, column, key)) = &names {
        reserved.push((column, "the transition already sets the status column"));
        for key in key {
            reserved.push((key, "a transition cannot change a key column"));
        }
    }
    let version = check_version(cx, input, &reserved);
    if let Some(version) = &version {
        reserved.push((
            version,
            "every transition increments the version column itself",
        ));
    }
    // The retry columns of in-flight states, which the lease statements
    // write.
    let base = reserved.len();
    let retry_columns: Vec<(String, &str)> = input
        .variants
        .iter()
        .filter_map(|v| v.in_flight.as_ref()?.retry.as_ref())
        .flat_map(|r| {
            let attempts = r.attempts.as_ref().map(|lit| {
                (
                    lit.value(),
                    "stateguard counts the effect's attempts in this column itself",
                )
            });
            let next = r.next_attempt.as_ref().map(|lit| {
                (
                    lit.value(),
                    "stateguard writes when the next attempt is due in this column itself",
                )
            });
            let last_error = r.last_error.as_ref().map(|lit| {
                (
                    lit.value(),
                    "stateguard writes the reason of the last retry in this column itself",
                )
            });
            attempts.into_iter().chain(next).chain(last_error)
        })
        .collect();
    reserved.extend(retry_columns.iter().map(|(c, why)| (c.as_str(), *why)));
    let since_columns: Vec<String> = input
        .variants
        .iter()
        .filter_map(|v| {
            let since = v.in_flight.as_ref().and_then(|f| f.since.as_ref());
            since.or(v.since.as_ref()).map(LitStr::value)
        })
        .collect();
    // Columns every UPDATE of this machine writes, besides its `set` ones.
    let mut written: Vec<(&str, &str)> = Vec::new();
    if let Some((_, column, _)) = &names {
        written.push((column, "the status column"));
    }
    if let Some(version) = &version {
        written.push((version, "the version column"));
    }
    let key: &[String] = match &names {
        Some((_, _, key)) => key,
        None => &[],
    };
    let transitions = check_transitions(cx, input, &reserved, &since_columns, &written, key);
    // The message id names the occurrence, which only a version column
    // counts: without one, two passes through a state would share an id.
    if input.attrs.version.is_none() {
        for attr in input.variants.iter().flat_map(|v| &v.transitions) {
            if let Some(emit) = &attr.emit {
                cx.error(
                    emit.token,
                    "`emit` needs a version column: the message id names the occurrence it \
                     counts (add `version = \"…\"` to #[state_machine(...)])",
                );
            }
        }
    }
    let all_parsed = !input.variants.iter().any(|v| v.transitions_incomplete);
    if let (Some(initial), Some(transitions), true) = (initial, &transitions, all_parsed) {
        check_reachable(cx, input, initial, transitions);
        if input.attrs.version.is_none() {
            check_acyclic(cx, input, transitions);
        }
    }
    if let Some(transitions) = &transitions {
        let guards = transitions
            .iter()
            .filter(|t| t.guard.as_ref().is_some_and(|g| g.params.is_empty()))
            .count();
        if guards > crate::model::MAX_AVAILABLE_GUARDS {
            cx.error(
                input.ident,
                format!(
                    "{guards} transitions have guards that bind no values; `available` reads at \
                     most {} of them in one statement",
                    crate::model::MAX_AVAILABLE_GUARDS
                ),
            );
        }
    }
    if let (Some(states), Some(transitions)) = (&mut states, &transitions) {
        check_in_flight(
            cx,
            input,
            &reserved[..base],
            &since_columns,
            states,
            transitions,
        );
        check_since_columns(cx, input, &reserved, states);
    }
    check_superseding(cx, input);

    let (table, column, key) = names?;
    let order = match &input.attrs.order {
        Some(lit) => check_order(cx, lit)?,
        None => key.clone(),
    };
    let history = match &input.attrs.history {
        Some(lit) => Some(check_history(cx, lit, &key, &table)?),
        None => None,
    };
    let outbox = match &input.attrs.outbox {
        Some(lit) => check_outbox(cx, lit, &table, history.as_deref())?,
        None => "stateguard_outbox".to_owned(),
    };
    // A `key_type` that does not fit the key is refused where keys are
    // bound (`KeyType`); the table text then leaves the key's type to the
    // user.
    let key_types = match (&input.attrs.key_type, key.len()) {
        (Some(syn::Type::Tuple(tuple)), n) if tuple.elems.len() == n => {
            Some(tuple.elems.iter().collect())
        }
        (Some(ty), 1) => Some(vec![ty]),
        _ => None,
    };
    Some(Model {
        ident: input.ident,
        table,
        column,
        key,
        key_types,
        version,
        order,
        history,
        outbox,
        states: states?,
        initial: initial?,
        transitions: transitions?,
    })
}

#[cfg(test)]
mod tests {
    use super::in_flight::parse_lease;

    #[test]
    fn leases_in_every_unit() {
        assert_eq!(parse_lease("250ms"), Ok(250));
        assert_eq!(parse_lease("30s"), Ok(30_000));
        assert_eq!(parse_lease("5m"), Ok(300_000));
        assert_eq!(parse_lease("1h"), Ok(3_600_000));
        assert_eq!(parse_lease(" 30 s "), Ok(30_000));
        assert_eq!(parse_lease("168h"), Ok(7 * 24 * 3_600_000));
    }

    #[track_caller]
    fn refused(text: &str, needle: &str) {
        let result = parse_lease(text);
        assert!(result.is_err(), "{text:?} was accepted as {result:?}");
        if let Err(why) = result {
            assert!(why.contains(needle), "{text:?}: {why:?} lacks {needle:?}");
        }
    }

    #[test]
    fn leases_that_are_refused() {
        refused("30", "not a duration");
        refused("30 seconds", "not a duration");
        refused("1.5s", "not a duration");
        refused("-1s", "not a duration");
        refused("s", "does not start with a whole number");
        refused("", "not a duration");
        refused("0s", "a lease of zero");
        refused("169h", "longer than a week");
        refused(
            "99999999999999999999ms",
            "does not start with a whole number",
        );
        refused("18446744073709551615h", "longer than a week");
    }
}
