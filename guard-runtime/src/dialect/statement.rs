//! One statement in one dialect: its text, and what each of its
//! placeholders binds.

/// What one placeholder of a statement binds: the bind plan the derive
/// emits beside each statement's text, in the order the dialect takes the
/// values (see [`Statement::binds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bind {
    /// Cell `part` of row `row` of a batch spelled out row by row (a
    /// follow-up that binds values per row, in `finish_many`): each row's
    /// key columns, its occurrence, its lease token, then its values. A
    /// statement takes as many rows as its highest `row` plus one; rows
    /// past the batch's end repeat its last row with a NULL token, which
    /// matches nothing.
    Row(u8, u8),
    /// A batch's keys: key column `n`'s values as an array (PostgreSQL),
    /// or every key as one JSON document (`Keys(0)`, SQLite and MySQL).
    Keys(u8),
    /// PostgreSQL: integer `n` of every row of a fenced batch, as an
    /// array (0: the occurrence, 1: the lease token, 2: a wait in
    /// milliseconds); SQLite and MySQL carry them in `Keys(0)`'s rows.
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
    /// The row's effect key up to its occurrence, as
    /// [`Won::effect_key`](crate::Won::effect_key) begins: an outbox row's
    /// message id is this and the occurrence the move writes.
    EffectKey,
    /// A batch's effect keys up to their occurrence, one per row in the
    /// batch's order, each as [`Bind::EffectKey`]: a text array
    /// (PostgreSQL), unnested beside the keys; on SQLite and MySQL the
    /// batch's JSON document with each row's last (`[key…, int…,
    /// prefix]`), which the statement reads in place of `Keys(0)`.
    EffectKeys,
    /// Row `row`'s effect key up to its occurrence, in a batch spelled
    /// out row by row ([`Bind::Row`]).
    RowEffectKey(u8),
    /// PostgreSQL: the statement's own [tag](Statement::tag), bound last,
    /// which its tag column checks: a statement run with the values of
    /// another call fails, and writes nothing.
    Tag,
}

/// What one column of a statement's result holds: declared by the derive
/// beside the statement (see [`Statement::returns`]), so that the runtime
/// reads a row by what a column holds, never by a bare index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Column {
    /// The statement's tag, a literal naming the statement and no other
    /// ([`Statement::tag`]): the first column of every PostgreSQL
    /// statement's result. It holds the tag only where the value bound
    /// last ([`Bind::Tag`]) is the same tag, and fails the statement
    /// otherwise.
    Tag,
    /// Key column `n` of the row.
    Key(u8),
    /// Whether a read of one row by its key found it (1, or NULL): a
    /// PostgreSQL read of one row returns a row either way, so that no
    /// row at all is another statement's answer.
    Found,
    /// 1 in the row that ends a PostgreSQL batch read, NULL in the rest:
    /// the read returns that row whatever the keys find, so that a result
    /// without it is another statement's answer. The library drops it.
    End,
    /// The status, as text.
    Status,
    /// The row's occurrence (its version column, 0 without one).
    Occurrence,
    /// Whether the row meets the transition's guard (1 or 0).
    Meets,
    /// The row's lease token.
    Token,
    /// The attempt of the effect that a takeover of an in-flight row
    /// starts (its attempts column, counted by the takeover).
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
    /// How long, in milliseconds, the oldest row recovery may take over
    /// has been due, or -1 when none is.
    Behind,
    /// A history row's actor.
    Actor,
    /// A history row's reason.
    Reason,
    /// A history row's details, as text.
    Details,
    /// How many rows are in state `n` (in declaration order), counted up
    /// to one past [`COUNT_CAP`](crate::meta::COUNT_CAP).
    Count(u8),
    /// How long, in milliseconds, a row has been in its state: since its
    /// `since` column's stamp, or else since the history's last move into
    /// it; NULL where the machine has neither.
    Age,
    /// How many rows of in-flight state `n` recovery may take over now
    /// (past their lease, or their next attempt due), counted up to one
    /// past [`COUNT_CAP`](crate::meta::COUNT_CAP).
    Due(u8),
    /// How many rows of in-flight state `n` wait for their next attempt,
    /// counted up to one past [`COUNT_CAP`](crate::meta::COUNT_CAP).
    Waiting(u8),
    /// How many rows ended in the state in-flight state `n`'s `failed`
    /// follow-up leads to after its last attempt (they gave up, or failed
    /// on that attempt), counted up to one past
    /// [`COUNT_CAP`](crate::meta::COUNT_CAP).
    GaveUp(u8),
    /// How many milliseconds until the row's next attempt is due, by the
    /// database's clock: negative when overdue, NULL when none is set.
    NextIn,
}

/// One statement as one dialect runs it: the text, fixed at compile time,
/// and its bind plan. The runtime binds every statement through its plan,
/// so no code but the derive, which writes both, knows where a dialect
/// puts a value.
///
/// `B` is what a placeholder can bind: a machine's [`Bind`], or the
/// fixed-table stores' own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statement<B: 'static = Bind> {
    text: &'static str,
    binds: &'static [B],
    returns: &'static [Column],
}

/// The tag literal in `text`, without its quotes: `'stateguard ` and 16
/// hex digits, a digest of the statement's text (`guard-macros/src/plan.rs`).
/// The one a tagged statement's rows hold in their first column.
fn tag_in(text: &'static str) -> Option<&'static str> {
    const OPEN: &str = "'stateguard ";
    // Every statement a call sends is asked for its tag: a vectorised
    // search, a few dozen instructions for a statement's text.
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(OPEN));
    let start = FINDER.find(text.as_bytes())? + 1;
    // `stateguard `, 16 hex digits and the closing quote.
    let tag = text.get(start..start + OPEN.len() + 15)?;
    let digits = &tag[OPEN.len() - 1..];
    let closed = text.as_bytes().get(start + tag.len()) == Some(&b'\'');
    (closed && digits.bytes().all(|b| b.is_ascii_hexdigit())).then_some(tag)
}

impl<B> Statement<B> {
    /// A statement that returns columns the caller reads by position
    /// itself: the library's own tables' (`__store_statements!`).
    pub(crate) const fn new(text: &'static str, binds: &'static [B]) -> Self {
        Statement {
            text,
            binds,
            returns: &[],
        }
    }

    pub(crate) const fn returning(
        text: &'static str,
        binds: &'static [B],
        returns: &'static [Column],
    ) -> Self {
        Statement {
            text,
            binds,
            returns,
        }
    }

    /// The SQL text.
    pub const fn text(&self) -> &'static str {
        self.text
    }

    /// What each placeholder binds, in the order the dialect takes the
    /// values: each distinct value once for PostgreSQL's `$n` and SQLite's
    /// `?n` (numbered in this order), every placeholder in the text's
    /// order for MySQL's positional `?`.
    pub const fn binds(&self) -> &'static [B] {
        self.binds
    }

    /// What each column of the statement's result holds, in order.
    pub const fn returns(&self) -> &'static [Column] {
        self.returns
    }

    /// The literal that every row of the statement's result holds in its
    /// first column ([`Column::Tag`]), so that a row can be told from one
    /// of another statement: each PostgreSQL statement of a machine and of
    /// the fixed-table stores has one, none on SQLite and MySQL.
    ///
    /// A connection pooler that multiplexes server sessions without
    /// tracking each client's prepared statements (PgBouncer in
    /// transaction mode before 1.21, or with `max_prepared_statements = 0`)
    /// can make PostgreSQL run another client's statement with this call's
    /// values; its rows then carry another tag, or none, and the library
    /// returns [`Error::StatementMixUp`](crate::Error::StatementMixUp)
    /// instead of believing them.
    ///
    /// Checking rows cannot undo a write the other statement made, so each
    /// tagged statement also binds its own tag as its last value
    /// ([`Bind::Tag`]), and its tag column fails the whole statement
    /// unless that value is its tag: one of the library's statements run
    /// with another call's values (which end with another tag) writes
    /// nothing, and the call that sent them gets the same error.
    ///
    /// The literal is found in the text, where the derive (or the store)
    /// wrote it.
    pub fn tag(&self) -> Option<&'static str> {
        tag_in(self.text)
    }

    /// The statement without its tag, where its tag is all it returns: a
    /// write that ends in ` RETURNING` and its tag column, and binds its
    /// tag last, as PostgreSQL's moves do. The text is the tagged text
    /// up to that ` RETURNING`, the plan the same less its last value, and
    /// it returns nothing: its rows changed are the command's own count.
    ///
    /// Only a pool that `pooler::check` found dedicated, at its caller's
    /// request (`Check::untagged_if_dedicated`), runs it.
    pub(crate) fn untagged(&self) -> Option<Statement<B>> {
        if !self.may_run_untagged() {
            return None;
        }
        let tag = self.tag()?;
        let last = self.binds.len().checked_sub(1)?;
        // ` RETURNING CASE WHEN $n::text = 'tag' THEN 'tag'::text ELSE
        // CAST(concat('stateguard mix-up: ran tag with ', $n::text) AS
        // INTEGER)::text END`, read piece by piece from where its length
        // puts it: the tag column checks the value bound last (`$n`, n the
        // number of values), which nothing else in the text reads. No
        // search, no allocation: this runs for every untagged move.
        const PIECES: [&str; 6] = [
            " RETURNING CASE WHEN $",
            "::text = '",
            "' THEN '",
            "'::text ELSE CAST(concat('stateguard mix-up: ran ",
            " with ', $",
            "::text) AS INTEGER)::text END",
        ];
        let n = last + 1;
        let width = n.checked_ilog10().unwrap_or(0) as usize + 1;
        // `$n` in the text: its digits, read as a number.
        let is_n = |digits: &str| digits.parse::<usize>() == Ok(n);
        let length =
            PIECES.iter().map(|piece| piece.len()).sum::<usize>() + 2 * width + 3 * tag.len();
        let (text, column) = self
            .text
            .split_at_checked(self.text.len().checked_sub(length)?)?;
        let mut rest = column;
        for (i, piece) in PIECES.into_iter().enumerate() {
            rest = rest.strip_prefix(piece)?;
            rest = match i {
                0 | 4 => {
                    let (digits, rest) = rest.split_at_checked(width)?;
                    is_n(digits).then_some(rest)?
                }
                1..=3 => rest.strip_prefix(tag)?,
                _ => rest,
            };
        }
        if !rest.is_empty() {
            return None;
        }
        let reads_it = text.match_indices('$').any(|(i, _)| {
            let digits = &text[i + 1..];
            let end = digits
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(digits.len());
            is_n(&digits[..end])
        });
        (!reads_it).then_some(Statement {
            text,
            binds: &self.binds[..last],
            returns: &[],
        })
    }

    /// Whether the statement may have an untagged form
    /// ([`Self::untagged`]): it returns its tag alone, and its text ends
    /// as a tag column does. Cheap: no executor is asked, nothing is
    /// parsed.
    pub(crate) fn may_run_untagged(&self) -> bool {
        matches!(self.returns, [Column::Tag])
            && self.text.ends_with("::text) AS INTEGER)::text END")
    }

    /// Where the columns of the statement's own result begin: after its
    /// tag, if it has one. For the stores' statements, read by position.
    pub(crate) fn after_tag(&self) -> usize {
        usize::from(self.tag().is_some())
    }

    /// The position of `column` in the statement's result, if it returns
    /// one.
    pub fn column(&self, column: Column) -> Option<usize> {
        self.returns.iter().position(|c| *c == column)
    }

    /// Whether the dialect has no such statement (an empty text).
    pub const fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl<B> PartialEq<&str> for Statement<B> {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl<B> PartialEq<Statement<B>> for &str {
    fn eq(&self, other: &Statement<B>) -> bool {
        *self == other.text
    }
}

#[cfg(test)]
mod tests {
    use super::{Bind, Column, Statement, tag_in};

    const TAGGED: &str = "UPDATE t SET s = 'b' WHERE id = $1 RETURNING CASE WHEN $2::text = \
        'stateguard 0123456789abcdef' THEN 'stateguard 0123456789abcdef'::text ELSE \
        CAST(concat('stateguard mix-up: ran stateguard 0123456789abcdef with ', $2::text) \
        AS INTEGER)::text END";

    #[test]
    fn a_write_that_returns_its_tag_alone_runs_untagged() {
        let tagged = Statement::returning(TAGGED, &[Bind::Key(0), Bind::Tag], &[Column::Tag]);
        let bare = tagged.untagged().expect("untagged");
        assert_eq!(bare.text(), "UPDATE t SET s = 'b' WHERE id = $1");
        assert_eq!(bare.binds(), &[Bind::Key(0)]);
        assert_eq!(bare.returns(), &[]);
        assert_eq!(bare.tag(), None);
    }

    #[test]
    fn a_tag_column_that_checks_a_value_of_two_digits() {
        let text = TAGGED
            .replace(
                "WHERE id = $1",
                "WHERE id = $1 AND a IN ($2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .replace("$2::text", "$11::text");
        let text: &'static str = Box::leak(text.into_boxed_str());
        let binds: &'static [Bind] = Box::leak(
            (0..10)
                .map(|_| Bind::Key(0))
                .chain([Bind::Tag])
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let tagged = Statement::returning(text, binds, &[Column::Tag]);
        let bare = tagged.untagged().expect("untagged");
        assert!(bare.text().ends_with("$9, $10)"), "{}", bare.text());
        assert_eq!(bare.binds().len(), 10);
        // The same column checking `$1`, which the text reads: no form.
        let wrong = Statement::returning(text, &binds[..1], &[Column::Tag]);
        assert_eq!(wrong.untagged(), None);
    }

    #[test]
    fn no_untagged_form_where_the_tag_is_not_all_it_returns() {
        // It returns more than its tag.
        let more = Statement::returning(
            TAGGED,
            &[Bind::Key(0), Bind::Tag],
            &[Column::Tag, Column::Occurrence],
        );
        assert_eq!(more.untagged(), None);
        // The tag column reads another value than the last.
        let other = Statement::returning(
            TAGGED,
            &[Bind::Key(0), Bind::Tag, Bind::Limit],
            &[Column::Tag],
        );
        assert_eq!(other.untagged(), None);
        // The tag is not at the end.
        let select = Statement::<Bind>::returning(
            "SELECT 'stateguard 0123456789abcdef'::text, s FROM t",
            &[],
            &[Column::Tag],
        );
        assert_eq!(select.untagged(), None);
        // The value checked is read elsewhere too.
        let read = TAGGED.replace("WHERE id = $1", "WHERE id = $1 AND note = $2");
        let read = Statement::returning(
            Box::leak(read.into_boxed_str()),
            &[Bind::Key(0), Bind::Tag],
            &[Column::Tag],
        );
        assert_eq!(read.untagged(), None);
        // No tag at all.
        let plain =
            Statement::returning("UPDATE t SET s = 'b' WHERE id = ?1", &[Bind::Key(0)], &[]);
        assert_eq!(plain.untagged(), None);
    }

    #[test]
    fn the_tag_is_found_in_the_text() {
        let text = "UPDATE t SET s = 'b' RETURNING 'stateguard 0123456789abcdef'::text";
        assert_eq!(tag_in(text), Some("stateguard 0123456789abcdef"));
        let first = "SELECT 'stateguard fedcba9876543210'::text, s FROM t";
        assert_eq!(tag_in(first), Some("stateguard fedcba9876543210"));
    }

    #[test]
    fn no_tag_where_the_literal_is_not_whole() {
        for text in [
            "UPDATE t SET s = 'b'",
            "SELECT 'stateguard'",
            "SELECT 'stateguard 0123'::text",
            "SELECT 'stateguard 0123456789abcdef0'::text",
            "SELECT 'stateguard 0123456789abcde",
            "SELECT 'stateguard 0123456789abcdef '::text",
            "SELECT 'stateguard 0123456789abcdef payments'::text",
            "",
        ] {
            assert_eq!(tag_in(text), None, "{text}");
        }
    }
}
