use sqlx::MySql;
use sqlx::mysql::{MySqlDatabaseError, MySqlQueryResult};

use super::Sql;
use super::sealed::Driver;
use super::{Backend, BoxFuture};

impl Driver for MySql {
    type Args = sqlx::mysql::MySqlArguments;

    const RETURNING: bool = false;

    const SYSTEM: &'static str = "mysql";

    const EMBEDDED: bool = false;
    const PREPARES_FIRST: bool = true;

    fn choose<T: Copy>(sql: &Sql<T>) -> T {
        sql.mysql
    }

    fn rows_affected(result: &MySqlQueryResult) -> u64 {
        // sqlx sets CLIENT_FOUND_ROWS, so this counts matched rows, not only
        // rows whose values changed.
        result.rows_affected()
    }

    fn last_insert_id(result: &MySqlQueryResult) -> u64 {
        result.last_insert_id()
    }

    fn id_lost(result: &MySqlQueryResult) -> bool {
        // What these statements store counts up from the column's value,
        // which starts at 0: a 0 here is the packet's, not the row's (and
        // where a row really holds 0, the read back says so too).
        result.rows_affected() == 1 && result.last_insert_id() == 0
    }

    const LAST_ID: &'static str = "SELECT CAST(LAST_INSERT_ID() AS SIGNED)";

    super::row_access!(sqlx::mysql::MySqlRow);

    fn transaction_open(
        conn: &mut sqlx::MySqlConnection,
    ) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
        Box::pin(async move {
            // A deadlock rolls the whole transaction back, and the session
            // then runs later statements outside any transaction: COMMIT
            // would succeed and commit nothing of what came before.
            // MariaDB says whether a transaction is open; MySQL 8 does not
            // know the variable (1193), and there only the library's own
            // statements are watched (see `tx::TxHealth`).
            let open = sqlx::query_scalar::<_, i64>("SELECT CAST(@@in_transaction AS SIGNED)")
                .fetch_one(conn)
                .await;
            match open {
                Ok(open) => Ok(open != 0),
                Err(sqlx::Error::Database(db))
                    if db
                        .try_downcast_ref::<MySqlDatabaseError>()
                        .is_some_and(|e| e.number() == 1193) =>
                {
                    Ok(true)
                }
                Err(error) => Err(error),
            }
        })
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
impl Backend for MySql {
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
