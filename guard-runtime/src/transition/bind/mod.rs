//! Binding a statement's values through its bind plan.
//!
//! **Architecture Invariant:** [`arguments`] is the only code that puts
//! values into a statement's arguments. It walks the plan the derive
//! emitted beside the text ([`Statement::binds`]); no other code knows in
//! which order a dialect takes a statement's values.

use core::marker::PhantomData;

use crate::dialect::Key;
use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Bind, Statement};
use crate::machine::key::{BindError, KeyShape, KeyText, ManyKeys, RowKey};
use crate::transition::note::Note;

mod store;

pub use self::store::Field;
pub(crate) use self::store::{Fields, store_arguments};

/// A row's effect key up to its occurrence, from its key's text: the
/// transition's `effect_key_prefix` (`outcome.rs`) with its target, which
/// is fixed per transition. What a batch binds beside its keys for the
/// messages of `emit(…)`.
pub(crate) type Prefix = dyn Fn(&str) -> String + Sync;

/// Values a statement takes by position: a key's columns, a call's values,
/// a batch's key columns. Public only in name, for the hidden methods of
/// the sealed `Batched` that take a call's values erased; unreachable
/// outside the crate.
pub trait Parts<DB: Backend> {
    /// Adds value `n` to `args`.
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError>;
}

/// A row key's columns, [`Bind::Key`].
pub(crate) struct KeyParts<'a, Sh, K>(&'a K, PhantomData<Sh>);

/// A row key's columns.
pub(crate) fn key<Sh, K>(key: &K) -> KeyParts<'_, Sh, K> {
    KeyParts(key, PhantomData)
}

impl<DB: Backend, Sh: KeyShape, K: RowKey<DB, Sh>> Parts<DB> for KeyParts<'_, Sh, K> {
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        self.0.bind_part(n, args).map_err(BindError::Encode)
    }
}

/// A call's values, [`Bind::Value`].
pub(crate) struct ValueParts<'a, P>(&'a P);

/// A call's values.
pub(crate) fn values<P>(values: &P) -> ValueParts<'_, P> {
    ValueParts(values)
}

impl<DB: Binds<P>, P: Sync> Parts<DB> for ValueParts<'_, P> {
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        DB::bind_range(self.0, args, n..n + 1).map_err(BindError::Encode)
    }
}

/// A batch's keys, [`Bind::Keys`].
pub(crate) struct BatchParts<'a, Sh, K>(&'a [&'a K], PhantomData<Sh>);

/// A batch's keys.
pub(crate) fn batch<'a, Sh, K>(keys: &'a [&'a K]) -> BatchParts<'a, Sh, K> {
    BatchParts(keys, PhantomData)
}

impl<DB: Backend, Sh: KeyShape, K: ManyKeys<DB, Sh>> Parts<DB> for BatchParts<'_, Sh, K> {
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        K::bind_column(self.0, n, args)
    }
}

/// A fenced batch's rows (`finish_many`'s): the keys, and integer `j` of
/// row `i` at `ints[j][i]`, [`Bind::Keys`] and [`Bind::Ints`].
pub(crate) struct RowsParts<'a, Sh, K> {
    keys: &'a [&'a K],
    ints: &'a [Vec<i64>],
    shape: PhantomData<Sh>,
}

/// A fenced batch's rows.
pub(crate) fn rows<'a, Sh, K>(keys: &'a [&'a K], ints: &'a [Vec<i64>]) -> RowsParts<'a, Sh, K> {
    RowsParts {
        keys,
        ints,
        shape: PhantomData,
    }
}

/// The keys of a fenced batch, [`Bind::Keys`].
pub(crate) struct RowKeys<'a, Sh, K>(&'a RowsParts<'a, Sh, K>);

/// The integers of a fenced batch, [`Bind::Ints`].
pub(crate) struct RowInts<'a, Sh, K>(&'a RowsParts<'a, Sh, K>);

impl<'a, Sh, K> RowsParts<'a, Sh, K> {
    pub(crate) fn keys(&'a self) -> RowKeys<'a, Sh, K> {
        RowKeys(self)
    }

    pub(crate) fn ints(&'a self) -> RowInts<'a, Sh, K> {
        RowInts(self)
    }
}

impl<DB: Backend, Sh: KeyShape, K: ManyKeys<DB, Sh>> Parts<DB> for RowKeys<'_, Sh, K> {
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        K::bind_rows(self.0.keys, self.0.ints, n, args)
    }
}

impl<DB: Backend, Sh: KeyShape, K: ManyKeys<DB, Sh>> Parts<DB> for RowInts<'_, Sh, K> {
    fn bind_part(&self, n: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        match self.0.ints.get(n) {
            Some(column) => K::bind_ints(column, args),
            None => Err(BindError::Encode(sqlx::Error::Protocol(format!(
                "the statement binds the batch's integer {n}, which its rows lack"
            )))),
        }
    }
}

/// A batch's effect keys up to their occurrence, [`Bind::EffectKeys`]:
/// computed from each key's text when a statement binds them (one that
/// writes the batch's messages), beside the keys and, in a fenced batch's
/// JSON document, their integers.
pub(crate) struct EffectKeys<'a, Sh, K> {
    keys: &'a [&'a K],
    ints: &'a [Vec<i64>],
    prefix: &'a Prefix,
    shape: PhantomData<Sh>,
}

/// The effect keys of a batch whose rows carry `ints` (none for
/// `apply_many`'s).
pub(crate) fn effect_keys<'a, Sh, K>(
    keys: &'a [&'a K],
    ints: &'a [Vec<i64>],
    prefix: &'a Prefix,
) -> EffectKeys<'a, Sh, K> {
    EffectKeys {
        keys,
        ints,
        prefix,
        shape: PhantomData,
    }
}

impl<DB, Sh, K> Parts<DB> for EffectKeys<'_, Sh, K>
where
    DB: Backend,
    Sh: KeyShape,
    K: ManyKeys<DB, Sh> + KeyText<Sh>,
{
    fn bind_part(&self, _: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        let prefixes: Vec<String> = (self.keys.iter())
            .map(|key| (self.prefix)(&key.key_text()))
            .collect();
        K::bind_effect_keys(self.keys, self.ints, &prefixes, args)
    }
}

/// A batch spelled out row by row, [`Bind::Row`]: one run of a fenced
/// batch (`finish_many`'s follow-ups that bind values per row).
pub(crate) trait Cells<DB: Backend> {
    /// Adds cell `part` of row `row` to `args`.
    fn bind_cell(
        &self,
        row: usize,
        part: usize,
        args: &mut <DB as Driver>::Args,
    ) -> Result<(), BindError>;

    /// Adds row `row`'s effect key up to its occurrence to `args`
    /// ([`Bind::RowEffectKey`]).
    fn bind_effect(&self, row: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError>;
}

/// The rows of a fenced batch with each row's values: key `i`, integer
/// `j` of it at `ints[j][i]` (the occurrence, the lease token), its
/// values, and its effect key up to its occurrence, from `prefix`.
pub(crate) struct CellParts<'a, Sh, K, DB: Backend> {
    keys: &'a [&'a K],
    ints: &'a [Vec<i64>],
    values: &'a [&'a (dyn Parts<DB> + Sync)],
    prefix: &'a Prefix,
    shape: PhantomData<Sh>,
}

/// A fenced batch's rows with their values and effect keys.
pub(crate) fn cells<'a, Sh, K, DB: Backend>(
    keys: &'a [&'a K],
    ints: &'a [Vec<i64>],
    values: &'a [&'a (dyn Parts<DB> + Sync)],
    prefix: &'a Prefix,
) -> CellParts<'a, Sh, K, DB> {
    CellParts {
        keys,
        ints,
        values,
        prefix,
        shape: PhantomData,
    }
}

impl<Sh, K, DB: Backend> CellParts<'_, Sh, K, DB> {
    /// The batch's row that row `row` of a statement binds: a row past
    /// the batch's end (the statement takes a fixed number) repeats the
    /// last one; and whether it is such a padding row.
    fn row(&self, row: usize) -> Result<(usize, bool), BindError> {
        match self.keys.len().checked_sub(1) {
            Some(last) => Ok((row.min(last), row > last)),
            None => Err(BindError::Encode(sqlx::Error::Protocol(
                "a batch of no rows".to_owned(),
            ))),
        }
    }
}

impl<DB, Sh, K> Cells<DB> for CellParts<'_, Sh, K, DB>
where
    DB: Backend,
    Sh: KeyShape,
    K: RowKey<DB, Sh>,
{
    /// Row `row`'s key columns, occurrence, token and values, in that
    /// order. A row past the batch's end (the statement takes a fixed
    /// number) repeats the last one with a NULL token, which no row's
    /// lease equals: it moves nothing, and writes no history row.
    fn bind_cell(
        &self,
        row: usize,
        part: usize,
        args: &mut <DB as Driver>::Args,
    ) -> Result<(), BindError> {
        let (i, padding) = self.row(row)?;
        let int = |j: usize| {
            (self.ints.get(j).and_then(|column| column.get(i)).copied()).ok_or_else(|| {
                BindError::Encode(sqlx::Error::Protocol(format!(
                    "the statement binds integer {j} of row {row}, which the batch lacks"
                )))
            })
        };
        let columns = Sh::COLUMNS;
        match part {
            part if part < columns => self.keys[i]
                .bind_part(part, args)
                .map_err(BindError::Encode),
            part if part == columns => DB::bind_int(args, int(0)?).map_err(BindError::Encode),
            part if part == columns + 1 => {
                let token = int(1)?;
                DB::bind_int_opt(args, (!padding).then_some(token)).map_err(BindError::Encode)
            }
            part => match self.values.get(i) {
                Some(values) => values.bind_part(part - columns - 2, args),
                None => Err(BindError::Encode(sqlx::Error::Protocol(format!(
                    "the statement binds the values of row {row}, which the batch lacks"
                )))),
            },
        }
    }

    /// Row `row`'s effect key (a padding row's, the last row's: it
    /// matches nothing, and writes no message).
    fn bind_effect(&self, row: usize, args: &mut <DB as Driver>::Args) -> Result<(), BindError> {
        let (i, _) = self.row(row)?;
        let prefix = (self.prefix)(&self.keys[i].key_text());
        DB::bind_text(args, Some(prefix)).map_err(BindError::Encode)
    }
}

/// Everything one call may bind into its statements; each statement takes
/// what its plan names. A plan that names a value the call did not supply
/// is an error, never a NULL.
pub(crate) struct Values<'a, DB: Backend> {
    pub(crate) key: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) keys: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) cells: Option<&'a (dyn Cells<DB> + Sync)>,
    pub(crate) ints: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) values: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) note: Option<&'a Note>,
    pub(crate) age: Option<i64>,
    pub(crate) delay: Option<i64>,
    pub(crate) expected: Option<i64>,
    pub(crate) token: Option<i64>,
    pub(crate) limit: Option<i64>,
    /// The state a read is of, as stored.
    pub(crate) state: Option<&'static str>,
    /// The row's effect key up to its occurrence, computed only for a
    /// statement that binds it (one that writes an outbox row).
    pub(crate) effect: Option<&'a (dyn Fn() -> String + Sync)>,
    /// A batch's effect keys up to their occurrence, likewise
    /// ([`effect_keys`]).
    pub(crate) effects: Option<&'a (dyn Parts<DB> + Sync)>,
}

impl<DB: Backend> Values<'_, DB> {
    /// Nothing: the start of `Values { key: Some(&key), ..Values::NONE }`.
    pub(crate) const NONE: Self = Values {
        key: None,
        keys: None,
        cells: None,
        ints: None,
        values: None,
        note: None,
        age: None,
        delay: None,
        expected: None,
        token: None,
        limit: None,
        state: None,
        effect: None,
        effects: None,
    };
}

/// The arguments of `statement`, in the order of its plan.
pub(crate) fn arguments<DB: Backend>(
    statement: Statement,
    values: &Values<'_, DB>,
) -> Result<<DB as Driver>::Args, BindError> {
    let mut args = <DB as Driver>::Args::default();
    for &bind in statement.binds() {
        let part = |parts: Option<&(dyn Parts<DB> + Sync)>, n: u8, args: &mut _| match parts {
            Some(parts) => parts.bind_part(usize::from(n), args),
            None => Err(missing(bind)),
        };
        let int = |value: Option<i64>, args: &mut _| match value {
            Some(value) => DB::bind_int(args, value).map_err(BindError::Encode),
            None => Err(missing(bind)),
        };
        let note = |text: fn(&Note) -> Option<&str>, args: &mut _| match values.note {
            Some(note) => {
                DB::bind_text(args, text(note).map(str::to_owned)).map_err(BindError::Encode)
            }
            None => Err(missing(bind)),
        };
        match bind {
            Bind::Row(row, n) => match values.cells {
                Some(cells) => cells.bind_cell(usize::from(row), usize::from(n), &mut args)?,
                None => return Err(missing(bind)),
            },
            Bind::Keys(n) => part(values.keys, n, &mut args)?,
            Bind::Ints(n) => part(values.ints, n, &mut args)?,
            Bind::Key(n) => part(values.key, n, &mut args)?,
            Bind::Value(n) => part(values.values, n, &mut args)?,
            Bind::Age => int(values.age, &mut args)?,
            Bind::Delay => int(values.delay, &mut args)?,
            Bind::Expected => int(values.expected, &mut args)?,
            Bind::Token => int(values.token, &mut args)?,
            Bind::Limit => int(values.limit, &mut args)?,
            Bind::State => match values.state {
                Some(state) => {
                    DB::bind_text(&mut args, Some(state.to_owned())).map_err(BindError::Encode)?
                }
                None => return Err(missing(bind)),
            },
            Bind::Actor => note(Note::actor, &mut args)?,
            Bind::Reason => note(Note::reason, &mut args)?,
            Bind::Details => note(Note::detail_json, &mut args)?,
            Bind::EffectKey => match values.effect {
                Some(effect) => {
                    DB::bind_text(&mut args, Some(effect())).map_err(BindError::Encode)?
                }
                None => return Err(missing(bind)),
            },
            Bind::EffectKeys => part(values.effects, 0, &mut args)?,
            Bind::RowEffectKey(row) => match values.cells {
                Some(cells) => cells.bind_effect(usize::from(row), &mut args)?,
                None => return Err(missing(bind)),
            },
            Bind::Tag => bind_tag::<DB, _>(statement, &mut args).map_err(BindError::Encode)?,
        }
    }
    Ok(args)
}

/// Binds `statement`'s own tag ([`Bind::Tag`], [`Field::Tag`]).
fn bind_tag<DB: Backend, B>(
    statement: Statement<B>,
    args: &mut <DB as Driver>::Args,
) -> Result<(), sqlx::Error> {
    match statement.tag() {
        Some(tag) => DB::bind_text(args, Some(tag.to_owned())),
        None => Err(sqlx::Error::Protocol(format!(
            "the statement binds its tag, but has none: {}",
            statement.text()
        ))),
    }
}

/// A plan that names a value the call does not supply: a statement of
/// another shape than the call expects.
fn missing(bind: Bind) -> BindError {
    BindError::Encode(sqlx::Error::Protocol(format!(
        "the statement binds {bind:?}, which this call does not supply"
    )))
}

/// A database that binds a transition's values `P` into its
/// `set(column = bind(Type))` assignments: `()` for none, or a tuple of them
/// in declaration order, each a [`Key`] of the database. Implemented for
/// every tuple of up to six such values; never by hand.
#[diagnostic::on_unimplemented(
    message = "`{P}` cannot be bound into a transition's statement on `{Self}`",
    label = "the values of this transition's `bind(Type)` items",
    note = "every `bind(Type)` type must implement `sqlx::Encode` and `sqlx::Type` for the \
            database (at most six values per transition)"
)]
pub trait Binds<P>: Backend {
    /// Adds the values at positions `range` of `values` to `args`, in
    /// order.
    #[doc(hidden)]
    fn bind_range(
        values: &P,
        args: &mut <Self as Driver>::Args,
        range: core::ops::Range<usize>,
    ) -> Result<(), sqlx::Error>;
}

impl<DB: Backend> Binds<()> for DB {
    fn bind_range(
        _: &(),
        _: &mut <DB as Driver>::Args,
        _: core::ops::Range<usize>,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }
}

macro_rules! binds_tuple {
    ($($t:ident),+) => {
        impl<DB: Backend, $($t: Key<DB>),+> Binds<($($t,)+)> for DB {
            #[allow(non_snake_case)]
            fn bind_range(
                values: &($($t,)+),
                args: &mut <DB as Driver>::Args,
                range: core::ops::Range<usize>,
            ) -> Result<(), sqlx::Error> {
                let ($($t,)+) = values;
                let mut i = 0;
                $(
                    if range.contains(&i) {
                        sqlx::Arguments::add(args, $t).map_err(sqlx::Error::Encode)?;
                    }
                    i += 1;
                )+
                let _ = i;
                Ok(())
            }
        }
    };
}

binds_tuple!(A);
binds_tuple!(A, B);
binds_tuple!(A, B, C);
binds_tuple!(A, B, C, D);
binds_tuple!(A, B, C, D, E);
binds_tuple!(A, B, C, D, E, F);
