//! The fault matrix: each public call that sends more than one statement
//! runs once to count its statements, then once per statement and fault
//! with that statement failed: refused by the server before it runs, cut
//! off after it ran and before its answer, or left without an answer
//! until the call's deadline; then once more with every statement from
//! that one on refused, as by a server that went away and stays away, so
//! that what a call sends to undo a change after a failure fails too.
//! After every run, plain SQL reads which rows
//! changed, and the rule of G10 must hold: rows changed ⇒ each of them
//! came back as a win, or the error says the outcome is unknown; and no
//! win for a row that did not change.
//!
//! The faults come from the library's own hook (`stateguard_runtime::fault`,
//! the `fault-injection` feature the tests build with): it counts the
//! statements as the library sends them on every backend, SQLite
//! included, and a statement added to a call is covered without a new
//! case here.

use crate::common;
use crate::common::KeyColumn;

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

use common::{Bind, Db, PayoutStatus, TestBackend, TransferStatus};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::idempotency::{self, Begun, Request};
use stateguard::key::shape::One;
use stateguard::{Error, Finished, StateMachine, Tx, Uncommitted, Verdict, Won};
use stateguard_runtime::fault::{Fault, Plan};

backend_tests! {
    impl Tests {
        "faults_apply" => apply,
        "faults_apply_many" => apply_many,
        "faults_apply_many_tx" => apply_many_in_a_transaction,
        "faults_claim" => claim,
        "faults_finish" => finish,
        "faults_claim_tx" => claim_in_a_transaction,
        "faults_claim_emit" => claim_that_emits,
        "faults_finish_then_recover" => finish_is_recovered,
        "faults_finish_many" => finish_many_is_recovered,
        "faults_recover" => recover_is_recovered,
        "faults_recover_many" => recover_many_is_recovered,
        "faults_idempotency_new" => idempotency_claims_a_new_key,
        "faults_idempotency_expired" => idempotency_takes_an_expired_key_over,
        "faults_claim_expired" => claim_expired,
    }
}

const FAULTS: [Fault; 3] = [Fault::Refuse, Fault::Cut, Fault::Hang];
/// The calls' deadline: a hung statement runs it out.
pub(crate) const DEADLINE: Duration = Duration::from_millis(400);
/// How long a hung statement's answer stays away: past the deadline.
const HANG: Duration = Duration::from_millis(800);

/// The rows of a table as plain SQL reads them: `(status, version)` per
/// key, `None` for a key with no row.
pub(crate) type Rows = Vec<Option<(String, i64)>>;

/// What a run of a call handed back: the keys it reported as won (moved
/// by this call), or its error.
pub(crate) type Reported = Result<BTreeSet<i64>, Failure>;

/// `TransferStatus`'s table, whose `start` writes a message: its claim
/// reads the candidates and moves them in one transaction of its own on
/// every backend, PostgreSQL included, which binds each message's effect
/// key beside its row's key.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
pub(crate) enum Announced {
    #[state(initial)]
    #[transition(start -> Sending, emit("transfer.sending"))]
    Pending,
    Sending,
}

/// Keys `1..=6`: 1–4 can move, 5 and 6 stand elsewhere; key 9 has no row.
pub(crate) const KEYS: [i64; 7] = [1, 2, 3, 4, 5, 6, 9];

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    /// `apply` into an in-flight state: one statement on PostgreSQL and
    /// SQLite, the move and its lease's read-back on MySQL.
    pub(crate) async fn apply(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let outcome = TransferStatus::start()
                .within(DEADLINE)
                .apply(&db.pool, 1_i64)
                .await?;
            Ok(outcome.won().map(|won| *won.key()).into_iter().collect())
        };
        matrix(&db, "apply", reset_transfers::<DB>, call, transfers::<DB>).await;
    }

    /// `apply_many`: the move, then one read of the keys it did not move
    /// (MySQL: a locking read, the move and the leases' read in one
    /// transaction).
    pub(crate) async fn apply_many(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let outcomes = PayoutStatus::start()
                .within(DEADLINE)
                .apply_many(&db.pool, &KEYS)
                .await?;
            Ok(outcomes
                .into_iter()
                .filter_map(|o| o.won().map(|won| *won.key()))
                .collect())
        };
        matrix(&db, "apply_many", reset_payouts::<DB>, call, payouts::<DB>).await;
    }

    /// `apply_many` inside the caller's transaction, and its commit. A
    /// caller that commits after an error commits nothing the error hid:
    /// the transaction can no longer commit.
    pub(crate) async fn apply_many_in_a_transaction(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE)
                .within(DEADLINE)
                .await?;
            let applied = PayoutStatus::start()
                .within(DEADLINE)
                .apply_many(&mut tx, &KEYS)
                .await;
            let wins =
                applied.map(|outcomes| outcomes.into_iter().filter_map(|o| o.won()).collect());
            commit_anyway(tx, wins).await
        };
        matrix(
            &db,
            "apply_many in a transaction",
            reset_payouts::<DB>,
            call,
            payouts::<DB>,
        )
        .await;
    }

    /// `claim` into an in-flight state (a transaction on SQLite and
    /// MySQL).
    pub(crate) async fn claim(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let wins = TransferStatus::start()
                .within(DEADLINE)
                .claim(&db.pool, 3)
                .await?;
            Ok(wins.iter().map(|won| *won.key()).collect())
        };
        matrix(&db, "claim", reset_transfers::<DB>, call, transfers::<DB>).await;
    }

    /// `finish` of a committed win: its lease's check or renewal, the
    /// effect, the follow-up and its reads. The win is made by `reset`,
    /// before the statements count.
    pub(crate) async fn finish(db: Db<DB>) {
        let slot: Mutex<Option<Won<TransferStatus, i64>>> = Mutex::new(None);
        let reset = async |db: &Db<DB>| {
            reset_transfers(db).await;
            let outcome = TransferStatus::start()
                .apply(&db.pool, 1_i64)
                .await
                .unwrap();
            *slot.lock().unwrap() = outcome.won();
        };
        let call = async |db: &Db<DB>| -> Reported {
            let won = slot
                .lock()
                .unwrap()
                .take()
                .expect("row 1 moved into sending");
            let done = won
                .within(DEADLINE)
                .finish(&db.pool, async |_effect| Verdict::done())
                .await;
            match done {
                Ok(Finished::Done { .. } | Finished::Failed { .. }) => Ok(BTreeSet::from([1])),
                Ok(_) => Ok(BTreeSet::new()),
                Err(error) => Err(Failure::of(error.error())),
            }
        };
        matrix(&db, "finish", reset, call, transfers::<DB>).await;
    }
}

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    /// `claim` inside the caller's transaction, and its commit.
    pub(crate) async fn claim_in_a_transaction(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE)
                .within(DEADLINE)
                .await?;
            let claimed = TransferStatus::start()
                .within(DEADLINE)
                .claim(&mut tx, 3)
                .await;
            commit_anyway(tx, claimed).await
        };
        matrix(
            &db,
            "claim in a transaction",
            reset_transfers::<DB>,
            call,
            transfers::<DB>,
        )
        .await;
    }

    /// `claim` of a transition that emits a message: the candidates'
    /// read, the move with its messages and the commit. Besides G10, no
    /// row moves without its message, and no message is written without
    /// its row's move.
    pub(crate) async fn claim_that_emits(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let wins = Announced::start()
                .within(DEADLINE)
                .claim(&db.pool, 3)
                .await?;
            Ok(wins.iter().map(|won| *won.key()).collect())
        };
        matrix(
            &db,
            "claim that emits",
            reset_announced::<DB>,
            call,
            announced::<DB>,
        )
        .await;
    }

    /// `finish` failed at any statement: the row is finished then, or
    /// left in flight for recovery, which runs the effect under the same
    /// key.
    pub(crate) async fn finish_is_recovered(db: Db<DB>) {
        let setup = async |db: &Db<DB>| moved(db, 1).await;
        let call = async |db: &Db<DB>, wins: Vec<Won<TransferStatus, i64>>, effects: &Effects| {
            for won in wins {
                let _ = won
                    .within(DEADLINE)
                    .finish(&db.pool, async |effect| effects.run(effect))
                    .await;
            }
        };
        recovered(&db, "finish", 1, setup, call).await;
    }

    /// `finish_many` failed at any statement: every row is finished, or
    /// left in flight for recovery, under the same key.
    pub(crate) async fn finish_many_is_recovered(db: Db<DB>) {
        let setup = async |db: &Db<DB>| moved(db, 3).await;
        let call = async |db: &Db<DB>, wins: Vec<Won<TransferStatus, i64>>, effects: &Effects| {
            let _ = stateguard::finish_many(&db.pool, wins, 2, async |effect| effects.run(effect))
                .await;
        };
        recovered(&db, "finish_many", 3, setup, call).await;
    }

    /// `recover` failed at any statement: its rows are finished, or left
    /// for the next pass, under the same key.
    pub(crate) async fn recover_is_recovered(db: Db<DB>) {
        let call = async |db: &Db<DB>, _: Vec<Won<TransferStatus, i64>>, effects: &Effects| {
            let _ = stateguard::recover(&db.pool, TransferStatus::Sending, 10, async |effect| {
                effects.run(effect)
            })
            .await;
        };
        recovered(&db, "recover", 3, expired::<DB>, call).await;
    }

    /// `claim_expired` of rows 1–3, left in flight past their lease: one
    /// statement on PostgreSQL and SQLite; on MySQL the listing, then each
    /// row's takeover and the read of its new lease. A row taken over
    /// comes back as a win, or the error says the outcome is unknown.
    pub(crate) async fn claim_expired(db: Db<DB>) {
        let reset = async |db: &Db<DB>| drop(expired(db).await);
        let call = async |db: &Db<DB>| -> Reported {
            let wins: Vec<Won<TransferStatus, i64>> =
                stateguard::claim_expired(&db.pool, TransferStatus::Sending, 10)
                    .within(DEADLINE)
                    .await?;
            Ok(wins.iter().map(|won| *won.key()).collect())
        };
        matrix(&db, "claim_expired", reset, call, leases::<DB>).await;
    }

    /// `recover_many` failed at any statement: as `recover`.
    pub(crate) async fn recover_many_is_recovered(db: Db<DB>) {
        let call = async |db: &Db<DB>, _: Vec<Won<TransferStatus, i64>>, effects: &Effects| {
            let _ = stateguard::recover_many(
                &db.pool,
                TransferStatus::Sending,
                10,
                2,
                async |effect| effects.run(effect),
            )
            .await;
        };
        recovered(&db, "recover_many", 3, expired::<DB>, call).await;
    }
}

impl<DB: TestBackend + Batched> Tests<DB>
where
    i64: KeyColumn<DB> + ManyKeys<DB, One>,
{
    /// The idempotency store's claim of a new key: `New` hands the ticket
    /// out, or the error says the outcome is unknown.
    pub(crate) async fn idempotency_claims_a_new_key(db: Db<DB>) {
        let reset = async |db: &Db<DB>| idempotency_table(db).await;
        matrix(
            &db,
            "idempotency begin, new",
            reset,
            claim_key,
            idempotency_row::<DB>,
        )
        .await;
    }

    /// The claim of a key whose lease ran out: the takeover (MySQL reads
    /// the new lease back).
    pub(crate) async fn idempotency_takes_an_expired_key_over(db: Db<DB>) {
        let reset = async |db: &Db<DB>| {
            idempotency_table(db).await;
            let first = idempotency::begin(&db.pool, &request(), Duration::from_millis(1)).await;
            assert!(matches!(first, Ok(Begun::New(_))), "{first:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        matrix(
            &db,
            "idempotency begin, expired",
            reset,
            claim_key,
            idempotency_row::<DB>,
        )
        .await;
    }
}

pub(crate) fn request() -> Request {
    Request::new("faults", "k", "fingerprint").unwrap()
}

/// `idempotency::begin` of [`request`]: key 1 when the ticket is this
/// call's.
async fn claim_key<DB: TestBackend>(db: &Db<DB>) -> Reported {
    let begun = idempotency::begin(&db.pool, &request(), idempotency::DEFAULT_LEASE)
        .within(DEADLINE)
        .await?;
    Ok(match begun {
        Begun::New(_) => BTreeSet::from([1]),
        _ => BTreeSet::new(),
    })
}

/// The store's table, made on first use, empty.
pub(crate) async fn idempotency_table<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    if DB::execute(&mut conn, "DELETE FROM stateguard_idempotency", &[])
        .await
        .is_err()
    {
        for statement in idempotency::ddl(DB::DIALECT) {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
    }
}

/// The key's row as key 1: its state and lease.
pub(crate) async fn idempotency_row<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let sql = match DB::DIALECT {
        stateguard::ddl::Dialect::MySql => {
            "SELECT state, CAST(lease AS SIGNED) FROM stateguard_idempotency WHERE idem_key = 'k'"
        }
        _ => "SELECT state, CAST(lease AS BIGINT) FROM stateguard_idempotency WHERE idem_key = 'k'",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    vec![DB::fetch_optional(&mut conn, sql, &[]).await.unwrap()]
}

/// The effects that ran: each row's key and effect key, in order.
#[derive(Default)]
struct Effects(Mutex<Vec<(i64, String)>>);

impl Effects {
    fn run(&self, effect: stateguard::Effect<TransferStatus, i64>) -> Verdict<TransferStatus> {
        let ran = (*effect.key(), effect.effect_key().to_owned());
        self.0.lock().unwrap().push(ran);
        Verdict::done()
    }
}

/// `transfers` made anew with rows 1–6 pending, and rows `1..=n` moved
/// into `sending` by `apply`: their wins.
async fn moved<DB: TestBackend>(db: &Db<DB>, n: i64) -> Vec<Won<TransferStatus, i64>>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    pending_transfers(db).await;
    let mut wins = Vec::new();
    for key in 1..=n {
        let outcome = TransferStatus::start().apply(&db.pool, key).await.unwrap();
        wins.push(outcome.won().expect("a pending row moves"));
    }
    wins
}

/// Rows 1–3 moved into `sending` and left there past their lease, as a
/// worker that died leaves them: no win to hand a call.
async fn expired<DB: TestBackend>(db: &Db<DB>) -> Vec<Won<TransferStatus, i64>>
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    drop(moved(db, 3).await);
    db.backdate_leases().await;
    Vec::new()
}

/// Runs `call` on what `setup` made (outside any plan) once to count its
/// statements, then once per statement and fault; after each run,
/// recovery passes without faults until no row is in flight. Rows
/// `1..=rows` must end `sent`, the others `pending`, and every effect of
/// a row, in the faulted call and in recovery, must have run under one
/// effect key.
async fn recovered<DB: TestBackend>(
    db: &Db<DB>,
    name: &str,
    rows: i64,
    setup: impl AsyncFn(&Db<DB>) -> Vec<Won<TransferStatus, i64>>,
    call: impl AsyncFn(&Db<DB>, Vec<Won<TransferStatus, i64>>, &Effects),
) where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    let wins = setup(db).await;
    let counting = Plan::count();
    counting.run(call(db, wins, &Effects::default())).await;
    let sent = counting.sent();
    assert!(!sent.is_empty(), "{name} sent no statement");
    let mut runs = 0;
    for (index, statement) in sent.iter().enumerate() {
        for fault in FAULTS {
            let wins = setup(db).await;
            let effects = Effects::default();
            Plan::fail(index, fault, HANG)
                .run(call(db, wins, &effects))
                .await;
            if fault == Fault::Hang {
                tokio::time::sleep(HANG).await;
            }
            let what = format!(
                "{name}, statement {index} ({:?}) {fault:?}",
                head(statement)
            );
            for _ in 0..5 {
                let in_flight = transfers(db)
                    .await
                    .iter()
                    .any(|row| matches!(row, Some((s, _)) if s == "sending"));
                if !in_flight {
                    break;
                }
                db.backdate_leases().await;
                let pass =
                    stateguard::recover(&db.pool, TransferStatus::Sending, 10, async |effect| {
                        effects.run(effect)
                    })
                    .await;
                pass.map(drop)
                    .unwrap_or_else(|e| panic!("{what}: recovery after it: {e}"));
            }
            let statuses = transfers(db).await;
            for (key, row) in (1..=6_i64).zip(&statuses) {
                let status = row.as_ref().map(|(s, _)| s.as_str());
                let expected = if key <= rows { "sent" } else { "pending" };
                assert_eq!(status, Some(expected), "{what}: row {key}");
            }
            let ran = effects.0.lock().unwrap().clone();
            for key in 1..=rows {
                let keys: BTreeSet<&String> = ran
                    .iter()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, e)| e)
                    .collect();
                assert_eq!(keys.len(), 1, "{what}: row {key} ran under {keys:?}");
            }
            runs += 1;
        }
    }
    common::say(&format!(
        "{name}: {} statements, {runs} faulted runs, recovered",
        sent.len()
    ));
}

/// Commits `tx` with the wins of a call in it, and reports their keys;
/// after the call's error, commits all the same, as a careless caller
/// would, and reports the error: what the error hid must not commit.
pub(crate) async fn commit_anyway<DB: TestBackend, S: StateMachine>(
    tx: Tx<'_, DB>,
    wins: Result<Vec<Won<S, i64, Uncommitted>>, Error>,
) -> Reported {
    match wins {
        Ok(wins) => {
            let committed = tx.commit(wins).await?;
            Ok(committed.iter().map(|won| *won.key()).collect())
        }
        Err(error) => {
            let _ = tx.commit(Vec::<Won<S, i64, Uncommitted>>::new()).await;
            Err(Failure::of(&error))
        }
    }
}

/// An error as the rule reads it.
#[derive(Debug)]
pub(crate) struct Failure {
    unknown: bool,
    text: String,
}

impl Failure {
    pub(crate) fn of(error: &Error) -> Failure {
        Failure {
            unknown: error.is_outcome_unknown(),
            text: error.to_string(),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::of(&error)
    }
}

/// Runs `call` once to count its statements, then once per statement and
/// fault, and once more with every statement from that one on refused,
/// from `reset` each time, and holds each run to the rule.
pub(crate) async fn matrix<DB: TestBackend>(
    db: &Db<DB>,
    name: &str,
    reset: impl AsyncFn(&Db<DB>),
    call: impl AsyncFn(&Db<DB>) -> Reported,
    rows: impl AsyncFn(&Db<DB>) -> Rows,
) {
    reset(db).await;
    let before = rows(db).await;
    let counting = Plan::count();
    let clean = counting.run(call(db)).await;
    let won = clean.unwrap_or_else(|e| panic!("{name} without a fault failed: {}", e.text));
    assert_eq!(
        changed(&before, &rows(db).await),
        won,
        "{name} without a fault"
    );
    assert!(!won.is_empty(), "{name} without a fault moved nothing");
    let sent = counting.sent();
    assert!(!sent.is_empty(), "{name} sent no statement");
    let mut runs = 0;
    for (index, statement) in sent.iter().enumerate() {
        let plans = FAULTS.map(|fault| (Plan::fail(index, fault, HANG), fault, ""));
        let onward = (
            Plan::fail_from(index, Fault::Refuse, HANG),
            Fault::Refuse,
            " from it on",
        );
        for (plan, fault, from) in plans.into_iter().chain([onward]) {
            reset(db).await;
            let before = rows(db).await;
            let reported = plan.run(call(db)).await;
            if fault == Fault::Hang {
                // The hung statement's task, where it runs in one, hands
                // its connection back.
                tokio::time::sleep(HANG).await;
            }
            let moved = changed(&before, &rows(db).await);
            let what = format!(
                "{name}, statement {index} of {} ({:?}) {fault:?}{from}",
                sent.len(),
                head(statement)
            );
            match reported {
                Ok(won) => assert_eq!(
                    moved, won,
                    "{what}: the rows that changed are not the wins handed out"
                ),
                Err(error) => assert!(
                    moved.is_empty() || error.unknown,
                    "{what}: rows {moved:?} changed, and the error says the outcome is \
                     known: {}",
                    error.text
                ),
            }
            runs += 1;
        }
    }
    common::say(&format!(
        "{name}: {} statements, {runs} faulted runs",
        sent.len()
    ));
}

/// The keys whose row differs between `before` and `after`.
fn changed(before: &Rows, after: &Rows) -> BTreeSet<i64> {
    KEYS.iter()
        .zip(before.iter().zip(after))
        .filter(|(_, (b, a))| b != a)
        .map(|(k, _)| *k)
        .collect()
}

fn head(sql: &str) -> String {
    sql.split_whitespace().take(6).collect::<Vec<_>>().join(" ")
}

pub(crate) async fn exec<DB: TestBackend>(db: &Db<DB>, sql: &'static str, binds: &[Bind<'_>]) {
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, sql, binds).await.unwrap();
}

/// `payouts` rows 1–4 pending, 5 sending, 6 cancelled.
async fn reset_payouts<DB: TestBackend>(db: &Db<DB>) {
    exec(db, "DELETE FROM payouts", &[]).await;
    db.seed(4).await;
    db.insert(5, "sending").await;
    db.insert(6, "cancelled").await;
}

async fn payouts<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let mut rows = Vec::new();
    for key in KEYS {
        rows.push(db.status(key).await.map(|s| (s, 0)));
    }
    rows
}

/// `transfers` rows 1–6, all pending (the table made on first use).
async fn pending_transfers<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    if DB::execute(&mut conn, "DELETE FROM transfers", &[])
        .await
        .is_err()
    {
        DB::execute(&mut conn, DB::CREATE_TRANSFERS, &[])
            .await
            .unwrap();
    }
    DB::execute(&mut conn, DB::SEED_TRANSFERS, &[Bind::Int(6)])
        .await
        .unwrap();
    drop(conn);
}

/// [`reset_transfers`], and an empty outbox (made on first use).
async fn reset_announced<DB: TestBackend>(db: &Db<DB>) {
    reset_transfers(db).await;
    let mut conn = db.pool.acquire().await.unwrap();
    if DB::execute(&mut conn, "DELETE FROM stateguard_outbox", &[])
        .await
        .is_err()
    {
        for statement in stateguard::outbox::ddl(DB::DIALECT) {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
    }
}

/// [`transfers`], after holding the outbox to the rows: each row the
/// claim moved (now at version 1) has one message, whose id is its
/// effect key, and there is no other message.
async fn announced<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let rows = transfers(db).await;
    let (count, of) = match DB::DIALECT {
        stateguard::ddl::Dialect::Postgres => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox",
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE message_id = $1",
        ),
        stateguard::ddl::Dialect::Sqlite => (
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox",
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE message_id = ?1",
        ),
        _ => (
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox",
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox WHERE message_id = ?",
        ),
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let mut moved = 0;
    for (key, row) in KEYS.iter().zip(&rows) {
        if !matches!(row, Some((_, 1))) {
            continue;
        }
        moved += 1;
        let id = format!("transfers.status:{key}:sending:1");
        let (n,): (i64,) = DB::fetch_one(&mut conn, of, &[Bind::Text(&id)])
            .await
            .unwrap();
        assert_eq!(n, 1, "transfer {key} moved with {n} messages");
    }
    let (all,): (i64,) = DB::fetch_one(&mut conn, count, &[]).await.unwrap();
    assert_eq!(all, moved, "messages without their rows' moves");
    rows
}

/// `transfers` rows 1–4 pending, 5 sending, 6 cancelled (the table made
/// on first use).
pub(crate) async fn reset_transfers<DB: TestBackend>(db: &Db<DB>) {
    pending_transfers(db).await;
    exec(
        db,
        set_status::<DB>(),
        &[Bind::Text("sending"), Bind::Int(5)],
    )
    .await;
    exec(
        db,
        set_status::<DB>(),
        &[Bind::Text("cancelled"), Bind::Int(6)],
    )
    .await;
}

/// The transfers as [`transfers`] reads them, with each row's lease (its
/// `sending_since`) in the status: a takeover changes nothing else.
async fn leases<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let sql = match DB::DIALECT {
        stateguard::ddl::Dialect::Postgres => {
            "SELECT status || '@' || COALESCE(CAST(sending_since AS TEXT), ''), \
             CAST(version AS BIGINT) FROM transfers WHERE id = $1"
        }
        stateguard::ddl::Dialect::Sqlite => {
            "SELECT status || '@' || COALESCE(sending_since, ''), version \
             FROM transfers WHERE id = ?1"
        }
        _ => {
            "SELECT CONCAT(status, '@', COALESCE(CAST(sending_since AS CHAR), '')), \
             CAST(version AS SIGNED) FROM transfers WHERE id = ?"
        }
    };
    let mut rows = Vec::new();
    for key in KEYS {
        let mut conn = db.pool.acquire().await.unwrap();
        rows.push(
            DB::fetch_optional(&mut conn, sql, &[Bind::Int(key)])
                .await
                .unwrap(),
        );
    }
    rows
}

fn set_status<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        stateguard::ddl::Dialect::Postgres => "UPDATE transfers SET status = $1 WHERE id = $2",
        stateguard::ddl::Dialect::Sqlite => "UPDATE transfers SET status = ?1 WHERE id = ?2",
        _ => "UPDATE transfers SET status = ? WHERE id = ?",
    }
}

pub(crate) async fn transfers<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let mut rows = Vec::new();
    for key in KEYS {
        let mut conn = db.pool.acquire().await.unwrap();
        let row: Option<(String, i64)> =
            DB::fetch_optional(&mut conn, DB::TRANSFER, &[Bind::Int(key)])
                .await
                .unwrap();
        rows.push(row);
    }
    rows
}
