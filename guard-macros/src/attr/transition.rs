//! `#[transition(…)]` on a variant: the `Parse` impls of its edge and its
//! `set(…)`, `guard`, `emit(…)` and `supersedes_effect` options.

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitStr, Token, parenthesized};

use super::{EmitAttr, GuardAttr, GuardParam, SetItem, SetValue, TransitionAttr, kw};

impl Parse for TransitionAttr {
    // start -> Sending
    // confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP")
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![->]>()?;
        let target: Ident = input.parse()?;
        let mut set = None;
        let mut guard: Option<GuardAttr> = None;
        let mut emit: Option<EmitAttr> = None;
        let mut supersedes_effect: Option<kw::supersedes_effect> = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let lookahead = input.lookahead1();
            // cancel -> Cancelled, supersedes_effect
            if lookahead.peek(kw::supersedes_effect) {
                let token: kw::supersedes_effect = input.parse()?;
                if supersedes_effect.is_some() {
                    return Err(syn::Error::new_spanned(
                        token,
                        "duplicate `supersedes_effect`",
                    ));
                }
                supersedes_effect = Some(token);
                continue;
            }
            // guard = "amount_cents <= 100000"
            // guard("requested_by <> :approver", approver = bind(String))
            if lookahead.peek(kw::guard) {
                let keyword: kw::guard = input.parse()?;
                let condition = if input.peek(syn::token::Paren) {
                    let content;
                    parenthesized!(content in input);
                    let condition: LitStr = content.parse()?;
                    let mut params = Vec::new();
                    while !content.is_empty() {
                        content.parse::<Token![,]>()?;
                        if content.is_empty() {
                            break;
                        }
                        params.push(content.parse::<GuardParam>()?);
                    }
                    GuardAttr { condition, params }
                } else {
                    input.parse::<Token![=]>()?;
                    GuardAttr {
                        condition: input.parse()?,
                        params: Vec::new(),
                    }
                };
                if guard.is_some() {
                    return Err(syn::Error::new_spanned(
                        keyword,
                        "duplicate `guard`; join the conditions with AND in one `guard`",
                    ));
                }
                guard = Some(condition);
                continue;
            }
            // emit("payout.sent")
            // emit("payout.sent", payload(amount_cents, bank_ref))
            if lookahead.peek(kw::emit) {
                let parsed: EmitAttr = input.parse()?;
                if emit.is_some() {
                    return Err(syn::Error::new_spanned(
                        parsed.token,
                        "duplicate `emit`; a transition writes one message",
                    ));
                }
                emit = Some(parsed);
                continue;
            }
            if !lookahead.peek(kw::set) {
                let unknown: Ident = input.parse().map_err(|_| lookahead.error())?;
                return Err(syn::Error::new_spanned(
                    unknown,
                    "unknown transition option; expected `set(column = \"SQL expression\", …)`, \
                     `guard = \"SQL condition\"`, `guard(\"SQL condition with :name\", name = \
                     bind(Type))`, `emit(\"topic\", payload(column, …))` or `supersedes_effect`",
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
            guard,
            emit,
            supersedes_effect,
        })
    }
}

impl Parse for EmitAttr {
    // emit("payout.sent")
    // emit("payout.sent", payload(amount_cents, bank_ref))
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let token: kw::emit = input.parse()?;
        if !input.peek(syn::token::Paren) {
            return Err(syn::Error::new_spanned(
                token,
                "expected `emit(\"topic\")` or `emit(\"topic\", payload(column, …))`",
            ));
        }
        let content;
        parenthesized!(content in input);
        let topic: LitStr = content.parse()?;
        let mut payload = None;
        while !content.is_empty() {
            content.parse::<Token![,]>()?;
            if content.is_empty() {
                break;
            }
            if !content.peek(kw::payload) {
                return Err(syn::Error::new(
                    content.span(),
                    "expected `payload(column, …)`: the columns the message carries besides \
                     the key",
                ));
            }
            let keyword: kw::payload = content.parse()?;
            let columns;
            parenthesized!(columns in content);
            let list = Punctuated::<Ident, Token![,]>::parse_terminated(&columns)?;
            if payload.is_some() {
                return Err(syn::Error::new_spanned(
                    keyword,
                    "duplicate `payload(...)`; list every column in one `payload`",
                ));
            }
            payload = Some(list.into_iter().collect());
        }
        Ok(EmitAttr {
            token,
            topic,
            payload: payload.unwrap_or_default(),
        })
    }
}

impl Parse for GuardParam {
    // approver = bind(String)
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        if !input.peek(kw::bind) {
            return Err(syn::Error::new(
                input.span(),
                "expected `bind(Type)`: a guard's parameters are values bound per call",
            ));
        }
        input.parse::<kw::bind>()?;
        let content;
        parenthesized!(content in input);
        let ty: syn::Type = content.parse()?;
        Ok(GuardParam {
            name,
            ty: Box::new(ty),
        })
    }
}

impl Parse for SetItem {
    // sent_at = "CURRENT_TIMESTAMP"
    // bank_ref = bind(String)
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let column: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        if input.peek(kw::bind) {
            input.parse::<kw::bind>()?;
            let content;
            parenthesized!(content in input);
            let ty: syn::Type = content.parse()?;
            return Ok(SetItem {
                column,
                value: SetValue::Bind(Box::new(ty)),
            });
        }
        let lookahead = input.lookahead1();
        if !lookahead.peek(LitStr) {
            return Err(syn::Error::new(
                input.span(),
                "expected a SQL expression in a string (`\"CURRENT_TIMESTAMP\"`) or a value \
                 bound per call (`bind(String)`)",
            ));
        }
        let expr: LitStr = input.parse()?;
        Ok(SetItem {
            column,
            value: SetValue::Expr(expr),
        })
    }
}
