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

    fn text_opt(row: &sqlx::mysql::MySqlRow, index: usize) -> Result<Option<String>, sqlx::Error> {
        sqlx::Row::try_get(row, index)
    }

    fn int(row: &sqlx::mysql::MySqlRow, index: usize) -> Result<i64, sqlx::Error> {
        sqlx::Row::try_get(row, index)
    }

    fn bind_int(args: &mut Self::Args, value: i64) -> Result<(), sqlx::Error> {
        sqlx::Arguments::add(args, value).map_err(sqlx::Error::Encode)
    }

    fn column<T>(row: &sqlx::mysql::MySqlRow, index: usize) -> Result<T, sqlx::Error>
    where
        T: for<'r> sqlx::Decode<'r, Self> + sqlx::Type<Self>,
    {
        sqlx::Row::try_get(row, index)
    }

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
