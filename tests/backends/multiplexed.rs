//! On a pool that `pooler::check` found multiplexed, a server error of
//! one of the library's statements, before a row of it showed which
//! statement ran, may be another client's statement's: it comes back as
//! `Error::StatementMixUp`, whose outcome is unknown, never as a plain
//! database error. The mix-up is made by hand, on a PgBouncer database
//! with one server session (`single`, `tools/pgbouncer/start.sh`), so
//! that every client's statements meet on it.

use crate::common;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use stateguard::pooler::{self, Acknowledgement, Pooling};
use stateguard::{Error, ErrorKind, StateMachine, Tx};

const TRANSACTION: &str = "STATEGUARD_PGBOUNCER_TRANSACTION_URL";
const DIRECT: &str = "STATEGUARD_POSTGRES_URL";

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "sg_multiplexed.payouts", column = "status", key = "id")]
enum Payout {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    Sending,
}

/// Another client's statement, which takes the move's values (a key and
/// a tag) and reads a table that is dropped before it runs again.
const ELSEWHERE: &str = "SELECT 1 FROM sg_multiplexed.elsewhere \
                         WHERE id = $1::bigint AND $2::text IS NOT NULL";

/// How the pool that makes the second move is known to the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// Never checked: its errors are the server's, as they are.
    Unchecked,
    /// Found multiplexed by `pooler::check`, and acknowledged.
    Marked,
    /// A transaction begun on the marked pool.
    MarkedTx,
}

#[tokio::test]
async fn a_server_error_on_a_multiplexed_pool_is_a_mix_up() {
    let _turn = crate::mix_up::TURN.lock().await;
    let test = "a_server_error_on_a_multiplexed_pool_is_a_mix_up";
    let (Some(pooled), Some(direct)) = (
        common::server_url(TRANSACTION, test),
        common::server_url(DIRECT, test),
    ) else {
        return;
    };
    let (base, _) = pooled.rsplit_once('/').expect("a URL with a database");
    let single = format!("{base}/single");
    let mut admin = PgConnection::connect(&direct)
        .await
        .expect("direct connection");
    let mut codes = Vec::new();
    for how in [Pool::Unchecked, Pool::Marked, Pool::MarkedTx] {
        sqlx::raw_sql(
            "DROP SCHEMA IF EXISTS sg_multiplexed CASCADE; CREATE SCHEMA sg_multiplexed; \
             CREATE TABLE sg_multiplexed.payouts (id BIGINT PRIMARY KEY, status TEXT NOT NULL); \
             INSERT INTO sg_multiplexed.payouts VALUES (1, 'pending'), (2, 'pending'); \
             CREATE TABLE sg_multiplexed.elsewhere (id BIGINT)",
        )
        .execute(&mut admin)
        .await
        .expect("tables");
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&single)
            .await
            .expect("PgBouncer's one-session database");
        if how != Pool::Unchecked {
            let pooling = pooler::check(&pool)
                .acknowledge(Acknowledgement::PgBouncerTracksPreparedStatements)
                .await
                .expect("the check");
            assert!(
                matches!(pooling, Pooling::Multiplexed { .. }),
                "one server session for two clients is multiplexed: {pooling:?}"
            );
        }
        let error = mixed_up(&pool, &single, &mut admin, how).await;
        let status: String =
            sqlx::query_scalar("SELECT status FROM sg_multiplexed.payouts WHERE id = 2")
                .fetch_one(&mut admin)
                .await
                .expect("status");
        assert_eq!(
            status, "pending",
            "{how:?}: the other statement moved nothing"
        );
        match (how, &error) {
            (Pool::Unchecked, Error::Database { source, .. }) => {
                let sqlx::Error::Database(server) = source else {
                    panic!("a server error: {source:?}");
                };
                assert_eq!(server.code().as_deref(), Some("42P01"), "{server}");
                assert!(!error.is_outcome_unknown(), "{error}");
                codes.push(server.code().map(|code| code.into_owned()));
            }
            (Pool::Marked | Pool::MarkedTx, Error::StatementMixUp(mix_up)) => {
                assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
                assert!(error.is_outcome_unknown());
                assert_eq!(mix_up.server_code(), Some("42P01"), "{mix_up}");
                let message = mix_up.server_message().expect("the server's message");
                assert!(message.contains("elsewhere"), "{message}");
                assert!(mix_up.expected().starts_with("stateguard "), "{mix_up:?}");
                assert!(error.to_string().contains("may have run another statement"));
                codes.push(mix_up.server_code().map(str::to_owned));
            }
            (how, error) => panic!("{how:?}: {error:?}"),
        }
        pool.close().await;
    }
    assert_eq!(codes.len(), 3, "each kind of pool met the same error");
}

/// The second move on `pool`, after another client took the name its
/// first move prepared: the server runs [`ELSEWHERE`] with its values,
/// and fails.
async fn mixed_up(pool: &PgPool, single: &str, admin: &mut PgConnection, how: Pool) -> Error {
    let mut other = PgConnection::connect(single).await.expect("another client");
    // The one server session, cleared of every name an earlier client
    // prepared there.
    sqlx::raw_sql("DEALLOCATE ALL")
        .execute(&mut other)
        .await
        .expect("DEALLOCATE");
    // The pool's connection prepares the move as `sqlx_s_1`, and keeps
    // that name for it.
    let first = Payout::start()
        .apply(pool, 1_i64)
        .await
        .expect("the first move");
    assert!(first.is_applied(), "{first:?}");
    // Another client prepares its own first statement, `sqlx_s_1` too,
    // on the same session, which it finds cleared.
    sqlx::raw_sql("DEALLOCATE ALL")
        .execute(&mut other)
        .await
        .expect("DEALLOCATE");
    sqlx::query(ELSEWHERE)
        .bind(0_i64)
        .bind("x")
        .fetch_all(&mut other)
        .await
        .expect("the other client's statement");
    sqlx::raw_sql("DROP TABLE sg_multiplexed.elsewhere")
        .execute(&mut *admin)
        .await
        .expect("DROP");
    let error = match how {
        Pool::Unchecked | Pool::Marked => Payout::start().apply(pool, 2_i64).await.err(),
        Pool::MarkedTx => {
            let mut tx = Tx::begin(pool).await.expect("BEGIN");
            let moved = Payout::start().apply(&mut tx, 2_i64).await.err();
            let _ = tx.rollback().await;
            moved
        }
    };
    let _ = other.close().await;
    error.expect("the server ran the other client's statement")
}
