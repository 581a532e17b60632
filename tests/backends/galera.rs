//! A multi-primary MariaDB Galera cluster of three nodes, every one taking
//! writes: the races run with their attempts spread over the nodes, one
//! pool per node. There a compare-and-set wins on each node that runs it,
//! and the losers learn at `COMMIT`, which the cluster refuses with 1213
//! (a certification failure); `FOR UPDATE SKIP LOCKED` sees only its own
//! node's locks. Exactly one attempt per row must still win, and no
//! certification failure of a transaction the library runs itself may
//! reach the caller.
//!
//! `tools/galera/cluster.sh start DIR` starts the cluster; with
//! `STATEGUARD_GALERA=1` these tests run on it (`.ci/run` starts one and
//! sets it), and without it they skip. With
//! `STATEGUARD_GALERA_NO_TRIGGERS=1` the tables get no enforcement
//! triggers, to tell the nodes' trouble with replicated triggers apart
//! from the library's own.

use crate::common;

use std::collections::HashMap;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{Connection, MySqlConnection};
use stateguard::{Effect, Finished, Outcome, StateMachine, Verdict, Won};
use tokio::sync::Barrier;

/// The nodes' SQL ports, as `tools/galera/cluster.sh` starts them.
const NODES: [u16; 3] = [3407, 3408, 3409];

/// A transfer that moves once, with a version and a history, so that
/// every win writes two tables in one transaction.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "galera_transfers",
    column = "status",
    key = "id",
    key_type = "i64",
    version = "version",
    history = "galera_transfer_history"
)]
enum Transfer {
    #[state(initial)]
    #[transition(send -> Sent)]
    Pending,
    Sent,
}

/// A payout whose effect runs once its row is claimed, finished a batch
/// at a time; a row whose worker died is taken over once its lease runs
/// out.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "galera_payouts",
    column = "status",
    key = "id",
    key_type = "i64",
    version = "version",
    history = "galera_payout_history"
)]
enum Payout {
    #[state(initial)]
    #[transition(send -> Sending)]
    Pending,
    #[state(in_flight(lease = "1s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

const TABLES: [&str; 4] = [
    "CREATE TABLE galera_transfers (
        id BIGINT PRIMARY KEY,
        status VARCHAR(16) NOT NULL DEFAULT 'pending',
        version BIGINT NOT NULL DEFAULT 0
    )",
    "CREATE TABLE galera_transfer_history (
        history_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        id BIGINT NOT NULL,
        transition VARCHAR(255) NOT NULL,
        from_state VARCHAR(255) NOT NULL,
        to_state VARCHAR(255) NOT NULL,
        occurrence BIGINT NOT NULL,
        moved_at DATETIME(3) NOT NULL,
        actor VARCHAR(255) NULL,
        reason TEXT NULL,
        details JSON NULL,
        INDEX galera_transfer_history_key (id)
    )",
    "CREATE TABLE galera_payouts (
        id BIGINT PRIMARY KEY,
        status VARCHAR(16) NOT NULL DEFAULT 'pending',
        version BIGINT NOT NULL DEFAULT 0,
        sending_since DATETIME(3) NULL
    )",
    "CREATE TABLE galera_payout_history (
        history_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        id BIGINT NOT NULL,
        transition VARCHAR(255) NOT NULL,
        from_state VARCHAR(255) NOT NULL,
        to_state VARCHAR(255) NOT NULL,
        occurrence BIGINT NOT NULL,
        moved_at DATETIME(3) NOT NULL,
        actor VARCHAR(255) NULL,
        reason TEXT NULL,
        details JSON NULL,
        INDEX galera_payout_history_key (id)
    )",
];

/// The cluster, one pool per node, on database `sg_galera_<test>` made
/// anew with `Transfer`'s tables and `rows` pending rows; `None` (a
/// printed skip) without `STATEGUARD_GALERA=1`.
macro_rules! on_cluster {
    ($test:ident, $rows:expr) => {
        crate::galera::open(
            stringify!($test),
            concat!(
                "DROP DATABASE IF EXISTS sg_galera_",
                stringify!($test),
                "; CREATE DATABASE sg_galera_",
                stringify!($test)
            ),
            $rows,
        )
    };
}

/// One test on the cluster at a time, so that the conflicts each reports
/// are its own.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// See [`on_cluster!`].
async fn open(test: &str, fresh: &'static str, rows: i64) -> Option<Vec<MySqlPool>> {
    if std::env::var("STATEGUARD_GALERA").as_deref() != Ok("1") {
        common::say(&format!(
            "skipped `{test}`: STATEGUARD_GALERA is not 1 (tools/galera/cluster.sh starts the \
             cluster)"
        ));
        return None;
    }
    let url = |port: u16| format!("mysql://root@127.0.0.1:{port}/test");
    let mut admin = MySqlConnection::connect(&url(NODES[0]))
        .await
        .expect("Galera node 1");
    sqlx::raw_sql(fresh)
        .execute(&mut admin)
        .await
        .expect("database");
    admin.close().await.expect("close");
    let mut pools = Vec::new();
    for port in NODES {
        // The node has applied the `CREATE DATABASE` once a read that
        // waits for what the cluster certified has answered.
        let mut node = MySqlConnection::connect(&url(port))
            .await
            .expect("Galera node");
        sqlx::raw_sql("SET SESSION wsrep_sync_wait = 1; SELECT 1 FROM information_schema.SCHEMATA")
            .execute(&mut node)
            .await
            .expect("sync wait");
        node.close().await.expect("close");
        let options = MySqlConnectOptions::from_str(&url(port))
            .expect("URL")
            .database(&format!("sg_galera_{test}"));
        let pool = MySqlPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await
            .expect("Galera pool");
        pools.push(pool);
    }
    let first = &pools[0];
    for table in TABLES {
        sqlx::query(table).execute(first).await.expect("table");
    }
    let enforce = std::env::var("STATEGUARD_GALERA_NO_TRIGGERS").is_err();
    let dialect = stateguard::ddl::Dialect::MySql;
    let payouts = stateguard::ddl::generate::<Payout>(dialect);
    for statement in (stateguard::ddl::generate::<Transfer>(dialect).up())
        .chain(payouts.up())
        .filter(|_| enforce)
    {
        sqlx::query(statement)
            .execute(first)
            .await
            .expect("enforcement");
    }
    if rows > 0 {
        for insert in [
            "INSERT INTO galera_transfers (id)
             WITH RECURSIVE n (id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n WHERE id < ?)
             SELECT id FROM n",
            "INSERT INTO galera_payouts (id)
             WITH RECURSIVE n (id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n WHERE id < ?)
             SELECT id FROM n",
        ] {
            sqlx::query(insert)
                .bind(rows)
                .execute(first)
                .await
                .expect("rows");
        }
    }
    // Each node applies the tables, the triggers and the rows before the
    // test starts: a read that waits for what the cluster has certified.
    for pool in &pools {
        let mut conn = pool.acquire().await.expect("connection");
        sqlx::query("SET SESSION wsrep_sync_wait = 1")
            .execute(&mut *conn)
            .await
            .expect("sync wait");
        let (count,): (i64,) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM galera_transfers) + (SELECT COUNT(*) FROM galera_payouts)",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("rows on every node");
        assert_eq!(count, 2 * rows);
        sqlx::query("SET SESSION wsrep_sync_wait = 0")
            .execute(&mut *conn)
            .await
            .expect("sync wait off");
    }
    warm(&pools).await;
    Some(pools)
}

/// Opens the tables on every connection of every node's pool at once,
/// each for a moment, before the test starts: the node then holds as many
/// copies of each table (and of its triggers) as its pool can use, loaded
/// while no transaction holds a lock. A node loads a table's triggers
/// each time it opens another copy of the table; a copy opened by a
/// statement that a certification failure aborts may keep a trigger read
/// in part ("has an error in its body"), and hand it to the statements
/// that use the copy after it.
async fn warm(pools: &[MySqlPool]) {
    let mut opening = Vec::new();
    for pool in pools {
        for _ in 0..pool.options().get_max_connections() {
            let pool = pool.clone();
            opening.push(tokio::spawn(async move {
                sqlx::query(
                    "SELECT SLEEP(0.2) FROM (SELECT COUNT(*) AS n FROM galera_transfers) AS t, \
                     (SELECT COUNT(*) AS n FROM galera_transfer_history) AS h, \
                     (SELECT COUNT(*) AS n FROM galera_payouts) AS p, \
                     (SELECT COUNT(*) AS n FROM galera_payout_history) AS ph",
                )
                .execute(&pool)
                .await
                .expect("the tables opened")
            }));
        }
    }
    for open in opening {
        open.await.expect("warm");
    }
}

/// The certification failures and brute-force aborts the nodes have
/// counted so far, all nodes together.
async fn conflicts(pools: &[MySqlPool]) -> (i64, i64) {
    let mut total = (0, 0);
    for pool in pools {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
             WHERE VARIABLE_NAME IN ('WSREP_LOCAL_CERT_FAILURES', 'WSREP_LOCAL_BF_ABORTS')",
        )
        .fetch_all(pool)
        .await
        .expect("wsrep status");
        for (name, value) in rows {
            let value: i64 = value.parse().unwrap_or_default();
            match name.as_str() {
                "WSREP_LOCAL_CERT_FAILURES" => total.0 += value,
                _ => total.1 += value,
            }
        }
    }
    total
}

/// Runs `each` `per` times for every one of `items` items, the k-th time
/// on node k mod 3, all released at once: each run's item, node (from 0)
/// and answer.
async fn spread<T, F, Fut>(
    pools: &[MySqlPool],
    items: usize,
    per: usize,
    each: F,
) -> Vec<(usize, usize, T)>
where
    F: Fn(MySqlPool, usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(items * per));
    let mut tasks = Vec::with_capacity(items * per);
    for item in 0..items {
        for attempt in 0..per {
            let node = attempt % NODES.len();
            let (run, barrier) = (each(pools[node].clone(), item), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                (item, node, run.await)
            }));
        }
    }
    let mut ran = Vec::with_capacity(tasks.len());
    for task in tasks {
        ran.push(task.await.expect("a run"));
    }
    ran
}

/// What node 1 holds once it has applied every write the cluster
/// certified (`wsrep_sync_wait`): each row's status and version, and its
/// history rows.
async fn settled(pools: &[MySqlPool]) -> (HashMap<i64, (String, i64)>, HashMap<i64, i64>) {
    let mut conn = pools[0].acquire().await.expect("connection");
    sqlx::query("SET SESSION wsrep_sync_wait = 1")
        .execute(&mut *conn)
        .await
        .expect("sync wait");
    let rows: Vec<(i64, String, i64)> =
        sqlx::query_as("SELECT id, status, version FROM galera_transfers")
            .fetch_all(&mut *conn)
            .await
            .expect("rows");
    let history: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT id, CAST(COUNT(*) AS SIGNED) FROM galera_transfer_history GROUP BY id",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("history");
    let rows = rows.into_iter().map(|(id, s, v)| (id, (s, v))).collect();
    (rows, history.into_iter().collect())
}

/// Tallies the answers of a race over rows `1..=ROWS`, each `(row, node,
/// outcome)`: every row `Applied` (occurrence 1) to exactly one attempt
/// and `AlreadyInState(Sent)` to the rest, and moved once in the
/// database, with one history row. How many answered `AlreadyInState`.
async fn moved_once(
    pools: &[MySqlPool],
    answers: impl Iterator<Item = (i64, usize, stateguard::Outcome<Transfer, i64>)>,
) -> usize {
    let mut winners = vec![Vec::new(); ROWS as usize + 1];
    let mut already = 0;
    for (id, node, outcome) in answers {
        match outcome {
            Outcome::Applied(won) => {
                assert_eq!(won.occurrence(), 1, "row {id}");
                winners[id as usize].push(node + 1);
            }
            Outcome::AlreadyInState(current) => {
                assert_eq!(current, Transfer::Sent, "row {id}");
                already += 1;
            }
            other => panic!("row {id}: {other:?}"),
        }
    }
    let (rows, history) = settled(pools).await;
    for id in 1..=ROWS {
        assert_eq!(rows[&id], ("sent".to_owned(), 1), "row {id}");
        assert_eq!(history.get(&id), Some(&1), "row {id}'s history");
        let won = &winners[id as usize];
        assert_eq!(won.len(), 1, "row {id}: won on nodes {won:?}");
    }
    already
}

/// Runs `work` three times on each node (its index from 0, and its pool),
/// all at once: what each run returned.
async fn on_every_node<T, F, Fut>(pools: &[MySqlPool], work: F) -> Vec<T>
where
    F: Fn(usize, MySqlPool) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut tasks = Vec::new();
    for (node, pool) in pools.iter().enumerate() {
        for _ in 0..CLAIMERS_PER_NODE {
            tasks.push(tokio::spawn(work(node, pool.clone())));
        }
    }
    let mut done = Vec::with_capacity(tasks.len());
    for task in tasks {
        done.push(task.await.expect("a worker"));
    }
    done
}

/// A store's tables (`ddl`), made on node 1.
async fn store(pools: &[MySqlPool], ddl: &[&'static str]) {
    for statement in ddl {
        sqlx::raw_sql(*statement)
            .execute(&pools[0])
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// A worker's calls that take rows or messages: it stops after five
/// that took none in a row, pausing after each (the rows are gone, or
/// held by workers that will commit).
#[derive(Default)]
struct Drain {
    /// The calls made so far.
    calls: usize,
    empty: usize,
}

impl Drain {
    /// Whether to call again.
    fn more(&self) -> bool {
        self.empty < 5
    }

    /// A call took `taken`.
    async fn took(&mut self, taken: usize) {
        self.calls += 1;
        match taken {
            0 => {
                self.empty += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => self.empty = 0,
        }
    }
}

const ROWS: i64 = 100;
const ATTEMPTS_PER_ROW: usize = 32;

/// 32 attempts of `send` on each of 100 rows, spread over the three nodes
/// and released at once: one `Applied` per row, the rest
/// `AlreadyInState`, no error; each row moved once, with one history row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_apply_race() {
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_apply_race, ROWS).await else {
        return;
    };
    let before = conflicts(&pools).await;
    let attempts = ROWS as usize * ATTEMPTS_PER_ROW;
    let ran = spread(
        &pools,
        ROWS as usize,
        ATTEMPTS_PER_ROW,
        |pool, row| async move {
            let id = row as i64 + 1;
            (id, Transfer::send().apply(&pool, id).await)
        },
    )
    .await;
    let answers = ran.into_iter().map(|(_, node, (id, outcome))| {
        (
            id,
            node,
            outcome.unwrap_or_else(|e| panic!("row {id}: {e}")),
        )
    });
    let already = moved_once(&pools, answers).await;
    assert_eq!(already, attempts - ROWS as usize);
    let after = conflicts(&pools).await;
    common::say(&format!(
        "galera apply race: {ROWS} wins of {attempts} attempts over 3 nodes; the cluster \
         counted {} certification failures and {} brute-force aborts, none reached the caller",
        after.0 - before.0,
        after.1 - before.1
    ));
}

const BATCH: usize = 10;

/// 32 `apply_many` calls on each batch of ten rows (100 rows in all),
/// spread over the three nodes and released at once: every row is
/// `Applied` to exactly one call, the rest read `AlreadyInState`, and no
/// call returns an error. Each batch is a transaction of the library's
/// own, so the nodes' certification failures are retried inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_apply_many_race() {
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_apply_many_race, ROWS).await else {
        return;
    };
    let before = conflicts(&pools).await;
    let batches = ROWS as usize / BATCH;
    let ran = spread(
        &pools,
        batches,
        ATTEMPTS_PER_ROW,
        |pool, batch| async move {
            let first = (batch * BATCH) as i64 + 1;
            let keys: Vec<i64> = (0..BATCH as i64).map(|i| first + i).collect();
            let outcomes = Transfer::send()
                .apply_many(&pool, &keys)
                .await
                .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
            keys.into_iter().zip(outcomes).collect::<Vec<_>>()
        },
    )
    .await;
    let answers = (ran.into_iter())
        .flat_map(|(_, node, outcomes)| outcomes.into_iter().map(move |(id, o)| (id, node, o)));
    let already = moved_once(&pools, answers).await;
    let outcomes = ROWS as usize * ATTEMPTS_PER_ROW;
    assert_eq!(already, outcomes - ROWS as usize);
    let after = conflicts(&pools).await;
    common::say(&format!(
        "galera apply_many race: {ROWS} wins of {outcomes} outcomes in {} batches over 3 \
         nodes; the cluster counted {} certification failures and {} brute-force aborts, none \
         reached the caller",
        batches * ATTEMPTS_PER_ROW,
        after.0 - before.0,
        after.1 - before.1
    ));
}

const CLAIM_ROWS: i64 = 300;
const CLAIMERS_PER_NODE: usize = 3;

/// Nine claimers, three on each node, claim 300 rows ten at a time until
/// every row is claimed. Each node's `SKIP LOCKED` sees only its own
/// locks, so two nodes may pick the same row; certification lets one of
/// them commit and the claim retries the other. Every row is claimed by
/// exactly one claimer, and no claim returns an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_claims_spread_over_nodes() {
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_claims_spread_over_nodes, CLAIM_ROWS).await else {
        return;
    };
    let before = conflicts(&pools).await;
    let claimers = on_every_node(&pools, |node, pool| async move {
        let (mut mine, mut drain) = (Vec::new(), Drain::default());
        while drain.more() {
            let wins = Transfer::send()
                .claim(&pool, 10)
                .await
                .unwrap_or_else(|e| panic!("claim on node {}: {e}", node + 1));
            mine.extend(wins.iter().map(|won| *won.key()));
            drain.took(wins.len()).await;
        }
        (mine, drain.calls)
    })
    .await;
    let mut claimed: HashMap<i64, usize> = HashMap::new();
    let mut calls = 0;
    for (mine, made) in claimers {
        calls += made;
        for id in mine {
            *claimed.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = claimed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "rows claimed twice: {twice:?}");
    assert_eq!(claimed.len(), CLAIM_ROWS as usize, "every row claimed");
    let (rows, history) = settled(&pools).await;
    for id in 1..=CLAIM_ROWS {
        assert_eq!(rows[&id], ("sent".to_owned(), 1), "row {id}");
        assert_eq!(history.get(&id), Some(&1), "row {id}'s history");
    }
    let after = conflicts(&pools).await;
    common::say(&format!(
        "galera claims: {CLAIM_ROWS} rows in {calls} claim calls by 9 claimers over 3 nodes; \
         the cluster counted {} certification failures and {} brute-force aborts, none reached \
         the caller",
        after.0 - before.0,
        after.1 - before.1
    ));
}

const KEYS: usize = 20;
const TRIES_PER_KEY: usize = 24;

/// 24 requests with each of 20 idempotency keys, spread over the three
/// nodes and released at once: exactly one `New` per key, whose work
/// commits; the rest `InProgress` or `Replay`, and none an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_idempotency_keys() {
    use stateguard::idempotency::{self, Begun, Request, Work};
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_idempotency_keys, 0).await else {
        return;
    };
    store(&pools, idempotency::ddl(stateguard::ddl::Dialect::MySql)).await;
    let before = conflicts(&pools).await;
    let tries = KEYS * TRIES_PER_KEY;
    let ran = spread(&pools, KEYS, TRIES_PER_KEY, |pool, key| async move {
        let request = Request::new("galera:POST /payouts", format!("key-{key}"), "body").unwrap();
        let begun = idempotency::begin_tx(&pool, &request, idempotency::DEFAULT_LEASE)
            .await
            .unwrap_or_else(|e| panic!("key {key}: {e}"));
        match begun {
            Begun::New(Work { ticket, mut tx }) => {
                ticket
                    .complete(&mut tx, 201, b"done".to_vec())
                    .await
                    .unwrap_or_else(|e| panic!("key {key}: {e}"));
                tx.commit(())
                    .await
                    .unwrap_or_else(|e| panic!("key {key}: {e}"));
                true
            }
            Begun::Replay(_) | Begun::InProgress => false,
            Begun::Mismatch => panic!("key {key}: mismatch"),
        }
    })
    .await;
    let mut new = vec![0_usize; KEYS];
    for (key, _, was_new) in ran {
        new[key] += usize::from(was_new);
    }
    assert!(new.iter().all(|&n| n == 1), "{new:?}");
    let after = conflicts(&pools).await;
    common::say(&format!(
        "galera idempotency keys: {KEYS} new of {tries} requests over 3 nodes; the cluster \
         counted {} certification failures and {} brute-force aborts, none reached the caller",
        after.0 - before.0,
        after.1 - before.1
    ));
}

/// 24 deliveries of each of 20 messages, each received in a transaction
/// of the consumer's own, spread over the three nodes. Two nodes may both
/// answer `First`; the cluster refuses the later commit, which tells the
/// consumer to retry its transaction (`is_retry_transaction`), and the
/// retry reads `Duplicate`. Exactly one `First` per message commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_inbox() {
    use stateguard::Tx;
    use stateguard::inbox::{self, Received};
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_inbox, 0).await else {
        return;
    };
    store(&pools, inbox::ddl(stateguard::ddl::Dialect::MySql)).await;
    let tries = KEYS * TRIES_PER_KEY;
    let ran = spread(&pools, KEYS, TRIES_PER_KEY, |pool, message| async move {
        let id = format!("evt_{message}");
        let mut retried = 0;
        loop {
            let mut tx = Tx::begin(&pool).await.expect("begin");
            let received = match inbox::receive(&mut tx, "galera", &id).await {
                Ok(received) => received,
                Err(e) if e.is_retry_transaction() => {
                    retried += 1;
                    continue;
                }
                Err(e) => panic!("{id}: {e}"),
            };
            match tx.commit(()).await {
                Ok(()) => return (received == Received::First, retried),
                Err(e) if e.is_retry_transaction() => retried += 1,
                Err(e) => panic!("{id}: {e}"),
            }
        }
    })
    .await;
    let mut first = vec![0_usize; KEYS];
    let mut retried = 0;
    for (message, _, (was_first, again)) in ran {
        first[message] += usize::from(was_first);
        retried += again;
    }
    assert!(first.iter().all(|&n| n == 1), "{first:?}");
    common::say(&format!(
        "galera inbox: {KEYS} first of {tries} deliveries over 3 nodes; {retried} transactions \
         the cluster refused at COMMIT were retried by their consumer"
    ));
}

/// The effect runs per effect key, all nodes' workers together.
type Runs = Arc<std::sync::Mutex<HashMap<String, usize>>>;

/// Finishes `wins` with `finish_many`, recording each effect's key in
/// `runs`: how many rows moved on to `Sent`. Any other answer fails.
async fn finish_all(pool: &MySqlPool, wins: Vec<Won<Payout, i64>>, runs: &Runs) -> usize {
    let record = runs.clone();
    let rows = stateguard::finish_many(pool, wins, 8, move |effect: Effect<Payout, i64>| {
        *record
            .lock()
            .expect("runs")
            .entry(effect.effect_key().to_owned())
            .or_default() += 1;
        async { Verdict::done() }
    })
    .await
    .unwrap_or_else(|e| panic!("finish_many: {e}"));
    let mut sent = 0;
    for row in rows {
        match row.finished {
            Ok(Finished::Done {
                state: Payout::Sent,
                occurrence: 2,
            }) => sent += 1,
            other => panic!("row {} finished as {other:?}", row.key),
        }
    }
    sent
}

/// Nine workers, three on each node, claim 300 payouts ten at a time;
/// every other claim's worker dies before its effect, leaving its rows
/// in flight. Once their leases have run out, nine recoverers, three on
/// each node, take them over (`claim_expired`). Every batch is finished
/// with `finish_many` on the node that holds it. Each row's effect runs
/// once, under one effect key; each row is `Sent` with two history
/// rows; no call returns an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_finish_and_recover() {
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_finish_and_recover, CLAIM_ROWS).await else {
        return;
    };
    let before = conflicts(&pools).await;
    let runs: Runs = Arc::default();
    let workers = on_every_node(&pools, |node, pool| {
        let runs = runs.clone();
        async move {
            let (mut sent, mut left, mut drain) = (0, 0, Drain::default());
            while drain.more() {
                let wins: Vec<Won<Payout, i64>> = Payout::send()
                    .claim(&pool, 10)
                    .await
                    .unwrap_or_else(|e| panic!("claim on node {}: {e}", node + 1));
                let taken = wins.len();
                match (taken, drain.calls % 2) {
                    (0, _) => {}
                    // The worker dies before the effect.
                    (_, 1) => left += taken,
                    _ => sent += finish_all(&pool, wins, &runs).await,
                }
                drain.took(taken).await;
            }
            (sent, left)
        }
    })
    .await;
    let (mut sent, mut left) = (0, 0);
    for (finished, dropped) in workers {
        sent += finished;
        left += dropped;
    }
    assert_eq!(sent + left, CLAIM_ROWS as usize, "every row claimed once");
    // The dead workers' leases run out.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let recoverers = on_every_node(&pools, |node, pool| {
        let runs = runs.clone();
        async move {
            let (mut sent, mut drain) = (0, Drain::default());
            while drain.more() {
                let wins: Vec<Won<Payout, i64>> =
                    stateguard::claim_expired(&pool, Payout::Sending, 10)
                        .await
                        .unwrap_or_else(|e| panic!("claim_expired on node {}: {e}", node + 1));
                let taken = wins.len();
                if taken > 0 {
                    sent += finish_all(&pool, wins, &runs).await;
                }
                drain.took(taken).await;
            }
            sent
        }
    })
    .await;
    let recovered: usize = recoverers.into_iter().sum();
    assert_eq!(recovered, left, "every row left in flight taken over once");
    let runs = runs.lock().expect("runs").clone();
    assert_eq!(runs.len(), CLAIM_ROWS as usize, "one effect key per row");
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "effects run twice: {twice:?}");
    let mut conn = pools[0].acquire().await.expect("connection");
    sqlx::query("SET SESSION wsrep_sync_wait = 1")
        .execute(&mut *conn)
        .await
        .expect("sync wait");
    let (rows, chained): (i64, i64) = sqlx::query_as(
        "SELECT
           (SELECT CAST(COUNT(*) AS SIGNED) FROM galera_payouts
            WHERE status = 'sent' AND version = 2),
           (SELECT CAST(COUNT(*) AS SIGNED) FROM (SELECT id FROM galera_payout_history
            GROUP BY id HAVING COUNT(*) = 2 AND MIN(occurrence) = 1 AND MAX(occurrence) = 2) c)",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("rows");
    assert_eq!((rows, chained), (CLAIM_ROWS, CLAIM_ROWS));
    let after = conflicts(&pools).await;
    common::say(&format!(
        "galera finish and recover: {CLAIM_ROWS} effects, one per row, over 3 nodes ({sent} \
         finished by their claimer, {recovered} taken over after their worker died); the \
         cluster counted {} certification failures and {} brute-force aborts, none reached \
         the caller",
        after.0 - before.0,
        after.1 - before.1
    ));
}

/// Records each message the relays publish: its id, in the order the
/// publishes happened.
#[derive(Clone, Default)]
struct Record(Arc<std::sync::Mutex<Vec<String>>>);

impl stateguard::outbox::Publisher for Record {
    type Error = std::convert::Infallible;

    async fn publish(
        &self,
        message: stateguard::outbox::Message<'_>,
    ) -> Result<stateguard::outbox::Published, Self::Error> {
        self.0.lock().expect("record").push(message.id.to_owned());
        Ok(stateguard::outbox::Published::new(false))
    }
}

const MESSAGES: usize = 300;
const ORDER_KEYS: usize = 30;

/// 300 messages under 30 order keys, enqueued on node 1; three relays on
/// each node pass over the outbox until it is empty. Each node's `SKIP
/// LOCKED` sees only its own locks, so relays on two nodes may take the
/// same message; certification lets one of them keep it. Every message
/// is published exactly once, each key's messages in the order they were
/// enqueued, and no pass returns an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn galera_outbox_relay() {
    use stateguard::Tx;
    use stateguard::outbox::{self, Message, Relay};
    let _turn = TURN.lock().await;
    let Some(pools) = on_cluster!(galera_outbox_relay, 0).await else {
        return;
    };
    store(&pools, outbox::ddl(stateguard::ddl::Dialect::MySql)).await;
    let mut enqueued: HashMap<String, Vec<String>> = HashMap::new();
    let mut tx = Tx::begin(&pools[0]).await.expect("begin");
    for n in 0..MESSAGES {
        let key = format!("key-{}", n % ORDER_KEYS);
        let id = format!("message-{n}");
        let message = Message {
            id: &id,
            topic: "galera.relay",
            payload: b"{}",
        };
        outbox::enqueue(&mut tx, &key, message)
            .await
            .expect("enqueue");
        enqueued.entry(key).or_default().push(id);
    }
    tx.commit(()).await.expect("commit");
    let before = conflicts(&pools).await;
    let record = Record::default();
    let relays = on_every_node(&pools, |node, pool| {
        let relay = Relay::new(record.clone()).batch(10);
        async move {
            let mut drain = Drain::default();
            while drain.more() {
                let pass = relay
                    .pass(&pool)
                    .await
                    .unwrap_or_else(|e| panic!("relay on node {}: {e}", node + 1));
                drain.took(pass.taken()).await;
            }
            drain.calls
        }
    })
    .await;
    let passes: usize = relays.into_iter().sum();
    let published = record.0.lock().expect("record").clone();
    let mut times: HashMap<&str, usize> = HashMap::new();
    for id in &published {
        *times.entry(id.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "published twice: {twice:?}");
    assert_eq!(times.len(), MESSAGES, "every message published");
    // Each key's messages in the order they were enqueued.
    for (key, ids) in &enqueued {
        let seen: Vec<&String> = published.iter().filter(|id| ids.contains(id)).collect();
        assert!(seen.iter().copied().eq(ids.iter()), "{key}: {seen:?}");
    }
    let after = conflicts(&pools).await;
    common::say(&format!(
        "galera outbox relay: {MESSAGES} messages published once each, in order per key, by 9 \
         relays over 3 nodes in {passes} passes; the cluster counted {} certification \
         failures and {} brute-force aborts, none reached the caller",
        after.0 - before.0,
        after.1 - before.1
    ));
}
