//! The enum as the macro sees it. Every piece keeps its tokens, so that an
//! error can point at the exact attribute or ident that caused it.

use syn::{DeriveInput, Ident, LitStr};

use crate::attr::{self, InFlightAttr, MachineAttrs, TransitionAttr};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;

pub struct Input<'a> {
    pub original: &'a DeriveInput,
    pub ident: &'a Ident,
    pub attrs: MachineAttrs,
    pub variants: Vec<Variant<'a>>,
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
    /// `#[state(since = "…")]`
    pub since: Option<LitStr>,
    /// `#[state(timeout = "…")]`
    pub timeout: Option<LitStr>,
    pub transitions: Vec<TransitionAttr>,
    /// A `#[state]` attribute failed to parse (it may have held `initial`).
    pub state_incomplete: bool,
    /// A `#[transition]` attribute failed to parse (it may have held an
    /// edge that makes a state reachable).
    pub transitions_incomplete: bool,
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
        let attrs = attr::machine_attrs(cx, &node.attrs);
        attr::misplaced(cx, &node.attrs, &["state", "transition"], "a variant");
        for variant in &data.variants {
            attr::misplaced(cx, &variant.attrs, &["state_machine"], "the enum");
        }
        let variants = data
            .variants
            .iter()
            .map(|variant| Variant::from_syn(cx, variant))
            .collect();
        Some(Input {
            original: node,
            ident: &node.ident,
            attrs,
            variants,
        })
    }
}

impl<'a> Variant<'a> {
    fn from_syn(cx: &mut Ctxt, node: &'a syn::Variant) -> Self {
        let attrs = attr::variant(cx, node);
        Variant {
            original: node,
            ident: &node.ident,
            initial: attrs.initial,
            rename: attrs.rename,
            in_flight: attrs.in_flight,
            since: attrs.since,
            timeout: attrs.timeout,
            transitions: attrs.transitions,
            state_incomplete: attrs.state_incomplete,
            transitions_incomplete: attrs.transitions_incomplete,
        }
    }

    /// The string stored in the database for this state.
    pub fn db_name(&self, rule: RenameRule) -> String {
        match &self.rename {
            Some(rename) => rename.value(),
            None => rule.apply(&syn::ext::IdentExt::unraw(self.ident).to_string()),
        }
    }
}
