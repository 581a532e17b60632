//! The rustdoc of the generated items: the machine's diagram, and each
//! transition constructor's text.

use quote::ToTokens;
use syn::ext::IdentExt;

use crate::diagram;
use crate::model::Model;

/// The rustdoc of the constructors' `impl` block: the machine's state
/// diagram, drawn as `stateguard::docs::svg` draws it at run time, in a
/// `<div>` on one line, which Markdown passes through whole.
pub(super) fn diagram_doc(model: &Model) -> String {
    let names: Vec<String> = model
        .states
        .iter()
        .map(|s| s.ident.unraw().to_string())
        .collect();
    let transitions: Vec<String> = model
        .transitions
        .iter()
        .map(|t| t.name.unraw().to_string())
        .collect();
    let leases: Vec<Option<String>> = model
        .states
        .iter()
        .map(|s| {
            s.in_flight
                .as_ref()
                .map(|f| diagram::lease(u128::from(f.lease_ms)))
        })
        .collect();
    // What transition `t` is to its source `s`: a follow-up of it, if it
    // is in flight, or a move.
    let role = |t: usize, s: usize| match &model.states[s].in_flight {
        Some(f) if f.done == t => diagram::Role::Done,
        Some(f) if f.failed == Some(t) => diagram::Role::Failed,
        _ => diagram::Role::Move,
    };
    let name = model.ident.unraw().to_string();
    let machine = diagram::Diagram {
        name: &name,
        states: model
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| diagram::State {
                name: &names[i],
                db: &s.db,
                initial: i == model.initial,
                in_flight: s.in_flight.as_ref().map(|f| diagram::InFlight {
                    lease: leases[i].as_deref().unwrap_or_default(),
                    attempts: f.retry.as_ref().map(|r| r.max),
                }),
            })
            .collect(),
        transitions: model
            .transitions
            .iter()
            .enumerate()
            .map(|(i, t)| diagram::Arrow {
                name: &transitions[i],
                guard: t.guard.as_ref().map(|g| g.text.as_str()),
                sources: t.sources.iter().map(|&s| (s, role(i, s))).collect(),
                target: t.target,
            })
            .collect(),
    };
    format!(
        "<div class=\"stateguard-diagram\">{}</div>",
        diagram::svg(&machine)
    )
}

/// The rustdoc of a transition constructor: sources, target, columns.
pub(super) fn constructor_doc(model: &Model, i: usize) -> String {
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
