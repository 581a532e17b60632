//! `#[state(…)]` on a variant, with its `in_flight(…)` and `retry(…)`;
//! `#[transition(…)]` it hands to the `Parse` impls of `transition.rs`.

use syn::{Ident, LitStr, Token};

use super::{Attr, InFlightAttr, RetryAttr, TransitionAttr, VariantAttrs};
use crate::ctxt::Ctxt;

pub fn variant(cx: &mut Ctxt, variant: &syn::Variant) -> VariantAttrs {
    let mut initial = Attr::none("initial");
    let mut rename = Attr::none("rename");
    let mut in_flight_attr = Attr::none("in_flight");
    let mut since = Attr::none("since");
    let mut timeout = Attr::none("timeout");
    let mut transitions = Vec::new();
    let mut state_incomplete = false;
    let mut transitions_incomplete = false;
    for attr in &variant.attrs {
        if attr.path().is_ident("state") {
            let result = attr.parse_nested_meta(|meta| {
                // #[state(initial)]
                if let Some(ident) = meta.path.get_ident().filter(|i| *i == "initial") {
                    let ident = ident.clone();
                    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                        return Err(meta.error("`initial` takes no value: write #[state(initial)]"));
                    }
                    initial.set_lit(cx, ident);
                // #[state(rename = "sending")]
                } else if meta.path.is_ident("rename") {
                    rename.set_lit(cx, meta.value()?.parse::<LitStr>()?);
                // #[state(in_flight(lease = "30s", since = "sending_since", done = confirm))]
                } else if let Some(token) = meta.path.get_ident().filter(|i| *i == "in_flight") {
                    let parsed = in_flight(cx, token.clone(), &meta)?;
                    in_flight_attr.set(cx, parsed.token.clone(), parsed);
                // #[state(since = "pending_since", timeout = "24h")]
                } else if meta.path.is_ident("since") {
                    since.set_lit(cx, meta.value()?.parse::<LitStr>()?);
                } else if meta.path.is_ident("timeout") {
                    timeout.set_lit(cx, meta.value()?.parse::<LitStr>()?);
                } else {
                    return Err(meta.error(
                        "unknown state attribute; expected `initial`, `rename = \"…\"`, \
                         `in_flight(…)`, `since = \"…\"` or `timeout = \"…\"`",
                    ));
                }
                Ok(())
            });
            if let Err(error) = result {
                state_incomplete = true;
                cx.push(error);
            }
        } else if attr.path().is_ident("transition") {
            match attr.parse_args::<TransitionAttr>() {
                Ok(transition) => transitions.push(transition),
                Err(error) => {
                    transitions_incomplete = true;
                    cx.push(error);
                }
            }
        }
    }
    VariantAttrs {
        initial: initial.get(),
        rename: rename.get(),
        in_flight: in_flight_attr.get(),
        since: since.get(),
        timeout: timeout.get(),
        transitions,
        state_incomplete,
        transitions_incomplete,
    }
}

fn in_flight(
    cx: &mut Ctxt,
    token: Ident,
    meta: &syn::meta::ParseNestedMeta,
) -> syn::Result<InFlightAttr> {
    let mut lease = Attr::none("lease");
    let mut since = Attr::none("since");
    let mut done = Attr::none("done");
    let mut failed = Attr::none("failed");
    let mut retry_attr = Attr::none("retry");
    meta.parse_nested_meta(|inner| {
        // lease = "30s"
        if inner.path.is_ident("lease") {
            lease.set_lit(cx, inner.value()?.parse::<LitStr>()?);
        // since = "sending_since"
        } else if inner.path.is_ident("since") {
            since.set_lit(cx, inner.value()?.parse::<LitStr>()?);
        // done = confirm
        } else if inner.path.is_ident("done") {
            done.set_lit(cx, inner.value()?.parse::<Ident>()?);
        // failed = fail
        } else if inner.path.is_ident("failed") {
            failed.set_lit(cx, inner.value()?.parse::<Ident>()?);
        // retry(max = 8, backoff = "2s..1h", attempts = "…", next_attempt = "…")
        } else if let Some(token) = inner.path.get_ident().filter(|i| *i == "retry") {
            let parsed = retry(cx, token.clone(), &inner)?;
            retry_attr.set(cx, parsed.token.clone(), parsed);
        } else {
            return Err(inner.error(
                "unknown in_flight option; expected `lease = \"…\"`, `since = \"…\"`, \
                 `done = transition`, `failed = transition` or `retry(…)`",
            ));
        }
        Ok(())
    })?;
    Ok(InFlightAttr {
        token,
        lease: lease.get(),
        since: since.get(),
        done: done.get(),
        failed: failed.get(),
        retry: retry_attr.get(),
    })
}

fn retry(cx: &mut Ctxt, token: Ident, meta: &syn::meta::ParseNestedMeta) -> syn::Result<RetryAttr> {
    let mut max = Attr::none("max");
    let mut backoff = Attr::none("backoff");
    let mut attempts = Attr::none("attempts");
    let mut next_attempt = Attr::none("next_attempt");
    let mut last_error = Attr::none("last_error");
    meta.parse_nested_meta(|inner| {
        // max = 8
        if inner.path.is_ident("max") {
            max.set_lit(cx, inner.value()?.parse::<syn::LitInt>()?);
        // backoff = "2s..1h"
        } else if inner.path.is_ident("backoff") {
            backoff.set_lit(cx, inner.value()?.parse::<LitStr>()?);
        // attempts = "attempts"
        } else if inner.path.is_ident("attempts") {
            attempts.set_lit(cx, inner.value()?.parse::<LitStr>()?);
        // next_attempt = "next_attempt_at"
        } else if inner.path.is_ident("next_attempt") {
            next_attempt.set_lit(cx, inner.value()?.parse::<LitStr>()?);
        // last_error = "last_error"
        } else if inner.path.is_ident("last_error") {
            last_error.set_lit(cx, inner.value()?.parse::<LitStr>()?);
        } else {
            return Err(inner.error(
                "unknown retry option; expected `max = n`, `backoff = \"…..…\"`, \
                 `attempts = \"column\"`, `next_attempt = \"column\"` or \
                 `last_error = \"column\"`",
            ));
        }
        Ok(())
    })?;
    Ok(RetryAttr {
        token,
        max: max.get(),
        backoff: backoff.get(),
        attempts: attempts.get(),
        next_attempt: next_attempt.get(),
        last_error: last_error.get(),
    })
}
