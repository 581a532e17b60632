//! Every call that moves or deletes at most `limit` rows keeps to it,
//! whatever plan the database picks: the claims and sweeps, the takeovers
//! of recovery, the stores' prunes and the relay's claim. Each runs with a
//! small limit on a fresh, unanalysed table with many more candidates, and
//! plain SQL counts the rows it changed. On PostgreSQL each runs again
//! with the planner pushed into nested loops, where a subquery that
//! chooses the rows would run once per outer row and take more each time.

use crate::common;
use crate::common::KeyColumn;

use std::marker::PhantomData;
use std::str::FromStr;
use std::time::Duration;

use common::{Bind, Db, TestBackend};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use stateguard::bounds::{Batched, Key, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::idempotency;
use stateguard::inbox;
use stateguard::key::shape::One;
use stateguard::outbox::{self, Message, Published, Publisher, Relay};
use stateguard::{Effect, StateMachine, Verdict, claim_expired, recover, recover_many};

/// A job whose in-flight state counts attempts, as a worker queue's does.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "jobs", column = "status", key = "id", version = "version")]
enum Job {
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
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// The same table swept: a job waiting in `sending` for too long fails.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "jobs", column = "status", key = "id", version = "version")]
enum Aged {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(since = "sending_since", timeout = "50m")]
    #[transition(expire -> Failed)]
    Sending,
    Failed,
}

/// The same table with a history: a claim locks the candidates, moves
/// them and writes their history rows in one statement.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "jobs",
    column = "status",
    key = "id",
    version = "version",
    history = "job_log"
)]
enum Logged {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

/// Candidate rows in each test, and the limit each call is given.
const ROWS: i64 = 200;
const LIMIT: u32 = 15;

backend_tests! {
    impl Tests {
        "limits_claim" => claim_moves_at_most_its_limit,
        "limits_logged" => a_claim_with_history_moves_at_most_its_limit,
        "limits_older" => claim_older_than_moves_at_most_its_limit,
        "limits_timed_out" => claim_timed_out_moves_at_most_its_limit,
        "limits_expired" => claim_expired_takes_at_most_its_limit,
        "limits_recover" => recover_takes_at_most_its_limit,
        "limits_recover_many" => recover_many_takes_at_most_its_limit,
        "limits_idem_prune" => idempotency_prune_deletes_at_most_its_limit,
        "limits_inbox_prune" => inbox_prune_deletes_at_most_its_limit,
        "limits_outbox_prune" => outbox_prune_deletes_at_most_its_limit,
        "limits_relay" => a_relay_pass_claims_at_most_its_batch,
    }
}

/// The same bodies on PostgreSQL, on a pool whose sessions may not hash,
/// merge, materialise, memoise or scan an index: the planner's only join
/// is a nested loop, and a subquery that chooses the rows may land on its
/// inner side.
mod nested_loops {
    use super::*;

    macro_rules! nested_loops {
        ($($db:literal => $name:ident,)*) => {$(
            #[tokio::test]
            async fn $name() {
                let Some(plain) = crate::open!(Postgres, $db) else {
                    return;
                };
                Tests::<sqlx::Postgres>::$name(pushed(plain, $db).await).await;
            }
        )*};
    }

    nested_loops! {
        "limits_nl_claim" => claim_moves_at_most_its_limit,
        "limits_nl_logged" => a_claim_with_history_moves_at_most_its_limit,
        "limits_nl_older" => claim_older_than_moves_at_most_its_limit,
        "limits_nl_timed_out" => claim_timed_out_moves_at_most_its_limit,
        "limits_nl_expired" => claim_expired_takes_at_most_its_limit,
        "limits_nl_recover" => recover_takes_at_most_its_limit,
        "limits_nl_recover_many" => recover_many_takes_at_most_its_limit,
        "limits_nl_idem_prune" => idempotency_prune_deletes_at_most_its_limit,
        "limits_nl_inbox_prune" => inbox_prune_deletes_at_most_its_limit,
        "limits_nl_outbox_prune" => outbox_prune_deletes_at_most_its_limit,
        "limits_nl_relay" => a_relay_pass_claims_at_most_its_batch,
    }

    /// The test's schema, `plain` made there, on a new pool whose sessions
    /// plan with nested loops only.
    async fn pushed(plain: Db<sqlx::Postgres>, test: &str) -> Db<sqlx::Postgres> {
        {
            let mut conn = plain.pool.acquire().await.unwrap();
            sqlx::Postgres::execute(&mut conn, "DROP TABLE payouts", &[])
                .await
                .unwrap();
        }
        plain.pool.close().await;
        let url = std::env::var("STATEGUARD_POSTGRES_URL").unwrap();
        let schema = format!("sg_{test}");
        let mut settings = vec![("search_path", schema.as_str())];
        for setting in [
            "enable_hashjoin",
            "enable_mergejoin",
            "enable_material",
            "enable_memoize",
            "enable_hashagg",
            "enable_indexscan",
            "enable_bitmapscan",
            "enable_sort",
        ] {
            settings.push((setting, "off"));
        }
        let options = PgConnectOptions::from_str(&url).unwrap().options(settings);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .unwrap();
        Db::on_pool(pool).await
    }
}

/// The bodies, generic over the backend; the bounds they share are
/// written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
    String: Key<DB>,
{
    /// `claim` moves `LIMIT` of the pending jobs.
    pub(crate) async fn claim_moves_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "pending").await;
        let wins = Job::start().claim::<_, i64>(&db.pool, LIMIT).await.unwrap();
        assert_eq!(wins.len(), LIMIT as usize);
        assert_eq!(
            count(&db, in_status::<DB>("sending")).await,
            i64::from(LIMIT)
        );
    }

    /// A claim with a history moves `LIMIT` pending jobs and logs each.
    pub(crate) async fn a_claim_with_history_moves_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "pending").await;
        {
            let mut conn = db.pool.acquire().await.unwrap();
            for statement in stateguard::ddl::generate::<Logged>(DB::DIALECT).up() {
                DB::execute(&mut conn, statement, &[]).await.unwrap();
            }
        }
        let wins = Logged::start()
            .claim::<_, i64>(&db.pool, LIMIT)
            .await
            .unwrap();
        assert_eq!(wins.len(), LIMIT as usize);
        assert_eq!(
            count(&db, in_status::<DB>("sending")).await,
            i64::from(LIMIT)
        );
        let logged = "SELECT COUNT(*) FROM job_log";
        assert_eq!(count(&db, logged).await, i64::from(LIMIT));
    }

    /// `claim_older_than` fails `LIMIT` of the jobs waiting for an hour.
    pub(crate) async fn claim_older_than_moves_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "sending").await;
        let minute = Duration::from_secs(60);
        let wins = Aged::expire()
            .claim_older_than::<_, i64>(&db.pool, minute, LIMIT)
            .await
            .unwrap();
        assert_eq!(wins.len(), LIMIT as usize);
        assert_eq!(
            count(&db, in_status::<DB>("failed")).await,
            i64::from(LIMIT)
        );
    }

    /// `claim_timed_out` fails `LIMIT` of the jobs past their timeout.
    pub(crate) async fn claim_timed_out_moves_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "sending").await;
        let wins = Aged::expire()
            .claim_timed_out::<_, i64>(&db.pool, LIMIT)
            .await
            .unwrap();
        assert_eq!(wins.len(), LIMIT as usize);
        assert_eq!(
            count(&db, in_status::<DB>("failed")).await,
            i64::from(LIMIT)
        );
    }

    /// `claim_expired` takes over `LIMIT` of the jobs whose lease ran out:
    /// each takeover counts an attempt.
    pub(crate) async fn claim_expired_takes_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "sending").await;
        let taken = claim_expired::<_, i64, _>(&db.pool, Job::Sending, LIMIT)
            .await
            .unwrap();
        assert_eq!(taken.len(), LIMIT as usize);
        assert_eq!(count(&db, ATTEMPTED).await, i64::from(LIMIT));
    }

    /// `recover` takes over and finishes `LIMIT` jobs.
    pub(crate) async fn recover_takes_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "sending").await;
        let pass = recover(&db.pool, Job::Sending, LIMIT, |_: Effect<Job, i64>| async {
            Verdict::done()
        })
        .await
        .unwrap();
        assert_eq!(pass.claimed, LIMIT as usize);
        assert_eq!(count(&db, ATTEMPTED).await, i64::from(LIMIT));
        assert_eq!(count(&db, in_status::<DB>("sent")).await, i64::from(LIMIT));
    }

    /// `recover_many` takes over and finishes `LIMIT` jobs.
    pub(crate) async fn recover_many_takes_at_most_its_limit(db: Db<DB>) {
        jobs(&db, "sending").await;
        let effect = |_: Effect<Job, i64>| async { Verdict::done() };
        let pass = recover_many(&db.pool, Job::Sending, LIMIT, 4, effect)
            .await
            .unwrap();
        assert_eq!(pass.claimed, LIMIT as usize);
        assert_eq!(count(&db, ATTEMPTED).await, i64::from(LIMIT));
        assert_eq!(count(&db, in_status::<DB>("sent")).await, i64::from(LIMIT));
    }

    /// The idempotency store's prune deletes `LIMIT` old keys.
    pub(crate) async fn idempotency_prune_deletes_at_most_its_limit(db: Db<DB>) {
        store(&db, idempotency::ddl(DB::DIALECT), old_keys::<DB>()).await;
        let pruned = idempotency::prune(&db.pool, Duration::from_secs(60), LIMIT)
            .await
            .unwrap();
        assert_eq!(pruned, u64::from(LIMIT));
        let left = "SELECT COUNT(*) FROM stateguard_idempotency";
        assert_eq!(count(&db, left).await, ROWS - i64::from(LIMIT));
    }

    /// The inbox's prune deletes `LIMIT` old messages.
    pub(crate) async fn inbox_prune_deletes_at_most_its_limit(db: Db<DB>) {
        store(&db, inbox::ddl(DB::DIALECT), old_received::<DB>()).await;
        let pruned = inbox::prune(&db.pool, Duration::from_secs(60), LIMIT)
            .await
            .unwrap();
        assert_eq!(pruned, u64::from(LIMIT));
        let left = "SELECT COUNT(*) FROM stateguard_inbox";
        assert_eq!(count(&db, left).await, ROWS - i64::from(LIMIT));
    }

    /// The outbox's prune deletes `LIMIT` old published messages.
    pub(crate) async fn outbox_prune_deletes_at_most_its_limit(db: Db<DB>) {
        store(&db, outbox::ddl(DB::DIALECT), old_messages::<DB>(true)).await;
        let pruned = outbox::prune(&db.pool, Duration::from_secs(60), LIMIT)
            .await
            .unwrap();
        assert_eq!(pruned, u64::from(LIMIT));
        let left = "SELECT COUNT(*) FROM stateguard_outbox";
        assert_eq!(count(&db, left).await, ROWS - i64::from(LIMIT));
    }

    /// A relay's pass claims (and publishes) a batch of `LIMIT` of the due
    /// messages, each of its own order key.
    pub(crate) async fn a_relay_pass_claims_at_most_its_batch(db: Db<DB>) {
        store(&db, outbox::ddl(DB::DIALECT), old_messages::<DB>(false)).await;
        let pass = Relay::new(Accept)
            .batch(LIMIT)
            .pass(&db.pool)
            .await
            .unwrap();
        assert_eq!(pass.published(), LIMIT as usize);
        let claimed = "SELECT COUNT(*) FROM stateguard_outbox WHERE claim IS NOT NULL";
        assert_eq!(count(&db, claimed).await, i64::from(LIMIT));
        let published = "SELECT COUNT(*) FROM stateguard_outbox WHERE published_at IS NOT NULL";
        assert_eq!(count(&db, published).await, i64::from(LIMIT));
    }
}

/// Jobs whose takeover counted an attempt (all are seeded with none).
const ATTEMPTED: &str = "SELECT COUNT(*) FROM jobs WHERE attempts > 0";

/// A publisher that accepts every message.
struct Accept;

impl Publisher for Accept {
    type Error = std::convert::Infallible;

    async fn publish(&self, _message: Message<'_>) -> Result<Published, Self::Error> {
        Ok(Published::new(false))
    }
}

/// The first column of `sql`'s one row, a count.
async fn count<DB: TestBackend>(db: &Db<DB>, sql: &'static str) -> i64 {
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

/// How many jobs are in `status` (one of the few the tests count).
fn in_status<DB: TestBackend>(status: &str) -> &'static str {
    match status {
        "sending" => "SELECT COUNT(*) FROM jobs WHERE status = 'sending'",
        "failed" => "SELECT COUNT(*) FROM jobs WHERE status = 'failed'",
        "sent" => "SELECT COUNT(*) FROM jobs WHERE status = 'sent'",
        other => panic!("no count for {other}"),
    }
}

/// The `jobs` table, with `ROWS` jobs in `status`, each entered an hour
/// ago. The table is never analysed.
async fn jobs<DB: TestBackend>(db: &Db<DB>, status: &str) {
    let (create, seed) = match DB::DIALECT {
        Dialect::Postgres => (
            "CREATE TABLE jobs (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
             version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ, \
             attempts INT NOT NULL DEFAULT 0, next_attempt_at TIMESTAMPTZ)",
            "INSERT INTO jobs (id, status, sending_since) SELECT g, $1, \
             statement_timestamp() - INTERVAL '1 hour' FROM generate_series(1, $2) g",
        ),
        Dialect::Sqlite => (
            "CREATE TABLE jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL, \
             version INTEGER NOT NULL DEFAULT 0, sending_since TEXT, \
             attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at TEXT)",
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2) \
             INSERT INTO jobs (id, status, sending_since) \
             SELECT i, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') FROM s",
        ),
        _ => (
            "CREATE TABLE jobs (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL, \
             version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3) NULL, \
             attempts INT NOT NULL DEFAULT 0, next_attempt_at DATETIME(3) NULL)",
            concat!(
                "INSERT INTO jobs (id, status, sending_since) ",
                "SELECT i, ?, UTC_TIMESTAMP(3) - INTERVAL 1 HOUR FROM ",
                mysql_numbers!(),
                " WHERE i <= ?"
            ),
        ),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    DB::execute(&mut conn, seed, &[Bind::Text(status), Bind::Int(ROWS)])
        .await
        .unwrap();
}

/// A store's tables from `ddl`, then `seed` run with `ROWS`.
async fn store<DB: TestBackend>(db: &Db<DB>, ddl: &'static [&'static str], seed: &'static str) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in ddl {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    DB::execute(&mut conn, seed, &[Bind::Int(ROWS)])
        .await
        .unwrap();
}

/// Completed idempotency keys made an hour ago.
fn old_keys<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        Dialect::Postgres => {
            "INSERT INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
             created_at) SELECT 's', 'k' || g, 'f', 'done', 1, statement_timestamp() - \
             INTERVAL '1 hour' FROM generate_series(1, $1) g"
        }
        Dialect::Sqlite => {
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
             created_at) SELECT 's', 'k' || i, 'f', 'done', 1, \
             strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') FROM s"
        }
        _ => concat!(
            "INSERT INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, ",
            "created_at) SELECT 's', CONCAT('k', i), 'f', 'done', 1, ",
            "UTC_TIMESTAMP(3) - INTERVAL 1 HOUR FROM ",
            mysql_numbers!(),
            " WHERE i <= ?"
        ),
    }
}

/// Messages the inbox received an hour ago.
fn old_received<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        Dialect::Postgres => {
            "INSERT INTO stateguard_inbox (consumer, message_id, received_at) SELECT 'c', \
             'm' || g, statement_timestamp() - INTERVAL '1 hour' FROM generate_series(1, $1) g"
        }
        Dialect::Sqlite => {
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO stateguard_inbox (consumer, message_id, received_at) SELECT 'c', \
             'm' || i, strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') FROM s"
        }
        _ => concat!(
            "INSERT INTO stateguard_inbox (consumer, message_id, received_at) ",
            "SELECT 'c', CONCAT('m', i), UTC_TIMESTAMP(3) - INTERVAL 1 HOUR FROM ",
            mysql_numbers!(),
            " WHERE i <= ?"
        ),
    }
}

/// Outbox messages enqueued an hour ago, each of its own order key:
/// published then (`published`), or due since.
fn old_messages<DB: TestBackend>(published: bool) -> &'static str {
    match (DB::DIALECT, published) {
        (Dialect::Postgres, true) => {
            "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, \
             next_attempt_at, published_at) SELECT 'm' || g, 'm' || g, 't', \
             decode('7b7d', 'hex'), statement_timestamp() - INTERVAL '1 hour', \
             statement_timestamp() - INTERVAL '1 hour', statement_timestamp() - \
             INTERVAL '1 hour' FROM generate_series(1, $1) g"
        }
        (Dialect::Postgres, false) => {
            "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, \
             next_attempt_at) SELECT 'm' || g, 'm' || g, 't', decode('7b7d', 'hex'), \
             statement_timestamp() - INTERVAL '1 hour', statement_timestamp() - \
             INTERVAL '1 hour' FROM generate_series(1, $1) g"
        }
        (Dialect::Sqlite, true) => {
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, \
             next_attempt_at, published_at) SELECT 'm' || i, 'm' || i, 't', X'7B7D', \
             strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours'), \
             strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours'), \
             strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') FROM s"
        }
        (Dialect::Sqlite, false) => {
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?1) \
             INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, \
             next_attempt_at) SELECT 'm' || i, 'm' || i, 't', X'7B7D', \
             strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours'), \
             strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') FROM s"
        }
        (_, true) => concat!(
            "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, ",
            "next_attempt_at, published_at) SELECT CONCAT('m', i), CONCAT('m', i), 't', ",
            "X'7B7D', UTC_TIMESTAMP(3) - INTERVAL 1 HOUR, UTC_TIMESTAMP(3) - INTERVAL 1 HOUR, ",
            "UTC_TIMESTAMP(3) - INTERVAL 1 HOUR FROM ",
            mysql_numbers!(),
            " WHERE i <= ?"
        ),
        (_, false) => concat!(
            "INSERT INTO stateguard_outbox (message_id, order_key, topic, payload, created_at, ",
            "next_attempt_at) SELECT CONCAT('m', i), CONCAT('m', i), 't', X'7B7D', ",
            "UTC_TIMESTAMP(3) - INTERVAL 1 HOUR, UTC_TIMESTAMP(3) - INTERVAL 1 HOUR FROM ",
            mysql_numbers!(),
            " WHERE i <= ?"
        ),
    }
}
