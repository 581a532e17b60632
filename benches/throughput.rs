//! Throughput of the winning path of `Transition::apply` against a
//! hand-written sqlx compare-and-set `UPDATE` of exactly the same shape.
//!
//! Both run in one process, against the same table, with the same SQL text
//! (asserted below against the text the derive generated), the same bound key
//! type (`i64`) and the same pool. Every measured call is a win: rows are
//! seeded in `a` and each row is moved `a -> b` exactly once, the guard on
//! one range of keys and the hand-written query on another. Guard and
//! hand-written rounds alternate, the side that goes first swapping every
//! pair (ABBA ABBA…), so that drift (caches warming, WAL growing, autovacuum,
//! a noisy neighbour) and any order effect touch both alike. Reported: the
//! median round of each side, the ratio of those medians, and the median of
//! the per-pair ratios.
//!
//! Two transitions are measured: `advance`, which writes the status alone,
//! and `settle`, which also binds two `set` values and checks a guard.
//!
//! Measurements per backend and transition: sequential calls on a one-connection pool (the
//! per-call cost), then 4 tasks on a 4-connection pool. PostgreSQL runs the
//! sequential one twice: with the server's `synchronous_commit`, and with
//! `synchronous_commit = off` for the session, which takes the WAL flush out
//! of each call so that client-side overhead is not buried under disk time.
//! Pools are built with `test_before_acquire(false)`, so no ping precedes
//! each call.
//!
//! Backends:
//! - SQLite: a temporary file in WAL mode (`synchronous = NORMAL`).
//! - PostgreSQL: `STATEGUARD_POSTGRES_URL`, e.g.
//!   `postgres://postgres@127.0.0.1:5432/test`; the bench creates a schema of
//!   its own and drops it at the end. Without the variable it says so and
//!   skips PostgreSQL.
//!
//! `STATEGUARD_BENCH_ROWS` sets the number of measured transitions per
//! variant (guard, hand-written) per backend for the sequential measurement;
//! the concurrent variant uses half as many.
//!
//! Run with `cargo bench --bench throughput`.

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, PgConnection, Pool, Postgres, Sqlite};
use stateguard::{Outcome, StateMachine};

// `untagged`: the PostgreSQL statement without its tag.
#[allow(dead_code)]
#[path = "batches.rs"]
mod batches;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "bench_rows", column = "status", key = "id")]
enum BenchState {
    #[state(initial)]
    #[transition(advance -> B)]
    #[transition(settle -> C, set(note = bind(String), amount = bind(i64)), guard = "amount_cents <= 100000")]
    A,
    B,
    C,
}

/// The hand-written statements: character for character what the derive
/// generates for `advance` (checked at start-up), so both sides hit the
/// same prepared statement and the same plan.
const HAND_PG: &str = r#"UPDATE "bench_rows" SET "status" = 'b' WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" IN ('a')"#;
const HAND_SQLITE: &str = r#"UPDATE "bench_rows" SET "status" = 'b' WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB) AND "status" IN ('a')"#;
/// The same for `settle`: two values bound into `set`, and a guard.
const HAND_BOUND_PG: &str = r#"UPDATE "bench_rows" SET "status" = 'c', "note" = $2, "amount" = $3 WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" IN ('a') AND (amount_cents <= 100000)"#;
const HAND_BOUND_SQLITE: &str = r#"UPDATE "bench_rows" SET "status" = 'c', "note" = ?2, "amount" = ?3 WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB) AND "status" IN ('a') AND (amount_cents <= 100000)"#;
/// The values `settle` binds, the same on both sides.
const NOTE: &str = "settled by the nightly run";
const AMOUNT: i64 = 4_200;

/// Default measured transitions per variant per backend (sequential).
const DEFAULT_ROWS: i64 = 24_000;
/// Rounds per variant; guard and hand-written alternate.
const ROUNDS: i64 = 20;
/// Unmeasured calls per variant before the first round, to prepare the
/// statement and warm the caches.
const WARMUP: i64 = 300;
/// Tasks (and pool connections) in the concurrent variant.
const CONCURRENCY: usize = 4;

/// Which transition a measurement runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    /// `advance`: the status alone.
    Plain,
    /// `settle`: two bound `set` values and a guard.
    Bound,
}

/// One backend: the two calls under test, plus a check of the table.
trait Backend: 'static {
    type Db: sqlx::Database;
    /// `BenchState::advance().apply(pool, id)` (or `settle(…)`), which must
    /// win.
    fn guard(pool: &Pool<Self::Db>, id: i64, case: Case) -> impl Future<Output = ()> + Send + '_;

    /// The hand-written CAS, which must change exactly one row.
    fn hand(pool: &Pool<Self::Db>, id: i64, case: Case) -> impl Future<Output = ()> + Send + '_;

    /// Rows no longer in state `a`.
    fn count_moved(pool: &Pool<Self::Db>) -> impl Future<Output = i64> + Send + '_;
}

struct Lite;
struct Pg;

/// The two backends differ only in their types and the hand-written SQL.
macro_rules! bench_backend {
    ($name:ident, $db:ty, $hand:expr, $hand_bound:expr) => {
        // Spelled as the trait spells them, so each impl states that its
        // futures are Send.
        #[allow(clippy::manual_async_fn)]
        impl Backend for $name {
            type Db = $db;

            fn guard(
                pool: &Pool<$db>,
                id: i64,
                case: Case,
            ) -> impl Future<Output = ()> + Send + '_ {
                async move {
                    let outcome = match case {
                        Case::Plain => BenchState::advance().apply(pool, id).await,
                        Case::Bound => {
                            BenchState::settle(NOTE.to_owned(), AMOUNT)
                                .apply(pool, id)
                                .await
                        }
                    };
                    match outcome {
                        Ok(Outcome::Applied(_)) => {}
                        other => panic!("guard on id {id} did not win: {other:?}"),
                    }
                }
            }

            fn hand(pool: &Pool<$db>, id: i64, case: Case) -> impl Future<Output = ()> + Send + '_ {
                async move {
                    let query = match case {
                        Case::Plain => sqlx::query($hand).bind(id),
                        Case::Bound => sqlx::query($hand_bound)
                            .bind(id)
                            .bind(NOTE.to_owned())
                            .bind(AMOUNT),
                    };
                    let done = query
                        .execute(pool)
                        .await
                        .unwrap_or_else(|e| panic!("hand-written on id {id}: {e}"));
                    assert_eq!(
                        done.rows_affected(),
                        1,
                        "hand-written on id {id} did not win"
                    );
                }
            }

            fn count_moved(pool: &Pool<$db>) -> impl Future<Output = i64> + Send + '_ {
                async move {
                    sqlx::query_scalar("SELECT COUNT(*) FROM bench_rows WHERE status <> 'a'")
                        .fetch_one(pool)
                        .await
                        .expect("count rows moved")
                }
            }
        }
    };
}

bench_backend!(Lite, Sqlite, HAND_SQLITE, HAND_BOUND_SQLITE);
bench_backend!(Pg, Postgres, HAND_PG, HAND_BOUND_PG);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Guard,
    Hand,
}

/// Hands out consecutive, never reused key ranges of the seeded rows.
struct Keys {
    next: i64,
    end: i64,
}

impl Keys {
    fn take(&mut self, n: i64) -> std::ops::Range<i64> {
        let start = self.next;
        self.next += n;
        assert!(self.next <= self.end + 1, "ran out of seeded rows");
        start..self.next
    }
}

/// Rows to seed for `sequential` sequential measurements of `rows`
/// transitions per variant and one concurrent measurement of `rows / 2`.
fn rows_needed(rows: i64, sequential: i64) -> i64 {
    let one = |rows| 2 * (WARMUP + rows_per_round(rows) * ROUNDS);
    // Once per case.
    2 * (sequential * one(rows) + one(rows / 2))
}

fn rows_per_round(rows: i64) -> i64 {
    (rows / ROUNDS).max(1)
}

/// One timed round: `keys` moved one after another on the pool.
async fn sequential_round<B: Backend>(
    pool: &Pool<B::Db>,
    case: Case,
    side: Side,
    keys: std::ops::Range<i64>,
) -> f64 {
    let n = keys.end - keys.start;
    let started = Instant::now();
    match side {
        Side::Guard => {
            for id in keys {
                B::guard(pool, id, case).await;
            }
        }
        Side::Hand => {
            for id in keys {
                B::hand(pool, id, case).await;
            }
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// One timed round: `keys` split into `CONCURRENCY` slices, each moved
/// sequentially by its own task, all tasks sharing the pool.
async fn concurrent_round<B: Backend>(
    pool: &Pool<B::Db>,
    case: Case,
    side: Side,
    keys: std::ops::Range<i64>,
) -> f64 {
    let n = keys.end - keys.start;
    let chunk = (n + CONCURRENCY as i64 - 1) / CONCURRENCY as i64;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut start = keys.start;
    while start < keys.end {
        let end = (start + chunk).min(keys.end);
        let pool = pool.clone();
        tasks.spawn(async move {
            for id in start..end {
                match side {
                    Side::Guard => B::guard(&pool, id, case).await,
                    Side::Hand => B::hand(&pool, id, case).await,
                }
            }
        });
        start = end;
    }
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

struct Stats {
    median: f64,
    min: f64,
    max: f64,
}

fn stats(mut rates: Vec<f64>) -> Stats {
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    let median = if n % 2 == 1 {
        rates[n / 2]
    } else {
        (rates[n / 2 - 1] + rates[n / 2]) / 2.0
    };
    Stats {
        median,
        min: rates[0],
        max: rates[n - 1],
    }
}

fn report(label: &str, guard: Vec<f64>, hand: Vec<f64>) {
    // Each guard round and the hand-written round right after it ran under
    // nearly the same conditions; the median of their ratios is robust to
    // drift across the run.
    let paired = stats(guard.iter().zip(&hand).map(|(g, h)| g / h).collect());
    let g = stats(guard);
    let h = stats(hand);
    println!("  {label}");
    println!(
        "    guard         {:>9.0} transitions/s  (median of rounds; range {:.0}..{:.0})",
        g.median, g.min, g.max
    );
    println!(
        "    hand-written  {:>9.0} transitions/s  (median of rounds; range {:.0}..{:.0})",
        h.median, h.min, h.max
    );
    println!(
        "    ratio guard/hand-written {:.3}  (median of paired rounds {:.3}, range {:.3}..{:.3}); \
         per call: guard {:.1} us, hand-written {:.1} us",
        g.median / h.median,
        paired.median,
        paired.min,
        paired.max,
        1e6 / g.median,
        1e6 / h.median
    );
}

/// Warm-up, then `ROUNDS` guard and `ROUNDS` hand-written rounds,
/// alternating.
async fn measure<F, Fut>(keys: &mut Keys, per_round: i64, mut round: F) -> (Vec<f64>, Vec<f64>)
where
    F: FnMut(Side, std::ops::Range<i64>) -> Fut,
    Fut: Future<Output = f64>,
{
    round(Side::Guard, keys.take(WARMUP)).await;
    round(Side::Hand, keys.take(WARMUP)).await;
    let mut guard = Vec::new();
    let mut hand = Vec::new();
    for pair in 0..ROUNDS {
        // Guard first in even pairs, hand-written first in odd ones
        // (ABBA ABBA…): a linear drift or an order effect within a pair
        // cancels out instead of always favouring one side.
        if pair % 2 == 0 {
            guard.push(round(Side::Guard, keys.take(per_round)).await);
            hand.push(round(Side::Hand, keys.take(per_round)).await);
        } else {
            hand.push(round(Side::Hand, keys.take(per_round)).await);
            guard.push(round(Side::Guard, keys.take(per_round)).await);
        }
    }
    (guard, hand)
}

/// The sequential measurements (one per labelled single-connection pool),
/// then the concurrent one, all on the one seeded table.
async fn run<B: Backend>(
    sequential: &[(&str, &Pool<B::Db>)],
    concurrent: &Pool<B::Db>,
    rows: i64,
    seeded: i64,
) {
    let mut keys = Keys {
        next: 1,
        end: seeded,
    };

    for case in [Case::Plain, Case::Bound] {
        let what = match case {
            Case::Plain => "advance: a -> b",
            Case::Bound => "settle: a -> c, two bound set values and a guard",
        };
        let per_round = rows_per_round(rows);
        println!(
            "  {what}\n  {ROUNDS} guard + {ROUNDS} hand-written rounds of {per_round} transitions, \
             alternating (ABBA…); {WARMUP} warm-up calls each"
        );
        for &(label, pool) in sequential {
            let (guard, hand) = measure(&mut keys, per_round, |side, ids| {
                sequential_round::<B>(pool, case, side, ids)
            })
            .await;
            report(
                &format!("sequential, {label} (1-connection pool, one call awaited after another)"),
                guard,
                hand,
            );
        }

        let per_round = rows_per_round(rows / 2);
        let (guard, hand) = measure(&mut keys, per_round, |side, ids| {
            concurrent_round::<B>(concurrent, case, side, ids)
        })
        .await;
        report(
            &format!(
                "concurrent ({CONCURRENCY} tasks on a {CONCURRENCY}-connection pool, disjoint \
                 keys, rounds of {per_round})"
            ),
            guard,
            hand,
        );
    }

    let moved = B::count_moved(concurrent).await;
    assert_eq!(moved, keys.next - 1, "rows moved after the run");
    println!("  checked: {moved} rows moved out of a, each exactly once");
}

fn bench_rows() -> i64 {
    match std::env::var("STATEGUARD_BENCH_ROWS") {
        Ok(v) => match v.trim().parse::<i64>() {
            Ok(n) if n > 0 => n,
            _ => panic!("STATEGUARD_BENCH_ROWS must be a positive integer, got {v:?}"),
        },
        Err(_) => DEFAULT_ROWS,
    }
}

async fn sqlite(rows: i64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30));
    let sequential = SqlitePoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options.clone())
        .await
        .expect("open SQLite");
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&sequential)
        .await
        .expect("journal_mode");
    assert_eq!(journal, "wal", "SQLite is not in WAL mode");
    let version: String = sqlx::query_scalar("SELECT sqlite_version()")
        .fetch_one(&sequential)
        .await
        .expect("sqlite_version()");
    println!(
        "SQLite {version} (temp file {}, WAL, synchronous=NORMAL)",
        path.display()
    );

    sqlx::query(
        "CREATE TABLE bench_rows (id INTEGER PRIMARY KEY, status TEXT NOT NULL, note TEXT, \
         amount INTEGER, amount_cents INTEGER NOT NULL DEFAULT 500)",
    )
    .execute(&sequential)
    .await
    .expect("create bench_rows");
    let seeded = rows_needed(rows, 1);
    sqlx::query(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1) \
         INSERT INTO bench_rows (id, status) SELECT x, 'a' FROM n",
    )
    .bind(seeded)
    .execute(&sequential)
    .await
    .expect("seed bench_rows");

    let concurrent = SqlitePoolOptions::new()
        .max_connections(CONCURRENCY as u32)
        .min_connections(CONCURRENCY as u32)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .expect("open SQLite");

    run::<Lite>(&[("WAL", &sequential)], &concurrent, rows, seeded).await;
    concurrent.close().await;
    sequential.close().await;
}

/// A schema name unique to this run; bound as a value, never formatted into
/// SQL.
fn schema_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("stateguard_bench_{}_{nanos}", std::process::id())
}

async fn postgres(rows: i64) {
    let url = match std::env::var("STATEGUARD_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            println!(
                "PostgreSQL: skipped, because STATEGUARD_POSTGRES_URL is not set \
                 (e.g. STATEGUARD_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test)"
            );
            return;
        }
    };
    let base = PgConnectOptions::from_str(&url).expect("parse STATEGUARD_POSTGRES_URL");
    let mut admin = PgConnection::connect_with(&base)
        .await
        .expect("connect to STATEGUARD_POSTGRES_URL");
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&mut admin)
        .await
        .expect("server_version");
    let schema = schema_name();

    // The schema name travels as a bound value through a session setting;
    // the DDL that uses it is a fixed literal quoting it with %I.
    sqlx::query("SELECT set_config('stateguard.bench_schema', $1, false)")
        .bind(&schema)
        .execute(&mut admin)
        .await
        .expect("remember schema name");
    sqlx::query(
        "DO $$ BEGIN EXECUTE format('CREATE SCHEMA %I', \
         current_setting('stateguard.bench_schema')); END $$",
    )
    .execute(&mut admin)
    .await
    .expect("create bench schema");
    println!("PostgreSQL {version} (schema {schema})");

    let result = tokio::spawn(postgres_in_schema(base, schema.clone(), rows)).await;

    let dropped = sqlx::query(
        "DO $$ BEGIN EXECUTE format('DROP SCHEMA %I CASCADE', \
         current_setting('stateguard.bench_schema')); END $$",
    )
    .execute(&mut admin)
    .await;
    match dropped {
        Ok(_) => println!("  dropped schema {schema}"),
        Err(e) => eprintln!("  could not drop schema {schema}: {e}"),
    }
    let _ = admin.close().await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn postgres_in_schema(base: PgConnectOptions, schema: String, rows: i64) {
    // Every pooled connection resolves the unqualified "bench_rows" of the
    // generated SQL in the bench schema.
    let options = base.options([("search_path", schema.as_str())]);
    let sequential = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options.clone())
        .await
        .expect("connect PostgreSQL pool");
    let search_path: String = sqlx::query_scalar("SHOW search_path")
        .fetch_one(&sequential)
        .await
        .expect("search_path");
    assert_eq!(search_path, schema, "search_path of pooled connections");

    sqlx::query(
        "CREATE TABLE bench_rows (id BIGINT PRIMARY KEY, status TEXT NOT NULL, note TEXT, \
         amount BIGINT, amount_cents BIGINT NOT NULL DEFAULT 500)",
    )
    .execute(&sequential)
    .await
    .expect("create bench_rows");
    let seeded = rows_needed(rows, 2);
    sqlx::query(
        "INSERT INTO bench_rows (id, status) SELECT g, 'a' FROM generate_series(1::bigint, $1) g",
    )
    .bind(seeded)
    .execute(&sequential)
    .await
    .expect("seed bench_rows");
    sqlx::query("VACUUM ANALYZE bench_rows")
        .execute(&sequential)
        .await
        .expect("vacuum bench_rows");

    // The same, with commits that do not wait for the WAL flush: takes the
    // disk out of the per-call time, so client-side overhead shows.
    let no_flush = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options.clone().options([("synchronous_commit", "off")]))
        .await
        .expect("connect PostgreSQL pool");
    let concurrent = PgPoolOptions::new()
        .max_connections(CONCURRENCY as u32)
        .min_connections(CONCURRENCY as u32)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .expect("connect PostgreSQL pool");
    let synchronous_commit: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&sequential)
        .await
        .expect("synchronous_commit");

    let with_flush = format!("synchronous_commit={synchronous_commit} (server setting)");
    run::<Pg>(
        &[
            (with_flush.as_str(), &sequential),
            ("synchronous_commit=off (session)", &no_flush),
        ],
        &concurrent,
        rows,
        seeded,
    )
    .await;
    concurrent.close().await;
    no_flush.close().await;
    sequential.close().await;
}

#[tokio::main]
async fn main() {
    // The hand-written text is the generated text, less its PostgreSQL tag
    // (which the library's path pays for): the same statement otherwise,
    // the same plan.
    let generated = BenchState::advance().def().update_sql();
    let untagged = batches::untagged;
    assert_eq!(
        HAND_PG,
        untagged(generated.postgres()),
        "PostgreSQL SQL differs"
    );
    assert_eq!(HAND_SQLITE, generated.sqlite(), "SQLite SQL differs");
    let generated = BenchState::settle(String::new(), 0)
        .transition()
        .def()
        .update_sql();
    assert_eq!(
        HAND_BOUND_PG,
        untagged(generated.postgres()),
        "PostgreSQL SQL differs (settle)"
    );
    assert_eq!(
        HAND_BOUND_SQLITE,
        generated.sqlite(),
        "SQLite SQL differs (settle)"
    );

    let rows = bench_rows();
    println!(
        "stateguard throughput: Transition::apply (winning path) vs hand-written sqlx CAS\n\
         SQL: {HAND_PG}\n\
         key: i64; pools with test_before_acquire=false; \
         {rows} measured transitions per variant per backend (STATEGUARD_BENCH_ROWS)\n"
    );
    let started = Instant::now();
    sqlite(rows).await;
    println!();
    postgres(rows).await;
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}
