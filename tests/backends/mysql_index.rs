//! MySQL/MariaDB compare state strings as bytes (`CAST(status AS BINARY)`),
//! which no index can serve; each statement keeps a plain comparison beside
//! the cast so that it still uses an index. Proven with `EXPLAIN` on the
//! machine's own SQL text.

use crate::common;

use common::TransferStatus;
use sqlx::Row;
use stateguard::StateMachine;

/// How MariaDB plans to read `transfers` for `sql`: `(type, key)` of
/// `EXPLAIN`. The key is bound to each placeholder before the last
/// `tail.len()`, which get `tail`: a statement may compare the key more than
/// once.
///
/// sqlx runs only static SQL text, so the statement goes to the server as a
/// value and runs there with `EXECUTE IMMEDIATE`.
async fn explain(
    db: &common::Mysql,
    sql: &str,
    key: i64,
    tail: &[i64],
) -> (String, Option<String>) {
    const EXECUTE: [&str; 5] = [
        "EXECUTE IMMEDIATE @stateguard_explain",
        "EXECUTE IMMEDIATE @stateguard_explain USING @p1",
        "EXECUTE IMMEDIATE @stateguard_explain USING @p1, @p2",
        "EXECUTE IMMEDIATE @stateguard_explain USING @p1, @p2, @p3",
        "EXECUTE IMMEDIATE @stateguard_explain USING @p1, @p2, @p3, @p4",
    ];
    let placeholders = sql.matches('?').count();
    assert!(
        placeholders >= tail.len() && placeholders < EXECUTE.len(),
        "{placeholders} placeholders in {sql}"
    );
    let mut values = vec![key; placeholders - tail.len()];
    values.extend_from_slice(tail);
    values.resize(EXECUTE.len() - 1, 0);
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::query(
        "SET @stateguard_explain = CONCAT('EXPLAIN ', ?), @p1 = ?, @p2 = ?, @p3 = ?, @p4 = ?",
    )
    .bind(sql)
    .bind(values[0])
    .bind(values[1])
    .bind(values[2])
    .bind(values[3])
    .execute(&mut *conn)
    .await
    .unwrap();
    let rows = sqlx::raw_sql(EXECUTE[placeholders])
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one table, one plan row: {sql}");
    let row = &rows[0];
    let access: Option<String> = row.try_get("type").unwrap();
    let index: Option<String> = row.try_get("key").unwrap();
    (access.unwrap_or_default(), index)
}

#[track_caller]
fn assert_uses_index((access, index): (String, Option<String>), sql: &str) {
    assert_ne!(access, "ALL", "full table scan for {sql}");
    assert!(index.is_some(), "no index for {sql} (type {access})");
}

#[tokio::test]
async fn every_status_comparison_uses_an_index() {
    let Some(db) = open!(Mysql, "status_index") else {
        return;
    };
    // 8000 rows (a recursive CTE stops at 1000 on MariaDB). Most are done;
    // a few are in flight past their lease, so that the expired rows are a
    // small range of the index.
    db.transfers(1000).await;
    for statement in [
        "INSERT INTO transfers (id) SELECT id + 1000 FROM transfers",
        "INSERT INTO transfers (id) SELECT id + 2000 FROM transfers",
        "INSERT INTO transfers (id) SELECT id + 4000 FROM transfers",
        "CREATE INDEX transfers_status_since ON transfers (status, sending_since)",
        "UPDATE transfers SET status = 'sent' WHERE id > 100",
        "UPDATE transfers SET status = 'sending', sending_since = UTC_TIMESTAMP(3) - INTERVAL 1 HOUR \
         WHERE id BETWEEN 51 AND 100",
        "ANALYZE TABLE transfers",
    ] {
        sqlx::query(statement).execute(&db.pool).await.unwrap();
    }
    let machine = TransferStatus::MACHINE;
    let sending = machine
        .state(TransferStatus::Sending)
        .and_then(|s| s.in_flight())
        .unwrap();
    let version = 0;

    // The expired-rows query has no key to narrow it: it must read a range
    // of the status index, not the whole table.
    let expired = sending.expired_sql().mysql();
    let (access, index) = explain(&db, expired, 0, &[10]).await;
    assert_eq!(
        (access.as_str(), index.as_deref()),
        ("range", Some("transfers_status_since")),
        "{expired}"
    );
    let claim = sending.claim_sql().mysql();
    assert_uses_index(explain(&db, claim, 60, &[version]).await, claim);
    let start = TransferStatus::start().def().update_sql().mysql();
    assert_uses_index(explain(&db, start, 7, &[]).await, start);
    // The follow-ups and the renewal are tied to the occurrence and the
    // lease token (0: no lease held by this test).
    let lease = 0;
    for follow_up in [
        sending.done_sql().mysql(),
        sending.failed_sql().unwrap().mysql(),
        sending.renew_sql().mysql(),
    ] {
        assert_uses_index(
            explain(&db, follow_up, 60, &[version, lease]).await,
            follow_up,
        );
    }
    let select = machine.select_sql().mysql();
    assert_uses_index(explain(&db, select, 7, &[]).await, select);
    for read in [
        sending.follow_up_read_sql().mysql(),
        sending.lease_read_sql().mysql(),
    ] {
        assert_uses_index(explain(&db, read, 7, &[]).await, read);
    }
}
