//! The matrix: every backend × machine × path, the library against the
//! same statements run by hand with sqlx, in one process, on one
//! connection, one call after another, in alternating rounds (ABBA…).
//!
//! The hand-written side runs the very text the derive generated (read from
//! the machine's metadata), with the same binds, and reads what a caller
//! needs (the new version, the lease token, the current status). On the
//! winning paths it runs the text without its PostgreSQL tag (`untagged`),
//! as the library ran it before every statement proved its rows, so that
//! their ratios include the tag's cost. Paths:
//!
//! - win, on a machine without a version column, with one, and into an
//!   in-flight state;
//! - lose: the compare-and-set that changes nothing, then the fresh read;
//! - finish: a win into the in-flight state, then its `done` follow-up
//!   under the lease (an effect that returns at once); and the same on a
//!   state that declares `retry(…)` against one that does not;
//! - the lock-then-update pattern (`BEGIN; SELECT … FOR UPDATE; UPDATE;
//!   COMMIT`, by hand) against the library's win on the same machine
//!   (target on PostgreSQL and MariaDB: the library at least 1.4×).
//!
//! Then the cases of `benches/batches.rs` (`apply_many`, `claim`, a
//! recovery pass over 1,000 expired rows, history), in rows per second,
//! in the same table. SQLite (a temporary file, WAL) always runs;
//! PostgreSQL (`STATEGUARD_POSTGRES_URL`, schema `stateguard_matrix`) and
//! MariaDB/MySQL (`STATEGUARD_MYSQL_URL`, database `stateguard_matrix`) when
//! their URLs are set; each says why it is skipped.
//!
//! Run with `cargo bench --bench matrix`.

use std::time::{Duration, Instant};

#[allow(dead_code)]
mod support;

// `apply_many`, `claim`, the recovery pass and history, whose cases print
// in the same table.
#[allow(dead_code)]
#[path = "batches.rs"]
mod batches;

/// The bench's own schema (PostgreSQL) and database (MySQL).
const POSTGRES: support::Place = support::Place {
    name: "stateguard_matrix",
    fresh: [
        "DROP SCHEMA IF EXISTS stateguard_matrix CASCADE",
        "CREATE SCHEMA stateguard_matrix",
    ],
    drop: "DROP SCHEMA stateguard_matrix CASCADE",
    connections: 1,
    delay: Duration::ZERO,
};
const MYSQL: support::Place = support::Place {
    name: "stateguard_matrix",
    fresh: [
        "DROP DATABASE IF EXISTS stateguard_matrix",
        "CREATE DATABASE stateguard_matrix",
    ],
    drop: "DROP DATABASE stateguard_matrix",
    connections: 1,
    delay: Duration::ZERO,
};

use sqlx::{Executor as _, Pool};
use stateguard::bounds::Key;
use stateguard::meta::Sql;
use stateguard::{Backend, StateMachine, Verdict};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "m_plain", column = "status", key = "id")]
enum Plain {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "m_versioned",
    column = "status",
    key = "id",
    version = "version"
)]
enum Versioned {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "m_flight", column = "status", key = "id", version = "version")]
enum Flight {
    #[state(initial)]
    #[transition(send -> Sending)]
    Pending,
    #[state(in_flight(lease = "60s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// `Flight` with retries declared: entering `sending` also sets the
/// attempts and clears the next attempt, in the same statement.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "m_retry", column = "status", key = "id", version = "version")]
enum Retrying {
    #[state(initial)]
    #[transition(send -> Sending)]
    Pending,
    #[state(in_flight(
        lease = "60s",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(max = 8, backoff = "2s..1h", attempts = "attempts", next_attempt = "next_attempt_at")
    ))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// Calls per round and side.
const CALLS: i64 = 250;
const ROUNDS: i64 = 20;
/// Rows per table: every round's calls on both sides of every case.
const ROWS: i64 = 40_000;

/// What differs between the backends.
trait Bench: Backend {
    const LABEL: &'static str;
    const TABLES: &'static [&'static str];
    /// Rows 1..=`$1` of each table, in its initial state.
    const SEED: &'static [&'static str];
    /// The lock-then-update pattern's read and write.
    const LOCK: &'static str;
    const WRITE: &'static str;
    fn pick(sql: &Sql) -> &'static str;
    /// Where `column` is in the result of this backend's `sql`.
    fn column_of(sql: &Sql, column: stateguard::meta::Column) -> usize {
        let text = Self::pick(sql);
        let statement = sql.statements().into_iter().find(|s| s.text() == text);
        statement.and_then(|s| s.column(column)).unwrap()
    }
    fn affected(result: &<Self as sqlx::Database>::QueryResult) -> u64;
    /// MySQL: the value `LAST_INSERT_ID(expr)` stored, from the OK packet.
    fn last_id(result: &<Self as sqlx::Database>::QueryResult) -> i64;
}

impl Bench for sqlx::Sqlite {
    const LABEL: &'static str = "SQLite (temp file, WAL)";
    const TABLES: &'static [&'static str] = &[
        "CREATE TABLE m_plain (id INTEGER PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE m_versioned (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
         version INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE m_flight (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
         version INTEGER NOT NULL DEFAULT 0, sending_since TEXT)",
        "CREATE TABLE m_retry (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
         version INTEGER NOT NULL DEFAULT 0, sending_since TEXT, \
         attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at TEXT)",
    ];
    const SEED: &'static [&'static str] = &[
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
         INSERT INTO m_plain (id, status) SELECT i, 'a' FROM s",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
         INSERT INTO m_versioned (id, status) SELECT i, 'a' FROM s",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
         INSERT INTO m_flight (id, status) SELECT i, 'pending' FROM s",
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
         INSERT INTO m_retry (id, status) SELECT i, 'pending' FROM s",
    ];
    // SQLite has no row locks: a write transaction's first read.
    const LOCK: &'static str = "SELECT status FROM m_plain WHERE id = ?1";
    const WRITE: &'static str = "UPDATE m_plain SET status = 'b' WHERE id = ?1";
    fn pick(sql: &Sql) -> &'static str {
        sql.sqlite()
    }
    fn affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }
    fn last_id(_result: &sqlx::sqlite::SqliteQueryResult) -> i64 {
        0
    }
}

impl Bench for sqlx::Postgres {
    const LABEL: &'static str = "PostgreSQL";
    const TABLES: &'static [&'static str] = &[
        "CREATE TABLE m_plain (id BIGINT PRIMARY KEY, status TEXT NOT NULL)",
        "CREATE TABLE m_versioned (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE m_flight (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ)",
        "CREATE TABLE m_retry (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ, \
         attempts INT NOT NULL DEFAULT 0, next_attempt_at TIMESTAMPTZ)",
    ];
    const SEED: &'static [&'static str] = &[
        "INSERT INTO m_plain (id, status) SELECT g, 'a' FROM generate_series(1::bigint, $1) g",
        "INSERT INTO m_versioned (id, status) SELECT g, 'a' FROM generate_series(1::bigint, $1) g",
        "INSERT INTO m_flight (id, status) SELECT g, 'pending' FROM generate_series(1::bigint, $1) g",
        "INSERT INTO m_retry (id, status) SELECT g, 'pending' FROM generate_series(1::bigint, $1) g",
    ];
    const LOCK: &'static str = "SELECT status FROM m_plain WHERE id = $1 FOR UPDATE";
    const WRITE: &'static str = "UPDATE m_plain SET status = 'b' WHERE id = $1";
    fn pick(sql: &Sql) -> &'static str {
        sql.postgres()
    }
    fn affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }
    fn last_id(_result: &sqlx::postgres::PgQueryResult) -> i64 {
        0
    }
}

/// `(SELECT … AS i …) s`: the numbers 1 to 100,000.
macro_rules! numbers {
    () => {
        concat!(
            "(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 1 AS i FROM ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) a, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) b, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) c, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) e, ",
            "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL ",
            "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL ",
            "SELECT 8 UNION ALL SELECT 9) f) s"
        )
    };
}

/// [`Versioned`] on a table with a trigger (MySQL/MariaDB only).
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "m_triggered",
    column = "status",
    key = "id",
    version = "version"
)]
enum Triggered {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

const MYSQL_TRIGGERED: &str = concat!(
    "CREATE TABLE m_triggered (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
     version BIGINT NOT NULL DEFAULT 0) SELECT i AS id, 'a' AS status, 0 AS version FROM ",
    numbers!(),
    " WHERE i <= 40000"
);
/// A trigger as light as one can be: any trigger makes MariaDB's OK packet
/// carry 0 for `LAST_INSERT_ID(expr)`.
const MYSQL_TRIGGER: &str =
    "CREATE TRIGGER m_triggered_audit AFTER UPDATE ON m_triggered FOR EACH ROW SET @audited = 1";
const MYSQL_LAST_ID: &str = "SELECT CAST(LAST_INSERT_ID() AS SIGNED)";

impl Bench for sqlx::MySql {
    const LABEL: &'static str = "MariaDB/MySQL";
    const TABLES: &'static [&'static str] = &[
        "CREATE TABLE m_plain (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)",
        "CREATE TABLE m_versioned (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0)",
        "CREATE TABLE m_flight (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3) NULL)",
        "CREATE TABLE m_retry (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
         version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3) NULL, \
         attempts INT NOT NULL DEFAULT 0, next_attempt_at DATETIME(3) NULL)",
    ];
    const SEED: &'static [&'static str] = &[
        concat!(
            "INSERT INTO m_plain (id, status) SELECT i, 'a' FROM ",
            numbers!(),
            " WHERE i <= ?"
        ),
        concat!(
            "INSERT INTO m_versioned (id, status) SELECT i, 'a' FROM ",
            numbers!(),
            " WHERE i <= ?"
        ),
        concat!(
            "INSERT INTO m_flight (id, status) SELECT i, 'pending' FROM ",
            numbers!(),
            " WHERE i <= ?"
        ),
        concat!(
            "INSERT INTO m_retry (id, status) SELECT i, 'pending' FROM ",
            numbers!(),
            " WHERE i <= ?"
        ),
    ];
    const LOCK: &'static str = "SELECT status FROM m_plain WHERE id = ? FOR UPDATE";
    const WRITE: &'static str = "UPDATE m_plain SET status = 'b' WHERE id = ?";
    fn pick(sql: &Sql) -> &'static str {
        sql.mysql()
    }
    fn affected(result: &sqlx::mysql::MySqlQueryResult) -> u64 {
        result.rows_affected()
    }
    fn last_id(result: &sqlx::mysql::MySqlQueryResult) -> i64 {
        result.last_insert_id() as i64
    }
}

use support::median;

/// One line of the table.
struct Line {
    backend: &'static str,
    case: String,
    ours: f64,
    hand: f64,
    paired: f64,
    against: String,
}

/// Calls per second of `CALLS` calls of `one(id)` over `from..`.
async fn timed<F, Fut>(from: i64, one: &F) -> f64
where
    F: Fn(i64) -> Fut,
    Fut: Future<Output = ()>,
{
    let started = Instant::now();
    for id in from..from + CALLS {
        one(id).await;
    }
    CALLS as f64 / started.elapsed().as_secs_f64()
}

/// `ours` against `hand`, each round on fresh ids from `next`, alternating.
async fn case<FO, FutO, FH, FutH>(
    lines: &mut Vec<Line>,
    backend: &'static str,
    name: &'static str,
    against: &'static str,
    next: &mut i64,
    ours: FO,
    hand: FH,
) where
    FO: Fn(i64) -> FutO,
    FutO: Future<Output = ()>,
    FH: Fn(i64) -> FutH,
    FutH: Future<Output = ()>,
{
    let (mut o, mut h, mut pairs) = (vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        let (a, b) = (*next, *next + CALLS);
        *next += 2 * CALLS;
        let (x, y) = if round % 2 == 0 {
            let x = timed(a, &ours).await;
            (x, timed(b, &hand).await)
        } else {
            let y = timed(b, &hand).await;
            (timed(a, &ours).await, y)
        };
        o.push(x);
        h.push(y);
        pairs.push(x / y);
    }
    lines.push(Line {
        backend,
        case: name.to_owned(),
        ours: median(o),
        hand: median(h),
        paired: median(pairs),
        against: against.to_owned(),
    });
}

/// The key's binds: once, or as often as the dialect's exact match names
/// it (twice on MySQL).
fn bind_key<'q, DB: Bench>(
    mut query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    id: i64,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    i64: Key<DB>,
{
    let binds = if DB::LABEL == "MariaDB/MySQL" { 2 } else { 1 };
    for _ in 0..binds {
        query = query.bind(id);
    }
    query
}

async fn run<DB: Bench>(pool: Pool<DB>, lines: &mut Vec<Line>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: Key<DB> + for<'r> sqlx::Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
    String: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    for statement in DB::TABLES {
        (&pool).execute(*statement).await.unwrap();
    }
    for statement in DB::SEED {
        sqlx::query(*statement)
            .bind(ROWS)
            .execute(&pool)
            .await
            .unwrap();
    }
    let mysql = DB::LABEL == "MariaDB/MySQL";
    let name = DB::LABEL;
    let pool = &pool;

    // Win, unversioned.
    let advance = Plain::MACHINE.transition("advance").unwrap();
    let update = batches::untagged(DB::pick(advance.update_sql()));
    let mut next = 1;
    case(
        lines,
        name,
        "win, unversioned",
        "same statement by hand, untagged",
        &mut next,
        |id| async move {
            assert!(Plain::advance().apply(pool, id).await.unwrap().is_applied());
        },
        |id| async move {
            let done = bind_key::<DB>(sqlx::query(update), id)
                .execute(pool)
                .await
                .unwrap();
            assert_eq!(DB::affected(&done), 1);
        },
    )
    .await;
    let won_upto = next;

    // Lose: rows already in `b`, then the fresh read.
    // By hand untagged, as the winning paths: the tag column, first, goes.
    let tagged_select = DB::pick(Plain::MACHINE.select_sql());
    let select = batches::untagged(tagged_select);
    let status_at = DB::column_of(
        Plain::MACHINE.select_sql(),
        stateguard::meta::Column::Status,
    ) - usize::from(select != tagged_select);
    let mut lose_next = 1;
    case(
        lines,
        name,
        "lose (compare-and-set, fresh read)",
        "same statements by hand, untagged",
        &mut lose_next,
        |id| async move {
            let outcome = Plain::advance().apply(pool, id).await.unwrap();
            assert!(!outcome.is_applied());
        },
        |id| async move {
            let done = bind_key::<DB>(sqlx::query(update), id)
                .execute(pool)
                .await
                .unwrap();
            assert_eq!(DB::affected(&done), 0);
            let row = bind_key::<DB>(sqlx::query(select), id)
                .fetch_one(pool)
                .await
                .unwrap();
            let status: String = sqlx::Row::get(&row, status_at);
            assert_eq!(status, "b");
        },
    )
    .await;
    assert!(lose_next <= won_upto);

    // The lock-then-update pattern against the library's win.
    case(
        lines,
        name,
        "win vs lock-then-update",
        "BEGIN; SELECT … FOR UPDATE; UPDATE; COMMIT",
        &mut next,
        |id| async move {
            assert!(Plain::advance().apply(pool, id).await.unwrap().is_applied());
        },
        |id| async move {
            let mut tx = pool.begin().await.unwrap();
            let status: String = sqlx::query_scalar(DB::LOCK)
                .bind(id)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert_eq!(status, "a");
            sqlx::query(DB::WRITE)
                .bind(id)
                .execute(&mut *tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        },
    )
    .await;

    // Win, versioned: the new version comes back.
    let versioned = Versioned::MACHINE.transition("advance").unwrap();
    let update_v = batches::untagged(DB::pick(versioned.update_sql()));
    let mut next = 1;
    case(
        lines,
        name,
        "win, versioned",
        "same statement by hand, untagged",
        &mut next,
        |id| async move {
            let won = Versioned::advance()
                .apply(pool, id)
                .await
                .unwrap()
                .won()
                .unwrap();
            assert_eq!(won.occurrence(), 1);
        },
        |id| async move {
            let query = bind_key::<DB>(sqlx::query(update_v), id);
            let version = match mysql {
                true => {
                    let done = query.execute(pool).await.unwrap();
                    DB::last_id(&done)
                }
                false => sqlx::Row::get::<i64, _>(&query.fetch_one(pool).await.unwrap(), 0),
            };
            assert_eq!(version, 1);
        },
    )
    .await;

    // MySQL/MariaDB, a versioned win on a table with a trigger: MariaDB's
    // OK packet then drops the version, which is read back on the same
    // connection. By hand: the same two statements.
    if mysql {
        (pool).execute(MYSQL_TRIGGERED).await.unwrap();
        (pool).execute(MYSQL_TRIGGER).await.unwrap();
        let update_t = DB::pick(
            Triggered::MACHINE
                .transition("advance")
                .unwrap()
                .update_sql(),
        );
        let mut next = 1;
        case(
            lines,
            name,
            "win, versioned, table with a trigger",
            "same statements by hand (UPDATE, LAST_INSERT_ID())",
            &mut next,
            |id| async move {
                let won = Triggered::advance()
                    .apply(pool, id)
                    .await
                    .unwrap()
                    .won()
                    .unwrap();
                assert_eq!(won.occurrence(), 1);
            },
            |id| async move {
                let mut conn = pool.acquire().await.unwrap();
                let done = bind_key::<DB>(sqlx::query(update_t), id)
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(DB::last_id(&done), 0, "MariaDB's packet drops the version");
                let version: i64 = sqlx::query_scalar(MYSQL_LAST_ID)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(version, 1);
            },
        )
        .await;
    }

    // Win into an in-flight state: the version and the lease token.
    let send = Flight::MACHINE.transition("send").unwrap();
    let update_f = batches::untagged(DB::pick(send.update_sql()));
    let read_back = DB::pick(send.read_back_sql());
    let mut next = 1;
    case(
        lines,
        name,
        "win into an in-flight state",
        "same statements by hand, untagged",
        &mut next,
        |id| async move {
            let won = Flight::send().apply(pool, id).await.unwrap().won().unwrap();
            drop(won);
        },
        |id| async move {
            let query = bind_key::<DB>(sqlx::query(update_f), id);
            if mysql {
                // One connection: the read-back sees the same session.
                let mut conn = pool.acquire().await.unwrap();
                let done = query.execute(&mut *conn).await.unwrap();
                assert_eq!(DB::affected(&done), 1);
                let row = bind_key::<DB>(sqlx::query(read_back), id)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                let _token: i64 = sqlx::Row::get(&row, 1);
            } else {
                let row = query.fetch_one(pool).await.unwrap();
                let _token: i64 = sqlx::Row::get(&row, 1);
            }
        },
    )
    .await;

    // Finish: the win into the in-flight state, then `done` under the lease.
    let sending = Flight::MACHINE
        .state(Flight::Sending)
        .and_then(|s| s.in_flight())
        .unwrap();
    let done_sql = batches::untagged(DB::pick(sending.done_sql()));
    case(
        lines,
        name,
        "finish (win, effect, follow-up)",
        "same statements by hand, untagged",
        &mut next,
        |id| async move {
            let won = Flight::send().apply(pool, id).await.unwrap().won().unwrap();
            let finished = won
                .finish(pool, |_| async { Verdict::done() })
                .await
                .unwrap();
            assert!(matches!(finished, stateguard::Finished::Done { .. }));
        },
        // On the pool, as the library runs them: the win (with MySQL's
        // read-back on its connection), then the follow-up.
        |id| async move {
            let query = bind_key::<DB>(sqlx::query(update_f), id);
            let (version, token): (i64, i64) = if mysql {
                let mut conn = pool.acquire().await.unwrap();
                query.execute(&mut *conn).await.unwrap();
                let row = bind_key::<DB>(sqlx::query(read_back), id)
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                (sqlx::Row::get(&row, 0), sqlx::Row::get(&row, 1))
            } else {
                let row = query.fetch_one(pool).await.unwrap();
                (sqlx::Row::get(&row, 0), sqlx::Row::get(&row, 1))
            };
            let done = bind_key::<DB>(sqlx::query(done_sql), id)
                .bind(version)
                .bind(token)
                .execute(pool)
                .await
                .unwrap();
            assert_eq!(DB::affected(&done), 1);
        },
    )
    .await;

    // Finish with retries declared against the same without: the win
    // still takes one statement, which also counts the first attempt.
    // The ids go on from the finish above: `m_flight` rows are used once.
    case(
        lines,
        name,
        "finish, retry declared",
        "finish on the same machine without retry",
        &mut next,
        |id| async move {
            let won = Retrying::send()
                .apply(pool, id)
                .await
                .unwrap()
                .won()
                .unwrap();
            assert_eq!(won.attempt(), Some(1));
            let finished = won
                .finish(pool, |_| async { Verdict::done() })
                .await
                .unwrap();
            assert!(matches!(finished, stateguard::Finished::Done { .. }));
        },
        |id| async move {
            let won = Flight::send().apply(pool, id).await.unwrap().won().unwrap();
            let finished = won
                .finish(pool, |_| async { Verdict::done() })
                .await
                .unwrap();
            assert!(matches!(finished, stateguard::Finished::Done { .. }));
        },
    )
    .await;
}

fn print(lines: &[Line]) {
    println!();
    println!("| backend | path | library | baseline | ratio | paired | the baseline |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | --- |");
    for l in lines {
        println!(
            "| {} | {} | {:.0}/s | {:.0}/s | {:.3} | {:.3} | {} |",
            l.backend,
            l.case,
            l.ours,
            l.hand,
            l.ours / l.hand,
            l.paired,
            l.against
        );
    }
}

/// The matrix's cases, one call after another on one thread, as they were
/// measured before the batches joined the table.
async fn matrix() -> Vec<Line> {
    let mut lines = Vec::new();
    support::on_sqlite(1, |pool| run(pool, &mut lines)).await;
    support::on_postgres(POSTGRES, |pool| run(pool, &mut lines)).await;
    support::on_mysql(MYSQL, |pool| run(pool, &mut lines)).await;
    lines
}

/// The matrix on a single-threaded runtime (one call after another: no
/// other thread to hand work to), then the batches' cases on a
/// multi-threaded one (their claims run eight workers at once).
fn main() {
    let started = Instant::now();
    let runtime = |threaded: bool| {
        let mut builder = match threaded {
            true => tokio::runtime::Builder::new_multi_thread(),
            false => tokio::runtime::Builder::new_current_thread(),
        };
        builder.enable_all().build().unwrap()
    };
    let mut lines = runtime(false).block_on(matrix());
    for m in runtime(true).block_on(batches::all()) {
        lines.push(Line {
            backend: m.backend,
            case: m.case,
            ours: m.ours,
            hand: m.other,
            paired: m.paired,
            against: m.against,
        });
    }
    print(&lines);
    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}
