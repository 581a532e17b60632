//! History: with `history = "…"`, every move appends a row with the state
//! the row really left, in the same atomic act; nothing else does.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::Arc;

use common::{Db, TestBackend, abandon_at_every_poll};
use stateguard::bounds::{Batched, Key, ManyKeys};
use stateguard::{Effect, Error, Finished, HistoryRow, Note, Outcome, StateMachine, Tx, Verdict};
use tokio::sync::Barrier;

/// The `transfers` table with a history; `cancel` leaves `pending` or
/// `sending`, and `pause` leads back from `sending` to `pending`.
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
    #[transition(cancel -> Cancelled, supersedes_effect)]
    #[transition(pause -> Pending, supersedes_effect)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

backend_tests! {
    impl Tests {
        "history_race" => the_history_chains_under_a_race (flavor = "multi_thread", worker_threads = 4),
        "history_paths" => every_way_of_moving_writes_history,
        "history_rollback" => a_rolled_back_move_leaves_no_history,
        "history_append_only" => the_history_table_is_append_only,
        "history_notes" => a_noted_move_records_who_and_why,
        "history_batch_notes" => claims_batches_and_follow_ups_record_their_notes,
        "history_abandoned" => an_abandoned_move_leaves_no_transaction_behind,
    }
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, stateguard::key::shape::One>,
{
    /// A move with history through a pool is a transaction (on SQLite and
    /// MySQL: the history insert, then the move). A caller that stops waiting
    /// for it half-way, at every point from just after it started to just
    /// before it finished, leaves the pool's one connection out of any
    /// transaction: the next move through the pool is committed, seen from
    /// another connection, and the abandoned one moved with its history or not
    /// at all.
    async fn an_abandoned_move_leaves_no_transaction_behind(db: Db<DB>) {
        const ROWS: i64 = 20_000;
        setup(&db, ROWS).await;
        let one = sqlx::pool::PoolOptions::<DB>::new()
            .max_connections(1)
            .connect_with((*db.pool.connect_options()).clone())
            .await
            .unwrap();
        let (db, one) = (&db, &one);
        abandon_at_every_poll(
            |round| Logged::cancel().apply(one, 2 * round - 1),
            |at| async move {
                let (abandoned, next) = (2 * at.round - 1, 2 * at.round);
                assert!(next <= ROWS, "the move never finished");
                let outcome = Logged::cancel().apply(one, next).await.unwrap();
                assert!(outcome.is_applied(), "{at:?}: {outcome:?}");
                assert_eq!(
                    db.transfer(next).await.0,
                    "cancelled",
                    "{at:?}: the move through the pool did not commit"
                );
                assert_chain(db, abandoned).await;
            },
        )
        .await;
    }

    /// 32 `cancel`s per row race a task that moves the row between its two
    /// sources: every row's history chains, and `cancel` is recorded once,
    /// leaving the state the row was really in.
    pub(crate) async fn the_history_chains_under_a_race(db: Db<DB>) {
        setup(&db, ROWS).await;
        let barrier = Arc::new(Barrier::new(ROWS as usize * (CANCELS + 1)));
        let mut tasks = Vec::new();
        for id in 1..=ROWS {
            for attempt in 0..CANCELS {
                let (pool, barrier) = (db.pool.clone(), barrier.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    if attempt % 4 == 0 {
                        tokio::task::yield_now().await;
                    }
                    let outcome = Logged::cancel().apply(&pool, id).await.unwrap();
                    usize::from(outcome.is_applied())
                }));
            }
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                for _ in 0..3 {
                    let _ = Logged::start().apply(&pool, id).await.unwrap();
                    let _ = Logged::pause().apply(&pool, id).await.unwrap();
                }
                0
            }));
        }
        let mut cancelled = 0;
        for task in tasks {
            cancelled += task.await.unwrap();
        }
        assert_eq!(cancelled, ROWS as usize);
        for id in 1..=ROWS {
            let rows = assert_chain(&db, id).await;
            let cancels: Vec<&HistoryRow<Logged>> = rows
                .iter()
                .filter(|r| r.transition.name() == "cancel")
                .collect();
            assert_eq!(cancels.len(), 1, "transfer {id}: {rows:?}");
            assert_eq!(rows.last().map(|r| r.to), Some(Logged::Cancelled));
        }
    }

    /// `apply`, `expecting`, `finish`, recovery, `claim` and `apply_many` all
    /// write history; losing attempts write none.
    pub(crate) async fn every_way_of_moving_writes_history(db: Db<DB>) {
        setup(&db, 6).await;
        // apply, a replay, and a finish.
        let won = Logged::start().apply(&db.pool, 1_i64).await.unwrap();
        let replay = Logged::start().apply(&db.pool, 1_i64).await.unwrap();
        assert_eq!(replay, Outcome::AlreadyInState(Logged::Sending));
        let finished = won
            .won()
            .unwrap()
            .finish(&db.pool, |_: Effect<Logged, i64>| async { Verdict::done() })
            .await
            .unwrap();
        assert!(
            matches!(
                finished,
                Finished::Done {
                    state: Logged::Sent,
                    ..
                }
            ),
            "{finished:?}"
        );
        let rows = assert_chain(&db, 1).await;
        let names: Vec<&str> = rows.iter().map(|r| r.transition.name()).collect();
        assert_eq!(names, ["start", "confirm"]);
        assert!(!rows[0].at.is_empty());
        // The time as a number, UTC on every backend: the moves just
        // happened, in order, by the database's clock.
        let now = std::time::SystemTime::now();
        for row in &rows {
            let moved = row.moved_at().expect("a time the clock can hold");
            let apart = now
                .duration_since(moved)
                .unwrap_or_else(|early| early.duration());
            assert!(
                apart < std::time::Duration::from_secs(600),
                "{row:?} is {apart:?} from now"
            );
            // The same instant through the `time` and `chrono` features,
            // in UTC.
            let at = row.moved_at_time().expect("in the time crate's range");
            assert_eq!(
                at.unix_timestamp_nanos(),
                i128::from(row.at_unix_micros) * 1_000
            );
            assert!(at.offset().is_utc(), "{at}");
            let at = row.moved_at_chrono().expect("in chrono's range");
            assert_eq!(at.timestamp_micros(), row.at_unix_micros, "{at}");
        }
        assert!(rows[0].at_unix_micros <= rows[1].at_unix_micros, "{rows:?}");
        let page = stateguard::docs::history_markdown::<Logged>("Transfer 1", &rows);
        let table: Vec<&str> = page.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(table.len(), 4, "{page}");
        assert!(
            table[2].contains("| `start` | `Pending` | `Sending` | 1 |"),
            "{page}"
        );
        assert!(
            table[3].contains("| `confirm` | `Sending` | `Sent` | 2 |"),
            "{page}"
        );
        assert!(page.contains("```mermaid"), "{page}");

        // expecting: a stale attempt writes nothing.
        assert!(matches!(
            Logged::cancel()
                .expecting(5)
                .apply(&db.pool, 2_i64)
                .await
                .unwrap(),
            Outcome::Stale { .. }
        ));
        assert!(history(&db, 2).await.is_empty());
        assert!(
            Logged::cancel()
                .expecting(0)
                .apply(&db.pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(assert_chain(&db, 2).await.len(), 1);

        // A claim, then recovery after the claimer died.
        let claimed = Logged::start().claim::<_, i64>(&db.pool, 2).await.unwrap();
        assert_eq!(claimed.iter().map(|w| *w.key()).collect::<Vec<_>>(), [3, 4]);
        drop(claimed);
        db.backdate_leases().await;
        let report = stateguard::recover(
            &db.pool,
            Logged::Sending,
            10,
            |_: Effect<Logged, i64>| async { Verdict::failed() },
        )
        .await
        .unwrap();
        assert_eq!(report.failed, 2, "{report:?}");
        for id in [3, 4] {
            let names: Vec<&str> = assert_chain(&db, id)
                .await
                .iter()
                .map(|r| r.transition.name())
                .collect();
            assert_eq!(names, ["start", "fail"], "transfer {id}");
        }

        // A batch: moved rows get one history row each, the rest none.
        let outcomes = Logged::cancel()
            .apply_many(&db.pool, &[5_i64, 6, 6, 1, 99])
            .await
            .unwrap();
        let applied: Vec<bool> = outcomes.iter().map(Outcome::is_applied).collect();
        assert_eq!(applied, [true, true, false, false, false]);
        for id in [5, 6] {
            let rows = assert_chain(&db, id).await;
            assert_eq!(rows.len(), 1);
            assert_eq!(
                (rows[0].from, rows[0].to),
                (Logged::Pending, Logged::Cancelled)
            );
        }
        assert_eq!(assert_chain(&db, 1).await.len(), 2);
    }

    /// A move inside a transaction that rolls back leaves no history row; one
    /// that commits leaves one.
    async fn a_rolled_back_move_leaves_no_history(db: Db<DB>) {
        setup(&db, 2).await;
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let outcome = Logged::cancel().apply(&mut tx, 1_i64).await.unwrap();
        assert!(outcome.is_applied());
        tx.rollback().await.unwrap();
        assert!(history(&db, 1).await.is_empty());
        assert_eq!(db.transfer(1).await.0, "pending");

        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let outcome = Logged::cancel().apply(&mut tx, 2_i64).await.unwrap();
        let won = tx.commit(outcome.won()).await.unwrap();
        assert!(won.is_some());
        assert_eq!(assert_chain(&db, 2).await.len(), 1);
    }

    /// The history table refuses `UPDATE` and `DELETE`.
    async fn the_history_table_is_append_only(db: Db<DB>) {
        setup(&db, 1).await;
        assert!(
            Logged::start()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in [
            "UPDATE transfer_history SET to_state = 'sent'",
            "DELETE FROM transfer_history",
        ] {
            let refused = DB::execute(&mut conn, statement, &[]).await;
            let error = refused.expect_err(statement).to_string();
            assert!(error.contains("append-only"), "{statement}: {error}");
        }
        drop(conn);
        assert_eq!(assert_chain(&db, 1).await.len(), 1);
    }

    /// The actor, reason and JSON details of a noted move land in its history
    /// row, also with an expected occurrence and inside a transaction; details
    /// that are not JSON refuse the move; moves without a note record none.
    async fn a_noted_move_records_who_and_why(db: Db<DB>) {
        setup(&db, 4).await;
        let note = Note::by("alice@ops")
            .because("customer asked")
            .details(r#"{"ticket": 4211}"#);
        assert!(
            Logged::cancel()
                .noted(note.clone())
                .apply(&db.pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let rows = assert_chain(&db, 1).await;
        assert_eq!(rows[0].actor.as_deref(), Some("alice@ops"));
        assert_eq!(rows[0].reason.as_deref(), Some("customer asked"));
        let details = rows[0].details.clone().unwrap_or_default().replace(' ', "");
        assert_eq!(details, r#"{"ticket":4211}"#);

        // Without a note: no actor, reason or details.
        assert!(
            Logged::start()
                .apply(&db.pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        let rows = assert_chain(&db, 2).await;
        assert_eq!(
            (
                rows[0].actor.clone(),
                rows[0].reason.clone(),
                rows[0].details.clone()
            ),
            (None, None, None)
        );

        // With an expected occurrence, and in a transaction.
        let expecting = Logged::pause().expecting(1).noted(Note::by("bob"));
        assert!(expecting.apply(&db.pool, 2_i64).await.unwrap().is_applied());
        assert_eq!(assert_chain(&db, 2).await[1].actor.as_deref(), Some("bob"));
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let outcome = Logged::cancel()
            .noted(Note::by("carol").because("duplicate"))
            .apply(&mut tx, 3_i64)
            .await
            .unwrap();
        tx.commit(outcome.won()).await.unwrap();
        assert_eq!(
            assert_chain(&db, 3).await[0].reason.as_deref(),
            Some("duplicate")
        );

        // Details that are not JSON: the move is refused with them.
        let refused = Logged::cancel()
            .noted(Note::by("dave").details("not json"))
            .apply(&db.pool, 4_i64)
            .await;
        assert!(
            matches!(refused, Err(Error::NoteDetails { .. })),
            "{refused:?}"
        );
        assert_eq!(db.transfer(4).await, ("pending".to_owned(), 0));
        assert!(history(&db, 4).await.is_empty());
    }

    /// A note on a claim, a batch, a follow-up verdict and a recovery's verdict
    /// lands in the history row of every move it made, and only there; a
    /// machine without a history table refuses a noted claim, batch or
    /// verdict instead of dropping the note.
    async fn claims_batches_and_follow_ups_record_their_notes(db: Db<DB>) {
        setup(&db, 8).await;
        // A claim: both rows' history rows carry the note.
        let claimed = Logged::start()
            .noted(Note::by("claimer").because("nightly run"))
            .claim::<_, i64>(&db.pool, 2)
            .await
            .unwrap();
        let ids: Vec<i64> = claimed.iter().map(|w| *w.key()).collect();
        assert_eq!(ids, [1, 2]);
        for id in [1, 2] {
            assert_eq!(
                noted_entering(&db, id, Logged::Sending).await,
                who("claimer", "nightly run")
            );
        }

        // A batch, with details and a repeated and a missing key: one history
        // row per move, each with the note.
        let outcomes = Logged::cancel()
            .noted(
                Note::by("ops")
                    .because("bulk cancel")
                    .details(r#"{"batch": 7}"#),
            )
            .apply_many(&db.pool, &[3_i64, 4, 3, 99])
            .await
            .unwrap();
        let applied = outcomes.iter().filter(|o| o.is_applied()).count();
        assert_eq!(applied, 2, "{outcomes:?}");
        for id in [3, 4] {
            let rows = assert_chain(&db, id).await;
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].actor.as_deref(), Some("ops"));
            assert_eq!(rows[0].reason.as_deref(), Some("bulk cancel"));
            let details = rows[0].details.clone().unwrap_or_default().replace(' ', "");
            assert_eq!(details, r#"{"batch":7}"#);
        }

        // Follow-ups: a noted verdict, and a plain one that records no note.
        let mut claimed = claimed.into_iter();
        let first = claimed.next().unwrap();
        let finished = first
            .finish(&db.pool, |_: Effect<Logged, i64>| async {
                Verdict::from(Logged::fail().noted(Note::by("bank").because("account closed")))
            })
            .await
            .unwrap();
        assert!(
            matches!(
                finished,
                Finished::Failed {
                    state: Logged::Failed,
                    ..
                }
            ),
            "{finished:?}"
        );
        assert_eq!(
            noted_entering(&db, 1, Logged::Failed).await,
            who("bank", "account closed")
        );
        let second = claimed.next().unwrap();
        let finished = second
            .finish(&db.pool, |_: Effect<Logged, i64>| async { Verdict::done() })
            .await
            .unwrap();
        assert!(
            matches!(
                finished,
                Finished::Done {
                    state: Logged::Sent,
                    ..
                }
            ),
            "{finished:?}"
        );
        assert_eq!(
            noted_entering(&db, 2, Logged::Sent).await,
            Some((None, None))
        );

        // Recovery's verdict: the same.
        assert!(
            Logged::start()
                .apply(&db.pool, 5_i64)
                .await
                .unwrap()
                .is_applied()
        );
        db.backdate_leases().await;
        let report = stateguard::recover(
            &db.pool,
            Logged::Sending,
            10,
            |_: Effect<Logged, i64>| async {
                Verdict::from(
                    Logged::confirm().noted(Note::by("recovery").because("bank confirmed")),
                )
            },
        )
        .await
        .unwrap();
        assert_eq!(report.done, 1, "{report:?}");
        assert_eq!(
            noted_entering(&db, 5, Logged::Sent).await,
            who("recovery", "bank confirmed")
        );

        // A note on a machine without a history table, in a call or in a
        // verdict, does not compile (tests/ui/api/noted-without-history.rs).
    }
}

/// `n` pending transfers, and the DDL: the history table, its append-only
/// triggers, and the enforcement of the machine.
async fn setup<DB: TestBackend>(db: &Db<DB>, n: i64) {
    db.transfers(n).await;
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in stateguard::ddl::generate::<Logged>(DB::DIALECT).up() {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

async fn history<DB: TestBackend>(db: &Db<DB>, id: i64) -> Vec<HistoryRow<Logged>>
where
    i64: Key<DB>,
{
    Logged::history(&db.pool, id).await.unwrap()
}

/// Each history row's source is the previous row's target, the first
/// leaves `pending`, there are as many as the version says, and the last
/// ends where the row is.
async fn assert_chain<DB: TestBackend>(db: &Db<DB>, id: i64) -> Vec<HistoryRow<Logged>>
where
    i64: Key<DB>,
{
    let rows = history(db, id).await;
    let (status, version) = db.transfer(id).await;
    assert_eq!(rows.len() as i64, version, "transfer {id}: {rows:?}");
    let mut at = Logged::Pending;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.from, at, "transfer {id}, move {i}: {rows:?}");
        assert_eq!(row.occurrence, i as i64 + 1, "transfer {id}: {rows:?}");
        assert_eq!(row.transition.target(), row.to);
        assert!(row.transition.sources().contains(&row.from));
        at = row.to;
    }
    assert_eq!(at.as_str(), status, "transfer {id}");
    rows
}

const ROWS: i64 = 20;
const CANCELS: usize = 32;

/// Who and why of a move, as `(actor, reason)`, from the history row that
/// entered `to`.
async fn noted_entering<DB: TestBackend>(
    db: &Db<DB>,
    id: i64,
    to: Logged,
) -> Option<(Option<String>, Option<String>)>
where
    i64: Key<DB>,
{
    let rows = assert_chain(db, id).await;
    let row = rows.iter().rev().find(|r| r.to == to)?;
    Some((row.actor.clone(), row.reason.clone()))
}

fn who(actor: &str, reason: &str) -> Option<(Option<String>, Option<String>)> {
    Some((Some(actor.to_owned()), Some(reason.to_owned())))
}
