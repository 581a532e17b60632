//! The caller's bad input is `ErrorKind::Data`, the same on every
//! backend, and moves nothing: a note whose details are not JSON, and a
//! bound value the database refuses for what it is.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::{Effect, Error, ErrorKind, Note, StateMachine, Verdict};

/// The `transfers` table with a history.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version",
    history = "transfer_history"
)]
enum Logged {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// A label written with the value the caller binds.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "labels", column = "status", key = "id")]
enum Label {
    #[state(initial)]
    #[transition(name -> Named, set(label = bind(String)))]
    Blank,
    Named,
}

backend_tests! {
    impl Tests {
        "input_note_details" => note_details_that_are_not_json_are_refused_before_sending,
        "input_refused_value" => a_value_the_column_refuses_is_data,
    }
}

const NOT_JSON: &str = "this is {not json";

/// The error is `NoteDetails` for the transition, of kind `Data`.
fn assert_note_details(error: &Error, transition: &str) {
    match error {
        Error::NoteDetails {
            table,
            transition: named,
            problem,
        } => {
            assert_eq!((*table, *named), ("transfers", transition), "{error:?}");
            assert!(!problem.is_empty());
        }
        other => panic!("not NoteDetails: {other:?}"),
    }
    assert_eq!(error.kind(), ErrorKind::Data);
    assert!(!error.is_transient() && !error.is_outcome_unknown());
}

struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, stateguard::key::shape::One>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    /// Details that are not JSON refuse `apply`, `apply_many`, a claim and
    /// a verdict's follow-up with `Error::NoteDetails` of kind `Data`, on
    /// every backend alike, before anything is sent: no row moves and no
    /// history row is written. (The databases' own refusals differ:
    /// SQLite's "malformed JSON", PostgreSQL's 22P02, MariaDB's 4025.)
    async fn note_details_that_are_not_json_are_refused_before_sending(db: Db<DB>) {
        db.transfers(4).await;
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in stateguard::ddl::generate::<Logged>(DB::DIALECT).up() {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        drop(conn);
        let bad = || Note::by("ops").details(NOT_JSON);

        let applied = Logged::cancel().noted(bad()).apply(&db.pool, 1_i64).await;
        assert_note_details(&applied.unwrap_err(), "cancel");
        let many = Logged::cancel()
            .noted(bad())
            .apply_many(&db.pool, &[1_i64, 2])
            .await;
        assert_note_details(&many.unwrap_err(), "cancel");
        let claimed = Logged::start()
            .noted(bad())
            .claim::<_, i64>(&db.pool, 2)
            .await;
        assert_note_details(&claimed.unwrap_err(), "start");
        for id in 1..=4 {
            assert_eq!(db.transfer(id).await, ("pending".to_owned(), 0));
            assert!(Logged::history(&db.pool, id).await.unwrap().is_empty());
        }

        // A verdict's follow-up: refused before it is sent; the row stays
        // in flight, its lease left to recovery.
        let won = Logged::start()
            .apply(&db.pool, 3_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let finished = won
            .finish(&db.pool, |_: Effect<Logged, i64>| async {
                Verdict::from(Logged::fail().noted(Note::by("bank").details(NOT_JSON)))
            })
            .await;
        assert_note_details(finished.unwrap_err().error(), "fail");
        assert_eq!(db.transfer(3).await, ("sending".to_owned(), 1));
        assert_eq!(Logged::history(&db.pool, 3_i64).await.unwrap().len(), 1);

        // JSON of any shape passes, numbers beyond a double's range too.
        let fine = Note::by("ops").details(r#" [1e400, {"a": null}] "#);
        let outcome = Logged::cancel().noted(fine).apply(&db.pool, 4_i64).await;
        assert!(outcome.unwrap().is_applied());
    }

    /// A bound value the column refuses for what it is comes back as an
    /// error of kind `Data`, and the row is untouched: too long for a
    /// `VARCHAR(8)` on PostgreSQL (22001) and MariaDB in strict mode
    /// (1406); SQLite checks no length, so there the column is a `STRICT`
    /// table's `INTEGER`, which refuses text (3091).
    async fn a_value_the_column_refuses_is_data(db: Db<DB>) {
        let table = match DB::DIALECT {
            Dialect::Sqlite => {
                "CREATE TABLE labels (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
                 label INTEGER) STRICT"
            }
            _ => {
                "CREATE TABLE labels (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
                  label VARCHAR(8))"
            }
        };
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, table, &[]).await.unwrap();
        DB::execute(
            &mut conn,
            "INSERT INTO labels (id, status) VALUES (1, 'blank')",
            &[],
        )
        .await
        .unwrap();
        let refused = Label::name("a label much too long".to_owned())
            .apply(&db.pool, 1_i64)
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::Database { .. }), "{refused:?}");
        assert_eq!(refused.kind(), ErrorKind::Data, "{refused:?}");
        let (status,): (String,) =
            DB::fetch_one(&mut conn, "SELECT status FROM labels WHERE id = 1", &[])
                .await
                .unwrap();
        assert_eq!(status, "blank");
    }
}
