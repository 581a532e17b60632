//! The fault matrix of the fixed-table stores (`faults.rs` holds the
//! machines' calls and the matrix itself): the idempotency store's
//! `begin_tx` and the completion of a key, the inbox's `receive`, the
//! outbox's `enqueue` and the relay's pass, and the three prunes. Each case
//! reads the store's own table with plain SQL, key `n` of `KEYS` naming
//! the row `mn`, and holds every run to G10: rows changed ⇒ each came back
//! as a win (a key claimed or completed, a message received, written,
//! taken or removed), or the error says the outcome is unknown.
//!
//! A call in the caller's transaction runs with its `BEGIN` and `COMMIT`,
//! and after its error the transaction is committed all the same, as a
//! careless caller would: what the error hid must not commit.

use crate::common;
use crate::faults::{
    DEADLINE, Failure, KEYS, Reported, Rows, idempotency_row, idempotency_table, matrix, request,
};

use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Bind, Db, TestBackend};
use stateguard::ddl::Dialect;
use stateguard::idempotency::{self, Begun, Request, Ticket, Work};
use stateguard::inbox::{self, Received};
use stateguard::outbox::{self, Enqueued, Message, Published, Publisher, Relay};
use stateguard::{Error, Tx};

backend_tests! {
    impl Tests {
        "faults_st_begin_tx" => idempotency_begin_tx,
        "faults_st_complete" => idempotency_complete,
        "faults_st_receive" => inbox_receive,
        "faults_st_enqueue" => outbox_enqueue,
        "faults_st_relay" => relay_pass,
        "faults_st_prunes" => prunes,
    }
}

/// The consumer, scope and topic of every row the cases write.
const SCOPE: &str = "faults";

pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB> {
    /// `begin_tx`: the claim, and the work's `BEGIN` beside it (after it on
    /// SQLite); a `BEGIN` that fails frees the new key again. `New` is key
    /// 1's win, whose claim stays when the work's transaction is dropped.
    pub(crate) async fn idempotency_begin_tx(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let begun = idempotency::begin_tx(&db.pool, &request(), idempotency::DEFAULT_LEASE)
                .within(DEADLINE)
                .await?;
            Ok(match begun {
                Begun::New(Work { ticket, tx }) => {
                    drop((ticket, tx));
                    BTreeSet::from([1])
                }
                _ => BTreeSet::new(),
            })
        };
        matrix(
            &db,
            "idempotency begin_tx",
            idempotency_table::<DB>,
            call,
            idempotency_row::<DB>,
        )
        .await;
    }

    /// `Ticket::complete` in the work's transaction, and its commit: the
    /// key is done (key 1's win) once both went through. The key is
    /// claimed by `reset`, before the statements count.
    pub(crate) async fn idempotency_complete(db: Db<DB>) {
        let slot: Mutex<Option<Ticket>> = Mutex::new(None);
        let reset = async |db: &Db<DB>| {
            idempotency_table(db).await;
            let begun = idempotency::begin(&db.pool, &request(), idempotency::DEFAULT_LEASE).await;
            match begun {
                Ok(Begun::New(ticket)) => *slot.lock().unwrap() = Some(ticket),
                other => panic!("a new key is New: {other:?}"),
            }
        };
        let call = async |db: &Db<DB>| -> Reported {
            let ticket = slot.lock().unwrap().take().expect("the key's ticket");
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE)
                .within(DEADLINE)
                .await?;
            let completed = ticket
                .complete(&mut tx, 201, b"{}".to_vec())
                .within(DEADLINE)
                .await;
            commit_anyway(tx, completed.map(|()| BTreeSet::from([1]))).await
        };
        matrix(
            &db,
            "idempotency complete",
            reset,
            call,
            idempotency_row::<DB>,
        )
        .await;
    }

    /// `inbox::receive` of message `m1` in the consumer's transaction, and
    /// its commit: `First` is key 1's win.
    pub(crate) async fn inbox_receive(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE)
                .within(DEADLINE)
                .await?;
            let received = inbox::receive(&mut tx, SCOPE, "m1").within(DEADLINE).await;
            let first = received.map(|received| match received {
                Received::First => BTreeSet::from([1]),
                Received::Duplicate => BTreeSet::new(),
            });
            commit_anyway(tx, first).await
        };
        matrix(
            &db,
            "inbox receive",
            inbox_table::<DB>,
            call,
            inbox_rows::<DB>,
        )
        .await;
    }

    /// `outbox::enqueue` of message `m1` in the work's transaction, and
    /// its commit: `New` is key 1's win.
    pub(crate) async fn outbox_enqueue(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE)
                .within(DEADLINE)
                .await?;
            let enqueued = outbox::enqueue(&mut tx, "o1", message("m1"))
                .within(DEADLINE)
                .await;
            let new = enqueued.map(|enqueued| match enqueued {
                Enqueued::New => BTreeSet::from([1]),
                Enqueued::Duplicate => BTreeSet::new(),
            });
            commit_anyway(tx, new).await
        };
        matrix(
            &db,
            "outbox enqueue",
            outbox_table::<DB>,
            call,
            outbox_rows::<DB>,
        )
        .await;
    }

    /// A relay pass over messages `m1`–`m3`, each of its own order key,
    /// whose publisher refuses `m2`: the claim (and MySQL's read of what
    /// it claimed), `m2` marked refused, then `m1` and `m3` marked
    /// published. Every message the pass took, and only those, is its win:
    /// the publisher saw it, and the pass counts it.
    pub(crate) async fn relay_pass(db: Db<DB>) {
        let call = async |db: &Db<DB>| -> Reported {
            let seen = Arc::new(Mutex::new(BTreeSet::new()));
            let relay = Relay::new(RefuseM2(seen.clone())).within(DEADLINE);
            let pass = relay.pass(&db.pool).await?;
            let seen = seen.lock().unwrap().clone();
            assert_eq!(pass.taken(), seen.len(), "{pass:?} took what it published");
            Ok(seen)
        };
        matrix(&db, "relay pass", waiting::<DB>, call, outbox_rows::<DB>).await;
    }

    /// The prunes of idempotency keys, inbox entries and published outbox
    /// messages, each of rows `m1`–`m3`, all old enough: what a prune
    /// reports removed, oldest first, is its win.
    pub(crate) async fn prunes(db: Db<DB>) {
        let reset = async |db: &Db<DB>| {
            idempotency_table(db).await;
            for key in 1..=3 {
                let request = Request::new(SCOPE, format!("m{key}"), "fingerprint").unwrap();
                let begun = idempotency::begin(&db.pool, &request, Duration::from_millis(1)).await;
                assert!(matches!(begun, Ok(Begun::New(_))), "{begun:?}");
            }
            aged().await;
        };
        let call = async |db: &Db<DB>| -> Reported {
            let removed = idempotency::prune(&db.pool, Duration::ZERO, 10)
                .within(DEADLINE)
                .await?;
            Ok((1..=i64::try_from(removed).unwrap()).collect())
        };
        matrix(
            &db,
            "idempotency prune",
            reset,
            call,
            idempotency_rows::<DB>,
        )
        .await;

        let reset = async |db: &Db<DB>| {
            inbox_table(db).await;
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
            for key in 1..=3 {
                let id = format!("m{key}");
                let received = inbox::receive(&mut tx, SCOPE, &id).await.unwrap();
                assert_eq!(received, Received::First);
            }
            tx.commit(()).await.unwrap();
            aged().await;
        };
        let call = async |db: &Db<DB>| -> Reported {
            let removed = inbox::prune(&db.pool, Duration::ZERO, 10)
                .within(DEADLINE)
                .await?;
            Ok((1..=i64::try_from(removed).unwrap()).collect())
        };
        matrix(&db, "inbox prune", reset, call, inbox_rows::<DB>).await;

        let reset = async |db: &Db<DB>| {
            waiting(db).await;
            let seen = Arc::new(Mutex::new(BTreeSet::new()));
            let pass = Relay::new(Accept(seen)).pass(&db.pool).await.unwrap();
            assert_eq!(pass.published(), 3, "{pass:?}");
            aged().await;
        };
        let call = async |db: &Db<DB>| -> Reported {
            let removed = outbox::prune(&db.pool, Duration::ZERO, 10)
                .within(DEADLINE)
                .await?;
            Ok((1..=i64::try_from(removed).unwrap()).collect())
        };
        matrix(&db, "outbox prune", reset, call, outbox_rows::<DB>).await;
    }
}

/// Commits `tx` after a call in it, and reports the call's wins; after
/// the call's error, commits all the same, as a careless caller would,
/// and reports the error: what the error hid must not commit.
async fn commit_anyway<DB: TestBackend>(
    tx: Tx<'_, DB>,
    done: Result<BTreeSet<i64>, Error>,
) -> Reported {
    match done {
        Ok(keys) => {
            tx.commit(()).await?;
            Ok(keys)
        }
        Err(error) => {
            let _ = tx.commit(()).await;
            Err(Failure::of(&error))
        }
    }
}

/// A publisher that records each message it is handed (by key) and
/// refuses `m2`.
struct RefuseM2(Arc<Mutex<BTreeSet<i64>>>);

impl Publisher for RefuseM2 {
    type Error = std::io::Error;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        let key = message.id.trim_start_matches('m').parse().unwrap();
        self.0.lock().unwrap().insert(key);
        match key {
            2 => Err(std::io::Error::other("refused")),
            _ => Ok(Published::new(false)),
        }
    }
}

/// A publisher that records each message it is handed (by key) and
/// accepts it.
struct Accept(Arc<Mutex<BTreeSet<i64>>>);

impl Publisher for Accept {
    type Error = std::convert::Infallible;

    async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
        let key = message.id.trim_start_matches('m').parse().unwrap();
        self.0.lock().unwrap().insert(key);
        Ok(Published::new(false))
    }
}

fn message(id: &str) -> Message<'_> {
    Message {
        id,
        topic: SCOPE,
        payload: b"{}",
    }
}

/// Lets the rows just written grow older than a window of zero, on the
/// database's clock, which counts milliseconds.
async fn aged() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// `table` made on first use from `ddl`, emptied by `delete`.
async fn fresh<DB: TestBackend>(db: &Db<DB>, delete: &'static str, ddl: &[&'static str]) {
    let mut conn = db.pool.acquire().await.unwrap();
    if DB::execute(&mut conn, delete, &[]).await.is_err() {
        for statement in ddl {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
    }
}

async fn inbox_table<DB: TestBackend>(db: &Db<DB>) {
    fresh(db, "DELETE FROM stateguard_inbox", inbox::ddl(DB::DIALECT)).await;
}

async fn outbox_table<DB: TestBackend>(db: &Db<DB>) {
    fresh(
        db,
        "DELETE FROM stateguard_outbox",
        outbox::ddl(DB::DIALECT),
    )
    .await;
}

/// The outbox with messages `m1`–`m3` waiting, each of its own order key.
async fn waiting<DB: TestBackend>(db: &Db<DB>) {
    outbox_table(db).await;
    let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
    for key in 1..=3 {
        let (id, order) = (format!("m{key}"), format!("o{key}"));
        let enqueued = outbox::enqueue(&mut tx, &order, message(&id)).await;
        assert_eq!(enqueued.unwrap(), Enqueued::New);
    }
    tx.commit(()).await.unwrap();
}

/// Each key's row as `sql` reads it, with its name (`m1`, …) bound.
async fn named<DB: TestBackend>(db: &Db<DB>, sql: &'static str) -> Rows {
    let mut rows = Vec::new();
    for key in KEYS {
        let name = format!("m{key}");
        let mut conn = db.pool.acquire().await.unwrap();
        let row = DB::fetch_optional(&mut conn, sql, &[Bind::Text(&name)]).await;
        rows.push(row.unwrap());
    }
    rows
}

/// Each key's idempotency row: its state and lease.
async fn idempotency_rows<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let sql = match DB::DIALECT {
        Dialect::Postgres => {
            "SELECT state, CAST(lease AS BIGINT) FROM stateguard_idempotency \
             WHERE scope = 'faults' AND idem_key = $1"
        }
        Dialect::Sqlite => {
            "SELECT state, lease FROM stateguard_idempotency \
             WHERE scope = 'faults' AND idem_key = ?1"
        }
        _ => {
            "SELECT state, CAST(lease AS SIGNED) FROM stateguard_idempotency \
             WHERE scope = 'faults' AND idem_key = ?"
        }
    };
    named(db, sql).await
}

/// Whether each key's message was received.
async fn inbox_rows<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let sql = match DB::DIALECT {
        Dialect::Postgres => {
            "SELECT 'received', CAST(0 AS BIGINT) FROM stateguard_inbox \
             WHERE consumer = 'faults' AND message_id = $1"
        }
        Dialect::Sqlite => {
            "SELECT 'received', 0 FROM stateguard_inbox \
             WHERE consumer = 'faults' AND message_id = ?1"
        }
        _ => {
            "SELECT 'received', CAST(0 AS SIGNED) FROM stateguard_inbox \
             WHERE consumer = 'faults' AND message_id = ?"
        }
    };
    named(db, sql).await
}

/// Each key's outbox message: where it stands (waiting, refused or
/// published) and its lease, which each claim moves on.
async fn outbox_rows<DB: TestBackend>(db: &Db<DB>) -> Rows {
    let sql = match DB::DIALECT {
        Dialect::Postgres => {
            "SELECT CASE WHEN published_at IS NOT NULL THEN 'published' \
             WHEN last_error IS NOT NULL THEN 'refused' ELSE 'waiting' END, \
             CAST(lease AS BIGINT) FROM stateguard_outbox WHERE message_id = $1"
        }
        Dialect::Sqlite => {
            "SELECT CASE WHEN published_at IS NOT NULL THEN 'published' \
             WHEN last_error IS NOT NULL THEN 'refused' ELSE 'waiting' END, \
             lease FROM stateguard_outbox WHERE message_id = ?1"
        }
        _ => {
            "SELECT CASE WHEN published_at IS NOT NULL THEN 'published' \
             WHEN last_error IS NOT NULL THEN 'refused' ELSE 'waiting' END, \
             CAST(lease AS SIGNED) FROM stateguard_outbox WHERE message_id = ?"
        }
    };
    named(db, sql).await
}
