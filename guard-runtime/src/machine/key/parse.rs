//! A key read back from its text: the inverse of [`KeyText`], so that a
//! key can travel in a URL (the console's) and come back as the
//! machine's key type.

use core::fmt;
use core::str::FromStr;

#[cfg(doc)]
use super::KeyText;
use super::{KeyShape, shape};

/// A key that its [`KeyText`] reads back as: for one column, the value's
/// [`FromStr`]; for several, the values between the `/`, each with `%2F`
/// and `%25` read as `/` and `%`. A text that is not such a key is an
/// error that says why; nothing is guessed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be read back from its key text",
    note = "every key value must implement `FromStr` with an error that implements `Display`"
)]
pub trait ParseKey<Shape: KeyShape>: Sized {
    /// The key whose text is `text`, or why `text` is none.
    fn parse_key(text: &str) -> Result<Self, String>;
}

impl<T> ParseKey<shape::One> for T
where
    T: FromStr,
    T::Err: fmt::Display,
{
    fn parse_key(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|e| format!("`{text}` is not a key: {e}"))
    }
}

/// One value of a composite key's text, its escapes read back.
fn unescape(part: &str) -> Result<String, String> {
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3);
        match escape {
            Some("%2F") => out.push('/'),
            Some("%25") => out.push('%'),
            _ => {
                return Err(format!("`{part}` has a `%` that is not `%2F` or `%25`"));
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Value `T` of a composite key's text.
fn value<T>(part: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    let text = unescape(part)?;
    text.parse()
        .map_err(|e| format!("`{text}` is not a key value: {e}"))
}

macro_rules! tuple_parse {
    ($shape:ident $n:literal: $($t:ident $v:ident),+) => {
        impl<$($t),+> ParseKey<shape::$shape> for ($($t,)+)
        where
            $($t: FromStr, $t::Err: fmt::Display,)+
        {
            fn parse_key(text: &str) -> Result<Self, String> {
                let parts: Vec<&str> = text.split('/').collect();
                let [$($v),+] = parts[..] else {
                    return Err(format!(
                        "`{text}` is not a key of {} values separated by `/`",
                        $n
                    ));
                };
                Ok(($(value($v)?,)+))
            }
        }
    };
}

tuple_parse!(Two 2: A a, B b);
tuple_parse!(Three 3: A a, B b, C c);
tuple_parse!(Four 4: A a, B b, C c, D d);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::key::KeyText;

    #[test]
    fn a_key_text_reads_back_as_its_key() {
        let key = ("a/b%".to_owned(), 7_i64);
        let text = KeyText::<shape::Two>::key_text(&key);
        assert_eq!(ParseKey::<shape::Two>::parse_key(&text), Ok(key));
        assert_eq!(ParseKey::<shape::One>::parse_key("42"), Ok(42_i64));
        let one: String = ParseKey::<shape::One>::parse_key("a/b").unwrap();
        assert_eq!(one, "a/b");
    }

    #[test]
    fn a_text_that_is_no_key_says_why() {
        let wrong = <i64 as ParseKey<shape::One>>::parse_key("4x").unwrap_err();
        assert!(wrong.contains("`4x` is not a key"), "{wrong}");
        let few = <(i64, i64) as ParseKey<shape::Two>>::parse_key("1").unwrap_err();
        assert!(few.contains("2 values"), "{few}");
        let many = <(i64, i64) as ParseKey<shape::Two>>::parse_key("1/2/3").unwrap_err();
        assert!(many.contains("2 values"), "{many}");
        let escape = <(String, i64) as ParseKey<shape::Two>>::parse_key("a%2/1").unwrap_err();
        assert!(escape.contains("`%2F` or `%25`"), "{escape}");
    }
}
