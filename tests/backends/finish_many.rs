//! `finish_many`: the effects of many wins at a bounded concurrency, one
//! heartbeat per batch, follow-ups a batch at a time, each row fenced by
//! its own lease.

use crate::common;
use crate::common::KeyColumn;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use common::{Bind, Db, TestBackend};
use stateguard::bounds::{Batched as BatchedDb, Key, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::key::shape::One;

use stateguard::{
    Effect, Error, Finished, FinishedRow, Retry, StateMachine, Verdict, Won, claim_expired,
    finish_many, recover_many,
};

/// A payout whose `done` binds nothing: its rows finish a batch at a
/// time. History, a version column and `retry(…)`.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "batched",
    column = "status",
    key = "id",
    version = "version",
    history = "batched_history"
)]
enum Batched {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(
        lease = "600ms",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(max = 5, backoff = "1s..1h", attempts = "attempts", next_attempt = "next_attempt_at")
    ))]
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// A payout whose `done` binds values per row: the bank's reference, a
/// fee that may be NULL and the receipt's bytes, which its history row
/// and its message accompany.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "referenced",
    column = "status",
    key = "id",
    version = "version",
    history = "referenced_history"
)]
pub(crate) enum Referenced {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(
        confirm -> Sent,
        set(bank_ref = bind(String), fee = bind(Option<i64>), receipt = bind(Vec<u8>)),
        emit("referenced.sent", payload(status, version, bank_ref, fee))
    )]
    #[transition(fail -> Failed, emit("referenced.failed"))]
    Sending,
    Sent,
    Failed,
}

backend_tests! {
    impl Tests {
        "many_race" => racing_workers_finish_every_row_once (flavor = "multi_thread", worker_threads = 4),
        "many_mixed" => mixed_verdicts_land_on_their_rows,
        "many_values" => per_row_values_land_on_their_rows,
        "many_fenced" => a_stalled_batch_writes_nothing_for_rows_taken_over,
        "many_skipped" => rows_taken_over_before_their_effects_are_skipped,
        "many_waiting" => a_row_taken_over_while_it_waits_for_its_turn_is_skipped,
        "many_refused" => a_batch_it_cannot_finish_is_refused_before_any_effect,
        "many_recover" => concurrent_recoveries_run_each_effect_once (flavor = "multi_thread", worker_threads = 4),
    }
}

/// `CREATE TABLE` for `table` (`batched` or `referenced`), with a
/// `bank_ref` and the retry columns.
fn create<DB: TestBackend>(table: &str) -> &'static str {
    macro_rules! create {
        ($table:literal) => {
            match DB::DIALECT {
                Dialect::Postgres => concat!(
                    "CREATE TABLE ",
                    $table,
                    " (id BIGINT PRIMARY KEY, ",
                    "status TEXT NOT NULL DEFAULT 'pending', version BIGINT NOT NULL DEFAULT 0, ",
                    "sending_since TIMESTAMPTZ, sent_at TIMESTAMPTZ, bank_ref TEXT, ",
                    "fee BIGINT, receipt BYTEA, ",
                    "attempts INT NOT NULL DEFAULT 0, next_attempt_at TIMESTAMPTZ)"
                ),
                Dialect::Sqlite => concat!(
                    "CREATE TABLE ",
                    $table,
                    " (id INTEGER PRIMARY KEY, ",
                    "status TEXT NOT NULL DEFAULT 'pending', version INTEGER NOT NULL DEFAULT 0, ",
                    "sending_since TEXT, sent_at TEXT, bank_ref TEXT, fee INTEGER, receipt BLOB, ",
                    "attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at TEXT)"
                ),
                _ => concat!(
                    "CREATE TABLE ",
                    $table,
                    " (id BIGINT PRIMARY KEY, ",
                    "status VARCHAR(32) NOT NULL DEFAULT 'pending', ",
                    "version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3) NULL, ",
                    "sent_at DATETIME(3) NULL, ",
                    "bank_ref VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, ",
                    "fee BIGINT NULL, receipt VARBINARY(64) NULL, ",
                    "attempts INT NOT NULL DEFAULT 0, next_attempt_at DATETIME(3) NULL)"
                ),
            }
        };
    }
    match table {
        "batched" => create!("batched"),
        _ => create!("referenced"),
    }
}

/// Rows `$1..=$2` of `table`, pending.
fn seed<DB: TestBackend>(table: &str) -> &'static str {
    macro_rules! seed {
        ($table:literal) => {
            match DB::DIALECT {
                // One row back, so that the helper's fetch runs the insert
                // to its end.
                Dialect::Postgres => concat!(
                    "WITH i AS (INSERT INTO ", $table, " (id) SELECT g FROM ",
                    "generate_series($1, $2) g RETURNING 1) SELECT COUNT(*) FROM i"
                ),
                Dialect::Sqlite => concat!(
                    "WITH RECURSIVE s(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2) ",
                    "INSERT INTO ", $table, " (id) SELECT i FROM s"
                ),
                // Digits crossed, up to 100,000: MariaDB caps recursion.
                _ => concat!(
                    "INSERT INTO ", $table, " (id) SELECT n FROM (SELECT a.d + 10 * b.d + ",
                    "100 * c.d + 1000 * e.d + 10000 * f.d + 1 AS n FROM ",
                    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) f) s WHERE n BETWEEN ? AND ?"
                ),
            }
        };
    }
    match table {
        "batched" => seed!("batched"),
        _ => seed!("referenced"),
    }
}

/// The machine's table (and its DDL: history table, triggers) with rows
/// `1..=n` pending.
async fn setup<DB: TestBackend, S: StateMachine>(db: &Db<DB>, table: &str, n: i64) {
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create::<DB>(table), &[])
        .await
        .unwrap();
    for statement in stateguard::ddl::generate::<S>(DB::DIALECT).up() {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    for from in (1..=n).step_by(1000) {
        let to = (from + 999).min(n);
        DB::execute(
            &mut conn,
            seed::<DB>(table),
            &[Bind::Int(from), Bind::Int(to)],
        )
        .await
        .unwrap();
    }
}

/// One number a test statement returns.
async fn count<DB: TestBackend>(db: &Db<DB>, sql: &'static str) -> i64 {
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

/// `(status, bank_ref, next_attempt_at IS NOT NULL)` of a row of `batched`
/// or `referenced`.
async fn row<DB: TestBackend>(db: &Db<DB>, table: &str, id: i64) -> (String, Option<String>, bool) {
    let read = match (DB::DIALECT, table) {
        (Dialect::Postgres, "batched") => {
            "SELECT status, bank_ref, next_attempt_at IS NOT NULL FROM batched WHERE id = $1"
        }
        (Dialect::Postgres, _) => {
            "SELECT status, bank_ref, next_attempt_at IS NOT NULL FROM referenced WHERE id = $1"
        }
        (Dialect::Sqlite, "batched") => {
            "SELECT status, bank_ref, next_attempt_at IS NOT NULL FROM batched WHERE id = ?"
        }
        (Dialect::Sqlite, _) => {
            "SELECT status, bank_ref, next_attempt_at IS NOT NULL FROM referenced WHERE id = ?"
        }
        (_, "batched") => {
            "SELECT status, bank_ref, CAST(next_attempt_at IS NOT NULL AS SIGNED) FROM batched \
             WHERE id = ?"
        }
        _ => {
            "SELECT status, bank_ref, CAST(next_attempt_at IS NOT NULL AS SIGNED) FROM referenced \
             WHERE id = ?"
        }
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (status, bank_ref, next): (String, Option<String>, bool) =
        DB::fetch_one(&mut conn, read, &[Bind::Int(id)])
            .await
            .unwrap();
    (status, bank_ref, next)
}

/// What the provider saw: how many calls per effect key.
#[derive(Default)]
struct Calls(Mutex<HashMap<String, u32>>);

impl Calls {
    fn record<S: StateMachine>(&self, effect: &Effect<S, i64>) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(effect.effect_key().to_owned())
            .or_default() += 1;
    }

    fn counts(&self) -> HashMap<String, u32> {
        self.0.lock().unwrap().clone()
    }
}

/// Each row's `finished`, by key.
fn by_key<S: StateMachine>(
    rows: Vec<FinishedRow<S, i64>>,
) -> HashMap<i64, Result<Finished<S>, Error>> {
    rows.into_iter()
        .map(|row| (row.key, row.finished))
        .collect()
}

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + BatchedDb> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
    String: Key<DB>,
{
    /// Eight workers claim and batch-finish 20,000 rows: every row ends
    /// `sent` exactly once, each effect key is called once, and every
    /// row's history is `start` then `confirm`, occurrences 1 and 2.
    pub(crate) async fn racing_workers_finish_every_row_once(db: Db<DB>) {
        const ROWS: i64 = 20_000;
        setup::<DB, Batched>(&db, "batched", ROWS).await;
        let calls = std::sync::Arc::new(Calls::default());
        let mut workers = Vec::new();
        for _ in 0..8 {
            let (pool, calls) = (db.pool.clone(), calls.clone());
            workers.push(tokio::spawn(async move {
                let mut finished = 0_usize;
                loop {
                    let wins: Vec<Won<Batched, i64>> =
                        Batched::start().claim(&pool, 250).await.unwrap();
                    if wins.is_empty() {
                        return finished;
                    }
                    let rows = finish_many(&pool, wins, 32, |effect: Effect<Batched, i64>| {
                        calls.record(&effect);
                        async move {
                            tokio::task::yield_now().await;
                            Verdict::done()
                        }
                    })
                    .await
                    .unwrap();
                    for row in rows {
                        match row.finished {
                            Ok(Finished::Done {
                                state: Batched::Sent,
                                occurrence: 2,
                            }) => finished += 1,
                            other => panic!("row {} finished as {other:?}", row.key),
                        }
                    }
                }
            }));
        }
        let mut total = 0;
        for worker in workers {
            total += worker.await.unwrap();
        }
        assert_eq!(total, ROWS as usize);
        let counts = calls.counts();
        assert_eq!(counts.len(), ROWS as usize, "one effect key per row");
        assert!(counts.values().all(|&n| n == 1), "an effect key ran twice");
        let sent = match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT COUNT(*)::BIGINT FROM batched WHERE status = 'sent' AND version = 2 AND sent_at IS NOT NULL"
            }
            Dialect::Sqlite => {
                "SELECT COUNT(*) FROM batched WHERE status = 'sent' AND version = 2 AND sent_at IS NOT NULL"
            }
            _ => {
                "SELECT CAST(COUNT(*) AS SIGNED) FROM batched WHERE status = 'sent' AND version = 2 AND sent_at IS NOT NULL"
            }
        };
        assert_eq!(count(&db, sent).await, ROWS);
        // Every row's history is the chain start (1), confirm (2).
        let chained = match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT COUNT(*)::BIGINT FROM (SELECT id FROM batched_history GROUP BY id \
                HAVING COUNT(*) = 2 AND MIN(occurrence) = 1 AND MAX(occurrence) = 2 \
                AND SUM(CASE WHEN transition = 'confirm' AND from_state = 'sending' AND to_state = 'sent' AND occurrence = 2 THEN 1 ELSE 0 END) = 1) c"
            }
            Dialect::Sqlite => {
                "SELECT COUNT(*) FROM (SELECT id FROM batched_history GROUP BY id \
                HAVING COUNT(*) = 2 AND MIN(occurrence) = 1 AND MAX(occurrence) = 2 \
                AND SUM(CASE WHEN transition = 'confirm' AND from_state = 'sending' AND to_state = 'sent' AND occurrence = 2 THEN 1 ELSE 0 END) = 1) c"
            }
            _ => {
                "SELECT CAST(COUNT(*) AS SIGNED) FROM (SELECT id FROM batched_history GROUP BY id \
                HAVING COUNT(*) = 2 AND MIN(occurrence) = 1 AND MAX(occurrence) = 2 \
                AND SUM(CASE WHEN transition = 'confirm' AND from_state = 'sending' AND to_state = 'sent' AND occurrence = 2 THEN 1 ELSE 0 END) = 1) c"
            }
        };
        assert_eq!(count(&db, chained).await, ROWS);
        let history = Batched::history(&db.pool, ROWS).await.unwrap();
        let moves: Vec<_> = history.iter().map(|h| h.transition.name()).collect();
        assert_eq!(moves, ["start", "confirm"]);
    }

    /// One batch, three verdicts: `done`, `failed` and a later attempt.
    /// Each lands on its own rows, with its history.
    pub(crate) async fn mixed_verdicts_land_on_their_rows(db: Db<DB>) {
        setup::<DB, Batched>(&db, "batched", 30).await;
        let wins: Vec<Won<Batched, i64>> = Batched::start().claim(&db.pool, 30).await.unwrap();
        assert_eq!(wins.len(), 30);
        let rows = finish_many(
            &db.pool,
            wins,
            8,
            |effect: Effect<Batched, i64>| async move {
                match effect.key() % 3 {
                    0 => Verdict::done(),
                    1 => Verdict::failed(),
                    _ => Retry::after(Duration::from_secs(3600))
                        .because("bank busy")
                        .into(),
                }
            },
        )
        .await
        .unwrap();
        let keys: Vec<i64> = rows.iter().map(|row| row.key).collect();
        assert_eq!(
            keys,
            (1..=30).collect::<Vec<_>>(),
            "rows in the wins' order"
        );
        for (id, finished) in by_key(rows) {
            let (status, _, next) = row(&db, "batched", id).await;
            let history = Batched::history(&db.pool, id).await.unwrap();
            let last = history.last().unwrap().transition.name();
            match id % 3 {
                0 => {
                    assert!(matches!(
                        finished,
                        Ok(Finished::Done {
                            state: Batched::Sent,
                            occurrence: 2
                        })
                    ));
                    assert_eq!((status.as_str(), next, last), ("sent", false, "confirm"));
                }
                1 => {
                    assert!(matches!(
                        finished,
                        Ok(Finished::Failed {
                            state: Batched::Failed,
                            occurrence: 2
                        })
                    ));
                    assert_eq!((status.as_str(), next, last), ("failed", false, "fail"));
                }
                _ => {
                    assert!(matches!(finished, Ok(Finished::RetryLater)), "{finished:?}");
                    assert_eq!((status.as_str(), next, last), ("sending", true, "start"));
                }
            }
        }
        // The postponed rows wait for their hour, not for their lease.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let due = claim_expired::<_, i64, _>(&db.pool, Batched::Sending, 100)
            .await
            .unwrap();
        assert!(due.is_empty(), "a postponed row was taken over early");
    }

    /// A follow-up that binds values per row (the bank's reference, a
    /// fee that may be NULL, the receipt's bytes) writes each row's own,
    /// beside `failed` verdicts in the same batch, with each row's
    /// history row and message: 120 of 150 rows confirmed, so that the
    /// values go in runs of 64 and the last run is padded. On PostgreSQL a statement
    /// trigger counts the updates: a batch, not one per row.
    pub(crate) async fn per_row_values_land_on_their_rows(db: Db<DB>)
    where
        Referenced: stateguard::bounds::FollowUpValues<DB>,
    {
        const ROWS: i64 = 150;
        let bank_ref = |id: i64| format!("ref-{id} 'q' \"dq\" \\ ü ✓");
        let fee = |id: i64| (id % 3 != 0).then_some(id * 100 - 7);
        let receipt = |id: i64| vec![0, 0xff, id as u8, b'\'', 0x80];
        setup::<DB, Referenced>(&db, "referenced", ROWS).await;
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in stateguard::outbox::ddl(DB::DIALECT) {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        if DB::DIALECT == Dialect::Postgres {
            for statement in [
                "CREATE TABLE referenced_updates (n BIGINT)",
                "CREATE FUNCTION referenced_updated() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN INSERT INTO referenced_updates VALUES (1); RETURN NULL; END $$",
                "CREATE TRIGGER referenced_updated AFTER UPDATE ON referenced \
                 FOR EACH STATEMENT EXECUTE FUNCTION referenced_updated()",
            ] {
                DB::execute(&mut conn, statement, &[]).await.unwrap();
            }
        }
        drop(conn);
        let wins: Vec<Won<Referenced, i64>> = Referenced::start()
            .claim(&db.pool, ROWS as u32)
            .await
            .unwrap();
        assert_eq!(wins.len(), ROWS as usize);
        let rows = finish_many(
            &db.pool,
            wins,
            16,
            |effect: Effect<Referenced, i64>| async move {
                let id = *effect.key();
                match id % 5 {
                    0 => Verdict::failed(),
                    _ => Referenced::confirm(bank_ref(id), fee(id), receipt(id)).into(),
                }
            },
        )
        .await
        .unwrap();
        let read = match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT status, bank_ref, fee, receipt FROM referenced WHERE id = $1"
            }
            Dialect::Sqlite => "SELECT status, bank_ref, fee, receipt FROM referenced WHERE id = ?",
            _ => "SELECT CAST(status AS CHAR), bank_ref, fee, receipt FROM referenced WHERE id = ?",
        };
        let message = match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT topic, convert_from(payload, 'UTF8') FROM stateguard_outbox \
                 WHERE order_key = $1"
            }
            Dialect::Sqlite => {
                "SELECT topic, CAST(payload AS TEXT) FROM stateguard_outbox WHERE order_key = ?"
            }
            _ => {
                "SELECT CAST(topic AS CHAR), CAST(payload AS CHAR) FROM stateguard_outbox \
                 WHERE order_key = ?"
            }
        };
        let mut conn = db.pool.acquire().await.unwrap();
        let finished = by_key(rows);
        assert_eq!(finished.len(), ROWS as usize);
        for (id, finished) in finished {
            let (status, stored_ref, stored_fee, stored_receipt): (
                String,
                Option<String>,
                Option<i64>,
                Option<Vec<u8>>,
            ) = DB::fetch_one(&mut conn, read, &[Bind::Int(id)])
                .await
                .unwrap();
            let order_key = format!("referenced.status:{id}");
            let (topic, payload): (String, String) =
                DB::fetch_one(&mut conn, message, &[Bind::Text(&order_key)])
                    .await
                    .unwrap();
            let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
            match id % 5 {
                0 => {
                    assert!(
                        matches!(finished, Ok(Finished::Failed { .. })),
                        "{finished:?}"
                    );
                    assert_eq!(
                        (status.as_str(), stored_ref, stored_fee, stored_receipt),
                        ("failed", None, None, None)
                    );
                    assert_eq!(topic, "referenced.failed");
                }
                _ => {
                    assert!(
                        matches!(finished, Ok(Finished::Done { .. })),
                        "{finished:?}"
                    );
                    assert_eq!(
                        (status.as_str(), stored_ref, stored_fee, stored_receipt),
                        ("sent", Some(bank_ref(id)), fee(id), Some(receipt(id))),
                        "row {id}"
                    );
                    assert_eq!(topic, "referenced.sent");
                    assert_eq!(
                        payload,
                        serde_json::json!({
                            "id": id, "status": "sent", "version": 2,
                            "bank_ref": bank_ref(id), "fee": fee(id),
                        })
                    );
                }
            }
        }
        // One message and one follow-up history row per row, no more
        // (a padded row writes none).
        let counted = match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT (SELECT COUNT(*) FROM stateguard_outbox)::BIGINT * 1000000 + \
                 (SELECT COUNT(*) FROM referenced_history WHERE transition = 'confirm' \
                 AND occurrence = 2)::BIGINT * 1000 + \
                 (SELECT COUNT(*) FROM referenced_history WHERE transition = 'fail' \
                 AND occurrence = 2)::BIGINT"
            }
            Dialect::Sqlite => {
                "SELECT (SELECT COUNT(*) FROM stateguard_outbox) * 1000000 + \
                 (SELECT COUNT(*) FROM referenced_history WHERE transition = 'confirm' \
                 AND occurrence = 2) * 1000 + \
                 (SELECT COUNT(*) FROM referenced_history WHERE transition = 'fail' \
                 AND occurrence = 2)"
            }
            _ => {
                "SELECT CAST((SELECT COUNT(*) FROM stateguard_outbox) * 1000000 + \
                 (SELECT COUNT(*) FROM referenced_history WHERE transition = 'confirm' \
                 AND occurrence = 2) * 1000 + \
                 (SELECT COUNT(*) FROM referenced_history WHERE transition = 'fail' \
                 AND occurrence = 2) AS SIGNED)"
            }
        };
        let failed = ROWS / 5;
        assert_eq!(
            count(&db, counted).await,
            ROWS * 1_000_000 + (ROWS - failed) * 1000 + failed
        );
        if DB::DIALECT == Dialect::Postgres {
            // The claim, then per flush one `fail` and a `confirm` per 64
            // rows (4 in all when one flush takes the batch): one per row
            // would be 121.
            let updates = count(&db, "SELECT COUNT(*)::BIGINT FROM referenced_updates").await;
            assert!(updates <= 16, "{updates} updates for {ROWS} rows");
        }
    }

    /// A worker stalls in its effects past the lease, and another takes
    /// half of its rows over: the heartbeat and the batched follow-up
    /// write nothing for those rows, and finish the rest.
    pub(crate) async fn a_stalled_batch_writes_nothing_for_rows_taken_over(db: Db<DB>) {
        setup::<DB, Batched>(&db, "batched", 10).await;
        let wins: Vec<Won<Batched, i64>> = Batched::start().claim(&db.pool, 10).await.unwrap();
        let taken = tokio::sync::Notify::new();
        let calls = Calls::default();
        let stalled = finish_many(&db.pool, wins, 10, |effect: Effect<Batched, i64>| {
            calls.record(&effect);
            let taken = &taken;
            async move {
                // Rows 1..=5 wait until another worker has taken them.
                if *effect.key() <= 5 {
                    taken.notified().await;
                }
                Verdict::done()
            }
        });
        let thief = async {
            // Past the lease for rows 1..=5 only: their stamps go back an
            // hour, as if their worker had stalled that long.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let backdate = match DB::DIALECT {
                Dialect::Postgres => {
                    "UPDATE batched SET sending_since = sending_since - INTERVAL '1 hour' WHERE id <= 5"
                }
                Dialect::Sqlite => {
                    "UPDATE batched SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours') WHERE id <= 5"
                }
                _ => {
                    "UPDATE batched SET sending_since = sending_since - INTERVAL 1 HOUR WHERE id <= 5"
                }
            };
            let mut conn = db.pool.acquire().await.unwrap();
            DB::execute(&mut conn, backdate, &[]).await.unwrap();
            drop(conn);
            // The oldest five: on a slow machine the short lease of the
            // others may have run out too, but they are still held.
            let taken_over = claim_expired::<_, i64, _>(&db.pool, Batched::Sending, 5)
                .await
                .unwrap();
            let mut keys: Vec<i64> = taken_over.iter().map(|won| *won.key()).collect();
            keys.sort();
            assert_eq!(keys, [1, 2, 3, 4, 5]);
            // Let a heartbeat find them gone before the effects end.
            tokio::time::sleep(Duration::from_millis(300)).await;
            for _ in 0..5 {
                taken.notify_one();
            }
            taken_over
        };
        let (rows, taken_over) = tokio::join!(stalled, thief);
        for (id, finished) in by_key(rows.unwrap()) {
            match id {
                1..=5 => assert!(
                    matches!(
                        finished,
                        Ok(Finished::LeaseLost {
                            current: Batched::Sending
                        })
                    ),
                    "row {id}: {finished:?}"
                ),
                _ => assert!(
                    matches!(finished, Ok(Finished::Done { .. })),
                    "row {id}: {finished:?}"
                ),
            }
        }
        for id in 1..=10 {
            let (status, _, _) = row(&db, "batched", id).await;
            assert_eq!(status, if id <= 5 { "sending" } else { "sent" }, "row {id}");
        }
        // The worker that took them over finishes them, under its lease.
        let rows = finish_many(&db.pool, taken_over, 4, |effect: Effect<Batched, i64>| {
            calls.record(&effect);
            async { Verdict::done() }
        })
        .await
        .unwrap();
        assert!(
            rows.iter()
                .all(|row| matches!(row.finished, Ok(Finished::Done { .. })))
        );
        // Rows 1..=5 ran twice under one effect key each, the rest once.
        let counts = calls.counts();
        assert_eq!(counts.len(), 10);
        assert_eq!(counts.values().filter(|&&n| n == 2).count(), 5);
    }

    /// Wins whose leases may have run out are renewed first, in one
    /// statement; those another worker took meanwhile are skipped, and
    /// their effects never run.
    pub(crate) async fn rows_taken_over_before_their_effects_are_skipped(db: Db<DB>) {
        setup::<DB, Batched>(&db, "batched", 6).await;
        let wins: Vec<Won<Batched, i64>> = Batched::start().claim(&db.pool, 6).await.unwrap();
        // A third of the lease goes by: the wins are no longer fresh.
        tokio::time::sleep(Duration::from_millis(250)).await;
        let backdate = match DB::DIALECT {
            Dialect::Postgres => {
                "UPDATE batched SET sending_since = sending_since - INTERVAL '1 hour' WHERE id <= 3"
            }
            Dialect::Sqlite => {
                "UPDATE batched SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours') WHERE id <= 3"
            }
            _ => "UPDATE batched SET sending_since = sending_since - INTERVAL 1 HOUR WHERE id <= 3",
        };
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, backdate, &[]).await.unwrap();
        drop(conn);
        // The oldest three: rows 4..=6 may have expired too on a slow
        // machine (the lease is short), but their holder still has them.
        let taken_over = claim_expired::<_, i64, _>(&db.pool, Batched::Sending, 3)
            .await
            .unwrap();
        let mut taken: Vec<i64> = taken_over.iter().map(|won| *won.key()).collect();
        taken.sort_unstable();
        assert_eq!(taken, [1, 2, 3]);
        let calls = Calls::default();
        let rows = finish_many(&db.pool, wins, 4, |effect: Effect<Batched, i64>| {
            calls.record(&effect);
            async { Verdict::done() }
        })
        .await
        .unwrap();
        for (id, finished) in by_key(rows) {
            match id {
                1..=3 => assert!(
                    matches!(
                        finished,
                        Ok(Finished::Skipped {
                            current: Some(Batched::Sending)
                        })
                    ),
                    "row {id}: {finished:?}"
                ),
                _ => assert!(
                    matches!(finished, Ok(Finished::Done { .. })),
                    "row {id}: {finished:?}"
                ),
            }
        }
        assert_eq!(calls.counts().len(), 3, "only the rows still held ran");
    }

    /// One effect at a time: row 1's takes longer than a third of the
    /// lease, and row 3 is taken over while it waits for its turn. The
    /// heartbeat finds it gone, so its effect never runs here; row 2's
    /// lease, renewed by the same heartbeat, holds.
    pub(crate) async fn a_row_taken_over_while_it_waits_for_its_turn_is_skipped(db: Db<DB>) {
        setup::<DB, Batched>(&db, "batched", 3).await;
        let wins: Vec<Won<Batched, i64>> = Batched::start().claim(&db.pool, 3).await.unwrap();
        let calls = Calls::default();
        let slow = finish_many(&db.pool, wins, 1, |effect: Effect<Batched, i64>| {
            calls.record(&effect);
            async move {
                if *effect.key() == 1 {
                    tokio::time::sleep(Duration::from_millis(450)).await;
                }
                Verdict::done()
            }
        });
        let thief = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let backdate = match DB::DIALECT {
                Dialect::Postgres => {
                    "UPDATE batched SET sending_since = sending_since - INTERVAL '1 hour' WHERE id = 3"
                }
                Dialect::Sqlite => {
                    "UPDATE batched SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours') WHERE id = 3"
                }
                _ => {
                    "UPDATE batched SET sending_since = sending_since - INTERVAL 1 HOUR WHERE id = 3"
                }
            };
            let mut conn = db.pool.acquire().await.unwrap();
            DB::execute(&mut conn, backdate, &[]).await.unwrap();
            drop(conn);
            // The oldest one, whatever a slow machine let expire besides.
            let taken = claim_expired::<_, i64, _>(&db.pool, Batched::Sending, 1)
                .await
                .unwrap();
            let taken: Vec<i64> = taken.iter().map(|won| *won.key()).collect();
            assert_eq!(taken, [3]);
        };
        let (rows, ()) = tokio::join!(slow, thief);
        let rows = by_key(rows.unwrap());
        assert!(
            matches!(rows[&1], Ok(Finished::Done { .. })),
            "{:?}",
            rows[&1]
        );
        assert!(
            matches!(rows[&2], Ok(Finished::Done { .. })),
            "{:?}",
            rows[&2]
        );
        assert!(
            matches!(
                rows[&3],
                Ok(Finished::Skipped {
                    current: Some(Batched::Sending)
                })
            ),
            "{:?}",
            rows[&3]
        );
        assert_eq!(calls.counts().len(), 2, "row 3's effect ran");
        assert_eq!(row(&db, "batched", 3).await.0, "sending");
    }

    /// Wins of two states, of a state that is not in flight, or a
    /// concurrency of 0, are refused before any effect runs, and the
    /// wins' rows stay as they were.
    pub(crate) async fn a_batch_it_cannot_finish_is_refused_before_any_effect(db: Db<DB>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        setup::<DB, Batched>(&db, "batched", 3).await;
        let ran = AtomicUsize::new(0);
        let effect = |_: Effect<Batched, i64>| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Verdict::done() }
        };
        let claim = || async { Batched::start().claim(&db.pool, 3).await.unwrap() };
        let mut wins: Vec<Won<Batched, i64>> = claim().await;
        let refused = finish_many(&db.pool, wins, 0, effect).await;
        assert!(
            matches!(
                refused,
                Err(Error::Misuse(stateguard::Misuse::BatchOfWins { .. }))
            ),
            "{refused:?}"
        );
        assert_eq!(refused.unwrap_err().kind(), stateguard::ErrorKind::Misuse);
        // Row 3 moves on to `sent`: a win of a state that is not in flight.
        let sent = Batched::confirm().apply(&db.pool, 3_i64).await.unwrap();
        let sent = match sent {
            stateguard::Outcome::Applied(won) => won,
            other => panic!("row 3 not confirmed: {other:?}"),
        };
        let refused = finish_many(&db.pool, vec![sent], 4, effect).await;
        assert!(
            matches!(
                refused,
                Err(Error::Misuse(stateguard::Misuse::NotInFlight { .. }))
            ),
            "{refused:?}"
        );
        // Rows 1 and 2, taken over after their leases, beside row 3's win.
        let mut conn = db.pool.acquire().await.unwrap();
        let backdate = match DB::DIALECT {
            Dialect::Postgres => {
                "UPDATE batched SET sending_since = sending_since - INTERVAL '1 hour'"
            }
            Dialect::Sqlite => {
                "UPDATE batched SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours')"
            }
            _ => "UPDATE batched SET sending_since = sending_since - INTERVAL 1 HOUR",
        };
        DB::execute(&mut conn, backdate, &[]).await.unwrap();
        drop(conn);
        wins = claim_expired::<_, i64, _>(&db.pool, Batched::Sending, 10)
            .await
            .unwrap();
        assert_eq!(wins.len(), 2);
        let mixed = Batched::confirm()
            .apply(&db.pool, 2_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        wins.retain(|won| *won.key() == 1);
        wins.push(mixed);
        let refused = finish_many(&db.pool, wins, 4, effect).await;
        assert!(
            matches!(
                refused,
                Err(Error::Misuse(stateguard::Misuse::BatchOfWins { .. }))
            ),
            "{refused:?}"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(row(&db, "batched", 1).await.0, "sending");
    }

    /// Rows whose workers died, recovered by four concurrent passes, each
    /// running 16 effects at once: every row ends `sent`, each effect key
    /// runs once, as attempt 2, and the attempts column counts exactly the
    /// two attempts made (the rows waiting for their turn keep their
    /// leases, so no other pass takes one over).
    pub(crate) async fn concurrent_recoveries_run_each_effect_once(db: Db<DB>) {
        const ROWS: i64 = 400;
        setup::<DB, Batched>(&db, "batched", ROWS).await;
        let wins: Vec<Won<Batched, i64>> =
            Batched::start().claim(&db.pool, ROWS as u32).await.unwrap();
        assert_eq!(wins.len(), ROWS as usize);
        // Their worker dies: the leases run out.
        drop(wins);
        let backdate = match DB::DIALECT {
            Dialect::Postgres => {
                "UPDATE batched SET sending_since = sending_since - INTERVAL '1 hour'"
            }
            Dialect::Sqlite => {
                "UPDATE batched SET sending_since = strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours')"
            }
            _ => "UPDATE batched SET sending_since = sending_since - INTERVAL 1 HOUR",
        };
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, backdate, &[]).await.unwrap();
        drop(conn);
        let attempts = std::sync::Arc::new(Mutex::new(Vec::new()));
        let calls = std::sync::Arc::new(Calls::default());
        let mut passes = Vec::new();
        for _ in 0..4 {
            let (pool, calls, attempts) = (db.pool.clone(), calls.clone(), attempts.clone());
            passes.push(tokio::spawn(async move {
                recover_many(
                    &pool,
                    Batched::Sending,
                    150,
                    16,
                    |effect: Effect<Batched, i64>| {
                        calls.record(&effect);
                        attempts.lock().unwrap().push(effect.attempt());
                        async {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            Verdict::done()
                        }
                    },
                )
                .await
                .unwrap()
            }));
        }
        let mut done = 0;
        for pass in passes {
            let pass = pass.await.unwrap();
            assert!(pass.errors.is_empty(), "{:?}", pass.errors);
            assert_eq!(pass.claimed, pass.done);
            done += pass.done;
        }
        // What the four passes left (at most 600 of 400 rows fit), another
        // finishes.
        while done < ROWS as usize {
            let pass = recover_many(
                &db.pool,
                Batched::Sending,
                150,
                16,
                |effect: Effect<Batched, i64>| {
                    calls.record(&effect);
                    attempts.lock().unwrap().push(effect.attempt());
                    async { Verdict::done() }
                },
            )
            .await
            .unwrap();
            assert!(pass.claimed > 0, "rows left in flight that no pass takes");
            done += pass.done;
        }
        assert_eq!(done, ROWS as usize);
        let counts = calls.counts();
        assert_eq!(counts.len(), ROWS as usize);
        assert!(counts.values().all(|&n| n == 1), "an effect ran twice");
        assert!(attempts.lock().unwrap().iter().all(|a| *a == Some(2)));
        let counted = match DB::DIALECT {
            Dialect::Postgres => {
                "SELECT COUNT(*)::BIGINT FROM batched WHERE status = 'sent' AND attempts = 2"
            }
            Dialect::Sqlite => {
                "SELECT COUNT(*) FROM batched WHERE status = 'sent' AND attempts = 2"
            }
            _ => {
                "SELECT CAST(COUNT(*) AS SIGNED) FROM batched WHERE status = 'sent' AND attempts = 2"
            }
        };
        assert_eq!(count(&db, counted).await, ROWS);
    }
}

/// SQLite without statistics (no `ANALYZE`) would scan an index on the
/// status column, the one claims want, for every key of a batch. Every
/// batch statement that keys find is driven by its keys instead: its plan
/// starts with the keys' `json_each`, and finds each row by its key.
#[tokio::test]
async fn sqlite_batches_are_driven_by_their_keys() {
    let pool = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
    for table in ["batched", "referenced"] {
        sqlx::raw_sql(create::<sqlx::Sqlite>(table))
            .execute(&pool)
            .await
            .unwrap();
    }
    for index in [
        "CREATE INDEX batched_by_status ON batched (status, id)",
        "CREATE INDEX referenced_by_status ON referenced (status, id)",
    ] {
        sqlx::raw_sql(index).execute(&pool).await.unwrap();
    }
    // The history table the valued follow-up's history insert writes.
    for statement in stateguard::ddl::generate::<Referenced>(Dialect::Sqlite).up() {
        sqlx::raw_sql(statement).execute(&pool).await.unwrap();
    }
    let in_flight = Batched::MACHINE
        .state(Batched::Sending)
        .and_then(|state| state.in_flight())
        .unwrap();
    let valued = Referenced::MACHINE
        .state(Referenced::Sending)
        .and_then(|state| state.in_flight())
        .unwrap();
    let start = Batched::MACHINE.transition("start").unwrap();
    // The statements that take a JSON document, and those that take their
    // rows spelled out (a follow-up binding values per row).
    let statements = [
        ("apply_many", start.apply_many_sql().update().sqlite(), true),
        ("renew_many", in_flight.renew_many_sql().sqlite(), true),
        ("release_many", in_flight.release_many_sql().sqlite(), true),
        (
            "done_many",
            in_flight.follow_up_many_sql()[0].sqlite(),
            true,
        ),
        (
            "failed_many",
            in_flight.follow_up_many_sql()[1].sqlite(),
            true,
        ),
        (
            "postpone_many",
            in_flight.retry().unwrap().postpone_many_sql().sqlite(),
            true,
        ),
        (
            "valued done_many",
            valued.follow_up_many_sql()[0].sqlite(),
            false,
        ),
        (
            "valued done_many history",
            valued.follow_up_many_history_insert_sql()[0].sqlite(),
            false,
        ),
    ];
    for (name, text, json) in statements {
        assert!(!text.is_empty(), "{name}");
        // The library's own statement, explained: a literal for the test's
        // life.
        let explain: &'static str = Box::leak(format!("EXPLAIN QUERY PLAN {text}").into());
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(explain).fetch_all(&pool).await.unwrap();
        let steps: Vec<&str> = plan
            .iter()
            .map(|(_, _, _, step)| step.as_str())
            .filter(|step| step.starts_with("SCAN") || step.starts_with("SEARCH"))
            .collect();
        if json {
            assert!(
                steps.first().is_some_and(|s| s.contains("json_each")),
                "{name} starts with {steps:?}"
            );
        }
        // The machine's table is only ever searched by key, never
        // scanned, nor read through the status index.
        for table in ["batched", "referenced"] {
            assert!(
                steps
                    .iter()
                    .all(|s| !s.starts_with(&format!("SCAN {table}"))
                        && !s.contains(&format!("{table}_by_status"))),
                "{name} scans {table}: {steps:?}"
            );
        }
        assert!(
            steps.iter().any(|s| s.starts_with("SEARCH")),
            "{name} searches no table: {steps:?}"
        );
    }
}
