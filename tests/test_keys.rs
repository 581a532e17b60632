//! Keys match exactly: the row a win moves is the key its effect key names,
//! so the winner and a recovery of the same row compute the same effect
//! key, however loosely the database would compare keys.

mod common;

use std::time::Duration;

use common::{Db, TestBackend, say};
use sqlx::Pool;
use stateguard::{Committed, Executor, Key, Outcome, StateMachine, Tx, Uncommitted, claim_expired};

/// An account keyed by a text reference, with an in-flight state.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "accounts",
    column = "status",
    key = "ref",
    version = "version"
)]
enum AccountStatus {
    #[state(initial)]
    #[transition(open -> Opening)]
    Pending,
    #[state(in_flight(lease = "100ms", since = "opening_since", done = done, failed = refuse))]
    #[transition(done -> Open)]
    #[transition(refuse -> Refused)]
    Opening,
    Open,
    Refused,
}

/// Payouts keyed by an integer, with an in-flight state.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id", version = "version")]
enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "100ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

async fn outlive_the_lease() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// `loose` names the stored row `stored` only loosely: it must not win, and
/// the exact spelling wins with the effect key that recovery computes from
/// the row.
async fn loose_text_key<DB: TestBackend>(pool: &Pool<DB>, loose: &str, stored: &str)
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    String: Key<DB> + for<'r> sqlx::Decode<'r, DB>,
{
    let outcome = AccountStatus::open()
        .apply(pool, String::from(loose))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::NotFound,
        "{:?} matched {:?}",
        loose,
        stored
    );
    let won = AccountStatus::open()
        .apply(pool, String::from(stored))
        .await
        .unwrap()
        .won()
        .expect("the exact key wins");
    let winner_key = won.effect_key();
    drop(won); // the worker dies before its effect
    outlive_the_lease().await;
    let recovered = claim_expired::<_, String, _>(pool, AccountStatus::Opening, 10)
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].effect_key(), winner_key);
    assert_eq!(winner_key, format!("accounts.status:{}:opening:1", stored));
}

/// The same for an integer key spelled as text.
async fn loose_integer_key<DB: TestBackend>(pool: &Pool<DB>, loose: &str)
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    String: Key<DB>,
    i64: Key<DB> + for<'r> sqlx::Decode<'r, DB>,
{
    let outcome = PayoutStatus::start()
        .apply(pool, String::from(loose))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::NotFound, "{:?} matched row 42", loose);
    let won = PayoutStatus::start()
        .apply(pool, 42_i64)
        .await
        .unwrap()
        .won()
        .expect("the exact key wins");
    let winner_key = won.effect_key();
    drop(won);
    outlive_the_lease().await;
    let recovered = claim_expired::<_, i64, _>(pool, PayoutStatus::Sending, 10)
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].effect_key(), winner_key);
    assert_eq!(winner_key, "payouts.status:42:sending:1");
}

#[tokio::test]
async fn mariadb_keys_match_exactly() {
    let Some(db) = open!(Mysql, "keys_exact") else {
        return;
    };
    for statement in [
        // The default collation ignores case and trailing spaces.
        "CREATE TABLE accounts (
            ref VARCHAR(32) COLLATE utf8mb4_general_ci PRIMARY KEY,
            status VARCHAR(32) NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            opening_since DATETIME(3) NULL
        )",
        "INSERT INTO accounts (ref, status) VALUES ('abc', 'pending')",
        "DROP TABLE payouts",
        "CREATE TABLE payouts (
            id BIGINT PRIMARY KEY,
            status VARCHAR(32) NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            sending_since DATETIME(3) NULL
        )",
        "INSERT INTO payouts (id, status) VALUES (42, 'pending')",
    ] {
        sqlx::query(statement).execute(&db.pool).await.unwrap();
    }
    // Proof that the database itself matches loosely.
    let loose: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM accounts WHERE ref = 'ABC ' AND EXISTS
            (SELECT 1 FROM payouts WHERE id = '042')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(loose, 1);
    loose_text_key(&db.pool, "ABC ", "abc").await;
    loose_integer_key(&db.pool, "042").await;
}

#[tokio::test]
async fn sqlite_keys_match_exactly() {
    let Some(db) = open!(Sqlite, "keys_exact") else {
        return;
    };
    for statement in [
        "CREATE TABLE accounts (
            ref TEXT COLLATE NOCASE PRIMARY KEY,
            status TEXT NOT NULL,
            version INTEGER NOT NULL DEFAULT 0,
            opening_since TEXT
        )",
        "INSERT INTO accounts (ref, status) VALUES ('abc', 'pending')",
        "DROP TABLE payouts",
        "CREATE TABLE payouts (
            id INTEGER PRIMARY KEY,
            status TEXT NOT NULL,
            version INTEGER NOT NULL DEFAULT 0,
            sending_since TEXT
        )",
        "INSERT INTO payouts (id, status) VALUES (42, 'pending')",
    ] {
        sqlx::query(statement).execute(&db.pool).await.unwrap();
    }
    let loose: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM accounts WHERE ref = 'ABC' AND EXISTS
            (SELECT 1 FROM payouts WHERE id = '42.0')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(loose, 1);
    loose_text_key(&db.pool, "ABC", "abc").await;
    loose_integer_key(&db.pool, "42.0").await;
}

#[tokio::test]
async fn postgres_keys_match_exactly_under_a_nondeterministic_collation() {
    let Some(db) = open!(Postgres, "keys_exact") else {
        return;
    };
    let icu = sqlx::query(
        "CREATE COLLATION IF NOT EXISTS case_insensitive \
         (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
    )
    .execute(&db.pool)
    .await;
    if let Err(error) = icu {
        say(&format!(
            "skipped the collation case: no ICU collations here ({error})"
        ));
        return;
    }
    for statement in [
        "CREATE TABLE accounts (
            ref TEXT COLLATE case_insensitive PRIMARY KEY,
            status TEXT NOT NULL,
            version BIGINT NOT NULL DEFAULT 0,
            opening_since TIMESTAMPTZ
        )",
        "INSERT INTO accounts (ref, status) VALUES ('abc', 'pending')",
    ] {
        sqlx::query(statement).execute(&db.pool).await.unwrap();
    }
    let loose: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM accounts WHERE ref = 'ABC'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(loose, 1);
    loose_text_key(&db.pool, "ABC", "abc").await;
}

/// A lease starts when the row enters the in-flight state, not when the
/// transaction began: a transaction that ran long before `start` commits a
/// row whose lease is still fresh, and recovery leaves it alone.
async fn lease_starts_at_the_statement<DB: TestBackend>(db: Db<DB>)
where
    for<'p> &'p Pool<DB>: Executor<Database = DB, Commit = Committed>,
    for<'t, 'c> &'t mut Tx<'c, DB>: Executor<Database = DB, Commit = Uncommitted>,
    i64: Key<DB> + for<'r> sqlx::Decode<'r, DB>,
{
    #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(
        table = "transfers",
        column = "status",
        key = "id",
        version = "version"
    )]
    enum Slow {
        #[state(initial)]
        #[transition(start -> Sending)]
        Pending,
        #[state(in_flight(lease = "1s", since = "sending_since", done = confirm, failed = fail))]
        #[transition(confirm -> Sent)]
        #[transition(fail -> Failed)]
        Sending,
        Sent,
        Failed,
    }
    db.transfers(1).await;
    let mut tx = Tx::begin(&db.pool).await.unwrap();
    // The transaction reads first, so it has begun on every
    // backend, and is 1.5 s old when the row enters the state.
    DB::execute(&mut *tx, "SELECT COUNT(*) FROM transfers", &[])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let outcome = Slow::start().apply(&mut tx, 1_i64).await.unwrap();
    let won = tx.commit(outcome.won()).await.unwrap().expect("won");
    let taken = claim_expired::<_, i64, _>(&db.pool, Slow::Sending, 10)
        .await
        .unwrap();
    assert!(
        taken.is_empty(),
        "recovery took over a row whose lease had just begun"
    );
    drop(won);
}

#[tokio::test]
async fn sqlite_lease_starts_at_the_statement() {
    let Some(db) = open!(Sqlite, "lease_statement_time") else {
        return;
    };
    lease_starts_at_the_statement(db).await;
}

#[tokio::test]
async fn postgres_lease_starts_at_the_statement() {
    let Some(db) = open!(Postgres, "lease_statement_time") else {
        return;
    };
    lease_starts_at_the_statement(db).await;
}

#[tokio::test]
async fn mariadb_lease_starts_at_the_statement() {
    let Some(db) = open!(Mysql, "lease_statement_time") else {
        return;
    };
    lease_starts_at_the_statement(db).await;
}
