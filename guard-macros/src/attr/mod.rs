//! Attribute parsing. Unknown keys and repeated keys are errors, never
//! ignored. This module owns the types it fills and uses no sibling but the
//! leaves `ctxt` and `case`; `ast` builds the enum's view from them.
//!
//! - `machine.rs`: `#[state_machine(…)]` on the enum.
//! - `variant.rs`: `#[state(…)]` on a variant, its `in_flight(…)` and
//!   `retry(…)`, and the variant's `#[transition(…)]` list.
//! - `transition.rs`: the syntax of one `#[transition(…)]`.
//!
//! This file holds the types they fill, the once-only `Attr` key they
//! share, and `misplaced` for an attribute on the wrong item.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::{Attribute, Ident, LitStr, Path};

use crate::case::RenameRule;
use crate::ctxt::Ctxt;

mod machine;
mod transition;
mod variant;

pub use machine::machine_attrs;
pub use variant::variant;

/// `#[state_machine(table = "…", column = "…", key = "…", rename_all = "…", crate = "…")]`
#[derive(Default)]
pub struct MachineAttrs {
    /// The `state_machine` path of the first such attribute, if any.
    pub span: Option<Span>,
    pub table: Option<LitStr>,
    pub column: Option<LitStr>,
    pub key: Option<LitStr>,
    /// `version = "…"`: the occurrence counter every transition increments.
    pub version: Option<LitStr>,
    /// `order = "…"`: the columns `claim` takes rows in, oldest first.
    pub order: Option<LitStr>,
    /// `history = "…"`: the table every transition appends a row to.
    pub history: Option<LitStr>,
    /// `outbox = "…"`: the table a transition's `emit(…)` writes its
    /// message to, `stateguard_outbox` by default.
    pub outbox: Option<LitStr>,
    pub rename_all: Option<(LitStr, RenameRule)>,
    pub krate: Option<Path>,
    /// `key_type = "i64"`: the Rust type the machine's keys are read back
    /// as, which `claim` and `recover` then infer.
    pub key_type: Option<syn::Type>,
    /// `conversions = false`: no `Display`, `FromStr`, sqlx or serde impls
    /// for the enum, for one that has its own.
    pub conversions: Option<bool>,
    /// An attribute failed to parse: what it held is unknown, so a "missing
    /// `table`" would likely be a false report.
    pub incomplete: bool,
}

/// `#[state(…)]` and `#[transition(…)]` of one variant.
pub struct VariantAttrs {
    /// The `initial` token of `#[state(initial)]`.
    pub initial: Option<Ident>,
    /// `#[state(rename = "…")]`
    pub rename: Option<LitStr>,
    /// `#[state(in_flight(…))]`
    pub in_flight: Option<InFlightAttr>,
    /// `#[state(since = "…")]`: the column every transition into the state
    /// stamps with the current time.
    pub since: Option<LitStr>,
    /// `#[state(timeout = "…")]`: how long a row may sit in the state.
    pub timeout: Option<LitStr>,
    pub transitions: Vec<TransitionAttr>,
    /// A `#[state]` attribute failed to parse (it may have held `initial`).
    pub state_incomplete: bool,
    /// A `#[transition]` attribute failed to parse (it may have held an
    /// edge that makes a state reachable).
    pub transitions_incomplete: bool,
}

/// `in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail)`
pub struct InFlightAttr {
    /// The `in_flight` token.
    pub token: Ident,
    pub lease: Option<LitStr>,
    pub since: Option<LitStr>,
    pub done: Option<Ident>,
    pub failed: Option<Ident>,
    /// `retry(…)`: how many times the effect runs, and when again.
    pub retry: Option<RetryAttr>,
}

/// `retry(max = 8, backoff = "2s..1h", attempts = "attempts", next_attempt = "retry_at")`
pub struct RetryAttr {
    /// The `retry` token.
    pub token: Ident,
    pub max: Option<syn::LitInt>,
    pub backoff: Option<LitStr>,
    pub attempts: Option<LitStr>,
    pub next_attempt: Option<LitStr>,
    /// `last_error = "column"`: where the reason of the last retry goes.
    pub last_error: Option<LitStr>,
}

/// `#[transition(name -> Target, set(column = "expr", …))]`
pub struct TransitionAttr {
    pub name: Ident,
    pub target: Ident,
    pub set: Vec<SetItem>,
    /// `guard = "SQL condition"`, or `guard("SQL condition", name = bind(Type), …)`
    pub guard: Option<GuardAttr>,
    /// `emit("topic")` or `emit("topic", payload(column, …))`
    pub emit: Option<EmitAttr>,
    /// `supersedes_effect`: a transition out of an in-flight state, other
    /// than its follow-ups, that may move the row while the effect runs.
    pub supersedes_effect: Option<kw::supersedes_effect>,
}

/// `emit("payout.sent", payload(amount_cents, bank_ref))`: the message a
/// winning move writes to the outbox.
pub struct EmitAttr {
    /// The `emit` token.
    pub token: kw::emit,
    pub topic: LitStr,
    /// The columns the payload holds besides the key's.
    pub payload: Vec<Ident>,
}

/// A guard's condition and the values it binds per call.
pub struct GuardAttr {
    pub condition: LitStr,
    /// `name = bind(Type)`: the condition reads it as `:name`.
    pub params: Vec<GuardParam>,
}

/// `name = bind(Type)` inside `guard(…)`.
pub struct GuardParam {
    pub name: Ident,
    pub ty: Box<syn::Type>,
}

/// `column = "SQL expression"` or `column = bind(Type)` inside `set(…)`
pub struct SetItem {
    pub column: Ident,
    pub value: SetValue,
}

/// What a `set` item writes.
pub enum SetValue {
    /// `"SQL expression"`, fixed in the statement.
    Expr(LitStr),
    /// `bind(Type)`: a value the caller passes to the transition's
    /// constructor, bound as a parameter.
    Bind(Box<syn::Type>),
}

/// One attribute key that may be given once, as serde's `Attr<T>`: the
/// second occurrence is an error at it that also points at the first.
struct Attr<T> {
    name: &'static str,
    first: Option<(TokenStream, T)>,
}

impl<T> Attr<T> {
    fn none(name: &'static str) -> Self {
        Attr { name, first: None }
    }

    /// Sets the value given by the tokens `at`, or reports a duplicate.
    fn set(&mut self, cx: &mut Ctxt, at: impl ToTokens, value: T) {
        let name = self.name;
        match &self.first {
            Some((first, _)) => cx.duplicate(
                at,
                format!("duplicate `{name}`"),
                first,
                format!("first `{name}` here"),
            ),
            None => self.first = Some((at.into_token_stream(), value)),
        }
    }

    fn get(self) -> Option<T> {
        self.first.map(|(_, value)| value)
    }
}

impl<T: ToTokens + Clone> Attr<T> {
    /// Sets a value that is its own tokens: a string or an ident.
    fn set_lit(&mut self, cx: &mut Ctxt, value: T) {
        self.set(cx, value.clone(), value);
    }
}

/// `#[state]`/`#[transition]` on the enum, or `#[state_machine]` on a
/// variant: an error at the attribute, not silence.
pub fn misplaced(cx: &mut Ctxt, attrs: &[Attribute], names: &[&str], belongs_on: &str) {
    for attr in attrs {
        if let Some(name) = names.iter().find(|name| attr.path().is_ident(name)) {
            cx.error(
                attr,
                format!("#[{name}(...)] belongs on {belongs_on}, not here"),
            );
        }
    }
}

pub mod kw {
    syn::custom_keyword!(set);
    syn::custom_keyword!(guard);
    syn::custom_keyword!(bind);
    syn::custom_keyword!(emit);
    syn::custom_keyword!(payload);
    syn::custom_keyword!(supersedes_effect);
}
