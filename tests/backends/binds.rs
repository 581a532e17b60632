//! Values bound per call: `set(column = bind(Type))` makes the transition's
//! constructor take them, and the winning statement writes them.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;

use common::{Db, TestBackend};
use stateguard::bounds::Key;
use stateguard::{Effect, Error, FinishError, Finished, Outcome, StateMachine, Verdict, recover};

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

/// The `transfers` table, whose in-flight follow-ups store the bank's
/// answer: its reference when the transfer went through, its reason when
/// it was declined.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum Wire {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "150ms", since = "sending_since", done = confirm, failed = decline))]
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP", bank_ref = bind(String)))]
    #[transition(decline -> Failed, set(bank_ref = bind(String)))]
    Sending,
    Sent,
    Failed,
}

backend_tests! {
    impl Tests {
        "binds_written" => the_winning_statement_writes_the_bound_values,
        "binds_follow_up" => the_follow_up_writes_the_verdicts_values,
        "binds_recovered" => recovery_stores_the_winning_verdicts_values,
        "binds_bare_verdict" => a_bare_verdict_says_what_to_return_and_promises_nothing,
    }
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

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    String: Key<DB>,
{
    /// The values go into the one compare-and-set; a replay with other values
    /// changes nothing; with an expected occurrence they still bind in order.
    async fn the_winning_statement_writes_the_bound_values(db: Db<DB>) {
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

    /// `finish` binds the verdict's values into the statement that ends the
    /// row; a verdict without them, or naming another transition, leaves the
    /// row in flight and writes nothing.
    async fn the_follow_up_writes_the_verdicts_values(db: Db<DB>) {
        db.transfers(4).await;
        let mut wins = Vec::new();
        for id in 1..=4_i64 {
            let outcome = Wire::start().apply(&db.pool, id).await.unwrap();
            wins.push(outcome.won().unwrap());
        }
        let expected = format!("tr-{}", wins[0].effect_key());
        let mut wins = wins.into_iter();
        let confirmed = wins
            .next()
            .unwrap()
            .finish(&db.pool, |effect: Effect<Wire, i64>| async move {
                Wire::confirm(format!("tr-{}", effect.effect_key())).into()
            })
            .await
            .unwrap();
        assert!(
            matches!(
                confirmed,
                Finished::Done {
                    state: Wire::Sent,
                    ..
                }
            ),
            "{confirmed:?}"
        );
        assert_eq!(bank_ref(&db, 1).await, Some(expected));

        let declined = wins
            .next()
            .unwrap()
            .finish(&db.pool, |_: Effect<Wire, i64>| async {
                Wire::decline("insufficient funds".to_owned()).into()
            })
            .await
            .unwrap();
        assert!(
            matches!(
                declined,
                Finished::Failed {
                    state: Wire::Failed,
                    ..
                }
            ),
            "{declined:?}"
        );
        assert_eq!(
            bank_ref(&db, 2).await,
            Some("insufficient funds".to_owned())
        );

        // `Verdict::done()` does not compile for `Wire`, whose `confirm`
        // binds a reference (tests/ui/in_flight/verdict-without-values.rs);
        // the transition taken without its values carries none: nothing is
        // written, the row stays in flight.
        let bare = wins
            .next()
            .unwrap()
            .finish(&db.pool, |_: Effect<Wire, i64>| async { without_values() })
            .await;
        match bare {
            Err(FinishError::Unfinished(Error::Misuse(stateguard::Misuse::FollowUpValues {
                transition,
                expects,
                ..
            }))) => {
                assert_eq!(transition, "confirm");
                assert!(expects.contains("String"), "{expects}");
            }
            other => panic!("expected missing values, got {other:?}"),
        }
        assert_eq!(db.transfer(3).await.0, "sending");
        assert_eq!(bank_ref(&db, 3).await, None);

        // A transition that does not end the state is no verdict.
        let wrong = wins
            .next()
            .unwrap()
            .finish(&db.pool, |_: Effect<Wire, i64>| async {
                Wire::start().into()
            })
            .await;
        match wrong {
            Err(FinishError::Unfinished(Error::Misuse(stateguard::Misuse::NotAFollowUp {
                verdict,
                state,
                ..
            }))) => {
                assert_eq!((verdict, state), ("start", "sending"));
            }
            other => panic!("expected a refused verdict, got {other:?}"),
        }
        assert_eq!(db.transfer(4).await.0, "sending");
    }

    /// A worker that dies after its win leaves the row to recovery, whose
    /// verdict stores its reference. A worker that stalls past its lease and
    /// returns late does not overwrite the reference of the verdict that
    /// finished the row.
    async fn recovery_stores_the_winning_verdicts_values(db: Db<DB>) {
        db.transfers(2).await;
        // Transfer 1: the worker dies between its win and its effect.
        let crashed = Wire::start().apply(&db.pool, 1_i64).await.unwrap();
        assert!(crashed.is_applied());
        drop(crashed);
        db.backdate_leases().await;
        let report = recover(
            &db.pool,
            Wire::Sending,
            10,
            |effect: Effect<Wire, i64>| async move {
                Wire::confirm(format!("recovered-{}", effect.key())).into()
            },
        )
        .await
        .unwrap();
        assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
        assert_eq!(bank_ref(&db, 1).await, Some("recovered-1".to_owned()));

        // Transfer 2: the worker stalls in its effect past its lease; a
        // recovery takes the row over and finishes it first.
        let won = Wire::start()
            .apply(&db.pool, 2_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let pool = db.pool.clone();
        let late = won
            .finish(&db.pool, |_: Effect<Wire, i64>| async move {
                let mut conn = pool.acquire().await.unwrap();
                DB::execute(&mut conn, DB::BACKDATE_LEASES, &[])
                    .await
                    .unwrap();
                drop(conn);
                let report = recover(
                    &pool,
                    Wire::Sending,
                    10,
                    |effect: Effect<Wire, i64>| async move {
                        Wire::confirm(format!("recovered-{}", effect.key())).into()
                    },
                )
                .await
                .unwrap();
                assert_eq!((report.claimed, report.done), (1, 1), "{report:?}");
                Wire::confirm("late".to_owned()).into()
            })
            .await
            .unwrap();
        assert!(
            matches!(
                late,
                Finished::Done {
                    state: Wire::Sent,
                    ..
                }
            ),
            "{late:?}"
        );
        assert_eq!(bank_ref(&db, 2).await, Some("recovered-2".to_owned()));
        assert_eq!(db.transfer(2).await, ("sent".to_owned(), 2));
    }
}

impl<DB: TestBackend> Tests<DB>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    String: Key<DB>,
{
    /// A verdict without the values its follow-up binds (the transition
    /// taken from the metadata, not its constructor; `Verdict::done()`
    /// does not compile here) fails after the effect, in `finish` and in
    /// recovery alike (which runs the same code): the error names the
    /// constructor to return and never says that recovery will finish the
    /// row, which stays in flight.
    async fn a_bare_verdict_says_what_to_return_and_promises_nothing(db: Db<DB>) {
        db.transfers(1).await;
        let won = Wire::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let error = won
            .finish(&db.pool, |_: Effect<Wire, i64>| async { without_values() })
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(
                error.error(),
                Error::Misuse(stateguard::Misuse::FollowUpValues { .. })
            ),
            "{error:?}"
        );
        assert_eq!(error.error().kind(), stateguard::ErrorKind::Misuse);
        assert!(text.contains("`Wire::confirm(…).into()`"), "{text}");
        assert!(!text.contains("recovery will"), "{text}");
        assert!(!text.contains("recovery runs the effect again"), "{text}");
        assert_eq!(db.transfer(1).await.0, "sending");

        // Recovery runs the same code and fails the same way.
        db.backdate_leases().await;
        let report = recover(&db.pool, Wire::Sending, 10, |_: Effect<Wire, i64>| async {
            without_values()
        })
        .await
        .unwrap();
        assert_eq!((report.claimed, report.done), (1, 0), "{report:?}");
        assert!(
            matches!(
                report.errors[..],
                [Error::Misuse(stateguard::Misuse::FollowUpValues { .. })]
            ),
            "{report:?}"
        );
        assert_eq!(db.transfer(1).await.0, "sending");
        assert_eq!(bank_ref(&db, 1).await, None);
    }
}

/// `Wire`'s `confirm` as its metadata holds it: without the reference it
/// binds.
fn without_values() -> Verdict<Wire> {
    let confirm = Wire::MACHINE.transition("confirm").expect("declared");
    confirm.transition().into()
}

/// The bank reference stored with transfer `id`.
async fn bank_ref<DB: TestBackend>(db: &Db<DB>, id: i64) -> Option<String> {
    let mut conn = db.pool.acquire().await.unwrap();
    let sql = match id {
        1 => "SELECT bank_ref FROM transfers WHERE id = 1",
        2 => "SELECT bank_ref FROM transfers WHERE id = 2",
        3 => "SELECT bank_ref FROM transfers WHERE id = 3",
        _ => "SELECT bank_ref FROM transfers WHERE id = 4",
    };
    let (bank_ref,): (Option<String>,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    bank_ref
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
