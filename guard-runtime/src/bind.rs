//! Binding a statement's values through its bind plan.
//!
//! **Architecture Invariant:** [`arguments`] is the only code that puts
//! values into a statement's arguments. It walks the plan the derive
//! emitted beside the text ([`Statement::binds`]); no other code knows in
//! which order a dialect takes a statement's values.

use core::marker::PhantomData;

use crate::dialect::Key;
use crate::dialect::sealed::Dialect;
use crate::dialect::{Backend, Bind, Statement};
use crate::key::{BindError, KeyShape, ManyKeys, RowKey};
use crate::note::Note;

/// Values a statement takes by position: a key's columns, a call's values,
/// a batch's key columns.
pub(crate) trait Parts<DB: Backend> {
    /// Adds value `n` to `args`.
    fn bind_part(&self, n: usize, args: &mut <DB as Dialect>::Args) -> Result<(), BindError>;
}

/// A row key's columns, [`Bind::Key`].
pub(crate) struct KeyParts<'a, Sh, K>(&'a K, PhantomData<Sh>);

/// A row key's columns.
pub(crate) fn key<Sh, K>(key: &K) -> KeyParts<'_, Sh, K> {
    KeyParts(key, PhantomData)
}

impl<DB: Backend, Sh: KeyShape, K: RowKey<DB, Sh>> Parts<DB> for KeyParts<'_, Sh, K> {
    fn bind_part(&self, n: usize, args: &mut <DB as Dialect>::Args) -> Result<(), BindError> {
        self.0.bind_part(n, args).map_err(BindError::Encode)
    }
}

/// A call's values, [`Bind::Value`].
pub(crate) struct ValueParts<'a, P>(&'a P);

/// A call's values.
pub(crate) fn values<P>(values: &P) -> ValueParts<'_, P> {
    ValueParts(values)
}

impl<DB: Backend, P: Params<DB>> Parts<DB> for ValueParts<'_, P> {
    fn bind_part(&self, n: usize, args: &mut <DB as Dialect>::Args) -> Result<(), BindError> {
        self.0.bind_range(args, n..n + 1).map_err(BindError::Encode)
    }
}

/// A batch's keys, [`Bind::Keys`].
pub(crate) struct BatchParts<'a, Sh, K>(&'a [&'a K], PhantomData<Sh>);

/// A batch's keys.
pub(crate) fn batch<'a, Sh, K>(keys: &'a [&'a K]) -> BatchParts<'a, Sh, K> {
    BatchParts(keys, PhantomData)
}

impl<DB: Backend, Sh: KeyShape, K: ManyKeys<DB, Sh>> Parts<DB> for BatchParts<'_, Sh, K> {
    fn bind_part(&self, n: usize, args: &mut <DB as Dialect>::Args) -> Result<(), BindError> {
        K::bind_column(self.0, n, args)
    }
}

/// Everything one call may bind into its statements; each statement takes
/// what its plan names. A plan that names a value the call did not supply
/// is an error, never a NULL.
pub(crate) struct Values<'a, DB: Backend> {
    pub(crate) key: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) keys: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) values: Option<&'a (dyn Parts<DB> + Sync)>,
    pub(crate) note: Option<&'a Note>,
    pub(crate) age: Option<i64>,
    pub(crate) expected: Option<i64>,
    pub(crate) token: Option<i64>,
    pub(crate) limit: Option<i64>,
}

impl<DB: Backend> Values<'_, DB> {
    /// Nothing: the start of `Values { key: Some(&key), ..Values::NONE }`.
    pub(crate) const NONE: Self = Values {
        key: None,
        keys: None,
        values: None,
        note: None,
        age: None,
        expected: None,
        token: None,
        limit: None,
    };
}

/// The arguments of `statement`, in the order of its plan.
pub(crate) fn arguments<DB: Backend>(
    statement: Statement,
    values: &Values<'_, DB>,
) -> Result<<DB as Dialect>::Args, BindError> {
    let mut args = <DB as Dialect>::Args::default();
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
            Bind::Keys(n) => part(values.keys, n, &mut args)?,
            Bind::Key(n) => part(values.key, n, &mut args)?,
            Bind::Value(n) => part(values.values, n, &mut args)?,
            Bind::Age => int(values.age, &mut args)?,
            Bind::Expected => int(values.expected, &mut args)?,
            Bind::Token => int(values.token, &mut args)?,
            Bind::Limit => int(values.limit, &mut args)?,
            Bind::Actor => note(Note::actor, &mut args)?,
            Bind::Reason => note(Note::reason, &mut args)?,
            Bind::Details => note(Note::detail_json, &mut args)?,
        }
    }
    Ok(args)
}

/// A plan that names a value the call does not supply: a statement of
/// another shape than the call expects.
fn missing(bind: Bind) -> BindError {
    BindError::Encode(sqlx::Error::Protocol(format!(
        "the statement binds {bind:?}, which this call does not supply"
    )))
}

/// The values a transition binds into its `set(column = bind(Type))`
/// assignments: `()` for none, or a tuple of them in declaration order.
/// Implemented for every tuple of up to six bindable values.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be bound into a transition's statement on `{DB}`",
    label = "the values of this transition's `bind(Type)` items",
    note = "every `bind(Type)` type must implement `sqlx::Encode` and `sqlx::Type` for the \
            database, and be `Send + Sync` (at most six values per transition)"
)]
pub trait Params<DB: Backend>: Send + Sync {
    /// Adds the values to `args`, in order.
    #[doc(hidden)]
    fn bind(&self, args: &mut <DB as Dialect>::Args) -> Result<(), sqlx::Error> {
        self.bind_range(args, 0..usize::MAX)
    }

    /// Adds the values at positions `range` to `args`, in order.
    #[doc(hidden)]
    fn bind_range(
        &self,
        args: &mut <DB as Dialect>::Args,
        range: core::ops::Range<usize>,
    ) -> Result<(), sqlx::Error>;
}

impl<DB: Backend> Params<DB> for () {
    fn bind_range(
        &self,
        _: &mut <DB as Dialect>::Args,
        _: core::ops::Range<usize>,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }
}

macro_rules! params_tuple {
    ($($t:ident),+) => {
        impl<DB: Backend, $($t: Key<DB>),+> Params<DB> for ($($t,)+) {
            #[allow(non_snake_case)]
            fn bind_range(
                &self,
                args: &mut <DB as Dialect>::Args,
                range: core::ops::Range<usize>,
            ) -> Result<(), sqlx::Error> {
                let ($($t,)+) = self;
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

params_tuple!(A);
params_tuple!(A, B);
params_tuple!(A, B, C);
params_tuple!(A, B, C, D);
params_tuple!(A, B, C, D, E);
params_tuple!(A, B, C, D, E, F);
