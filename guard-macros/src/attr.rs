//! Attribute parsing. Unknown keys and repeated keys are errors, never
//! ignored. This module owns the types it fills and uses no sibling but the
//! leaves `ctxt` and `case`; `ast` builds the enum's view from them.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Ident, LitStr, Path, Token, parenthesized};

use crate::case::RenameRule;
use crate::ctxt::Ctxt;

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

pub fn machine_attrs(cx: &mut Ctxt, attrs: &[Attribute]) -> MachineAttrs {
    let mut span = None;
    let mut incomplete = false;
    let mut table = Attr::none("table");
    let mut column = Attr::none("column");
    let mut key = Attr::none("key");
    let mut version = Attr::none("version");
    let mut order = Attr::none("order");
    let mut history = Attr::none("history");
    let mut outbox = Attr::none("outbox");
    let mut rename_all = Attr::none("rename_all");
    let mut krate = Attr::none("crate");
    let mut conversions = Attr::none("conversions");
    let mut key_type = Attr::none("key_type");
    for attr in attrs {
        if !attr.path().is_ident("state_machine") {
            continue;
        }
        if span.is_none() {
            span = attr.path().get_ident().map(Ident::span);
        }
        let result = attr.parse_nested_meta(|meta| {
            // #[state_machine(table = "payouts")]
            if meta.path.is_ident("table") {
                table.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(column = "status")]
            } else if meta.path.is_ident("column") {
                column.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(key = "id")]
            } else if meta.path.is_ident("key") {
                key.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(version = "version")]
            } else if meta.path.is_ident("version") {
                version.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(order = "created_at")]
            } else if meta.path.is_ident("order") {
                order.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(history = "payout_transitions")]
            } else if meta.path.is_ident("history") {
                history.set_lit(cx, meta.value()?.parse()?);
            // #[state_machine(outbox = "stateguard_outbox")]
            } else if meta.path.is_ident("outbox") {
                outbox.set_lit(cx, meta.value()?.parse()?);
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
                rename_all.set(cx, &lit, (lit.clone(), rule));
            // #[state_machine(crate = "my_stateguard")]
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                let path = lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
                    syn::Error::new_spanned(
                        &lit,
                        "`crate` must be a path such as \"my_stateguard\" or \"::deps::stateguard\"",
                    )
                })?;
                krate.set(cx, &lit, path);
            // #[state_machine(key_type = "i64")]
            } else if meta.path.is_ident("key_type") {
                let lit: LitStr = meta.value()?.parse()?;
                let ty: syn::Type = lit.parse().map_err(|_| {
                    syn::Error::new_spanned(
                        &lit,
                        "`key_type` must be a Rust type, such as \"i64\" or \"(String, i64)\" \
                         for a key of two columns",
                    )
                })?;
                key_type.set(cx, &lit, ty);
            // #[state_machine(conversions = false)]
            } else if meta.path.is_ident("conversions") {
                let lit: syn::Lit = meta.value()?.parse()?;
                let syn::Lit::Bool(flag) = &lit else {
                    return Err(syn::Error::new_spanned(
                        &lit,
                        "`conversions` takes `true` or `false`: `conversions = false` leaves \
                         `Display`, `FromStr` and the sqlx and serde impls to the enum",
                    ));
                };
                conversions.set(cx, &lit, flag.value);
            } else {
                return Err(meta.error(
                    "unknown state_machine attribute; expected `table`, `column`, `key`, \
                     `version`, `order`, `history`, `outbox`, `rename_all`, `crate`, \
                     `key_type` or `conversions`",
                ));
            }
            Ok(())
        });
        if let Err(error) = result {
            incomplete = true;
            cx.push(error);
        }
    }
    MachineAttrs {
        span,
        table: table.get(),
        column: column.get(),
        key: key.get(),
        version: version.get(),
        order: order.get(),
        history: history.get(),
        outbox: outbox.get(),
        rename_all: rename_all.get(),
        krate: krate.get(),
        conversions: conversions.get(),
        key_type: key_type.get(),
        incomplete,
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
        } else {
            return Err(inner.error(
                "unknown retry option; expected `max = n`, `backoff = \"…..…\"`, \
                 `attempts = \"column\"` or `next_attempt = \"column\"`",
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
    })
}

pub mod kw {
    syn::custom_keyword!(set);
    syn::custom_keyword!(guard);
    syn::custom_keyword!(bind);
    syn::custom_keyword!(emit);
    syn::custom_keyword!(payload);
    syn::custom_keyword!(supersedes_effect);
}

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
