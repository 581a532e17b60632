//! Attribute parsing. Unknown keys and repeated keys are errors, never
//! ignored.

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Ident, LitStr, Token, parenthesized};

use crate::ast::{InFlightAttr, MachineAttrs, SetItem, TransitionAttr, Variant};
use crate::case::RenameRule;
use crate::ctxt::Ctxt;

pub fn machine_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> MachineAttrs {
    let mut out = MachineAttrs::default();
    for attr in attrs {
        if !attr.path().is_ident("state_machine") {
            continue;
        }
        if out.span.is_none() {
            out.span = attr.path().get_ident().map(Ident::span);
        }
        let result = attr.parse_nested_meta(|meta| {
            // #[state_machine(table = "payouts")]
            if meta.path.is_ident("table") {
                set_once(cx, &mut out.table, meta.value()?.parse()?, "table");
            // #[state_machine(column = "status")]
            } else if meta.path.is_ident("column") {
                set_once(cx, &mut out.column, meta.value()?.parse()?, "column");
            // #[state_machine(key = "id")]
            } else if meta.path.is_ident("key") {
                set_once(cx, &mut out.key, meta.value()?.parse()?, "key");
            // #[state_machine(version = "version")]
            } else if meta.path.is_ident("version") {
                set_once(cx, &mut out.version, meta.value()?.parse()?, "version");
            // #[state_machine(rename_all = "snake_case")]
            } else if meta.path.is_ident("rename_all") {
                let lit: LitStr = meta.value()?.parse()?;
                let Some(rule) = RenameRule::from_str(&lit.value()) else {
                    cx.error(
                        &lit,
                        format!(
                            "unknown rename_all rule {:?}; expected one of {}",
                            lit.value(),
                            RenameRule::names()
                        ),
                    );
                    return Ok(());
                };
                match &out.rename_all {
                    Some((first, _)) => cx.duplicate(
                        &lit,
                        "duplicate `rename_all`",
                        first,
                        "first `rename_all` here",
                    ),
                    None => out.rename_all = Some((lit, rule)),
                }
            // #[state_machine(crate = "my_stateguard")]
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                let path = lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
                    syn::Error::new_spanned(
                        &lit,
                        "`crate` must be a path such as \"my_stateguard\" or \"::deps::stateguard\"",
                    )
                })?;
                match &out.krate {
                    Some(first) => {
                        cx.duplicate(&lit, "duplicate `crate`", first, "first `crate` here")
                    }
                    None => out.krate = Some(path),
                }
            } else {
                return Err(meta.error(
                    "unknown state_machine attribute; expected `table`, `column`, `key`, \
                     `version`, `rename_all` or `crate`",
                ));
            }
            Ok(())
        });
        if let Err(error) = result {
            out.incomplete = true;
            cx.push(error);
        }
    }
    out
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

fn set_once(cx: &mut Ctxt, slot: &mut Option<LitStr>, value: LitStr, name: &str) {
    match slot {
        Some(first) => cx.duplicate(
            &value,
            format!("duplicate `{name}`"),
            &*first,
            format!("first `{name}` here"),
        ),
        None => *slot = Some(value),
    }
}

pub fn variant<'a>(cx: &mut Ctxt, variant: &'a syn::Variant) -> Variant<'a> {
    let mut out = Variant {
        original: variant,
        ident: &variant.ident,
        initial: None,
        rename: None,
        in_flight: None,
        transitions: Vec::new(),
        state_incomplete: false,
        transitions_incomplete: false,
    };
    for attr in &variant.attrs {
        if attr.path().is_ident("state") {
            let result = attr.parse_nested_meta(|meta| {
                // #[state(initial)]
                if let Some(ident) = meta.path.get_ident().filter(|i| *i == "initial") {
                    let ident = ident.clone();
                    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                        return Err(meta.error("`initial` takes no value: write #[state(initial)]"));
                    }
                    match &out.initial {
                        Some(first) => cx.duplicate(
                            &ident,
                            "duplicate `initial`",
                            first,
                            "first `initial` here",
                        ),
                        None => out.initial = Some(ident),
                    }
                // #[state(rename = "sending")]
                } else if meta.path.is_ident("rename") {
                    set_once(cx, &mut out.rename, meta.value()?.parse()?, "rename");
                // #[state(in_flight(lease = "30s", since = "sending_since", done = confirm))]
                } else if let Some(token) = meta.path.get_ident().filter(|i| *i == "in_flight") {
                    let parsed = in_flight(cx, token.clone(), &meta)?;
                    match &out.in_flight {
                        Some(first) => cx.duplicate(
                            &parsed.token,
                            "duplicate `in_flight`",
                            &first.token,
                            "first `in_flight` here",
                        ),
                        None => out.in_flight = Some(parsed),
                    }
                } else {
                    return Err(meta.error(
                        "unknown state attribute; expected `initial`, `rename = \"…\"` or \
                         `in_flight(…)`",
                    ));
                }
                Ok(())
            });
            if let Err(error) = result {
                out.state_incomplete = true;
                cx.push(error);
            }
        } else if attr.path().is_ident("transition") {
            match attr.parse_args::<TransitionAttr>() {
                Ok(transition) => out.transitions.push(transition),
                Err(error) => {
                    out.transitions_incomplete = true;
                    cx.push(error);
                }
            }
        }
    }
    out
}

fn in_flight(
    cx: &mut Ctxt,
    token: Ident,
    meta: &syn::meta::ParseNestedMeta,
) -> syn::Result<InFlightAttr> {
    let mut out = InFlightAttr {
        token,
        lease: None,
        since: None,
        done: None,
        failed: None,
    };
    meta.parse_nested_meta(|inner| {
        // lease = "30s"
        if inner.path.is_ident("lease") {
            set_once(cx, &mut out.lease, inner.value()?.parse()?, "lease");
        // since = "sending_since"
        } else if inner.path.is_ident("since") {
            set_once(cx, &mut out.since, inner.value()?.parse()?, "since");
        // done = confirm
        } else if inner.path.is_ident("done") {
            set_once_ident(cx, &mut out.done, inner.value()?.parse()?, "done");
        // failed = fail
        } else if inner.path.is_ident("failed") {
            set_once_ident(cx, &mut out.failed, inner.value()?.parse()?, "failed");
        } else {
            return Err(inner.error(
                "unknown in_flight option; expected `lease = \"…\"`, `since = \"…\"`, \
                 `done = transition` or `failed = transition`",
            ));
        }
        Ok(())
    })?;
    Ok(out)
}

fn set_once_ident(cx: &mut Ctxt, slot: &mut Option<Ident>, value: Ident, name: &str) {
    match slot {
        Some(first) => cx.duplicate(
            &value,
            format!("duplicate `{name}`"),
            &*first,
            format!("first `{name}` here"),
        ),
        None => *slot = Some(value),
    }
}

mod kw {
    syn::custom_keyword!(set);
}

impl Parse for TransitionAttr {
    // start -> Sending
    // confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP")
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![->]>()?;
        let target: Ident = input.parse()?;
        let mut set = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let lookahead = input.lookahead1();
            if !lookahead.peek(kw::set) {
                let unknown: Ident = input.parse().map_err(|_| lookahead.error())?;
                return Err(syn::Error::new_spanned(
                    unknown,
                    "unknown transition option; expected `set(column = \"SQL expression\", …)`",
                ));
            }
            let keyword: kw::set = input.parse()?;
            let content;
            parenthesized!(content in input);
            let items = Punctuated::<SetItem, Token![,]>::parse_terminated(&content)?;
            if set.is_some() {
                return Err(syn::Error::new_spanned(
                    keyword,
                    "duplicate `set(...)`; list every column in one `set`",
                ));
            }
            set = Some(items.into_iter().collect());
        }
        Ok(TransitionAttr {
            name,
            target,
            set: set.unwrap_or_default(),
        })
    }
}

impl Parse for SetItem {
    // sent_at = "CURRENT_TIMESTAMP"
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let column: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let expr: LitStr = input.parse()?;
        Ok(SetItem { column, expr })
    }
}
