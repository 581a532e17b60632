//! The machine as expansion sees it, after every check has passed: the
//! table, columns, states and transitions, with names already validated.
//! The checks that build it live in `check/`.

use quote::ToTokens;
use syn::Ident;

/// The machine after validation: what expansion needs, nothing more.
pub struct Model<'a> {
    pub ident: &'a Ident,
    pub table: String,
    pub column: String,
    /// The key columns, in order: one, or several for a composite key.
    pub key: Vec<String>,
    /// The Rust type of each key column, where `key_type = "…"` declares
    /// it: the type itself for one column, a tuple's elements for several.
    pub key_types: Option<Vec<&'a syn::Type>>,
    pub version: Option<String>,
    /// The columns `claim` takes rows in: `order = "…"`, by default the key.
    pub order: Vec<String>,
    /// `history = "…"`: the table each move appends a row to.
    pub history: Option<String>,
    /// The table `emit(…)` writes to: `outbox = "…"`, by default
    /// `stateguard_outbox`.
    pub outbox: String,
    pub states: Vec<State<'a>>,
    pub initial: usize,
    pub transitions: Vec<Transition<'a>>,
}

/// The most guards `available` answers in one read: the bits of its
/// 64-bit mask, less the sign.
pub const MAX_AVAILABLE_GUARDS: usize = 63;

impl Model<'_> {
    /// The key as declared, its columns joined by `, `.
    pub fn key_text(&self) -> String {
        self.key.join(", ")
    }

    /// Per transition, the bit of `available`'s guard mask that says
    /// whether its guard passes now: for a guard that binds no values, in
    /// declaration order; `None` without a guard, or for one that needs
    /// the call's values.
    pub fn available_bits(&self) -> Vec<Option<u8>> {
        let mut next = 0_u8;
        self.transitions
            .iter()
            .map(|t| match &t.guard {
                Some(guard) if guard.params.is_empty() => {
                    next += 1;
                    Some(next - 1)
                }
                _ => None,
            })
            .collect()
    }
}

pub struct State<'a> {
    pub ident: &'a Ident,
    pub db: String,
    pub in_flight: Option<InFlight>,
    /// `#[state(since = "…")]`: stamped by every transition into the state.
    pub since: Option<String>,
    /// `#[state(timeout = "…")]`, in milliseconds.
    pub timeout_ms: Option<u64>,
}

impl State<'_> {
    /// The column every transition into the state stamps with the current
    /// time: an in-flight state's `since`, or `#[state(since = "…")]`.
    pub fn since_column(&self) -> Option<&str> {
        match &self.in_flight {
            Some(in_flight) => Some(&in_flight.since),
            None => self.since.as_deref(),
        }
    }
}

/// What a `set` item writes: a fixed SQL expression, or a value of a Rust
/// type that the constructor takes and the statement binds.
#[derive(Clone)]
pub enum Assign {
    Expr(String),
    Bind(Box<syn::Type>),
}

impl Assign {
    /// The bound parameter's type, for a `bind(Type)` item.
    pub fn bound(&self) -> Option<&syn::Type> {
        match self {
            Assign::Bind(ty) => Some(ty),
            Assign::Expr(_) => None,
        }
    }

    /// As the attribute wrote it: the expression, or `bind(Type)`.
    pub fn written(&self) -> String {
        match self {
            Assign::Expr(expr) => expr.clone(),
            Assign::Bind(ty) => format!(
                "bind({})",
                ty.to_token_stream().to_string().replace(' ', "")
            ),
        }
    }
}

impl PartialEq for Assign {
    fn eq(&self, other: &Assign) -> bool {
        self.written() == other.written()
    }
}

/// A state whose entry starts an external effect: its lease, the column
/// stamped on entry, and the transitions that end it.
pub struct InFlight {
    pub lease_ms: u64,
    pub since: String,
    /// Indices into `Model::transitions`.
    pub done: usize,
    pub failed: Option<usize>,
    /// `retry(…)`: the effect's attempts are counted, and end in `failed`.
    pub retry: Option<Retry>,
}

/// How often an in-flight state's effect runs, and when again.
pub struct Retry {
    /// Attempts at most; the one that asks for another ends the row in
    /// `failed` instead.
    pub max: u32,
    /// The backoff after the first attempt, doubled after each next one
    /// up to `backoff_max_ms`.
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
    /// The integer column counting the attempts of the occurrence.
    pub attempts: String,
    /// The timestamp column holding when the next attempt is due.
    pub next_attempt: String,
    /// The text column holding the reason the last retry gave
    /// (`Retry::because`), NULL when it gave none.
    pub last_error: Option<String>,
}

pub struct Transition<'a> {
    pub name: &'a Ident,
    pub sources: Vec<usize>,
    pub target: usize,
    pub set: Vec<(String, Assign)>,
    /// `guard = "…"`: a condition the row must meet, in the `WHERE`.
    pub guard: Option<Guard>,
    /// `emit("…")`: the message a winning move writes to the outbox.
    pub emit: Option<Emit>,
}

/// `emit("topic", payload(column, …))`, checked: the topic, and the
/// columns the payload holds after the key's.
#[derive(PartialEq, Eq)]
pub struct Emit {
    pub topic: String,
    pub payload: Vec<String>,
}

/// A guard: its condition as written, and the values it binds per call,
/// each read once by the condition, in declaration order.
pub struct Guard {
    pub text: String,
    /// Byte ranges of the `:name` placeholders in `text`, in order; the
    /// i-th is `params[i]`.
    pub at: Vec<core::ops::Range<usize>>,
    pub params: Vec<(String, Box<syn::Type>)>,
}

impl PartialEq for Guard {
    fn eq(&self, other: &Guard) -> bool {
        let params = |g: &Guard| -> Vec<(String, String)> {
            g.params
                .iter()
                .map(|(name, ty)| (name.clone(), ty.to_token_stream().to_string()))
                .collect()
        };
        self.text == other.text && params(self) == params(other)
    }
}

impl Guard {
    /// The condition with a placeholder for each `:name`: the call's values
    /// from `first` on ([`Slot::Value`](crate::plan::Slot::Value)), as the
    /// `set` values come before the guard's.
    pub fn sql(&self, first: usize) -> String {
        let mut out = String::new();
        let mut from = 0;
        for (i, range) in self.at.iter().enumerate() {
            out.push_str(&self.text[from..range.start]);
            out.push_str(&crate::plan::Slot::Value((first + i) as u8).mark());
            from = range.end;
        }
        out.push_str(&self.text[from..]);
        out
    }
}

impl Transition<'_> {
    /// The values bound per call, in order: the `set` values, then the
    /// guard's. The constructor's parameters.
    pub fn params(&self) -> impl Iterator<Item = (&str, &syn::Type)> {
        self.set
            .iter()
            .filter_map(|(col, value)| Some((col.as_str(), value.bound()?)))
            .chain(
                self.guard
                    .iter()
                    .flat_map(|g| g.params.iter().map(|(name, ty)| (name.as_str(), &**ty))),
            )
    }

    /// How many of the values are the `set` values (the rest are the
    /// guard's).
    pub fn set_binds(&self) -> usize {
        self.set.iter().filter(|(_, v)| v.bound().is_some()).count()
    }

    /// How many values are bound per call.
    pub fn binds(&self) -> usize {
        self.params().count()
    }
}
