use sqlx::Sqlite;
use sqlx::sqlite::SqliteQueryResult;

use super::Sql;
use super::sealed::Driver;
use super::{Backend, BoxFuture, db_code};

impl Driver for Sqlite {
    type Args = sqlx::sqlite::SqliteArguments;

    const RETURNING: bool = true;

    const SYSTEM: &'static str = "sqlite";

    const EMBEDDED: bool = true;
    const PREPARES_FIRST: bool = false;

    fn choose<T: Copy>(sql: &Sql<T>) -> T {
        sql.sqlite
    }

    fn rows_affected(result: &SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    super::row_access!(sqlx::sqlite::SqliteRow);

    fn transaction_open(
        _conn: &mut sqlx::SqliteConnection,
    ) -> BoxFuture<'_, Result<bool, sqlx::Error>> {
        // SQLite's COMMIT fails by itself when an error has already rolled
        // the transaction back.
        Box::pin(core::future::ready(Ok(true)))
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
impl Backend for Sqlite {
    fn is_retryable(error: &sqlx::Error) -> bool {
        // The extended result code: 5 SQLITE_BUSY (the busy timeout ran
        // out), 261 SQLITE_BUSY_RECOVERY, 517 SQLITE_BUSY_SNAPSHOT (a
        // deferred transaction read an old snapshot, then tried to write),
        // 6 SQLITE_LOCKED and 262 SQLITE_LOCKED_SHAREDCACHE (shared cache).
        matches!(
            db_code(error).as_deref(),
            Some("5" | "261" | "517" | "6" | "262")
        )
    }
}
