//! Result columns: what each column of a statement's result holds
//! ([`Col`]), marked in the text where a builder writes it and read back
//! by [`render`](super::render).

/// Marks a result column in a statement under construction: control
/// characters that no validated name, fragment or literal contains.
pub(super) const COLUMN: char = '\u{3}';
const COLUMN_END: char = '\u{4}';

/// What one column of a statement's result holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Col {
    /// The statement's tag, PostgreSQL's first column: see the module
    /// docs.
    Tag,
    /// Key column `n` of the row.
    Key(u8),
    /// Whether the read found the row (1, or NULL): a PostgreSQL read of
    /// one row returns a row either way.
    Found,
    /// 1 in the row that ends a PostgreSQL batch read, NULL in the rest:
    /// the read returns that row whatever the keys find.
    End,
    /// The status, as text.
    Status,
    /// The row's occurrence (its version column, 0 without one).
    Occurrence,
    /// Whether the row meets the transition's guard (1 or 0).
    Meets,
    /// The row's lease token.
    Token,
    /// The attempt of the effect a takeover starts.
    Attempt,
    /// A history row's transition.
    Transition,
    /// A history row's state left.
    From,
    /// A history row's state entered.
    To,
    /// A history row's time, as text.
    At,
    /// A history row's time, in microseconds since the Unix epoch (UTC).
    AtMicros,
    /// A history row's actor.
    Actor,
    /// A history row's reason.
    Reason,
    /// A history row's details, as text.
    Details,
    /// How long, in milliseconds, the oldest row recovery may take over
    /// has been due (-1 when none is).
    Behind,
    /// How many rows are in state `n` (declaration order), counted up to
    /// one past the cap.
    Count(u8),
    /// How long, in milliseconds, a row has been in its state (NULL where
    /// the machine does not know).
    Age,
    /// How many rows of in-flight state `n` recovery may take over now,
    /// counted up to one past the cap.
    Due(u8),
    /// How many rows of in-flight state `n` wait for their next attempt,
    /// counted up to one past the cap.
    Waiting(u8),
    /// How many rows of in-flight state `n`'s `failed` follow-up's state
    /// used every attempt, counted up to one past the cap.
    GaveUp(u8),
    /// How many milliseconds until the row's next attempt is due
    /// (negative: overdue; NULL: none set).
    NextIn,
}

impl Col {
    /// `expr` as the result column that holds this.
    pub fn of(self, expr: &str) -> String {
        let (kind, n) = match self {
            Col::Tag => ('g', 0),
            Col::Found => ('f', 0),
            Col::End => ('E', 0),
            Col::Key(n) => ('k', n),
            Col::Status => ('s', 0),
            Col::Occurrence => ('v', 0),
            Col::Meets => ('m', 0),
            Col::Token => ('t', 0),
            Col::Attempt => ('n', 0),
            Col::Transition => ('T', 0),
            Col::From => ('F', 0),
            Col::To => ('O', 0),
            Col::At => ('A', 0),
            Col::AtMicros => ('u', 0),
            Col::Actor => ('a', 0),
            Col::Reason => ('r', 0),
            Col::Details => ('d', 0),
            Col::Behind => ('b', 0),
            Col::Count(n) => ('C', n),
            Col::Age => ('e', 0),
            Col::Due(n) => ('D', n),
            Col::Waiting(n) => ('W', n),
            Col::GaveUp(n) => ('G', n),
            Col::NextIn => ('x', 0),
        };
        format!("{COLUMN}{kind}{n}{COLUMN_END}{expr}")
    }

    fn parse(marker: &str) -> Option<Col> {
        let mut chars = marker.chars();
        let kind = chars.next()?;
        let n: u8 = chars.as_str().parse().ok()?;
        Some(match kind {
            'g' => Col::Tag,
            'f' => Col::Found,
            'E' => Col::End,
            'k' => Col::Key(n),
            's' => Col::Status,
            'v' => Col::Occurrence,
            'm' => Col::Meets,
            't' => Col::Token,
            'n' => Col::Attempt,
            'T' => Col::Transition,
            'F' => Col::From,
            'O' => Col::To,
            'A' => Col::At,
            'u' => Col::AtMicros,
            'a' => Col::Actor,
            'r' => Col::Reason,
            'd' => Col::Details,
            'b' => Col::Behind,
            'C' => Col::Count(n),
            'e' => Col::Age,
            'D' => Col::Due(n),
            'W' => Col::Waiting(n),
            'G' => Col::GaveUp(n),
            'x' => Col::NextIn,
            _ => return None,
        })
    }
}

/// The result columns marked in `text`, in order, and the text without
/// their markers.
pub(super) fn columns(text: &str) -> Result<(String, Vec<Col>), String> {
    let mut out = String::with_capacity(text.len());
    let mut columns = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(COLUMN) {
        let close = rest[open..]
            .find(COLUMN_END)
            .map(|at| open + at)
            .ok_or_else(|| format!("an unclosed column marker in {text:?}"))?;
        let column = Col::parse(&rest[open + 1..close])
            .ok_or_else(|| format!("an unknown column marker in {text:?}"))?;
        if columns.contains(&column) {
            return Err(format!("column {column:?} twice in {text:?}"));
        }
        out.push_str(&rest[..open]);
        columns.push(column);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    // The tag comes first, where a row of any statement has a column; the
    // runtime decodes a key from the columns right after it.
    let tagged = usize::from(columns.first() == Some(&Col::Tag));
    if columns.iter().skip(tagged).any(|c| *c == Col::Tag) {
        return Err(format!("the tag not first in {text:?}"));
    }
    let keys = columns.iter().filter(|c| matches!(c, Col::Key(_))).count();
    let first = (0..keys).map(|i| Col::Key(i as u8));
    if !columns.iter().skip(tagged).take(keys).copied().eq(first) {
        return Err(format!("key columns not first and in order in {text:?}"));
    }
    Ok((out, columns))
}
