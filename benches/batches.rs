//! Set-at-a-time operations against their alternatives, in one process,
//! on the same server, as ratios of rows moved per second:
//!
//! - `apply_many` over 10,000 keys against a loop of `apply` over 10,000
//!   keys (target: at least 20× faster) and against a hand-written
//!   statement of the usual shape (PostgreSQL `UPDATE … WHERE id = ANY($1)`,
//!   SQLite `UPDATE … WHERE id IN (SELECT value FROM json_each(?1))`, each
//!   `RETURNING id` and read into a `Vec<i64>`, since a caller needs to
//!   know which rows moved; target: within 10%), on PostgreSQL and
//!   SQLite. Rounds alternate
//!   (ABBA…), each on rows of its own.
//! - `claim` with 8 workers taking batches of 50 against a hand-written
//!   `FOR UPDATE SKIP LOCKED` claim of the same shape (target: within 10%)
//!   and against the "read the oldest pending row, then apply" pattern
//!   (target: at least 3× the rows per second), on PostgreSQL.
//!
//! - `apply` on a machine with a history table against the same statements
//!   by hand (on SQLite and MySQL the history insert and the
//!   compare-and-set in a transaction, on PostgreSQL the one statement) and
//!   against the same machine without history (target on PostgreSQL: at
//!   least 0.85× the throughput), one call after another on one
//!   connection, on every backend.
//!
//! - A recovery pass over 1,000 rows left in flight past their lease
//!   (`recover`, an effect that returns at once) against the per-row
//!   pattern it used to run, written by hand: list the expired rows, then
//!   take each over and finish it (target on PostgreSQL: at least 2×).
//!
//! MySQL/MariaDB (`STATEGUARD_MYSQL_URL`): the history measurements only.
//!
//! PostgreSQL: `STATEGUARD_POSTGRES_URL` (the bench works in a schema of
//! its own and drops it); without it only SQLite runs.
//!
//! Run with `cargo bench --bench batches`.

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Pool, Postgres, Sqlite};
use stateguard::{Outcome, StateMachine};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "batch_rows", column = "status", key = "id")]
enum Batch {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "claim_ours", column = "status", key = "id")]
enum Ours {
    #[state(initial)]
    #[transition(take -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "claim_pattern", column = "status", key = "id")]
enum Pattern {
    #[state(initial)]
    #[transition(take -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "plain_rows",
    column = "status",
    key = "id",
    version = "version"
)]
enum Plain {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "logged_rows",
    column = "status",
    key = "id",
    version = "version",
    history = "logged_history"
)]
enum Logged {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

/// Rows left in flight past their lease, for the recovery pass.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "flight_rows",
    column = "status",
    key = "id",
    version = "version"
)]
enum Flight {
    #[state(initial)]
    #[transition(send -> Sending)]
    Pending,
    #[state(in_flight(lease = "10s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// Expired rows per recovery pass.
const EXPIRED: i64 = 1_000;

/// The per-row pattern by hand, as a recovery pass used to run it: list the
/// expired rows, then take each over and finish it.
const HAND_LIST: &str = "SELECT id, version FROM hand_flight WHERE status = 'sending' AND \
                         (sending_since IS NULL OR sending_since < statement_timestamp() - \
                         INTERVAL '10000 milliseconds') ORDER BY sending_since IS NOT NULL, \
                         sending_since LIMIT $1";
const HAND_TAKE: &str = "UPDATE hand_flight SET sending_since = statement_timestamp() WHERE id = \
                         $1 AND status = 'sending' AND (sending_since IS NULL OR sending_since < \
                         statement_timestamp() - INTERVAL '10000 milliseconds') AND version = $2 \
                         RETURNING COALESCE(CAST(EXTRACT(EPOCH FROM sending_since) * 1000000 AS \
                         BIGINT), 0)";
const HAND_DONE: &str = "UPDATE hand_flight SET status = 'sent', version = version + 1 WHERE id = \
                         $1 AND status = 'sending' AND version = $2 AND \
                         COALESCE(CAST(EXTRACT(EPOCH FROM sending_since) * 1000000 AS BIGINT), 0) \
                         = $3";

const HISTORY_KEYS: i64 = 2_000;

const KEYS: i64 = 10_000;
const ROUNDS: i64 = 6;
const LOOP_ROUNDS: i64 = 2;
const WORKERS: usize = 8;
const CLAIM_BATCH: u32 = 50;
const CLAIM_ROWS: i64 = 20_000;
const PATTERN_ROWS: i64 = 4_000;

const HAND_PG: &str = "UPDATE batch_rows SET status = 'b' WHERE id = ANY($1) AND status IN ('a') \
                       RETURNING id";
const HAND_SQLITE: &str = "UPDATE batch_rows SET status = 'b' WHERE id IN \
                           (SELECT value FROM json_each(?1)) AND status IN ('a') RETURNING id";
const HAND_CLAIM: &str = "UPDATE claim_hand SET status = 'b' WHERE id IN (SELECT id FROM \
                          claim_hand WHERE status IN ('a') ORDER BY id LIMIT $1 FOR UPDATE SKIP \
                          LOCKED) AND status IN ('a') RETURNING id";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One measured case: the backend, what ran, the library's and the
/// baseline's rows per second (medians of the rounds), the median of the
/// per-round ratios, and the baseline.
pub struct Measured {
    pub backend: &'static str,
    pub case: String,
    pub ours: f64,
    pub other: f64,
    pub paired: f64,
    pub against: String,
}

/// The cases measured so far, and the backend they run on now.
static MEASURED: std::sync::Mutex<Vec<Measured>> = std::sync::Mutex::new(Vec::new());
static BACKEND: std::sync::Mutex<&str> = std::sync::Mutex::new("");

fn on_backend(name: &'static str) {
    *BACKEND.lock().unwrap() = name;
}

fn report(label: &str, ours: &[f64], other: &[f64], other_label: &str) {
    let paired = median(ours.iter().zip(other).map(|(a, b)| a / b).collect());
    MEASURED.lock().unwrap().push(Measured {
        backend: *BACKEND.lock().unwrap(),
        case: label.to_owned(),
        ours: median(ours.to_vec()),
        other: median(other.to_vec()),
        paired,
        against: other_label.to_owned(),
    });
}

/// Every case on every configured backend, each skipped one with its
/// reason; returns the measurements.
pub async fn all() -> Vec<Measured> {
    sqlite().await;
    match std::env::var("STATEGUARD_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => postgres(&url).await,
        _ => println!("PostgreSQL: skipped, because STATEGUARD_POSTGRES_URL is not set"),
    }
    match std::env::var("STATEGUARD_MYSQL_URL") {
        Ok(url) if !url.trim().is_empty() => mysql(&url).await,
        _ => println!("MySQL: skipped, because STATEGUARD_MYSQL_URL is not set"),
    }
    std::mem::take(&mut *MEASURED.lock().unwrap())
}

/// Rows per second of `round` over keys `from..from + KEYS`.
async fn timed<F, Fut>(from: i64, round: F) -> f64
where
    F: FnOnce(Vec<i64>) -> Fut,
    Fut: Future<Output = ()>,
{
    let keys: Vec<i64> = (from..from + KEYS).collect();
    let started = Instant::now();
    round(keys).await;
    KEYS as f64 / started.elapsed().as_secs_f64()
}

/// Runs `a` and `b` one after the other, `a` first in even rounds and `b`
/// first in odd ones (ABBA…), and returns their results as `(a, b)`.
async fn alternate<T>(
    round: i64,
    a: impl Future<Output = T>,
    b: impl Future<Output = T>,
) -> (T, T) {
    if round % 2 == 0 {
        let a = a.await;
        (a, b.await)
    } else {
        let b = b.await;
        (a.await, b)
    }
}

/// `apply_many` against `hand_round` (the same update written by hand)
/// in alternating rounds, then against a loop of `apply`, each round on
/// rows of its own.
async fn many_rounds<DB, H, Fut>(pool: &Pool<DB>, hand_label: &str, hand_round: H)
where
    DB: stateguard::bounds::Batched,
    i64: stateguard::bounds::Key<DB>
        + for<'r> sqlx::Decode<'r, DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    H: Fn(Vec<i64>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut next = 1;
    let (mut many, mut hand, mut lp, mut many_vs_loop) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        let (ours, theirs) = alternate(
            round,
            timed(next, |k| many_round(pool, k)),
            timed(next + KEYS, &hand_round),
        )
        .await;
        many.push(ours);
        hand.push(theirs);
        next += 2 * KEYS;
    }
    for _ in 0..LOOP_ROUNDS {
        many_vs_loop.push(timed(next, |k| many_round(pool, k)).await);
        lp.push(timed(next + KEYS, |k| loop_round(pool, k)).await);
        next += 2 * KEYS;
    }
    report(
        &format!("apply_many vs hand-written {hand_label}"),
        &many,
        &hand,
        "hand-written",
    );
    report("apply_many vs a loop of apply", &many_vs_loop, &lp, "loop");
}

async fn many_round<DB>(pool: &Pool<DB>, keys: Vec<i64>)
where
    DB: stateguard::bounds::Batched,
    i64: stateguard::bounds::Key<DB>
        + for<'r> sqlx::Decode<'r, DB>
        + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    let outcomes = Batch::advance().apply_many(pool, &keys).await.unwrap();
    assert!(outcomes.iter().all(Outcome::is_applied));
}

async fn loop_round<DB>(pool: &Pool<DB>, keys: Vec<i64>)
where
    DB: stateguard::Backend,
    i64: stateguard::bounds::Key<DB>,
{
    for key in keys {
        assert!(
            Batch::advance()
                .apply(pool, key)
                .await
                .unwrap()
                .is_applied()
        );
    }
}

/// Rows per second of `apply` on the machine without history, on the one
/// with, and of `hand(key)` (the statements the latter runs, by hand), in
/// rounds over fresh rows, each round in another order.
async fn history_rounds<DB, H, Fut>(pool: &Pool<DB>, hand: H) -> [Vec<f64>; 3]
where
    DB: stateguard::Backend,
    i64: stateguard::bounds::Key<DB>,
    H: Fn(i64) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut next = 1;
    for round in 0..ROUNDS {
        // The library's calls and the hand-written ones on rows of their own.
        let keys: Vec<i64> = (next..next + HISTORY_KEYS).collect();
        let hand_keys: Vec<i64> = (next + HISTORY_KEYS..next + 2 * HISTORY_KEYS).collect();
        next += 2 * HISTORY_KEYS;
        let mut order = [0, 1, 2];
        order.rotate_left(round as usize % 3);
        for case in order {
            let started = Instant::now();
            match case {
                0 => {
                    for &key in &keys {
                        assert!(
                            Plain::advance()
                                .apply(pool, key)
                                .await
                                .unwrap()
                                .is_applied()
                        );
                    }
                }
                1 => {
                    for &key in &keys {
                        assert!(
                            Logged::advance()
                                .apply(pool, key)
                                .await
                                .unwrap()
                                .is_applied()
                        );
                    }
                }
                _ => {
                    for &key in &hand_keys {
                        hand(key).await;
                    }
                }
            }
            rates[case].push(HISTORY_KEYS as f64 / started.elapsed().as_secs_f64());
        }
    }
    rates
}

/// Both history lines of the report.
fn report_history([plain, logged, hand]: [Vec<f64>; 3]) {
    report(
        "apply with history vs the same statements by hand (1 connection)",
        &logged,
        &hand,
        "by hand",
    );
    report(
        "apply with history vs without (1 connection)",
        &logged,
        &plain,
        "without",
    );
}

/// The history's statements of `Logged::advance`: on SQLite and MySQL the
/// history insert and the compare-and-set, on PostgreSQL one statement.
fn logged_sql() -> (
    Option<&'static stateguard::meta::Sql>,
    &'static stateguard::meta::Sql,
) {
    let advance = Logged::MACHINE.transition("advance").unwrap();
    (
        advance.history_insert_sql().map(|[plain, _]| plain),
        advance.update_sql(),
    )
}

async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("batches.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(30));
    let pool: Pool<Sqlite> = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE batch_rows (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let rows = KEYS * (2 * ROUNDS + 2 * LOOP_ROUNDS);
    sqlx::query(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1) \
         INSERT INTO batch_rows (id, status) SELECT x, 'a' FROM n",
    )
    .bind(rows)
    .execute(&pool)
    .await
    .unwrap();
    let history_rows = 2 * HISTORY_KEYS * ROUNDS;
    for statement in [
        "CREATE TABLE plain_rows (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
         version INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE logged_rows (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
         version INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE logged_history (history_id INTEGER PRIMARY KEY AUTOINCREMENT, id, \
         transition TEXT NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL, \
         occurrence INTEGER NOT NULL, moved_at TEXT NOT NULL, actor TEXT, reason TEXT, details TEXT)",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    for statement in [
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1) \
         INSERT INTO plain_rows (id, status) SELECT x, 'a' FROM n",
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?1) \
         INSERT INTO logged_rows (id, status) SELECT x, 'a' FROM n",
    ] {
        sqlx::query(statement)
            .bind(history_rows)
            .execute(&pool)
            .await
            .unwrap();
    }
    on_backend("SQLite (temp file, WAL)");
    let hand_round = |keys: Vec<i64>| {
        let pool = pool.clone();
        async move {
            let json = format!(
                "[{}]",
                keys.iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            // The ids that moved, as a caller needs them.
            let rows: Vec<i64> = sqlx::query_scalar(HAND_SQLITE)
                .bind(json)
                .fetch_all(&pool)
                .await
                .unwrap();
            assert_eq!(rows.len() as i64, KEYS);
        }
    };
    many_rounds(&pool, "json_each", hand_round).await;
    let (log, update) = logged_sql();
    let (log, update) = (log.unwrap().sqlite(), update.sqlite());
    let hand = |key: i64| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let logged = sqlx::query(log)
                .bind(key)
                .bind(None::<String>)
                .bind(None::<String>)
                .bind(None::<String>)
                .execute(&mut *tx)
                .await
                .unwrap();
            let version: i64 = sqlx::query_scalar(update)
                .bind(key)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert_eq!((logged.rows_affected(), version), (1, 1));
            tx.commit().await.unwrap();
        }
    };
    report_history(history_rounds(&pool, hand).await);
}

async fn postgres(url: &str) {
    let schema = format!("stateguard_batches_{}", std::process::id());
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap();
    // The schema name is made here from a number; it is not user input.
    sqlx::query("SELECT set_config('stateguard.bench_schema', $1, false)")
        .bind(&schema)
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query(
        "DO $$ BEGIN EXECUTE format('CREATE SCHEMA %I', \
         current_setting('stateguard.bench_schema')); END $$",
    )
    .execute(&admin)
    .await
    .unwrap();
    let options = PgConnectOptions::from_str(url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pool: Pool<Postgres> = PgPoolOptions::new()
        .max_connections(WORKERS as u32)
        .connect_with(options)
        .await
        .unwrap();
    let rows = KEYS * (2 * ROUNDS + 2 * LOOP_ROUNDS);
    for statement in [
        "CREATE TABLE batch_rows (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE claim_ours (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE claim_hand (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE claim_pattern (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE INDEX ON claim_ours (status, id)",
        "CREATE INDEX ON claim_hand (status, id)",
        "CREATE INDEX ON claim_pattern (status, id)",
        "CREATE TABLE plain_rows (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE logged_rows (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE logged_history (history_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
         id BIGINT, transition TEXT NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL, \
         occurrence BIGINT NOT NULL, moved_at TIMESTAMPTZ NOT NULL, actor TEXT, reason TEXT, \
         details JSONB)",
        "CREATE INDEX ON logged_history (id)",
        "CREATE TABLE flight_rows (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ)",
        "CREATE INDEX ON flight_rows (status, sending_since)",
        "CREATE TABLE hand_flight (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ)",
        "CREATE INDEX ON hand_flight (status, sending_since)",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    sqlx::query("INSERT INTO batch_rows SELECT g, 'a' FROM generate_series(1::bigint, $1) g")
        .bind(rows)
        .execute(&pool)
        .await
        .unwrap();
    on_backend("PostgreSQL");
    let hand_round = |keys: Vec<i64>| {
        let pool = pool.clone();
        async move {
            // The ids that moved, as a caller needs them.
            let rows: Vec<i64> = sqlx::query_scalar(HAND_PG)
                .bind(keys)
                .fetch_all(&pool)
                .await
                .unwrap();
            assert_eq!(rows.len() as i64, KEYS);
        }
    };
    many_rounds(&pool, "= ANY($1)", hand_round).await;
    for statement in [
        "INSERT INTO plain_rows (id, status) SELECT g, 'a' FROM generate_series(1::bigint, $1) g",
        "INSERT INTO logged_rows (id, status) SELECT g, 'a' FROM generate_series(1::bigint, $1) g",
    ] {
        sqlx::query(statement)
            .bind(2 * HISTORY_KEYS * ROUNDS)
            .execute(&pool)
            .await
            .unwrap();
    }
    let one = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(
            PgConnectOptions::from_str(url)
                .unwrap()
                .options([("search_path", schema.as_str())]),
        )
        .await
        .unwrap();
    // Without the tag, as the library ran it before every statement
    // proved its rows: the ratio includes the tag's cost.
    let update = untagged(logged_sql().1.postgres());
    let hand = |key: i64| {
        let one = one.clone();
        async move {
            let version: i64 = sqlx::query_scalar(update)
                .bind(key)
                .bind(None::<String>)
                .bind(None::<String>)
                .bind(None::<String>)
                .fetch_one(&one)
                .await
                .unwrap();
            assert_eq!(version, 1);
        }
    };
    report_history(history_rounds(&one, hand).await);
    recovery_rounds(&one).await;
    one.close().await;

    // Claims: 8 workers drain a table.
    let (mut ours, mut hand, mut ours_p, mut pattern) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        for (table, n) in [
            ("claim_ours", CLAIM_ROWS),
            ("claim_hand", CLAIM_ROWS),
            ("claim_pattern", PATTERN_ROWS),
        ] {
            let _ = table;
            let refill: &'static str = match table {
                "claim_ours" => {
                    "INSERT INTO claim_ours SELECT g, 'a' FROM generate_series(1::bigint, $1) g"
                }
                "claim_hand" => {
                    "INSERT INTO claim_hand SELECT g, 'a' FROM generate_series(1::bigint, $1) g"
                }
                _ => {
                    "INSERT INTO claim_pattern SELECT g, 'a' FROM generate_series(1::bigint, $1) g"
                }
            };
            let clear: &'static str = match table {
                "claim_ours" => "TRUNCATE claim_ours",
                "claim_hand" => "TRUNCATE claim_hand",
                _ => "TRUNCATE claim_pattern",
            };
            sqlx::query(clear).execute(&pool).await.unwrap();
            sqlx::query(refill).bind(n).execute(&pool).await.unwrap();
        }
        sqlx::query("ANALYZE").execute(&pool).await.unwrap();
        let run_ours = drain(&pool, CLAIM_ROWS, claim_ours);
        let run_hand = drain(&pool, CLAIM_ROWS, claim_hand);
        let (o, h) = alternate(round, run_ours, run_hand).await;
        ours.push(o);
        hand.push(h);
        sqlx::query("TRUNCATE claim_ours")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO claim_ours SELECT g, 'a' FROM generate_series(1::bigint, $1) g")
            .bind(PATTERN_ROWS)
            .execute(&pool)
            .await
            .unwrap();
        ours_p.push(drain(&pool, PATTERN_ROWS, claim_ours).await);
        pattern.push(drain(&pool, PATTERN_ROWS, oldest_then_apply).await);
    }
    report(
        &format!("claim, {WORKERS} workers, batches of {CLAIM_BATCH}, vs hand-written SKIP LOCKED"),
        &ours,
        &hand,
        "hand-written",
    );
    report(
        &format!("claim vs oldest-pending-then-apply, {WORKERS} workers"),
        &ours_p,
        &pattern,
        "oldest-pending pattern",
    );
    pool.close().await;
    sqlx::query(
        "DO $$ BEGIN EXECUTE format('DROP SCHEMA %I CASCADE', \
         current_setting('stateguard.bench_schema')); END $$",
    )
    .execute(&admin)
    .await
    .unwrap();
}

/// A recovery pass over `EXPIRED` rows left in flight an hour ago, with an
/// effect that returns at once, against the per-row pattern written by
/// hand (list, then take over and finish each row), in alternating rounds.
async fn recovery_rounds(pool: &Pool<Postgres>) {
    let mut ours = Vec::new();
    let mut hand = Vec::new();
    for round in 0..ROUNDS {
        for statement in [
            "TRUNCATE flight_rows",
            "TRUNCATE hand_flight",
            "INSERT INTO flight_rows SELECT g, 'sending', 1, now() - INTERVAL '1 hour' \
             FROM generate_series(1::bigint, 1000) g",
            "INSERT INTO hand_flight SELECT g, 'sending', 1, now() - INTERVAL '1 hour' \
             FROM generate_series(1::bigint, 1000) g",
            "VACUUM ANALYZE flight_rows",
            "VACUUM ANALYZE hand_flight",
        ] {
            sqlx::query(statement).execute(pool).await.unwrap();
        }
        let run_ours = async {
            let started = Instant::now();
            let report = stateguard::recover(
                pool,
                Flight::Sending,
                EXPIRED as u32,
                |_: stateguard::Effect<Flight, i64>| async { stateguard::Verdict::done() },
            )
            .await
            .unwrap();
            assert_eq!(report.done, EXPIRED as usize, "{report:?}");
            EXPIRED as f64 / started.elapsed().as_secs_f64()
        };
        let run_hand = async {
            let started = Instant::now();
            let expired: Vec<(i64, i64)> = sqlx::query_as(HAND_LIST)
                .bind(EXPIRED)
                .fetch_all(pool)
                .await
                .unwrap();
            let mut done = 0;
            for (id, version) in expired {
                let token: Option<i64> = sqlx::query_scalar(HAND_TAKE)
                    .bind(id)
                    .bind(version)
                    .fetch_optional(pool)
                    .await
                    .unwrap();
                let Some(token) = token else { continue };
                let moved = sqlx::query(HAND_DONE)
                    .bind(id)
                    .bind(version)
                    .bind(token)
                    .execute(pool)
                    .await
                    .unwrap();
                done += moved.rows_affected();
            }
            assert_eq!(done, EXPIRED as u64);
            EXPIRED as f64 / started.elapsed().as_secs_f64()
        };
        let (o, h) = alternate(round, run_ours, run_hand).await;
        ours.push(o);
        hand.push(h);
    }
    report(
        &format!(
            "recovery pass over {EXPIRED} expired rows vs the per-row pattern by hand (1 \
             connection)"
        ),
        &ours,
        &hand,
        "per-row pattern",
    );
}

async fn claim_ours(pool: Pool<Postgres>) -> usize {
    Ours::take()
        .claim::<_, i64>(&pool, CLAIM_BATCH)
        .await
        .unwrap()
        .len()
}

async fn claim_hand(pool: Pool<Postgres>) -> usize {
    sqlx::query(HAND_CLAIM)
        .bind(i64::from(CLAIM_BATCH))
        .fetch_all(&pool)
        .await
        .unwrap()
        .len()
}

/// The pattern `claim` replaces: read the oldest pending row, then apply.
async fn oldest_then_apply(pool: Pool<Postgres>) -> usize {
    let oldest: Option<i64> =
        sqlx::query_scalar("SELECT id FROM claim_pattern WHERE status = 'a' ORDER BY id LIMIT 1")
            .fetch_optional(&pool)
            .await
            .unwrap();
    match oldest {
        None => 0,
        Some(id) => match Pattern::take().apply(&pool, id).await.unwrap() {
            Outcome::Applied(_) => 1,
            // Lost the race to another worker: nothing moved, but the
            // queue is not empty.
            _ => usize::MAX,
        },
    }
}

/// Rows per second for `WORKERS` tasks calling `step` until the table is
/// drained: `step` returns the rows it moved (0: none left; `usize::MAX`:
/// moved none, but rows remain).
async fn drain<F, Fut>(pool: &Pool<Postgres>, rows: i64, step: F) -> f64
where
    F: Fn(Pool<Postgres>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = usize> + Send,
{
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let (pool, step) = (pool.clone(), step.clone());
        tasks.spawn(async move {
            let mut moved = 0;
            loop {
                match step(pool.clone()).await {
                    0 => return moved,
                    usize::MAX => {}
                    n => moved += n,
                }
            }
        });
    }
    let mut moved = 0;
    while let Some(done) = tasks.join_next().await {
        moved += done.unwrap();
    }
    assert_eq!(moved as i64, rows, "every row moved once");
    rows as f64 / started.elapsed().as_secs_f64()
}

/// MySQL/MariaDB: `apply` with a history table against without, in a
/// database of the bench's own (`stateguard_batches`, made anew).
async fn mysql(url: &str) {
    let admin = sqlx::MySqlPool::connect(url).await.unwrap();
    for statement in [
        "DROP DATABASE IF EXISTS stateguard_batches",
        "CREATE DATABASE stateguard_batches",
    ] {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    let options = sqlx::mysql::MySqlConnectOptions::from_str(url)
        .unwrap()
        .database("stateguard_batches");
    let pool: Pool<sqlx::MySql> = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    for statement in [
        "CREATE TABLE plain_rows (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE logged_rows (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE logged_history (history_id BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT, \
         transition VARCHAR(255) NOT NULL, from_state VARCHAR(255) NOT NULL, to_state \
         VARCHAR(255) NOT NULL, occurrence BIGINT NOT NULL, moved_at DATETIME(3) NOT NULL, \
         actor VARCHAR(255) NULL, reason TEXT NULL, details JSON NULL, INDEX (id))",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    // The rows, from a cross join of digits (MariaDB stops a recursive CTE
    // after 1,000 rows).
    for statement in [
        "INSERT INTO plain_rows (id, status) SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 1, \
         'a' FROM (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION \
         ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
         UNION ALL SELECT 9) a, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL \
         SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
         UNION ALL SELECT 8 UNION ALL SELECT 9) b, (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL \
         SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 \
         UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c, (SELECT 0 AS d UNION ALL \
         SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
         UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e",
        "INSERT INTO plain_rows (id, status) SELECT id + 10000, status FROM plain_rows",
        "INSERT INTO plain_rows (id, status) SELECT id + 20000, status FROM plain_rows",
        "INSERT INTO logged_rows (id, status) SELECT id, status FROM plain_rows",
    ] {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    on_backend("MariaDB/MySQL");
    let (log, update) = logged_sql();
    let (log, update) = (log.unwrap().mysql(), update.mysql());
    let hand = |key: i64| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let logged = sqlx::query(log)
                .bind(None::<String>)
                .bind(None::<String>)
                .bind(None::<String>)
                .bind(key)
                .bind(key)
                .execute(&mut *tx)
                .await
                .unwrap();
            let moved = sqlx::query(update)
                .bind(key)
                .bind(key)
                .execute(&mut *tx)
                .await
                .unwrap();
            assert_eq!((logged.rows_affected(), moved.last_insert_id()), (1, 1));
            tx.commit().await.unwrap();
        }
    };
    report_history(history_rounds(&pool, hand).await);
    pool.close().await;
    sqlx::query("DROP DATABASE stateguard_batches")
        .execute(&admin)
        .await
        .unwrap();
}

#[tokio::main]
async fn main() {
    let started = Instant::now();
    let measured = all().await;
    println!();
    println!("| backend | case | library | baseline | ratio | paired | against |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | --- |");
    for m in measured {
        println!(
            "| {} | {} | {:.0} rows/s | {:.0} rows/s | {:.3} | {:.3} | {} |",
            m.backend,
            m.case,
            m.ours,
            m.other,
            m.ours / m.other,
            m.paired,
            m.against
        );
    }
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}

/// `text` without its PostgreSQL tag: the statement as the library ran it
/// before each statement proved its rows, the baseline of the winning
/// paths, so that their ratio includes what the tag costs.
pub(crate) fn untagged(text: &'static str) -> &'static str {
    let Some(at) = text.find("'stateguard ") else {
        return text;
    };
    // The tag column: `CASE WHEN $n::text = 'stateguard …' THEN … END`,
    // which checks the tag bound last; without it the statement takes one
    // value less.
    const END: &str = "AS INTEGER)::text END";
    let start = text[..at].rfind("CASE WHEN ").unwrap();
    let end = at + text[at..].find(END).unwrap() + END.len();
    let column = &text[start..end];
    let bare = text
        .replace(&format!(" RETURNING {column}, "), " RETURNING ")
        .replace(&format!(" RETURNING {column}"), "")
        .replace(&format!("SELECT {column}, "), "SELECT ");
    Box::leak(bare.into_boxed_str())
}
