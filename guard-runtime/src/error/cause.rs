//! What a database's error says about the session it ended or the server
//! that sent it.

/// Whether the server refused `error`'s statement because it only reads
/// (a standby, a demoted primary): nothing was written, and the connection
/// stays read-only until it is closed.
pub(crate) fn read_only(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    db.code().as_deref() == Some("25006")
        || mysql_number(error).is_some_and(|n| matches!(n, 1290 | 1792 | 1836))
}

/// Whether `error` ended the session while a statement may have been in
/// flight.
pub(super) fn connection_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or_default();
            // PostgreSQL SQLSTATEs: admin shutdown (also what a session
            // killed while its COMMIT waited for synchronous replication
            // gets, after the local commit), crash shutdown, cannot connect
            // now, and a cancelled statement, counted as unknown to be safe.
            if matches!(code, "57P01" | "57P02" | "57P03" | "57014") {
                return true;
            }
            mysql_number(error).is_some_and(|n| matches!(n, 1053 | 1927 | 2006 | 2013))
        }
        _ => false,
    }
}

/// The MySQL/MariaDB error number of `error`, where that backend is built.
pub(crate) fn mysql_number(error: &sqlx::Error) -> Option<u16> {
    #[cfg(feature = "mysql")]
    {
        error
            .as_database_error()
            .and_then(|db| db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .map(|db| db.number())
    }
    #[cfg(not(feature = "mysql"))]
    {
        let _ = error;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::Error;

    #[test]
    fn a_broken_connection_leaves_the_outcome_unknown() {
        let broken = Error::Database {
            table: "payouts",
            transition: "start",
            source: sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        };
        assert!(broken.is_outcome_unknown());
        let refused = Error::Database {
            table: "payouts",
            transition: "start",
            source: sqlx::Error::PoolTimedOut,
        };
        assert!(!refused.is_outcome_unknown());
        assert!(!Error::Misuse(crate::error::Misuse::ConnectionInTransaction).is_outcome_unknown());
    }
}
