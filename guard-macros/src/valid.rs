//! Checks of the whole machine: names, states, the transition graph. Each
//! error points at the token that causes it; all of them are reported.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::{Ident, LitStr};

use crate::ast::{Input, SetItem, TransitionAttr};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::sql;

/// The machine after validation: what expansion needs, nothing more.
pub struct Model<'a> {
    pub ident: &'a Ident,
    pub table: String,
    pub column: String,
    pub key: String,
    pub states: Vec<State<'a>>,
    pub initial: usize,
    pub transitions: Vec<Transition<'a>>,
}

pub struct State<'a> {
    pub ident: &'a Ident,
    pub db: String,
}

pub struct Transition<'a> {
    pub name: &'a Ident,
    pub sources: Vec<usize>,
    pub target: usize,
    pub set: Vec<(String, String)>,
}

pub fn check<'a>(cx: &mut Ctxt, input: &'a Input<'a>) -> Option<Model<'a>> {
    let node = input.original;
    if !node.generics.params.is_empty() {
        cx.error(
            &node.generics,
            "a StateMachine enum cannot have generic parameters",
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
    let states = check_states(cx, input);
    let initial = check_initial(cx, input);
    let transitions = check_transitions(cx, input, names.as_ref().map(|n| n.1.as_str()));
    let all_parsed = !input.variants.iter().any(|v| v.transitions_incomplete);
    if let (Some(initial), Some(transitions), true) = (initial, &transitions, all_parsed) {
        check_reachable(cx, input, initial, transitions);
    }

    let (table, column, key) = names?;
    Some(Model {
        ident: input.ident,
        table,
        column,
        key,
        states: states?,
        initial: initial?,
        transitions: transitions?,
    })
}

/// table, column and key: present, valid identifiers, key != column.
fn check_names(cx: &mut Ctxt, input: &Input) -> Option<(String, String, String)> {
    let attrs = &input.attrs;
    if attrs.span.is_none() {
        cx.error(
            input.ident,
            "missing #[state_machine(table = \"…\", column = \"…\", key = \"…\")]",
        );
        return None;
    }
    let mut get = |lit: &Option<LitStr>, what: &str, check: fn(&str) -> Result<(), String>| {
        let Some(lit) = lit else {
            if attrs.incomplete {
                // The attribute that failed to parse may have held it.
                return None;
            }
            cx.push(syn::Error::new(
                attrs.span.unwrap_or_else(Span::call_site),
                format!("missing `{what} = \"…\"` in #[state_machine(...)]"),
            ));
            return None;
        };
        let value = lit.value();
        match check(&value) {
            Ok(()) => Some(value),
            Err(why) => {
                cx.error(
                    lit,
                    format!("{what} {value:?} is not a valid SQL identifier: it {why}"),
                );
                None
            }
        }
    };
    let table = get(&attrs.table, "table", sql::check_table);
    let column = get(&attrs.column, "column", sql::check_ident);
    let key = get(&attrs.key, "key", sql::check_ident);
    let (table, column, key) = (table?, column?, key?);
    // SQLite and MySQL compare column names without regard to case, even
    // when quoted.
    if column.eq_ignore_ascii_case(&key) {
        cx.error(
            &attrs.key,
            "the key column cannot also be the status column",
        );
        return None;
    }
    Some((table, column, key))
}

/// Database strings: valid, and one per state.
fn check_states<'a>(cx: &mut Ctxt, input: &'a Input) -> Option<Vec<State<'a>>> {
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
    let mut seen: BTreeMap<String, (&Ident, proc_macro2::TokenStream)> = BTreeMap::new();
    let mut states = Vec::new();
    for variant in &input.variants {
        let db = variant.db_name(rule);
        if let Err(why) = sql::check_state_str(&db) {
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
        if let Some((first, first_at)) = seen.get(&db) {
            ok = false;
            cx.duplicate(
                at,
                format!("state `{ident}` is stored as {db:?}, like state `{first}`"),
                first_at,
                format!("`{first}` is stored as {db:?} here"),
            );
        } else {
            seen.insert(db.clone(), (ident, at));
        }
        states.push(State {
            ident: variant.ident,
            db,
        });
    }
    ok.then_some(states)
}

/// Exactly one `#[state(initial)]`.
fn check_initial(cx: &mut Ctxt, input: &Input) -> Option<usize> {
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
fn check_transitions<'a>(
    cx: &mut Ctxt,
    input: &'a Input,
    status_column: Option<&str>,
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
            let set = match check_set(cx, &attr.set, status_column, input) {
                Some(set) => set,
                None => {
                    ok = false;
                    continue;
                }
            };
            let Some(i) = out.iter().position(|t| *t.name == attr.name) else {
                out.push(Transition {
                    name: &attr.name,
                    sources: vec![source],
                    target,
                    set,
                });
                firsts.push(attr);
                continue;
            };
            let first = firsts[i];
            let known = &mut out[i];
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
            } else if known.set != set {
                ok = false;
                cx.duplicate(
                    &attr.name,
                    format!(
                        "transition `{}` sets other columns here than where it is first \
                         declared; it is one statement, so give every declaration the same \
                         `set(...)`",
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

fn check_set(
    cx: &mut Ctxt,
    items: &[SetItem],
    status_column: Option<&str>,
    input: &Input,
) -> Option<Vec<(String, String)>> {
    let mut ok = true;
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let column = item.column.unraw().to_string();
        if let Err(why) = sql::check_ident(&column) {
            ok = false;
            cx.error(
                &item.column,
                format!("column `{column}` is not a valid SQL identifier: it {why}"),
            );
        } else if status_column.is_some_and(|status| status.eq_ignore_ascii_case(&column)) {
            ok = false;
            cx.error(
                &item.column,
                "the transition already sets the status column; `set` is for other columns",
            );
        } else if input
            .attrs
            .key
            .as_ref()
            .is_some_and(|k| k.value() == column)
        {
            ok = false;
            cx.error(&item.column, "a transition cannot change the key column");
        } else if let Some(first) = items[..i]
            .iter()
            .find(|f| f.column.unraw().to_string().eq_ignore_ascii_case(&column))
        {
            ok = false;
            cx.duplicate(
                &item.column,
                format!("column `{column}` is set twice"),
                &first.column,
                "first set here",
            );
        }
        let expr = item.expr.value();
        if expr.trim().is_empty() {
            ok = false;
            cx.error(&item.expr, "empty SQL expression");
        }
        out.push((column, expr));
    }
    ok.then_some(out)
}

/// Every state can be reached from the initial one.
fn check_reachable(cx: &mut Ctxt, input: &Input, initial: usize, transitions: &[Transition]) {
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
