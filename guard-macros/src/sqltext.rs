//! The grammar of a `set(column = "…")` expression: an allow-list
//! tokenizer.
//!
//! The expression is SQL written in the source, so it is static; what must
//! not happen is that one backend reads it as something other than what it
//! looks like. Every way SQL text can change meaning around it lives in
//! quoting, comments, terminators and placeholders, and each backend has
//! its own: PostgreSQL's `$$…$$` and `$1`, SQLite's `[…]` and `?1`, MySQL's
//! backslash escapes, `#` comments and double-quoted strings. So instead of
//! refusing a list of known-bad characters, this accepts only
//!
//! - words: ASCII letters, digits and `_`, not starting with a digit,
//!   optionally dotted (`payouts.attempts`); keywords are words too;
//! - numbers: `1`, `1.5`, `.5`, `1e3`;
//! - text in single quotes, a doubled `''` for a quote, with no backslash,
//!   no `$` and no control character other than whitespace;
//! - the operators `+ - * / % = <> != < > <= >= ||`;
//! - balanced parentheses (so function calls) and commas;
//! - in a guard that declares them, values bound per call, `:name`;
//! - spaces, tabs and line breaks between tokens.
//!
//! Statement keywords are refused even inside parentheses: a `set` value is
//! one expression of the row being updated. A subquery could read other
//! tables, and then a column name in it would no longer tell which row it
//! reads; the rule that an expression reads the row as it was (see
//! [`columns_read`]) depends on that.

use crate::ident::describe;

/// One token of an accepted expression.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Token<'a> {
    /// An identifier or keyword, possibly dotted: `attempts`, `CASE`,
    /// `payouts.attempts`.
    Word(&'a str),
    Number(&'a str),
    /// A string literal, quotes included.
    Text(&'a str),
    Op(&'a str),
    Open,
    Close,
    Comma,
    /// A value bound per call, `:name` (the name without the colon): only
    /// a guard that declares it may hold one.
    Param(&'a str),
}

/// Words that turn an expression into (part of) a statement: a subquery, a
/// second clause of the UPDATE, or a statement of its own.
const STATEMENT_KEYWORDS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "MERGE",
    "UNION",
    "INTERSECT",
    "EXCEPT",
    "WHERE",
    "RETURNING",
    "SET",
    "INTO",
    "VALUES",
    "TABLE",
    "LIMIT",
    "ORDER",
    "GROUP",
    "HAVING",
];

/// Two-character operators, tried before the one-character ones.
const OPERATORS_2: &[&str] = &["<>", "!=", "<=", ">=", "||"];
const OPERATORS_1: &[char] = &['+', '-', '*', '/', '%', '=', '<', '>'];

/// The tokens of `expr`, or why it is not an expression a `set` may hold.
/// The reason reads after "SQL expression "…" ".
pub fn tokenize(expr: &str) -> Result<Vec<Token<'_>>, String> {
    let mut tokens = Vec::new();
    let mut depth = 0_usize;
    let mut at = 0;
    while let Some(c) = expr[at..].chars().next() {
        let rest = &expr[at..];
        let (token, len) = match c {
            ' ' | '\t' | '\n' | '\r' => {
                at += 1;
                continue;
            }
            'a'..='z' | 'A'..='Z' | '_' => word(rest)?,
            '0'..='9' => number(rest)?,
            '.' if rest[1..].starts_with(|c: char| c.is_ascii_digit()) => number(rest)?,
            '\'' => text(rest)?,
            '(' => {
                depth += 1;
                (Token::Open, 1)
            }
            ')' => {
                if depth == 0 {
                    return Err("closes a parenthesis it did not open".to_owned());
                }
                depth -= 1;
                (Token::Close, 1)
            }
            ',' => (Token::Comma, 1),
            ':' if rest[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') => {
                let len = 1 + rest[1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len() - 1);
                (Token::Param(&rest[1..len]), len)
            }
            _ if rest.starts_with("--") => {
                return Err(
                    "contains a `--` comment, which would swallow the rest of the statement"
                        .to_owned(),
                );
            }
            _ if rest.starts_with("/*") => return Err("contains a `/*` comment".to_owned()),
            _ => match OPERATORS_2.iter().find(|op| rest.starts_with(**op)) {
                Some(op) => (Token::Op(op), 2),
                None if OPERATORS_1.contains(&c) => (Token::Op(&rest[..1]), 1),
                None => return Err(refused(c)),
            },
        };
        tokens.push(token);
        at += len;
    }
    if depth > 0 {
        return Err("opens a parenthesis it does not close".to_owned());
    }
    Ok(tokens)
}

/// The columns of the row that `tokens` read, as written (dotted names by
/// their last part). Function names (a word before `(`), type names (a word
/// after `AS`) and keywords are words too; a keyword is only reported if a
/// column has its name, which is what a caller compares against.
pub fn columns_read<'a>(tokens: &[Token<'a>]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let Token::Word(word) = *token else {
            continue;
        };
        let calls = matches!(tokens.get(i + 1), Some(Token::Open));
        let names_type = i > 0
            && matches!(tokens[i - 1], Token::Word(before) if before.eq_ignore_ascii_case("AS"));
        if !calls && !names_type {
            out.push(word.rsplit('.').next().unwrap_or(word));
        }
    }
    out
}

/// `attempts`, `payouts.attempts`, `CASE`: refused if it is a statement
/// keyword or runs into a quote.
fn word(rest: &str) -> Result<(Token<'_>, usize), String> {
    let part = |s: &str| {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    let mut len = part(rest);
    while rest[len..].starts_with('.') {
        let next = &rest[len + 1..];
        if !next.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return Err(format!(
                "contains `{}.` followed by something other than a column name",
                &rest[..len]
            ));
        }
        len += 1 + part(next);
    }
    let word = &rest[..len];
    if rest[len..].starts_with('\'') {
        return Err(format!(
            "contains `{word}'…'`, a prefixed string literal (such as E'…', X'…' or N'…'), which \
             each backend reads its own way; put a space between a word and a string"
        ));
    }
    if STATEMENT_KEYWORDS
        .iter()
        .any(|k| k.eq_ignore_ascii_case(word))
    {
        return Err(format!(
            "contains `{word}`: a `set` value is one expression of the row being updated, so \
             subqueries and statement keywords (SELECT, WHERE, UNION, …) are not allowed"
        ));
    }
    Ok((Token::Word(word), len))
}

/// `12`, `1.5`, `.5`, `1e-3`; refused if it runs into a letter, `_` or `.`
/// (`0x1F`, `1abc` is a name in MySQL, `1.2.3`).
fn number(rest: &str) -> Result<(Token<'_>, usize), String> {
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let mut len = digits(rest);
    if rest[len..].starts_with('.') {
        len += 1 + digits(&rest[len + 1..]);
    }
    if rest[len..].starts_with(['e', 'E']) {
        let sign = usize::from(rest[len + 1..].starts_with(['+', '-']));
        let exponent = digits(&rest[len + 1 + sign..]);
        if exponent > 0 {
            len += 1 + sign + exponent;
        }
    }
    if let Some(c) = rest[len..]
        .chars()
        .next()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
    {
        return Err(format!(
            "contains `{}{c}`: a number runs straight into {}",
            &rest[..len],
            describe(c)
        ));
    }
    Ok((Token::Number(&rest[..len]), len))
}

/// `'text'`, with `''` for a quote.
fn text(rest: &str) -> Result<(Token<'_>, usize), String> {
    let mut chars = rest.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if matches!(chars.peek(), Some((_, '\''))) => {
                chars.next();
            }
            '\'' => return Ok((Token::Text(&rest[..=i]), i + 1)),
            '\\' => {
                return Err(
                    "contains a backslash (\\) in a string literal; MySQL reads it as an escape, \
                     so the string could end elsewhere than it seems to"
                        .to_owned(),
                );
            }
            '$' => {
                return Err(
                    "contains `$` in a string literal; `$` is refused everywhere, since \
                     PostgreSQL reads `$$` as dollar quoting and `$1` as a placeholder"
                        .to_owned(),
                );
            }
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => {
                return Err(format!("contains {} in a string literal", describe(c)));
            }
            _ => {}
        }
    }
    Err("opens a single quote (') it does not close".to_owned())
}

/// Why a character that starts no token is refused.
fn refused(c: char) -> String {
    match c {
        '"' => "contains a double quote (\"): write column names bare and text in single \
                quotes; PostgreSQL and SQLite read a double quote as a quoted name, MySQL as a \
                string"
            .to_owned(),
        '`' => "contains a backtick (`): write column names bare; quoted names are not allowed"
            .to_owned(),
        '[' | ']' => format!("contains `{c}`: SQLite reads `[…]` as a quoted name"),
        '$' => "contains `$`: PostgreSQL reads `$1` as a placeholder and `$$…$$` as a quoted \
                string"
            .to_owned(),
        '?' => "contains `?`, a placeholder: values cannot be bound here".to_owned(),
        ':' => "contains a `:` that starts no `:name` parameter; `::` casts are PostgreSQL \
                only: write `CAST(x AS type)`"
            .to_owned(),
        ';' => "contains `;`: one expression, not a statement".to_owned(),
        '#' => "contains `#`, a comment in MySQL".to_owned(),
        '\\' => "contains a backslash (\\), an escape character in MySQL".to_owned(),
        '{' | '}' => format!("contains `{c}`: ODBC escapes (`{{fn …}}`) are not allowed"),
        '@' => "contains `@`: MySQL variables (`@x`, `@@x`) are not allowed".to_owned(),
        '.' => "contains a `.` that belongs to no number and no `table.column` name".to_owned(),
        c if c.is_control() => format!("contains {}", describe(c)),
        c if !c.is_ascii() => format!(
            "contains {} outside a string literal; names must be plain ASCII",
            describe(c)
        ),
        c => format!(
            "contains {}, which is not an operator a `set` expression may use \
             (+ - * / % = <> != < > <= >= ||)",
            describe(c)
        ),
    }
}

#[cfg(test)]
mod tests;
