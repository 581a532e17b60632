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
mod tests {
    use super::Token::{Close, Comma, Number, Op, Open, Text, Word};
    use super::*;

    #[track_caller]
    fn ok(expr: &str) -> Vec<Token<'_>> {
        let tokens = tokenize(expr);
        assert!(tokens.is_ok(), "{expr:?} was refused: {tokens:?}");
        tokens.unwrap_or_default()
    }

    /// Asserts that `expr` is refused with a reason that mentions `needle`.
    #[track_caller]
    fn refused(expr: &str, needle: &str) {
        let result = tokenize(expr);
        assert!(result.is_err(), "{expr:?} was accepted as {result:?}");
        if let Err(why) = result {
            assert!(why.contains(needle), "{expr:?}: {why:?} lacks {needle:?}");
        }
    }

    #[test]
    fn accepts_what_set_expressions_are_made_of() {
        assert_eq!(ok("CURRENT_TIMESTAMP"), [Word("CURRENT_TIMESTAMP")]);
        assert_eq!(ok("attempts + 1"), [Word("attempts"), Op("+"), Number("1")]);
        assert_eq!(
            ok("COALESCE(x, 0) + 1"),
            [
                Word("COALESCE"),
                Open,
                Word("x"),
                Comma,
                Number("0"),
                Close,
                Op("+"),
                Number("1")
            ]
        );
        assert_eq!(ok("'text'"), [Text("'text'")]);
        assert_eq!(ok("'it''s'"), [Text("'it''s'")]);
        assert_eq!(ok("''"), [Text("''")]);
        assert_eq!(
            ok("CAST(x AS INTEGER)"),
            [
                Word("CAST"),
                Open,
                Word("x"),
                Word("AS"),
                Word("INTEGER"),
                Close
            ]
        );
        assert_eq!(
            ok("CASE WHEN a > 1 THEN 'x' ELSE 'y' END").len(),
            10,
            "CASE … END"
        );
        assert_eq!(
            ok("payouts.attempts*2"),
            [Word("payouts.attempts"), Op("*"), Number("2")]
        );
        assert_eq!(ok("NOW()"), [Word("NOW"), Open, Close]);
        assert_eq!(
            ok("log || '|begin|'"),
            [Word("log"), Op("||"), Text("'|begin|'")]
        );
    }

    #[test]
    fn accepts_numbers() {
        for n in ["0", "42", "1.5", ".5", "1.", "1e3", "2.5E-3", "7e+2"] {
            assert_eq!(ok(n), [Number(n)], "{n}");
        }
        assert_eq!(ok("1 - -1"), [Number("1"), Op("-"), Op("-"), Number("1")]);
    }

    #[test]
    fn accepts_every_listed_operator() {
        for op in [
            "+", "-", "*", "/", "%", "=", "<>", "!=", "<", ">", "<=", ">=", "||",
        ] {
            assert_eq!(
                ok(&format!("a {op} b")),
                [Word("a"), Op(op), Word("b")],
                "{op}"
            );
        }
    }

    #[test]
    fn accepts_whitespace_and_text_of_any_script() {
        let text = "'café ☕ `x` \"q\" ; -- /* # ? [ ] :: @ {} \t'";
        assert_eq!(
            ok(&format!("a\n\t|| {text}")),
            [Word("a"), Op("||"), Text(text)]
        );
        assert_eq!(ok("'line\nbreak'"), [Text("'line\nbreak'")]);
    }

    #[test]
    fn refuses_quoted_names() {
        refused("\"status\"", "double quote");
        refused("`status`", "backtick");
        refused("[status]", "`[`");
        refused("status]", "`]`");
    }

    #[test]
    fn refuses_placeholders_and_dollar_quotes() {
        refused("$1", "`$`");
        refused("$$x$$", "`$`");
        refused("a$b", "`$`");
        refused("'$$'", "`$` in a string literal");
        refused("?", "placeholder");
        refused("?1", "placeholder");
        refused("x::text", "`::` casts");
        refused(": name", "starts no `:name` parameter");
        assert_eq!(
            tokenize("a < :limit"),
            Ok(vec![
                Token::Word("a"),
                Token::Op("<"),
                Token::Param("limit")
            ])
        );
        refused("@x", "`@`");
        refused("@@version", "`@`");
    }

    #[test]
    fn refuses_comments_and_terminators() {
        refused("1 -- note", "`--` comment");
        refused("1--1", "`--` comment");
        refused("1 /* note */", "`/*` comment");
        refused("1 # note", "`#`");
        refused("1; DROP TABLE t", "`;`");
        refused("{fn NOW()}", "`{`");
        refused("}", "`}`");
    }

    #[test]
    fn refuses_backslashes_and_control_characters() {
        refused("'a\\'", "backslash");
        refused("\\N", "backslash");
        refused("a\u{0}b", "control character");
        refused("'a\u{7}'", "control character");
        refused("a\u{b}", "control character");
    }

    #[test]
    fn refuses_non_ascii_outside_text() {
        refused("café", "`é` outside a string literal");
        refused("a \u{2212} 1", "outside a string literal");
        refused("\u{ff07}x\u{ff07}", "outside a string literal");
    }

    #[test]
    fn refuses_unbalanced_quotes_and_parentheses() {
        refused("'open", "does not close");
        refused("'it''s", "does not close");
        refused("(1 + 2", "does not close");
        refused("1) + (2", "did not open");
        refused(")", "did not open");
    }

    #[test]
    fn refuses_other_operators_and_stray_dots() {
        for c in ["&", "|", "^", "~", "!", "<=>"] {
            let expr = format!("a {c} b");
            if c == "<=>" {
                // Read as `<=` then `>`: two allowed tokens, harmless.
                ok(&expr);
            } else {
                refused(&expr, "not an operator");
            }
        }
        refused("t.*", "`t.` followed by");
        refused("t.\"x\"", "`t.` followed by");
        refused("a . b", "`.`");
    }

    #[test]
    fn refuses_numbers_that_run_into_words() {
        refused("0x1F", "runs straight into");
        refused("1abc", "runs straight into");
        refused("1.2.3", "runs straight into");
        refused("1_000", "runs straight into");
    }

    #[test]
    fn refuses_prefixed_strings() {
        refused("E'x'", "prefixed string literal");
        refused("x'41'", "prefixed string literal");
        refused("_utf8mb4'x'", "prefixed string literal");
        assert_eq!(ok("a 'x'"), [Word("a"), Text("'x'")]);
    }

    #[test]
    fn refuses_statement_keywords_even_in_parentheses() {
        for k in STATEMENT_KEYWORDS {
            refused(&format!("(1 {k} 1)"), &format!("`{k}`"));
            let lower = k.to_lowercase();
            refused(&format!("(1 {lower} 1)"), &format!("`{lower}`"));
        }
        refused("(SELECT max(id) FROM t)", "subqueries");
        // Words that only contain a keyword are names.
        assert_eq!(ok("settled_at"), [Word("settled_at")]);
        assert_eq!(ok("t.selected"), [Word("t.selected")]);
        // FROM and FOR belong to EXTRACT, SUBSTRING and TRIM.
        ok("EXTRACT(YEAR FROM CURRENT_TIMESTAMP)");
        ok("SUBSTRING(note FROM 1 FOR 3)");
        ok("CAST(x AS TIMESTAMP WITH TIME ZONE)");
    }

    #[test]
    fn refuses_the_payloads_of_issue_8() {
        refused("$$'$$) WHERE $1 IS NOT NULL OR true --'", "`$`");
        refused("CAST(1 AS [']) ) WHERE 1 --')", "`[`");
    }

    #[test]
    fn columns_read_skips_functions_and_type_names() {
        let tokens = ok("COALESCE(t.a, b) + CAST(c AS status) + LENGTH (d) + 'e'");
        // `AS` is a word like any other; no column is called that.
        assert_eq!(columns_read(&tokens), ["a", "b", "c", "AS", "d"]);
        let tokens = ok("CASE WHEN status > 1 THEN 'x' END");
        assert!(columns_read(&tokens).contains(&"status"));
    }
}
