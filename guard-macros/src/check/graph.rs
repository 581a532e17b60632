//! States, the initial state and the transitions between them.

use std::collections::BTreeMap;

use quote::ToTokens;
use syn::{Ident, LitStr};

use super::emit::check_emit;
use super::set::{check_guard, check_set};
use crate::ast::Input;
use crate::attr::TransitionAttr;
use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::ident;
use crate::model::{State, Transition};

/// Database strings: valid, and one per state.
pub(super) fn check_states<'a>(cx: &mut Ctxt, input: &'a Input) -> Option<Vec<State<'a>>> {
    if input.variants.is_empty() {
        cx.error(input.ident, "a state machine needs at least one state");
        return None;
    }
    let rule = input
        .attrs
        .rename_all
        .as_ref()
        .map_or(RenameRule::SnakeCase, |(_, rule)| *rule);
    let mut ok = true;
    // Each string, with the variant that first took it and the tokens that
    // gave it (its rename, else its name).
    // Keyed by the string as MySQL's default collations compare it: without
    // regard to case or trailing spaces.
    let mut seen: BTreeMap<String, (&Ident, proc_macro2::TokenStream)> = BTreeMap::new();
    let mut states = Vec::new();
    for variant in &input.variants {
        let db = variant.db_name(rule);
        if let Err(why) = ident::check_state_str(&db) {
            ok = false;
            match &variant.rename {
                Some(lit) => cx.error(lit, format!("state string {db:?} {why}")),
                None => cx.error(variant.ident, format!("state string {db:?} {why}")),
            }
        }
        let ident = variant.ident;
        let at = match &variant.rename {
            Some(lit) => quote::quote!(#lit),
            None => quote::quote!(#ident),
        };
        let folded = db.trim_end_matches(' ').to_ascii_lowercase();
        if let Some((first, first_at)) = seen.get(&folded) {
            ok = false;
            cx.duplicate(
                at,
                format!(
                    "state `{ident}` is stored as {db:?}, which is state `{first}`'s string or \
                     differs from it only in case or trailing spaces (equal under MySQL's \
                     default collations)"
                ),
                first_at,
                format!("`{first}`'s string is given here"),
            );
        } else {
            seen.insert(folded, (ident, at));
        }
        states.push(State {
            ident: variant.ident,
            db,
            in_flight: None,
            since: None,
            timeout_ms: None,
        });
    }
    ok.then_some(states)
}

/// Exactly one `#[state(initial)]`.
pub(super) fn check_initial(cx: &mut Ctxt, input: &Input) -> Option<usize> {
    let mut initial: Option<(usize, &Ident)> = None;
    for (i, variant) in input.variants.iter().enumerate() {
        let Some(token) = &variant.initial else {
            continue;
        };
        match initial {
            Some((_, first)) => cx.duplicate(
                token,
                "more than one initial state",
                first,
                "first initial state here",
            ),
            None => initial = Some((i, token)),
        }
    }
    let any_incomplete = input.variants.iter().any(|v| v.state_incomplete);
    if initial.is_none() && !input.variants.is_empty() && !any_incomplete {
        cx.error(
            input.ident,
            "no initial state: mark the state new rows start in with #[state(initial)]",
        );
    }
    initial.map(|(i, _)| i)
}

/// Targets exist; one target and one `set` list per name; no self-loops; no
/// edge twice; `set` columns valid.
pub(super) fn check_transitions<'a>(
    cx: &mut Ctxt,
    input: &'a Input,
    reserved: &[(&str, &str)],
    since_columns: &[String],
    written: &[(&str, &str)],
    key: &[String],
) -> Option<Vec<Transition<'a>>> {
    let index_of = |ident: &Ident| input.variants.iter().position(|v| v.ident == ident);
    let mut ok = true;
    let mut out: Vec<Transition> = Vec::new();
    // The first declaration of each transition, to point back at.
    let mut firsts: Vec<&TransitionAttr> = Vec::new();
    for (source, variant) in input.variants.iter().enumerate() {
        for attr in &variant.transitions {
            let Some(target) = index_of(&attr.target) else {
                ok = false;
                cx.error(
                    &attr.target,
                    format!(
                        "unknown target state `{}`: {} has no such variant",
                        attr.target, input.ident
                    ),
                );
                continue;
            };
            if target == source {
                ok = false;
                cx.error(
                    &attr.target,
                    format!(
                        "transition `{}` goes from `{}` to itself: a self-loop cannot tell a \
                         replay from a win",
                        attr.name, attr.target
                    ),
                );
                continue;
            }
            // The UPDATE into an in-flight or stamped state also stamps its
            // `since`.
            let since = input.variants[target]
                .in_flight
                .as_ref()
                .and_then(|f| f.since.as_ref())
                .or(input.variants[target].since.as_ref())
                .map(LitStr::value);
            let mut written = written.to_vec();
            if let Some(since) = &since {
                written.push((since, "the `since` column this transition stamps"));
            }
            let set = match check_set(cx, &attr.set, reserved, since_columns, &written) {
                Some(set) => set,
                None => {
                    ok = false;
                    continue;
                }
            };
            let guard = match &attr.guard {
                None => None,
                Some(guard) => match check_guard(cx, guard, &set) {
                    Some(guard) => Some(guard),
                    None => {
                        ok = false;
                        continue;
                    }
                },
            };
            let emit = match &attr.emit {
                None => None,
                Some(emit) => match check_emit(cx, emit, key) {
                    Some(emit) => Some(emit),
                    None => {
                        ok = false;
                        continue;
                    }
                },
            };
            let Some(i) = out.iter().position(|t| *t.name == attr.name) else {
                out.push(Transition {
                    name: &attr.name,
                    sources: vec![source],
                    target,
                    set,
                    guard,
                    emit,
                });
                firsts.push(attr);
                continue;
            };
            let first = firsts[i];
            let known = &mut out[i];
            // What one declaration says of the statement that another does not.
            let mismatch = if known.set != set {
                Some((
                    attr.name.to_token_stream(),
                    "sets other columns",
                    "set(...)",
                ))
            } else if known.guard != guard {
                let at = match &attr.guard {
                    Some(guard) => guard.condition.to_token_stream(),
                    None => attr.name.to_token_stream(),
                };
                Some((at, "has another guard", "guard"))
            } else if known.emit != emit {
                let at = match &attr.emit {
                    Some(emit) => emit.token.to_token_stream(),
                    None => attr.name.to_token_stream(),
                };
                Some((at, "emits another message", "emit"))
            } else {
                None
            };
            if known.target != target {
                ok = false;
                cx.duplicate(
                    &attr.target,
                    format!(
                        "transition `{}` goes to `{}` here but to `{}` elsewhere; one name has \
                         one target",
                        attr.name, attr.target, first.target
                    ),
                    &first.target,
                    format!("`{}` goes to `{}` here", attr.name, first.target),
                );
            } else if known.sources.contains(&source) {
                ok = false;
                cx.duplicate(
                    &attr.name,
                    format!(
                        "transition `{}` from `{}` is declared twice",
                        attr.name, variant.ident
                    ),
                    &first.name,
                    "first declared here",
                );
            } else if let Some((at, differs, option)) = mismatch {
                // One name is one statement: each declaration must say the
                // same of what the statement writes, checks and emits.
                ok = false;
                cx.duplicate(
                    at,
                    format!(
                        "transition `{}` {differs} here than where it is first declared; it \
                         is one statement, so give every declaration the same `{option}`",
                        attr.name
                    ),
                    &first.name,
                    "first declared here",
                );
            } else {
                known.sources.push(source);
            }
        }
    }
    ok.then_some(out)
}

/// Without a version column the occurrence of a transition on a row is
/// implied by the transition itself, which only holds when no row can pass
/// through the same transition twice.
pub(super) fn check_acyclic(cx: &mut Ctxt, input: &Input, transitions: &[Transition]) {
    let n = input.variants.len();
    let reaches = |from: usize, to: usize| {
        let mut seen = vec![false; n];
        let mut stack = vec![from];
        while let Some(state) = stack.pop() {
            if state == to {
                return true;
            }
            if std::mem::replace(&mut seen[state], true) {
                continue;
            }
            for t in transitions.iter().filter(|t| t.sources.contains(&state)) {
                stack.push(t.target);
            }
        }
        false
    };
    for (source, variant) in input.variants.iter().enumerate() {
        for attr in &variant.transitions {
            let Some(t) = transitions.iter().find(|t| *t.name == attr.name) else {
                continue;
            };
            if reaches(t.target, source) {
                cx.error(
                    &attr.target,
                    format!(
                        "after `{}` a row can come back to `{}`, so it can pass through `{}` \
                         more than once; add `version = \"…\"` to #[state_machine(...)] (an \
                         integer column that every transition increments) so that each pass \
                         gets its own effect key",
                        attr.name, variant.ident, attr.name
                    ),
                );
                return;
            }
        }
    }
}

/// Every state can be reached from the initial one.
pub(super) fn check_reachable(
    cx: &mut Ctxt,
    input: &Input,
    initial: usize,
    transitions: &[Transition],
) {
    let mut reached = vec![false; input.variants.len()];
    reached[initial] = true;
    let mut stack = vec![initial];
    while let Some(state) = stack.pop() {
        for t in transitions {
            if t.sources.contains(&state) && !reached[t.target] {
                reached[t.target] = true;
                stack.push(t.target);
            }
        }
    }
    for (variant, reached) in input.variants.iter().zip(reached) {
        if !reached {
            cx.error(
                variant.ident,
                format!(
                    "state `{}` cannot be reached from the initial state `{}`",
                    variant.ident, input.variants[initial].ident
                ),
            );
        }
    }
}
