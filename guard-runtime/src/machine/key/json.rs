//! SQLite's and MySQL's batch keys: one JSON array of rows, each the key's
//! values (and a row's integers and effect key), which the statement
//! reads back with `json_each` or `JSON_TABLE`.

use core::fmt;

use super::{BindError, Driver, KeyShape, KeyText, ManyKeys, RowKey};

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// How a JSON batch carries one key column.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// As a JSON string of the value's text.
    Text,
    /// The value's text, which must be an integer: as a JSON number on
    /// SQLite, as a string on MySQL.
    Integer,
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// How a batch takes each key column in JSON, from the SQL type the value
/// binds as: integers and text. Other types (bytes, floats, dates,
/// booleans), whose `Display` text is not what they bind, are refused.
fn json_parts(types: Vec<String>, backend: &str) -> Result<Vec<Part>, BindError> {
    types
        .into_iter()
        .map(|name| {
            let number = matches!(
                name.as_str(),
                "INTEGER"
                    | "TINYINT"
                    | "SMALLINT"
                    | "MEDIUMINT"
                    | "INT"
                    | "BIGINT"
                    | "TINYINT UNSIGNED"
                    | "SMALLINT UNSIGNED"
                    | "MEDIUMINT UNSIGNED"
                    | "INT UNSIGNED"
                    | "BIGINT UNSIGNED"
            );
            let text = matches!(name.as_str(), "TEXT" | "VARCHAR" | "CHAR");
            match (number, text) {
                (true, _) => Ok(Part::Integer),
                (_, true) => Ok(Part::Text),
                _ => Err(BindError::Key {
                    reason: format!(
                        "a batch on {backend} sends keys as JSON, which carries text and \
                         integers; this key binds as {name}"
                    ),
                    key: name,
                }),
            }
        })
        .collect()
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// `keys` as a JSON array of their values, each as `parts` says, integers
/// as numbers where `numbers`: `["a","b"]` or `[1,2]` for one column,
/// `[["acme",1],…]` for several. SQLite compares a bound integer with a
/// stored one by value, so an integer goes as a number, as a one-row
/// statement binds it; MySQL compares every key as bytes of its text.
fn json_keys<Sh: KeyShape, K: KeyText<Sh>>(
    keys: &[&K],
    parts: &[Part],
    numbers: bool,
) -> Result<String, BindError> {
    let mut out = String::with_capacity(2 + keys.len() * 8);
    out.push('[');
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if Sh::COLUMNS > 1 {
            out.push('[');
        }
        json_key::<Sh, K>(&mut out, key, parts, numbers)?;
        if Sh::COLUMNS > 1 {
            out.push(']');
        }
    }
    out.push(']');
    Ok(out)
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// A fenced batch's rows as one JSON array, `[[key…, int…], …]`: each
/// key as [`json_keys`] writes it, then integer `j` of the row,
/// `ints[j][i]`, as a number; with `texts`, then row `i`'s text,
/// `texts[i]`, as a string.
fn json_rows<Sh: KeyShape, K: KeyText<Sh>>(
    keys: &[&K],
    ints: &[Vec<i64>],
    texts: Option<&[String]>,
    parts: &[Part],
    numbers: bool,
) -> Result<String, BindError> {
    use fmt::Write;
    let short = |what: &str, len: usize| {
        BindError::Encode(sqlx::Error::Protocol(format!(
            "a batch of {} rows with {len} {what} for one of them",
            keys.len(),
        )))
    };
    let mut out = String::with_capacity(2 + keys.len() * (10 + 22 * ints.len()));
    out.push('[');
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        json_key::<Sh, K>(&mut out, key, parts, numbers)?;
        for column in ints {
            let value = column
                .get(i)
                .ok_or_else(|| short("integers", column.len()))?;
            let _ = write!(out, ",{value}");
        }
        if let Some(texts) = texts {
            let text = texts.get(i).ok_or_else(|| short("texts", texts.len()))?;
            out.push(',');
            json_string(&mut out, text);
        }
        out.push(']');
    }
    out.push(']');
    Ok(out)
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// One key's values, comma-separated, each as `parts` says.
fn json_key<Sh: KeyShape, K: KeyText<Sh>>(
    out: &mut String,
    key: &K,
    parts: &[Part],
    numbers: bool,
) -> Result<(), BindError> {
    let mut text = String::new();
    for (j, kind) in parts.iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        text.clear();
        key.write_part(j, &mut text);
        match kind {
            Part::Text => json_string(out, &text),
            Part::Integer if numbers && is_integer(&text) => out.push_str(&text),
            Part::Integer if !numbers && (is_integer(&text) || is_unsigned(&text)) => {
                json_string(out, &text)
            }
            Part::Integer => {
                return Err(BindError::Key {
                    reason: "the value binds as an integer, but its `Display` text is not \
                             that integer"
                        .to_owned(),
                    key: text,
                });
            }
        }
    }
    Ok(())
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// `text` is an integer as JSON and SQLite write it: an optional `-`,
/// then digits without a leading zero, within SQLite's 64 bits.
fn is_integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text.parse::<i64>().is_ok()
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
/// `text` is a `BIGINT UNSIGNED` as MySQL writes it.
fn is_unsigned(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
        && text.parse::<u64>().is_ok()
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                use fmt::Write;
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

macro_rules! json_many_keys {
    ($feature:literal, $db:ty, $backend:literal, numbers = $numbers:literal) => {
        #[cfg(feature = $feature)]
        impl<Sh: KeyShape, K: KeyText<Sh> + RowKey<$db, Sh>> ManyKeys<$db, Sh> for K {
            fn bind_many(
                keys: &[&Self],
                args: &mut <$db as Driver>::Args,
            ) -> Result<(), BindError> {
                let parts = json_parts(K::part_types(), $backend)?;
                let json = json_keys::<Sh, K>(keys, &parts, $numbers)?;
                sqlx::Arguments::add(args, json)
                    .map_err(|e| BindError::Encode(sqlx::Error::Encode(e)))
            }

            fn bind_column(
                keys: &[&Self],
                _: usize,
                args: &mut <$db as Driver>::Args,
            ) -> Result<(), BindError> {
                Self::bind_many(keys, args)
            }

            fn bind_rows(
                keys: &[&Self],
                ints: &[Vec<i64>],
                _: usize,
                args: &mut <$db as Driver>::Args,
            ) -> Result<(), BindError> {
                let parts = json_parts(K::part_types(), $backend)?;
                let json = json_rows::<Sh, K>(keys, ints, None, &parts, $numbers)?;
                sqlx::Arguments::add(args, json)
                    .map_err(|e| BindError::Encode(sqlx::Error::Encode(e)))
            }

            fn bind_ints(_: &[i64], _: &mut <$db as Driver>::Args) -> Result<(), BindError> {
                Err(BindError::Encode(sqlx::Error::Protocol(
                    concat!($backend, " carries a batch's integers in its rows' JSON").to_owned(),
                )))
            }

            fn bind_effect_keys(
                keys: &[&Self],
                ints: &[Vec<i64>],
                prefixes: &[String],
                args: &mut <$db as Driver>::Args,
            ) -> Result<(), BindError> {
                let parts = json_parts(K::part_types(), $backend)?;
                let json = json_rows::<Sh, K>(keys, ints, Some(prefixes), &parts, $numbers)?;
                sqlx::Arguments::add(args, json)
                    .map_err(|e| BindError::Encode(sqlx::Error::Encode(e)))
            }
        }
    };
}

json_many_keys!("sqlite", sqlx::Sqlite, "SQLite", numbers = true);
json_many_keys!("mysql", sqlx::MySql, "MySQL", numbers = false);
