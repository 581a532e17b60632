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

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

const LEASE_MS: u64 = 1000;
const BODY: &str = r#"{"amount_cents":1000,"currency":"EUR","recipient":"acct_1"}"#;

fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// The example's binary, built (or found up to date) by cargo.
fn service_binary() -> std::path::PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", "payouts_api"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build --example payouts_api failed");
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/<profile>/examples/payouts_api
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    profile.join("examples").join("payouts_api")
}

/// The service process, killed and reaped if the test panics.
struct Service {
    child: Child,
    lines: Receiver<String>,
    base: String,
}

impl Service {
    fn start(binary: &std::path::Path, env: &[(&str, String)], crash: Option<&str>) -> Self {
        let mut command = Command::new(binary);
        command
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
        };
        let line = service.wait_for("listening on ");
        service.base = line.trim_start_matches("listening on ").to_owned();
        service
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

fn runtime() -> tokio::runtime::Runtime {
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
fn kill_mid_request_then_retry(env: Vec<(&str, String)>) {
    let binary = service_binary();
    let restart: Vec<(&str, String)> = env
        .iter()
        .cloned()
        .chain([("KEEP_DATA", "1".to_owned())])
        .collect();

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

#[test]
fn sqlite_service_survives_kills_mid_request() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("payouts_api.db");
    kill_mid_request_then_retry(vec![("SQLITE_PATH", path.display().to_string())]);
}

fn server(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("STATEGUARD_REQUIRE_SERVERS").map_or(true, |v| v != "1"),
                "{var} is unset but STATEGUARD_REQUIRE_SERVERS=1: `{test}` needs that server"
            );
            say(&format!("skipped `{test}`: {var} is unset"));
            None
        }
    }
}

#[test]
fn postgres_service_survives_kills_mid_request() {
    let Some(url) = server("STATEGUARD_POSTGRES_URL", "postgres_service_survives_kills") else {
        return;
    };
    kill_mid_request_then_retry(vec![("DATABASE_URL", url)]);
}

#[test]
fn mariadb_service_survives_kills_mid_request() {
    let Some(url) = server("STATEGUARD_MYSQL_URL", "mariadb_service_survives_kills") else {
        return;
    };
    kill_mid_request_then_retry(vec![("DATABASE_URL", url)]);
}
