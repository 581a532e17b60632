use sqlx::Postgres;
use sqlx::postgres::PgQueryResult;

use super::Sql;
use super::sealed::Driver;
use super::{Backend, BoxFuture, db_code};

impl Driver for Postgres {
    type Args = sqlx::postgres::PgArguments;

    const RETURNING: bool = true;

    const SYSTEM: &'static str = "postgresql";

    const EMBEDDED: bool = false;
    const PREPARES_FIRST: bool = false;

    fn choose<T: Copy>(sql: &Sql<T>) -> T {
        sql.postgres
    }

    fn rows_affected(result: &PgQueryResult) -> u64 {
        result.rows_affected()
    }

    super::row_access!(sqlx::postgres::PgRow);

    fn transaction_open(conn: &mut sqlx::PgConnection) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            // Any statement fails with 25P02 in an aborted transaction,
            // whose COMMIT would be answered with a silent ROLLBACK.
            match sqlx::Executor::execute(conn, "SELECT 1").await {
                Ok(_) => Ok(true),
                Err(error) if db_code(&error).as_deref() == Some("25P02") => Ok(false),
                Err(error) => Err(error),
            }
        })
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl Backend for Postgres {
    fn is_retryable(error: &sqlx::Error) -> bool {
        // 40001 serialization_failure, 40P01 deadlock_detected
        matches!(db_code(error).as_deref(), Some("40001" | "40P01"))
    }
}
