//! A pool left pointing at a demoted primary: after a failover, pooled
//! connections opened before it reach a server that only reads
//! (PostgreSQL 25006, MySQL/MariaDB 1792). Each such connection fails at
//! most once: the library closes it, so that the pool opens a fresh one
//! (which, behind the failover's address, reaches the new primary), and a
//! call on a pool tries again on a fresh connection within its deadline.
//!
//! The demoted node is played by the same server: the pool's connections
//! are made read-only for their session (`default_transaction_read_only`,
//! `SET SESSION TRANSACTION READ ONLY`), so that they answer writes as a
//! standby does, while connections opened later write.

use crate::common;
use crate::common::KeyColumn;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Db, TestBackend, TransferStatus};
use sqlx::Pool;
use sqlx::pool::PoolOptions;
use stateguard::bounds::Key;
use stateguard::ddl::Dialect;
use stateguard::{Effect, Error, ErrorKind, Finished, Verdict};

/// Connections per pool.
const POOL: u32 = 4;

/// The statement that makes a session answer writes as a standby does.
fn read_only(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "SET SESSION default_transaction_read_only = on",
        _ => "SET SESSION TRANSACTION READ ONLY",
    }
}

/// A pool of the test's database that counts the connections it opens.
async fn counted_pool<DB: TestBackend>(db: &Db<DB>) -> (Pool<DB>, Arc<AtomicUsize>) {
    let opened = Arc::new(AtomicUsize::new(0));
    let count = opened.clone();
    let pool = PoolOptions::<DB>::new()
        .max_connections(POOL)
        .after_connect(move |_, _| {
            count.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        })
        .connect_with((*db.pool.connect_options()).clone())
        .await
        .unwrap();
    (pool, opened)
}

/// Every connection of `pool` (opening them as needed) now answers writes
/// as a demoted primary: the failover happened under the pool.
async fn demote<DB: TestBackend>(pool: &Pool<DB>) {
    let mut held = Vec::new();
    for _ in 0..POOL {
        held.push(pool.acquire().await.unwrap());
    }
    for conn in &mut held {
        DB::execute(conn, read_only(DB::DIALECT), &[])
            .await
            .unwrap();
    }
}

/// Every connection the pool holds now writes.
async fn all_write<DB: TestBackend>(pool: &Pool<DB>) {
    let mut held = Vec::new();
    for _ in 0..POOL {
        held.push(pool.acquire().await.unwrap());
    }
    for conn in &mut held {
        DB::execute(
            conn,
            "UPDATE transfers SET bank_ref = 'written' WHERE id = 1",
            &[],
        )
        .await
        .expect("a connection the pool kept still only reads");
    }
}

/// Twelve moves through a pool whose every connection reached the demoted
/// node: each lands, each stale connection failed once and was replaced.
async fn a_stale_pool_heals_and_every_move_lands<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.transfers(12).await;
    let (pool, opened) = counted_pool(&db).await;
    demote(&pool).await;
    assert_eq!(opened.load(Ordering::SeqCst), POOL as usize);
    for id in 1..=12_i64 {
        let outcome = TransferStatus::cancel().apply(&pool, id).await;
        assert!(
            outcome.as_ref().is_ok_and(|o| o.is_applied()),
            "transfer {id}: {outcome:?}"
        );
        assert_eq!(db.transfer(id).await.0, "cancelled");
    }
    let opened = opened.load(Ordering::SeqCst);
    assert!(
        opened > POOL as usize && opened <= 2 * POOL as usize,
        "{opened} connections opened: each stale one is replaced once"
    );
    all_write(&pool).await;
}

/// The failover happens while the effect runs: the follow-up meets a stale
/// connection, lands on a fresh one, and the row is finished; recovery,
/// through a pool gone stale again, finds nothing to run again.
async fn a_follow_up_after_a_failover_lands<DB: TestBackend>(db: Db<DB>)
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
    TransferStatus: stateguard::bounds::FollowUpValues<DB>,
{
    db.transfers(1).await;
    let (pool, _) = counted_pool(&db).await;
    let effects = AtomicUsize::new(0);
    let won = TransferStatus::start()
        .apply(&pool, 1_i64)
        .await
        .unwrap()
        .won()
        .expect("pending");
    let finished = won
        .finish(&pool, |_: Effect<TransferStatus, i64>| async {
            effects.fetch_add(1, Ordering::SeqCst);
            demote(&pool).await;
            Verdict::done()
        })
        .await
        .map_err(Error::from);
    assert_eq!(
        finished.unwrap(),
        Finished::Done {
            state: TransferStatus::Sent,
            occurrence: 2
        }
    );
    db.backdate_leases().await;
    // Recovery meets a pool whose every connection is stale: its listing
    // (PostgreSQL's takeover) wrote nothing there, and lands on a fresh one.
    demote(&pool).await;
    let report = stateguard::recover(
        &pool,
        TransferStatus::Sending,
        10,
        |_: Effect<TransferStatus, i64>| async {
            effects.fetch_add(1, Ordering::SeqCst);
            Verdict::done()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.claimed, 0, "{report:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 1, "the effect ran again");
    assert_eq!(db.transfer(1).await, ("sent".to_owned(), 2));
}

/// On a connection of the caller's own, nothing is retried or closed: the
/// error says the server only reads, that nothing was written, and that a
/// later call may succeed.
async fn a_read_only_connection_is_a_transient_error<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
{
    db.transfers(1).await;
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, read_only(DB::DIALECT), &[])
        .await
        .unwrap();
    let error = TransferStatus::cancel()
        .apply(&mut conn, 1_i64)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::ReadOnly { .. }), "{error:?}");
    assert_eq!(error.kind(), ErrorKind::Transient, "{error:?}");
    assert!(error.is_transient() && !error.is_outcome_unknown());
    assert!(error.to_string().contains("read-only server"), "{error}");
    assert_eq!(db.transfer(1).await.0, "pending");
}

mod postgres {
    #[tokio::test]
    async fn a_stale_pool_heals_and_every_move_lands() {
        let Some(db) = crate::open!(Postgres, "ro_pool") else {
            return;
        };
        super::a_stale_pool_heals_and_every_move_lands(db).await;
    }

    #[tokio::test]
    async fn a_follow_up_after_a_failover_lands() {
        let Some(db) = crate::open!(Postgres, "ro_follow_up") else {
            return;
        };
        super::a_follow_up_after_a_failover_lands(db).await;
    }

    #[tokio::test]
    async fn a_read_only_connection_is_a_transient_error() {
        let Some(db) = crate::open!(Postgres, "ro_connection") else {
            return;
        };
        super::a_read_only_connection_is_a_transient_error(db).await;
    }
}

mod mysql {
    #[tokio::test]
    async fn a_stale_pool_heals_and_every_move_lands() {
        let Some(db) = crate::open!(Mysql, "ro_pool") else {
            return;
        };
        super::a_stale_pool_heals_and_every_move_lands(db).await;
    }

    #[tokio::test]
    async fn a_follow_up_after_a_failover_lands() {
        let Some(db) = crate::open!(Mysql, "ro_follow_up") else {
            return;
        };
        super::a_follow_up_after_a_failover_lands(db).await;
    }

    #[tokio::test]
    async fn a_read_only_connection_is_a_transient_error() {
        let Some(db) = crate::open!(Mysql, "ro_connection") else {
            return;
        };
        super::a_read_only_connection_is_a_transient_error(db).await;
    }
}
