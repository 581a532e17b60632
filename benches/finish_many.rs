//! A payout run at the database's speed: `claim` and `finish_many` against
//! `claim` and a per-row `finish`, against the same loop written by hand,
//! and a recovery pass through `recover_many` against `recover`, as
//! ratios of rows per second measured in the same run:
//!
//! - **No-op effect, 8 workers** (each claims 250 rows at a time and
//!   finishes them at a concurrency of 32): `finish_many` against a
//!   per-row `finish` by the same 8 workers and by one (goal on
//!   PostgreSQL: at least 10×), and on
//!   PostgreSQL against the loop by hand: `FOR UPDATE SKIP LOCKED` claim
//!   of 250, the effects at the same concurrency, one `UPDATE … FROM
//!   unnest($1, $2, $3)` per batch with each row's version and lease
//!   token checked (goal: at least 0.9×).
//! - **A 20 ms effect, one worker, a concurrency of 32**: `finish_many`
//!   against a per-row `finish` (goal: at least 20×).
//! - **A recovery pass over 10,000 expired rows**: `recover_many` at a
//!   concurrency of 32 against `recover`.
//! - **A bank reference per row** (`confirm` binds `bank_ref`, so each
//!   row's value travels in the batch statement): `finish_many` against
//!   itself without a value, and against a per-row `finish` binding it.
//!
//! Rounds alternate (ABBA…), each on rows of its own; "paired" is the
//! median of the per-round ratios. SQLite runs always, PostgreSQL with
//! `STATEGUARD_POSTGRES_URL`, MariaDB/MySQL with `STATEGUARD_MYSQL_URL`.
//!
//! Run with `cargo bench --bench finish_many`.
//!
//! `STATEGUARD_FM_COUNT=<ours|hand>:<rows>` runs one worker of one way
//! alone over that many rows on PostgreSQL, and prints nothing else: the
//! mode to run under `valgrind --tool=callgrind`, which counts the
//! client's instructions. Two counts at different numbers of rows give
//! the instructions per row, set-up cancelled.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sqlx::Pool;
use stateguard::bounds::{Batched, FollowUpValues, Key, ManyKeys};
use stateguard::key::shape::One;
use stateguard::{
    Effect, Finished, StateMachine, Verdict, Won, finish_many, recover, recover_many,
};

mod support;

use support::{alternating, median};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "fm_payouts",
    column = "status",
    key = "id",
    version = "version"
)]
enum Payout {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// The same rows, whose `confirm` records the bank's reference.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "fm_payouts",
    column = "status",
    key = "id",
    version = "version"
)]
enum Referenced {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const POSTGRES: support::Place = support::Place {
    name: "stateguard_bench_finish_many",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_bench_finish_many CASCADE",
        "CREATE SCHEMA stateguard_bench_finish_many",
    ],
    drop: "DROP SCHEMA stateguard_bench_finish_many CASCADE",
    connections: 10,
    delay: Duration::ZERO,
};
const MYSQL: support::Place = support::Place {
    name: "stateguard_bench_finish_many",
    fresh: [
        "DROP DATABASE IF EXISTS stateguard_bench_finish_many",
        "CREATE DATABASE stateguard_bench_finish_many",
    ],
    drop: "DROP DATABASE stateguard_bench_finish_many",
    connections: 10,
    delay: Duration::ZERO,
};

const WORKERS: usize = 8;
const CLAIM: u32 = 250;
const CONCURRENCY: usize = 32;
const ROUNDS: usize = 3;
const SLOW_EFFECT: Duration = Duration::from_millis(20);
const EXPIRED: i64 = 10_000;

/// The statements a backend needs around the machine's: its table, rows
/// pending, and rows left in flight an hour ago.
trait Bench: Batched {
    const LABEL: &'static str;
    const CREATE: &'static str;
    const CLEAR: &'static str;
    /// Rows `1..=$1`, pending.
    const PENDING: &'static str;
    /// Rows `1..=$1` in `sending` at version 1, stamped an hour ago.
    const EXPIRED: &'static str;
    /// Rows per round: batched, per row.
    const ROWS: (i64, i64);
}

/// Digits crossed, `n` from 1 to 100,000, for MySQL, whose recursion is
/// capped.
macro_rules! mysql_numbers {
    () => {
        "(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 1 AS n FROM \
         (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL \
         SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
         UNION ALL SELECT 9) a, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL \
         SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
         UNION ALL SELECT 8 UNION ALL SELECT 9) b, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL \
         SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 \
         UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c, (SELECT 0 AS d UNION ALL \
         SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
         UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e, \
         (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL \
         SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
         UNION ALL SELECT 9) f) s"
    };
}

impl Bench for sqlx::Postgres {
    const LABEL: &'static str = "PostgreSQL";
    const CREATE: &'static str = "CREATE TABLE fm_payouts (id BIGINT PRIMARY KEY, status TEXT \
        NOT NULL, version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ, bank_ref TEXT); \
        CREATE INDEX fm_payouts_by_status ON fm_payouts (status, id)";
    const CLEAR: &'static str = "TRUNCATE fm_payouts";
    const PENDING: &'static str =
        "INSERT INTO fm_payouts (id, status) SELECT g, 'pending' FROM generate_series(1, $1) g";
    const EXPIRED: &'static str = "INSERT INTO fm_payouts (id, status, version, sending_since) \
        SELECT g, 'sending', 1, statement_timestamp() - INTERVAL '1 hour' FROM \
        generate_series(1, $1) g";
    const ROWS: (i64, i64) = (100_000, 10_000);
}

impl Bench for sqlx::Sqlite {
    const LABEL: &'static str = "SQLite";
    const CREATE: &'static str = "CREATE TABLE fm_payouts (id INTEGER PRIMARY KEY, status TEXT \
        NOT NULL, version INTEGER NOT NULL DEFAULT 0, sending_since TEXT, bank_ref TEXT); \
        CREATE INDEX fm_payouts_by_status ON fm_payouts (status, id)";
    const CLEAR: &'static str = "DELETE FROM fm_payouts";
    const PENDING: &'static str = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM \
        s WHERE i < ?1) INSERT INTO fm_payouts (id, status) SELECT i, 'pending' FROM s";
    const EXPIRED: &'static str = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM \
        s WHERE i < ?1) INSERT INTO fm_payouts (id, status, version, sending_since) SELECT i, \
        'sending', 1, strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') FROM s";
    const ROWS: (i64, i64) = (100_000, 10_000);
}

impl Bench for sqlx::MySql {
    const LABEL: &'static str = "MariaDB/MySQL";
    const CREATE: &'static str = "CREATE TABLE fm_payouts (id BIGINT PRIMARY KEY, status \
        VARCHAR(32) NOT NULL, version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3) NULL, \
        bank_ref VARCHAR(64) NULL, INDEX (status, id))";
    const CLEAR: &'static str = "TRUNCATE fm_payouts";
    const PENDING: &'static str = concat!(
        "INSERT INTO fm_payouts (id, status) SELECT n, 'pending' FROM ",
        mysql_numbers!(),
        " WHERE n <= ?"
    );
    const EXPIRED: &'static str = concat!(
        "INSERT INTO fm_payouts (id, status, version, sending_since) SELECT n, 'sending', 1, ",
        "UTC_TIMESTAMP(3) - INTERVAL 1 HOUR FROM ",
        mysql_numbers!(),
        " WHERE n <= ?"
    );
    const ROWS: (i64, i64) = (30_000, 5_000);
}

/// Runs `sql` with `n` bound, to its end.
async fn execute<DB: Bench>(pool: &Pool<DB>, sql: &'static str, n: Option<i64>)
where
    i64: Key<DB>,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    match n {
        Some(n) => sqlx::query::<DB>(sql).bind(n).execute(pool).await.unwrap(),
        // Without a value, several statements may run at once.
        None => sqlx::raw_sql(sql).execute(pool).await.unwrap(),
    };
}

/// The cases measured so far.
static MEASURED: std::sync::Mutex<Vec<Row>> = std::sync::Mutex::new(Vec::new());

fn measured(row: Row) {
    MEASURED.lock().unwrap().push(row);
}

/// One measured case.
struct Row {
    backend: &'static str,
    case: &'static str,
    ours: f64,
    theirs: f64,
    paired: f64,
    against: &'static str,
}

/// Rows per second of `run` over `rows` fresh rows made by `fill`.
async fn timed<DB: Bench, Fut>(pool: &Pool<DB>, fill: &'static str, rows: i64, run: Fut) -> f64
where
    Fut: Future<Output = usize>,
    i64: Key<DB>,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    execute(pool, DB::CLEAR, None).await;
    execute(pool, fill, Some(rows)).await;
    let started = Instant::now();
    let done = run.await;
    assert_eq!(done as i64, rows, "every row finished");
    rows as f64 / started.elapsed().as_secs_f64()
}

/// `workers` workers claiming `CLAIM` rows at a time until none is left,
/// each finishing its batch with `finish`: the rows they finished.
async fn workers<DB, F, Fut>(pool: &Pool<DB>, workers: usize, finish: F) -> usize
where
    DB: Bench,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
    F: Fn(Vec<Won<Payout, i64>>) -> Fut,
    Fut: Future<Output = usize>,
{
    let claim = || async { Payout::start().claim(pool, CLAIM).await.unwrap() };
    claiming(workers, claim, finish).await
}

/// [`workers`] for [`Referenced`].
async fn referenced_workers<DB, F, Fut>(pool: &Pool<DB>, workers: usize, finish: F) -> usize
where
    DB: Bench,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
    F: Fn(Vec<Won<Referenced, i64>>) -> Fut,
    Fut: Future<Output = usize>,
{
    let claim = || async { Referenced::start().claim(pool, CLAIM).await.unwrap() };
    claiming(workers, claim, finish).await
}

/// `workers` workers taking batches from `claim` until one is empty, each
/// finishing its batch with `finish`: the rows they finished.
async fn claiming<W, C, CFut, F, Fut>(workers: usize, claim: C, finish: F) -> usize
where
    C: Fn() -> CFut,
    CFut: Future<Output = Vec<W>>,
    F: Fn(Vec<W>) -> Fut,
    Fut: Future<Output = usize>,
{
    let worker = || async {
        let mut done = 0;
        loop {
            let wins = claim().await;
            if wins.is_empty() {
                return done;
            }
            done += finish(wins).await;
        }
    };
    futures_util::future::join_all((0..workers).map(|_| worker()))
        .await
        .into_iter()
        .sum()
}

/// A batch through `finish_many`, with `effect`'s time.
async fn batched<DB>(pool: &Pool<DB>, wins: Vec<Won<Payout, i64>>, effect: Duration) -> usize
where
    DB: Bench,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
{
    let rows = finish_many(
        pool,
        wins,
        CONCURRENCY,
        |_: Effect<Payout, i64>| async move {
            if !effect.is_zero() {
                tokio::time::sleep(effect).await;
            }
            Verdict::done()
        },
    )
    .await
    .unwrap();
    rows.iter()
        .filter(|row| matches!(row.finished, Ok(Finished::Done { .. })))
        .count()
}

/// The bank's reference of row `id`.
fn bank_ref(id: i64) -> String {
    format!("bank-{id:012}")
}

/// A batch through `finish_many`, each `confirm` binding its row's bank
/// reference.
async fn referenced_batched<DB>(pool: &Pool<DB>, wins: Vec<Won<Referenced, i64>>) -> usize
where
    DB: Bench,
    Referenced: FollowUpValues<DB>,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
{
    let rows = finish_many(
        pool,
        wins,
        CONCURRENCY,
        |effect: Effect<Referenced, i64>| async move {
            Referenced::confirm(bank_ref(*effect.key())).into()
        },
    )
    .await
    .unwrap();
    rows.iter()
        .filter(|row| matches!(row.finished, Ok(Finished::Done { .. })))
        .count()
}

/// A batch through `finish`, one row after another, each `confirm`
/// binding its row's bank reference.
async fn referenced_per_row<DB>(pool: &Pool<DB>, wins: Vec<Won<Referenced, i64>>) -> usize
where
    DB: Bench,
    Referenced: FollowUpValues<DB>,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
{
    let mut done = 0;
    for won in wins {
        let finished = won
            .finish(pool, |effect| async move {
                Referenced::confirm(bank_ref(*effect.key())).into()
            })
            .await
            .unwrap();
        done += usize::from(matches!(finished, Finished::Done { .. }));
    }
    done
}

/// A batch through `finish`, one row after another.
async fn per_row<DB>(pool: &Pool<DB>, wins: Vec<Won<Payout, i64>>, effect: Duration) -> usize
where
    DB: Bench,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
{
    let mut done = 0;
    for won in wins {
        let finished = won
            .finish(pool, |_| async move {
                if !effect.is_zero() {
                    tokio::time::sleep(effect).await;
                }
                Verdict::done()
            })
            .await
            .unwrap();
        done += usize::from(matches!(finished, Finished::Done { .. }));
    }
    done
}

/// PostgreSQL: the loop by hand. A `SKIP LOCKED` claim of `CLAIM` rows
/// that stamps a lease and returns each row's version and token; the
/// effects at `CONCURRENCY`; one update of the batch, each row checked by
/// its version and token.
const HAND_CLAIM: &str = "UPDATE fm_payouts SET status = 'sending', sending_since = \
    statement_timestamp(), version = version + 1 WHERE id = ANY (ARRAY(SELECT id FROM fm_payouts \
    WHERE status = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)) AND status = 'pending' \
    RETURNING id, version, CAST(EXTRACT(EPOCH FROM sending_since) * 1000000 AS BIGINT)";
const HAND_DONE: &str = "UPDATE fm_payouts SET status = 'sent', version = fm_payouts.version + 1 \
    FROM unnest($1::BIGINT[], $2::BIGINT[], $3::BIGINT[]) AS b(id, version, token) WHERE \
    fm_payouts.id = b.id AND fm_payouts.status = 'sending' AND fm_payouts.version = b.version \
    AND CAST(EXTRACT(EPOCH FROM fm_payouts.sending_since) * 1000000 AS BIGINT) = b.token \
    RETURNING fm_payouts.id";

async fn hand_worker(pool: &sqlx::PgPool) -> usize {
    let mut done = 0;
    loop {
        let claimed: Vec<(i64, i64, i64)> = sqlx::query_as(HAND_CLAIM)
            .bind(i64::from(CLAIM))
            .fetch_all(pool)
            .await
            .unwrap();
        if claimed.is_empty() {
            return done;
        }
        // The effects, at the same concurrency, each told its row.
        let finished: Vec<(i64, i64, i64)> = futures_util::stream::iter(claimed)
            .map(|row| async move { row })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let (ids, versions, tokens): (Vec<i64>, Vec<i64>, Vec<i64>) =
            finished
                .into_iter()
                .fold(Default::default(), |mut v, (i, ve, t)| {
                    v.0.push(i);
                    v.1.push(ve);
                    v.2.push(t);
                    v
                });
        let moved: Vec<(i64,)> = sqlx::query_as(HAND_DONE)
            .bind(ids)
            .bind(versions)
            .bind(tokens)
            .fetch_all(pool)
            .await
            .unwrap();
        done += moved.len();
    }
}

fn row(
    backend: &'static str,
    case: &'static str,
    ours: Vec<f64>,
    theirs: Vec<f64>,
    against: &'static str,
) -> Row {
    let paired = support::paired(&ours, &theirs);
    Row {
        backend,
        case,
        ours: median(ours),
        theirs: median(theirs),
        paired,
        against,
    }
}

/// Every case on one backend.
async fn cases<DB>(pool: Pool<DB>)
where
    DB: Bench,
    Referenced: FollowUpValues<DB>,
    i64: Key<DB> + ManyKeys<DB, One> + for<'r> sqlx::Decode<'r, DB>,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let pool = &pool;
    execute(pool, DB::CREATE, None).await;
    let (rows, per_row_rows) = DB::ROWS;
    let (ours, theirs) = alternating(
        ROUNDS,
        || {
            timed(pool, DB::PENDING, rows, async {
                workers(pool, WORKERS, |wins| batched(pool, wins, Duration::ZERO)).await
            })
        },
        || {
            timed(pool, DB::PENDING, per_row_rows, async {
                workers(pool, WORKERS, |wins| per_row(pool, wins, Duration::ZERO)).await
            })
        },
    )
    .await;
    measured(row(
        DB::LABEL,
        "claim + finish_many, no-op effect, 8 workers, concurrency 32",
        ours,
        theirs,
        "claim + finish per row",
    ));
    // The same batches against a per-row `finish` on one worker, one
    // call after another, as `cargo bench --bench matrix` measures it.
    let (ours, theirs) = alternating(
        ROUNDS,
        || {
            timed(pool, DB::PENDING, rows, async {
                workers(pool, WORKERS, |wins| batched(pool, wins, Duration::ZERO)).await
            })
        },
        || {
            timed(pool, DB::PENDING, per_row_rows / 2, async {
                workers(pool, 1, |wins| per_row(pool, wins, Duration::ZERO)).await
            })
        },
    )
    .await;
    measured(row(
        DB::LABEL,
        "claim + finish_many, no-op effect, 8 workers, concurrency 32",
        ours,
        theirs,
        "claim + finish per row, 1 worker",
    ));
    println!("{}: no-op effect done", DB::LABEL);
    let (ours, theirs) = alternating(
        ROUNDS,
        || {
            timed(pool, DB::PENDING, 2_000, async {
                workers(pool, 1, |wins| batched(pool, wins, SLOW_EFFECT)).await
            })
        },
        || {
            timed(pool, DB::PENDING, 100, async {
                workers(pool, 1, |wins| per_row(pool, wins, SLOW_EFFECT)).await
            })
        },
    )
    .await;
    measured(row(
        DB::LABEL,
        "claim + finish_many, 20 ms effect, 1 worker, concurrency 32",
        ours,
        theirs,
        "claim + finish per row",
    ));
    println!("{}: 20 ms effect done", DB::LABEL);
    let effect = |_: Effect<Payout, i64>| async { Verdict::done() };
    let (ours, theirs) = alternating(
        ROUNDS,
        || {
            timed(pool, DB::EXPIRED, EXPIRED, async {
                let pass = recover_many(pool, Payout::Sending, EXPIRED as u32, CONCURRENCY, effect)
                    .await
                    .unwrap();
                assert!(pass.errors.is_empty(), "{:?}", pass.errors);
                pass.done
            })
        },
        || {
            timed(pool, DB::EXPIRED, EXPIRED, async {
                let pass = recover(pool, Payout::Sending, EXPIRED as u32, effect)
                    .await
                    .unwrap();
                assert!(pass.errors.is_empty(), "{:?}", pass.errors);
                pass.done
            })
        },
    )
    .await;
    measured(row(
        DB::LABEL,
        "recovery pass over 10,000 expired rows: recover_many, concurrency 32",
        ours,
        theirs,
        "recover",
    ));
    println!("{}: recovery done", DB::LABEL);
    let (ours, theirs) = alternating(
        ROUNDS,
        || {
            timed(pool, DB::PENDING, rows, async {
                referenced_workers(pool, WORKERS, |wins| referenced_batched(pool, wins)).await
            })
        },
        || {
            timed(pool, DB::PENDING, rows, async {
                workers(pool, WORKERS, |wins| batched(pool, wins, Duration::ZERO)).await
            })
        },
    )
    .await;
    measured(row(
        DB::LABEL,
        "claim + finish_many, a bank reference per row, 8 workers, concurrency 32",
        ours,
        theirs,
        "claim + finish_many without a value",
    ));
    let (ours, theirs) = alternating(
        ROUNDS,
        || {
            timed(pool, DB::PENDING, rows, async {
                referenced_workers(pool, WORKERS, |wins| referenced_batched(pool, wins)).await
            })
        },
        || {
            timed(pool, DB::PENDING, per_row_rows, async {
                referenced_workers(pool, WORKERS, |wins| referenced_per_row(pool, wins)).await
            })
        },
    )
    .await;
    measured(row(
        DB::LABEL,
        "claim + finish_many, a bank reference per row, 8 workers, concurrency 32",
        ours,
        theirs,
        "claim + finish per row binding it, the same 8 workers",
    ));
    println!("{}: bank references done", DB::LABEL);
}

/// PostgreSQL at 1, 2 and 8 workers: `claim` + `finish_many` against the
/// loop by hand, and against `claim` + a per-row `finish`, by the same
/// number of workers (`cargo bench --bench finish_many -- workers`).
async fn by_workers(p: &sqlx::PgPool) {
    execute(p, <sqlx::Postgres as Bench>::CREATE, None).await;
    let (rows, few) = <sqlx::Postgres as Bench>::ROWS;
    let pending = <sqlx::Postgres as Bench>::PENDING;
    for (n, label, per_row_label) in [
        (
            1,
            "claim + finish_many, no-op effect, 1 worker, concurrency 32",
            "claim + finish per row, the same 1 worker",
        ),
        (
            2,
            "claim + finish_many, no-op effect, 2 workers, concurrency 32",
            "claim + finish per row, the same 2 workers",
        ),
        (
            8,
            "claim + finish_many, no-op effect, 8 workers, concurrency 32",
            "claim + finish per row, the same 8 workers",
        ),
    ] {
        let ours = || {
            timed(p, pending, rows, async move {
                workers(p, n, |wins| batched(p, wins, Duration::ZERO)).await
            })
        };
        let hand = || {
            timed(p, pending, rows, async move {
                futures_util::future::join_all((0..n).map(|_| hand_worker(p)))
                    .await
                    .into_iter()
                    .sum()
            })
        };
        let (a, b) = alternating(ROUNDS, ours, hand).await;
        measured(row(
            "PostgreSQL",
            label,
            a,
            b,
            "the loop by hand (SKIP LOCKED, one UPDATE … FROM unnest per batch)",
        ));
        let ours = || {
            timed(p, pending, few, async move {
                workers(p, n, |wins| batched(p, wins, Duration::ZERO)).await
            })
        };
        let per_row_run = || {
            timed(p, pending, few, async move {
                workers(p, n, |wins| per_row(p, wins, Duration::ZERO)).await
            })
        };
        let (a, b) = alternating(ROUNDS, ours, per_row_run).await;
        measured(row("PostgreSQL", label, a, b, per_row_label));
    }
}

/// Prints the cases measured, as a table.
fn print_measured(started: Instant) {
    let rows = std::mem::take(&mut *MEASURED.lock().unwrap());
    println!();
    println!("| backend | case | baseline | ours (rows/s) | baseline (rows/s) | ratio / paired |");
    println!("| --- | --- | --- | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} / {:.2} |",
            r.backend,
            r.case,
            r.against,
            r.ours,
            r.theirs,
            r.ours / r.theirs,
            r.paired
        );
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());
}

#[tokio::main]
async fn main() {
    let started = Instant::now();
    if let Ok(count) = std::env::var("STATEGUARD_FM_COUNT") {
        let (way, rows) = count
            .split_once(':')
            .expect("STATEGUARD_FM_COUNT=<ours|hand>:<rows>");
        let rows: i64 = rows.parse().unwrap();
        let way = way.to_owned();
        support::on_postgres(POSTGRES, |p| async move {
            let p = &p;
            execute(p, <sqlx::Postgres as Bench>::CREATE, None).await;
            let pending = <sqlx::Postgres as Bench>::PENDING;
            let rate = match way.as_str() {
                "ours" => {
                    timed(p, pending, rows, async move {
                        workers(p, 1, |wins| batched(p, wins, Duration::ZERO)).await
                    })
                    .await
                }
                _ => timed(p, pending, rows, hand_worker(p)).await,
            };
            println!("{way}: {rows} rows, {rate:.0} rows/s");
        })
        .await;
        return;
    }
    if std::env::args().any(|arg| arg == "workers") {
        support::on_postgres(POSTGRES, |pool| async move { by_workers(&pool).await }).await;
        print_measured(started);
        return;
    }
    support::on_sqlite(10, cases).await;
    support::on_postgres(POSTGRES, |pool| async move {
        cases(pool.clone()).await;
        let (rows, _) = <sqlx::Postgres as Bench>::ROWS;
        let p = &pool;
        let (ours, theirs) = alternating(
            ROUNDS,
            || {
                timed(p, <sqlx::Postgres as Bench>::PENDING, rows, async {
                    workers(p, WORKERS, |wins| batched(p, wins, Duration::ZERO)).await
                })
            },
            || {
                timed(p, <sqlx::Postgres as Bench>::PENDING, rows, async {
                    futures_util::future::join_all((0..WORKERS).map(|_| hand_worker(p)))
                        .await
                        .into_iter()
                        .sum()
                })
            },
        )
        .await;
        measured(row(
            "PostgreSQL",
            "claim + finish_many, no-op effect, 8 workers, concurrency 32",
            ours,
            theirs,
            "the loop by hand (SKIP LOCKED, one UPDATE … FROM unnest per batch)",
        ));
    })
    .await;
    support::on_mysql(MYSQL, cases).await;
    print_measured(started);
}
