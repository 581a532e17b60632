//! The whole loop of the README, with the examples' own binaries on
//! SQLite and the real NATS JetStream server: `payouts_api` writes
//! `payout.created` with each new payout and `emit`s `payout.paid` /
//! `payout.failed` with the webhooks' moves; `outbox_relay --drain`
//! publishes them; `payouts_consumer --drain` records one notification per
//! event. A replayed request, a webhook delivered twice and a late webhook
//! add no event; a second relay and consumer pass add nothing.
//!
//! It owns the stream `PAYOUTS` (subjects `payout.>`) while it runs: it
//! deletes it before and after.

use std::process::{Command, Stdio};

use async_nats::jetstream;
use sqlx::SqlitePool;

use crate::common::server_url;
use crate::payouts_api_crash::{Service, example_binary, runtime, service_binary};

const BODY: &str = r#"{"amount_cents":1000,"currency":"EUR","recipient":"acct_1"}"#;

/// Runs an example to its end with `--drain`, and says what it printed.
fn drain(example: &str, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(example_binary(example));
    command
        .arg("--drain")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run the example");
    assert!(output.status.success(), "{example}: {}", output.status);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// How many messages the relay's lines say it published.
fn published(relayed: &str) -> usize {
    relayed
        .lines()
        .filter_map(|line| {
            line.strip_prefix("published ")?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum()
}

async fn delete_stream(nats: &str) {
    let context = jetstream::new(async_nats::connect(nats).await.expect("the NATS server"));
    let _ = context.delete_stream("PAYOUTS").await;
}

#[test]
fn the_readme_loop_delivers_each_event_once() {
    let Some(nats) = server_url("STATEGUARD_NATS_URL", "outbox_loop") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let api_db = dir.path().join("api.db");
    let consumer_db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("consumer.db").display()
    );
    let api_url = format!("sqlite://{}", api_db.display());
    runtime().block_on(delete_stream(&nats));
    let env = [
        ("NATS_URL", nats.as_str()),
        ("DATABASE_URL", consumer_db.as_str()),
    ];
    // The consumer makes the stream and its durable consumer.
    drain("payouts_consumer", &env);

    let service = Service::start(
        &service_binary(),
        &[("SQLITE_PATH", api_db.display().to_string())],
        None,
    );
    let base = service.base.clone();
    let (paid, failed) = runtime().block_on(async {
        let client = reqwest::Client::new();
        let mut ids = Vec::new();
        for key in ["k-1", "k-2", "k-3", "k-1"] {
            let response = client
                .post(format!("{base}/payouts"))
                .header("Idempotency-Key", key)
                .body(BODY)
                .send()
                .await
                .expect("POST /payouts");
            assert!(response.status().is_success(), "{}", response.status());
            let body: serde_json::Value = response.json().await.expect("a JSON body");
            ids.push(body["id"].as_str().expect("an id").to_owned());
        }
        assert_eq!(ids[0], ids[3], "the retry replays");
        let events = [
            ("evt-1", "payout.paid", &ids[0]),
            ("evt-1", "payout.paid", &ids[0]),
            ("evt-2", "payout.failed", &ids[1]),
            ("evt-3", "payout.failed", &ids[0]),
        ];
        for (event, kind, payout) in events {
            let body = serde_json::json!({ "id": event, "type": kind, "payout_id": payout });
            let response = client
                .post(format!("{base}/webhooks/bank"))
                .json(&body)
                .send()
                .await
                .expect("POST /webhooks/bank");
            assert!(response.status().is_success(), "{}", response.status());
        }
        (ids[0].clone(), ids[1].clone())
    });
    drop(service);

    let relay_env = [
        ("NATS_URL", nats.as_str()),
        ("DATABASE_URL", api_url.as_str()),
    ];
    // Each payout's `payout.created` goes before its `payout.paid`: one
    // pass takes a row's first unpublished message, so it takes two.
    let relayed = drain("outbox_relay", &relay_env);
    assert_eq!(published(&relayed), 5, "{relayed}");
    let consumed = drain("payouts_consumer", &env);
    assert_eq!(consumed.matches("notified ").count(), 5, "{consumed}");

    runtime().block_on(async {
        let pool = SqlitePool::connect(&consumer_db).await.expect("the consumer's database");
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT message_id, topic, payload FROM notifications ORDER BY topic, message_id",
        )
        .fetch_all(&pool)
        .await
        .expect("the notifications");
        let topics: Vec<&str> = rows.iter().map(|(_, topic, _)| topic.as_str()).collect();
        assert_eq!(
            topics,
            ["payout.created", "payout.created", "payout.created", "payout.failed", "payout.paid"]
        );
        let paid_row = rows.iter().find(|(_, topic, _)| topic == "payout.paid").unwrap();
        assert_eq!(paid_row.0, format!("api_payouts.status:{paid}:paid:1"));
        let payload: serde_json::Value = serde_json::from_str(&paid_row.2).unwrap();
        assert_eq!(
            payload,
            serde_json::json!({ "id": paid, "amount_cents": 1000, "currency": "EUR", "recipient": "acct_1" })
        );
        let failed_row = rows.iter().find(|(_, topic, _)| topic == "payout.failed").unwrap();
        assert_eq!(failed_row.0, format!("api_payouts.status:{failed}:failed:1"));
        pool.close().await;
    });

    // Nothing is due, nothing is new.
    let relayed = drain("outbox_relay", &relay_env);
    assert_eq!(published(&relayed), 0, "{relayed}");
    let consumed = drain("payouts_consumer", &env);
    assert_eq!(consumed.matches("notified ").count(), 0, "{consumed}");
    runtime().block_on(delete_stream(&nats));
}
