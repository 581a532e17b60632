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
