//! `stateguard::pooler::check` against a real PgBouncer
//! (`tools/pgbouncer/start.sh`): it refuses a pool behind transaction
//! pooling, lets it through when acknowledged, and stays silent on a direct
//! connection and under session pooling, where the race of `race.rs` still
//! gives one win and one effect per row.
//!
//! The PgBouncer instances keep `default_pool_size` small, so the tests
//! that use the session-mode one take turns (`SESSION_TURN`) and close
//! their pools: under session pooling every client connection holds a
//! server session until it disconnects.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use stateguard::pooler::{self, Acknowledgement, Multiplexing, Pooling, ServerSession};
use stateguard::{Error, ErrorKind};

const DIRECT: &str = "STATEGUARD_POSTGRES_URL";
const TRANSACTION: &str = "STATEGUARD_PGBOUNCER_TRANSACTION_URL";
const SESSION: &str = "STATEGUARD_PGBOUNCER_SESSION_URL";
const STATEMENT: &str = "STATEGUARD_PGBOUNCER_STATEMENT_URL";

/// How many times each check runs: a probe that passed by luck once would
/// not pass every time.
const CHECKS: usize = 10;

/// One session-mode test at a time: their connections together must stay
/// within PgBouncer's `default_pool_size`.
pub(crate) static SESSION_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A pool of `max` connections on the server in `var`, or `None` when it is
/// not configured.
async fn pool(var: &str, test: &str, max: u32) -> Option<PgPool> {
    let url = common::server_url(var, test)?;
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(60))
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    Some(pool)
}

/// Every connection the pool can hand out is outside a transaction: there
/// PostgreSQL refuses a savepoint (25P01). Through the simple query
/// protocol, which a transaction-mode pooler cannot mix up.
async fn all_idle_outside_transactions(pool: &PgPool) {
    let mut held = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        let mut conn = pool.acquire().await.expect("acquire");
        match sqlx::raw_sql("SAVEPOINT outside").execute(&mut *conn).await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("25P01") => {}
            Ok(_) => panic!("the check left a pool connection in a transaction"),
            Err(e) => panic!("SAVEPOINT: {e}"),
        }
        held.push(conn);
    }
}

/// The sessions `seen` names are real PostgreSQL backends, alive now (the
/// pooler keeps its server sessions open), and are told apart right.
async fn assert_real(seen: &Multiplexing) {
    let sessions: Vec<&ServerSession> = match seen {
        Multiplexing::NoTransactions { refusal } => {
            assert!(refusal.contains("statement pooling"), "{seen}");
            return;
        }
        Multiplexing::Moved { before, after } => {
            assert_ne!(before, after, "a move to the same session: {seen}");
            vec![before, after]
        }
        Multiplexing::Shared { backend } => vec![backend],
        other => panic!("an unknown kind of multiplexing: {other:?}"),
    };
    let Some(url) = common::server_url(DIRECT, "pooler: the sessions are real") else {
        return;
    };
    let mut direct = PgConnection::connect(&url)
        .await
        .expect("direct connection");
    let (started,): (String,) = sqlx::query_as("SELECT pg_postmaster_start_time()::text")
        .fetch_one(&mut direct)
        .await
        .expect("server start");
    for session in sessions {
        assert_eq!(session.server_started, started, "{seen}");
        let (alive,): (bool,) =
            sqlx::query_as("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                .bind(session.pid)
                .fetch_one(&mut direct)
                .await
                .expect("pg_stat_activity");
        assert!(alive, "backend {} of {seen} is no session", session.pid);
    }
    direct.close().await.ok();
}

/// The turn of a test on the transaction-mode PgBouncer, held from before
/// its pools connect until it ends: a client that connects meanwhile can
/// make PgBouncer close its server sessions ("database configuration
/// changed"), and the sessions a check saw must still be there when
/// `assert_real` looks. The mix-up tests take the same turn.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    crate::mix_up::TURN.lock().await
}

/// The check refuses `pool` with `Error::Multiplexed`, whose message says
/// what is unsafe and what to do.
async fn assert_refused(pool: &PgPool) {
    // The sessions it saw must still be there when `assert_real` looks:
    // the caller holds `mix_up::TURN` for its whole test (see `turn`).
    let error = pooler::check(pool)
        .within(Duration::from_secs(30))
        .await
        .expect_err("a pool behind transaction pooling was let through");
    let Error::Multiplexed { seen } = &error else {
        panic!("not Multiplexed: {error:?}");
    };
    assert_real(seen).await;
    assert_eq!(error.kind(), ErrorKind::Database, "{error}");
    assert!(!error.is_transient() && !error.is_outcome_unknown());
    let message = error.to_string();
    for needle in [
        "transaction or statement mode",
        &seen.to_string(),
        "session pooling",
        "direct connection",
        "PgBouncer 1.21",
        "max_prepared_statements",
        "acknowledge",
    ] {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
}

/// The check lets `pool` through, seeing one session per connection.
async fn assert_dedicated(pool: &PgPool) {
    for acknowledged in [
        None,
        Some(Acknowledgement::PgBouncerTracksPreparedStatements),
    ] {
        let mut check = pooler::check(pool).within(Duration::from_secs(30));
        if let Some(acknowledged) = acknowledged {
            check = check.acknowledge(acknowledged);
        }
        let pooling = check.await.expect("check");
        assert_eq!(
            pooling,
            Pooling::Dedicated {
                rounds: pooler::ROUNDS
            }
        );
    }
}

#[tokio::test]
async fn transaction_pooling_is_refused() {
    let _turn = turn().await;
    let Some(pool) = pool(TRANSACTION, "transaction_pooling_is_refused", 8).await else {
        return;
    };
    for _ in 0..CHECKS {
        assert_refused(&pool).await;
    }
    all_idle_outside_transactions(&pool).await;
    pool.close().await;
}

/// With one connection the pool has none idle for the second client
/// connection: the check opens one of its own, and still sees it.
#[tokio::test]
async fn transaction_pooling_is_refused_on_a_pool_of_one() {
    let _turn = turn().await;
    let Some(pool) = pool(TRANSACTION, "transaction_pooling_pool_of_one", 1).await else {
        return;
    };
    for _ in 0..CHECKS {
        assert_refused(&pool).await;
    }
    all_idle_outside_transactions(&pool).await;
    pool.close().await;
}

/// Other clients keep PgBouncer's server sessions busy while the check
/// runs: it must not mistake the sessions it is handed for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_is_refused_under_load() {
    let _turn = turn().await;
    let Some(pool) = pool(TRANSACTION, "transaction_pooling_under_load", 4).await else {
        return;
    };
    let Some(load) = self::pool(TRANSACTION, "transaction_pooling_under_load", 8).await else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut busy = Vec::new();
    for _ in 0..8 {
        let (load, stop) = (load.clone(), stop.clone());
        busy.push(tokio::spawn(async move {
            let mut statements = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                sqlx::raw_sql("SELECT pg_backend_pid()")
                    .execute(&load)
                    .await
                    .expect("load");
                statements += 1;
            }
            statements
        }));
    }
    for _ in 0..CHECKS {
        assert_refused(&pool).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in busy {
        assert!(task.await.expect("load task") > 0, "the load never ran");
    }
    pool.close().await;
    load.close().await;
}

/// A pooler in statement mode refuses the probe's transaction: that is
/// multiplexing too, not an error of the check. `start.sh` has that
/// instance hand sessions out round robin, so that with two or more idle
/// the probe's two connections read different ones and it gets as far as
/// the `BEGIN`.
#[tokio::test]
async fn statement_pooling_is_refused() {
    let _turn = turn().await;
    let Some(pool) = pool(STATEMENT, "statement_pooling_is_refused", 4).await else {
        return;
    };
    // Four server sessions, held at once, then idle.
    let mut held = Vec::new();
    for _ in 0..4 {
        let pool = pool.clone();
        held.push(tokio::spawn(async move {
            sqlx::raw_sql("SELECT pg_sleep(0.2)")
                .execute(&pool)
                .await
                .expect("hold a server session");
        }));
    }
    for task in held {
        task.await.expect("holder");
    }
    let error = pooler::check(&pool)
        .await
        .expect_err("statement pooling passed");
    let Error::Multiplexed {
        seen: seen @ Multiplexing::NoTransactions { .. },
    } = &error
    else {
        panic!("not the refused transaction: {error:?}");
    };
    assert_real(seen).await;
    for _ in 0..CHECKS {
        assert_refused(&pool).await;
    }
    pool.close().await;
}

#[tokio::test]
async fn acknowledged_transaction_pooling_passes() {
    let _turn = turn().await;
    let Some(pool) = pool(TRANSACTION, "acknowledged_transaction_pooling", 8).await else {
        return;
    };
    for _ in 0..CHECKS {
        let pooling = pooler::check(&pool)
            .acknowledge(Acknowledgement::PgBouncerTracksPreparedStatements)
            .within(Duration::from_secs(30))
            .await
            .expect("an acknowledged pooler was refused");
        let Pooling::Multiplexed { seen, acknowledged } = &pooling else {
            panic!("multiplexing not seen: {pooling:?}");
        };
        assert_eq!(
            *acknowledged,
            Acknowledgement::PgBouncerTracksPreparedStatements
        );
        assert_real(seen).await;
    }
    pool.close().await;
}

#[tokio::test]
async fn a_direct_connection_passes() {
    for max in [8, 1] {
        let Some(pool) = pool(DIRECT, "pooler: a direct connection", max).await else {
            return;
        };
        for _ in 0..CHECKS {
            assert_dedicated(&pool).await;
        }
        all_idle_outside_transactions(&pool).await;
        pool.close().await;
    }
}

#[tokio::test]
async fn session_pooling_passes() {
    let _turn = SESSION_TURN.lock().await;
    for max in [8, 1] {
        let Some(pool) = pool(SESSION, "session_pooling_passes", max).await else {
            return;
        };
        for _ in 0..CHECKS {
            assert_dedicated(&pool).await;
        }
        all_idle_outside_transactions(&pool).await;
        pool.close().await;
    }
}

/// A deadline that runs out is a `Timeout` naming the check, whose outcome
/// is known: the probe writes nothing. The pool's one connection is held
/// elsewhere, so the check waits for it (the pool would wait a minute)
/// until its own deadline ends the wait.
#[tokio::test]
async fn the_check_keeps_its_deadline() {
    let _turn = turn().await;
    let Some(pool) = pool(TRANSACTION, "pooler_deadline", 1).await else {
        return;
    };
    let deadline = Duration::from_millis(200);
    let taken = pool.acquire().await.expect("the pool's only connection");
    let check = pooler::check(&pool).within(deadline);
    assert_eq!(check.deadline(), deadline);
    let error = check.await.expect_err("the check ran without a connection");
    drop(taken);
    let Error::Timeout {
        table,
        transition,
        deadline,
        outcome_known,
    } = &error
    else {
        panic!("not a Timeout: {error:?}");
    };
    assert_eq!(
        (*table, *transition, deadline, outcome_known),
        ("", "pooler_check", &Duration::from_millis(200), &true)
    );
    assert_eq!(error.kind(), ErrorKind::Transient);
    // Cut off, it left nothing behind: the next check runs and refuses.
    assert_refused(&pool).await;
    all_idle_outside_transactions(&pool).await;
    pool.close().await;
}

/// Under session pooling the check passes and the race of `race.rs` gives
/// one win, and one effect, per row, on a schema of its own
/// (`session::on_session`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_pooling_keeps_one_win_per_row() {
    let _turn = SESSION_TURN.lock().await;
    let Some(db) = crate::session::on_session!(session_pooling_keeps_one_win_per_row).await else {
        return;
    };
    let pool = db.pool.clone();
    assert_dedicated(&pool).await;
    crate::race::race(db).await;
    pool.close().await;
}
