//! Every win hands out the occurrence the row stores: on every path that
//! moves a row (`apply`, `expecting`, `claim`, `claim_older_than`,
//! `claim_timed_out`, `apply_many`, a takeover by `claim_expired` or
//! `recover`, and `finish`'s follow-up), on a pool, a connection, a `Tx`
//! and a `Savepoint`, with and without history, with and without a note,
//! with and without the generated DDL (whose MySQL/MariaDB trigger makes
//! the server's OK packet drop the `LAST_INSERT_ID(expr)` a win stores).
//!
//! Each win's `occurrence()` is compared with the version read back with
//! plain SQL, each win into the in-flight state finishes under its lease
//! (a wrong lease token would make it `LeaseLost`), and the effect keys of
//! all wins, over two passes of every row through its states, are all
//! different.

use crate::common;
use crate::common::KeyColumn;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use common::{Db, TestBackend};
use stateguard::bounds::{Batched, ManyKeys};
use stateguard::ddl::Dialect;
use stateguard::{Effect, Finished, Note, StateMachine, Tx, Verdict, Won};

/// A transfer that can pass through every state again: a version column,
/// an in-flight state, a state with a timeout, and a way back to
/// `pending` from each end; `$name` on the `transfers` table with the
/// further attributes `$($more)*` (a history table).
macro_rules! cycle {
    ($(#[$doc:meta])* $name:ident $($more:tt)*) => {
        $(#[$doc])*
        #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
        #[state_machine(
            table = "transfers",
            column = "status",
            key = "id",
            version = "version"
            $($more)*
        )]
        enum $name {
            #[state(initial)]
            #[transition(start -> Sending)]
            #[transition(cancel -> Cancelled)]
            Pending,
            #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
            #[transition(confirm -> Sent)]
            #[transition(fail -> Failed)]
            Sending,
            #[state(since = "sent_at", timeout = "50m")]
            #[transition(reopen -> Pending)]
            Sent,
            #[transition(retry -> Pending)]
            Failed,
            #[transition(restore -> Pending)]
            Cancelled,
        }
    };
}

cycle!(
    /// Without history.
    Plain
);
cycle!(
    /// With a history table.
    Logged, history = "transfer_history"
);

backend_tests! {
    "stored_plain" => plain_without_ddl,
    "stored_plain_ddl" => plain_with_ddl,
    "stored_logged_ddl" => logged_with_ddl,
    "stored_logged_bare_notes" => logged_without_notes,
}

/// Where a transition is applied.
#[derive(Debug, Clone, Copy)]
enum On {
    Pool,
    Connection,
    Tx,
    Savepoint,
}

const ON: [On; 4] = [On::Pool, On::Connection, On::Tx, On::Savepoint];

/// Rows of the matrix: 1..=8 for the single-row paths (two per executor),
/// the rest for claims, batches and takeovers.
const ROWS: i64 = 16;

/// The wins seen so far, by effect key: no key may come twice.
struct Seen(Mutex<HashSet<String>>);

impl Seen {
    fn new() -> Self {
        Seen(Mutex::new(HashSet::new()))
    }

    fn key(&self, key: &str, path: &str) {
        let fresh = self.0.lock().unwrap().insert(key.to_owned());
        assert!(fresh, "{path}: effect key {key} was handed out before");
    }
}

/// The statements that move `sent_at` an hour back, as if the rows had
/// sat in `sent` that long.
fn backdate_sent(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "UPDATE transfers SET sent_at = sent_at - INTERVAL '1 hour'",
        Dialect::MySql => "UPDATE transfers SET sent_at = sent_at - INTERVAL 1 HOUR",
        _ => "UPDATE transfers SET sent_at = strftime('%Y-%m-%d %H:%M:%f', sent_at, '-1 hours')",
    }
}

async fn run<DB: TestBackend>(db: &Db<DB>, sql: &'static str) {
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, sql, &[]).await.unwrap();
}

/// Applies `$transition` to row `$id` on `$on` and hands back the
/// committed win (after the transaction's commit for `Tx` and
/// `Savepoint`).
macro_rules! win {
    ($db:expr, $on:expr, $id:expr, $transition:expr) => {{
        let (db, id): (&Db<DB>, i64) = ($db, $id);
        match $on {
            On::Pool => $transition.apply(&db.pool, id).await.unwrap().won(),
            On::Connection => {
                let mut conn = db.pool.acquire().await.unwrap();
                $transition.apply(&mut conn, id).await.unwrap().won()
            }
            On::Tx => {
                let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
                let outcome = $transition.apply(&mut tx, id).await.unwrap();
                tx.commit(outcome.won()).await.unwrap()
            }
            On::Savepoint => {
                let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
                let mut savepoint = tx.savepoint().await.unwrap();
                let outcome = $transition.apply(&mut savepoint, id).await.unwrap();
                let staged = savepoint.release(outcome.won()).await.unwrap();
                tx.commit(staged).await.unwrap()
            }
        }
        .unwrap_or_else(|| panic!("{:?}: row {id} did not move", $on))
    }};
}

/// The matrix over one machine (`$machine`), each transition wrapped by
/// `$note` (a note on a machine with history).
macro_rules! matrix {
    ($name:ident, $machine:ident, |$t:ident| $note:expr, $ddl:expr) => {
        async fn $name<DB: TestBackend + Batched>(db: Db<DB>)
        where
            i64: KeyColumn<DB> + ManyKeys<DB, stateguard::key::shape::One>,
            $machine: stateguard::bounds::FollowUpValues<DB>,
        {
            db.transfers(ROWS).await;
            if $ddl {
                let mut conn = db.pool.acquire().await.unwrap();
                for statement in stateguard::ddl::generate::<$machine>(DB::DIALECT).up() {
                    DB::execute(&mut conn, statement, &[]).await.unwrap();
                }
            }
            let db = &db;
            let seen = Seen::new();
            // The win's occurrence is the row's version, read back with
            // plain SQL, and its effect key is new.
            let check = |won: &Won<$machine, i64>, stored: (String, i64), path: &str| {
                assert_eq!(
                    (won.state().as_str(), won.occurrence()),
                    (stored.0.as_str(), stored.1),
                    "{path}: the win's occurrence is not the stored version"
                );
                seen.key(&won.effect_key(), path);
            };
            // A finish under the win's lease: `Done`, at the stored version.
            let finish = |won: Won<$machine, i64>| async move {
                let id = *won.key();
                let finished = won
                    .finish(&db.pool, |_: Effect<$machine, i64>| async {
                        Verdict::done()
                    })
                    .await
                    .unwrap();
                let stored = db.transfer(id).await;
                assert_eq!(
                    finished,
                    Finished::Done {
                        state: $machine::Sent,
                        occurrence: stored.1
                    },
                    "finish of row {id}: the follow-up's occurrence"
                );
                assert_eq!(stored.0, "sent", "row {id}");
            };
            for pass in 1..=2 {
                for (i, on) in ON.into_iter().enumerate() {
                    let (a, b) = (2 * i as i64 + 1, 2 * i as i64 + 2);
                    let path = format!("pass {pass}, {on:?}");
                    // Out of the machine's flow and back: no lease.
                    let $t = $machine::cancel();
                    let won = win!(db, on, a, $note);
                    check(&won, db.transfer(a).await, &format!("{path}: cancel"));
                    let $t = $machine::restore();
                    let won = win!(db, on, a, $note);
                    check(&won, db.transfer(a).await, &format!("{path}: restore"));
                    let $t = $machine::cancel().expecting(won.occurrence());
                    let won = win!(db, on, a, $note);
                    check(
                        &won,
                        db.transfer(a).await,
                        &format!("{path}: cancel expecting"),
                    );
                    let $t = $machine::restore().expecting(won.occurrence());
                    let won = win!(db, on, a, $note);
                    check(
                        &won,
                        db.transfer(a).await,
                        &format!("{path}: restore expecting"),
                    );
                    // Into the in-flight state, finished, and back.
                    let $t = $machine::start();
                    let won = win!(db, on, b, $note);
                    check(&won, db.transfer(b).await, &format!("{path}: start"));
                    finish(won).await;
                    let $t = $machine::reopen();
                    let won = win!(db, on, b, $note);
                    check(&won, db.transfer(b).await, &format!("{path}: reopen"));
                    let $t = $machine::start().expecting(won.occurrence());
                    let won = win!(db, on, b, $note);
                    check(
                        &won,
                        db.transfer(b).await,
                        &format!("{path}: start expecting"),
                    );
                    finish(won).await;
                    let $t = $machine::reopen();
                    let won = win!(db, on, b, $note);
                    check(&won, db.transfer(b).await, &format!("{path}: reopen again"));
                }
                let path = format!("pass {pass}");
                // Rows 9..=16 in batches and claims: every row is pending.
                let batch: Vec<i64> = (9..=ROWS).collect();
                let $t = $machine::cancel();
                for outcome in $note.apply_many(&db.pool, &batch).await.unwrap() {
                    let won = outcome.won().expect("a pending row is cancelled");
                    let stored = db.transfer(*won.key()).await;
                    check(&won, stored, &format!("{path}: apply_many"));
                }
                let $t = $machine::restore();
                for outcome in $note.apply_many(&db.pool, &batch).await.unwrap() {
                    let won = outcome.won().expect("a cancelled row is restored");
                    let stored = db.transfer(*won.key()).await;
                    check(&won, stored, &format!("{path}: apply_many back"));
                }
                // Claims take the lowest pending keys: every row is
                // pending, so claim them all, and finish each under the
                // lease the claim stamped.
                let $t = $machine::start();
                let claimed = $note.claim::<_, i64>(&db.pool, ROWS as u32).await.unwrap();
                assert_eq!(claimed.len(), ROWS as usize, "{path}: claim");
                for won in claimed {
                    let stored = db.transfer(*won.key()).await;
                    check(&won, stored, &format!("{path}: claim"));
                    finish(won).await;
                }
                // All rows sit in `sent`: an hour ago, by their stamps.
                run(db, backdate_sent(DB::DIALECT)).await;
                let $t = $machine::reopen();
                let swept = $note
                    .claim_older_than::<_, i64>(&db.pool, Duration::from_secs(1800), 8)
                    .await
                    .unwrap();
                let $t = $machine::reopen();
                let timed_out = $note
                    .claim_timed_out::<_, i64>(&db.pool, ROWS as u32)
                    .await
                    .unwrap();
                assert_eq!(
                    (swept.len(), timed_out.len()),
                    (8, ROWS as usize - 8),
                    "{path}"
                );
                for won in swept.iter().chain(&timed_out) {
                    let stored = db.transfer(*won.key()).await;
                    check(
                        won,
                        stored,
                        &format!("{path}: claim_older_than / claim_timed_out"),
                    );
                }
                // Takeovers: rows 9..=12 left in flight by a dead worker,
                // taken over by `claim_expired` on a pool and on a
                // connection; rows 13..=16 by `recover`.
                for id in 9..=ROWS {
                    let $t = $machine::start();
                    let won = win!(db, On::Pool, id, $note);
                    check(&won, db.transfer(id).await, &format!("{path}: start {id}"));
                }
                db.backdate_leases().await;
                let mut taken =
                    stateguard::claim_expired::<_, i64, _>(&db.pool, $machine::Sending, 2)
                        .await
                        .unwrap();
                let mut conn = db.pool.acquire().await.unwrap();
                taken.extend(
                    stateguard::claim_expired::<_, i64, _>(&mut conn, $machine::Sending, 2)
                        .await
                        .unwrap(),
                );
                drop(conn);
                assert_eq!(taken.len(), 4, "{path}: claim_expired");
                for won in taken {
                    let id = *won.key();
                    let stored = db.transfer(id).await;
                    // A takeover runs the same occurrence's effect again:
                    // its key is the original win's.
                    assert_eq!(won.occurrence(), stored.1, "{path}: claim_expired {id}");
                    finish(won).await;
                }
                let effects = Mutex::new(Vec::new());
                let report = stateguard::recover(
                    &db.pool,
                    $machine::Sending,
                    ROWS as u32,
                    |effect: Effect<$machine, i64>| {
                        effects
                            .lock()
                            .unwrap()
                            .push((*effect.key(), effect.occurrence()));
                        async { Verdict::done() }
                    },
                )
                .await
                .unwrap();
                assert_eq!(report.done, 4, "{path}: {report:?}");
                for (id, occurrence) in effects.into_inner().unwrap() {
                    // The effect ran at the occurrence of the win it took
                    // over; the follow-up moved the row on by one.
                    let stored = db.transfer(id).await;
                    assert_eq!(
                        (stored.0.as_str(), occurrence + 1),
                        ("sent", stored.1),
                        "{path}: recover {id}"
                    );
                }
                for id in 9..=ROWS {
                    let $t = $machine::reopen();
                    let won = win!(db, On::Pool, id, $note);
                    check(&won, db.transfer(id).await, &format!("{path}: reopen {id}"));
                }
            }
        }
    };
}

matrix!(plain_without_ddl, Plain, |t| t, false);
matrix!(plain_with_ddl, Plain, |t| t, true);
matrix!(
    logged_with_ddl,
    Logged,
    |t| t.noted(Note::by("matrix").because("a note on every move")),
    true
);
matrix!(logged_without_notes, Logged, |t| t, true);
