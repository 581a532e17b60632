use sqlx::Postgres;
use sqlx::postgres::PgQueryResult;

use super::{Backend, Sealed, db_code};
use crate::machine::Sql;

impl Sealed for Postgres {}

impl Backend for Postgres {
    const NAME: &'static str = "PostgreSQL";

    type Args = sqlx::postgres::PgArguments;

    const RETURNING: bool = true;

    fn sql(sql: &Sql) -> &'static str {
        sql.postgres()
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn text_opt(row: &sqlx::postgres::PgRow, index: usize) -> Result<Option<String>, sqlx::Error> {
        sqlx::Row::try_get(row, index)
    }

    fn int(row: &sqlx::postgres::PgRow, index: usize) -> Result<i64, sqlx::Error> {
        sqlx::Row::try_get(row, index)
    }

    fn bind_int(args: &mut Self::Args, value: i64) -> Result<(), sqlx::Error> {
        sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
    }

    fn column<T>(row: &sqlx::postgres::PgRow, index: usize) -> Result<T, sqlx::Error>
    where
        T: for<'r> sqlx::Decode<'r, Self> + sqlx::Type<Self>,
    {
        sqlx::Row::try_get(row, index)
    }

    fn is_retryable(error: &sqlx::Error) -> bool {
        // 40001 serialization_failure, 40P01 deadlock_detected
        matches!(db_code(error).as_deref(), Some("40001" | "40P01"))
    }
}
