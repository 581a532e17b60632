//! `examples/payouts_api` over real HTTP: the service runs on
//! `127.0.0.1:0` inside the test, and a real client (reqwest) calls it.

use crate::common;
use crate::common::KeyColumn;

#[path = "../../examples/payouts_api/app.rs"]
#[allow(dead_code)]
mod app;

use std::collections::BTreeSet;
use std::sync::Arc;

use app::{ApiBackend, App, PayoutView};
use common::{Db, TestBackend};
use reqwest::StatusCode;
use stateguard::console::ConsoleKey;
use tokio::sync::{Barrier, Semaphore};

backend_tests! {
    "api_race" => racing_posts_create_one_payout (flavor = "multi_thread", worker_threads = 4),
    "api_refusals" => mismatches_and_bad_input_write_nothing (flavor = "multi_thread", worker_threads = 2),
    "api_webhooks" => a_webhook_storm_applies_each_payout_once (flavor = "multi_thread", worker_threads = 4),
    "api_console" => the_console_is_behind_the_password (flavor = "multi_thread", worker_threads = 2),
}

/// The console's password in these tests.
const OPS_PASSWORD: &str = "correct horse";

/// The service on `127.0.0.1:0`, and its base URL.
async fn serve<DB>(db: &Db<DB>) -> String
where
    DB: ApiBackend + TestBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: KeyColumn<DB> + ConsoleKey<app::PayoutStatus, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    // The fixture's database is empty: the service creates its four
    // tables.
    let created = app::prepare(&db.pool, false).await.unwrap();
    assert_eq!(
        created,
        [
            "api_payouts",
            "stateguard_idempotency",
            "stateguard_inbox",
            "stateguard_outbox"
        ]
    );
    let router = app::router(App {
        pool: db.pool.clone(),
        lease: stateguard::idempotency::DEFAULT_LEASE,
        crash: None,
        ops_password: Some(OPS_PASSWORD.to_owned()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

async fn count<DB: TestBackend>(db: &Db<DB>, table: &str) -> i64 {
    let sql: &'static str = match (<DB as TestBackend>::DIALECT, table) {
        (stateguard::ddl::Dialect::MySql, "api_payouts") => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM api_payouts"
        }
        (stateguard::ddl::Dialect::MySql, "keys") => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_idempotency"
        }
        (stateguard::ddl::Dialect::MySql, "created") => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox WHERE topic = 'payout.created'"
        }
        (stateguard::ddl::Dialect::MySql, "moved") => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_outbox WHERE topic IN \
             ('payout.paid', 'payout.failed')"
        }
        (stateguard::ddl::Dialect::MySql, _) => {
            "SELECT CAST(COUNT(*) AS SIGNED) FROM stateguard_inbox"
        }
        (_, "api_payouts") => "SELECT CAST(COUNT(*) AS BIGINT) FROM api_payouts",
        (_, "keys") => "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_idempotency",
        (_, "created") => {
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE topic = 'payout.created'"
        }
        (_, "moved") => {
            "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_outbox WHERE topic IN \
             ('payout.paid', 'payout.failed')"
        }
        _ => "SELECT CAST(COUNT(*) AS BIGINT) FROM stateguard_inbox",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

const BODY: &str = r#"{"amount_cents":1000,"currency":"EUR","recipient":"acct_1"}"#;

async fn post(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let mut request = client.post(format!("{base}/payouts")).body(body.to_owned());
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.unwrap()
}

const RACERS: usize = 32;

/// 32 concurrent `POST /payouts` with one key and body: one payout row;
/// every answer is the same 201 body or a 409; afterwards every retry is
/// the replay, marked `Idempotent-Replayed: true`.
async fn racing_posts_create_one_payout<DB>(db: Db<DB>)
where
    DB: ApiBackend + TestBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: KeyColumn<DB> + ConsoleKey<app::PayoutStatus, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let base = serve(&db).await;
    let client = reqwest::Client::new();
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for _ in 0..RACERS {
        let (client, base, barrier) = (client.clone(), base.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let response = post(&client, &base, Some("race-1"), BODY).await;
            let status = response.status();
            let replayed = response.headers().contains_key("idempotent-replayed");
            (status, replayed, response.text().await.unwrap())
        }));
    }
    let mut created = BTreeSet::new();
    let mut fresh = 0;
    for task in tasks {
        let (status, replayed, body) = task.await.unwrap();
        match status {
            StatusCode::CREATED => {
                fresh += usize::from(!replayed);
                created.insert(body);
            }
            StatusCode::CONFLICT => {}
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(fresh, 1, "one request created the payout");
    assert_eq!(
        created.len(),
        1,
        "every 201 carries the same body: {created:?}"
    );
    assert_eq!(count(&db, "api_payouts").await, 1);
    let body = created.into_iter().next().unwrap();
    let view: PayoutView = serde_json::from_str(&body).unwrap();
    assert_eq!(view.status, "pending");
    for _ in 0..RACERS {
        let response = post(&client, &base, Some("race-1"), BODY).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(
            response.headers().get("idempotent-replayed").unwrap(),
            "true"
        );
        assert_eq!(response.text().await.unwrap(), body);
    }
    let read = client
        .get(format!("{base}/payouts/{}", view.id))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(read.json::<PayoutView>().await.unwrap(), view);
    assert_eq!(count(&db, "api_payouts").await, 1);
    // One `payout.created`, written with the one payout.
    assert_eq!(count(&db, "created").await, 1);
}

/// The same key with another amount is 422; a missing, empty or over-long
/// key and a malformed body are 400; a webhook for an unknown payout is
/// 404. None of them writes a row.
async fn mismatches_and_bad_input_write_nothing<DB>(db: Db<DB>)
where
    DB: ApiBackend + TestBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: KeyColumn<DB> + ConsoleKey<app::PayoutStatus, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let base = serve(&db).await;
    let client = reqwest::Client::new();
    let long = "k".repeat(256);
    for (key, body, status) in [
        (None, BODY, StatusCode::BAD_REQUEST),
        (Some(""), BODY, StatusCode::BAD_REQUEST),
        (Some(long.as_str()), BODY, StatusCode::BAD_REQUEST),
        (
            Some("k-bad"),
            r#"{"amount_cents":"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            Some("k-bad"),
            r#"{"amount_cents":-5,"currency":"EUR","recipient":"a"}"#,
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let response = post(&client, &base, key, body).await;
        assert_eq!(response.status(), status, "{key:?} {body}");
        let text = response.text().await.unwrap();
        assert!(text.contains("\"error\""), "{text}");
    }
    assert_eq!(count(&db, "keys").await, 0);
    assert_eq!(count(&db, "api_payouts").await, 0);

    let first = post(&client, &base, Some("k-1"), BODY).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let other = BODY.replace("1000", "2000");
    let response = post(&client, &base, Some("k-1"), &other).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(count(&db, "api_payouts").await, 1);

    let unknown = client
        .post(format!("{base}/webhooks/bank"))
        .body(r#"{"id":"evt_x","type":"payout.paid","payout_id":"po_missing"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let malformed = client
        .post(format!("{base}/webhooks/bank"))
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    assert_eq!(count(&db, "inbox").await, 0);
    let missing = client
        .get(format!("{base}/payouts/po_missing"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

const PAYOUTS: usize = 200;
const DELIVERIES: usize = 20;
const IN_FLIGHT: usize = 32;

/// 200 payouts, each of whose `payout.paid` event is delivered 20 times,
/// concurrently and shuffled, with a `payout.failed` event for every other
/// payout arriving late, and for every fifth one arriving first: each
/// payout ends as its first delivered event says (`failed` for every
/// fifth, `paid` for the rest, its effect counted once), and every delivery
/// is answered 200.
async fn a_webhook_storm_applies_each_payout_once<DB>(db: Db<DB>)
where
    DB: ApiBackend + TestBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: KeyColumn<DB> + ConsoleKey<app::PayoutStatus, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let base = serve(&db).await;
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..PAYOUTS {
        let response = post(&client, &base, Some(&format!("storm-{i}")), BODY).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        ids.push(response.json::<PayoutView>().await.unwrap().id);
    }
    // Every fifth payout fails first: its `payout.failed` arrives before
    // any of its paid events, which then change nothing.
    for (i, id) in ids.iter().enumerate().step_by(5) {
        let body = serde_json::json!({ "id": format!("evt_failed_first_{i}"),
                                       "type": "payout.failed", "payout_id": id });
        let response = client
            .post(format!("{base}/webhooks/bank"))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let failed_first = PAYOUTS.div_ceil(5);
    // Every paid event 20 times, in an order shuffled by a fixed LCG.
    let mut deliveries: Vec<(String, &str, String)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        for _ in 0..DELIVERIES {
            deliveries.push((format!("evt_paid_{i}"), "payout.paid", id.clone()));
        }
    }
    let mut seed: u64 = 0x5eed;
    for i in (1..deliveries.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        deliveries.swap(i, (seed >> 33) as usize % (i + 1));
    }
    // Late failures, after every paid event.
    for (i, id) in ids.iter().enumerate().step_by(2) {
        deliveries.push((format!("evt_failed_{i}"), "payout.failed", id.clone()));
    }
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks: Vec<tokio::task::JoinHandle<(StatusCode, String)>> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    let paid_events = PAYOUTS * DELIVERIES;
    for (n, (event, kind, payout)) in deliveries.into_iter().enumerate() {
        if n == paid_events {
            // The late failures go out once every paid event was answered.
            for task in tasks.drain(..) {
                let (status, result) = task.await.unwrap();
                assert_eq!(status, StatusCode::OK, "{result}");
                results.push(result);
            }
        }
        let (client, base, gate) = (client.clone(), base.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let body = serde_json::json!({ "id": event, "type": kind, "payout_id": payout });
            let response = client
                .post(format!("{base}/webhooks/bank"))
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = response.status();
            let answer: serde_json::Value = response.json().await.unwrap();
            (
                status,
                format!("{kind} {}", answer["result"].as_str().unwrap_or("?")),
            )
        }));
    }
    for task in tasks {
        let (status, result) = task.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{result}");
        results.push(result);
    }
    let tally = |what: &str| results.iter().filter(|r| *r == what).count();
    let paid = PAYOUTS - failed_first;
    assert_eq!(tally("payout.paid applied"), paid);
    // A failed-first payout's first paid delivery is recorded, and ignored.
    assert_eq!(tally("payout.paid ignored"), failed_first);
    assert_eq!(tally("payout.paid duplicate"), PAYOUTS * (DELIVERIES - 1));
    assert_eq!(tally("payout.failed ignored"), PAYOUTS / 2);
    let effects_sql: &'static str = match <DB as TestBackend>::DIALECT {
        stateguard::ddl::Dialect::MySql => {
            "SELECT CAST(COUNT(*) AS SIGNED), CAST(COALESCE(SUM(effects), 0) AS SIGNED) FROM \
             api_payouts WHERE status = 'paid' AND effects = 1 AND version = 1"
        }
        _ => {
            "SELECT CAST(COUNT(*) AS BIGINT), CAST(COALESCE(SUM(effects), 0) AS BIGINT) FROM \
             api_payouts WHERE status = 'paid' AND effects = 1 AND version = 1"
        }
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (paid_rows, effects): (i64, i64) =
        DB::fetch_one(&mut conn, effects_sql, &[]).await.unwrap();
    assert_eq!((paid_rows, effects), (paid as i64, paid as i64));
    drop(conn);
    for (i, id) in ids.iter().enumerate() {
        let view: PayoutView = client
            .get(format!("{base}/payouts/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let expected = if i % 5 == 0 { "failed" } else { "paid" };
        assert_eq!(
            (view.status.as_str(), view.occurrence),
            (expected, 1),
            "payout {i}"
        );
    }
    // One inbox row per distinct event.
    assert_eq!(
        count(&db, "inbox").await,
        (failed_first + PAYOUTS + PAYOUTS / 2) as i64
    );
    // One `payout.paid` or `payout.failed` per payout: the one move each
    // made, however many events raced.
    assert_eq!(count(&db, "moved").await, PAYOUTS as i64);
}

/// The console is at `/ops`, behind the password: without it, or with
/// another, 401 and a prompt; with it, the overview counts the payout the
/// API created and its state's page lists it.
async fn the_console_is_behind_the_password<DB>(db: Db<DB>)
where
    DB: ApiBackend + TestBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: KeyColumn<DB> + ConsoleKey<app::PayoutStatus, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let base = serve(&db).await;
    let client = reqwest::Client::new();
    let created = post(&client, &base, Some("console-1"), BODY).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let payout: PayoutView = created.json().await.unwrap();

    let refused = client.get(format!("{base}/ops")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().contains_key("www-authenticate"));
    let wrong = client
        .get(format!("{base}/ops"))
        .basic_auth("alice", Some("battery staple"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let overview = client
        .get(format!("{base}/ops"))
        .basic_auth("alice", Some(OPS_PASSWORD))
        .send()
        .await
        .unwrap();
    assert_eq!(overview.status(), StatusCode::OK);
    let page = overview.text().await.unwrap();
    assert!(
        page.contains("data-state=\"pending\" data-rows=\"1\""),
        "{page}"
    );
    let pending = client
        .get(format!("{base}/ops/PayoutStatus/states/pending"))
        .basic_auth("alice", Some(OPS_PASSWORD))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        pending.contains(&format!("data-key=\"{}\"", payout.id)),
        "{pending}"
    );
}
