//! Errors a caller can act on: the kind of the errors real databases
//! return, and history details that are not JSON.

use crate::common;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::Key;
use stateguard::ddl::Dialect;
use stateguard::{Error, ErrorKind, Note, StateMachine};

/// The `transfers` table with a history.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version",
    history = "transfer_history"
)]
enum Audited {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[transition(cancel -> Cancelled)]
    Sending,
    Cancelled,
}

/// The same table, without a history.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "transfers", column = "status", key = "id")]
enum Unaudited {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

backend_tests! {
    impl Tests {
        "errors_history_details" => details_that_are_not_json_are_a_typed_error,
        "errors_kinds" => database_errors_sort_into_kinds,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    /// A history row whose details are not JSON (written by hand into a
    /// `details` column that does not check JSON: SQLite's, or one a
    /// migration made plain text) is `Error::HistoryDetails`, naming the
    /// table and the move, of kind `Data`; the details the library wrote
    /// itself read back.
    async fn details_that_are_not_json_are_a_typed_error(db: Db<DB>) {
        db.transfers(1).await;
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in stateguard::ddl::generate::<Audited>(DB::DIALECT).up() {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        // PostgreSQL's JSONB and MySQL's JSON refuse text that is not JSON.
        let plain_text = match DB::DIALECT {
            Dialect::Postgres => {
                Some("ALTER TABLE transfer_history ALTER COLUMN details TYPE TEXT")
            }
            Dialect::MySql => Some("ALTER TABLE transfer_history MODIFY details LONGTEXT NULL"),
            _ => None,
        };
        if let Some(statement) = plain_text {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        let won = Audited::start()
            .noted(Note::by("ops").details(r#"{"ticket": 4211}"#))
            .apply(&db.pool, 1_i64)
            .await
            .unwrap();
        assert!(won.is_applied());
        let rows = Audited::history(&db.pool, 1_i64).await.unwrap();
        assert_eq!(rows.len(), 1);
        DB::execute(
            &mut conn,
            "INSERT INTO transfer_history (id, transition, from_state, to_state, occurrence, \
         moved_at, details) VALUES (1, 'cancel', 'sending', 'cancelled', 2, CURRENT_TIMESTAMP, \
         'not json')",
            &[],
        )
        .await
        .unwrap();
        let error = Audited::history(&db.pool, 1_i64).await.unwrap_err();
        match &error {
            Error::HistoryDetails {
                table: "transfer_history",
                position: 2,
                transition: "cancel",
                occurrence: 2,
                problem,
            } => assert!(problem.contains("line 1 column"), "{problem}"),
            other => panic!("not HistoryDetails: {other:?}"),
        }
        assert_eq!(error.kind(), ErrorKind::Data);
        assert!(!error.is_transient() && !error.is_misuse());
        let message = error.to_string();
        assert!(
            message.contains("transfer_history") && message.contains("move 2"),
            "{message}"
        );
    }

    /// Errors as the servers return them: a lock that cannot be had in time
    /// is transient; a unique violation, a syntax error and a missing table
    /// are not; reading the history of a machine without one is a misuse.
    async fn database_errors_sort_into_kinds(db: Db<DB>) {
        db.transfers(2).await;
        let kind = |source| {
            Error::Database {
                table: "transfers",
                transition: "start",
                source,
            }
            .kind()
        };
        let mut conn = db.pool.acquire().await.unwrap();
        let duplicate = DB::execute(
            &mut conn,
            "INSERT INTO transfers (id, status) VALUES (1, 'pending')",
            &[],
        )
        .await
        .unwrap_err();
        assert_eq!(kind(duplicate), ErrorKind::Database);
        let syntax = DB::execute(&mut conn, "UPDATE transfers SET WHERE", &[])
            .await
            .unwrap_err();
        assert_eq!(kind(syntax), ErrorKind::Database);
        let missing = DB::execute(&mut conn, "SELECT 1 FROM no_such_table", &[])
            .await
            .unwrap_err();
        assert_eq!(kind(missing), ErrorKind::Database);

        // One connection holds a write lock; the other gives up waiting.
        let mut holder = db.pool.acquire().await.unwrap();
        let (give_up_soon, write) = match DB::DIALECT {
            Dialect::Postgres => (
                "SET lock_timeout = '100ms'",
                "UPDATE transfers SET version = 7 WHERE id = 1",
            ),
            Dialect::MySql => (
                "SET SESSION innodb_lock_wait_timeout = 1",
                "UPDATE transfers SET version = 7 WHERE id = 1",
            ),
            _ => (
                "PRAGMA busy_timeout = 0",
                "UPDATE transfers SET version = 7 WHERE id = 1",
            ),
        };
        DB::execute(&mut holder, DB::BEGIN_WRITE, &[])
            .await
            .unwrap();
        DB::execute(&mut holder, write, &[]).await.unwrap();
        DB::execute(&mut conn, give_up_soon, &[]).await.unwrap();
        let locked = DB::execute(&mut conn, write, &[]).await.unwrap_err();
        DB::execute(&mut holder, "ROLLBACK", &[]).await.unwrap();
        let begin = Error::Begin { source: locked };
        assert_eq!(begin.kind(), ErrorKind::Transient, "{begin:?}");
        assert!(begin.is_transient());

        let misuse = Unaudited::history(&db.pool, 2_i64).await.unwrap_err();
        assert!(
            matches!(misuse, Error::Misuse(stateguard::Misuse::NoHistory { .. })),
            "{misuse:?}"
        );
        assert!(misuse.is_misuse() && !misuse.is_transient());
    }
}
