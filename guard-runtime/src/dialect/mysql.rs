use sqlx::MySql;
use sqlx::mysql::{MySqlDatabaseError, MySqlQueryResult};

use super::{Backend, Sealed};
use crate::machine::Sql;

impl Sealed for MySql {}

impl Backend for MySql {
    const NAME: &'static str = "MySQL";

    type Args = sqlx::mysql::MySqlArguments;

    const RETURNING: bool = false;

    fn sql(sql: &Sql) -> &'static str {
        sql.mysql()
    }

    fn rows_affected(result: &MySqlQueryResult) -> u64 {
        // sqlx sets CLIENT_FOUND_ROWS, so this counts matched rows, not only
        // rows whose values changed.
        result.rows_affected()
    }

    super::row_access!(sqlx::mysql::MySqlRow);

    fn is_retryable(error: &sqlx::Error) -> bool {
        let sqlx::Error::Database(db) = error else {
            return false;
        };
        // 1213 ER_LOCK_DEADLOCK, 1205 ER_LOCK_WAIT_TIMEOUT,
        // 1020 ER_CHECKREAD (MariaDB snapshot isolation: record changed)
        db.try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|e| matches!(e.number(), 1213 | 1205 | 1020))
    }
}
