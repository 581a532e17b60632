//! In-flight states: their leases, `since` columns and follow-ups, and
//! the `since` stamps of other states.

use syn::{Ident, LitStr};

use crate::ast::Input;
use crate::attr::RetryAttr;
use crate::ctxt::Ctxt;
use crate::ident;
use crate::model::{InFlight, Retry, State, Transition};

/// `#[state(in_flight(lease = "…", since = "…", done = t, failed = t))]`
pub(super) fn check_in_flight(
    cx: &mut Ctxt,
    input: &Input,
    reserved: &[(&str, &str)],
    since_columns: &[String],
    states: &mut [State],
    transitions: &[Transition],
) {
    let mut retry_seen: Vec<&LitStr> = Vec::new();
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
        let retry = match &attr.retry {
            None => None,
            Some(retry) => {
                // Giving up runs `failed` with no verdict to take values
                // from.
                if let Some(t) = failed.map(|f| &transitions[f])
                    && t.set.iter().any(|(_, assign)| assign.bound().is_some())
                {
                    cx.error(
                        &retry.token,
                        format!(
                            "`retry` gives up through `{}`, which binds values (`bind(…)`) \
                             that no verdict supplies when the attempts run out; give that \
                             transition `set` expressions instead",
                            t.name
                        ),
                    );
                    continue;
                }
                let checked = check_retry(cx, retry, reserved, since_columns, &mut retry_seen);
                if checked.is_none() {
                    continue;
                }
                checked
            }
        };
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
                retry,
            });
        }
    }
}

/// A transition out of an in-flight state, other than its `done` and
/// `failed` follow-ups, moves the row while the effect may be running: a
/// payout can read `cancelled` while the bank call goes on, and the effect
/// learns of it only when its verdict finds the row gone (`Superseded`).
/// It must say so with `supersedes_effect`, which means nothing anywhere
/// else.
pub(super) fn check_superseding(cx: &mut Ctxt, input: &Input) {
    for variant in &input.variants {
        let follow_ups: Vec<&Ident> = variant
            .in_flight
            .iter()
            .flat_map(|f| [f.done.as_ref(), f.failed.as_ref()])
            .flatten()
            .collect();
        for t in &variant.transitions {
            let follow_up = follow_ups.iter().any(|f| **f == t.name);
            match (&variant.in_flight, &t.supersedes_effect) {
                (Some(_), None) if !follow_up => cx.error(
                    &t.name,
                    format!(
                        "`{name}` leaves `{state}`, an in-flight state, while its effect may be \
                         running: the row would be in `{target}` while the effect goes on, and \
                         the effect learns of it only when its verdict finds the row gone \
                         (`Superseded`); if that is meant, say so: \
                         `#[transition({name} -> {target}, supersedes_effect)]`",
                        name = t.name,
                        state = variant.ident,
                        target = t.target,
                    ),
                ),
                (Some(_), Some(token)) if follow_up => cx.error(
                    token,
                    format!(
                        "`{}` is a follow-up of `{}`: the effect's own verdict, which \
                         supersedes nothing; remove `supersedes_effect`",
                        t.name, variant.ident
                    ),
                ),
                (None, Some(token)) => cx.error(
                    token,
                    format!(
                        "`supersedes_effect` is for a transition out of an in-flight state, and \
                         `{}` is not one; remove it",
                        variant.ident
                    ),
                ),
                _ => {}
            }
        }
    }
}

/// `retry(max = 8, backoff = "2s..1h", attempts = "…", next_attempt = "…",
/// last_error = "…")`, the last optional.
fn check_retry<'a>(
    cx: &mut Ctxt,
    retry: &'a RetryAttr,
    reserved: &[(&str, &str)],
    since_columns: &[String],
    seen: &mut Vec<&'a LitStr>,
) -> Option<Retry> {
    let max = match &retry.max {
        None => {
            cx.error(
                &retry.token,
                "missing `max = n`: how many times the effect runs before the row ends in \
                 `failed`",
            );
            None
        }
        Some(lit) => match lit.base10_parse::<u32>() {
            Ok(n) if (1..=MAX_ATTEMPTS).contains(&n) => Some(n),
            _ => {
                cx.error(
                    lit,
                    format!("`max` is a number of attempts from 1 to {MAX_ATTEMPTS}"),
                );
                None
            }
        },
    };
    let backoff = match &retry.backoff {
        None => {
            cx.error(
                &retry.token,
                "missing `backoff = \"…..…\"`: the wait after the first attempt and the \
                 longest wait, e.g. `backoff = \"2s..1h\"`",
            );
            None
        }
        Some(lit) => match parse_backoff(&lit.value()) {
            Ok(range) => Some(range),
            Err(why) => {
                cx.error(lit, why);
                None
            }
        },
    };
    // `None` for a column left out; `Some(None)` for one that is wrong.
    let mut column = |lit: &'a Option<LitStr>, what: &str| {
        let lit = lit.as_ref()?;
        let value = lit.value();
        if let Err(why) = ident::check_ident(&value) {
            cx.error(
                lit,
                format!("{what} {value:?} is not a valid SQL identifier: it {why}"),
            );
            return Some(None);
        }
        if reserved.iter().any(|(r, _)| r.eq_ignore_ascii_case(&value))
            || since_columns.iter().any(|c| c.eq_ignore_ascii_case(&value))
        {
            cx.error(
                lit,
                format!(
                    "the `{what}` column must be a column of its own, not the status, key, \
                     version or a `since` column"
                ),
            );
            return Some(None);
        }
        if let Some(first) = seen.iter().find(|f| f.value().eq_ignore_ascii_case(&value)) {
            cx.duplicate(
                lit,
                "each retry column is a column of its own, and each in-flight state needs its \
                 own",
                first,
                "also used here",
            );
            return Some(None);
        }
        seen.push(lit);
        Some(Some(value))
    };
    let attempts = column(&retry.attempts, "attempts");
    let next_attempt = column(&retry.next_attempt, "next_attempt");
    let last_error = column(&retry.last_error, "last_error");
    let mut required = |found: Option<Option<String>>, what: &str, purpose: &str| {
        if found.is_none() {
            cx.error(
                &retry.token,
                format!("missing `{what} = \"…\"`: the {purpose}"),
            );
        }
        found.flatten()
    };
    let attempts = required(
        attempts,
        "attempts",
        "integer column that counts the effect's attempts",
    );
    let next_attempt = required(
        next_attempt,
        "next_attempt",
        "timestamp column that says when the next attempt is due",
    );
    // Left out, it is `None`; written wrong, the error is told.
    let last_error = match last_error {
        Some(None) => return None,
        found => found.flatten(),
    };
    let ((backoff_min_ms, backoff_max_ms), max) = (backoff?, max?);
    Some(Retry {
        max,
        backoff_min_ms,
        backoff_max_ms,
        attempts: attempts?,
        next_attempt: next_attempt?,
        last_error,
    })
}

/// The most attempts `retry(max = …)` allows.
const MAX_ATTEMPTS: u32 = 1_000;

/// `"2s..1h"`: the first and the longest backoff, in milliseconds.
fn parse_backoff(text: &str) -> Result<(u64, u64), String> {
    let Some((first, longest)) = text.split_once("..") else {
        return Err(format!(
            "backoff {text:?} is not a range; write the first wait and the longest, e.g. \
             \"2s..1h\""
        ));
    };
    let first = parse_duration("backoff", first)?;
    let longest = parse_duration("backoff", longest)?;
    if first > longest {
        return Err(format!(
            "backoff {text:?} starts longer than it ends; write the first wait, then the longest"
        ));
    }
    Ok((first, longest))
}

/// `#[state(since = "…", timeout = "…")]` of states that are not in
/// flight.
pub(super) fn check_since_columns(
    cx: &mut Ctxt,
    input: &Input,
    reserved: &[(&str, &str)],
    states: &mut [State],
) {
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
                states[i].since = Some(value);
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
pub(super) fn parse_lease(text: &str) -> Result<u64, String> {
    parse_duration("lease", text)
}

/// `"250ms"`, `"30s"`, `"5m"`, `"1h"`, `"2d"` in milliseconds, at least
/// 1ms and at most a week for a lease, a year for a timeout.
pub(super) fn parse_duration(what: &str, text: &str) -> Result<u64, String> {
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
