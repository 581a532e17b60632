//! Untagged moves on a pool the check found dedicated
//! (`pooler::check(…).untagged_if_dedicated()`): the race of `race.rs`
//! still gives one win and one effect per row; the server prepared the
//! move's untagged text and never its tagged one, in autocommit and in a
//! `Tx` begun on the pool; a move that returns more than its tag keeps it;
//! and a pool checked without the request keeps every tag.

use crate::common;

use sqlx::PgPool;
use stateguard::pooler::{self, Pooling};
use stateguard::{Outcome, StateMachine, Tx};

use common::{PayoutStatus, TransferStatus};

/// The texts of the statements prepared on every connection `pool` can
/// hand out.
async fn prepared(pool: &PgPool) -> Vec<String> {
    let mut held = Vec::new();
    let mut texts = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        let mut conn = pool.acquire().await.expect("acquire");
        let rows: Vec<String> = sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
            .fetch_all(&mut *conn)
            .await
            .expect("pg_prepared_statements");
        texts.extend(rows);
        held.push(conn);
    }
    texts
}

/// `start`'s tagged text and its untagged form: the text up to its
/// ` RETURNING` of the tag.
fn start_texts() -> (&'static str, &'static str) {
    let tagged = PayoutStatus::MACHINE
        .transition("start")
        .expect("start")
        .update_sql()
        .postgres();
    let at = tagged.rfind(" RETURNING CASE WHEN ").expect("a tag column");
    (tagged, &tagged[..at])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dedicated_pool_runs_its_moves_untagged() {
    let Some(db) = crate::open!(Postgres, "untagged") else {
        return;
    };
    let pool = db.pool.clone();
    let pooling = pooler::check(&pool)
        .untagged_if_dedicated()
        .await
        .expect("a direct connection was refused");
    assert!(matches!(pooling, Pooling::Dedicated { .. }), "{pooling:?}");
    // One win and one effect per row, under the race.
    crate::race::race(db).await;
    let (tagged, untagged) = start_texts();
    let texts = prepared(&pool).await;
    assert!(
        texts.iter().any(|text| text == untagged),
        "the untagged move never ran: {texts:#?}"
    );
    assert!(
        !texts.iter().any(|text| text == tagged),
        "the tagged move ran on an untagged pool"
    );
    // In a transaction begun on the pool too, and it commits its win.
    sqlx::query("INSERT INTO payouts (id, status, attempts) VALUES (1000, 'pending', 0)")
        .execute(&pool)
        .await
        .expect("row");
    let mut tx = Tx::begin(&pool).await.expect("begin");
    let outcome = PayoutStatus::start().apply(&mut tx, 1000_i64).await;
    let won = outcome.expect("apply").won().expect("a win");
    let won = tx.commit(won).await.expect("commit");
    assert_eq!(won.state(), PayoutStatus::Sending);
    let again = PayoutStatus::start()
        .apply(&pool, 1000_i64)
        .await
        .expect("apply");
    assert!(
        matches!(again, Outcome::AlreadyInState(PayoutStatus::Sending)),
        "{again:?}"
    );
    assert!(!prepared(&pool).await.iter().any(|text| text == tagged));
    // A move that returns its version keeps its tag, and wins as before.
    for statement in [
        <sqlx::Postgres as common::TestBackend>::CREATE_TRANSFERS,
        <sqlx::Postgres as common::TestBackend>::SEED_TRANSFERS,
    ] {
        let query = sqlx::query(statement);
        let query = match statement.contains("$1") {
            true => query.bind(2_i64),
            false => query,
        };
        query.execute(&pool).await.expect("transfers");
    }
    let cancelled = TransferStatus::cancel()
        .apply(&pool, 1_i64)
        .await
        .expect("apply");
    assert_eq!(cancelled.won().expect("a win").occurrence(), 1);
    let cancel = TransferStatus::MACHINE
        .transition("cancel")
        .expect("cancel")
        .update_sql()
        .postgres();
    assert!(prepared(&pool).await.iter().any(|text| text == cancel));
    pool.close().await;
}

#[tokio::test]
async fn a_pool_checked_without_the_request_keeps_its_tags() {
    let Some(db) = crate::open!(Postgres, "tagged_checked") else {
        return;
    };
    let pool = db.pool.clone();
    pooler::check(&pool)
        .await
        .expect("a direct connection was refused");
    db.seed(3).await;
    for id in 1..=3_i64 {
        let outcome = PayoutStatus::start().apply(&pool, id).await.expect("apply");
        assert!(outcome.is_applied(), "{outcome:?}");
    }
    let (tagged, untagged) = start_texts();
    let texts = prepared(&pool).await;
    assert!(texts.iter().any(|text| text == tagged), "{texts:#?}");
    assert!(!texts.iter().any(|text| text == untagged));
    pool.close().await;
}
