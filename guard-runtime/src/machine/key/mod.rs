//! Row keys of one column or several: how a key is bound, read back and
//! written into an effect key.
//!
//! A machine declares its key columns (`key = "id"`, or
//! `key = "tenant_id, id"`), and the derive sets
//! [`StateMachine::KeyShape`](crate::StateMachine::KeyShape) to the number
//! of them: [`shape::One`], [`shape::Two`], … A one-column machine takes any
//! bindable value as its key (`i64`, `&str`, a UUID); a machine keyed by
//! several columns takes a tuple with one value per column, in the order
//! declared: `apply(&pool, (tenant_id, id))`. A key of another arity does
//! not compile.

use core::fmt;

use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Key};
use crate::machine::StateMachine;

/// The number of key columns, as a type.
pub mod shape {
    /// A key of one column: `key = "id"`.
    #[derive(Debug, Clone, Copy)]
    pub enum One {}
    /// A key of two columns: `key = "tenant_id, id"`.
    #[derive(Debug, Clone, Copy)]
    pub enum Two {}
    /// A key of three columns.
    #[derive(Debug, Clone, Copy)]
    pub enum Three {}
    /// A key of four columns.
    #[derive(Debug, Clone, Copy)]
    pub enum Four {}
}

/// The number of key columns of a machine: one of the types in [`shape`].
pub trait KeyShape: sealed::Sealed + Send + Sync + 'static {
    /// How many columns.
    const COLUMNS: usize;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::shape::One {}
    impl Sealed for super::shape::Two {}
    impl Sealed for super::shape::Three {}
    impl Sealed for super::shape::Four {}
}

impl KeyShape for shape::One {
    const COLUMNS: usize = 1;
}
impl KeyShape for shape::Two {
    const COLUMNS: usize = 2;
}
impl KeyShape for shape::Three {
    const COLUMNS: usize = 3;
}
impl KeyShape for shape::Four {
    const COLUMNS: usize = 4;
}

/// The Rust type of a machine's keys: what every call that takes a key
/// takes (`apply`, `apply_many`, `load`, `available`, `history`), and
/// what `claim`, `claim_older_than`, `claim_timed_out`, `recover` and
/// `claim_expired` return in each win. A machine that declares it
/// (`#[state_machine(…, key_type = "i64")]`) implements this for that type
/// alone: a key of another type is a compile error that names both, and
/// an integer literal (`apply(&pool, 42)`) is of the declared type. One
/// that does not implements it for every type: each call takes the key
/// it is given, and a claim names its type (`claim::<_, i64>`, or a type
/// on the variable the wins go into).
#[diagnostic::on_unimplemented(
    message = "`{Self}` declares another key type than `{K}`",
    label = "not the machine's key type",
    note = "the machine declares `key_type = \"…\"`: pass a key of that type, or leave the call \
            to infer it"
)]
pub trait KeyType<K> {}

/// A key that the statements of a machine of shape `Shape` can bind on
/// `DB`: any [`Key`] value for one column, a tuple of them for several.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key for this machine on `{DB}`",
    label = "the row key",
    note = "a machine with `key = \"id\"` takes one value; with `key = \"tenant_id, id\"` it takes \
            a tuple with one value per key column, in the order declared; every value must \
            implement `sqlx::Encode` and `sqlx::Type` for the database, `Clone`, `Debug`, and \
            `Display` (the effect key and the message id of `emit(…)` hold its text)"
)]
pub trait RowKey<DB: Backend, Shape: KeyShape>:
    KeyText<Shape> + Clone + fmt::Debug + Send + Sync
{
    /// Adds the value of key column `n` to `args`, once.
    #[doc(hidden)]
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), sqlx::Error>;

    /// The SQL type each value binds as, column by column (`INTEGER`,
    /// `TEXT`, `BLOB`, …, as sqlx names it).
    #[doc(hidden)]
    fn part_types() -> Vec<String>;
}

/// A key that recovery can read back from its columns on `DB`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be read back as a key of this machine from `{DB}`",
    note = "recovery reads the keys of expired rows: every key value must implement \
            `sqlx::Decode` and `sqlx::Type` for the database, and be owned (`String`, not `&str`)"
)]
pub trait DecodeKey<DB: Backend, Shape: KeyShape>: Sized {
    /// The key in the columns of `row` from `first` on.
    #[doc(hidden)]
    fn decode(row: &<DB as sqlx::Database>::Row, first: usize) -> Result<Self, sqlx::Error>;
}

/// A key as it appears in an effect key: its `Display` text for one
/// column; for several, each value's text with `%` and `/` escaped
/// (`%25`, `%2F`), joined by `/`, so that no two keys read the same.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be written into an effect key",
    note = "every key value must implement `Display`"
)]
pub trait KeyText<Shape: KeyShape> {
    /// The key's text.
    #[doc(hidden)]
    fn key_text(&self) -> String;

    /// Writes value `i`'s `Display` text to `out`.
    #[doc(hidden)]
    fn write_part(&self, i: usize, out: &mut String);
}

/// Keys that [`apply_many`](crate::Transition::apply_many) can send to
/// `DB` in one value: one array per key column on PostgreSQL (so each value
/// must have a PostgreSQL array type), a JSON array on SQLite and MySQL.
///
/// JSON carries a value as its `Display` text, so on SQLite and MySQL a
/// key value must bind as text or as an integer, and its `Display` text
/// must be what it binds (`42`, `po_42`): an integer as a JSON number on
/// SQLite, as its text on MySQL (compared as bytes, like every key). A
/// value that binds as bytes (`uuid::Uuid` on both: use
/// `uuid::fmt::Hyphenated` and a text column), a float or a date cannot
/// travel in a batch; the call is then [`Misuse::BatchKey`](crate::Misuse::BatchKey)
/// before any statement runs.
#[diagnostic::on_unimplemented(
    message = "a slice of `{Self}` cannot be bound as the keys of `apply_many` on `{DB}`",
    note = "PostgreSQL binds one array per key column: each key value needs \
            `sqlx::postgres::PgHasArrayType`; SQLite and MySQL bind JSON: each value needs \
            `Display`"
)]
pub trait ManyKeys<DB: Backend, Shape: KeyShape>: Sized {
    /// Adds `keys` to `args` as the statement takes them.
    #[doc(hidden)]
    fn bind_many(keys: &[&Self], args: &mut <DB as Driver>::Args) -> Result<(), BindError>;

    /// Adds what placeholder [`Bind::Keys(n)`](crate::meta::Bind::Keys)
    /// takes to `args`: key column `n`'s values as an array on PostgreSQL,
    /// every key as one JSON document on SQLite and MySQL (`n` is 0).
    #[doc(hidden)]
    fn bind_column(
        keys: &[&Self],
        n: usize,
        args: &mut <DB as Driver>::Args,
    ) -> Result<(), BindError>;

    /// Adds what placeholder [`Bind::Keys(n)`](crate::meta::Bind::Keys)
    /// of a fenced batch (`finish_many`'s) takes: key column `n` as an
    /// array on PostgreSQL (the integers go apart, [`Self::bind_ints`]),
    /// and on SQLite and MySQL every row as one JSON document, `[[key…,
    /// int…], …]`, where `ints[j][i]` is integer `j` of row `i`.
    #[doc(hidden)]
    fn bind_rows(
        keys: &[&Self],
        ints: &[Vec<i64>],
        n: usize,
        args: &mut <DB as Driver>::Args,
    ) -> Result<(), BindError>;

    /// PostgreSQL: adds one integer of every row of a fenced batch as an
    /// array ([`Bind::Ints`](crate::meta::Bind::Ints)). The other
    /// backends carry them in [`Self::bind_rows`]' document.
    #[doc(hidden)]
    fn bind_ints(ints: &[i64], args: &mut <DB as Driver>::Args) -> Result<(), BindError>;

    /// Adds what placeholder
    /// [`Bind::EffectKeys`](crate::meta::Bind::EffectKeys) takes: the
    /// effect keys up to their occurrence, `prefixes[i]` row `i`'s, as a
    /// text array on PostgreSQL; on SQLite and MySQL every row as one
    /// JSON document, [`Self::bind_rows`]' with each row's effect key
    /// last, `[[key…, int…, prefix], …]`.
    #[doc(hidden)]
    fn bind_effect_keys(
        keys: &[&Self],
        ints: &[Vec<i64>],
        prefixes: &[String],
        args: &mut <DB as Driver>::Args,
    ) -> Result<(), BindError>;

    /// Whether every value binds as a type whose equality is exact by
    /// value (PostgreSQL's integers and UUIDs), so that the batch needs no
    /// text comparison to match exactly.
    #[doc(hidden)]
    fn by_value() -> bool {
        false
    }
}

/// A key of machine `S`'s rows on `DB`: the one bound every call that
/// takes or returns one row's key spells (`apply`, `load`, `available`,
/// `history`, `finish`, and with [`DecodeKey`] `recover` and
/// `claim_expired`). It holds for every [`RowKey`] of the machine's
/// [`KeyShape`] that the machine's [`KeyType`] accepts: of the declared
/// `key_type` alone when there is one, so that an integer literal
/// (`apply(&pool, 42)`) takes that type, and of any bindable type when there
/// is none. Implemented for every type that meets it; never by hand.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key of `{S}` on `{DB}`",
    label = "the row key",
    note = "a machine with `key = \"id\"` takes one value; with `key = \"tenant_id, id\"` it takes \
            a tuple with one value per key column, in the order declared; a machine that \
            declares `key_type = \"…\"` takes that type alone"
)]
pub trait KeyOf<S: StateMachine, DB: Backend>: RowKey<DB, S::KeyShape> {}

impl<K, S, DB> KeyOf<S, DB> for K
where
    S: StateMachine + KeyType<K>,
    DB: Backend,
    K: RowKey<DB, S::KeyShape>,
{
}

/// A key that [`claim`](crate::Transition::claim),
/// [`apply_many`](crate::Transition::apply_many), [`finish_many`](crate::finish_many)
/// and [`recover_many`](crate::recover_many) take or return for machine
/// `S` on `DB`: a [`KeyOf`] the machine that is also read back from a row
/// ([`DecodeKey`]), sent as a batch ([`ManyKeys`]), ordered (a batch locks
/// its rows in key order) and shared across tasks. One name for the bound
/// every batch entry point spells; implemented for every type that meets
/// it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a batch key of `{S}` on `{DB}`",
    note = "claims and batches bind, read back and order their keys: the key must be the \
            machine's key type, owned, and `DecodeKey + ManyKeys + Ord + Send + Sync` (`i64`, \
            `String`, a tuple of them for several key columns)"
)]
pub trait BatchKey<S: StateMachine, DB: Backend>:
    KeyOf<S, DB> + Batchable<DB, S::KeyShape>
{
}

impl<K, S, DB> BatchKey<S, DB> for K
where
    S: StateMachine + KeyType<K>,
    DB: Backend,
    K: Batchable<DB, S::KeyShape>,
{
}

/// Machine `S` on `DB`, whose claims and takeovers hand back wins keyed by
/// `K`: the one bound of the calls that return keys
/// ([`claim`](crate::Transition::claim), `claim_older_than`,
/// `claim_timed_out`, [`claim_expired`](crate::claim_expired)). It holds
/// when `K` is the machine's key type ([`KeyType`]) and a [`BatchKey`] of
/// it on `DB`. Where the machine declares `key_type`, it tells the call
/// `K`, so `let wins = PayoutStatus::start().claim(&pool, 10).await?`
/// needs no annotation. Implemented for every machine that meets it;
/// never by hand.
#[diagnostic::on_unimplemented(
    message = "`{Self}`'s rows cannot be claimed as keys of type `{K}` on `{DB}`",
    label = "claimed here",
    note = "claims bind, read back and order their keys: `{K}` must be the machine's key type, \
            owned, and `DecodeKey + ManyKeys + Ord + Send + Sync` (`i64`, `String`, a tuple of \
            them for several key columns); a machine without `key_type` needs the type named, \
            `claim::<_, i64>` or on the variable the wins go into"
)]
pub trait Claimable<K, DB: Backend>: StateMachine + KeyType<K> {
    /// Hands `visit` the bound on `K` this trait stands for.
    #[doc(hidden)]
    fn visit<V: ClaimVisit<Self, K, DB>>(visit: V) -> V::Output;
}

impl<S, K, DB> Claimable<K, DB> for S
where
    S: StateMachine + KeyType<K>,
    K: BatchKey<S, DB>,
    DB: Backend,
{
    fn visit<V: ClaimVisit<S, K, DB>>(visit: V) -> V::Output {
        visit.visit()
    }
}

/// A body that needs what [`Claimable`] stands for: `visit` runs with the
/// bound on `K` in scope.
#[doc(hidden)]
pub trait ClaimVisit<S: StateMachine, K, DB: Backend> {
    /// What the body returns.
    type Output;

    /// The body.
    fn visit(self) -> Self::Output
    where
        K: BatchKey<S, DB>;
}

/// What [`BatchKey`] asks of a key of shape `Shape`, whichever machine it
/// keys: the bound of the batch statements, which know a machine only by
/// its shape.
#[doc(hidden)]
pub trait Batchable<DB: Backend, Shape: KeyShape>:
    RowKey<DB, Shape> + DecodeKey<DB, Shape> + ManyKeys<DB, Shape> + Ord + Send + Sync + 'static
{
}

impl<DB, Shape, K> Batchable<DB, Shape> for K
where
    DB: Backend,
    Shape: KeyShape,
    K: RowKey<DB, Shape> + DecodeKey<DB, Shape> + ManyKeys<DB, Shape> + Ord + Send + Sync + 'static,
{
}

/// The key type a call returns its wins keyed by, and the lifetime of
/// what the call borrows, which its future keeps.
pub(crate) type KeyFor<'a, K> = (fn() -> K, &'a ());

/// Why a statement's values could not be bound.
#[doc(hidden)]
#[derive(Debug)]
pub enum BindError {
    /// A key value of a batch that the batch's JSON cannot carry as the
    /// statement binds it.
    Key {
        /// The value's text, or its SQL type.
        key: String,
        /// Why.
        reason: String,
    },
    /// sqlx could not encode the bound value.
    Encode(sqlx::Error),
}

impl BindError {
    /// The error as sqlx's, for a statement that binds no batch.
    pub(crate) fn into_sqlx(self) -> sqlx::Error {
        match self {
            BindError::Encode(error) => error,
            BindError::Key { key, reason } => {
                sqlx::Error::Protocol(format!("cannot bind key {key}: {reason}"))
            }
        }
    }
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
mod json;
mod parse;
pub use self::parse::ParseKey;
#[cfg(feature = "postgres")]
mod postgres;

/// A statement that names key column `n` of a key that has none.
fn no_column(n: usize) -> sqlx::Error {
    sqlx::Error::Protocol(format!(
        "the statement binds key column {n}, which the key lacks"
    ))
}

impl<DB: Backend, T: Key<DB> + Clone + fmt::Debug + fmt::Display> RowKey<DB, shape::One> for T {
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), sqlx::Error> {
        match n {
            0 => sqlx::Arguments::add(args, self).map_err(sqlx::Error::Encode),
            n => Err(no_column(n)),
        }
    }

    fn part_types() -> Vec<String> {
        vec![type_name::<DB, T>()]
    }
}

fn type_name<DB: Backend, T: sqlx::Type<DB> + ?Sized>() -> String {
    sqlx::TypeInfo::name(&T::type_info()).to_owned()
}

impl<DB: Backend, T> DecodeKey<DB, shape::One> for T
where
    T: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    fn decode(row: &<DB as sqlx::Database>::Row, first: usize) -> Result<Self, sqlx::Error> {
        DB::column(row, first)
    }
}

impl<T: fmt::Display + ?Sized> KeyText<shape::One> for T {
    fn key_text(&self) -> String {
        self.to_string()
    }

    fn write_part(&self, _: usize, out: &mut String) {
        use fmt::Write;
        let _ = write!(out, "{self}");
    }
}

/// One value of a composite key, escaped so that the `/` between values
/// stays unambiguous.
fn part(value: &dyn fmt::Display) -> String {
    value.to_string().replace('%', "%25").replace('/', "%2F")
}

macro_rules! tuple_keys {
    ($shape:ident: $($t:ident $i:tt),+) => {
        impl<DB: Backend, $($t: Key<DB> + Clone + fmt::Debug + fmt::Display),+> RowKey<DB, shape::$shape>
            for ($($t,)+)
        {
            fn bind_part(
                &self,
                n: usize,
                args: &mut <DB as Driver>::Args,
            ) -> Result<(), sqlx::Error> {
                match n {
                    $($i => sqlx::Arguments::add(args, &self.$i).map_err(sqlx::Error::Encode),)+
                    n => Err(no_column(n)),
                }
            }

            fn part_types() -> Vec<String> {
                vec![$(type_name::<DB, $t>()),+]
            }
        }

        impl<DB: Backend, $($t),+> DecodeKey<DB, shape::$shape> for ($($t,)+)
        where
            $($t: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,)+
        {
            fn decode(row: &<DB as sqlx::Database>::Row, first: usize) -> Result<Self, sqlx::Error> {
                Ok(($(DB::column::<$t>(row, first + $i)?,)+))
            }
        }

        impl<$($t: fmt::Display),+> KeyText<shape::$shape> for ($($t,)+) {
            fn key_text(&self) -> String {
                [$(part(&self.$i)),+].join("/")
            }

            fn write_part(&self, i: usize, out: &mut String) {
                use fmt::Write;
                let _ = match i {
                    $($i => write!(out, "{}", self.$i),)+
                    _ => Ok(()),
                };
            }
        }
    };
}

tuple_keys!(Two: A 0, B 1);
tuple_keys!(Three: A 0, B 1, C 2);
tuple_keys!(Four: A 0, B 1, C 2, D 3);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_key_texts_cannot_collide() {
        let a = KeyText::<shape::Two>::key_text(&("a/b", "c"));
        let b = KeyText::<shape::Two>::key_text(&("a", "b/c"));
        assert_eq!(a, "a%2Fb/c");
        assert_eq!(b, "a/b%2Fc");
        assert_ne!(a, b);
        assert_eq!(KeyText::<shape::Two>::key_text(&("50%", 7)), "50%25/7");
        assert_eq!(KeyText::<shape::One>::key_text(&42), "42");
    }
}
