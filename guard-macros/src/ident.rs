//! What a name and a state string may be. Both end up inside SQL text, so
//! they are checked here, at expansion time, before any is quoted.

use crate::dialect::MAX_IDENT;

/// Why `name` is not a plain SQL identifier, if it is not one.
pub fn check_ident(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("is empty".to_owned()),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            return Err(format!(
                "starts with {c:?}; it must start with a letter or `_`"
            ));
        }
        Some(_) => {}
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_')) {
        return Err(format!(
            "contains {}; only ASCII letters, digits and `_` are allowed",
            describe(c)
        ));
    }
    if name.len() > MAX_IDENT {
        return Err(format!(
            "is {} characters long; the limit is {MAX_IDENT}",
            name.len()
        ));
    }
    Ok(())
}

/// A table name may be qualified by one schema: `billing.payouts`.
pub fn check_table(name: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 {
        return Err("has more than one `.`; write `table` or `schema.table`".to_owned());
    }
    if let [schema, table] = parts[..] {
        check_ident(schema).map_err(|why| format!("has a schema part `{schema}` that {why}"))?;
        check_ident(table).map_err(|why| format!("has a table part `{table}` that {why}"))?;
        return Ok(());
    }
    check_ident(name)
}

/// Why `value` cannot be stored as a state string, if it cannot.
///
/// State strings become SQL string literals; excluding quotes, backslashes
/// (an escape character in MySQL) and control characters keeps every
/// literal exactly what it looks like on every backend.
pub fn check_state_str(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("is empty".to_owned());
    }
    if let Some(c) = value
        .chars()
        .find(|c| *c == '\'' || *c == '\\' || c.is_control())
    {
        return Err(format!(
            "contains {}; quotes, backslashes and control characters are not allowed",
            describe(c)
        ));
    }
    if value.len() > 255 {
        return Err(format!("is {} bytes long; the limit is 255", value.len()));
    }
    Ok(())
}

/// A character as a message names it.
pub fn describe(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '\'' => "a single quote (')".to_owned(),
        '"' => "a double quote (\")".to_owned(),
        '\\' => "a backslash (\\)".to_owned(),
        '`' => "a backtick (`)".to_owned(),
        c if c.is_control() => format!("the control character {}", c.escape_unicode()),
        c => format!("`{c}`"),
    }
}
