//! Behind PgBouncer in transaction mode, without prepared-statement
//! tracking (Debian's 1.18), the server runs other clients' statements in
//! place of a call's own. Every statement proves that its rows are its own
//! (`Statement::tag`), so a race there gives no win the database did not
//! make: each call is told the truth or `Error::StatementMixUp`, and plain
//! SQL over a direct connection confirms one winner per row.
//!
//! The tables are schema-qualified: a per-session `search_path` does not
//! stick under transaction pooling.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use stateguard::ddl::Dialect;
use stateguard::idempotency::{self, Begun, Request, Work};
use stateguard::inbox::Received;
use stateguard::pooler::{self, Acknowledgement, Pooling};
use stateguard::{Error, Outcome, StateMachine, Stores, Tx};
use tokio::sync::Barrier;

const TRANSACTION: &str = "STATEGUARD_PGBOUNCER_TRANSACTION_URL";
const DIRECT: &str = "STATEGUARD_POSTGRES_URL";

const ROWS: i64 = 100;

/// The rows each race moved, as the database has them.
const MOVED_PAYOUTS: &str = "SELECT id FROM sg_mix_up.payouts WHERE status = 'sending' ORDER BY id";
const MOVED_TRANSFERS: &str =
    "SELECT id FROM sg_mix_up.transfers WHERE status = 'sending' ORDER BY id";
const ATTEMPTS_PER_ROW: usize = 32;

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "sg_mix_up.payouts", column = "status", key = "id")]
enum Payout {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[transition(confirm -> Sent)]
    Sending,
    Sent,
}

/// The same machine with a version column, a history table and its
/// effect in flight: its compare-and-set returns the new occurrence and a
/// lease and writes the history row in the same statement; `finish` moves
/// it on under the lease, and recovery finishes what a failed call left
/// there.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "sg_mix_up.transfers",
    column = "status",
    key = "id",
    version = "version",
    history = "sg_mix_up.transfer_history"
)]
enum Transfer {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "200ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// `Transfer` without its history: its lease renewal and its follow-ups
/// bind the same values (key, occurrence, lease), so a pooler can run a
/// follow-up with a renewal's values, which would move the row on before
/// its effect ran.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "sg_mix_up.leases",
    column = "status",
    key = "id",
    version = "version"
)]
enum Leased {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "200ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// The stores in the tests' schema: behind transaction pooling a
/// session's `search_path` does not stick, and every statement names it.
static MIX_UP: Stores = stateguard::stores!(schema = "sg_mix_up");

/// One test at a time: each makes the schema anew, and closes the
/// transaction-mode PgBouncer's server sessions (`RECONNECT`), which the
/// pooler check's tests hold this for too.
pub(crate) static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The tables, made anew over a direct connection; `None` when either
/// server is not configured.
async fn setup(test: &str) -> Option<(PgPool, PgConnection)> {
    let pooled_url = common::server_url(TRANSACTION, test)?;
    fresh_server_sessions(&pooled_url).await;
    let direct = common::server_url(DIRECT, test)?;
    let pooled = common::server_url(TRANSACTION, test)?;
    let admin = tables(&direct).await;
    // 50 client connections onto PgBouncer's 10 server connections.
    let pool = PgPoolOptions::new()
        .max_connections(50)
        .acquire_timeout(Duration::from_secs(60))
        .connect(&pooled)
        .await
        .expect("transaction-mode PgBouncer");
    // Found multiplexed, and (wrongly: PgBouncer 1.18 tracks no prepared
    // statements) acknowledged: every server error of a library statement
    // on it is then a mix-up.
    let pooling = pooler::check(&pool)
        .acknowledge(Acknowledgement::PgBouncerTracksPreparedStatements)
        .await
        .expect("the pooler check");
    assert!(
        matches!(pooling, Pooling::Multiplexed { .. }),
        "{pooling:?}"
    );
    Some((pool, admin))
}

/// The tables, made anew through a direct connection to `direct`, which
/// it returns.
async fn tables(direct: &str) -> PgConnection {
    let mut admin = PgConnection::connect(direct)
        .await
        .expect("direct connection");
    sqlx::raw_sql(
        "DROP SCHEMA IF EXISTS sg_mix_up CASCADE; CREATE SCHEMA sg_mix_up; \
         CREATE TABLE sg_mix_up.payouts (id BIGINT PRIMARY KEY, status TEXT NOT NULL); \
         CREATE TABLE sg_mix_up.transfers (id BIGINT PRIMARY KEY, status TEXT NOT NULL, \
             version BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ); \
         CREATE TABLE sg_mix_up.leases (LIKE sg_mix_up.transfers INCLUDING ALL)",
    )
    .execute(&mut admin)
    .await
    .expect("tables");
    for seed in [
        "INSERT INTO sg_mix_up.payouts SELECT g, 'pending' FROM generate_series(1, $1) g",
        "INSERT INTO sg_mix_up.transfers SELECT g, 'pending' FROM generate_series(1, $1) g",
        "INSERT INTO sg_mix_up.leases SELECT g, 'pending' FROM generate_series(1, $1) g",
    ] {
        sqlx::query(seed)
            .bind(ROWS)
            .execute(&mut admin)
            .await
            .expect("rows");
    }
    for statement in stateguard::ddl::generate::<Transfer>(Dialect::Postgres).up() {
        sqlx::raw_sql(statement)
            .execute(&mut admin)
            .await
            .expect("history table");
    }
    admin
}

/// Makes PgBouncer close its server sessions (its admin console's
/// `RECONNECT`) and waits until they are gone, so that a race meets
/// sessions without the prepared statements an earlier race left on them:
/// on those every name sqlx chooses is taken, and nearly every call is
/// refused before anything runs.
async fn fresh_server_sessions(pooled: &str) {
    let admin = pooled
        .rsplit_once('/')
        .map(|(base, _)| format!("{base}/pgbouncer"));
    let admin = admin.expect("a PgBouncer URL with a database");
    let mut console = PgConnection::connect(&admin)
        .await
        .expect("PgBouncer's console");
    sqlx::raw_sql("RECONNECT test")
        .execute(&mut console)
        .await
        .expect("RECONNECT");
    for _ in 0..100 {
        let servers = sqlx::raw_sql("SHOW SERVERS")
            .fetch_all(&mut console)
            .await
            .expect("SHOW SERVERS");
        let closing = servers.iter().any(|server| {
            sqlx::Row::try_get::<i32, _>(server, "close_needed").map_or(true, |c| c != 0)
        });
        if !closing {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = console.close().await;
}

/// What a pooler that mixes prepared statements makes the server do, done
/// by hand on a direct connection: a lease holder's `fail` follow-up run
/// with the values of the `confirm` follow-up of the same lease (the same
/// key, occurrence, token and note) fails, and writes nothing, since the
/// values end with `confirm`'s tag; with its own values `confirm` moves
/// the row. Without the tag check, a payout whose bank transfer went
/// through would be marked failed.
#[tokio::test]
async fn a_statement_run_with_another_statements_values_writes_nothing() {
    let _turn = TURN.lock().await;
    let test = "a_statement_run_with_another_statements_values_writes_nothing";
    let Some(direct) = common::server_url(DIRECT, test) else {
        return;
    };
    let mut admin = tables(&direct).await;
    let pool = PgPool::connect(&direct).await.expect("direct pool");
    let Outcome::Applied(_won) = Transfer::start().apply(&pool, 7).await.expect("start") else {
        panic!("row 7 starts");
    };
    let lease = Transfer::MACHINE
        .state(Transfer::Sending)
        .and_then(|state| state.in_flight())
        .expect("sending is in flight");
    let [done, ..] = lease.done_sql().statements();
    let [failed, ..] = lease.failed_sql().expect("a failed follow-up").statements();
    // The premise: the two take the same values, but for their tags.
    assert_eq!(done.binds(), failed.binds());
    assert_ne!(done.tag(), failed.tag());
    let (occurrence, token): (i64, i64) = sqlx::query_as(
        "SELECT version, CAST(EXTRACT(EPOCH FROM sending_since) * 1000000 AS BIGINT) \
         FROM sg_mix_up.transfers WHERE id = 7",
    )
    .fetch_one(&mut admin)
    .await
    .expect("the lease");
    // Key, occurrence, token, the note (actor, reason, details), the tag.
    let run = |statement: stateguard::meta::Statement, tag: Option<&'static str>| {
        sqlx::query(statement.text())
            .bind(7_i64)
            .bind(occurrence)
            .bind(token)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(tag)
            .fetch_all(&pool)
    };
    let status = || {
        sqlx::query_scalar::<_, String>("SELECT status FROM sg_mix_up.transfers WHERE id = 7")
            .fetch_one(&pool)
    };
    for values in [done.tag(), None] {
        let Err(sqlx::Error::Database(error)) = run(failed, values).await else {
            panic!("fail ran with {values:?} in its tag's place");
        };
        assert_eq!(error.code().as_deref(), Some("22P02"), "{error}");
        let ran = format!(
            "stateguard mix-up: ran {}",
            failed.tag().unwrap_or_default()
        );
        assert!(error.message().contains(&ran), "{error}");
        assert_eq!(status().await.expect("status"), "sending");
    }
    let rows = run(done, done.tag())
        .await
        .expect("confirm with its own values");
    assert_eq!(rows.len(), 1);
    assert_eq!(status().await.expect("status"), "sent");
    let history: i64 = sqlx::query_scalar("SELECT count(*) FROM sg_mix_up.transfer_history")
        .fetch_one(&pool)
        .await
        .expect("history");
    assert_eq!(
        history, 2,
        "start and confirm, nothing of the failed attempts"
    );
    pool.close().await;
}

/// What one call was told about one row.
enum Answer {
    /// `Applied`.
    Won,
    /// Any other answer that names the row's state.
    Lost,
    /// `NotFound`: never true here, where every row exists.
    NotFound,
}

impl<S: StateMachine, K, C> From<Outcome<S, K, C>> for Answer {
    fn from(outcome: Outcome<S, K, C>) -> Self {
        match outcome {
            Outcome::Applied(_) => Answer::Won,
            Outcome::NotFound => Answer::NotFound,
            _ => Answer::Lost,
        }
    }
}

/// What the calls were told, summed over all of them.
#[derive(Debug, Default)]
struct Told {
    /// Wins per row.
    applied: BTreeMap<i64, usize>,
    /// Any other answer that names the row's state.
    already: usize,
    /// `StatementMixUp`.
    mixed_up: usize,
    /// Of those, the server's errors, which may be another client's
    /// statement's.
    refused: usize,
}

impl Told {
    /// Counts an error, which must be a mix-up: on a pool the check found
    /// multiplexed, even a server error that ran nothing of this call's
    /// (a name another client holds, values that fit another statement)
    /// is one, with its outcome unknown.
    fn error(&mut self, error: Error) {
        match &error {
            Error::StatementMixUp(mix_up) => {
                assert!(mix_up.expected().starts_with("stateguard "), "{mix_up:?}");
                assert!(error.is_outcome_unknown());
                self.mixed_up += 1;
                if mix_up.server_code().is_some() {
                    self.refused += 1;
                }
            }
            other => panic!("not a mix-up: {other}"),
        }
    }
}

/// Races `ATTEMPTS_PER_ROW` calls of `apply` on each row through the pool,
/// each answering for the rows it names.
async fn race<F, Fut>(pool: &PgPool, apply: F) -> Told
where
    F: Fn(PgPool, i64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Vec<(i64, Answer)>, Error>> + Send,
{
    if let Ok(url) = std::env::var(TRANSACTION) {
        fresh_server_sessions(&url).await;
    }
    let attempts = ROWS as usize * ATTEMPTS_PER_ROW;
    let barrier = Arc::new(Barrier::new(attempts));
    let mut tasks = Vec::with_capacity(attempts);
    for id in 1..=ROWS {
        for _ in 0..ATTEMPTS_PER_ROW {
            let (pool, barrier, apply) = (pool.clone(), barrier.clone(), apply.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                (id, apply(pool, id).await)
            }));
        }
    }
    let mut told = Told::default();
    for task in tasks {
        let (id, answers) = task.await.expect("attempt task");
        match answers {
            Ok(answers) => {
                for (row, answer) in answers {
                    match answer {
                        Answer::Won => *told.applied.entry(row).or_default() += 1,
                        Answer::Lost => told.already += 1,
                        Answer::NotFound => {
                            panic!("row {row} (call {id}): NotFound, yet it exists")
                        }
                    }
                }
            }
            Err(error) => told.error(error),
        }
    }
    told
}

/// The ids `sql` reads, in order, over the direct connection.
async fn ids(admin: &mut PgConnection, sql: &'static str) -> Vec<i64> {
    sqlx::query_scalar(sql)
        .fetch_all(&mut *admin)
        .await
        .expect("read back")
}

/// Each win names a row the database moved, and no row was won twice.
fn assert_confirmed(what: &str, told: &Told, moved: &[i64]) {
    for (id, wins) in &told.applied {
        assert_eq!(*wins, 1, "{what}: row {id} won {wins} times ({told:?})");
        assert!(
            moved.binary_search(id).is_ok(),
            "{what}: row {id} was won, yet the database did not move it"
        );
    }
    common::say(&format!(
        "{what} behind transaction pooling: {} wins for {} rows moved, {} already, \
         {} mix-ups caught, {} of them server errors",
        told.applied.len(),
        moved.len(),
        told.already,
        told.mixed_up,
        told.refused
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_gives_no_false_win() {
    let _turn = TURN.lock().await;
    let Some((pool, mut admin)) = setup("transaction_pooling_gives_no_false_win").await else {
        return;
    };
    // Unversioned: the compare-and-set's only answer is its rows.
    let told = race(&pool, |pool, id| async move {
        let outcome = Payout::start().apply(&pool, id).await?;
        Ok(vec![(id, outcome.into())])
    })
    .await;
    let moved = ids(&mut admin, MOVED_PAYOUTS).await;
    assert_confirmed("apply", &told, &moved);
    // Versioned, with history: a win's occurrence is the row's, and its
    // history row is there.
    let told = race(&pool, |pool, id| async move {
        let outcome = Transfer::start().apply(&pool, id).await?;
        if let Outcome::Applied(won) = &outcome {
            assert_eq!(won.occurrence(), 1, "transfer {id}: a win's occurrence");
        }
        Ok(vec![(id, outcome.into())])
    })
    .await;
    let moved = ids(&mut admin, MOVED_TRANSFERS).await;
    assert_confirmed("apply with history", &told, &moved);
    let logged: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM sg_mix_up.transfer_history WHERE transition = 'start' ORDER BY id",
    )
    .fetch_all(&mut admin)
    .await
    .expect("history");
    assert_eq!(logged, moved, "one history row per row moved");
    pool.close().await;
}

/// `apply_many` over groups of ten rows and `claim` of up to ten: each row
/// is won once at most, only if the database moved it, and no call is
/// told a row it named is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_gives_no_false_batch_win() {
    let _turn = TURN.lock().await;
    let test = "transaction_pooling_gives_no_false_batch_win";
    let Some((pool, mut admin)) = setup(test).await else {
        return;
    };
    let told = race(&pool, |pool, id| async move {
        let first = (id - 1) / 10 * 10 + 1;
        let keys: Vec<i64> = (first..first + 10).collect();
        let outcomes = Payout::start().apply_many(&pool, &keys).await?;
        Ok(keys
            .into_iter()
            .zip(outcomes.into_iter().map(Answer::from))
            .collect())
    })
    .await;
    let moved = ids(&mut admin, MOVED_PAYOUTS).await;
    assert_confirmed("apply_many", &told, &moved);
    let told = race(&pool, |pool, _| async move {
        let claimed = Transfer::start().claim::<_, i64>(&pool, 10).await?;
        Ok(claimed
            .into_iter()
            .map(|won| (*won.key(), Answer::Won))
            .collect())
    })
    .await;
    let moved = ids(&mut admin, MOVED_TRANSFERS).await;
    assert_confirmed("claim", &told, &moved);
    pool.close().await;
}

/// A win runs its effect and `finish`es it through the pooler; what a
/// mixed-up call left in flight, recovery over a direct connection
/// finishes once its lease ran out. Every row ends `sent`, no win is false,
/// every failure of `finish` is a mix-up, and every row's effect ran, each
/// run under the one effect key of that row's pass. The machine has no
/// history, so that its renewal and its follow-ups bind the same values.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_finishes_each_effect_under_one_key() {
    let _turn = TURN.lock().await;
    let test = "transaction_pooling_finishes_each_effect_under_one_key";
    let Some((pool, mut admin)) = setup(test).await else {
        return;
    };
    let direct = common::server_url(DIRECT, test).expect("direct URL");
    type Keys = Arc<std::sync::Mutex<BTreeMap<i64, Vec<String>>>>;
    let keys: Keys = Arc::default();
    let effect = |keys: Keys| {
        move |effect: stateguard::Effect<Leased, i64>| {
            let keys = keys.clone();
            async move {
                let mut keys = keys.lock().unwrap();
                keys.entry(*effect.key())
                    .or_default()
                    .push(effect.effect_key().to_owned());
                stateguard::Verdict::done()
            }
        }
    };
    let run = keys.clone();
    let told = race(&pool, move |pool, id| {
        let run = run.clone();
        async move {
            let outcome = Leased::start().apply(&pool, id).await?;
            let answer = Answer::from(match outcome {
                Outcome::Applied(won) => {
                    // A finish that fails for a mix-up leaves the row to
                    // recovery; no other failure is expected.
                    if let Err(failed) = won.finish(&pool, effect(run)).await {
                        let error = failed.error();
                        assert!(
                            matches!(error, Error::StatementMixUp(_) | Error::Unreported { .. })
                                && error.is_outcome_unknown(),
                            "finish: {error}"
                        );
                    }
                    return Ok(vec![(id, Answer::Won)]);
                }
                other => other,
            });
            Ok(vec![(id, answer)])
        }
    })
    .await;
    let moved: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM sg_mix_up.leases WHERE status <> 'pending' ORDER BY id")
            .fetch_all(&mut admin)
            .await
            .expect("moved");
    assert_confirmed("finish", &told, &moved);
    // What is left in flight, recovery finishes once the lease ran out.
    let direct = PgPoolOptions::new()
        .max_connections(2)
        .connect(&direct)
        .await
        .expect("direct pool");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let recovered = stateguard::recover(&direct, Leased::Sending, 1_000, effect(keys.clone()))
        .await
        .expect("recover");
    assert!(recovered.errors.is_empty(), "{recovered:?}");
    direct.close().await;
    let sent: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM sg_mix_up.leases WHERE status = 'sent' ORDER BY id")
            .fetch_all(&mut admin)
            .await
            .expect("sent");
    assert_eq!(sent, moved, "every row moved ends sent");
    let keys = keys.lock().unwrap().clone();
    for id in &moved {
        let runs = keys.get(id).map(Vec::as_slice).unwrap_or_default();
        // A follow-up (`confirm`) that the pooler runs with a lease
        // renewal's values (the same binds: key, occurrence, lease) would
        // move the row on before its effect ran; its tag column fails it,
        // since the values end with the renewal's tag.
        assert!(!runs.is_empty(), "row {id} moved on without its effect");
        assert!(
            runs.iter().all(|key| key == &runs[0]),
            "row {id}: effect keys {runs:?}"
        );
    }
    pool.close().await;
}

/// The inbox's `receive` is told `First` once per message at most, and
/// only for a message the table holds once its transaction committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_receives_each_message_once() {
    let _turn = TURN.lock().await;
    let test = "transaction_pooling_receives_each_message_once";
    let Some((pool, mut admin)) = setup(test).await else {
        return;
    };
    for statement in MIX_UP.inbox().ddl(Dialect::Postgres) {
        sqlx::raw_sql(*statement)
            .execute(&mut admin)
            .await
            .expect("inbox table");
    }
    let told = race(&pool, |pool, id| async move {
        let mut tx = Tx::begin(&pool).await?;
        let message = format!("message-{id}");
        let received = MIX_UP.inbox().receive(&mut tx, "mix-up", &message).await?;
        tx.commit(()).await?;
        let answer = match received {
            Received::First => Answer::Won,
            Received::Duplicate => Answer::Lost,
        };
        Ok(vec![(id, answer)])
    })
    .await;
    let stored: Vec<i64> = sqlx::query_scalar(
        "SELECT CAST(substr(message_id, 9) AS BIGINT) FROM sg_mix_up.stateguard_inbox \
         WHERE consumer = 'mix-up' ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("inbox");
    assert_confirmed("inbox receive", &told, &stored);
    pool.close().await;
}

/// An idempotency key is `New` to one request at most, whose work and
/// response commit: every other request is told `Replay` or
/// `InProgress`, and no `New` is one the table does not hold as done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_pooling_begins_each_key_once() {
    let _turn = TURN.lock().await;
    let test = "transaction_pooling_begins_each_key_once";
    let Some((pool, mut admin)) = setup(test).await else {
        return;
    };
    for statement in MIX_UP.idempotency().ddl(Dialect::Postgres) {
        sqlx::raw_sql(*statement)
            .execute(&mut admin)
            .await
            .expect("idempotency table");
    }
    let told = race(&pool, |pool, id| async move {
        let request = Request::new("mix-up", format!("key-{id}"), "fingerprint")?;
        let begun = MIX_UP
            .idempotency()
            .begin_tx(&pool, &request, idempotency::DEFAULT_LEASE)
            .await?;
        let answer = match begun {
            Begun::New(Work { ticket, mut tx }) => {
                ticket.complete(&mut tx, 201, b"created".to_vec()).await?;
                tx.commit(()).await?;
                Answer::Won
            }
            Begun::Replay(_) | Begun::InProgress => Answer::Lost,
            Begun::Mismatch => {
                panic!("key {id}: Mismatch, yet every request sends one fingerprint")
            }
        };
        Ok(vec![(id, answer)])
    })
    .await;
    let done: Vec<i64> = sqlx::query_scalar(
        "SELECT CAST(substr(idem_key, 5) AS BIGINT) FROM sg_mix_up.stateguard_idempotency \
         WHERE scope = 'mix-up' AND state = 'done' ORDER BY 1",
    )
    .fetch_all(&mut admin)
    .await
    .expect("keys");
    assert_confirmed("idempotency begin_tx", &told, &done);
    pool.close().await;
}
