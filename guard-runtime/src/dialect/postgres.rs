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

    super::row_access!(sqlx::postgres::PgRow);

    fn is_retryable(error: &sqlx::Error) -> bool {
        // 40001 serialization_failure, 40P01 deadlock_detected
        matches!(db_code(error).as_deref(), Some("40001" | "40P01"))
    }
}
