//! `examples/payouts_api` killed with SIGKILL mid-request: between the
//! payout's insert and the commit, and between the commit and the response.
//! After a restart, a retry with the same key finds exactly one payout: made
//! afresh after the first kill (nothing of the first attempt committed, and
//! the key's lease ran out), replayed after the second.
//!
//! The service is the example's own binary (`cargo build --example
//! payouts_api`), started with `ADDR=127.0.0.1:0`, a short
//! `IDEMPOTENCY_LEASE_MS` and `PAYOUTS_API_CRASH`, at which point it prints
//! `crash point …` and waits for the kill.
//!
//! It also holds what every example promises about data: a restart keeps
//! it, only `--reset` drops it, and only what the example made (the
//! service, `examples/payouts` and `examples/recovery`).

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use crate::common::server_url;

const LEASE_MS: u64 = 1000;
const BODY: &str = r#"{"amount_cents":1000,"currency":"EUR","recipient":"acct_1"}"#;

/// The service's binary, built (or found up to date) by cargo.
pub(crate) fn service_binary() -> std::path::PathBuf {
    example_binary("payouts_api")
}

/// An example's binary, built (or found up to date) by cargo.
pub(crate) fn example_binary(name: &str) -> std::path::PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build --example {name} failed");
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/<profile>/examples/payouts_api
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    profile.join("examples").join(name)
}

/// The service process, killed and reaped if the test panics.
pub(crate) struct Service {
    child: Child,
    lines: Receiver<String>,
    pub(crate) base: String,
    /// What it printed before it listened: which tables it created.
    preamble: Vec<String>,
}

impl Service {
    pub(crate) fn start(
        binary: &std::path::Path,
        env: &[(&str, String)],
        crash: Option<&str>,
    ) -> Self {
        Service::start_with(binary, env, crash, &[])
    }

    fn start_with(
        binary: &std::path::Path,
        env: &[(&str, String)],
        crash: Option<&str>,
        args: &[&str],
    ) -> Self {
        let mut command = Command::new(binary);
        command
            .args(args)
            .env("ADDR", "127.0.0.1:0")
            .env("IDEMPOTENCY_LEASE_MS", LEASE_MS.to_string())
            .env_remove("PAYOUTS_API_CRASH")
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
        if let Some(point) = crash {
            command.env("PAYOUTS_API_CRASH", point);
        }
        let mut child = command.spawn().expect("start the service");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut service = Service {
            child,
            lines,
            base: String::new(),
            preamble: Vec::new(),
        };
        loop {
            let line = service.wait_for("");
            match line.strip_prefix("listening on ") {
                Some(base) => {
                    service.base = base.to_owned();
                    return service;
                }
                None => service.preamble.push(line),
            }
        }
    }

    /// Whether it said it created the tables `tables` (all of them, or
    /// none: "tables kept as they were").
    fn created(&self) -> &str {
        self.preamble
            .iter()
            .find(|line| line.starts_with("created tables") || line.starts_with("tables kept"))
            .map_or("", String::as_str)
    }

    /// The first line that starts with `prefix`, within 60 seconds.
    fn wait_for(&mut self, prefix: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => {
                    let status = self.child.try_wait();
                    panic!("the service never said {prefix:?} ({e}; {status:?})");
                }
            }
        }
    }

    fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL the service");
        let status = self.child.wait().expect("reap the service");
        assert_eq!(status.signal(), Some(9), "{status}");
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `POST /payouts` with `key`, sent from a thread of its own: the answer,
/// or `None` when the connection died.
fn post_in_background(
    base: &str,
    key: &str,
) -> std::thread::JoinHandle<Option<(u16, bool, String)>> {
    let (url, key) = (format!("{base}/payouts"), key.to_owned());
    std::thread::spawn(move || {
        runtime().block_on(async {
            let response = reqwest::Client::new()
                .post(url)
                .header("Idempotency-Key", key)
                .body(BODY)
                .send()
                .await
                .ok()?;
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            Some((status, replayed, response.text().await.ok()?))
        })
    })
}

fn post(base: &str, key: &str) -> (u16, bool, String) {
    post_in_background(base, key)
        .join()
        .expect("the client thread")
        .expect("an answer")
}

/// `GET /payouts/{id}` of the payout `body` describes: the status code.
fn get_status(base: &str, body: &str) -> u16 {
    let id = serde_json::from_str::<serde_json::Value>(body).expect("a JSON body")["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let url = format!("{base}/payouts/{id}");
    runtime().block_on(async {
        let response = reqwest::get(url).await.expect("GET the payout");
        response.status().as_u16()
    })
}

fn count_payouts(base: &str, body: &str) -> String {
    let id = serde_json::from_str::<serde_json::Value>(body).expect("a JSON body")["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let url = format!("{base}/payouts/{id}");
    runtime().block_on(async {
        let response = reqwest::get(url).await.expect("GET the payout");
        assert_eq!(response.status().as_u16(), 200);
        response.text().await.expect("a body")
    })
}

/// Both kills, then the retries, against the database `env` points at.
fn kill_mid_request_then_retry(env: Vec<(&'static str, String)>) {
    let binary = service_binary();
    // A restart keeps the data: no flag is needed.
    let restart = env.clone();

    // 1. Killed between the insert and the commit: nothing committed.
    let mut service = Service::start(&binary, &env, Some("before_commit"));
    let pending = post_in_background(&service.base, "crash-before-commit");
    service.wait_for("crash point");
    service.sigkill();
    assert_eq!(pending.join().expect("the client thread"), None);
    let service = Service::start(&binary, &restart, None);
    // The key's lease runs out, so the retry owns the key again.
    std::thread::sleep(Duration::from_millis(LEASE_MS + 500));
    let (status, replayed, fresh) = post(&service.base, "crash-before-commit");
    assert_eq!((status, replayed), (201, false), "{fresh}");
    let view = count_payouts(&service.base, &fresh);
    assert!(view.contains(r#""status":"pending""#), "{view}");
    let (status, replayed, again) = post(&service.base, "crash-before-commit");
    assert_eq!(
        (status, replayed, again.as_str()),
        (201, true, fresh.as_str())
    );
    service.sigkill();

    // 2. Killed between the commit and the response: the retry replays.
    let mut service = Service::start(&binary, &restart, Some("after_commit"));
    let pending = post_in_background(&service.base, "crash-after-commit");
    service.wait_for("crash point");
    service.sigkill();
    assert_eq!(pending.join().expect("the client thread"), None);
    let service = Service::start(&binary, &restart, None);
    let (status, replayed, replay) = post(&service.base, "crash-after-commit");
    assert_eq!((status, replayed), (201, true), "{replay}");
    count_payouts(&service.base, &replay);
    // One payout per key: the first kill's attempt left nothing behind.
    let (status, _, again) = post(&service.base, "crash-before-commit");
    assert_eq!((status, again.as_str()), (201, fresh.as_str()));
    assert_ne!(fresh, replay);
    service.sigkill();
}

const ALL: &str =
    "created tables: api_payouts, stateguard_idempotency, stateguard_inbox, stateguard_outbox";
const KEPT: &str = "tables kept as they were";

/// Started twice and a third time with `--reset`, on the database `env`
/// points at (empty at first): the restart keeps the payout and its key,
/// and only `--reset` drops them.
fn restart_keeps_data(env: Vec<(&'static str, String)>) {
    let binary = service_binary();
    let service = Service::start(&binary, &env, None);
    assert_eq!(service.created(), ALL);
    let (status, replayed, first) = post(&service.base, "restart-1");
    assert_eq!((status, replayed), (201, false), "{first}");
    service.sigkill();

    let service = Service::start(&binary, &env, None);
    assert_eq!(service.created(), KEPT);
    assert_eq!(get_status(&service.base, &first), 200);
    let (status, replayed, again) = post(&service.base, "restart-1");
    assert_eq!(
        (status, replayed, again.as_str()),
        (201, true, first.as_str())
    );
    service.sigkill();

    let service = Service::start_with(&binary, &env, None, &["--reset"]);
    assert_eq!(service.created(), ALL);
    assert_eq!(get_status(&service.base, &first), 404);
    let (status, replayed, fresh) = post(&service.base, "restart-1");
    assert_eq!((status, replayed), (201, false), "{fresh}");
    assert_ne!(fresh, first);
    service.sigkill();
}

/// A path for the service's SQLite file in a directory of the test's own.
fn sqlite_env(dir: &tempfile::TempDir) -> Vec<(&'static str, String)> {
    let path = dir.path().join("payouts_api.db");
    vec![("SQLITE_PATH", path.display().to_string())]
}

#[test]
fn sqlite_service_survives_kills_mid_request() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    kill_mid_request_then_retry(sqlite_env(&dir));
}

#[test]
fn sqlite_service_keeps_its_data_across_restarts() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    restart_keeps_data(sqlite_env(&dir));
}

/// An empty schema of the test's own, `drop` then `create` run on `url`'s
/// database, and the URL that makes it the connection's current schema.
pub(crate) fn postgres_schema(
    url: &str,
    name: &str,
    drop: &'static str,
    create: &'static str,
) -> String {
    runtime().block_on(async {
        let pool = sqlx::PgPool::connect(url)
            .await
            .expect("connect to PostgreSQL");
        sqlx::query(drop)
            .execute(&pool)
            .await
            .expect("drop the schema");
        sqlx::query(create)
            .execute(&pool)
            .await
            .expect("create the schema");
        pool.close().await;
    });
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{name}")
}

/// An empty database of the test's own on `url`'s server, and the URL
/// that names it.
pub(crate) fn mariadb_database(
    url: &str,
    name: &str,
    drop: &'static str,
    create: &'static str,
) -> String {
    runtime().block_on(async {
        let pool = sqlx::MySqlPool::connect(url)
            .await
            .expect("connect to MariaDB");
        sqlx::query(drop)
            .execute(&pool)
            .await
            .expect("drop the database");
        sqlx::query(create)
            .execute(&pool)
            .await
            .expect("create the database");
        pool.close().await;
    });
    let (server, query) = url
        .split_once('?')
        .map_or((url, None), |(s, q)| (s, Some(q)));
    let root = server.rsplit_once('/').map_or(server, |(root, _)| root);
    match query {
        Some(query) => format!("{root}/{name}?{query}"),
        None => format!("{root}/{name}"),
    }
}

/// `body` on a PostgreSQL schema of its own (`drop`, then `create`, name
/// it), skipped without a server.
pub(crate) fn on_postgres(
    test: &str,
    schema: &str,
    [drop, create]: [&'static str; 2],
    body: fn(Vec<(&'static str, String)>),
) {
    if let Some(url) = server_url("STATEGUARD_POSTGRES_URL", test) {
        body(vec![(
            "DATABASE_URL",
            postgres_schema(&url, schema, drop, create),
        )]);
    }
}

/// `body` on a MariaDB database of its own, skipped without a server.
pub(crate) fn on_mariadb(
    test: &str,
    database: &str,
    [drop, create]: [&'static str; 2],
    body: fn(Vec<(&'static str, String)>),
) {
    if let Some(url) = server_url("STATEGUARD_MYSQL_URL", test) {
        body(vec![(
            "DATABASE_URL",
            mariadb_database(&url, database, drop, create),
        )]);
    }
}

#[test]
fn postgres_service_survives_kills_mid_request() {
    on_postgres(
        "postgres_service_survives_kills",
        "sg_api_crash",
        [
            "DROP SCHEMA IF EXISTS sg_api_crash CASCADE",
            "CREATE SCHEMA sg_api_crash",
        ],
        kill_mid_request_then_retry,
    );
}

#[test]
fn postgres_service_keeps_its_data_across_restarts() {
    on_postgres(
        "postgres_service_keeps_its_data",
        "sg_api_restart",
        [
            "DROP SCHEMA IF EXISTS sg_api_restart CASCADE",
            "CREATE SCHEMA sg_api_restart",
        ],
        restart_keeps_data,
    );
}

#[test]
fn mariadb_service_survives_kills_mid_request() {
    on_mariadb(
        "mariadb_service_survives_kills",
        "sg_api_crash",
        [
            "DROP DATABASE IF EXISTS sg_api_crash",
            "CREATE DATABASE sg_api_crash",
        ],
        kill_mid_request_then_retry,
    );
}

#[test]
fn mariadb_service_keeps_its_data_across_restarts() {
    on_mariadb(
        "mariadb_service_keeps_its_data",
        "sg_api_restart",
        [
            "DROP DATABASE IF EXISTS sg_api_restart",
            "CREATE DATABASE sg_api_restart",
        ],
        restart_keeps_data,
    );
}

#[test]
fn a_mariadb_url_without_a_database_is_refused() {
    let Some(url) = server_url("STATEGUARD_MYSQL_URL", "a_mariadb_url_without_a_database") else {
        return;
    };
    let root = url
        .split('?')
        .next()
        .and_then(|u| u.rsplit_once('/'))
        .map_or(url.as_str(), |(root, _)| root);
    let output = Command::new(service_binary())
        .env("ADDR", "127.0.0.1:0")
        .env("DATABASE_URL", root)
        .output()
        .expect("run the service");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("names no database"), "{stderr}");
}

/// `statements` on the MariaDB database `url` names, then the integer
/// `read` finds.
fn on_mariadb_url(url: &str, statements: &[&'static str], read: &'static str) -> i64 {
    runtime().block_on(async {
        let pool = sqlx::MySqlPool::connect(url)
            .await
            .expect("connect to MariaDB");
        for statement in statements {
            sqlx::query(*statement)
                .execute(&pool)
                .await
                .expect(statement);
        }
        let value: i64 = sqlx::query_scalar(read).fetch_one(&pool).await.expect(read);
        pool.close().await;
        value
    })
}

/// The integer `read` finds on PostgreSQL at `url`.
fn on_postgres_url(url: &str, read: &'static str) -> i64 {
    runtime().block_on(async {
        let pool = sqlx::PgPool::connect(url)
            .await
            .expect("connect to PostgreSQL");
        let value: i64 = sqlx::query_scalar(read).fetch_one(&pool).await.expect(read);
        pool.close().await;
        value
    })
}

/// The example `binary` run to its end with `args` on `url`.
fn run_example(binary: &std::path::Path, url: &str, args: &[&str]) -> std::process::Output {
    Command::new(binary)
        .args(args)
        .env("DATABASE_URL", url)
        .output()
        .expect("run the example")
}

/// Run with and without `--reset`, the example refuses: it did not create
/// a table of that name. `untouched` reads what must not change.
fn refuses_both_ways(binary: &std::path::Path, url: &str, untouched: impl Fn() -> i64) {
    let before = untouched();
    for args in [&[][..], &["--reset"][..]] {
        let output = run_example(binary, url, args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("did not create"), "{args:?}: {stderr}");
        assert_eq!(untouched(), before, "{args:?}");
    }
}

/// Runs the example `binary` on `url` and returns the rows `count` finds.
fn rows_after(binary: &std::path::Path, url: &str, args: &[&str], count: impl Fn() -> i64) -> i64 {
    let output = run_example(binary, url, args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    count()
}

/// The payout run (`examples/payouts`) pointed at a MariaDB database that
/// holds a `payouts` table of someone else's: it refuses, with and without
/// `--reset`, and the table keeps its rows.
#[test]
fn the_payouts_example_leaves_a_foreign_payouts_table_alone() {
    let Some(url) = server_url("STATEGUARD_MYSQL_URL", "the_payouts_example_leaves") else {
        return;
    };
    let url = mariadb_database(
        &url,
        "sg_foreign_payouts",
        "DROP DATABASE IF EXISTS sg_foreign_payouts",
        "CREATE DATABASE sg_foreign_payouts",
    );
    const THEIRS: &str =
        "SELECT COUNT(*) FROM payouts WHERE status = 'pending' AND owner = 'theirs'";
    let made = on_mariadb_url(
        &url,
        &[
            "CREATE TABLE payouts (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL, \
             status VARCHAR(32) NOT NULL, owner VARCHAR(16) NOT NULL)",
            "INSERT INTO payouts VALUES (1, 1000, 'pending', 'theirs'), \
             (2, 2000, 'pending', 'theirs'), (3, 3000, 'pending', 'theirs')",
        ],
        THEIRS,
    );
    assert_eq!(made, 3);
    refuses_both_ways(&example_binary("payouts"), &url, || {
        on_mariadb_url(&url, &[], THEIRS)
    });
}

/// The payout run on PostgreSQL keeps earlier runs' payouts: each run adds
/// its own hundred, and only `--reset` starts from none.
#[test]
fn the_payouts_example_keeps_earlier_runs() {
    let Some(url) = server_url("STATEGUARD_POSTGRES_URL", "the_payouts_example_keeps") else {
        return;
    };
    let binary = example_binary("payouts");
    let count = || on_postgres_url(&url, "SELECT COUNT(*) FROM stateguard_example.payouts");
    assert_eq!(rows_after(&binary, &url, &["--reset"], count), 100);
    assert_eq!(rows_after(&binary, &url, &[], count), 200);
    assert_eq!(rows_after(&binary, &url, &["--reset"], count), 100);
}

/// The crash-recovery run (`examples/recovery`) on a MariaDB database of
/// its own: it refuses a `bank_calls` table it did not make, then keeps
/// earlier runs' payouts, and only `--reset` starts from none.
#[test]
fn the_recovery_example_keeps_earlier_runs_and_others_tables() {
    let Some(url) = server_url("STATEGUARD_MYSQL_URL", "the_recovery_example_keeps") else {
        return;
    };
    let url = mariadb_database(
        &url,
        "sg_recovery_runs",
        "DROP DATABASE IF EXISTS sg_recovery_runs",
        "CREATE DATABASE sg_recovery_runs",
    );
    const THEIRS: &str = "SELECT COUNT(*) FROM bank_calls WHERE call_id = 7 AND note = 'theirs'";
    let made = on_mariadb_url(
        &url,
        &[
            "CREATE TABLE bank_calls (call_id BIGINT PRIMARY KEY, note TEXT)",
            "INSERT INTO bank_calls VALUES (7, 'theirs')",
        ],
        THEIRS,
    );
    assert_eq!(made, 1);
    let binary = example_binary("recovery");
    refuses_both_ways(&binary, &url, || on_mariadb_url(&url, &[], THEIRS));
    let left = on_mariadb_url(
        &url,
        &["DROP TABLE bank_calls"],
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = 'bank_calls'",
    );
    assert_eq!(left, 0);
    let count = || on_mariadb_url(&url, &[], "SELECT COUNT(*) FROM recovery_payouts");
    assert_eq!(rows_after(&binary, &url, &[], count), 50);
    assert_eq!(rows_after(&binary, &url, &[], count), 100);
    assert_eq!(rows_after(&binary, &url, &["--reset"], count), 50);
}

/// The minimal PostgreSQL service (`examples/payouts_pg`): 32 racing
/// `send`s of one payout give one `200` and 31 `409`s, and the bank is
/// called once; a restart keeps the payout.
#[test]
fn the_minimal_postgres_service_sends_each_payout_once() {
    let Some(url) = server_url("STATEGUARD_POSTGRES_URL", "the_minimal_postgres_service") else {
        return;
    };
    let url = postgres_schema(
        &url,
        "sg_api_minimal",
        "DROP SCHEMA IF EXISTS sg_api_minimal CASCADE",
        "CREATE SCHEMA sg_api_minimal",
    );
    let binary = example_binary("payouts_pg");
    let env = vec![("DATABASE_URL", url)];
    let service = Service::start(&binary, &env, None);
    let base = service.base.clone();
    let (created, statuses, view) = runtime().block_on(async {
        let client = reqwest::Client::new();
        let created = client
            .post(format!("{base}/payouts/7"))
            .send()
            .await
            .expect("create")
            .status()
            .as_u16();
        let mut sends = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let request = client.post(format!("{base}/payouts/7/send")).send();
            sends.spawn(async move { request.await.expect("send").status().as_u16() });
        }
        let statuses = sends.join_all().await;
        let view = client
            .get(format!("{base}/payouts/7"))
            .send()
            .await
            .expect("read")
            .text()
            .await
            .expect("a body");
        (created, statuses, view)
    });
    assert_eq!(created, 201);
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        31,
        "{statuses:?}"
    );
    let view: serde_json::Value = serde_json::from_str(&view).expect("JSON");
    assert_eq!(view["status"], "sent");
    assert_eq!(view["bank_calls"], 1);
    service.sigkill();

    let service = Service::start(&binary, &env, None);
    let base = service.base.clone();
    let status = runtime().block_on(async {
        let response = reqwest::get(format!("{base}/payouts/7"))
            .await
            .expect("read");
        let view: serde_json::Value = response.json().await.expect("JSON");
        view["status"].as_str().map(str::to_owned)
    });
    assert_eq!(status.as_deref(), Some("sent"));
    service.sigkill();
}
