use sqlx::Postgres;
use sqlx::postgres::PgQueryResult;

use super::{Backend, Sealed, db_code};
use crate::machine::Sql;

impl Sealed for Postgres {}

impl Backend for Postgres {
    const NAME: &'static str = "PostgreSQL";

    type Args = sqlx::postgres::PgArguments;

    fn sql(sql: &Sql) -> &'static str {
        sql.postgres()
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn status_text(row: &sqlx::postgres::PgRow) -> Result<String, sqlx::Error> {
        sqlx::Row::try_get(row, 0)
    }

    fn is_retryable(error: &sqlx::Error) -> bool {
        // 40001 serialization_failure, 40P01 deadlock_detected
        matches!(db_code(error).as_deref(), Some("40001" | "40P01"))
    }
}
