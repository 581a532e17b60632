//! PostgreSQL's batch keys: one array per key column, bound as
//! `= ANY($1)` or unnested side by side.

use sqlx::Postgres;
use sqlx::postgres::PgHasArrayType;

use super::{BindError, Key, ManyKeys, shape};
use crate::dialect::sealed::Driver;

fn add<T>(args: &mut <Postgres as Driver>::Args, column: Vec<&T>) -> Result<(), BindError>
where
    T: Key<Postgres> + PgHasArrayType,
{
    sqlx::Arguments::add(args, column).map_err(|e| BindError::Encode(sqlx::Error::Encode(e)))
}

fn ints(args: &mut <Postgres as Driver>::Args, ints: &[i64]) -> Result<(), BindError> {
    sqlx::Arguments::add(args, ints).map_err(|e| BindError::Encode(sqlx::Error::Encode(e)))
}

fn texts(args: &mut <Postgres as Driver>::Args, texts: &[String]) -> Result<(), BindError> {
    sqlx::Arguments::add(args, texts).map_err(|e| BindError::Encode(sqlx::Error::Encode(e)))
}

/// `T` binds as a type whose equality is exact by value.
fn by_value<T: Key<Postgres>>() -> bool {
    matches!(
        super::type_name::<Postgres, T>().as_str(),
        "INT2" | "INT4" | "INT8" | "UUID"
    )
}

impl<T: Key<Postgres> + PgHasArrayType> ManyKeys<Postgres, shape::One> for T {
    fn bind_many(keys: &[&Self], args: &mut <Postgres as Driver>::Args) -> Result<(), BindError> {
        add(args, keys.to_vec())
    }

    fn bind_column(
        keys: &[&Self],
        _: usize,
        args: &mut <Postgres as Driver>::Args,
    ) -> Result<(), BindError> {
        add(args, keys.to_vec())
    }

    fn bind_rows(
        keys: &[&Self],
        _: &[Vec<i64>],
        n: usize,
        args: &mut <Postgres as Driver>::Args,
    ) -> Result<(), BindError> {
        Self::bind_column(keys, n, args)
    }

    fn bind_ints(values: &[i64], args: &mut <Postgres as Driver>::Args) -> Result<(), BindError> {
        ints(args, values)
    }

    fn bind_effect_keys(
        _: &[&Self],
        _: &[Vec<i64>],
        prefixes: &[String],
        args: &mut <Postgres as Driver>::Args,
    ) -> Result<(), BindError> {
        texts(args, prefixes)
    }

    fn by_value() -> bool {
        by_value::<T>()
    }
}

macro_rules! pg_tuple_keys {
    ($shape:ident: $($t:ident $i:tt),+) => {
        impl<$($t: Key<Postgres> + PgHasArrayType),+> ManyKeys<Postgres, shape::$shape>
            for ($($t,)+)
        {
            fn bind_many(
                keys: &[&Self],
                args: &mut <Postgres as Driver>::Args,
            ) -> Result<(), BindError> {
                $(add(args, keys.iter().map(|k| &k.$i).collect())?;)+
                Ok(())
            }

            fn bind_column(
                keys: &[&Self],
                n: usize,
                args: &mut <Postgres as Driver>::Args,
            ) -> Result<(), BindError> {
                match n {
                    $($i => add(args, keys.iter().map(|k| &k.$i).collect()),)+
                    _ => Err(BindError::Encode(super::no_column(n))),
                }
            }

            fn bind_rows(
                keys: &[&Self],
                _: &[Vec<i64>],
                n: usize,
                args: &mut <Postgres as Driver>::Args,
            ) -> Result<(), BindError> {
                Self::bind_column(keys, n, args)
            }

            fn bind_ints(
                values: &[i64],
                args: &mut <Postgres as Driver>::Args,
            ) -> Result<(), BindError> {
                ints(args, values)
            }

            fn bind_effect_keys(
                _: &[&Self],
                _: &[Vec<i64>],
                prefixes: &[String],
                args: &mut <Postgres as Driver>::Args,
            ) -> Result<(), BindError> {
                texts(args, prefixes)
            }

            fn by_value() -> bool {
                $(by_value::<$t>())&&+
            }
        }
    };
}

pg_tuple_keys!(Two: A 0, B 1);
pg_tuple_keys!(Three: A 0, B 1, C 2);
pg_tuple_keys!(Four: A 0, B 1, C 2, D 3);
