//! [`Rate`]: at most so many effects started per second, for a far side
//! that allows only so many calls.

use core::future::Future;
use core::num::NonZeroU32;
use core::time::Duration;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::dialect::BoxFuture;
use crate::effects::effect_fn::{Effect, EffectFn};
use crate::effects::verdict::Verdict;

/// At most `calls` effects started per `per`, spaced evenly, without
/// bursts: for a far side that allows only so many calls a second. Its
/// clones share one schedule, so one `Rate` given to several loops (or
/// to the effects of several machines that call the same service) holds
/// them all to it together. It counts the effects of one process: `n`
/// processes start up to `n` times as many.
///
/// An effect waits for its turn in its place among the batch's running
/// effects, under its lease (which the batch's heartbeat renews) and
/// within its deadline: keep a batch small enough that its last effect's
/// turn comes within the deadline, `batch ≤ calls × deadline / per`.
///
/// ```no_run
/// # use stateguard::{Effect, StateMachine, Verdict};
/// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// # #[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64")]
/// # enum PayoutStatus {
/// #     #[state(initial)]
/// #     #[transition(start -> Sending)]
/// #     Pending,
/// #     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
/// #     #[transition(confirm -> Sent)]
/// #     #[transition(fail -> Failed)]
/// #     Sending,
/// #     Sent,
/// #     Failed,
/// # }
/// # async fn serve(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use stateguard::worker::{Rate, Worker};
///
/// // The bank takes 20 calls a second.
/// let bank = Rate::new(NonZeroU32::new(20).unwrap(), Duration::from_secs(1));
/// let pay = |effect: Effect<PayoutStatus, i64>| async move {
///     let _key = effect.effect_key();
///     Verdict::done()
/// };
/// Worker::new(pool)
///     .effects(PayoutStatus::start(), 50, 8, bank.limit(pay))
///     .run(std::future::pending())
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Rate {
    /// The time between two starts.
    spacing: Duration,
    /// When the next effect may start.
    next: Arc<Mutex<Option<Instant>>>,
}

impl Rate {
    /// At most `calls` starts per `per`.
    pub fn new(calls: NonZeroU32, per: Duration) -> Rate {
        Rate {
            spacing: per / calls.get(),
            next: Arc::new(Mutex::new(None)),
        }
    }

    /// `effect`, each run started only in its turn.
    pub fn limit<S, K, F>(
        &self,
        effect: F,
    ) -> impl Fn(Effect<S, K>) -> BoxFuture<'static, Verdict<S>> + Send + Sync + 'static
    where
        Effect<S, K>: Send + 'static,
        F: EffectFn<S, K, Future: Send + 'static> + Send + Sync + 'static,
    {
        let (rate, effect) = (self.clone(), Arc::new(effect));
        move |row| {
            let (rate, effect) = (rate.clone(), effect.clone());
            Box::pin(async move {
                rate.turn().await;
                effect(row).await
            })
        }
    }

    /// Waits for the next turn, and takes it.
    fn turn(&self) -> impl Future<Output = ()> + Send + 'static {
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let at = next.map_or(now, |next| next.max(now));
            *next = Some(at + self.spacing);
            at
        };
        tokio::time::sleep_until(at)
    }
}
