//! The service: its routes, its tables and its payout machine, on any of
//! the three backends. `main.rs` serves it; `tests/examples/payouts_api.rs`
//! starts it on `127.0.0.1:0` and talks to it over real HTTP.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use sqlx::Pool;
use stateguard::bounds::Key;
use stateguard::console::{Console, ConsoleKey, Operator};
use stateguard::idempotency;
use stateguard::idempotency::layer::{IDEMPOTENT_REPLAYED, Idempotent, IdempotentTx};
use stateguard::inbox::{self, Received};
use stateguard::outbox::{self, Message};
use stateguard::{Backend, Error, Outcome, StateMachine, Stores, Tx};

/// A payout: created `pending`, then `paid` or `failed` as the bank's
/// first valid webhook says. Each move announces itself through the
/// outbox (`payout.paid`, `payout.failed`), in the move's own atomic act;
/// `POST /payouts` writes `payout.created` in its transaction.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "api_payouts",
    column = "status",
    key = "id",
    version = "version"
)]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(paid -> Paid, set(effects = "effects + 1"),
                 emit("payout.paid", payload(amount_cents, currency, recipient)))]
    #[transition(failed -> Failed,
                 emit("payout.failed", payload(amount_cents, currency, recipient)))]
    Pending,
    Paid,
    Failed,
}

/// The idempotency scope of `POST /payouts`: every client shares it (the
/// example has no accounts).
const SCOPE: &str = "payouts_api:POST /payouts";
/// The inbox consumer of the bank's webhooks.
const CONSUMER: &str = "bank-webhooks";

/// Where `POST /payouts` may stop the process, for the crash test: the
/// service writes `crash point <name>` to stdout there and waits to be
/// killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the payout's insert, before the commit.
    BeforeCommit,
    /// After the commit, before the response.
    AfterCommit,
}

impl CrashPoint {
    /// `PAYOUTS_API_CRASH=before_commit` or `after_commit`.
    pub fn from_env() -> Option<Self> {
        match std::env::var("PAYOUTS_API_CRASH").ok()?.as_str() {
            "before_commit" => Some(CrashPoint::BeforeCommit),
            "after_commit" => Some(CrashPoint::AfterCommit),
            _ => None,
        }
    }

    async fn reach(point: Option<CrashPoint>, here: CrashPoint) {
        if point == Some(here) {
            println!("crash point {here:?}");
            std::future::pending::<()>().await;
        }
    }
}

/// The service's state: its pool, the lease of an idempotency key, and the
/// crash point, if any.
pub struct App<DB: sqlx::Database> {
    pub pool: Pool<DB>,
    /// How long a request owns its key before a retry may take it over.
    pub lease: std::time::Duration,
    pub crash: Option<CrashPoint>,
    /// The operators' console's password (`OPS_PASSWORD`): the console is
    /// at `/ops` behind HTTP Basic authentication with it, and not served
    /// without one.
    pub ops_password: Option<String>,
}

impl<DB: sqlx::Database> App<DB> {
    /// The service on `pool`, with `IDEMPOTENCY_LEASE_MS` (default: the
    /// library's 60 s) and `PAYOUTS_API_CRASH` from the environment.
    pub fn from_env(pool: Pool<DB>) -> Self {
        let lease = std::env::var("IDEMPOTENCY_LEASE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(idempotency::DEFAULT_LEASE, std::time::Duration::from_millis);
        App {
            pool,
            lease,
            crash: CrashPoint::from_env(),
            ops_password: std::env::var("OPS_PASSWORD").ok().filter(|p| !p.is_empty()),
        }
    }
}

/// What the routes need of a backend.
pub trait ApiBackend: Backend {
    /// The payouts table and the two stores' tables.
    const SCHEMA: &'static [&'static str];
    /// A new payout: id, amount, currency, recipient.
    const INSERT: &'static str;
    /// A payout's status and version.
    const READ: &'static str;
    /// The dialect of the stores' DDL.
    const DIALECT: stateguard::ddl::Dialect;
    /// How many tables named `$1` the connection's database (or, on
    /// PostgreSQL, its current schema) holds: 0 or 1.
    const EXISTS: &'static str;
}

impl ApiBackend for sqlx::Sqlite {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Sqlite;
    const SCHEMA: &'static [&'static str] = &[
        "CREATE TABLE api_payouts (id TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL, \
         currency TEXT NOT NULL, recipient TEXT NOT NULL, status TEXT NOT NULL DEFAULT \
         'pending', version INTEGER NOT NULL DEFAULT 0, effects INTEGER NOT NULL DEFAULT 0)",
    ];
    const INSERT: &'static str =
        "INSERT INTO api_payouts (id, amount_cents, currency, recipient) VALUES (?1, ?2, ?3, ?4)";
    const READ: &'static str = "SELECT status, version FROM api_payouts WHERE id = ?1";
    const EXISTS: &'static str =
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1";
}

impl ApiBackend for sqlx::Postgres {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::Postgres;
    const SCHEMA: &'static [&'static str] = &[
        "CREATE TABLE api_payouts (id TEXT PRIMARY KEY, amount_cents BIGINT NOT NULL, \
         currency TEXT NOT NULL, recipient TEXT NOT NULL, status TEXT NOT NULL DEFAULT \
         'pending', version BIGINT NOT NULL DEFAULT 0, effects BIGINT NOT NULL DEFAULT 0)",
    ];
    const INSERT: &'static str =
        "INSERT INTO api_payouts (id, amount_cents, currency, recipient) VALUES ($1, $2, $3, $4)";
    const READ: &'static str = "SELECT status, version FROM api_payouts WHERE id = $1";
    const EXISTS: &'static str = "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name = $1";
}

impl ApiBackend for sqlx::MySql {
    const DIALECT: stateguard::ddl::Dialect = stateguard::ddl::Dialect::MySql;
    const SCHEMA: &'static [&'static str] = &[
        "CREATE TABLE api_payouts (id VARCHAR(40) PRIMARY KEY, amount_cents BIGINT NOT NULL, \
         currency VARCHAR(3) NOT NULL, recipient VARCHAR(255) NOT NULL, status VARCHAR(16) NOT \
         NULL DEFAULT 'pending', version BIGINT NOT NULL DEFAULT 0, effects BIGINT NOT NULL \
         DEFAULT 0)",
    ];
    const INSERT: &'static str =
        "INSERT INTO api_payouts (id, amount_cents, currency, recipient) VALUES (?, ?, ?, ?)";
    const READ: &'static str = "SELECT status, version FROM api_payouts WHERE id = ?";
    const EXISTS: &'static str = "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?";
}

/// The service's tables, each with the statements that create it: its
/// payouts, and the three stores' fixed-name tables.
fn tables<DB: ApiBackend>() -> [(&'static str, &'static [&'static str]); 4] {
    [
        ("api_payouts", DB::SCHEMA),
        ("stateguard_idempotency", idempotency::ddl(DB::DIALECT)),
        ("stateguard_inbox", inbox::ddl(DB::DIALECT)),
        ("stateguard_outbox", outbox::ddl(DB::DIALECT)),
    ]
}

/// What `--reset` drops: the service's four tables, and nothing else of
/// the database.
const DROP: [&str; 4] = [
    "DROP TABLE IF EXISTS api_payouts",
    "DROP TABLE IF EXISTS stateguard_idempotency",
    "DROP TABLE IF EXISTS stateguard_inbox",
    "DROP TABLE IF EXISTS stateguard_outbox",
];

/// Creates the service's tables that are missing, keeping those that
/// exist and what they hold; with `reset`, drops the four first. Returns
/// the names of the tables it created.
pub async fn prepare<DB: ApiBackend>(
    pool: &Pool<DB>,
    reset: bool,
) -> Result<Vec<&'static str>, sqlx::Error>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    String: Key<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut conn = pool.acquire().await?;
    if reset {
        for statement in DROP {
            sqlx::query(statement).execute(&mut *conn).await?;
        }
    }
    let mut created = Vec::new();
    for (table, ddl) in tables::<DB>() {
        let (present,): (i64,) = sqlx::query_as(DB::EXISTS)
            .bind(table.to_owned())
            .fetch_one(&mut *conn)
            .await?;
        if present == 0 {
            for statement in ddl {
                sqlx::query(*statement).execute(&mut *conn).await?;
            }
            created.push(table);
        }
    }
    Ok(created)
}

/// The routes.
pub fn router<DB>(app: App<DB>) -> Router
where
    DB: ApiBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: Key<DB> + for<'r> sqlx::Decode<'r, DB> + ConsoleKey<PayoutStatus, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    // Only a created payout is stored: a request refused as malformed,
    // like a failed one, frees its key.
    let idempotent = Idempotent::new(app.pool.clone(), SCOPE)
        .lease(app.lease)
        .store_headers([header::LOCATION, header::CONTENT_TYPE])
        .store_when(|status| status.is_success());
    let crash = app.crash;
    let ops = app.ops_password.clone().map(|password| {
        let console = Console::new(app.pool.clone())
            .machine::<PayoutStatus, String>()
            .stores(Stores::search_path());
        console
            .router()
            .layer(axum::middleware::from_fn(move |request, next| {
                operator(password.clone(), request, next)
            }))
    });
    let routes = Router::new()
        .route(
            "/payouts",
            post(create_payout::<DB>)
                .layer(idempotent)
                .layer(axum::middleware::from_fn(move |request, next| {
                    crash_after_commit(crash, request, next)
                })),
        )
        .route("/payouts/{id}", get(read_payout::<DB>))
        .route("/webhooks/bank", post(bank_webhook::<DB>))
        .with_state(Arc::new(app));
    match ops {
        Some(ops) => routes.nest("/ops", ops),
        None => routes,
    }
}

/// The console's door: HTTP Basic authentication with the password
/// given, whose user name becomes the console's operator. A browser asks
/// for both. One shared password lets anyone who has it type any name:
/// a real service names the operator from its own login.
async fn operator(
    password: String,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use base64::Engine;
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()
        })
        .and_then(|decoded| String::from_utf8(decoded).ok());
    let user = given.as_deref().and_then(|given| {
        let (user, typed) = given.split_once(':')?;
        let same = typed.len() == password.len()
            && typed
                .bytes()
                .zip(password.bytes())
                .fold(0, |acc, (a, b)| acc | (a ^ b))
                == 0;
        (same && !user.is_empty()).then(|| user.to_owned())
    });
    match user {
        Some(user) => {
            request.extensions_mut().insert(Operator::new(user));
            next.run(request).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"ops\"")],
            "the console needs a user name and the OPS_PASSWORD\n",
        )
            .into_response(),
    }
}

/// `POST /payouts`'s body.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NewPayout {
    pub amount_cents: i64,
    pub currency: String,
    pub recipient: String,
}

/// A payout as the API shows it.
#[derive(Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct PayoutView {
    pub id: String,
    pub status: String,
    /// The row's version: how many moves it has made.
    pub occurrence: i64,
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, axum::Json(body)).into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A new payout id: 16 random hex digits.
fn payout_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("po_{:016x}", hasher.finish())
}

/// `POST /payouts`: its business logic only. The [`Idempotent`] layer in
/// front of it reads the key, replays a completed request, answers 409 and
/// 422, and stores this response in `tx` with the payout, committing both.
async fn create_payout<DB>(
    State(app): State<Arc<App<DB>>>,
    mut tx: IdempotentTx<DB>,
    body: Bytes,
) -> Response
where
    DB: ApiBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let payout: NewPayout = match serde_json::from_slice(&body) {
        Ok(payout) => payout,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("malformed body: {e}")),
    };
    if payout.amount_cents <= 0 || payout.currency.len() != 3 || payout.recipient.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "amount_cents must be positive, currency three letters, recipient not empty",
        );
    }
    let id = payout_id();
    let view = PayoutView {
        id: id.clone(),
        status: "pending".to_owned(),
        occurrence: 0,
    };
    let work = async {
        sqlx::query(DB::INSERT)
            .bind(id.clone())
            .bind(payout.amount_cents)
            .bind(payout.currency.clone())
            .bind(payout.recipient.clone())
            .execute(&mut **tx)
            .await
            .map_err(|source| Error::Store {
                table: "api_payouts",
                call: "insert",
                source,
            })?;
        // `payout.created`, with the payout: it leaves if and only if the
        // payout commits. Its id and order key are those the payout's own
        // moves use (`emit`), so it goes out before `payout.paid`.
        let created = serde_json::json!({
            "id": id,
            "amount_cents": payout.amount_cents,
            "currency": payout.currency,
            "recipient": payout.recipient,
        })
        .to_string();
        let row = format!("api_payouts.status:{id}");
        let message_id = format!("{row}:pending:0");
        let message = Message {
            id: &message_id,
            topic: "payout.created",
            payload: created.as_bytes(),
        };
        outbox::enqueue(&mut *tx, &row, message).await?;
        Ok::<_, Error>(())
    };
    if let Err(e) = work.await {
        // Not stored: the layer rolls the work back and frees the key.
        return internal(e);
    }
    CrashPoint::reach(app.crash, CrashPoint::BeforeCommit).await;
    let mut response = json_response(
        StatusCode::CREATED,
        serde_json::to_vec(&view).unwrap_or_default(),
    );
    if let Ok(location) = HeaderValue::try_from(format!("/payouts/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// Stops the process after a new payout's commit, before its response
/// leaves, where `PAYOUTS_API_CRASH=after_commit` asks (the crash test).
async fn crash_after_commit(
    crash: Option<CrashPoint>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(request).await;
    let replayed = response.headers().contains_key(IDEMPOTENT_REPLAYED);
    if response.status() == StatusCode::CREATED && !replayed {
        CrashPoint::reach(crash, CrashPoint::AfterCommit).await;
    }
    response
}

async fn read_payout<DB>(State(app): State<Arc<App<DB>>>, Path(id): Path<String>) -> Response
where
    DB: ApiBackend,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i64: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let mut conn = match app.pool.acquire().await {
        Ok(conn) => conn,
        Err(e) => return internal(e),
    };
    let row = sqlx::query(DB::READ)
        .bind(id.clone())
        .fetch_optional(&mut *conn)
        .await;
    match row {
        Ok(Some(row)) => {
            use sqlx::Row;
            let (Ok(status), Ok(occurrence)) = (row.try_get::<String, _>(0), row.try_get(1)) else {
                return internal("unreadable payout row");
            };
            let view = PayoutView {
                id,
                status,
                occurrence,
            };
            (StatusCode::OK, axum::Json(view)).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no payout {id}")),
        Err(e) => internal(e),
    }
}

/// A delivery's transaction that a deadlock or a busy database rolled
/// back.
fn retryable<DB: Backend>(e: &Error) -> bool {
    match e {
        Error::Store { source, .. } | Error::Database { source, .. } => DB::is_retryable(source),
        other => other.is_retry_transaction(),
    }
}

/// The bank's webhook: `payout.paid` or `payout.failed` for a payout.
#[derive(Debug, Deserialize, Serialize)]
pub struct BankEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub payout_id: String,
}

async fn bank_webhook<DB>(State(app): State<Arc<App<DB>>>, body: Bytes) -> Response
where
    DB: ApiBackend,
    String: Key<DB>,
{
    let event: BankEvent = match serde_json::from_slice(&body) {
        Ok(event) => event,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("malformed event: {e}")),
    };
    let transition = match event.kind.as_str() {
        "payout.paid" => PayoutStatus::paid(),
        "payout.failed" => PayoutStatus::failed(),
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("unknown event type {other:?}"),
            );
        }
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let done = async {
            let mut tx = Tx::begin(&app.pool).await?;
            if inbox::receive(&mut tx, CONSUMER, &event.id).await? == Received::Duplicate {
                return Ok(Some("duplicate"));
            }
            match transition.apply(&mut tx, event.payout_id.clone()).await? {
                // The payout's effect (`effects + 1`) and the inbox row
                // commit together.
                Outcome::Applied(won) => {
                    // The effect is the move's own `effects + 1`: once
                    // committed, nothing is left to run.
                    let committed = tx.commit(won).await?;
                    drop(committed);
                    Ok(Some("applied"))
                }
                // Unknown payout: nothing is written, the inbox row rolls
                // back with the transaction.
                Outcome::NotFound => Ok(None),
                // Already paid or failed (a late or out-of-order event): the
                // message is consumed, the payout stays as the first valid
                // event left it.
                _ => {
                    tx.commit(()).await?;
                    Ok(Some("ignored"))
                }
            }
        }
        .await;
        match done {
            Ok(None) => {
                return error(
                    StatusCode::NOT_FOUND,
                    format!("no payout {}", event.payout_id),
                );
            }
            // `applied`, `duplicate` (delivered before) or `ignored` (the
            // payout had already left `pending`).
            Ok(Some(result)) => {
                let body = serde_json::json!({ "event": event.id, "result": result });
                return (StatusCode::OK, axum::Json(body)).into_response();
            }
            // A deadlock or busy database rolled the delivery back: it
            // consumed nothing, so it runs again.
            Err(e) if retryable::<DB>(&e) && attempt < 5 => continue,
            Err(e) => return internal(e),
        }
    }
}
