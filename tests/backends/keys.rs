//! Keys match exactly: the row a win moves is the key its effect key names,
//! so the winner and a recovery of the same row compute the same effect
//! key, however loosely the database would compare keys.

use crate::common;
use crate::common::KeyColumn;

use std::time::Duration;

use common::{Db, TestBackend, say};
use sqlx::Pool;
use stateguard::bounds::{Key, ManyKeys};
use stateguard::key::shape;
use stateguard::{Error, Outcome, StateMachine, Tx, claim_expired};

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
    String: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
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
    String: Key<DB>,
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
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
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
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

/// Tags keyed by one column of any type, for the batch cases below.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "tags", column = "status", key = "id")]
enum TagStatus {
    #[state(initial)]
    #[transition(close -> Closed)]
    Open,
    Closed,
}

/// A key that binds as bytes (as `uuid::Uuid` does on SQLite and MySQL)
/// and displays as hex.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Bytes(Vec<u8>);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// A key that binds as an integer and displays as `po_42`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct PayoutId(i64);

impl std::fmt::Display for PayoutId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "po_{}", self.0)
    }
}

/// `Type`, `Encode` and `Decode` of a newtype, as its inner value's.
macro_rules! as_inner {
    ($outer:ident($inner:ty)) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $outer
        where
            $inner: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <$inner as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <$inner as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $outer
        where
            $inner: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut DB::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                self.0.encode_by_ref(buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $outer
        where
            $inner: sqlx::Decode<'r, DB>,
        {
            fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                <$inner as sqlx::Decode<'r, DB>>::decode(value).map($outer)
            }
        }
    };
}

as_inner!(Bytes(Vec<u8>));
as_inner!(PayoutId(i64));

/// On SQLite and MySQL a batch sends its keys as JSON: a key whose JSON
/// text is not what a one-row statement binds (bytes, an integer that
/// displays as something else) is refused before any row moves, while
/// `apply` takes the same key.
async fn batch_keys_json_cannot_carry_are_refused<DB: TestBackend + stateguard::bounds::Batched>(
    db: &Db<DB>,
    create: &'static str,
) where
    Bytes: KeyColumn<DB> + ManyKeys<DB, shape::One>,
    PayoutId: KeyColumn<DB> + ManyKeys<DB, shape::One>,
{
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, create, &[]).await.unwrap();
    DB::execute(
        &mut conn,
        "INSERT INTO tags (id, status) VALUES (42, 'open')",
        &[],
    )
    .await
    .unwrap();
    drop(conn);
    let error = TagStatus::close()
        .apply_many(&db.pool, &[PayoutId(42)])
        .await
        .unwrap_err();
    match &error {
        Error::Misuse(stateguard::Misuse::BatchKey { key, reason, .. }) => {
            assert_eq!(key, "po_42");
            assert!(reason.contains("`Display` text"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let error = TagStatus::close()
        .apply_many(&db.pool, &[Bytes(vec![0x2a])])
        .await
        .unwrap_err();
    match &error {
        Error::Misuse(stateguard::Misuse::BatchKey { key, reason, .. }) => {
            assert!(reason.contains("binds as"), "{reason}");
            assert!(key.contains("BLOB") || key.contains("BINARY"), "{key}");
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("cannot send key"), "{error}");
    // Nothing moved; the one-row path takes the integer newtype.
    let outcome = TagStatus::close()
        .apply(&db.pool, PayoutId(42))
        .await
        .unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
}

#[tokio::test]
async fn sqlite_batch_keys_json_cannot_carry_are_refused() {
    let Some(db) = open!(Sqlite, "batch_key_types") else {
        return;
    };
    batch_keys_json_cannot_carry_are_refused(
        &db,
        "CREATE TABLE tags (id PRIMARY KEY, status TEXT NOT NULL)",
    )
    .await;
}

#[tokio::test]
async fn mariadb_batch_keys_json_cannot_carry_are_refused() {
    let Some(db) = open!(Mysql, "batch_key_types") else {
        return;
    };
    batch_keys_json_cannot_carry_are_refused(
        &db,
        "CREATE TABLE tags (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL)",
    )
    .await;
}

/// A batch names the rows that `apply` names, key by key, however loosely
/// the column would compare them: SQLite's untyped key column holds the
/// integer 7, the text '8' and the real 9.0, and `i64` keys 7 to 10 find
/// only the integer; MariaDB's case- and space-insensitive text column
/// holds 'abc', and only the key "abc" finds it, not "ABC" or "abc ".
async fn batches_and_apply_name_the_same_rows<DB, K>(
    db: &Db<DB>,
    statements: &[&'static str],
    keys: &[K],
) where
    DB: TestBackend + stateguard::bounds::Batched,
    K: KeyColumn<DB>
        + ManyKeys<DB, shape::One>
        + std::fmt::Debug
        + std::fmt::Display
        + Ord
        + Clone
        + 'static,
{
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in statements {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    let mut alone = Vec::new();
    for key in keys {
        alone.push(
            TagStatus::close()
                .apply(&db.pool, key.clone())
                .await
                .unwrap(),
        );
    }
    DB::execute(&mut conn, "UPDATE tags SET status = 'open'", &[])
        .await
        .unwrap();
    drop(conn);
    let batch = TagStatus::close().apply_many(&db.pool, keys).await.unwrap();
    let kinds = |outcomes: &[Outcome<TagStatus, K>]| -> Vec<String> {
        outcomes
            .iter()
            .map(|o| match o {
                Outcome::Applied(won) => format!("applied {}", won.key()),
                other => format!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(kinds(&batch), kinds(&alone), "keys {keys:?}");
    // The exact row wins in both; the loose spellings are found by neither.
    assert_eq!(kinds(&batch)[0], format!("applied {}", keys[0]));
    assert!(
        kinds(&batch)[1..].iter().all(|k| k == "NotFound"),
        "{:?}",
        kinds(&batch)
    );
}

#[tokio::test]
async fn sqlite_batches_and_apply_name_the_same_rows() {
    let Some(db) = open!(Sqlite, "batch_same_rows") else {
        return;
    };
    batches_and_apply_name_the_same_rows(
        &db,
        &[
            "CREATE TABLE tags (id PRIMARY KEY, status TEXT NOT NULL)",
            "INSERT INTO tags (id, status) VALUES (7, 'open'), ('8', 'open'), (9.0, 'open')",
        ],
        &[7_i64, 8, 9, 10],
    )
    .await;
}

#[tokio::test]
async fn mariadb_batches_and_apply_name_the_same_rows() {
    let Some(db) = open!(Mysql, "batch_same_rows") else {
        return;
    };
    batches_and_apply_name_the_same_rows(
        &db,
        &[
            "CREATE TABLE tags (id VARCHAR(16) COLLATE utf8mb4_general_ci PRIMARY KEY, \
             status VARCHAR(32) NOT NULL)",
            "INSERT INTO tags (id, status) VALUES ('abc', 'open')",
        ],
        &["abc".to_owned(), "ABC".to_owned(), "abc ".to_owned()],
    )
    .await;
}
