//! The suites behind PgBouncer in session mode, where a client connection
//! is one server session for its whole life: transactions, `finish` and
//! recovery, claims, batches, history, idempotency keys and the inbox
//! pass there as on a direct connection. Each body is the one its suite
//! runs on every backend, on a schema of its own, found through the
//! connections' `search_path` (set per session, which session pooling
//! keeps; PgBouncer 1.18 refuses the `options` start-up parameter).
//!
//! The session-mode instance keeps `default_pool_size` small, so these
//! take turns with `pooler.rs`'s (`SESSION_TURN`) and close their pools.

use crate::common;

use std::str::FromStr;
use std::time::Duration;

use common::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

const SESSION: &str = "STATEGUARD_PGBOUNCER_SESSION_URL";

/// A handle on schema `sg_session_$test`, made anew, through the
/// session-mode PgBouncer; `None` when it is not configured. The
/// statements are literals, as every test's SQL is.
macro_rules! on_session {
    ($test:ident) => {
        crate::session::open_session(
            stringify!($test),
            concat!(
                "DROP SCHEMA IF EXISTS sg_session_",
                stringify!($test),
                " CASCADE; CREATE SCHEMA sg_session_",
                stringify!($test)
            ),
            concat!("SET search_path TO sg_session_", stringify!($test)),
        )
    };
}
pub(crate) use on_session;

/// See [`on_session!`]: `fresh` makes the schema, `search_path` finds it.
pub(crate) async fn open_session(
    test: &str,
    fresh: &'static str,
    search_path: &'static str,
) -> Option<Postgres> {
    let url = common::server_url(SESSION, test)?;
    let mut admin = PgConnection::connect(&url).await.expect("session pooler");
    sqlx::raw_sql(fresh)
        .execute(&mut admin)
        .await
        .expect("schema");
    admin.close().await.expect("close");
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .acquire_timeout(Duration::from_secs(60))
        .after_connect(move |conn, _| {
            Box::pin(async move {
                sqlx::raw_sql(search_path).execute(conn).await?;
                Ok(())
            })
        })
        .connect_with(PgConnectOptions::from_str(&url).expect("URL"))
        .await
        .expect("session pool");
    Some(Postgres::on_pool(pool).await)
}

/// One test per body: `$suite::Tests::<Postgres>::$body` on its own schema.
macro_rules! session_tests {
    ($($suite:ident :: $body:ident,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $body() {
            let _turn = crate::pooler::SESSION_TURN.lock().await;
            let Some(db) = on_session!($body).await else {
                return;
            };
            let pool = db.pool.clone();
            crate::$suite::Tests::<sqlx::Postgres>::$body(db).await;
            pool.close().await;
        }
    )*};
}

session_tests! {
    transactions::a_win_in_a_rolled_back_savepoint_never_commits,
    transactions::a_released_savepoint_commits_its_wins_with_the_transaction,
    effects::finish_runs_the_effect_then_done_or_failed,
    effects::recovery_names_the_rows_that_left_the_in_flight_state_meanwhile,
    claim::claimers_drain_the_queue_exactly_once,
    claim::a_claim_stamps_leases_that_finish_and_recovery_honour,
    many::every_key_gets_its_outcome_in_input_order,
    many::racing_batches_win_each_row_once,
    history::every_way_of_moving_writes_history,
    history::the_history_chains_under_a_race,
    idempotency::a_completed_key_replays_and_refuses_other_parameters,
    idempotency::racing_requests_create_one_payout,
    idempotency::a_message_is_received_once_and_a_rollback_did_not_receive,
    idempotency::racing_deliveries_apply_once,
}
