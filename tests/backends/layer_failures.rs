//! The idempotency layer frees its key on every failure after the claim:
//! a `COMMIT` the database refuses, a response that cannot be stored, a
//! response body that breaks, a handler that panics and a request whose
//! future is dropped. Each is answered (where there is anyone to answer)
//! with the layer's JSON shape in an HTTP client's words, and a retry
//! with the same key runs the handler again at once instead of meeting
//! 409 until the lease runs out.
//!
//! The refused `COMMIT` is a deferred foreign key, which PostgreSQL and
//! SQLite have (`DEFERRABLE INITIALLY DEFERRED`); MariaDB checks every
//! constraint at once, so its `COMMIT` cannot be refused this way, and the
//! other failures cover it. The response cannot be stored in a PostgreSQL
//! transaction that a failed statement of the handler's aborted; the
//! other backends keep such a transaction going.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing;
use common::{Db, TestBackend};
use stateguard::ddl::Dialect;
use stateguard::idempotency;
use stateguard::idempotency::layer::Service;
use stateguard::idempotency::layer::{Idempotent, IdempotentTx};

mod sqlite {
    crate::backend_tests!(@in Sqlite, Tests:
        "layer_commit_refused" => a_refused_commit_frees_the_key,
        "layer_body_broken" => a_broken_body_frees_the_key,
        "layer_dropped" => a_dropped_or_panicking_request_frees_its_key,
    );
}

mod postgres {
    crate::backend_tests!(@in Postgres, Tests:
        "layer_commit_refused" => a_refused_commit_frees_the_key,
        "layer_body_broken" => a_broken_body_frees_the_key,
        "layer_dropped" => a_dropped_or_panicking_request_frees_its_key,
        "layer_store_refused" => a_response_that_cannot_be_stored_frees_the_key,
    );
}

mod mysql {
    crate::backend_tests!(@in Mysql, Tests:
        "layer_body_broken" => a_broken_body_frees_the_key,
        "layer_dropped" => a_dropped_or_panicking_request_frees_its_key,
    );
}

/// How the handler behaves on its first call; later calls succeed.
#[derive(Clone, Copy)]
enum First {
    /// Writes a child of a parent that does not exist: the deferred
    /// foreign key refuses the `COMMIT`.
    Orphan,
    /// Answers 201 with a body whose stream fails.
    BrokenBody,
    /// Never answers (until its future is dropped).
    Hang,
    /// Panics.
    Panic,
    /// Runs a statement that fails, which aborts a PostgreSQL transaction,
    /// and answers 201 all the same: the response cannot be stored.
    Aborted,
}

/// The store's table, and `parents` (row 1) with their `children`,
/// checked at `COMMIT`.
async fn tables<DB: TestBackend>(db: &Db<DB>) {
    let children = match DB::DIALECT {
        Dialect::MySql => "CREATE TABLE children (parent_id BIGINT NOT NULL)",
        _ => {
            "CREATE TABLE children (parent_id BIGINT NOT NULL REFERENCES parents (id) \
             DEFERRABLE INITIALLY DEFERRED)"
        }
    };
    let mut conn = db.pool.acquire().await.unwrap();
    for statement in [
        "CREATE TABLE parents (id BIGINT PRIMARY KEY)",
        "INSERT INTO parents (id) VALUES (1)",
        children,
    ] {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
    for statement in idempotency::ddl(DB::DIALECT) {
        DB::execute(&mut conn, statement, &[]).await.unwrap();
    }
}

async fn children<DB: TestBackend>(db: &Db<DB>) -> i64 {
    let mut conn = db.pool.acquire().await.unwrap();
    let (n,): (i64,) = DB::fetch_one(&mut conn, "SELECT COUNT(*) FROM children", &[])
        .await
        .unwrap();
    n
}

/// Adds a child in the claim's transaction; the first call does as
/// `first` says.
async fn adopt<DB: TestBackend>(
    calls: Arc<AtomicUsize>,
    first: First,
    mut tx: IdempotentTx<DB>,
) -> Response
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
    let orphan = call == 1 && matches!(first, First::Orphan);
    let insert = match orphan {
        true => "INSERT INTO children (parent_id) VALUES (99)",
        false => "INSERT INTO children (parent_id) VALUES (1)",
    };
    sqlx::query(insert).execute(&mut **tx).await.unwrap();
    match (call, first) {
        (1, First::Hang) => std::future::pending().await,
        (1, First::Panic) => panic!("the handler panics"),
        (1, First::Aborted) => {
            let failed = sqlx::query("SELECT CAST('x' AS INTEGER)")
                .execute(&mut **tx)
                .await;
            assert!(failed.is_err());
            (StatusCode::CREATED, "{}").into_response()
        }
        (1, First::BrokenBody) => {
            let broken = futures_util::stream::once(async {
                Err::<Bytes, _>(std::io::Error::other("the body's stream broke"))
            });
            (StatusCode::CREATED, Body::from_stream(broken)).into_response()
        }
        _ => (StatusCode::CREATED, format!(r#"{{"call":{call}}}"#)).into_response(),
    }
}

/// `POST /children` behind the layer; a request that finds its key in
/// progress waits for it up to 10 s (a freed key is taken at once).
fn router<DB: TestBackend>(db: &Db<DB>, calls: Arc<AtomicUsize>, first: First) -> Router
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    let layer =
        Idempotent::new(db.pool.clone(), "POST /children").wait_for(Duration::from_secs(10));
    Router::new().route(
        "/children",
        routing::post(move |tx: IdempotentTx<DB>| adopt::<DB>(calls.clone(), first, tx))
            .layer(layer),
    )
}

fn request(key: &str) -> Request<Body> {
    Request::post("/children")
        .header("idempotency-key", key)
        .body(Body::from(r#"{"name":"ada"}"#))
        .unwrap()
}

/// The response is 500 with the layer's shape, `{"error", "code":
/// "store_failed"}`, whose sentence speaks of the request and its key,
/// not of the library's wins and effects.
async fn assert_store_failed(response: Response) {
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let object = json.as_object().unwrap();
    assert_eq!(object.len(), 2, "{json}");
    assert_eq!(object["code"], "store_failed");
    let error = object["error"].as_str().unwrap();
    assert_eq!(
        error,
        "the request failed and nothing of it was saved; retry it with the same Idempotency-Key"
    );
    for word in ["win", "effect", "transaction", "commit"] {
        assert!(!error.to_lowercase().contains(word), "{error}");
    }
}

/// The retry runs the handler again (its `call`th call) and succeeds;
/// the one after it replays.
async fn assert_retry_runs(mut app: Router, calls: &AtomicUsize, key: &str, call: usize) {
    let retried = app.call(request(key)).await.unwrap();
    assert_eq!(retried.status(), StatusCode::CREATED);
    assert!(retried.headers().get("idempotent-replayed").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), call);
    let replayed = app.call(request(key)).await.unwrap();
    assert_eq!(replayed.status(), StatusCode::CREATED);
    assert_eq!(replayed.headers()["idempotent-replayed"], "true");
    assert_eq!(calls.load(Ordering::SeqCst), call);
}

struct Tests<DB>(std::marker::PhantomData<DB>);

impl<DB: TestBackend> Tests<DB>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
{
    /// The work's `COMMIT` is refused (a deferred foreign key): 500
    /// `store_failed`, nothing of the work kept, and the retry right after
    /// runs the handler again and succeeds.
    async fn a_refused_commit_frees_the_key(db: Db<DB>) {
        tables(&db).await;
        let calls = Arc::new(AtomicUsize::new(0));
        // No waiting here: a key left running is 409 at once.
        let layer = Idempotent::new(db.pool.clone(), "POST /children");
        let handler_calls = calls.clone();
        let mut app = Router::new().route(
            "/children",
            routing::post(move |tx: IdempotentTx<DB>| {
                adopt::<DB>(handler_calls.clone(), First::Orphan, tx)
            })
            .layer(layer),
        );
        let refused = app.call(request("k-commit")).await.unwrap();
        assert_store_failed(refused).await;
        assert_eq!(children(&db).await, 0);
        assert_retry_runs(app, &calls, "k-commit", 2).await;
        assert_eq!(children(&db).await, 1);
    }

    /// A response whose body breaks while the layer reads it to store it:
    /// 500 `store_failed`, the work rolled back, and the retry runs.
    async fn a_broken_body_frees_the_key(db: Db<DB>) {
        tables(&db).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let mut app = router(&db, calls.clone(), First::BrokenBody);
        let broken = app.call(request("k-body")).await.unwrap();
        assert_store_failed(broken).await;
        assert_eq!(children(&db).await, 0);
        assert_retry_runs(app, &calls, "k-body", 2).await;
        assert_eq!(children(&db).await, 1);
    }

    /// The handler leaves its PostgreSQL transaction aborted and answers
    /// 201: storing the response fails, 500 `store_failed`, and the retry
    /// runs.
    async fn a_response_that_cannot_be_stored_frees_the_key(db: Db<DB>) {
        tables(&db).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let mut app = router(&db, calls.clone(), First::Aborted);
        let refused = app.call(request("k-aborted")).await.unwrap();
        assert_store_failed(refused).await;
        assert_eq!(children(&db).await, 0);
        assert_retry_runs(app, &calls, "k-aborted", 2).await;
        assert_eq!(children(&db).await, 1);
    }

    /// A request whose future is dropped while its handler runs (a timeout
    /// layer, a client gone away), and one whose handler panics, free their
    /// keys: the retry, waiting for a running request, gets the key and
    /// runs the handler, where a key left running would keep it waiting
    /// past its 10 s and answer 409.
    async fn a_dropped_or_panicking_request_frees_its_key(db: Db<DB>) {
        tables(&db).await;
        for (first, key) in [(First::Hang, "k-dropped"), (First::Panic, "k-panic")] {
            let calls = Arc::new(AtomicUsize::new(0));
            let app = router(&db, calls.clone(), first);
            let mut first_app = app.clone();
            let running = tokio::spawn(async move { first_app.call(request(key)).await });
            while calls.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            running.abort();
            // Dropped (or unwound), with the handler's work.
            assert!(running.await.is_err());
            assert_retry_runs(app, &calls, key, 2).await;
        }
        assert_eq!(children(&db).await, 2);
    }
}
