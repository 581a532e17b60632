//! Metrics (the `metrics` feature): outcomes, attempts and recovery passes
//! counted through the `metrics` facade, seen by a recorder of the test's
//! own.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::TransferStatus;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Every counter's total, every gauge's last value and every histogram's
/// values, by metric name and labels.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<BTreeMap<String, Vec<f64>>>>);

struct Handle {
    seen: Seen,
    name: String,
}

impl Seen {
    fn handle(&self, key: &Key) -> Arc<Handle> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        Arc::new(Handle {
            seen: self.clone(),
            name: format!("{}{{{}}}", key.name(), labels.join(",")),
        })
    }

    fn get(&self, name: &str) -> Vec<f64> {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

impl Handle {
    fn update(&self, f: impl FnOnce(&mut Vec<f64>)) {
        f(self
            .seen
            .0
            .lock()
            .unwrap()
            .entry(self.name.clone())
            .or_default());
    }
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        self.update(|v| match v.first_mut() {
            Some(total) => *total += value as f64,
            None => v.push(value as f64),
        });
    }

    fn absolute(&self, value: u64) {
        self.update(|v| *v = vec![value as f64]);
    }
}

impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        self.update(|v| v.push(value));
    }

    fn decrement(&self, value: f64) {
        self.update(|v| v.push(-value));
    }

    fn set(&self, value: f64) {
        self.update(|v| *v = vec![value]);
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        self.update(|v| v.push(value));
    }
}

impl Recorder for Seen {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key))
    }
}

/// Runs `work` to its end on a runtime of its own, with `seen` as the
/// metrics recorder.
fn recorded(seen: &Seen, work: impl std::future::Future<Output = ()>) {
    metrics::with_local_recorder(seen, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    });
}

#[test]
fn outcomes_attempts_and_recovery_are_counted() {
    let seen = Seen::default();
    recorded(&seen, async {
        let Some(db) = open!(Sqlite, "metrics") else {
            return;
        };
        db.transfers(4).await;
        for id in [1_i64, 1, 2] {
            let _ = TransferStatus::start().apply(&db.pool, id).await.unwrap();
        }
        let claimed = TransferStatus::start()
            .claim::<_, i64>(&db.pool, 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2);
        drop(claimed);
        db.backdate_leases().await;
        let report = stateguard::recover(
            &db.pool,
            TransferStatus::Sending,
            10,
            |_: stateguard::Effect<_, i64>| async { stateguard::Verdict::done() },
        )
        .await
        .unwrap();
        assert_eq!(report.done, 4);
    });
    // Labels sorted by name.
    let outcome = |outcome: &str| {
        format!(
            "stateguard_outcomes_total{{machine=TransferStatus,outcome={outcome},transition=start}}"
        )
    };
    assert_eq!(
        seen.get(&outcome("applied")),
        // The two applies; the claim counts its rows as `claimed` only.
        [2.0]
    );
    assert_eq!(seen.get(&outcome("already_in_state")), [1.0]);
    assert_eq!(seen.get(&outcome("claimed")), [2.0]);
    assert_eq!(
        // One per `apply`.
        seen.get("stateguard_attempts{machine=TransferStatus,transition=start}"),
        [1.0, 1.0, 1.0]
    );
    assert_eq!(
        seen.get("stateguard_recovered_total{machine=TransferStatus,result=done,state=sending}"),
        [4.0]
    );
    assert_eq!(
        seen.get("stateguard_recovery_claimed{machine=TransferStatus,state=sending}"),
        [4.0]
    );
}

#[test]
fn a_batch_counts_each_key_by_its_outcome() {
    let seen = Seen::default();
    recorded(&seen, async {
        let Some(db) = open!(Sqlite, "metrics_many") else {
            return;
        };
        db.transfers(3).await;
        let _ = TransferStatus::start()
            .apply(&db.pool, 3_i64)
            .await
            .unwrap();
        // 1 and 2 move, the second 2 and the 3 already did, 99 is no row.
        let outcomes = TransferStatus::start()
            .apply_many(&db.pool, &[1_i64, 2, 2, 3, 99])
            .await
            .unwrap();
        assert_eq!(outcomes.len(), 5);
    });
    let outcome = |outcome: &str| {
        seen.get(&format!(
            "stateguard_outcomes_total{{machine=TransferStatus,outcome={outcome},transition=start}}"
        ))
    };
    assert_eq!(outcome("applied"), [3.0], "the single apply and two keys");
    assert_eq!(outcome("already_in_state"), [2.0]);
    assert_eq!(outcome("not_found"), [1.0]);
}

/// A publisher that refuses `b`'s message and accepts the rest, the
/// second of them as a duplicate the broker held already.
struct Mixed;

impl stateguard::outbox::Publisher for Mixed {
    type Error = std::io::Error;

    async fn publish(
        &self,
        message: stateguard::outbox::Message<'_>,
    ) -> Result<stateguard::outbox::Published, Self::Error> {
        match message.id {
            "b:1" => Err(std::io::Error::other("refused")),
            id => Ok(stateguard::outbox::Published::new(id == "c:1")),
        }
    }
}

#[test]
fn a_relay_pass_counts_each_message_by_its_result() {
    let seen = Seen::default();
    recorded(&seen, async {
        let Some(db) = open!(Sqlite, "metrics_relay") else {
            return;
        };
        for statement in stateguard::outbox::ddl(stateguard::ddl::Dialect::Sqlite) {
            sqlx::raw_sql(*statement).execute(&db.pool).await.unwrap();
        }
        let mut tx = stateguard::Tx::begin(&db.pool).await.unwrap();
        for (key, id) in [("a", "a:1"), ("b", "b:1"), ("c", "c:1")] {
            let message = stateguard::outbox::Message {
                id,
                topic: "payout.sent",
                payload: b"{}",
            };
            stateguard::outbox::enqueue(&mut tx, key, message)
                .await
                .unwrap();
        }
        tx.commit(()).await.unwrap();
        let pass = stateguard::outbox::Relay::new(Mixed)
            .pass(&db.pool)
            .await
            .unwrap();
        assert_eq!((pass.published(), pass.retried()), (2, 1), "{pass:?}");
    });
    let result = |result: &str| {
        seen.get(&format!(
            "stateguard_relayed_total{{result={result},table=stateguard_outbox}}"
        ))
    };
    assert_eq!(result("published"), [2.0]);
    assert_eq!(result("duplicate"), [1.0]);
    assert_eq!(result("retried"), [1.0]);
    assert!(result("lost").is_empty());
}

/// A transfer whose effect runs at most twice, a millisecond apart.
#[derive(stateguard::StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "metered", column = "status", key = "id", version = "version")]
enum Metered {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(
        lease = "60s",
        since = "sending_since",
        done = confirm,
        failed = fail,
        retry(max = 2, backoff = "1ms..1ms", attempts = "attempts", next_attempt = "next_at")
    ))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

#[test]
fn attempts_at_an_effect_and_giving_up_are_counted() {
    let seen = Seen::default();
    recorded(&seen, async {
        let Some(db) = open!(Sqlite, "metrics_retry") else {
            return;
        };
        sqlx::query(
            "CREATE TABLE metered (id INTEGER PRIMARY KEY, status TEXT NOT NULL DEFAULT 'pending',
             version INTEGER NOT NULL DEFAULT 0, sending_since TEXT,
             attempts INTEGER NOT NULL DEFAULT 0, next_at TEXT)",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO metered (id) VALUES (1)")
            .execute(&db.pool)
            .await
            .unwrap();
        let won = Metered::start()
            .apply(&db.pool, 1_i64)
            .await
            .unwrap()
            .won()
            .unwrap();
        let later = won
            .finish(&db.pool, |_| async { stateguard::Verdict::RetryLater })
            .await
            .unwrap();
        assert_eq!(later, stateguard::Finished::RetryLater);
        let mut gave_up = 0;
        for _ in 0..200 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            let pass = stateguard::recover(
                &db.pool,
                Metered::Sending,
                10,
                |_: stateguard::Effect<_, i64>| async { stateguard::Verdict::RetryLater },
            )
            .await
            .unwrap();
            gave_up += pass.gave_up;
            if gave_up > 0 {
                break;
            }
        }
        assert_eq!(gave_up, 1);
    });
    assert_eq!(
        seen.get("stateguard_effect_attempt{machine=Metered,state=sending}"),
        [1.0, 2.0]
    );
    assert_eq!(
        seen.get(
            "stateguard_outcomes_total{machine=Metered,outcome=retry_later,transition=confirm}"
        ),
        [1.0]
    );
    assert_eq!(
        seen.get("stateguard_recovered_total{machine=Metered,result=gave_up,state=sending}"),
        [1.0]
    );
}

/// A worker's loop counts its looks for work, found or not, and the rows
/// it released at shutdown.
#[test]
fn a_workers_looks_and_releases_are_counted() {
    use stateguard::worker::{Poll, Worker};
    use stateguard::{Effect, Verdict};
    use std::time::Duration;

    let seen = Seen::default();
    recorded(&seen, async {
        let Some(db) = open!(Sqlite, "metrics_worker") else {
            return;
        };
        db.transfers(1).await;
        sqlx::raw_sql("DELETE FROM transfers")
            .execute(&db.pool)
            .await
            .unwrap();
        let quick = Poll::new(Duration::from_millis(1), Duration::from_millis(5));
        let no_op = |_: Effect<TransferStatus, i64>| async { Verdict::done() };
        // Nothing to do: idle looks.
        Worker::new(db.pool.clone())
            .effects(TransferStatus::start(), 5, 1, no_op)
            .poll(quick)
            .run(tokio::time::sleep(Duration::from_millis(50)))
            .await
            .unwrap();
        sqlx::raw_sql("INSERT INTO transfers (id) VALUES (1), (2), (3), (4), (5)")
            .execute(&db.pool)
            .await
            .unwrap();
        // One batch of five, one effect at a time, stopped at the first.
        let started = std::sync::Arc::new(tokio::sync::Notify::new());
        let first = started.clone();
        let report = Worker::new(db.pool.clone())
            .effects(
                TransferStatus::start(),
                5,
                1,
                move |_: Effect<TransferStatus, i64>| {
                    first.notify_one();
                    async {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Verdict::done()
                    }
                },
            )
            .poll(quick)
            .run(async move { started.notified().await })
            .await
            .unwrap();
        assert_eq!(report.loops[0].released, 4, "{report:?}");
    });
    let looks = |found: &str| {
        seen.get(&format!(
            "stateguard_worker_looks_total{{found={found},loop=start,machine=TransferStatus}}"
        ))
    };
    assert!(
        looks("false").first().is_some_and(|n| *n >= 1.0),
        "{:?}",
        looks("false")
    );
    assert_eq!(looks("true"), [1.0]);
    assert_eq!(
        seen.get("stateguard_worker_released_total{loop=start,machine=TransferStatus}"),
        [4.0]
    );
}
