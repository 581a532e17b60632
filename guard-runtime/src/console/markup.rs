//! The console's HTML: every page's markup, every value in it escaped by
//! `maud`, and the links between pages.

use core::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::base::Base;
use super::shown::{Count, PageError, Pressed, RowPage, Shown, StatePage};
use super::token::Token;
use crate::dialect::Backend;
use crate::error::{Error, ErrorKind};
use crate::outbox::DeadLetter;
use crate::transition::counts::COUNT_CAP;
use crate::transition::rows::PAGE_ROWS;

/// One machine's part of the overview: its diagram, and beside it the
/// rows in each state, with the in-flight columns where it has such a
/// state.
pub(super) fn section<DB: Backend>(
    base: &Base,
    machine: &dyn Shown<DB>,
    counts: Result<Vec<Count>, Error>,
) -> Markup {
    html! {
        section.machine data-machine=(machine.name()) {
            h2 { (machine.name()) }
            p.table { "Table " code { (machine.table()) } }
            div.beside {
                div.diagram { (PreEscaped(machine.svg())) }
                @match counts {
                    Ok(counts) => { (count_table(base, machine.name(), &counts)) }
                    Err(error) => {
                        p.error role="alert" { "The rows could not be counted: " (error) }
                    }
                }
            }
        }
    }
}

/// The rows in each state of machine `name`.
fn count_table(base: &Base, name: &str, counts: &[Count]) -> Markup {
    let flying = counts.iter().any(|count| count.due.is_some());
    let retrying = counts.iter().any(|count| count.waiting.is_some());
    let giving_up = counts.iter().any(|count| count.gave_up.is_some());
    html! {
        div {
            table.counts {
                thead {
                    tr {
                        th { "state" } th { "stored as" } th.rows { "rows" }
                        @if flying { th.rows { "due for recovery" } }
                        @if retrying { th.rows { "waiting for a retry" } }
                        @if giving_up { th.rows { "gave up" } }
                    }
                }
                tbody {
                    @for count in counts {
                        tr data-state=(count.db) data-rows=(count.rows) data-more=(count.more) {
                            td { a href=(base.state(name, count.db)) { (count.variant) } }
                            td { code { (count.db) } }
                            td.rows {
                                (count.rows)
                                @if count.more { "+" }
                            }
                            @if flying {
                                td.rows.due data-due=[count.due] { (capped(count.due)) }
                            }
                            @if retrying {
                                td.rows.waiting data-waiting=[count.waiting] { (capped(count.waiting)) }
                            }
                            @if giving_up {
                                td.rows.gave-up data-gave-up=[count.gave_up] { (capped(count.gave_up)) }
                            }
                        }
                    }
                }
            }
            p.cap {
                "Each state is counted up to " (COUNT_CAP) " rows."
                @if flying {
                    " An in-flight state's rows due for recovery are past their lease, or their "
                    "next attempt is due."
                }
                @if giving_up {
                    " Those that gave up are in its failed follow-up's state after their last "
                    "attempt; their history says why."
                }
            }
        }
    }
}

pub(super) fn state_page<DB: Backend>(
    base: &Base,
    machine: &dyn Shown<DB>,
    shown: &StatePage,
    later: bool,
) -> Response {
    let name = machine.name();
    let next = match (shown.more, shown.rows.last()) {
        (true, Some(last)) => Some(base.state_after(name, shown.db, &last.key)),
        _ => None,
    };
    let (retrying, keeps_error) = shown.retrying;
    let body = html! {
        p { a href=(base.home()) { "Overview" } " › " (name) " › " (shown.variant) }
        p.table { "Rows stored as " code { (shown.db) } ", in key order" @if later { ", after the page before" } "." }
        @if shown.rows.is_empty() {
            p.empty { "No rows." }
        } @else {
            table.rows {
                thead {
                    tr {
                        th { "key" } th.rows { "in this state for" }
                        @if retrying { th.rows { "attempts" } }
                        @if keeps_error { th { "last error" } }
                    }
                }
                tbody {
                    @for row in &shown.rows {
                        tr data-key=(row.key) {
                            td { a href=(base.row(name, &row.key)) { code { (row.key) } } }
                            td.rows { (age_text(row.age)) }
                            @if retrying { td.rows.attempts { (row.attempts.unwrap_or_default()) } }
                            @if keeps_error {
                                td.last-error { (row.last_error.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = next { p { a.next href=(next) { "Next page" } } }
    };
    page(StatusCode::OK, shown.variant, base, body, None)
}

/// A count up to [`COUNT_CAP`], which reads as that many or more; blank
/// where the state has none.
fn capped(count: Option<u64>) -> String {
    match count {
        None => String::new(),
        Some(COUNT_CAP) => format!("{COUNT_CAP}+"),
        Some(n) => n.to_string(),
    }
}

/// How long, in a few words.
fn age_text(age: Option<Duration>) -> String {
    let Some(age) = age else {
        return "unknown".to_owned();
    };
    let s = age.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// A row's page, with `said` above it: what a press did.
pub(super) fn row_page<DB: Backend>(
    base: &Base,
    machine: &dyn Shown<DB>,
    row: &RowPage,
    token: Option<&Token>,
    said: Option<(StatusCode, &Pressed)>,
) -> Response {
    let name = machine.name();
    let action = base.row(name, &row.key);
    let body = html! {
        p {
            a href=(base.home()) { "Overview" } " › " (name) " › "
            a href=(base.state(name, row.db)) { (row.variant) } " › " code { (row.key) }
        }
        @if let Some((_, pressed)) = said { (said_text(pressed)) }
        dl.row {
            dt { "state" } dd.state data-state=(row.db) { (row.variant) " (" code { (row.db) } ")" }
            dt { "occurrence" } dd.occurrence { (row.occurrence) }
            @if let Some(key) = &row.effect_key {
                dt { "effect key" } dd.effect-key { code { (key) } }
            }
            @if let Some((attempts, most)) = row.attempts {
                dt { "attempts" } dd.attempts data-attempts=(attempts) { (attempts) " of at most " (most) }
            }
            @if let Some(next) = row.next_attempt_in {
                dt { "next attempt" }
                dd.next-attempt {
                    @if next.is_zero() { "due now" } @else { "in " (age_text(Some(next))) }
                }
            }
            @if let Some(error) = &row.last_error {
                dt { "last error" } dd.last-error { (error) }
            }
        }
        h2 { "Transitions from here" }
        @if row.choices.is_empty() {
            p.empty { "None: the state is terminal." }
        } @else {
            ul.choices {
                @for choice in &row.choices {
                    li data-transition=(choice.name) {
                        @match (token, choice.blocked) {
                            (Some(token), None) => {
                                form method="post" action=(action) {
                                    input type="hidden" name="transition" value=(choice.name);
                                    input type="hidden" name="occurrence" value=(row.occurrence);
                                    input type="hidden" name="token" value=(token.value());
                                    input type="text" name="reason" placeholder="reason" aria-label={ "reason for " (choice.name) };
                                    " "
                                    button type="submit" { (choice.name) " → " (choice.target) }
                                }
                            }
                            (_, blocked) => {
                                code { (choice.name) } " → " (choice.target)
                                @if let Some(why) = blocked { span.why { " (" (why) ")" } }
                            }
                        }
                    }
                }
            }
        }
        h2 { "History" }
        @match &row.history {
            None => { p.empty { "The machine keeps no history table." } }
            Some(Err(error)) => { p.error role="alert" { "The history could not be read: " (error) } }
            Some(Ok(steps)) if steps.is_empty() => { p.empty { "No moves recorded." } }
            Some(Ok(steps)) => {
                @if steps.len() == PAGE_ROWS {
                    p.cap { "The latest " (PAGE_ROWS) " moves." }
                }
                ol.history {
                    @for step in steps {
                        li data-occurrence=(step.occurrence) {
                            time { (step.at) } " "
                            code { (step.transition) } ": " (step.from) " → " (step.to)
                            " (occurrence " (step.occurrence) ")"
                            @if let Some(actor) = &step.actor { " by " span.actor { (actor) } }
                            @if let Some(reason) = &step.reason { ": " span.reason { (reason) } }
                            @if let Some(details) = &step.details { " " code.details { (details) } }
                        }
                    }
                }
            }
        }
        @if !row.versioned || !row.kept {
            p.cap { "Buttons need a machine with a version column and a history table." }
        }
    };
    let status = said.map_or(StatusCode::OK, |(status, _)| status);
    page(status, &row.key, base, body, token)
}

/// What a press did, in words.
fn said_text(pressed: &Pressed) -> Markup {
    let (class, text) = match pressed {
        Pressed::Moved(to) => ("moved", format!("Moved to {to}.")),
        Pressed::Stale(now, occurrence) => (
            "stale",
            format!(
                "Stale: the row moved on since the page was loaded; it is {now} at occurrence \
                 {occurrence}. Nothing changed."
            ),
        ),
        Pressed::AlreadyThere(state) => (
            "already",
            format!("The row already is {state}. Nothing changed."),
        ),
        Pressed::Conflict(state) => (
            "conflict",
            format!(
                "The row is {state}, which the transition does not start from. Nothing changed."
            ),
        ),
        Pressed::Refused(state) => (
            "refused",
            format!("The row ({state}) does not meet the transition's guard. Nothing changed."),
        ),
    };
    said(class, text)
}

/// What an action did, above the page: `class` names it for tests and
/// looks.
pub(super) fn said(class: &str, text: String) -> Markup {
    html! { p.said role="status" data-said=(class) { (text) } }
}

/// What the overview read of the stores' tables.
pub(super) struct StoresSeen {
    pub(super) outbox: &'static str,
    pub(super) backlog: Result<u64, Error>,
    pub(super) letters: Result<Vec<DeadLetter>, Error>,
    pub(super) keys: &'static str,
    pub(super) running: Result<u64, Error>,
}

/// The stores' part of the overview: the outbox's backlog and dead
/// letters, each dead letter with a requeue button where `token` is
/// (actions on), and the idempotency keys running.
pub(super) fn stores_section(base: &Base, seen: StoresSeen, token: Option<&Token>) -> Markup {
    let count = |counted: Result<u64, Error>, what: &str| match counted {
        Ok(n) => html! { strong data-count=(n) { (capped(Some(n))) } " " (what) },
        Err(error) => {
            html! { span.error role="alert" { (what) " could not be counted: " (error) } }
        }
    };
    html! {
        section.outbox data-outbox=(seen.outbox) {
            h2 { "Outbox" }
            p.table { "Table " code { (seen.outbox) } }
            p.backlog { (count(seen.backlog, "messages waiting to be published")) }
            @match seen.letters {
                Err(error) => {
                    p.error role="alert" { "The dead letters could not be read: " (error) }
                }
                Ok(letters) if letters.is_empty() => {
                    p.empty { "No dead letters: no message the relay gave up on." }
                }
                Ok(letters) => {
                    table.dead {
                        thead { tr { th { "dead letter" } th { "topic" } th.rows { "attempts" } th { "last error" } th {} } }
                        tbody {
                            @for letter in &letters {
                                tr data-message=(letter.id()) {
                                    td { code { (letter.id()) } }
                                    td { code { (letter.topic()) } }
                                    td.rows { (letter.attempts()) }
                                    td.last-error { (letter.last_error().unwrap_or("")) }
                                    td {
                                        @if let Some(token) = token {
                                            form method="post" action=(base.home()) {
                                                input type="hidden" name="requeue" value=(letter.id());
                                                input type="hidden" name="token" value=(token.value());
                                                button type="submit" { "Requeue" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    p.cap { "The oldest " (PAGE_ROWS) " dead letters at most." }
                }
            }
        }
        section.keys data-keys=(seen.keys) {
            h2 { "Idempotency keys" }
            p.table { "Table " code { (seen.keys) } }
            p.running { (count(seen.running, "keys running: begun, and not yet completed or released")) }
        }
    }
}

/// What a press did, where the row could not be read again after it:
/// the move stands, and the page says so beside the read's error.
pub(super) fn unread(
    base: &Base,
    status: StatusCode,
    pressed: &Pressed,
    error: PageError,
) -> Response {
    let why = match error {
        PageError::Database(error) => error.to_string(),
        PageError::BadRequest(why)
        | PageError::NotFound(why)
        | PageError::Forbidden(why)
        | PageError::Internal(why) => why,
    };
    let body = html! {
        p { a href=(base.home()) { "Overview" } }
        (said_text(pressed))
        p.error role="alert" { "The row could not be read again: " (why) }
    };
    page(status, "Pressed", base, body, None)
}

/// A page that says what could not be shown, with its status.
pub(super) fn problem(base: &Base, problem: PageError) -> Response {
    let (status, title, text) = match problem {
        PageError::BadRequest(text) => (StatusCode::BAD_REQUEST, "Bad request", text),
        PageError::NotFound(text) => (StatusCode::NOT_FOUND, "Not found", text),
        PageError::Forbidden(text) => (StatusCode::FORBIDDEN, "Forbidden", text),
        PageError::Internal(text) => (StatusCode::INTERNAL_SERVER_ERROR, "Console error", text),
        PageError::Database(error) => match error.kind() {
            _ if matches!(error, Error::Timeout { .. }) => (
                StatusCode::GATEWAY_TIMEOUT,
                "The database did not answer in time",
                error.to_string(),
            ),
            ErrorKind::OutcomeUnknown => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Outcome unknown",
                format!("{error}; whether it changed anything is unknown: reload the page"),
            ),
            ErrorKind::Transient => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                format!("{error}; nothing changed"),
            ),
            _ => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "The database answered with an error",
                error.to_string(),
            ),
        },
    };
    let body = html! {
        p { a href=(base.home()) { "Overview" } }
        p.error role="alert" { (text) }
    };
    page(status, title, base, body, None)
}

/// A whole page: its title, a small style sheet, and `body`; with
/// `token`, the cookie that carries it.
pub(super) fn page(
    status: StatusCode,
    title: &str,
    base: &Base,
    body: Markup,
    token: Option<&Token>,
) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · stateguard" }
                // No request for a favicon the console does not serve.
                link rel="icon" href="data:,";
                style { (PreEscaped(STYLE)) }
            }
            body {
                header { h1 { "stateguard · " (title) } }
                main { (body) }
            }
        }
    };
    let mut response = (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "same-origin"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
                 frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            ),
        ],
        markup.into_string(),
    )
        .into_response();
    if let Some(cookie) = token.and_then(|token| token.cookie(&base.path)) {
        // Hex, and a path `Base` checked: a header value, or a page that
        // says so instead of forms that could not be pressed.
        match HeaderValue::from_str(&cookie) {
            Ok(value) => response.headers_mut().append(header::SET_COOKIE, value),
            Err(_) => {
                let why = format!("the console's cookie is no header value: {cookie:?}");
                return (StatusCode::INTERNAL_SERVER_ERROR, why).into_response();
            }
        };
    }
    response
}

/// The console's looks: system fonts, a table per machine.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1f2328}\
header{background:#1f2328;color:#fff;padding:.6rem 1.2rem}header h1{font-size:1.1rem;margin:0}\
main{padding:1rem 1.2rem}section.machine{margin-bottom:2.5rem}\
.beside{display:flex;flex-wrap:wrap;gap:1rem 2.5rem;align-items:flex-start}\
.diagram svg{max-width:100%;height:auto}table{border-collapse:collapse;margin-top:.8rem}\
th,td{border-bottom:1px solid #d0d7de;padding:.3rem .8rem;text-align:left}\
td.rows,th.rows{text-align:right}.error{color:#b42318}.cap,.why,.empty{color:#57606a;font-size:.85rem}\
dl.row{display:grid;grid-template-columns:max-content auto;gap:.3rem 1rem}dd{margin:0}\
ul.choices{list-style:none;padding:0}ul.choices li{margin:.4rem 0}\
.said{padding:.5rem .8rem;border-radius:4px;background:#ddf4ff}.said[data-said=stale],\
.said[data-said=conflict],.said[data-said=refused]{background:#fff8c5}ol.history li{margin:.3rem 0}";
