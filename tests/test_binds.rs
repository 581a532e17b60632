//! Values bound per call: `set(column = bind(Type))` makes the transition's
//! constructor take them, and the winning statement writes them.

mod common;

use common::{Db, TestBackend};
use sqlx::Pool;
use stateguard::{Committed, Executor, Key, Outcome, StateMachine};

/// A note closed with the reason and the amount the caller gives.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "notes", column = "status", key = "id", version = "version")]
enum Note {
    #[state(initial)]
    #[transition(close -> Closed, set(reason = bind(String), amount = bind(i64), touched = "touched + 1"))]
    Open,
    #[transition(reopen -> Open)]
    Closed,
}

backend_tests! {
    "binds_written" => the_winning_statement_writes_the_bound_values,
}

/// Portable DDL and reads, run on a connection of the test's pool.
async fn notes<DB: TestBackend>(db: &Db<DB>) -> sqlx::pool::PoolConnection<DB> {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        "CREATE TABLE notes (
            id BIGINT PRIMARY KEY,
            status VARCHAR(32) NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            reason VARCHAR(200),
            amount BIGINT,
            touched BIGINT NOT NULL DEFAULT 0
        )",
        "INSERT INTO notes (id, status) VALUES (1, 'open')",
    ] {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    conn
}

async fn note<DB: TestBackend>(
    conn: &mut DB::Connection,
) -> (Option<String>, Option<i64>, i64, i64) {
    DB::fetch_one(
        conn,
        "SELECT reason, amount, touched, version FROM notes WHERE id = 1",
        &[],
    )
    .await
    .unwrap()
}

/// The values go into the one compare-and-set; a replay with other values
/// changes nothing; with an expected occurrence they still bind in order.
async fn the_winning_statement_writes_the_bound_values<DB: TestBackend>(db: Db<DB>)
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    i64: Key<DB>,
    String: Key<DB>,
{
    let mut conn = notes(&db).await;
    let close = Note::close("paid by wire".to_owned(), 4200);
    assert_eq!(close.params(), &("paid by wire".to_owned(), 4200));
    let won = close.apply(&db.pool, 1_i64).await.unwrap();
    assert_eq!(won.won().map(|w| w.occurrence()), Some(1));
    assert_eq!(
        note::<DB>(&mut conn).await,
        (Some("paid by wire".to_owned()), Some(4200), 1, 1)
    );
    // A replay carrying other values finds the note closed and writes none.
    let replay = Note::close("'; DROP TABLE notes; --".to_owned(), 1)
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert_eq!(replay, Outcome::AlreadyInState(Note::Closed));
    assert_eq!(
        note::<DB>(&mut conn).await,
        (Some("paid by wire".to_owned()), Some(4200), 1, 1)
    );
    // After a reopen, a close expecting the old occurrence is stale, and
    // one expecting the current occurrence writes its own values.
    assert!(
        Note::reopen()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .is_applied()
    );
    let stale = Note::close("late".to_owned(), 7)
        .expecting(1)
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert_eq!(
        stale,
        Outcome::Stale {
            current: Note::Open,
            occurrence: 2
        }
    );
    let again = Note::close("paid again".to_owned(), 99)
        .expecting(2)
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert!(again.is_applied(), "{again:?}");
    assert_eq!(
        note::<DB>(&mut conn).await,
        (Some("paid again".to_owned()), Some(99), 2, 3)
    );
}

#[test]
fn the_values_are_bound_not_written_into_the_sql() {
    let sql = Note::close(String::new(), 0)
        .transition()
        .def()
        .update_sql();
    assert!(
        sql.postgres()
            .starts_with(r#"UPDATE "notes" SET "status" = 'closed', "reason" = $2, "amount" = $3, "touched" = (touched + 1)"#),
        "{}",
        sql.postgres()
    );
    assert!(
        sql.mysql()
            .starts_with("UPDATE `notes` SET `reason` = ?, `amount` = ?, `touched` = (touched + 1), `status` = 'closed'"),
        "{}",
        sql.mysql()
    );
    let expecting = Note::close(String::new(), 0)
        .transition()
        .def()
        .update_expecting_sql()
        .map(|sql| sql.sqlite());
    assert!(
        expecting.is_some_and(|sql| sql.contains(r#"COALESCE("version", 0) = ?4"#)),
        "{expecting:?}"
    );
    let columns: Vec<_> = Note::close(String::new(), 0)
        .transition()
        .def()
        .set_columns()
        .iter()
        .map(|c| (c.column(), c.expr()))
        .collect();
    assert_eq!(
        columns,
        [
            ("reason", "bind(String)"),
            ("amount", "bind(i64)"),
            ("touched", "touched + 1")
        ]
    );
}
