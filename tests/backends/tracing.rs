//! Tracing: one span per call, with the outcome, and the key only when the
//! caller opts in.

use crate::common;
use crate::common::KeyColumn;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{Db, TestBackend, TransferStatus};
use stateguard::bounds::Batched;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// What a test subscriber saw: spans by name with their fields, and the
/// messages of events.
#[derive(Default)]
struct Seen {
    /// Name, fields, and the span it was opened in, if any.
    spans: Vec<(&'static str, BTreeMap<String, String>, Option<u64>)>,
    /// The spans entered, innermost last.
    entered: Vec<u64>,
    events: Vec<String>,
}

#[derive(Clone, Default)]
struct Capture {
    seen: Arc<Mutex<Seen>>,
    next: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let mut seen = self.seen.lock().unwrap();
        let parent = seen.entered.last().copied();
        seen.spans.push((span.metadata().name(), fields, parent));
        Id::from_u64(seen.spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut seen = self.seen.lock().unwrap();
        let (_, fields, _) = &mut seen.spans[span.into_u64() as usize - 1];
        values.record(&mut Fields(fields));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        self.seen.lock().unwrap().events.push(message);
        self.next.fetch_add(1, Ordering::Relaxed);
    }

    fn enter(&self, span: &Id) {
        self.seen.lock().unwrap().entered.push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut seen = self.seen.lock().unwrap();
        if let Some(at) = seen.entered.iter().rposition(|&s| s == span.into_u64()) {
            seen.entered.remove(at);
        }
    }
}

/// `record_keys` is one switch for the whole process, and the backends'
/// tests in this binary run on parallel threads: each holds this lock, so
/// one backend's opt-in never shows up in another's spans.
static RECORD_KEYS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

backend_tests! {
    "tracing_spans" => one_span_per_call_with_its_outcome,
    "tracing_worker" => a_worker_loop_holds_the_spans_of_its_calls,
}

/// A worker's loop runs in a `stateguard.worker` span naming its machine
/// and claiming transition, and its claims open their spans inside it.
async fn a_worker_loop_holds_the_spans_of_its_calls<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    let _serial = RECORD_KEYS.lock().await;
    db.transfers(2).await;
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    tracing::callsite::rebuild_interest_cache();
    let ran = Arc::new(AtomicU64::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let (counter, all) = (ran.clone(), done.clone());
    let report = stateguard::worker::Worker::new(db.pool.clone())
        .effects(
            TransferStatus::start(),
            10,
            2,
            move |_: stateguard::Effect<TransferStatus, i64>| {
                if counter.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                    all.notify_one();
                }
                async { stateguard::Verdict::done() }
            },
        )
        .run(async move {
            let waited = tokio::time::timeout(std::time::Duration::from_secs(120), done.notified());
            waited.await.expect("both effects ran within two minutes");
        })
        .await
        .unwrap();
    assert!(report.drained);
    let seen = capture.seen.lock().unwrap();
    let worker = seen
        .spans
        .iter()
        .position(|(name, fields, _)| {
            *name == "stateguard.worker"
                && fields.get("stateguard.machine").map(String::as_str) == Some("TransferStatus")
                && fields.get("stateguard.transition").map(String::as_str) == Some("start")
        })
        .expect("a stateguard.worker span naming the machine and its claim");
    let inside = seen
        .spans
        .iter()
        .any(|(name, _, parent)| *name == "stateguard.claim" && *parent == Some(worker as u64 + 1));
    assert!(inside, "the claims' spans open inside the loop's");
}

async fn one_span_per_call_with_its_outcome<DB: TestBackend + Batched>(db: Db<DB>)
where
    i64: KeyColumn<DB> + stateguard::bounds::ManyKeys<DB, stateguard::key::shape::One>,
{
    let _serial = RECORD_KEYS.lock().await;
    db.transfers(6).await;
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    // A callsite that another test's thread hit for the first time while
    // this subscriber was being set may have cached "never" for it; ask
    // every callsite again, now that the subscriber is in place.
    tracing::callsite::rebuild_interest_cache();

    let won = TransferStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert!(won.is_applied());
    let again = TransferStatus::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap();
    assert!(!again.is_applied());
    let claimed = TransferStatus::start()
        .claim::<_, i64>(&db.pool, 2)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let many = TransferStatus::cancel()
        .apply_many(&db.pool, &[4_i64, 5, 99])
        .await
        .unwrap();
    assert_eq!(many.len(), 3);
    stateguard::telemetry::record_keys(true);
    let keyed = TransferStatus::start()
        .apply(&db.pool, 6_i64)
        .await
        .unwrap();
    stateguard::telemetry::record_keys(false);
    let finished = keyed
        .won()
        .unwrap()
        .finish(&db.pool, |_| async { stateguard::Verdict::done() })
        .await
        .unwrap();
    assert!(
        matches!(
            finished,
            stateguard::Finished::Done {
                state: TransferStatus::Sent,
                ..
            }
        ),
        "{finished:?}"
    );
    let report = stateguard::recover(
        &db.pool,
        TransferStatus::Sending,
        10,
        |_: stateguard::Effect<_, i64>| async { stateguard::Verdict::done() },
    )
    .await
    .unwrap();
    assert_eq!(report.claimed, 0);

    let seen = capture.seen.lock().unwrap();
    // A claim moves its rows in one statement on every backend, not with
    // one `apply` (and span) per row.
    let applies = seen
        .spans
        .iter()
        .filter(|(name, _, _)| *name == "stateguard.apply")
        .count();
    assert_eq!(applies, 3);
    // The calls' own spans.
    let ours: Vec<&(&str, BTreeMap<String, String>, Option<u64>)> = seen
        .spans
        .iter()
        .filter(|(name, _, parent)| name.starts_with("stateguard.") && parent.is_none())
        .collect();
    let names: Vec<&str> = ours.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(
        names,
        [
            "stateguard.apply",
            "stateguard.apply",
            "stateguard.claim",
            "stateguard.apply_many",
            "stateguard.apply",
            "stateguard.finish",
            "stateguard.recover"
        ]
    );
    let field = |i: usize, name: &str| ours[i].1.get(name).cloned();
    assert_eq!(field(0, "stateguard.outcome").as_deref(), Some("applied"));
    assert_eq!(
        field(1, "stateguard.outcome").as_deref(),
        Some("already_in_state")
    );
    assert_eq!(field(0, "stateguard.transition").as_deref(), Some("start"));
    assert_eq!(
        field(0, "stateguard.machine").as_deref(),
        Some("TransferStatus")
    );
    assert_eq!(field(0, "db.collection.name").as_deref(), Some("transfers"));
    assert_eq!(field(0, "db.operation.name").as_deref(), Some("UPDATE"));
    let system = field(0, "db.system.name").unwrap_or_default();
    assert!(
        ["sqlite", "postgresql", "mysql"].contains(&system.as_str()),
        "{system}"
    );
    assert_eq!(field(0, "stateguard.attempts").as_deref(), Some("1"));
    assert_eq!(field(2, "stateguard.rows").as_deref(), Some("2"));
    assert_eq!(field(3, "stateguard.rows").as_deref(), Some("2"));
    // The key only after the caller opted in.
    for i in 0..4 {
        assert_eq!(field(i, "stateguard.key"), None, "span {i}");
    }
    assert_eq!(field(4, "stateguard.key").as_deref(), Some("6"));
    assert_eq!(field(5, "stateguard.outcome").as_deref(), Some("done"));
    assert_eq!(
        field(5, "stateguard.transition").as_deref(),
        Some("confirm")
    );
    assert_eq!(field(5, "stateguard.key"), None);
    assert_eq!(field(6, "stateguard.outcome").as_deref(), Some("recovered"));
    assert_eq!(field(6, "stateguard.rows").as_deref(), Some("0"));
}
