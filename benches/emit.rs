//! What `emit(…)` costs the winning move: one row's compare-and-set, three
//! ways in rotation so that the machine's drift falls on each alike, on
//! every backend whose URL is set (SQLite always):
//!
//! - the move of a machine without a message (the baseline);
//! - the same move of a machine whose transition emits one
//!   (`Transition::apply`, the outbox row written in the same atomic act);
//! - the very statements of that move, run by hand with sqlx: on
//!   PostgreSQL the one statement, on SQLite and MySQL the outbox row's
//!   insert and the update in one transaction.
//!
//! `cargo bench --bench emit`. The first ratio is what a message costs;
//! the second (the library against the same statements by hand) is what
//! the library adds around them.

use std::time::{Duration, Instant};

use sqlx::Executor as _;
use stateguard::StateMachine;
use stateguard::meta::{Bind, Statement};

// One backend of the three the helpers serve at a time.
#[allow(dead_code)]
mod support;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "t_plain",
    column = "status",
    key = "id",
    version = "version",
    key_type = "i64"
)]
enum Plain {
    #[state(initial)]
    #[transition(advance -> B)]
    A,
    B,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "t_emit",
    column = "status",
    key = "id",
    version = "version",
    key_type = "i64"
)]
enum Emitting {
    #[state(initial)]
    #[transition(advance -> B, emit("bench.advanced", payload(amount)))]
    A,
    B,
}

const CALLS: i64 = 200;
const ROUNDS: usize = 20;
const WAYS: [&str; 3] = [
    "move without a message (baseline)",
    "move with its message (`emit`)",
    "the same statements by hand",
];

/// Both tables, every row the run moves, and the outbox.
fn tables(dialect: stateguard::ddl::Dialect) -> Vec<&'static str> {
    let mut out = match dialect {
        stateguard::ddl::Dialect::MySql => vec![
            "CREATE TABLE t_plain (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, version \
             BIGINT NOT NULL DEFAULT 0)",
            "CREATE TABLE t_emit (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, version \
             BIGINT NOT NULL DEFAULT 0, amount BIGINT NOT NULL DEFAULT 1250)",
        ],
        _ => vec![
            "CREATE TABLE t_plain (id BIGINT PRIMARY KEY, status TEXT NOT NULL, version BIGINT \
             NOT NULL DEFAULT 0)",
            "CREATE TABLE t_emit (id BIGINT PRIMARY KEY, status TEXT NOT NULL, version BIGINT \
             NOT NULL DEFAULT 0, amount BIGINT NOT NULL DEFAULT 1250)",
        ],
    };
    out.extend(stateguard::outbox::ddl(dialect).iter().copied());
    out
}

/// The rows `1..=n` of both tables, in state `a`.
fn seed(dialect: stateguard::ddl::Dialect) -> [&'static str; 2] {
    match dialect {
        stateguard::ddl::Dialect::Postgres => [
            "INSERT INTO t_plain (id, status) SELECT g, 'a' FROM generate_series(1, $1) g",
            "INSERT INTO t_emit (id, status) SELECT g, 'a' FROM generate_series(1, $1) g",
        ],
        stateguard::ddl::Dialect::Sqlite => [
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO t_plain (id, status) SELECT i, 'a' FROM s",
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO t_emit (id, status) SELECT i, 'a' FROM s",
        ],
        _ => [
            "INSERT INTO t_plain (id, status) SELECT a.i * 10000 + b.i * 100 + c.i + 1, 'a' \
             FROM (SELECT seq AS i FROM seq_0_to_99) a, (SELECT seq AS i FROM seq_0_to_99) b, \
             (SELECT seq AS i FROM seq_0_to_99) c WHERE a.i * 10000 + b.i * 100 + c.i < ?",
            "INSERT INTO t_emit (id, status) SELECT a.i * 10000 + b.i * 100 + c.i + 1, 'a' \
             FROM (SELECT seq AS i FROM seq_0_to_99) a, (SELECT seq AS i FROM seq_0_to_99) b, \
             (SELECT seq AS i FROM seq_0_to_99) c WHERE a.i * 10000 + b.i * 100 + c.i < ?",
        ],
    }
}

/// `statement`'s values for row `id`: the key wherever its plan names it,
/// its tag last on PostgreSQL.
macro_rules! bound {
    ($statement:expr, $id:expr) => {{
        let statement: Statement = $statement;
        let mut query = sqlx::query(statement.text());
        for bind in statement.binds() {
            query = match bind {
                Bind::Key(0) => query.bind($id),
                Bind::Tag => query.bind(statement.tag().unwrap()),
                other => panic!("a value this bench does not bind: {other:?}"),
            };
        }
        query
    }};
}

/// Runs the ways in rotation and prints the table.
macro_rules! rotate {
    ($backend:literal, $pool:expr, $by_hand:expr) => {{
        let pool = $pool;
        let rows = (ROUNDS as i64 + 1) * CALLS * WAYS.len() as i64;
        for statement in tables(DIALECT) {
            pool.execute(statement).await.unwrap();
        }
        for statement in seed(DIALECT) {
            sqlx::query(statement)
                .bind(rows)
                .execute(&pool)
                .await
                .unwrap();
        }
        let mut rates = vec![Vec::new(); WAYS.len()];
        let mut next = 1_i64;
        // One round to warm up, not counted.
        for round in 0..=ROUNDS {
            for turn in 0..WAYS.len() {
                let way = (turn + round) % WAYS.len();
                let from = next;
                next += CALLS;
                let started = Instant::now();
                for id in from..from + CALLS {
                    match way {
                        0 => assert!(
                            Plain::advance()
                                .apply(&pool, id)
                                .await
                                .unwrap()
                                .is_applied()
                        ),
                        1 => assert!(
                            Emitting::advance()
                                .apply(&pool, id)
                                .await
                                .unwrap()
                                .is_applied()
                        ),
                        _ => $by_hand(&pool, id).await,
                    }
                }
                if round > 0 {
                    rates[way].push(CALLS as f64 / started.elapsed().as_secs_f64());
                }
            }
        }
        println!(
            "\n{}: moves per second, median of {ROUNDS} rounds",
            $backend
        );
        println!("| way | moves/s | ratio | paired |");
        println!("| --- | ---: | ---: | ---: |");
        let base = support::median(rates[0].clone());
        for (way, name) in WAYS.iter().enumerate() {
            let rate = support::median(rates[way].clone());
            let paired: Vec<f64> = rates[way]
                .iter()
                .zip(&rates[0])
                .map(|(a, b)| a / b)
                .collect();
            println!(
                "| {name} | {rate:.0} | {:.3} | {:.3} |",
                rate / base,
                support::median(paired)
            );
        }
        let by_hand: Vec<f64> = rates[1].iter().zip(&rates[2]).map(|(a, b)| a / b).collect();
        println!(
            "`emit` against the same statements by hand: {:.3} (paired)",
            support::median(by_hand)
        );
    }};
}

/// The move's statements on SQLite and MySQL: the outbox row's insert,
/// then the update, in one transaction.
macro_rules! insert_then_update {
    ($db:ident, $pick:literal) => {
        |pool: &sqlx::Pool<sqlx::$db>, id: i64| {
            let pool = pool.clone();
            async move {
                let def = Emitting::MACHINE.transition("advance").unwrap();
                let [insert, _] = def.outbox_insert_sql().unwrap();
                let update = def.update_sql().statements()[$pick];
                let mut tx = pool.begin().await.unwrap();
                let done = bound!(insert.statements()[$pick], id)
                    .execute(&mut *tx)
                    .await;
                assert_eq!(done.unwrap().rows_affected(), 1);
                let done = bound!(update, id).execute(&mut *tx).await;
                assert_eq!(done.unwrap().rows_affected(), 1);
                tx.commit().await.unwrap();
            }
        }
    };
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    {
        const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Sqlite;
        support::on_sqlite(1, |pool| async move {
            rotate!("SQLite", pool, insert_then_update!(Sqlite, 1));
        })
        .await;
    }
    {
        const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Postgres;
        let place = support::Place {
            name: "stateguard_emit",
            fresh: [
                "DROP SCHEMA IF EXISTS stateguard_emit CASCADE",
                "CREATE SCHEMA stateguard_emit",
            ],
            drop: "DROP SCHEMA stateguard_emit CASCADE",
            connections: 1,
            delay: Duration::ZERO,
        };
        support::on_postgres(place, |pool| async move {
            // PostgreSQL: the one statement, its rows fetched and counted.
            let by_hand = |pool: &sqlx::PgPool, id: i64| {
                let pool = pool.clone();
                async move {
                    let def = Emitting::MACHINE.transition("advance").unwrap();
                    let update = def.update_sql().statements()[0];
                    let rows = bound!(update, id).fetch_all(&pool).await.unwrap();
                    assert_eq!(rows.len(), 1);
                }
            };
            rotate!("PostgreSQL", pool, by_hand);
        })
        .await;
    }
    {
        const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::MySql;
        let place = support::Place {
            name: "stateguard_emit",
            fresh: [
                "DROP DATABASE IF EXISTS stateguard_emit",
                "CREATE DATABASE stateguard_emit",
            ],
            drop: "DROP DATABASE stateguard_emit",
            connections: 1,
            delay: Duration::ZERO,
        };
        support::on_mysql(place, |pool| async move {
            rotate!("MySQL/MariaDB", pool, insert_then_update!(MySql, 2));
        })
        .await;
    }
}
