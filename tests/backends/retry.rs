//! Effects that give up: an in-flight state with `retry(…)` counts each
//! attempt in the statement that takes the lease, waits a growing backoff
//! (by the database's clock) before the next, and ends the row in `failed`
//! instead of starting one attempt too many.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use common::{Bind, Db, TestBackend, TransferStatus};
use stateguard::ddl::Dialect;
use stateguard::{
    Effect, Error, FinishError, Finished, Recovered, Retry, StateMachine, Verdict, claim_expired,
    recover,
};

/// A transfer whose effect runs at most four times, the first wait 40 ms,
/// doubled per attempt up to 160 ms; its lease (300 ms) is longer than
/// the waits, so only the backoff can make a row due early.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "retried",
    column = "status",
    key = "id",
    version = "version",
    history = "retried_history"
)]
pub(crate) enum Retried {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(
        lease = "300ms",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(
            max = 4,
            backoff = "40ms..160ms",
            attempts = "attempts",
            next_attempt = "next_attempt_at",
            last_error = "last_error"
        )
    ))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const MAX: u32 = 4;

backend_tests! {
    impl Tests {
        "retry_transient" => a_transient_failure_is_retried_under_one_effect_key,
        "retry_gives_up" => an_effect_that_always_fails_gives_up_after_max_attempts,
        "retry_race" => racing_recoveries_count_each_attempt_once (flavor = "multi_thread", worker_threads = 4),
        "retry_at" => a_verdict_sets_its_own_time,
        "retry_unreported" => a_takeover_past_the_last_attempt_gives_up_without_the_effect,
        "retry_undeclared" => a_time_of_its_own_needs_retry_declared,
        "retry_verify" => verify_checks_the_retry_columns,
        "retry_last_error" => the_last_retry_keeps_its_reason,
    }
}

/// The `retried` table with `n` pending rows, and its history table.
pub(crate) async fn setup<DB: TestBackend>(db: &Db<DB>, n: i64) {
    let create = match DB::DIALECT {
        Dialect::Postgres => {
            "CREATE TABLE retried (
                id BIGINT PRIMARY KEY,
                status TEXT NOT NULL DEFAULT 'pending',
                version BIGINT NOT NULL DEFAULT 0,
                sending_since TIMESTAMPTZ,
                attempts INT NOT NULL DEFAULT 0,
                next_attempt_at TIMESTAMPTZ,
                last_error TEXT
            )"
        }
        Dialect::Sqlite => {
            "CREATE TABLE retried (
                id INTEGER PRIMARY KEY,
                status TEXT NOT NULL DEFAULT 'pending',
                version INTEGER NOT NULL DEFAULT 0,
                sending_since TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at TEXT,
                last_error TEXT
            )"
        }
        _ => {
            "CREATE TABLE retried (
                id BIGINT PRIMARY KEY,
                status VARCHAR(32) NOT NULL DEFAULT 'pending',
                version BIGINT NOT NULL DEFAULT 0,
                sending_since DATETIME(3) NULL,
                attempts INT NOT NULL DEFAULT 0,
                next_attempt_at DATETIME(3) NULL,
                last_error TEXT NULL
            )"
        }
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    for statement in stateguard::ddl::generate::<Retried>(DB::DIALECT).up() {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    drop(conn);
    for id in 1..=n {
        db_insert(db, id).await;
    }
}

/// The row as the database has it: status, attempts, and its lease stamp
/// and next attempt in microseconds since the epoch, by its own clock.
#[derive(Debug)]
struct Row {
    status: String,
    attempts: i64,
    since_micros: Option<i64>,
    next_micros: Option<i64>,
}

async fn row<DB: TestBackend>(db: &Db<DB>, id: i64) -> Row {
    let read = match DB::DIALECT {
        Dialect::Postgres => {
            "SELECT status, CAST(attempts AS BIGINT),
                    CAST(EXTRACT(EPOCH FROM sending_since) * 1000000 AS BIGINT),
                    CAST(EXTRACT(EPOCH FROM next_attempt_at) * 1000000 AS BIGINT)
             FROM retried WHERE id = $1"
        }
        Dialect::Sqlite => {
            "SELECT status, attempts,
                    CAST(ROUND(unixepoch(sending_since, 'subsec') * 1000) AS INTEGER) * 1000,
                    CAST(ROUND(unixepoch(next_attempt_at, 'subsec') * 1000) AS INTEGER) * 1000
             FROM retried WHERE id = ?"
        }
        _ => {
            "SELECT status, CAST(attempts AS SIGNED),
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', sending_since),
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', next_attempt_at)
             FROM retried WHERE id = ?"
        }
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (status, attempts, since_micros, next_micros): (String, i64, Option<i64>, Option<i64>) =
        DB::fetch_one(&mut conn, read, &[Bind::Int(id)])
            .await
            .unwrap();
    Row {
        status,
        attempts,
        since_micros,
        next_micros,
    }
}

/// What the provider saw: each call's row, effect key and attempt.
#[derive(Default)]
struct Calls(Mutex<Vec<(i64, String, Option<u32>)>>);

impl Calls {
    fn record(&self, effect: &Effect<Retried, i64>) {
        let call = (
            *effect.key(),
            effect.effect_key().to_owned(),
            effect.attempt(),
        );
        self.0.lock().unwrap().push(call);
    }

    fn of(&self, id: i64) -> Vec<(String, Option<u32>)> {
        let calls = self.0.lock().unwrap();
        let of_row = calls.iter().filter(|(row, ..)| *row == id);
        of_row
            .map(|(_, key, attempt)| (key.clone(), *attempt))
            .collect()
    }
}

/// The shortest wait after attempt `n` that `backoff = "40ms..160ms"`
/// allows.
fn least_wait_micros(attempt: u32) -> i64 {
    (40_000_i64 << (attempt - 1)).min(160_000)
}

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + stateguard::bounds::Batched> Tests<DB>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    /// Recovery passes until row `id` leaves `sending`, each effect told by
    /// `verdict`; the passes' reports added up.
    async fn recover_until_settled<F>(
        db: &Db<DB>,
        ids: &[i64],
        calls: &Calls,
        verdict: F,
    ) -> Recovered
    where
        F: Fn(&Effect<Retried, i64>) -> Verdict<Retried> + Sync,
    {
        let mut total = Recovered::default();
        for _ in 0..400 {
            let pass = recover(
                &db.pool,
                Retried::Sending,
                4,
                |effect: Effect<Retried, i64>| {
                    calls.record(&effect);
                    let verdict = verdict(&effect);
                    async move { verdict }
                },
            )
            .await
            .unwrap();
            assert!(pass.errors.is_empty(), "{:?}", pass.errors);
            total.claimed += pass.claimed;
            total.done += pass.done;
            total.failed += pass.failed;
            total.retry_later += pass.retry_later;
            total.gave_up += pass.gave_up;
            total.lost += pass.lost;
            let mut settled = true;
            for id in ids {
                settled &= row(db, *id).await.status != "sending";
            }
            if settled {
                return total;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("rows {ids:?} still in flight after 400 passes");
    }

    /// A provider that fails transiently three times, then succeeds: the
    /// effect runs four times under one effect key, as attempts 1 to 4,
    /// each after the backoff the attempt before it earned, and the
    /// attempts column ends at 4.
    async fn a_transient_failure_is_retried_under_one_effect_key(db: Db<DB>) {
        setup(&db, 1).await;
        let calls = Calls::default();
        let won = Retried::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        assert_eq!(won.attempt(), Some(1));
        let finished = won
            .finish(&db.pool, |effect| {
                calls.record(&effect);
                async { Retry::later().because("bank answered 503").into() }
            })
            .await
            .unwrap();
        assert_eq!(finished, Finished::RetryLater);
        // The wait is set by the database's clock, from the attempt's own
        // lease stamp on.
        let first = row(&db, 1).await;
        assert_eq!((first.status.as_str(), first.attempts), ("sending", 1));
        let waited = first.next_micros.unwrap() - first.since_micros.unwrap();
        assert!(waited >= least_wait_micros(1), "{first:?}");

        let stamps = Mutex::new(Vec::new());
        let report = Self::recover_until_settled(&db, &[1], &calls, |effect| {
            let attempt = effect.attempt().unwrap();
            stamps.lock().unwrap().push(attempt);
            match attempt {
                4 => Verdict::done(),
                _ => Verdict::RetryLater,
            }
        })
        .await;
        assert_eq!((report.claimed, report.done, report.retry_later), (3, 1, 2));
        let seen = calls.of(1);
        let key = &seen[0].0;
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(
            seen.iter().all(|(k, _)| k == key),
            "one effect key: {seen:?}"
        );
        let attempts: Vec<_> = seen.iter().map(|(_, a)| a.unwrap()).collect();
        assert_eq!(attempts, [1, 2, 3, 4]);
        let last = row(&db, 1).await;
        assert_eq!((last.status.as_str(), last.attempts), ("sent", 4));
        // The history knows no retries: pending -> sending -> sent.
        let history = Retried::history(&db.pool, 1_i64).await.unwrap();
        let moves: Vec<_> = history.iter().map(|h| h.transition.name()).collect();
        assert_eq!(moves, ["start", "confirm"]);
    }

    /// A provider that always fails: exactly `max` attempts, none taken
    /// over before the time the attempt before it was told to wait for,
    /// each wait at least the backoff declares (all read from the
    /// database's clock), then `failed`, with the reason in the history
    /// row.
    async fn an_effect_that_always_fails_gives_up_after_max_attempts(db: Db<DB>) {
        setup(&db, 1).await;
        let calls = Calls::default();
        let fail = |effect: Effect<Retried, i64>| {
            calls.record(&effect);
            async { Verdict::from(Retry::later().because("bank answered 503")) }
        };
        let won = Retried::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        assert_eq!(
            won.finish(&db.pool, fail).await.unwrap(),
            Finished::RetryLater
        );
        let mut before = row(&db, 1).await;
        for attempt in 2..MAX {
            let won = Self::take_when_due(&db).await;
            assert_eq!(won.attempt(), Some(attempt));
            let after = row(&db, 1).await;
            assert!(
                after.since_micros.unwrap() >= before.next_micros.unwrap(),
                "attempt {attempt} taken over before it was due: {before:?} then {after:?}"
            );
            let waited = before.next_micros.unwrap() - before.since_micros.unwrap();
            assert!(waited >= least_wait_micros(attempt - 1), "{before:?}");
            assert_eq!(
                won.finish(&db.pool, fail).await.unwrap(),
                Finished::RetryLater
            );
            before = row(&db, 1).await;
        }
        // The last attempt, by a recovery pass: it gives up.
        let report = Self::recover_until_settled(&db, &[1], &calls, |_| {
            Retry::later().because("bank answered 503").into()
        })
        .await;
        assert_eq!((report.claimed, report.gave_up, report.failed), (1, 1, 0));
        let attempts: Vec<_> = calls.of(1).iter().map(|(_, a)| a.unwrap()).collect();
        assert_eq!(attempts, [1, 2, 3, 4], "exactly max attempts");
        let last = row(&db, 1).await;
        assert_eq!(
            (last.status.as_str(), last.attempts),
            ("failed", i64::from(MAX))
        );
        let history = Retried::history(&db.pool, 1_i64).await.unwrap();
        let failed = history.last().unwrap();
        assert_eq!(failed.transition.name(), "fail");
        assert_eq!(failed.actor.as_deref(), Some("stateguard retry"));
        assert_eq!(
            failed.reason.as_deref(),
            Some("gave up after 4 attempts; the last: asked to retry: bank answered 503")
        );
        assert!(
            failed.details.as_deref().unwrap().contains('4'),
            "{failed:?}"
        );
        // A `finish` at the last attempt says so itself.
        db_insert(&db, 2).await;
        let won = Retried::start()
            .apply(&db.pool, 2_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        assert_eq!(
            won.finish(&db.pool, fail).await.unwrap(),
            Finished::RetryLater
        );
        for _ in 2..MAX {
            let won = Self::take_when_due(&db).await;
            assert_eq!(
                won.finish(&db.pool, fail).await.unwrap(),
                Finished::RetryLater
            );
        }
        let won = Self::take_when_due(&db).await;
        let finished = won.finish(&db.pool, fail).await.unwrap();
        assert!(
            matches!(
                finished,
                Finished::GaveUp {
                    state: Retried::Failed,
                    attempts: MAX,
                    ..
                }
            ),
            "{finished:?}"
        );
    }

    /// Takes over the one row of `sending` once it is due.
    async fn take_when_due(db: &Db<DB>) -> stateguard::Won<Retried, i64> {
        for _ in 0..500 {
            let taken = claim_expired::<Retried, i64, _>(&db.pool, Retried::Sending, 1)
                .await
                .unwrap();
            if let Some(won) = taken.into_iter().next() {
                return won;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no row came due");
    }

    /// A verdict's own wait replaces the backoff: a row told to wait an
    /// hour is not taken over, its lease long gone, while rows told to
    /// wait nothing, or the backoff, are.
    async fn a_verdict_sets_its_own_time(db: Db<DB>) {
        setup(&db, 3).await;
        let calls = Calls::default();
        let waits = [
            Retry::after(Duration::from_secs(3600)),
            Retry::after(Duration::ZERO),
            Retry::later(),
        ];
        for (id, wait) in (1..=3_i64).zip(waits) {
            let won = Retried::start()
                .apply(&db.pool, id)
                .await
                .unwrap()
                .won()
                .unwrap();
            let finished = won
                .finish(&db.pool, |effect| {
                    calls.record(&effect);
                    async move { wait.into() }
                })
                .await
                .unwrap();
            assert_eq!(finished, Finished::RetryLater);
        }
        // Row 1 waits an hour; its lease has run out long before.
        let hour = row(&db, 1).await;
        let waited = hour.next_micros.unwrap() - hour.since_micros.unwrap();
        assert!(waited >= 3_600_000_000, "{hour:?}");
        // Rows 2 and 3 are due soon; row 1 is not, whatever its lease.
        let report = Self::recover_until_settled(&db, &[2, 3], &calls, |effect| {
            assert_ne!(*effect.key(), 1, "row 1 is not due for an hour");
            Verdict::done()
        })
        .await;
        assert_eq!(report.done, 2);
        // Its lease an hour gone, row 1 is still not due.
        Self::backdate(&db).await;
        let pass = recover(
            &db.pool,
            Retried::Sending,
            16,
            |_: Effect<Retried, i64>| async { Verdict::done() },
        )
        .await
        .unwrap();
        assert_eq!((pass.claimed, pass.lost), (0, 0));
        let hour = row(&db, 1).await;
        assert_eq!((hour.status.as_str(), hour.attempts), ("sending", 1));
    }

    /// Eight recoveries race over 24 rows whose provider fails twice, then
    /// succeeds: no attempt number runs twice, each row's runs are its
    /// attempts in order, the last its attempts column, and every row is
    /// sent once. (A pass that stalls past the lease of a row it took
    /// with the others loses that row to another pass before running it:
    /// that attempt was counted and not made, so a row may skip a number
    /// under load, never repeat one.)
    async fn racing_recoveries_count_each_attempt_once(db: Db<DB>) {
        const ROWS: i64 = 24;
        setup(&db, ROWS).await;
        let calls = Calls::default();
        let rows: Vec<i64> = (1..=ROWS).collect();
        for id in &rows {
            let won = Retried::start()
                .apply(&db.pool, *id)
                .await
                .unwrap()
                .won()
                .unwrap();
            let _ = won
                .finish(&db.pool, |effect| {
                    calls.record(&effect);
                    async { Verdict::RetryLater }
                })
                .await
                .unwrap();
        }
        let verdict = |effect: &Effect<Retried, i64>| match effect.attempt() {
            Some(3..) => Verdict::done(),
            _ => Verdict::RetryLater,
        };
        let racers = (0..8).map(|_| Self::recover_until_settled(&db, &rows, &calls, verdict));
        let reports = futures_util::future::join_all(racers).await;
        let done: usize = reports.iter().map(|r| r.done).sum();
        assert_eq!(done, ROWS as usize);
        let mut skipped = 0;
        for id in rows {
            let mut attempts: Vec<_> = calls.of(id).iter().map(|(_, a)| a.unwrap()).collect();
            attempts.sort_unstable();
            let distinct = attempts.windows(2).all(|w| w[0] < w[1]);
            assert!(distinct, "row {id} ran an attempt twice: {attempts:?}");
            let row = row(&db, id).await;
            assert_eq!(row.status, "sent", "row {id}");
            assert_eq!(attempts.first(), Some(&1), "row {id}");
            assert_eq!(
                attempts.last().map(|a| i64::from(*a)),
                Some(row.attempts),
                "row {id}"
            );
            assert!(attempts.last() >= Some(&3), "row {id}: {attempts:?}");
            skipped += row.attempts - attempts.len() as i64;
        }
        println!("attempts counted and lost to a stalled pass: {skipped}");
    }

    /// A row whose last attempt never reported (its worker died) is taken
    /// over once more, which counts itself, and gives up without running
    /// the effect again: `failed`, with a history row saying why.
    async fn a_takeover_past_the_last_attempt_gives_up_without_the_effect(db: Db<DB>) {
        setup(&db, 1).await;
        let won = Retried::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        drop(won); // attempt 1's worker dies
        for attempt in 2..=MAX {
            Self::backdate(&db).await;
            let taken = claim_expired::<Retried, i64, _>(&db.pool, Retried::Sending, 1)
                .await
                .unwrap();
            assert_eq!(taken.len(), 1);
            assert_eq!(taken[0].attempt(), Some(attempt));
            drop(taken); // and so does each next one's
        }
        Self::backdate(&db).await;
        let calls = Calls::default();
        let pass = recover(
            &db.pool,
            Retried::Sending,
            16,
            |effect: Effect<Retried, i64>| {
                calls.record(&effect);
                async { Verdict::done() }
            },
        )
        .await
        .unwrap();
        assert_eq!((pass.claimed, pass.gave_up, pass.done), (1, 1, 0));
        assert!(calls.of(1).is_empty(), "the effect did not run again");
        let last = row(&db, 1).await;
        assert_eq!(
            (last.status.as_str(), last.attempts),
            ("failed", i64::from(MAX) + 1)
        );
        let history = Retried::history(&db.pool, 1_i64).await.unwrap();
        let fail = history.last().unwrap();
        assert_eq!(fail.transition.name(), "fail");
        assert!(
            fail.reason.as_deref().unwrap().contains("no verdict"),
            "{fail:?}"
        );
    }

    /// `verify` passes the table the tests use, and names each retry
    /// column the table lacks.
    async fn verify_checks_the_retry_columns(db: Db<DB>) {
        setup(&db, 1).await;
        let problems = Retried::verify(&db.pool).await.unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let mut conn = db.pool.acquire().await.unwrap();
        for drop in [
            "ALTER TABLE retried DROP COLUMN next_attempt_at",
            "ALTER TABLE retried DROP COLUMN attempts",
            "ALTER TABLE retried DROP COLUMN last_error",
        ] {
            DB::execute(&mut conn, drop, &[]).await.unwrap();
        }
        let problems = Retried::verify(&db.pool).await.unwrap();
        let named: Vec<_> = problems.iter().filter_map(|p| p.column()).collect();
        assert!(named.contains(&"attempts"), "{problems:?}");
        assert!(named.contains(&"next_attempt_at"), "{problems:?}");
        assert!(named.contains(&"last_error"), "{problems:?}");
        let text = problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains("a retry's attempts column, missing"),
            "{text}"
        );
    }

    /// The reason a retry gives (`Retry::because`) is kept in the
    /// `last_error` column: written with the retry, NULL after a retry
    /// that gives none, told by `available`, and cleared by the move into
    /// the state. In one `finish_many` batch each row keeps its own,
    /// beside rows that give none; so does each row recovery retries.
    async fn the_last_retry_keeps_its_reason(db: Db<DB>) {
        setup(&db, 6).await;
        // A reason an earlier occurrence left goes with the move in.
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, "UPDATE retried SET last_error = 'stale'", &[])
            .await
            .unwrap();
        drop(conn);
        let wins = Retried::start().claim(&db.pool, 6).await.unwrap();
        assert_eq!(wins.len(), 6);
        for id in 1..=6 {
            assert_eq!(last_error(&db, id).await, None, "row {id}");
        }
        let reason = |id: i64, round: u8| format!("bank <b>{id}</b> said \"503\" ({round})");
        // Round one: even rows give a reason, odd ones none.
        let rows = stateguard::finish_many(&db.pool, wins, 4, |effect: Effect<Retried, i64>| {
            let id = *effect.key();
            async move {
                match id % 2 {
                    0 => Retry::later().because(reason(id, 1)).into(),
                    _ => Verdict::RetryLater,
                }
            }
        })
        .await
        .unwrap();
        for row in rows {
            assert!(matches!(row.finished, Ok(Finished::RetryLater)), "{row:?}");
        }
        for id in 1..=6 {
            let kept = (id % 2 == 0).then(|| reason(id, 1));
            assert_eq!(last_error(&db, id).await, kept, "row {id}");
            let available = Retried::available(&db.pool, id).await.unwrap().unwrap();
            assert_eq!(available.last_error(), kept.as_deref(), "row {id}");
        }
        // Round two, through recovery: the other way round.
        let calls = Calls::default();
        let mut retried = Vec::new();
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let pass = recover(
                &db.pool,
                Retried::Sending,
                6,
                |effect: Effect<Retried, i64>| {
                    calls.record(&effect);
                    let id = *effect.key();
                    async move {
                        match id % 2 {
                            1 => Retry::later().because(reason(id, 2)).into(),
                            _ => Verdict::RetryLater,
                        }
                    }
                },
            )
            .await
            .unwrap();
            assert!(pass.errors.is_empty(), "{:?}", pass.errors);
            retried.extend(calls.0.lock().unwrap().drain(..).map(|(id, ..)| id));
            retried.sort_unstable();
            retried.dedup();
            if retried.len() == 6 {
                break;
            }
        }
        assert_eq!(retried, [1, 2, 3, 4, 5, 6]);
        for id in 1..=6 {
            let kept = (id % 2 == 1).then(|| reason(id, 2));
            assert_eq!(last_error(&db, id).await, kept, "row {id}");
        }
    }

    /// Moves the lease an hour into the past.
    async fn backdate(db: &Db<DB>) {
        let backdate = match DB::DIALECT {
            Dialect::Postgres => {
                "UPDATE retried SET sending_since = sending_since - INTERVAL '1 hour'"
            }
            Dialect::Sqlite => {
                "UPDATE retried SET sending_since =
                    strftime('%Y-%m-%d %H:%M:%f', sending_since, '-1 hours')"
            }
            _ => "UPDATE retried SET sending_since = sending_since - INTERVAL 1 HOUR",
        };
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, backdate, &[]).await.unwrap();
    }

    /// A state without `retry(…)` has nowhere to keep a time of the
    /// effect's own: the verdict is refused with a typed error, and the row
    /// stays in flight for recovery at its lease.
    async fn a_time_of_its_own_needs_retry_declared(db: Db<DB>) {
        db.transfers(1).await;
        let won = TransferStatus::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        assert_eq!(won.attempt(), None);
        let finished = won
            .finish(&db.pool, |effect| {
                assert_eq!(effect.attempt(), None);
                async { Retry::after(Duration::from_secs(60)).into() }
            })
            .await;
        match finished {
            Err(FinishError::Unfinished(Error::Misuse(stateguard::Misuse::RetryNotDeclared {
                state,
                ..
            }))) => {
                assert_eq!(state, "sending");
            }
            other => panic!("expected RetryNotDeclared, got {other:?}"),
        }
        assert_eq!(db.transfer(1).await.0, "sending");
        // Recovery takes it over once its lease runs out, as it would
        // after a plain "later".
        db.backdate_leases().await;
        let pass = recover(
            &db.pool,
            TransferStatus::Sending,
            16,
            |_: Effect<TransferStatus, i64>| async { Verdict::done() },
        )
        .await
        .unwrap();
        assert_eq!((pass.claimed, pass.done), (1, 1));
    }
}

/// The row's `last_error` column.
async fn last_error<DB: TestBackend>(db: &Db<DB>, id: i64) -> Option<String> {
    let read = match DB::DIALECT {
        Dialect::Postgres => "SELECT last_error FROM retried WHERE id = $1",
        _ => "SELECT last_error FROM retried WHERE id = ?",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (text,): (Option<String>,) = DB::fetch_one(&mut conn, read, &[Bind::Int(id)])
        .await
        .unwrap();
    text
}

async fn db_insert<DB: TestBackend>(db: &Db<DB>, id: i64) {
    let insert = match DB::DIALECT {
        Dialect::Postgres => "INSERT INTO retried (id) VALUES ($1)",
        _ => "INSERT INTO retried (id) VALUES (?)",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, insert, &[Bind::Int(id)])
        .await
        .unwrap();
}
