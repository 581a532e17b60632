//! The enum as the macro sees it. Every piece keeps its tokens, so that an
//! error can point at the exact attribute or ident that caused it.

use proc_macro2::Span;
use syn::{DeriveInput, Ident, LitStr, Path};

use crate::case::RenameRule;
use crate::ctxt::Ctxt;

pub struct Input<'a> {
    pub original: &'a DeriveInput,
    pub ident: &'a Ident,
    pub attrs: MachineAttrs,
    pub variants: Vec<Variant<'a>>,
}

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
    pub rename_all: Option<(LitStr, RenameRule)>,
    pub krate: Option<Path>,
    /// An attribute failed to parse: what it held is unknown, so a "missing
    /// `table`" would likely be a false report.
    pub incomplete: bool,
}

pub struct Variant<'a> {
    pub original: &'a syn::Variant,
    pub ident: &'a Ident,
    /// The `initial` token of `#[state(initial)]`.
    pub initial: Option<Ident>,
    /// `#[state(rename = "…")]`
    pub rename: Option<LitStr>,
    /// `#[state(in_flight(…))]`
    pub in_flight: Option<InFlightAttr>,
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
}

/// `#[transition(name -> Target, set(column = "expr", …))]`
pub struct TransitionAttr {
    pub name: Ident,
    pub target: Ident,
    pub set: Vec<SetItem>,
}

/// `column = "SQL expression"` inside `set(…)`
pub struct SetItem {
    pub column: Ident,
    pub expr: LitStr,
}

impl<'a> Input<'a> {
    /// Parses what can be parsed, reporting every bad attribute into `cx`.
    /// `None` when the input is not an enum at all.
    pub fn from_syn(cx: &mut Ctxt, node: &'a DeriveInput) -> Option<Self> {
        let data = match &node.data {
            syn::Data::Enum(data) => data,
            syn::Data::Struct(data) => {
                cx.error(
                    data.struct_token,
                    "StateMachine can only be derived for an enum",
                );
                return None;
            }
            syn::Data::Union(data) => {
                cx.error(
                    data.union_token,
                    "StateMachine can only be derived for an enum",
                );
                return None;
            }
        };
        let attrs = crate::attr::machine_attrs(cx, &node.attrs);
        crate::attr::misplaced(cx, &node.attrs, &["state", "transition"], "a variant");
        for variant in &data.variants {
            crate::attr::misplaced(cx, &variant.attrs, &["state_machine"], "the enum");
        }
        let variants = data
            .variants
            .iter()
            .map(|variant| crate::attr::variant(cx, variant))
            .collect();
        Some(Input {
            original: node,
            ident: &node.ident,
            attrs,
            variants,
        })
    }
}

impl Variant<'_> {
    /// The string stored in the database for this state.
    pub fn db_name(&self, rule: RenameRule) -> String {
        match &self.rename {
            Some(rename) => rename.value(),
            None => rule.apply(&syn::ext::IdentExt::unraw(self.ident).to_string()),
        }
    }
}
