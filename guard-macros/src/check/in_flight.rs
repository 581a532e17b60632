//! In-flight states: their leases, `since` columns and follow-ups, and
//! the `since` stamps of other states.

use syn::{Ident, LitStr};

use crate::ast::Input;
use crate::ctxt::Ctxt;
use crate::ident;
use crate::model::{InFlight, State, Transition};

/// `#[state(in_flight(lease = "…", since = "…", done = t, failed = t))]`
pub(super) fn check_in_flight(
    cx: &mut Ctxt,
    input: &Input,
    reserved: &[(&str, &str)],
    states: &mut [State],
    transitions: &[Transition],
) {
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
            });
        }
    }
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
