//! Checks of the whole machine: names, states, the transition graph. Each
//! error points at the token that causes it; all of them are reported.

use std::collections::BTreeMap;

use proc_macro2::Span;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{Ident, LitStr};

use crate::ast::Input;
use crate::attr::{GuardAttr, SetItem, SetValue, TransitionAttr};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;
use crate::ident;
use crate::sqltext;

/// The machine after validation: what expansion needs, nothing more.
pub struct Model<'a> {
    pub ident: &'a Ident,
    pub table: String,
    pub column: String,
    /// The key columns, in order: one, or several for a composite key.
    pub key: Vec<String>,
    pub version: Option<String>,
    /// The columns `claim` takes rows in: `order = "…"`, by default the key.
    pub order: Vec<String>,
    /// `history = "…"`: the table each move appends a row to.
    pub history: Option<String>,
    pub states: Vec<State<'a>>,
    pub initial: usize,
    pub transitions: Vec<Transition<'a>>,
}

impl Model<'_> {
    /// The key as declared, its columns joined by `, `.
    pub fn key_text(&self) -> String {
        self.key.join(", ")
    }
}

/// The most columns a key has: the runtime's key shapes go up to four.
const MAX_KEY_COLUMNS: usize = 4;

pub struct State<'a> {
    pub ident: &'a Ident,
    pub db: String,
    pub in_flight: Option<InFlight>,
    /// `#[state(since = "…")]`: stamped by every transition into the state.
    pub stamp: Option<String>,
    /// `#[state(timeout = "…")]`, in milliseconds.
    pub timeout_ms: Option<u64>,
}

impl State<'_> {
    /// The column every transition into the state stamps with the current
    /// time: an in-flight state's `since`, or `#[state(since = "…")]`.
    pub fn since(&self) -> Option<&str> {
        match &self.in_flight {
            Some(in_flight) => Some(&in_flight.since),
            None => self.stamp.as_deref(),
        }
    }
}

/// What a `set` item writes: a fixed SQL expression, or a value of a Rust
/// type that the constructor takes and the statement binds.
#[derive(Clone)]
pub enum Assign {
    Expr(String),
    Bind(Box<syn::Type>),
}

impl Assign {
    /// The bound parameter's type, for a `bind(Type)` item.
    pub fn bound(&self) -> Option<&syn::Type> {
        match self {
            Assign::Bind(ty) => Some(ty),
            Assign::Expr(_) => None,
        }
    }

    /// As the attribute wrote it: the expression, or `bind(Type)`.
    pub fn written(&self) -> String {
        match self {
            Assign::Expr(expr) => expr.clone(),
            Assign::Bind(ty) => format!(
                "bind({})",
                ty.to_token_stream().to_string().replace(' ', "")
            ),
        }
    }
}

impl PartialEq for Assign {
    fn eq(&self, other: &Assign) -> bool {
        self.written() == other.written()
    }
}

/// A state whose entry starts an external effect: its lease, the column
/// stamped on entry, and the transitions that end it.
pub struct InFlight {
    pub lease_ms: u64,
    pub since: String,
    /// Indices into `Model::transitions`.
    pub done: usize,
    pub failed: Option<usize>,
}

pub struct Transition<'a> {
    pub name: &'a Ident,
    pub sources: Vec<usize>,
    pub target: usize,
    pub set: Vec<(String, Assign)>,
    /// `guard = "…"`: a condition the row must meet, in the `WHERE`.
    pub guard: Option<Guard>,
}

/// A guard: its condition as written, and the values it binds per call,
/// each read once by the condition, in declaration order.
pub struct Guard {
    pub text: String,
    /// Byte ranges of the `:name` placeholders in `text`, in order; the
    /// i-th is `params[i]`.
    pub at: Vec<core::ops::Range<usize>>,
    pub params: Vec<(String, Box<syn::Type>)>,
}

impl PartialEq for Guard {
    fn eq(&self, other: &Guard) -> bool {
        let params = |g: &Guard| -> Vec<(String, String)> {
            g.params
                .iter()
                .map(|(name, ty)| (name.clone(), ty.to_token_stream().to_string()))
                .collect()
        };
        self.text == other.text && params(self) == params(other)
    }
}

impl Guard {
    /// The condition with a placeholder for each `:name`: the call's values
    /// from `first` on ([`Slot::Value`](crate::plan::Slot::Value)), as the
    /// `set` values come before the guard's.
    pub fn sql(&self, first: usize) -> String {
        let mut out = String::new();
        let mut from = 0;
        for (i, range) in self.at.iter().enumerate() {
            out.push_str(&self.text[from..range.start]);
            out.push_str(&crate::plan::Slot::Value((first + i) as u8).mark());
            from = range.end;
        }
        out.push_str(&self.text[from..]);
        out
    }
}

impl Transition<'_> {
    /// The values bound per call, in order: the `set` values, then the
    /// guard's. The constructor's parameters.
    pub fn params(&self) -> impl Iterator<Item = (&str, &syn::Type)> {
        self.set
            .iter()
            .filter_map(|(col, value)| Some((col.as_str(), value.bound()?)))
            .chain(
                self.guard
                    .iter()
                    .flat_map(|g| g.params.iter().map(|(name, ty)| (name.as_str(), &**ty))),
            )
    }

    /// How many of the values are the `set` values (the rest are the
    /// guard's).
    pub fn set_binds(&self) -> usize {
        self.set.iter().filter(|(_, v)| v.bound().is_some()).count()
    }

    /// How many values are bound per call.
    pub fn binds(&self) -> usize {
        self.params().count()
    }
}

/// The most `bind(Type)` values one transition takes: the runtime's
/// `Params` is implemented for tuples up to this length.
const MAX_BINDS: usize = 6;

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
    let transitions = check_transitions(cx, input, &reserved, &since_columns, &written);
    let all_parsed = !input.variants.iter().any(|v| v.transitions_incomplete);
    if let (Some(initial), Some(transitions), true) = (initial, &transitions, all_parsed) {
        check_reachable(cx, input, initial, transitions);
        if input.attrs.version.is_none() {
            check_acyclic(cx, input, transitions);
        }
    }
    if let (Some(states), Some(transitions)) = (&mut states, &transitions) {
        check_in_flight(cx, input, &reserved, states, transitions);
        check_stamps(cx, input, &reserved, states);
    }

    let (table, column, key) = names?;
    let order = match &input.attrs.order {
        Some(lit) => check_order(cx, lit)?,
        None => key.clone(),
    };
    let history = match &input.attrs.history {
        Some(lit) => Some(check_history(cx, lit, &key, &table)?),
        None => None,
    };
    Some(Model {
        ident: input.ident,
        table,
        column,
        key,
        version,
        order,
        history,
        states: states?,
        initial: initial?,
        transitions: transitions?,
    })
}

/// table, column and key: present, valid identifiers, key != column.
fn check_names(cx: &mut Ctxt, input: &Input) -> Option<(String, String, Vec<String>)> {
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
    let table = get(&attrs.table, "table", ident::check_table);
    let column = get(&attrs.column, "column", ident::check_ident);
    // Checked column by column below.
    let key = get(&attrs.key, "key", |_| Ok(()));
    let (table, column, key) = (table?, column?, key?);
    let key = check_key(cx, attrs.key.as_ref()?, &key)?;
    // SQLite and MySQL compare column names without regard to case, even
    // when quoted.
    if key.iter().any(|k| column.eq_ignore_ascii_case(k)) {
        cx.error(&attrs.key, "a key column cannot also be the status column");
        return None;
    }
    Some((table, column, key))
}

/// The columns of a history table besides the key's.
pub const HISTORY_COLUMNS: &[&str] = &[
    "history_id",
    "transition",
    "from_state",
    "to_state",
    "occurrence",
    "moved_at",
    "actor",
    "reason",
    "details",
];

/// `history = "payout_transitions"`: a valid table name of its own, whose
/// fixed columns no key column shares.
fn check_history(cx: &mut Ctxt, lit: &LitStr, key: &[String], table: &str) -> Option<String> {
    let value = lit.value();
    if let Err(why) = ident::check_table(&value) {
        cx.error(
            lit,
            format!("history {value:?} is not a valid SQL table name: it {why}"),
        );
        return None;
    }
    if value.eq_ignore_ascii_case(table) {
        cx.error(lit, "the history table must be a table of its own");
        return None;
    }
    if let Some(k) = key
        .iter()
        .find(|k| HISTORY_COLUMNS.iter().any(|c| c.eq_ignore_ascii_case(k)))
    {
        cx.error(
            lit,
            format!(
                "key column {k:?} has the name of a history column ({}); rename the key column",
                HISTORY_COLUMNS.join(", ")
            ),
        );
        return None;
    }
    Some(value)
}

/// `order = "created_at"` or `order = "priority, created_at"`: column
/// names, ascending, none twice.
fn check_order(cx: &mut Ctxt, lit: &LitStr) -> Option<Vec<String>> {
    let order = lit.value();
    let columns: Vec<String> = order.split(',').map(|c| c.trim().to_owned()).collect();
    let mut ok = true;
    for (i, column) in columns.iter().enumerate() {
        if let Err(why) = ident::check_ident(column) {
            ok = false;
            cx.error(
                lit,
                format!(
                    "order column {column:?} is not a valid SQL identifier: it {why}; `order` \
                     lists column names, ascending, separated by `, `"
                ),
            );
        } else if columns[..i].iter().any(|c| c.eq_ignore_ascii_case(column)) {
            ok = false;
            cx.error(lit, format!("order column {column:?} is listed twice"));
        }
    }
    ok.then_some(columns)
}

/// `key = "id"` or `key = "tenant_id, id"`: one to four valid column
/// names, none twice.
fn check_key(cx: &mut Ctxt, lit: &LitStr, key: &str) -> Option<Vec<String>> {
    let columns: Vec<String> = key.split(',').map(|c| c.trim().to_owned()).collect();
    let mut ok = true;
    for (i, column) in columns.iter().enumerate() {
        if column.is_empty() {
            ok = false;
            cx.error(
                lit,
                format!("key {key:?} has an empty column name; separate columns with `, `"),
            );
        } else if let Err(why) = ident::check_ident(column) {
            ok = false;
            cx.error(
                lit,
                format!("key column {column:?} is not a valid SQL identifier: it {why}"),
            );
        } else if columns[..i].iter().any(|c| c.eq_ignore_ascii_case(column)) {
            // SQLite and MySQL compare column names without regard to case.
            ok = false;
            cx.error(lit, format!("key column {column:?} is listed twice"));
        }
    }
    if columns.len() > MAX_KEY_COLUMNS {
        ok = false;
        cx.error(
            lit,
            format!(
                "key {key:?} has {} columns; a key has at most {MAX_KEY_COLUMNS}",
                columns.len()
            ),
        );
    }
    ok.then_some(columns)
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
            stamp: None,
            timeout_ms: None,
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
    reserved: &[(&str, &str)],
    since_columns: &[String],
    written: &[(&str, &str)],
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
            let Some(i) = out.iter().position(|t| *t.name == attr.name) else {
                out.push(Transition {
                    name: &attr.name,
                    sources: vec![source],
                    target,
                    set,
                    guard,
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
            } else if known.guard != guard {
                ok = false;
                let at = match &attr.guard {
                    Some(guard) => guard.condition.to_token_stream(),
                    None => attr.name.to_token_stream(),
                };
                cx.duplicate(
                    at,
                    format!(
                        "transition `{}` has another guard here than where it is first \
                         declared; it is one statement, so give every declaration the same \
                         `guard`",
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

/// `guard = "…"`: one SQL condition, through the same allow-list as `set`
/// expressions; its `:name` placeholders are the declared parameters, each
/// read once, in declaration order.
fn check_guard(cx: &mut Ctxt, attr: &GuardAttr, set: &[(String, Assign)]) -> Option<Guard> {
    let lit = &attr.condition;
    let condition = lit.value();
    if condition.trim().is_empty() {
        cx.error(lit, "empty guard condition");
        return None;
    }
    let tokens = match sqltext::tokenize(&condition) {
        Ok(tokens) => tokens,
        Err(why) => {
            cx.error(lit, format!("guard {condition:?} {why}"));
            return None;
        }
    };
    let mut ok = true;
    for (i, param) in attr.params.iter().enumerate() {
        let name = param.name.unraw().to_string();
        if let Some(first) = attr.params[..i].iter().find(|p| p.name == param.name) {
            ok = false;
            cx.duplicate(
                &param.name,
                format!("guard parameter `{name}` is declared twice"),
                &first.name,
                "first declared here",
            );
        } else if set
            .iter()
            .any(|(col, v)| v.bound().is_some() && *col == name)
        {
            ok = false;
            cx.error(
                &param.name,
                format!(
                    "`{name}` is also a `set` value bound per call; the constructor takes one \
                     parameter per name, so give the guard's another"
                ),
            );
        }
    }
    let start = condition.as_ptr() as usize;
    let mut at = Vec::new();
    let mut used = Vec::new();
    for token in &tokens {
        let sqltext::Token::Param(name) = *token else {
            continue;
        };
        // The name is a slice of `condition`; its colon is the byte before.
        let offset = name.as_ptr() as usize - start;
        at.push(offset - 1..offset + name.len());
        used.push(name);
    }
    let declared: Vec<String> = attr
        .params
        .iter()
        .map(|p| p.name.unraw().to_string())
        .collect();
    for name in &used {
        if !declared.iter().any(|d| d == name) {
            ok = false;
            cx.error(
                lit,
                format!(
                    "guard {condition:?} reads `:{name}`, which it does not declare; write \
                     `guard(\"…\", {name} = bind(Type))`"
                ),
            );
        }
    }
    for param in &attr.params {
        let name = param.name.unraw().to_string();
        if !used.contains(&name.as_str()) {
            ok = false;
            cx.error(
                &param.name,
                format!(
                    "guard parameter `{name}` is declared but the condition never reads `:{name}`"
                ),
            );
        }
    }
    if ok && used.iter().copied().ne(declared.iter().map(String::as_str)) {
        // MySQL's `?` are positional: the values go in the order the
        // condition reads them, which is the order they are declared.
        ok = false;
        cx.error(
            lit,
            format!(
                "guard {condition:?} reads its parameters as {}; read each once, in the order \
                 declared ({})",
                used.iter()
                    .map(|n| format!(":{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                declared.join(", ")
            ),
        );
    }
    ok.then(|| Guard {
        text: condition.clone(),
        at,
        params: attr
            .params
            .iter()
            .map(|p| (p.name.unraw().to_string(), p.ty.clone()))
            .collect(),
    })
}

fn check_set(
    cx: &mut Ctxt,
    items: &[SetItem],
    reserved: &[(&str, &str)],
    since_columns: &[String],
    written: &[(&str, &str)],
) -> Option<Vec<(String, Assign)>> {
    let mut ok = true;
    let mut out: Vec<(String, Assign)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let column = item.column.unraw().to_string();
        // SQLite and MySQL compare column names without regard to case.
        let same = |other: &str| other.eq_ignore_ascii_case(&column);
        if let Err(why) = ident::check_ident(&column) {
            ok = false;
            cx.error(
                &item.column,
                format!("column `{column}` is not a valid SQL identifier: it {why}"),
            );
        } else if let Some((_, why)) = reserved.iter().find(|(r, _)| same(r)) {
            ok = false;
            cx.error(&item.column, format!("{why}; `set` is for other columns"));
        } else if since_columns.iter().any(|c| same(c)) {
            ok = false;
            cx.error(
                &item.column,
                "transitions into an in-flight state stamp its `since` column themselves; \
                 `set` is for other columns",
            );
        } else if let Some(first) = items[..i]
            .iter()
            .find(|f| same(&f.column.unraw().to_string()))
        {
            ok = false;
            cx.duplicate(
                &item.column,
                format!("column `{column}` is set twice"),
                &first.column,
                "first set here",
            );
        }
        let lit = match &item.value {
            SetValue::Bind(ty) => {
                let binds = out.iter().filter(|(_, a)| a.bound().is_some()).count();
                if binds == MAX_BINDS {
                    ok = false;
                    cx.error(
                        ty,
                        format!(
                            "a transition binds at most {MAX_BINDS} values per call; \
                             this is one more"
                        ),
                    );
                }
                out.push((column, Assign::Bind(ty.clone())));
                continue;
            }
            SetValue::Expr(lit) => lit,
        };
        let expr = lit.value();
        if expr.trim().is_empty() {
            ok = false;
            cx.error(lit, "empty SQL expression");
        } else {
            match sqltext::tokenize(&expr) {
                Err(why) => {
                    ok = false;
                    cx.error(lit, format!("SQL expression {expr:?} {why}"));
                }
                Ok(tokens) => {
                    if let Some(name) = tokens.iter().find_map(|t| match t {
                        sqltext::Token::Param(name) => Some(*name),
                        _ => None,
                    }) {
                        ok = false;
                        cx.error(
                            lit,
                            format!(
                                "SQL expression {expr:?} contains `:{name}`: a `set` value bound \
                                 per call is written `{column} = bind(Type)`"
                            ),
                        );
                    } else if let Some(why) = reads_written(&tokens, &column, items, written) {
                        ok = false;
                        cx.error(lit, format!("SQL expression {expr:?} {why}"));
                    }
                }
            }
        }
        out.push((column, Assign::Expr(expr)));
    }
    ok.then_some(out)
}

/// Why an expression that sets `column` may not read what it reads, if it
/// may not.
///
/// MySQL applies the assignments of an UPDATE left to right, each one
/// seeing those before it; PostgreSQL and SQLite evaluate them all on the
/// row as it was. An expression that reads a column the same statement
/// writes would get a different value on MySQL, so that is refused. Its own
/// column is the exception (`attempts = "attempts + 1"`): MySQL emits the
/// `set` assignments first, and none writes a column twice, so nothing
/// before it has changed its own column.
fn reads_written(
    tokens: &[sqltext::Token],
    column: &str,
    items: &[SetItem],
    written: &[(&str, &str)],
) -> Option<String> {
    for read in sqltext::columns_read(tokens) {
        if read.eq_ignore_ascii_case(column) {
            continue;
        }
        let what =
            if let Some((_, what)) = written.iter().find(|(w, _)| w.eq_ignore_ascii_case(read)) {
                (*what).to_owned()
            } else if items
                .iter()
                .any(|other| other.column.unraw().to_string().eq_ignore_ascii_case(read))
            {
                "set by this transition too".to_owned()
            } else {
                continue;
            };
        return Some(format!(
            "reads `{read}` ({what}), which the same UPDATE writes: MySQL applies assignments \
             left to right, so what it reads there would depend on their order; a `set` \
             expression may read its own column and the columns the transition does not write"
        ));
    }
    None
}

/// `version = "…"`: a valid identifier, not the status or key column.
fn check_version(cx: &mut Ctxt, input: &Input, reserved: &[(&str, &str)]) -> Option<String> {
    let lit = input.attrs.version.as_ref()?;
    let value = lit.value();
    if let Err(why) = ident::check_ident(&value) {
        cx.error(
            lit,
            format!("version {value:?} is not a valid SQL identifier: it {why}"),
        );
        return None;
    }
    if reserved.iter().any(|(r, _)| r.eq_ignore_ascii_case(&value)) {
        cx.error(
            lit,
            "the version column must be a column of its own, not the status or key column",
        );
        return None;
    }
    Some(value)
}

/// Without a version column the occurrence of a transition on a row is
/// implied by the transition itself, which only holds when no row can pass
/// through the same transition twice.
fn check_acyclic(cx: &mut Ctxt, input: &Input, transitions: &[Transition]) {
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

/// `#[state(in_flight(lease = "…", since = "…", done = t, failed = t))]`
fn check_in_flight(
    cx: &mut Ctxt,
    input: &Input,
    reserved: &[(&str, &str)],
    states: &mut [State],
    transitions: &[Transition],
) {
    let mut since_seen: Vec<&LitStr> = Vec::new();
    for (i, variant) in input.variants.iter().enumerate() {
        let Some(attr) = &variant.in_flight else {
            continue;
        };
        let lease = match &attr.lease {
            None => {
                cx.error(
                    &attr.token,
                    "missing `lease = \"…\"`, e.g. `lease = \"30s\"`",
                );
                None
            }
            Some(lit) => match parse_lease(&lit.value()) {
                Ok(ms) => Some(ms),
                Err(why) => {
                    cx.error(lit, why);
                    None
                }
            },
        };
        let since = match &attr.since {
            None => {
                cx.error(
                    &attr.token,
                    "missing `since = \"…\"`: the timestamp column that each transition into \
                     this state sets to the current time",
                );
                None
            }
            Some(lit) => {
                let value = lit.value();
                if let Err(why) = ident::check_ident(&value) {
                    cx.error(
                        lit,
                        format!("since {value:?} is not a valid SQL identifier: it {why}"),
                    );
                    None
                } else if reserved.iter().any(|(r, _)| r.eq_ignore_ascii_case(&value)) {
                    cx.error(
                        lit,
                        "the `since` column must be a column of its own, not the status, key or \
                         version column",
                    );
                    None
                } else if let Some(first) = since_seen
                    .iter()
                    .find(|f| f.value().eq_ignore_ascii_case(&value))
                {
                    cx.duplicate(
                        lit,
                        "each in-flight state needs its own `since` column",
                        first,
                        "also used here",
                    );
                    None
                } else {
                    since_seen.push(lit);
                    Some(value)
                }
            }
        };
        let mut follow_up =
            |ident: &Option<Ident>, what: &str, required: bool| {
                let Some(ident) = ident else {
                    if required {
                        cx.error(
                        &attr.token,
                        format!(
                            "missing `{what} = transition`: the transition that ends this state \
                             when the effect {}",
                            if what == "done" { "succeeds" } else { "fails for good" }
                        ),
                    );
                    }
                    return None;
                };
                let found = transitions
                    .iter()
                    .position(|t| *t.name == *ident && t.sources.contains(&i));
                // The follow-up must move the row whatever the effect
                // decided: a guard could leave it in flight for ever.
                if let Some(t) = found.map(|f| &transitions[f])
                    && t.guard.is_some()
                {
                    cx.error(
                        ident,
                        format!(
                            "`{ident}` has a guard, so it cannot be this state's `{what}` \
                             follow-up: a refused follow-up would leave the row in flight"
                        ),
                    );
                    return None;
                }
                if found.is_none() {
                    cx.error(
                        ident,
                        format!(
                            "`{ident}` is not a transition from `{}`; `{what}` names one of this \
                             state's own transitions",
                            variant.ident
                        ),
                    );
                }
                found
            };
        let done = follow_up(&attr.done, "done", true);
        let failed = follow_up(&attr.failed, "failed", true);
        if variant.initial.is_some() {
            cx.error(
                &attr.token,
                "the initial state cannot be in flight: rows are inserted into it without a \
                 transition, so they would carry no `since` stamp and no win",
            );
        }
        if done.is_some() && done == failed {
            if let Some(ident) = &attr.failed {
                cx.error(ident, "`done` and `failed` must be different transitions");
            }
            continue;
        }
        if let (Some(lease_ms), Some(since), Some(done)) = (lease, since, done) {
            if attr.failed.is_some() && failed.is_none() {
                continue;
            }
            states[i].in_flight = Some(InFlight {
                lease_ms,
                since,
                done,
                failed,
            });
        }
    }
}

/// `#[state(since = "…", timeout = "…")]` of states that are not in
/// flight.
fn check_stamps(cx: &mut Ctxt, input: &Input, reserved: &[(&str, &str)], states: &mut [State]) {
    for (i, variant) in input.variants.iter().enumerate() {
        if let (Some(lit), Some(_)) = (&variant.since, &variant.in_flight) {
            cx.error(
                lit,
                "an in-flight state names its `since` column inside `in_flight(…)`",
            );
        } else if let Some(lit) = &variant.since {
            let value = lit.value();
            if let Err(why) = ident::check_ident(&value) {
                cx.error(
                    lit,
                    format!("since {value:?} is not a valid SQL identifier: it {why}"),
                );
            } else if reserved.iter().any(|(r, _)| r.eq_ignore_ascii_case(&value)) {
                cx.error(
                    lit,
                    "the `since` column must be a column of its own, not the status, key or \
                     version column",
                );
            } else {
                states[i].stamp = Some(value);
            }
        }
        let Some(lit) = &variant.timeout else {
            continue;
        };
        if variant.in_flight.is_some() {
            cx.error(
                lit,
                "an in-flight state has a lease, which recovery honours; a timeout is for \
                 states a row waits in",
            );
        } else if variant.since.is_none() {
            cx.error(
                lit,
                "a timeout needs `since = \"…\"`: the column that says when the row entered the \
                 state",
            );
        } else {
            match parse_duration("timeout", &lit.value()) {
                Ok(ms) => states[i].timeout_ms = Some(ms),
                Err(why) => cx.error(lit, why),
            }
        }
    }
}

/// A lease, `"250ms"`, `"30s"`, `"5m"`, `"1h"`, in milliseconds.
fn parse_lease(text: &str) -> Result<u64, String> {
    parse_duration("lease", text)
}

/// `"250ms"`, `"30s"`, `"5m"`, `"1h"`, `"2d"` in milliseconds, at least
/// 1ms and at most a week for a lease, a year for a timeout.
fn parse_duration(what: &str, text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "{what} {text:?} is not a duration; write a whole number with `ms`, `s`, `m`, \
                 `h` or `d`, e.g. \"30s\""
            ));
        }
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{what} {text:?} does not start with a whole number"))?;
    let (limit, longest) = match what {
        "lease" => (7 * 86_400_000, "a week"),
        _ => (366 * 86_400_000, "a year"),
    };
    match number.checked_mul(scale) {
        Some(0) if what == "lease" => Err("a lease of zero would let recovery take over every \
             in-flight row at once; use at least 1ms"
            .to_owned()),
        Some(0) => Err(format!(
            "a {what} of zero would time every row out at once; use at least 1ms"
        )),
        Some(ms) if ms <= limit => Ok(ms),
        _ => Err(format!("{what} {text:?} is longer than {longest}")),
    }
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

#[cfg(test)]
mod tests {
    use super::parse_lease;

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
