//! What the console takes a press from: the operator the service's
//! authentication named, a page of the console's own origin, and the
//! token that page carries, also set as a cookie.

use std::collections::HashMap;

use axum::http::{HeaderMap, header};

/// Who pressed a button: the identity the service's own authentication
/// puts in the request's extensions, which the console records in the
/// history row of every move it makes. A press without one is refused.
///
/// ```
/// use axum::{Extension, Router};
/// use stateguard::console::{Console, Operator};
/// # use stateguard::StateMachine;
/// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// # #[state_machine(table = "payouts", column = "status", key = "id", version = "version", history = "payout_history")]
/// # enum PayoutStatus {
/// #     #[state(initial)]
/// #     #[transition(cancel -> Cancelled)]
/// #     Pending,
/// #     Cancelled,
/// # }
///
/// # fn app(pool: sqlx::SqlitePool) -> Router {
/// let console = Console::new(pool).machine::<PayoutStatus, i64>().actions();
/// // The service's authentication names the operator; here, a fixed one.
/// Router::new().nest("/ops", console.router().layer(Extension(Operator::new("alice"))))
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(String);

impl Operator {
    /// The operator named `name`, as the history records it.
    pub fn new(name: impl Into<String>) -> Self {
        Operator(name.into())
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// The cookie that carries the console's token.
const COOKIE: &str = "stateguard_console";

/// The token a row page's forms carry, also set as a cookie: a press
/// whose form and cookie disagree did not come from the console's page.
pub(super) struct Token {
    value: String,
    /// Whether the cookie is new, to be set with the page.
    fresh: bool,
}

impl Token {
    /// The token's text.
    pub(super) fn value(&self) -> &str {
        &self.value
    }

    /// The `Set-Cookie` value that hands a new token to the browser,
    /// scoped to the console's path; `None` for one it already holds.
    pub(super) fn cookie(&self, base: &str) -> Option<String> {
        let path = match base {
            "" => "/",
            path => path,
        };
        self.fresh.then(|| {
            format!(
                "{COOKIE}={}; Path={path}; HttpOnly; SameSite=Lax",
                self.value
            )
        })
    }
}

/// The token the request's cookie holds, or a new one of 32 random bytes;
/// an error if none could be drawn.
pub(super) fn token(headers: &HeaderMap) -> Result<Token, String> {
    if let Some(value) = cookie(headers) {
        return Ok(Token {
            value,
            fresh: false,
        });
    }
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random token could be drawn: {e}"))?;
    let value = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Token { value, fresh: true })
}

/// The token in the request's cookie, if it holds one of the console's
/// shape.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
        .filter(|value| value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Where a press may come from: the origins the service named
/// ([`Console::origin`](super::Console::origin)), or else the host the
/// request was sent to.
pub(super) struct Origins<'a> {
    /// The origins named, exactly as a browser sends them
    /// (`https://ops.example.com`); empty for none.
    pub(super) named: &'a [String],
    /// The request's own authority, where its URI carries one (HTTP/2),
    /// for a request without a `Host` header.
    pub(super) authority: Option<&'a str>,
}

/// Whether the request comes from a page of the console's origin: its
/// `Origin` is one the service named, or, where it named none, names the
/// host the request was sent to (its `Host`, or its URI's authority);
/// without an `Origin`, its `Sec-Fetch-Site` says `same-origin`. A
/// request with neither is refused.
fn same_origin(headers: &HeaderMap, origins: &Origins<'_>) -> Result<(), String> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(origin) = text(header::ORIGIN) {
        let allowed = match origins.named {
            [] => {
                let host = text(header::HOST).or(origins.authority).unwrap_or_default();
                let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
                !host.is_empty() && authority.eq_ignore_ascii_case(host)
            }
            named => named.iter().any(|named| named == origin),
        };
        return match allowed {
            true => Ok(()),
            false => Err(format!(
                "the press came from `{origin}`, not from the console's own origin"
            )),
        };
    }
    match text(header::HeaderName::from_static("sec-fetch-site")) {
        Some("same-origin") => Ok(()),
        Some(site) => Err(format!("the press came from a `{site}` page")),
        None => Err("the press names no origin (`Origin` or `Sec-Fetch-Site`)".to_owned()),
    }
}

/// Whether two tokens are the same, in time that does not depend on
/// where they differ.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The operator of a press whose request came from the console's own
/// page: of the same origin, with the token its cookie holds in its form
/// (`token`), and named by the service's authentication; or why the
/// console does not take it.
pub(super) fn admit(
    headers: &HeaderMap,
    origins: &Origins<'_>,
    form: &HashMap<String, String>,
    operator: Option<Operator>,
) -> Result<Operator, String> {
    same_origin(headers, origins)?;
    match (cookie(headers), form.get("token")) {
        (Some(held), Some(sent)) if same_token(&held, sent) => {}
        _ => return Err("the press carries no token of the console's page".to_owned()),
    }
    operator.ok_or_else(|| {
        "no operator: the service's authentication puts a `console::Operator` in the request"
            .to_owned()
    })
}
