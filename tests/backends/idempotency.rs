//! Exactly once at the front doors: idempotency keys (`begin`, `complete`,
//! replay, 409, 422, leases, pruning) and a consumer's inbox (`receive` in
//! the consumer's transaction), on every backend.

use crate::common;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use common::{Bind, Db, PayoutStatus, TestBackend};
use sqlx::Pool;
use stateguard::bounds::Key;
use stateguard::idempotency::{self, Begun, Request, Work};
use stateguard::inbox::{self, Received};
use stateguard::{Error, Tx};
use tokio::sync::Barrier;

backend_tests! {
    impl Tests {
        "idem_replay" => a_completed_key_replays_and_refuses_other_parameters,
        "idem_lease" => a_running_key_is_busy_until_its_lease_runs_out,
        "idem_begin_tx" => begin_tx_hands_over_the_transaction_with_a_new_key,
        "idem_begin_tx_dead" => begin_tx_takes_no_dead_connection,
        "idem_begin_tx_busy" => begin_tx_on_a_busy_pool_serves_every_request (flavor = "multi_thread", worker_threads = 4),
        "idem_race" => racing_requests_create_one_payout (flavor = "multi_thread", worker_threads = 4),
        "idem_bad_input" => bad_keys_are_refused_before_anything_is_written,
        "idem_prune" => pruning_removes_only_old_unheld_keys_in_batches,
        "inbox_once" => a_message_is_received_once_and_a_rollback_did_not_receive,
        "inbox_storm" => racing_deliveries_apply_once (flavor = "multi_thread", worker_threads = 4),
        "inbox_prune" => inbox_pruning_removes_only_old_messages_in_batches,
    }
}

/// The store's and the inbox's tables, from their DDL.
async fn tables<DB: TestBackend>(db: &Db<DB>) {
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in idempotency::ddl(DB::DIALECT)
        .iter()
        .chain(inbox::ddl(DB::DIALECT))
    {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

async fn count<DB: TestBackend>(db: &Db<DB>, sql: &'static str) -> i64 {
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

const KEYS: &str = "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_idempotency";
const KEYS_MYSQL: &str = "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_idempotency";
const PAYOUTS: &str = "SELECT CAST(COUNT(*) AS BIGINT) FROM payouts";
const PAYOUTS_MYSQL: &str = "SELECT CAST(COUNT(*) AS SIGNED) FROM payouts";

fn keys_sql<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        stateguard::ddl::Dialect::MySql => KEYS_MYSQL,
        _ => KEYS,
    }
}

fn payouts_sql<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        stateguard::ddl::Dialect::MySql => PAYOUTS_MYSQL,
        _ => PAYOUTS,
    }
}

/// The request's work: a payout row, in `tx`.
async fn insert_payout<DB: TestBackend>(tx: &mut Tx<'_, DB>, id: i64) {
    DB::execute(
        &mut *tx,
        DB::INSERT,
        &[Bind::Int(id), Bind::Text("pending")],
    )
    .await
    .unwrap();
}

/// A pool of `connections` on the test's database, apart from `db.pool`;
/// one that waits 20 s for a connection has deadlocked.
async fn pool_of<DB: TestBackend>(db: &Db<DB>, connections: u32) -> Pool<DB> {
    sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(20))
        .connect_with((*db.pool.connect_options()).clone())
        .await
        .unwrap()
}

fn request(scope: &str, key: &str, fingerprint: &str) -> Request {
    Request::new(scope, key, fingerprint).unwrap()
}

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
pub(crate) struct Tests<DB>(PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    /// New, then the stored response for the same key and parameters, 422 for
    /// other parameters; scopes and exact spellings are other keys.
    pub(crate) async fn a_completed_key_replays_and_refuses_other_parameters(db: Db<DB>) {
        tables(&db).await;
        let first = request("acme:POST /payouts", "k1", "amount=100");
        let Begun::New(ticket) = idempotency::begin(&db.pool, &first, idempotency::DEFAULT_LEASE)
            .await
            .unwrap()
        else {
            panic!("a new key is new");
        };
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        insert_payout(&mut tx, 1).await;
        ticket
            .complete(&mut tx, 201, br#"{"id":1}"#.to_vec())
            .await
            .unwrap();
        tx.commit(()).await.unwrap();

        for _ in 0..2 {
            match idempotency::begin(&db.pool, &first, idempotency::DEFAULT_LEASE)
                .await
                .unwrap()
            {
                Begun::Replay(stored) => {
                    assert_eq!(stored.status(), 201);
                    assert_eq!(stored.body(), br#"{"id":1}"#);
                }
                other => panic!("{other:?}"),
            }
        }
        // Headers stored with the response come back with it, in order,
        // a repeated name included.
        let located = request("acme:POST /payouts", "k-located", "amount=100");
        let Begun::New(ticket) = idempotency::begin(&db.pool, &located, idempotency::DEFAULT_LEASE)
            .await
            .unwrap()
        else {
            panic!("a new key is new");
        };
        let headers = vec![
            ("location".to_owned(), "/payouts/po_1".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
            ("link".to_owned(), "<a>; rel=\"x\", <b>".to_owned()),
            ("link".to_owned(), "<c>".to_owned()),
        ];
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        ticket
            .complete_with_headers(&mut tx, 201, headers.clone(), b"{}".to_vec())
            .await
            .unwrap();
        tx.commit(()).await.unwrap();
        for _ in 0..2 {
            let replay = idempotency::begin_tx(&db.pool, &located, idempotency::DEFAULT_LEASE)
                .await
                .unwrap();
            let Begun::Replay(stored) = replay else {
                panic!("{replay:?}");
            };
            assert_eq!(
                (stored.status(), stored.headers()),
                (201, headers.as_slice())
            );
        }
        let other_amount = request("acme:POST /payouts", "k1", "amount=200");
        assert!(matches!(
            idempotency::begin(&db.pool, &other_amount, idempotency::DEFAULT_LEASE)
                .await
                .unwrap(),
            Begun::Mismatch
        ));
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 1);
        // Another scope, another case, a trailing space: other keys.
        for (scope, key) in [
            ("globex:POST /payouts", "k1"),
            ("acme:POST /payouts", "K1"),
            ("acme:POST /payouts", "k1 "),
        ] {
            let begun = idempotency::begin(
                &db.pool,
                &request(scope, key, "amount=200"),
                idempotency::DEFAULT_LEASE,
            )
            .await
            .unwrap();
            assert!(matches!(begun, Begun::New(_)), "{scope} {key:?}: {begun:?}");
        }
    }

    /// `begin_tx` answers as `begin` does, with the work's transaction in
    /// `New`: the work and the response commit in it; for the other answers
    /// the transaction it began is rolled back and its connection goes back to
    /// the pool (a two-connection pool serves a hundred replays in a row).
    /// When the transaction cannot begin, the claim is released again.
    async fn begin_tx_hands_over_the_transaction_with_a_new_key(db: Db<DB>) {
        tables(&db).await;
        let first = request("acme:POST /payouts", "tx-1", "amount=100");
        let Begun::New(Work { ticket, mut tx }) =
            idempotency::begin_tx(&db.pool, &first, idempotency::DEFAULT_LEASE)
                .await
                .unwrap()
        else {
            panic!("a new key is new");
        };
        insert_payout(&mut tx, 1).await;
        // Running: another request is told so at once, and writes nothing.
        let busy = idempotency::begin_tx(&db.pool, &first, idempotency::DEFAULT_LEASE)
            .await
            .unwrap();
        assert!(matches!(busy, Begun::InProgress), "{busy:?}");
        ticket
            .complete(&mut tx, 201, br#"{"id":1}"#.to_vec())
            .await
            .unwrap();
        tx.commit(()).await.unwrap();
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 1);

        let two = pool_of(&db, 2).await;
        for _ in 0..100 {
            match idempotency::begin_tx(&two, &first, idempotency::DEFAULT_LEASE)
                .await
                .unwrap()
            {
                Begun::Replay(stored) => {
                    assert_eq!(stored.status(), 201);
                    assert_eq!(stored.body(), br#"{"id":1}"#);
                }
                other => panic!("{other:?}"),
            }
        }
        let other_amount = request("acme:POST /payouts", "tx-1", "amount=200");
        let mismatch = idempotency::begin_tx(&two, &other_amount, idempotency::DEFAULT_LEASE)
            .await
            .unwrap();
        assert!(matches!(mismatch, Begun::Mismatch), "{mismatch:?}");
        // With the custom BEGIN (SQLite: `BEGIN IMMEDIATE`, which a claim
        // racing it would wait for).
        let second = request("acme:POST /payouts", "tx-2", "amount=100");
        let Begun::New(Work { ticket, mut tx }) =
            idempotency::begin_tx_with(&two, &second, idempotency::DEFAULT_LEASE, DB::BEGIN_WRITE)
                .await
                .unwrap()
        else {
            panic!("a new key is new");
        };
        insert_payout(&mut tx, 2).await;
        ticket.complete(&mut tx, 201, b"2".to_vec()).await.unwrap();
        tx.commit(()).await.unwrap();
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 2);

        // A statement that begins no transaction: the error, and the key is
        // free again at once (not 409 for a lease).
        let third = request("acme:POST /payouts", "tx-3", "amount=100");
        let error =
            idempotency::begin_tx_with(&two, &third, idempotency::DEFAULT_LEASE, "SELECT 1")
                .await
                .unwrap_err();
        assert!(matches!(error, Error::Begin { .. }), "{error:?}");
        let again = idempotency::begin(&db.pool, &third, idempotency::DEFAULT_LEASE)
            .await
            .unwrap();
        assert!(matches!(again, Begun::New(_)), "{again:?}");
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 2);
    }

    /// The pool's idle connections die (a server restart, a failover, a
    /// firewall's idle cut): `begin_tx` checks the idle connection it takes for
    /// the claim, as the pool's own `acquire` does, and falls back to one that
    /// works instead of failing the request. (PostgreSQL: the connections'
    /// backends are terminated; MySQL's `KILL` takes no placeholder, and SQLite
    /// has no connection to lose.)
    async fn begin_tx_takes_no_dead_connection(db: Db<DB>) {
        if DB::DIALECT != stateguard::ddl::Dialect::Postgres {
            return;
        }
        tables(&db).await;
        let two = pool_of(&db, 2).await;
        let (mut a, mut b) = (two.acquire().await.unwrap(), two.acquire().await.unwrap());
        let mut pids = Vec::new();
        for conn in [&mut a, &mut b] {
            let (pid,): (i64,) =
                DB::fetch_one(conn, "SELECT CAST(pg_backend_pid() AS BIGINT)", &[])
                    .await
                    .unwrap();
            pids.push(pid);
        }
        drop((a, b));
        while two.num_idle() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut admin = db.pool.acquire().await.unwrap();
        for pid in pids {
            DB::execute(
                &mut admin,
                "SELECT pg_terminate_backend(CAST($1 AS INTEGER))",
                &[Bind::Int(pid)],
            )
            .await
            .unwrap();
        }
        drop(admin);
        let req = request("acme:POST /payouts", "after-restart", "amount=100");
        let begun = idempotency::begin_tx(&two, &req, idempotency::DEFAULT_LEASE)
            .await
            .unwrap();
        let Begun::New(Work { ticket, mut tx }) = begun else {
            panic!("{begun:?}");
        };
        insert_payout(&mut tx, 7).await;
        ticket.complete(&mut tx, 201, Vec::new()).await.unwrap();
        tx.commit(()).await.unwrap();
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 1);
    }

    /// Far more requests than connections, four to a key, each holding its
    /// transaction a while: every `begin_tx` answers, one request per key
    /// creates its payout, the others are told it is running or get its
    /// response. A request that held one connection while it waited for a
    /// second (MySQL's claim of an existing key is two statements) would leave
    /// the pool to requests each holding half of what they need, and time out.
    async fn begin_tx_on_a_busy_pool_serves_every_request(db: Db<DB>) {
        tables(&db).await;
        const REQUESTS: usize = 32;
        const KEYS: usize = 8;
        let pool = pool_of(&db, 3).await;
        let barrier = Arc::new(Barrier::new(REQUESTS));
        let mut tasks = Vec::new();
        for i in 0..REQUESTS {
            let (pool, barrier) = (pool.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let key = format!("busy-{}", i % KEYS);
                let req = request("acme:POST /payouts", &key, "amount=100");
                barrier.wait().await;
                let begun = idempotency::begin_tx_with(
                    &pool,
                    &req,
                    idempotency::DEFAULT_LEASE,
                    DB::BEGIN_WRITE,
                )
                .await
                .unwrap();
                match begun {
                    Begun::New(Work { ticket, mut tx }) => {
                        insert_payout(&mut tx, 1000 + i as i64).await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        ticket.complete(&mut tx, 201, Vec::new()).await.unwrap();
                        tx.commit(()).await.unwrap();
                        (key, true)
                    }
                    Begun::Replay(_) | Begun::InProgress => (key, false),
                    Begun::Mismatch => panic!("{key}: mismatch"),
                }
            }));
        }
        let mut created = std::collections::BTreeMap::<String, usize>::new();
        for task in tasks {
            let (key, new) = task.await.unwrap();
            *created.entry(key).or_default() += usize::from(new);
        }
        assert_eq!(created.len(), KEYS);
        assert!(created.values().all(|&n| n == 1), "{created:?}");
        assert_eq!(count(&db, payouts_sql::<DB>()).await, KEYS as i64);
    }

    /// A running key answers `InProgress` until its lease runs out; then a retry
    /// takes it over, and the first holder can no longer complete: its
    /// transaction can no longer commit, even when the caller tries, and
    /// only the retry's work commits.
    async fn a_running_key_is_busy_until_its_lease_runs_out(db: Db<DB>) {
        tables(&db).await;
        let lease = Duration::from_millis(200);
        let req = request("acme:POST /payouts", "k2", "amount=100");
        let Begun::New(first) = idempotency::begin(&db.pool, &req, lease).await.unwrap() else {
            panic!("new");
        };
        assert!(matches!(
            idempotency::begin(&db.pool, &req, lease).await.unwrap(),
            Begun::InProgress
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Begun::New(second) = idempotency::begin(&db.pool, &req, lease).await.unwrap() else {
            panic!("a key whose lease ran out is taken over");
        };
        // The first holder finishes late: refused, and its work rolls back.
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        insert_payout(&mut tx, 10).await;
        match first.complete(&mut tx, 201, b"late".to_vec()).await {
            Err(Error::IdempotencyLeaseLost { scope, key }) => {
                assert_eq!((scope.as_str(), key.as_str()), ("acme:POST /payouts", "k2"));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(tx.commit(()).await, Err(Error::RolledBack { .. })),
            "work whose response could not be stored does not commit"
        );
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        insert_payout(&mut tx, 11).await;
        second
            .complete(&mut tx, 201, b"payout 11".to_vec())
            .await
            .unwrap();
        tx.commit(()).await.unwrap();
        match idempotency::begin(&db.pool, &req, lease).await.unwrap() {
            Begun::Replay(stored) => assert_eq!(stored.body(), b"payout 11"),
            other => panic!("{other:?}"),
        }
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 1);

        // A released key is new again at once, with no response stored.
        let released = request("acme:POST /payouts", "k3", "amount=100");
        let Begun::New(ticket) = idempotency::begin(&db.pool, &released, lease)
            .await
            .unwrap()
        else {
            panic!("new");
        };
        ticket.release(&db.pool).await.unwrap();
        assert!(matches!(
            idempotency::begin(&db.pool, &released, lease)
                .await
                .unwrap(),
            Begun::New(_)
        ));
    }

    /// 32 requests with one key at once: one creates the payout, the others
    /// are told it is in progress or get its response; afterwards every retry
    /// is the replay.
    pub(crate) async fn racing_requests_create_one_payout(db: Db<DB>) {
        tables(&db).await;
        let barrier = Arc::new(Barrier::new(RACERS));
        let mut tasks = Vec::new();
        for i in 0..RACERS {
            let pool = db.pool.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                let req = request("acme:POST /payouts", "race", "amount=100");
                barrier.wait().await;
                // Half claim alone and begin their own transaction, half
                // claim alongside its `BEGIN`.
                let begun = match i % 2 {
                    0 => match idempotency::begin(&pool, &req, Duration::from_secs(30))
                        .await
                        .unwrap()
                    {
                        Begun::New(ticket) => {
                            let tx = Tx::begin_with(&pool, DB::BEGIN_WRITE).await.unwrap();
                            Begun::New(Work { ticket, tx })
                        }
                        Begun::Replay(stored) => Begun::Replay(stored),
                        Begun::InProgress => Begun::InProgress,
                        Begun::Mismatch => Begun::Mismatch,
                    },
                    _ => idempotency::begin_tx_with(
                        &pool,
                        &req,
                        Duration::from_secs(30),
                        DB::BEGIN_WRITE,
                    )
                    .await
                    .unwrap(),
                };
                match begun {
                    Begun::New(Work { ticket, mut tx }) => {
                        let id = 100 + i as i64;
                        insert_payout(&mut tx, id).await;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let body = format!("payout {id}").into_bytes();
                        ticket.complete(&mut tx, 201, body.clone()).await.unwrap();
                        tx.commit(()).await.unwrap();
                        ("new", body)
                    }
                    Begun::Replay(stored) => ("replay", stored.into_body()),
                    Begun::InProgress => ("in progress", Vec::new()),
                    Begun::Mismatch => ("mismatch", Vec::new()),
                }
            }));
        }
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        let winners: Vec<&Vec<u8>> = answers
            .iter()
            .filter(|(kind, _)| *kind == "new")
            .map(|(_, body)| body)
            .collect();
        assert_eq!(winners.len(), 1, "{answers:?}");
        let body = winners[0].clone();
        for (kind, answer) in &answers {
            match *kind {
                "new" | "in progress" => {}
                "replay" => assert_eq!(answer, &body),
                other => panic!("{other}"),
            }
        }
        assert_eq!(count(&db, payouts_sql::<DB>()).await, 1);
        for _ in 0..RACERS {
            let req = request("acme:POST /payouts", "race", "amount=100");
            match idempotency::begin(&db.pool, &req, Duration::from_secs(30))
                .await
                .unwrap()
            {
                Begun::Replay(stored) => assert_eq!(stored.into_body(), body),
                other => panic!("{other:?}"),
            }
        }
    }

    /// Empty and over-long keys, scopes, fingerprints, consumers and message
    /// ids are `BadKey`, and nothing is written; 255 characters (of four bytes
    /// each in UTF-8) are taken.
    async fn bad_keys_are_refused_before_anything_is_written(db: Db<DB>) {
        tables(&db).await;
        let long = "k".repeat(256);
        for (scope, key, fingerprint, field, length) in [
            ("s", "", "f", "idempotency key", 0),
            ("s", long.as_str(), "f", "idempotency key", 256),
            ("", "k", "f", "idempotency scope", 0),
            ("s", "k", "", "request fingerprint", 0),
        ] {
            match Request::new(scope, key, fingerprint) {
                Err(Error::BadKey {
                    field: f,
                    length: l,
                }) => assert_eq!((f, l), (field, length)),
                other => panic!("{other:?}"),
            }
        }
        let widest = "😀".repeat(255);
        let req = Request::new("s", widest.as_str(), "f").unwrap();
        assert!(matches!(
            idempotency::begin(&db.pool, &req, idempotency::DEFAULT_LEASE)
                .await
                .unwrap(),
            Begun::New(_)
        ));
        assert!(matches!(
            idempotency::begin(&db.pool, &req, idempotency::DEFAULT_LEASE)
                .await
                .unwrap(),
            Begun::InProgress
        ));
        assert_eq!(count(&db, keys_sql::<DB>()).await, 1);

        let mut tx = Tx::begin(&db.pool).await.unwrap();
        for (consumer, message, field) in [
            ("", "m", "inbox consumer"),
            ("bank", "", "message id"),
            ("bank", long.as_str(), "message id"),
        ] {
            match inbox::receive(&mut tx, consumer, message).await {
                Err(Error::BadKey { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{other:?}"),
            }
        }
        tx.commit(()).await.unwrap();
        assert_eq!(count(&db, inbox_sql::<DB>()).await, 0);
    }

    /// Three old completed keys, an old key still held by a live lease, and
    /// two fresh keys: pruning with a limit of 2 removes the old completed
    /// ones, two at a time, and nothing else.
    async fn pruning_removes_only_old_unheld_keys_in_batches(db: Db<DB>) {
        tables(&db).await;
        for key in ["old-1", "old-2", "old-3", "new-1", "new-2", "old-held"] {
            let req = request("acme", key, "f");
            let Begun::New(ticket) = idempotency::begin(&db.pool, &req, Duration::from_secs(3600))
                .await
                .unwrap()
            else {
                panic!("new");
            };
            if key != "old-held" {
                let mut tx = Tx::begin(&db.pool).await.unwrap();
                ticket.complete(&mut tx, 200, Vec::new()).await.unwrap();
                tx.commit(()).await.unwrap();
            } else {
                drop(ticket);
            }
        }
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, backdate::<DB>("keys"), &[])
            .await
            .unwrap();
        drop(conn);
        let window = idempotency::DEFAULT_WINDOW;
        assert_eq!(idempotency::prune(&db.pool, window, 2).await.unwrap(), 2);
        assert_eq!(idempotency::prune(&db.pool, window, 2).await.unwrap(), 1);
        assert_eq!(idempotency::prune(&db.pool, window, 2).await.unwrap(), 0);
        assert_eq!(count(&db, keys_sql::<DB>()).await, 3);
        for key in ["new-1", "new-2"] {
            assert!(matches!(
                idempotency::begin(&db.pool, &request("acme", key, "f"), window)
                    .await
                    .unwrap(),
                Begun::Replay(_)
            ));
        }
        assert!(matches!(
            idempotency::begin(&db.pool, &request("acme", "old-held", "f"), window)
                .await
                .unwrap(),
            Begun::InProgress
        ));
    }

    /// First, then duplicate once committed; a rolled-back receipt did not
    /// receive; consumers and exact spellings are other messages.
    pub(crate) async fn a_message_is_received_once_and_a_rollback_did_not_receive(db: Db<DB>) {
        tables(&db).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        assert_eq!(
            inbox::receive(&mut tx, "bank", "evt_1").await.unwrap(),
            Received::First
        );
        tx.commit(()).await.unwrap();
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        assert_eq!(
            inbox::receive(&mut tx, "bank", "evt_1").await.unwrap(),
            Received::Duplicate
        );
        for (consumer, message) in [("ledger", "evt_1"), ("bank", "EVT_1"), ("bank", "evt_1 ")] {
            assert_eq!(
                inbox::receive(&mut tx, consumer, message).await.unwrap(),
                Received::First,
                "{consumer} {message:?}"
            );
        }
        tx.commit(()).await.unwrap();

        let mut tx = Tx::begin(&db.pool).await.unwrap();
        assert_eq!(
            inbox::receive(&mut tx, "bank", "evt_2").await.unwrap(),
            Received::First
        );
        drop(tx); // rolled back: not received
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        assert_eq!(
            inbox::receive(&mut tx, "bank", "evt_2").await.unwrap(),
            Received::First
        );
        tx.commit(()).await.unwrap();
        assert_eq!(count(&db, inbox_sql::<DB>()).await, 5);
    }

    /// One message delivered 20 times at once, each delivery in its own
    /// transaction that records the message, then counts an attempt and starts
    /// the payout: one delivery does both, with one committed win.
    pub(crate) async fn racing_deliveries_apply_once(db: Db<DB>) {
        tables(&db).await;
        db.seed(1).await;
        let barrier = Arc::new(Barrier::new(DELIVERIES));
        let mut tasks = Vec::new();
        for _ in 0..DELIVERIES {
            let pool = db.pool.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let mut tx = Tx::begin_with(&pool, DB::BEGIN_WRITE).await.unwrap();
                match inbox::receive(&mut tx, "bank", "evt_paid_1").await.unwrap() {
                    Received::Duplicate => 0,
                    Received::First => {
                        // An effect that nothing else dedups: one more attempt.
                        DB::execute(
                            &mut *tx,
                            "UPDATE payouts SET attempts = attempts + 1 WHERE id = 1",
                            &[],
                        )
                        .await
                        .unwrap();
                        let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap();
                        let won = tx.commit(outcome.won()).await.unwrap();
                        usize::from(won.is_some())
                    }
                }
            }));
        }
        let mut wins = 0;
        for task in tasks {
            wins += task.await.unwrap();
        }
        assert_eq!(wins, 1);
        // The first delivery's own increment and `start`'s: no other delivery
        // did anything.
        assert_eq!(db.total_attempts().await, 2);
        assert_eq!(db.status(1).await.as_deref(), Some("sending"));
        assert_eq!(count(&db, inbox_sql::<DB>()).await, 1);
    }

    /// Three old messages and two fresh: pruning with a limit of 2 removes the
    /// old ones, two at a time.
    async fn inbox_pruning_removes_only_old_messages_in_batches(db: Db<DB>) {
        tables(&db).await;
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        for message in ["old-1", "old-2", "old-3", "new-1", "new-2"] {
            assert_eq!(
                inbox::receive(&mut tx, "bank", message).await.unwrap(),
                Received::First
            );
        }
        tx.commit(()).await.unwrap();
        let mut conn = db.pool.acquire().await.unwrap();
        DB::execute(&mut conn, backdate::<DB>("inbox"), &[])
            .await
            .unwrap();
        drop(conn);
        let window = idempotency::DEFAULT_WINDOW;
        assert_eq!(inbox::prune(&db.pool, window, 2).await.unwrap(), 2);
        assert_eq!(inbox::prune(&db.pool, window, 2).await.unwrap(), 1);
        assert_eq!(inbox::prune(&db.pool, window, 2).await.unwrap(), 0);
        let mut tx = Tx::begin(&db.pool).await.unwrap();
        for (message, received) in [
            ("old-1", Received::First),
            ("new-1", Received::Duplicate),
            ("new-2", Received::Duplicate),
        ] {
            assert_eq!(
                inbox::receive(&mut tx, "bank", message).await.unwrap(),
                received
            );
        }
        drop(tx);
    }
}

const RACERS: usize = 32;

/// `created_at` of the keys (`table` "keys") or `received_at` of the
/// messages named `old…`, two days ago.
fn backdate<DB: TestBackend>(table: &str) -> &'static str {
    use stateguard::ddl::Dialect::*;
    match (DB::DIALECT, table) {
        (Postgres, "keys") => {
            "UPDATE stateguard_idempotency SET created_at = statement_timestamp() - \
             INTERVAL '2 days' WHERE idem_key LIKE 'old%'"
        }
        (Sqlite, "keys") => {
            "UPDATE stateguard_idempotency SET created_at = strftime('%Y-%m-%d %H:%M:%f', \
             'now', '-2 days') WHERE idem_key LIKE 'old%'"
        }
        (MySql, "keys") => {
            "UPDATE stateguard_idempotency SET created_at = UTC_TIMESTAMP(3) - INTERVAL 2 DAY \
             WHERE idem_key LIKE 'old%'"
        }
        (Postgres, _) => {
            "UPDATE stateguard_inbox SET received_at = statement_timestamp() - \
             INTERVAL '2 days' WHERE message_id LIKE 'old%'"
        }
        (Sqlite, _) => {
            "UPDATE stateguard_inbox SET received_at = strftime('%Y-%m-%d %H:%M:%f', 'now', \
             '-2 days') WHERE message_id LIKE 'old%'"
        }
        (MySql, _) => {
            "UPDATE stateguard_inbox SET received_at = UTC_TIMESTAMP(3) - INTERVAL 2 DAY \
             WHERE message_id LIKE 'old%'"
        }
        (other, _) => panic!("no backdating statement for {other}"),
    }
}

const INBOX: &str = "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_inbox";
const INBOX_MYSQL: &str = "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_inbox";

fn inbox_sql<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        stateguard::ddl::Dialect::MySql => INBOX_MYSQL,
        _ => INBOX,
    }
}

const DELIVERIES: usize = 20;
