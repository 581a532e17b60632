//! The idempotency layer over real HTTP: a service on `127.0.0.1:0`, a
//! client in other tasks, and the store on each backend.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing;
use common::{Db, TestBackend};
use stateguard::ddl::Dialect;
use stateguard::idempotency;
use stateguard::idempotency::layer::{Fingerprint, Idempotent, IdempotentTx};

backend_tests! {
    impl Tests {
        "layer_identity" => two_callers_with_one_key_get_two_resources,
        "layer_canonical" => a_reordered_body_replays_and_a_changed_one_is_refused,
        "layer_wait" => waiting_requests_all_get_the_first_response (flavor = "multi_thread", worker_threads = 4),
        "layer_error" => a_server_error_frees_the_key,
        "layer_optional" => an_optional_route_passes_requests_without_a_key,
        "layer_refusals" => bad_requests_are_refused_and_write_nothing,
        "layer_options" => fingerprints_limits_and_scopes_do_as_configured,
    }
}

/// What every route's handler shares: how many calls it took, and how
/// many of the first calls answer 500.
#[derive(Default)]
struct Calls {
    handled: AtomicUsize,
    failing: AtomicUsize,
}

/// The `items` table and the store's.
async fn tables<DB: TestBackend>(db: &Db<DB>) {
    let items = match DB::DIALECT {
        Dialect::MySql => "CREATE TABLE items (id VARCHAR(64) PRIMARY KEY, body TEXT NOT NULL)",
        _ => "CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT NOT NULL)",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    DB::execute(&mut conn, items, &[]).await.unwrap();
    for statement in idempotency::ddl(DB::DIALECT) {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

async fn count<DB: TestBackend>(db: &Db<DB>, table: &str) -> i64 {
    let sql = match table {
        "items" => "SELECT COUNT(*) FROM items",
        _ => "SELECT COUNT(*) FROM stateguard_idempotency",
    };
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, sql, &[]).await.unwrap();
    n
}

fn item_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(7);
    format!("it_{:016x}", hasher.finish())
}

/// Inserts an item in the claim's transaction (after `delay`), and
/// answers 201 with its id and a `Location`; 500 while `failing` lasts.
async fn create<DB: TestBackend>(
    calls: Arc<Calls>,
    delay: Duration,
    mut tx: IdempotentTx<DB>,
    body: Bytes,
) -> Response
where
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    calls.handled.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(delay).await;
    let id = item_id();
    let insert = match DB::DIALECT {
        Dialect::Postgres => "INSERT INTO items (id, body) VALUES ($1, $2)",
        _ => "INSERT INTO items (id, body) VALUES (?, ?)",
    };
    sqlx::query(insert)
        .bind(id.clone())
        .bind(String::from_utf8_lossy(&body).into_owned())
        .execute(&mut **tx)
        .await
        .unwrap();
    let failing = calls.failing.load(Ordering::SeqCst);
    if failing > 0 {
        calls.failing.store(failing - 1, Ordering::SeqCst);
        return (StatusCode::INTERNAL_SERVER_ERROR, "the bank is down").into_response();
    }
    let mut response = (StatusCode::CREATED, format!(r#"{{"id":"{id}"}}"#)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::LOCATION,
        HeaderValue::try_from(format!("/items/{id}")).unwrap(),
    );
    response
}

/// An item without the layer's transaction: on the pool.
async fn create_optional<DB: TestBackend>(
    pool: sqlx::Pool<DB>,
    tx: Option<IdempotentTx<DB>>,
    body: Bytes,
) -> Response
where
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let insert = match DB::DIALECT {
        Dialect::Postgres => "INSERT INTO items (id, body) VALUES ($1, $2)",
        _ => "INSERT INTO items (id, body) VALUES (?, ?)",
    };
    let query = sqlx::query(insert)
        .bind(item_id())
        .bind(String::from_utf8_lossy(&body).into_owned());
    let keyed = tx.is_some();
    match tx {
        Some(mut tx) => query.execute(&mut **tx).await.unwrap(),
        None => query.execute(&pool).await.unwrap(),
    };
    (StatusCode::CREATED, format!(r#"{{"keyed":{keyed}}}"#)).into_response()
}

/// The service: `/items` (callers named by `x-api-key`, `Location` and
/// `Content-Type` stored), `/slow` (its handler takes `slow`; requests wait
/// `wait` for a running one), `/optional`. Returns its base URL.
async fn serve<DB: TestBackend>(
    db: &Db<DB>,
    calls: Arc<Calls>,
    slow: Duration,
    wait: Duration,
) -> String
where
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let items = Idempotent::new(db.pool.clone(), "POST /items")
        .identity(|parts| {
            let key = parts.headers.get("x-api-key")?;
            key.to_str().ok().map(str::to_owned)
        })
        .store_headers([header::LOCATION, header::CONTENT_TYPE]);
    let slow_layer = Idempotent::new(db.pool.clone(), "POST /slow").wait_for(wait);
    let optional = Idempotent::new(db.pool.clone(), "POST /optional").optional();
    let (fast, slowed) = (calls.clone(), calls);
    let pool = db.pool.clone();
    let router = Router::new()
        .route(
            "/items",
            routing::post(move |tx: IdempotentTx<DB>, body: Bytes| {
                create::<DB>(fast.clone(), Duration::ZERO, tx, body)
            })
            .layer(items),
        )
        .route(
            "/slow",
            routing::post(move |tx: IdempotentTx<DB>, body: Bytes| {
                create::<DB>(slowed.clone(), slow, tx, body)
            })
            .layer(slow_layer),
        )
        .route(
            "/optional",
            routing::post(move |tx: Option<IdempotentTx<DB>>, body: Bytes| {
                create_optional::<DB>(pool.clone(), tx, body)
            })
            .layer(optional),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

/// `POST {base}{path}` with the headers given.
async fn post<'a>(
    client: &reqwest::Client,
    url: String,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: &str,
) -> reqwest::Response {
    let mut request = client.post(url).body(body.to_owned());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request.send().await.unwrap()
}

const BODY: &str = r#"{"amount_cents":1000,"currency":"EUR","recipient":"ada"}"#;

pub(crate) struct Tests<DB>(std::marker::PhantomData<DB>);

/// The bodies `backend_tests!` runs on each backend; the bounds they share
/// are written once, on this block.
impl<DB: TestBackend> Tests<DB>
where
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    /// Two API keys sending the same `Idempotency-Key` create two items; each
    /// one's retry replays its own.
    async fn two_callers_with_one_key_get_two_resources(db: Db<DB>) {
        tables(&db).await;
        let base = serve(&db, Arc::default(), Duration::ZERO, Duration::ZERO).await;
        let client = reqwest::Client::new();
        let mut bodies = Vec::new();
        for caller in ["acme", "globex", "acme", "globex"] {
            let headers = [("x-api-key", caller), ("idempotency-key", "k-1")];
            let response = post(&client, format!("{base}/items"), headers, BODY).await;
            assert_eq!(response.status(), StatusCode::CREATED);
            bodies.push(response.text().await.unwrap());
        }
        assert_ne!(bodies[0], bodies[1], "two callers, two items");
        assert_eq!(
            (&bodies[0], &bodies[1]),
            (&bodies[2], &bodies[3]),
            "each retry replays its own"
        );
        assert_eq!(count(&db, "items").await, 2);
    }

    /// The same fields in another order, with other whitespace, replay the
    /// first response, its stored `Location` and `Content-Type` included; a
    /// changed field is 422.
    async fn a_reordered_body_replays_and_a_changed_one_is_refused(db: Db<DB>) {
        tables(&db).await;
        let base = serve(&db, Arc::default(), Duration::ZERO, Duration::ZERO).await;
        let client = reqwest::Client::new();
        let headers = [("x-api-key", "acme"), ("idempotency-key", "k-2")];
        let first = post(&client, format!("{base}/items"), headers, BODY).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get("idempotent-replayed").is_none());
        let location = first.headers()[header::LOCATION].clone();
        let body = first.text().await.unwrap();
        let reordered =
            "{ \"recipient\": \"ada\",\n  \"currency\": \"EUR\", \"amount_cents\": 1000 }";
        let replay = post(&client, format!("{base}/items"), headers, reordered).await;
        assert_eq!(replay.status(), StatusCode::CREATED);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(replay.headers()[header::LOCATION], location);
        assert_eq!(replay.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(replay.text().await.unwrap(), body);
        let changed = BODY.replace("1000", "2000");
        let refused = post(&client, format!("{base}/items"), headers, &changed).await;
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let problem: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(problem["code"], "key_reused");
        assert_eq!(count(&db, "items").await, 1);
    }

    /// 32 concurrent requests with one key: with a wait longer than the
    /// handler, every one gets the one 201 body and none a 409; with a wait
    /// shorter than it, all but the first get 409.
    async fn waiting_requests_all_get_the_first_response(db: Db<DB>) {
        tables(&db).await;
        let client = reqwest::Client::new();
        let race = |base: String, key: &'static str| {
            let client = client.clone();
            (0..32).map(move |_| {
                let (client, url) = (client.clone(), format!("{base}/slow"));
                tokio::spawn(async move {
                    let response = post(&client, url, [("idempotency-key", key)], BODY).await;
                    (response.status(), response.text().await.unwrap())
                })
            })
        };
        let calls = Arc::new(Calls::default());
        let waits = serve(
            &db,
            calls.clone(),
            Duration::from_millis(300),
            Duration::from_secs(20),
        )
        .await;
        let mut answers = Vec::new();
        for task in race(waits, "k-wait").collect::<Vec<_>>() {
            answers.push(task.await.unwrap());
        }
        let created: Vec<_> = answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::CREATED)
            .collect();
        assert_eq!(created.len(), 32, "{answers:?}");
        assert!(
            created.iter().all(|(_, body)| *body == created[0].1),
            "{answers:?}"
        );
        assert_eq!(calls.handled.load(Ordering::SeqCst), 1);
        assert_eq!(count(&db, "items").await, 1);

        let calls = Arc::new(Calls::default());
        let short = serve(
            &db,
            calls.clone(),
            Duration::from_secs(2),
            Duration::from_millis(50),
        )
        .await;
        let mut answers = Vec::new();
        for task in race(short, "k-short").collect::<Vec<_>>() {
            answers.push(task.await.unwrap());
        }
        let conflicts = answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::CONFLICT)
            .count();
        let created = answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::CREATED)
            .count();
        assert_eq!((created, conflicts), (1, 31), "{answers:?}");
        assert_eq!(calls.handled.load(Ordering::SeqCst), 1);
        assert_eq!(count(&db, "items").await, 2);
    }

    /// A 500 from the handler rolls its work back and frees the key: the
    /// retry runs the handler again, and succeeds.
    async fn a_server_error_frees_the_key(db: Db<DB>) {
        tables(&db).await;
        let calls = Arc::new(Calls::default());
        calls.failing.store(1, Ordering::SeqCst);
        let base = serve(&db, calls.clone(), Duration::ZERO, Duration::ZERO).await;
        let client = reqwest::Client::new();
        let headers = [("x-api-key", "acme"), ("idempotency-key", "k-500")];
        let failed = post(&client, format!("{base}/items"), headers, BODY).await;
        assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            (count(&db, "items").await, count(&db, "keys").await),
            (0, 0)
        );
        let retried = post(&client, format!("{base}/items"), headers, BODY).await;
        assert_eq!(retried.status(), StatusCode::CREATED);
        assert!(retried.headers().get("idempotent-replayed").is_none());
        assert_eq!(calls.handled.load(Ordering::SeqCst), 2);
        assert_eq!(
            (count(&db, "items").await, count(&db, "keys").await),
            (1, 1)
        );
    }

    /// On an optional route a request without a key passes through untouched
    /// (the handler sees no transaction, and each one creates); one with a
    /// key is idempotent.
    async fn an_optional_route_passes_requests_without_a_key(db: Db<DB>) {
        tables(&db).await;
        let base = serve(&db, Arc::default(), Duration::ZERO, Duration::ZERO).await;
        let client = reqwest::Client::new();
        for _ in 0..2 {
            let plain = post(&client, format!("{base}/optional"), [], "not even JSON").await;
            assert_eq!(plain.status(), StatusCode::CREATED);
            assert_eq!(plain.text().await.unwrap(), r#"{"keyed":false}"#);
        }
        assert_eq!(
            (count(&db, "items").await, count(&db, "keys").await),
            (2, 0)
        );
        for _ in 0..2 {
            let keyed = post(
                &client,
                format!("{base}/optional"),
                [("idempotency-key", "k-o")],
                BODY,
            )
            .await;
            assert_eq!(keyed.status(), StatusCode::CREATED);
            assert_eq!(keyed.text().await.unwrap(), r#"{"keyed":true}"#);
        }
        assert_eq!(
            (count(&db, "items").await, count(&db, "keys").await),
            (3, 1)
        );
    }

    /// A missing, empty, over-long or non-ASCII key, a caller the route
    /// cannot name and a body that is not JSON each get the layer's JSON
    /// answer, and nothing is written.
    async fn bad_requests_are_refused_and_write_nothing(db: Db<DB>) {
        tables(&db).await;
        let calls = Arc::new(Calls::default());
        let base = serve(&db, calls.clone(), Duration::ZERO, Duration::ZERO).await;
        let client = reqwest::Client::new();
        let long = "k".repeat(256);
        type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, StatusCode, &'a str);
        let cases: [Case; 6] = [
            (
                vec![("x-api-key", "acme")],
                BODY,
                StatusCode::BAD_REQUEST,
                "idempotency_key_missing",
            ),
            (
                vec![("x-api-key", "acme"), ("idempotency-key", "")],
                BODY,
                StatusCode::BAD_REQUEST,
                "idempotency_key_invalid",
            ),
            (
                vec![("x-api-key", "acme"), ("idempotency-key", long.as_str())],
                BODY,
                StatusCode::BAD_REQUEST,
                "idempotency_key_invalid",
            ),
            (
                vec![("x-api-key", "acme"), ("idempotency-key", "two words")],
                BODY,
                StatusCode::BAD_REQUEST,
                "idempotency_key_invalid",
            ),
            (
                vec![("idempotency-key", "k-3")],
                BODY,
                StatusCode::UNAUTHORIZED,
                "identity_missing",
            ),
            (
                vec![("x-api-key", "acme"), ("idempotency-key", "k-3")],
                r#"{"amount_cents":"#,
                StatusCode::BAD_REQUEST,
                "body_not_json",
            ),
        ];
        for (headers, body, status, code) in cases {
            let response = post(&client, format!("{base}/items"), headers.clone(), body).await;
            assert_eq!(response.status(), status, "{headers:?}");
            assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
            let problem: serde_json::Value = response.json().await.unwrap();
            assert_eq!(problem["code"], code, "{headers:?}");
            assert!(problem["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
        assert_eq!(calls.handled.load(Ordering::SeqCst), 0);
        assert_eq!(
            (count(&db, "items").await, count(&db, "keys").await),
            (0, 0)
        );
    }

    /// `Fingerprint::Raw` tells a re-spaced body from the first (422);
    /// `Fingerprint::With` hashes what the application says (here the
    /// `amount_cents` field alone, so another recipient replays); a body
    /// over `body_limit` is 413; a caller and route over 255 characters
    /// together is 400. Nothing of the refused ones is written.
    async fn fingerprints_limits_and_scopes_do_as_configured(db: Db<DB>) {
        tables(&db).await;
        let calls = Arc::new(Calls::default());
        let handler = |calls: Arc<Calls>| {
            routing::post(move |tx: IdempotentTx<DB>, body: Bytes| {
                create::<DB>(calls.clone(), Duration::ZERO, tx, body)
            })
        };
        let amount_only = Fingerprint::With(Arc::new(|_, body: &[u8]| {
            let value: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| e.to_string())?;
            Ok(value["amount_cents"].to_string().into_bytes())
        }));
        let router = Router::new()
            .route(
                "/raw",
                handler(calls.clone()).layer(
                    Idempotent::new(db.pool.clone(), "POST /raw")
                        .fingerprint(Fingerprint::Raw)
                        .body_limit(64),
                ),
            )
            .route(
                "/amount",
                handler(calls.clone()).layer(
                    Idempotent::new(db.pool.clone(), "POST /amount").fingerprint(amount_only),
                ),
            )
            .route(
                "/scoped",
                handler(calls.clone()).layer(
                    Idempotent::new(db.pool.clone(), "POST /scoped").identity(|parts| {
                        let key = parts.headers.get("x-api-key")?;
                        key.to_str().ok().map(str::to_owned)
                    }),
                ),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        let client = reqwest::Client::new();
        let key = [("idempotency-key", "k-opt")];

        let first = post(&client, format!("{base}/raw"), key, r#"{"a":1,"b":2}"#).await;
        assert_eq!(first.status(), StatusCode::CREATED);
        let respaced = post(&client, format!("{base}/raw"), key, r#"{"a": 1, "b": 2}"#).await;
        assert_eq!(respaced.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let large = format!(r#"{{"pad":"{}"}}"#, "x".repeat(64));
        let too_large = post(
            &client,
            format!("{base}/raw"),
            [("idempotency-key", "k-big")],
            &large,
        )
        .await;
        assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let problem: serde_json::Value = too_large.json().await.unwrap();
        assert_eq!(problem["code"], "body_too_large");

        let paid = post(&client, format!("{base}/amount"), key, BODY).await;
        assert_eq!(paid.status(), StatusCode::CREATED);
        let other = BODY.replace("ada", "grace");
        let replay = post(&client, format!("{base}/amount"), key, &other).await;
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        let changed = BODY.replace("1000", "2000");
        let refused = post(&client, format!("{base}/amount"), key, &changed).await;
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);

        let caller = "c".repeat(250);
        let headers = [
            ("x-api-key", caller.as_str()),
            ("idempotency-key", "k-long"),
        ];
        let long = post(&client, format!("{base}/scoped"), headers, BODY).await;
        assert_eq!(long.status(), StatusCode::BAD_REQUEST);
        let problem: serde_json::Value = long.json().await.unwrap();
        assert_eq!(problem["code"], "scope_too_long");

        assert_eq!(calls.handled.load(Ordering::SeqCst), 2);
        assert_eq!(
            (count(&db, "items").await, count(&db, "keys").await),
            (2, 2)
        );
    }
}
