//! Bind plans: which value each placeholder of a statement takes.
//!
//! The statement builders (`sql/`) never number a placeholder. They
//! write a [`Slot`] marker where a value goes, and [`render`] turns the
//! finished text into the dialect's placeholders and the ordered list of
//! slots the runtime binds, its plan. Text and plan come from the same
//! markers, so they cannot disagree, and no other code knows a dialect's
//! placeholder order.
//!
//! **Architecture Invariant:** the runtime binds a statement only through
//! its plan (`guard-runtime/src/transition/bind.rs`); the numbering rule lives here
//! and nowhere else.
//!
//! The columns a statement returns are declared the same way: a builder
//! writes a [`Col`] marker before each item of the select list the caller
//! reads, and [`render`] strips them and records their order, so the
//! runtime reads a row by what a column holds, never by a bare index.
//!
//! Every PostgreSQL statement also proves, row by row, that it is the one
//! that ran: [`render`] makes its first result column a literal, its
//! [`Col::Tag`], that names the statement and no other (a digest of its
//! text), and a statement that returns nothing else returns the tag
//! (`RETURNING`), one row per row it changed. A connection pooler that
//! hands a named prepared statement to the wrong server session makes the
//! server run another statement with this call's values; the runtime
//! checks the tag of every row before it believes it
//! (`guard-runtime/src/executor/proven.rs`), and counts rows changed by
//! their tagged rows, never by the command's own count.
//!
//! Checking rows cannot undo what the other statement wrote, so the tag
//! column also checks the values: every PostgreSQL statement binds its
//! own tag last ([`Slot::Tag`]), and its tag column fails the statement,
//! and with it every write the statement made, unless that value is its
//! tag. A statement of the library's that runs with another call's values
//! writes nothing.
//!
//! PostgreSQL (`$n`) and SQLite (`?n`) number each distinct slot once, in
//! the order of [`Slot`]'s declaration, so a value used twice (a key in
//! its exact match) is bound once. MySQL's `?` are positional: the plan
//! lists every placeholder in text order, a value used twice twice.

use crate::dialect::Dialect;

mod columns;

pub use self::columns::Col;
use self::columns::{COLUMN, columns};

/// What one placeholder binds. The declaration order is the numbering
/// order of the numbered dialects.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Slot {
    /// Cell `part` of row `row` of a batch spelled out row by row (a
    /// follow-up that binds values per row, `finish_many`'s): each row's
    /// key columns, its occurrence, its lease token, then its values.
    Row(u8, u8),
    /// A batch's keys: key column `n`'s values as an array (PostgreSQL),
    /// or every key as one JSON document (`Keys(0)`, SQLite and MySQL).
    Keys(u8),
    /// PostgreSQL: integer `n` of every row of a fenced batch, as an
    /// array (0: the occurrence, 1: the lease token, 2: a wait in
    /// milliseconds). SQLite and MySQL carry them in `Keys(0)`'s rows.
    Ints(u8),
    /// Key column `n` of the row.
    Key(u8),
    /// The call's value `n`: the `set(… = bind(T))` values first, then the
    /// guard's `:name` values, in declaration order.
    Value(u8),
    /// A number of milliseconds: how old a claimed row's stamp must be.
    Age,
    /// A number of milliseconds from now: when an in-flight row's next
    /// attempt is due.
    Delay,
    /// The occurrence the row must still be at.
    Expected,
    /// The caller's lease token.
    Token,
    /// How many rows at most.
    Limit,
    /// The state a read is of, as the database stores it.
    State,
    /// The note's actor.
    Actor,
    /// The note's reason.
    Reason,
    /// The note's details (JSON).
    Details,
    /// The row's effect key up to its occurrence, as the runtime computes
    /// it (`guard-runtime/src/outcome.rs`, `effect_key_prefix`): an
    /// outbox row's message id is this and the occurrence the move
    /// writes.
    EffectKey,
    /// A batch's effect keys up to their occurrence, one per row in the
    /// batch's order, each as [`Slot::EffectKey`]: a text array unnested
    /// beside the keys on PostgreSQL; on SQLite and MySQL, whose batch is
    /// one JSON document, that document with each row's ending in it
    /// (`[key…, int…, prefix]`), which a statement that reads them takes
    /// in place of `Keys(0)`.
    EffectKeys,
    /// Row `n`'s effect key up to its occurrence, in a batch spelled out
    /// row by row ([`Slot::Row`]).
    RowEffectKey(u8),
    /// A value of a statement of the library's own tables, the stores'
    /// and the catalog reads' (`stores/`).
    Field(Field),
    /// PostgreSQL: the statement's own tag, bound last, which its tag
    /// column checks (see the module docs).
    Tag,
}

/// What one placeholder of a statement of the library's own tables
/// binds: the runtime's `bind::Field`, variant for variant. The
/// declaration order is the numbering order, after the machines' slots.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Field {
    /// An idempotency key's scope.
    Scope,
    /// The client's idempotency key.
    Key,
    /// The inbox's consumer.
    Consumer,
    /// The inbox's or the outbox's message id.
    MessageId,
    /// The outbox message's order key.
    OrderKey,
    /// A table's name, as `verify` reads the catalog.
    Table,
    /// A table's schema (or database), as `verify` reads the catalog.
    Schema,
    /// The outbox message's topic.
    Topic,
    /// The request's fingerprint.
    Fingerprint,
    /// The lease the caller holds.
    Lease,
    /// A number of milliseconds: a lease's length, a pruning window.
    Millis,
    /// The response's status.
    Status,
    /// The response's body.
    Body,
    /// The outbox message's payload.
    Payload,
    /// The response's stored headers.
    Headers,
    /// How many rows at most.
    Limit,
    /// An outbox message's place in the table.
    Seq,
    /// Outbox messages' places, as a JSON array.
    Seqs,
    /// The claim a relay's pass takes messages under.
    Claim,
    /// How many attempts a message may have.
    Attempts,
    /// Why a message failed.
    Reason,
}

impl Field {
    /// Every field, in declaration order: a marker names one by its place.
    pub const ALL: [Field; 21] = [
        Field::Scope,
        Field::Key,
        Field::Consumer,
        Field::MessageId,
        Field::OrderKey,
        Field::Table,
        Field::Schema,
        Field::Topic,
        Field::Fingerprint,
        Field::Lease,
        Field::Millis,
        Field::Status,
        Field::Body,
        Field::Payload,
        Field::Headers,
        Field::Limit,
        Field::Seq,
        Field::Seqs,
        Field::Claim,
        Field::Attempts,
        Field::Reason,
    ];

    /// The marker of this field's slot, as a statement builder writes it.
    pub fn mark(self) -> String {
        Slot::Field(self).mark()
    }
}

/// Marks a slot in a statement under construction: control characters
/// that no validated name, fragment or literal contains.
const OPEN: char = '\u{1}';
const CLOSE: char = '\u{2}';

impl Slot {
    /// The marker that stands for this slot until [`render`].
    pub fn mark(self) -> String {
        let (kind, n) = match self {
            Slot::Row(row, part) => return format!("{OPEN}R{row}.{part}{CLOSE}"),
            Slot::Keys(n) => ('K', n),
            Slot::Ints(n) => ('I', n),
            Slot::Key(n) => ('k', n),
            Slot::Value(n) => ('v', n),
            Slot::Age => ('g', 0),
            Slot::Delay => ('D', 0),
            Slot::Expected => ('e', 0),
            Slot::Token => ('t', 0),
            Slot::Limit => ('l', 0),
            Slot::State => ('s', 0),
            Slot::Actor => ('a', 0),
            Slot::Reason => ('r', 0),
            Slot::Details => ('d', 0),
            Slot::EffectKey => ('E', 0),
            Slot::EffectKeys => ('P', 0),
            Slot::RowEffectKey(n) => ('p', n),
            Slot::Field(field) => ('S', field as u8),
            Slot::Tag => ('G', 0),
        };
        format!("{OPEN}{kind}{n}{CLOSE}")
    }

    fn parse(marker: &str) -> Option<Slot> {
        if let Some(cell) = marker.strip_prefix('R') {
            let (row, part) = cell.split_once('.')?;
            return Some(Slot::Row(row.parse().ok()?, part.parse().ok()?));
        }
        let mut chars = marker.chars();
        let kind = chars.next()?;
        let n: u8 = chars.as_str().parse().ok()?;
        Some(match kind {
            'K' => Slot::Keys(n),
            'I' => Slot::Ints(n),
            'k' => Slot::Key(n),
            'v' => Slot::Value(n),
            'g' => Slot::Age,
            'D' => Slot::Delay,
            'e' => Slot::Expected,
            't' => Slot::Token,
            'l' => Slot::Limit,
            's' => Slot::State,
            'a' => Slot::Actor,
            'r' => Slot::Reason,
            'd' => Slot::Details,
            'E' => Slot::EffectKey,
            'P' => Slot::EffectKeys,
            'p' => Slot::RowEffectKey(n),
            'S' => Slot::Field(*Field::ALL.get(usize::from(n))?),
            'G' => Slot::Tag,
            _ => return None,
        })
    }
}

/// A statement in one dialect: its text, its plan, the columns it
/// returns and, on PostgreSQL, its tag.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub plan: Vec<Slot>,
    pub returns: Vec<Col>,
    pub tag: Option<String>,
}

/// Where a builder puts a statement's tag itself ([`Col::Tag`]`.of(TAG)`),
/// for a result that would otherwise have no column; [`render`] writes the
/// literal in its place.
pub const TAG: &str = "\u{5}";

/// PostgreSQL: `marked` with its tag as the first column of its result
/// (before the first marked column), or returned by a statement that
/// returns nothing else (` RETURNING tag`), and the tag: a digest of the
/// statement's text, so that no two statements share one.
fn tagged(marked: &str) -> (String, String) {
    let tag_column = Col::Tag.of(TAG);
    let mut with_tag = match (marked.contains(&tag_column), marked.find(COLUMN)) {
        (true, _) => marked.to_owned(),
        (false, Some(first)) => format!("{}{tag_column}, {}", &marked[..first], &marked[first..]),
        (false, None) => format!("{marked} RETURNING {tag_column}"),
    };
    let mut digest = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut digest, with_tag.as_bytes());
    let tag = format!("stateguard {:016x}", std::hash::Hasher::finish(&digest));
    with_tag = with_tag.replace(TAG, &checked(&tag));
    (with_tag, tag)
}

/// The tag column of the statement whose tag is `tag`: the tag, where the
/// value bound last ([`Slot::Tag`]) is that tag, and an error otherwise,
/// which undoes whatever the statement wrote.
///
/// So a statement that runs with another call's values, which a pooler
/// mixing prepared statements makes happen, fails before it commits
/// anything: the values end with the other statement's tag. Checking
/// rows afterwards cannot undo a write; this does. The error is a failed
/// cast of a text that names both tags (22P02), which the runtime reads
/// as a mix-up (`guard-runtime/src/executor/proven.rs`). `concat` makes
/// it fail on a NULL as well, and the bound value in it keeps PostgreSQL
/// from evaluating it while planning, where a constant would fail.
fn checked(tag: &str) -> String {
    tag_column(tag, &Slot::Tag.mark())
}

/// The tag column of `tag`, checking the value at `bound`.
pub fn tag_column(tag: &str, bound: &str) -> String {
    format!(
        "CASE WHEN {bound}::text = '{tag}' THEN '{tag}'::text ELSE \
         CAST(concat('stateguard mix-up: ran {tag} with ', {bound}::text) AS INTEGER)::text END"
    )
}

/// `marked`'s slots turned into `d`'s placeholders, and the plan that
/// binds them; an error (a bug of a builder) when the text's placeholders
/// and the plan do not match.
pub fn render(d: Dialect, marked: &str) -> Result<Rendered, String> {
    let (marked, tag) = match d {
        Dialect::Postgres => {
            let (marked, tag) = tagged(marked);
            (marked, Some(tag))
        }
        Dialect::Sqlite | Dialect::MySql => (marked.to_owned(), None),
    };
    let (marked, returns) = columns(&marked)?;
    let marked = marked.as_str();
    let mut slots = Vec::new();
    let mut pieces = Vec::new();
    let mut rest = marked;
    while let Some(open) = rest.find(OPEN) {
        let close = rest[open..]
            .find(CLOSE)
            .map(|at| open + at)
            .ok_or_else(|| format!("an unclosed placeholder marker in {marked:?}"))?;
        let slot = Slot::parse(&rest[open + 1..close])
            .ok_or_else(|| format!("an unknown placeholder marker in {marked:?}"))?;
        pieces.push(&rest[..open]);
        slots.push(slot);
        rest = &rest[close + 1..];
    }
    let plan = match d {
        Dialect::MySql => slots.clone(),
        Dialect::Postgres | Dialect::Sqlite => {
            let mut distinct = slots.clone();
            distinct.sort_unstable();
            distinct.dedup();
            distinct
        }
    };
    let mut text = String::with_capacity(marked.len());
    for (piece, slot) in pieces.iter().zip(&slots) {
        text.push_str(piece);
        let n = match d {
            Dialect::MySql => 0,
            Dialect::Postgres | Dialect::Sqlite => {
                1 + plan.iter().position(|s| s == slot).unwrap_or_default()
            }
        };
        text.push_str(&d.param(n));
    }
    text.push_str(rest);
    let found = placeholders(d, &text);
    if found != plan.len() {
        return Err(format!(
            "{} placeholders in {text:?}, but a plan of {} values",
            found,
            plan.len()
        ));
    }
    Ok(Rendered {
        text,
        plan,
        returns,
        tag,
    })
}

/// How many values `text` takes in `d`, outside quoted literals: MySQL's
/// `?`, or the highest `$n` / `?n` of the numbered dialects.
fn placeholders(d: Dialect, text: &str) -> usize {
    let sigil = match d {
        Dialect::Postgres => '$',
        Dialect::Sqlite | Dialect::MySql => '?',
    };
    let mut count = 0;
    let mut quoted = false;
    for (at, c) in text.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            c if c == sigil && !quoted => match d {
                Dialect::MySql => count += 1,
                Dialect::Postgres | Dialect::Sqlite => {
                    let digits: String = text[at + 1..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    count = count.max(digits.parse().unwrap_or(0));
                }
            },
            _ => {}
        }
    }
    count
}

#[cfg(test)]
mod tests;
