//! Claims, sweeps and `apply_many` inside the caller's transaction: for a
//! worker whose effect is a database write, the rows' move and the work
//! they stand for commit together, or neither does.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use common::{Bind, Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::key::shape::One;
use stateguard::{ErrorKind, Outcome, StateMachine, Tx, Uncommitted, Won};

/// A job that a worker takes and whose result it writes, in one
/// transaction.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "jobs", column = "status", key = "id", version = "version")]
enum Job {
    #[state(initial, since = "queued_at")]
    #[transition(take -> Taken)]
    Queued,
    Taken,
}

backend_tests! {
    impl Tests {
        "claim_tx_commit" => a_claim_commits_with_the_work,
        "claim_tx_rollback" => a_rolled_back_claim_leaves_the_rows,
        "claim_tx_race" => racing_transactions_take_each_row_once (flavor = "multi_thread", worker_threads = 4),
        "claim_tx_many" => apply_many_and_a_sweep_commit_with_the_transaction,
    }
}

async fn setup<DB: TestBackend>(db: &Db<DB>, n: i64) {
    let (create, results, seed) = match DB::DIALECT {
        Dialect::Postgres => (
            "CREATE TABLE jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'queued', \
             version BIGINT NOT NULL DEFAULT 0, queued_at TIMESTAMPTZ NOT NULL DEFAULT \
             statement_timestamp() - INTERVAL '1 hour')",
            "CREATE TABLE job_results (job_id BIGINT PRIMARY KEY)",
            "WITH i AS (INSERT INTO jobs (id) SELECT g FROM generate_series(1, $1) g RETURNING 1) \
             SELECT COUNT(*) FROM i",
        ),
        Dialect::Sqlite => (
            "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'queued', \
             version INTEGER NOT NULL DEFAULT 0, queued_at TEXT NOT NULL DEFAULT \
             (strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours')))",
            "CREATE TABLE job_results (job_id INTEGER PRIMARY KEY)",
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO jobs (id) SELECT i FROM s",
        ),
        _ => (
            "CREATE TABLE jobs (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL DEFAULT \
             'queued', version BIGINT NOT NULL DEFAULT 0, queued_at DATETIME(3) NOT NULL DEFAULT \
             '2000-01-01 00:00:00.000', INDEX (status, id))",
            "CREATE TABLE job_results (job_id BIGINT PRIMARY KEY)",
            "INSERT INTO jobs (id) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM \
             s WHERE i < ?) SELECT i FROM s",
        ),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    DB::execute(&mut conn, results, &[]).await.unwrap();
    DB::execute(&mut conn, seed, &[Bind::Int(n)]).await.unwrap();
}

/// The work a taken job stands for, written in `tx`.
async fn write_result<DB: TestBackend>(tx: &mut Tx<'_, DB>, id: i64) -> Result<(), sqlx::Error> {
    let insert = match DB::DIALECT {
        Dialect::Postgres => "INSERT INTO job_results (job_id) VALUES ($1)",
        _ => "INSERT INTO job_results (job_id) VALUES (?)",
    };
    DB::execute(&mut **tx, insert, &[Bind::Int(id)]).await
}

async fn count<DB: TestBackend>(db: &Db<DB>, sql: &'static str) -> i64 {
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

fn taken_count<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        Dialect::Postgres => "SELECT COUNT(*)::BIGINT FROM jobs WHERE status = 'taken'",
        Dialect::Sqlite => "SELECT COUNT(*) FROM jobs WHERE status = 'taken'",
        _ => "SELECT CAST(COUNT(*) AS SIGNED) FROM jobs WHERE status = 'taken'",
    }
}

fn result_count<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        Dialect::Postgres => "SELECT COUNT(*)::BIGINT FROM job_results",
        Dialect::Sqlite => "SELECT COUNT(*) FROM job_results",
        _ => "SELECT CAST(COUNT(*) AS SIGNED) FROM job_results",
    }
}

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    /// A claim in a transaction hands out uncommitted wins; the results
    /// written beside it commit with the move, and the commit hands the
    /// wins back committed.
    pub(crate) async fn a_claim_commits_with_the_work(db: Db<DB>) {
        setup(&db, 10).await;
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let wins: Vec<Won<Job, i64, Uncommitted>> = Job::take().claim(&mut tx, 4).await.unwrap();
        let keys: Vec<i64> = wins.iter().map(|won| *won.key()).collect();
        assert_eq!(keys, [1, 2, 3, 4]);
        for id in &keys {
            write_result(&mut tx, *id).await.unwrap();
        }
        // Not yet visible outside the transaction.
        assert_eq!(count(&db, result_count::<DB>()).await, 0);
        let committed: Vec<Won<Job, i64>> = tx.commit(wins).await.unwrap();
        assert_eq!(committed.len(), 4);
        assert_eq!(count(&db, taken_count::<DB>()).await, 4);
        assert_eq!(count(&db, result_count::<DB>()).await, 4);
        // The next claim takes the rows after them.
        let next: Vec<Won<Job, i64>> = Job::take().claim(&db.pool, 2).await.unwrap();
        assert_eq!(
            next.iter().map(|won| *won.key()).collect::<Vec<_>>(),
            [5, 6]
        );
    }

    /// Rolled back, the claim and the work are both undone: the rows wait
    /// for the next claimer.
    pub(crate) async fn a_rolled_back_claim_leaves_the_rows(db: Db<DB>) {
        setup(&db, 5).await;
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let wins: Vec<Won<Job, i64, Uncommitted>> = Job::take().claim(&mut tx, 5).await.unwrap();
        assert_eq!(wins.len(), 5);
        for won in &wins {
            write_result(&mut tx, *won.key()).await.unwrap();
        }
        tx.rollback().await.unwrap();
        assert_eq!(count(&db, taken_count::<DB>()).await, 0);
        assert_eq!(count(&db, result_count::<DB>()).await, 0);
        let again: Vec<Won<Job, i64>> = Job::take().claim(&db.pool, 10).await.unwrap();
        assert_eq!(again.len(), 5);
    }

    /// Six workers, each claiming 15 jobs at a time in a transaction of
    /// its own and writing their results in it: every job is taken once
    /// and has one result (its primary key refuses a second). A
    /// transaction the database rolled back is tried again whole.
    pub(crate) async fn racing_transactions_take_each_row_once(db: Db<DB>) {
        const JOBS: i64 = 600;
        setup(&db, JOBS).await;
        let pool = Arc::new(db.pool.clone());
        let mut workers = Vec::new();
        for _ in 0..6 {
            let pool = pool.clone();
            workers.push(tokio::spawn(async move {
                let (mut taken, mut retried) = (0, 0);
                loop {
                    let mut tx = Tx::begin_with(&pool, DB::BEGIN_WRITE).await.unwrap();
                    let wins: Vec<Won<Job, i64, Uncommitted>> =
                        match Job::take().claim(&mut tx, 15).await {
                            Ok(wins) => wins,
                            Err(error) if error.kind() == ErrorKind::Transient => {
                                retried += 1;
                                drop(tx);
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                continue;
                            }
                            Err(error) => panic!("{error}"),
                        };
                    if wins.is_empty() {
                        return (taken, retried);
                    }
                    for won in &wins {
                        write_result(&mut tx, *won.key()).await.unwrap();
                    }
                    taken += tx.commit(wins).await.unwrap().len();
                }
            }));
        }
        let mut total = 0;
        for worker in workers {
            total += worker.await.unwrap().0;
        }
        assert_eq!(total as i64, JOBS);
        assert_eq!(count(&db, taken_count::<DB>()).await, JOBS);
        assert_eq!(count(&db, result_count::<DB>()).await, JOBS);
    }

    /// `apply_many` and `claim_older_than` inside a transaction: their
    /// moves wait for its commit, and a rollback undoes them.
    pub(crate) async fn apply_many_and_a_sweep_commit_with_the_transaction(db: Db<DB>) {
        setup(&db, 6).await;
        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let outcomes = Job::take()
            .apply_many(&mut tx, &[1_i64, 2, 9])
            .await
            .unwrap();
        assert!(outcomes[0].is_applied() && outcomes[1].is_applied());
        assert_eq!(outcomes[2], Outcome::NotFound);
        tx.rollback().await.unwrap();
        assert_eq!(count(&db, taken_count::<DB>()).await, 0);

        let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
        let outcomes = Job::take().apply_many(&mut tx, &[1_i64, 2]).await.unwrap();
        let wins: Vec<Won<Job, i64, Uncommitted>> =
            outcomes.into_iter().filter_map(Outcome::won).collect();
        // Queued for an hour: the sweep takes the rest.
        let swept: Vec<Won<Job, i64, Uncommitted>> = Job::take()
            .claim_older_than(&mut tx, Duration::from_secs(60), 10)
            .await
            .unwrap();
        assert_eq!(swept.len(), 4);
        let committed = tx.commit((wins, swept)).await.unwrap();
        assert_eq!(committed.0.len() + committed.1.len(), 6);
        assert_eq!(count(&db, taken_count::<DB>()).await, 6);
    }
}
