//! A worker that runs itself: the loops a deployment needs for the
//! machines it is given, on one pool, until a shutdown signal.
//!
//! For each machine given with [`Worker::effects`], one loop claims up to
//! a batch of rows with the claiming transition (`pending → sending`),
//! runs their effects with [`finish_many`](crate::finish_many), and,
//! when a claim comes back empty (and at least once per longest poll wait
//! while claims keep coming back full), runs
//! [`recover_many`](crate::recover_many) for the in-flight state: rows
//! whose lease ran out (a worker that died) and rows whose retry is due.
//! With nothing to do either way, it waits, longer each time it finds
//! nothing ([`Poll`]), and starts again at once when it finds work.
//!
//! Any number of workers, in any number of processes, may run on the same
//! tables at once: claims skip the rows another holds, and every row's
//! effect runs under its lease and its effect key, as `finish_many` runs
//! it.
//!
//! **Architecture Invariant:** the worker owns loops, not guarantees:
//! every row it moves goes through the calls a caller would make
//! ([`Transition::claim`], [`finish_many`](crate::finish_many),
//! [`recover_many`](crate::recover_many)), so that what those promise
//! holds for it unchanged.

use core::future::Future;
use core::marker::PhantomData;
use core::time::Duration;
use std::sync::Arc;

use futures_util::future::join_all;
use sqlx::Pool;
use tokio::sync::{Notify, watch};

use crate::batch::batched::Batched;
use crate::dialect::BoxFuture;
use crate::effects::calls::FinishFn;
use crate::error::Error;
use crate::outbox::{Publisher, Relay};
use crate::transition::Transition;

mod effects;
mod health;
mod rate;
mod report;
mod stores;
mod wake;

use self::effects::NewEffectsLoop;
pub use self::health::{Health, LoopHealth};
pub use self::rate::Rate;
pub use self::report::{LoopReport, WorkerReport};
pub use self::stores::Prune;
use self::stores::{PruneLoop, RelayLoop};
pub use self::wake::{CHANNEL, WakeUps};
use self::wake::{Listen, Wakes};

/// How long an idle loop waits before it looks for work again: `min`
/// after a look that found work or after the first idle one, doubling with
/// each look that finds nothing, up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll {
    min: Duration,
    max: Duration,
}

impl Poll {
    /// Waits from `min` up to `max` (at least `min`).
    pub fn new(min: Duration, max: Duration) -> Self {
        Poll {
            min,
            max: max.max(min),
        }
    }
}

impl Default for Poll {
    /// From 50 ms up to 1 s.
    fn default() -> Self {
        Poll::new(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// The loops of one deployment on one pool: build it with
/// [`Worker::effects`] for each machine, then [`Worker::run`] it until a
/// shutdown signal.
///
/// ```no_run
/// # use stateguard::{Effect, StateMachine, Verdict};
/// # #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// # #[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64")]
/// # enum Payout {
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
/// use std::time::Duration;
/// use stateguard::worker::Worker;
///
/// // Any future: `tokio::signal::ctrl_c()` in a service, a channel here.
/// let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let report = Worker::new(pool)
///     .effects(Payout::start(), 250, 32, |effect: Effect<Payout, i64>| async move {
///         // Call the bank with `effect.effect_key()` as its idempotency key.
///         let _key = effect.effect_key();
///         Verdict::done()
///     })
///     .drain_within(Duration::from_secs(30))
///     .run(async {
///         let _ = stopped.await;
///     })
///     .await?;
/// println!("{report:?}");
/// # Ok(()) }
/// ```
#[must_use = "a worker does nothing until it runs"]
pub struct Worker<DB: Batched> {
    pool: Pool<DB>,
    loops: Vec<Box<dyn Loop<DB>>>,
    drain: Duration,
    poll: Poll,
    health: Health,
    /// PostgreSQL: what listens for wake-ups, with [`Worker::listen`].
    listen: Option<Listen>,
}

impl<DB: Batched> core::fmt::Debug for Worker<DB> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Worker")
            .field("loops", &self.loops.len())
            .field("drain", &self.drain)
            .field("poll", &self.poll)
            .field("listen", &self.listen.is_some())
            .finish_non_exhaustive()
    }
}

impl<DB: Batched> Worker<DB> {
    /// A worker with no loops yet on `pool`, which drains for 30 s after
    /// its shutdown signal and polls as [`Poll::default`] says.
    pub fn new(pool: Pool<DB>) -> Self {
        Worker {
            pool,
            loops: Vec::new(),
            drain: Duration::from_secs(30),
            poll: Poll::default(),
            health: Health::default(),
            listen: None,
        }
    }

    /// The loops' health, readable while the worker runs (see [`Health`]):
    /// take it before [`Worker::run`], which consumes the worker.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// A loop for one machine: it claims up to `batch` rows at a time with
    /// `claim`, a transition into an in-flight state, and runs `effect` for
    /// them at most `concurrency` at a time
    /// ([`finish_many`](crate::finish_many)); when a claim
    /// comes back empty, and at least once per [`Poll`]'s longest wait
    /// while claims keep coming back full, it recovers the in-flight
    /// state's rows whose lease ran out or whose retry is due
    /// ([`recover_many`](crate::recover_many)), with the same
    /// effect. A `claim` into a state that is not in flight is
    /// [`Misuse::NotInFlight`](crate::Misuse::NotInFlight) from [`Worker::run`], before any loop starts.
    pub fn effects<S, K, F>(
        mut self,
        claim: Transition<S>,
        batch: u32,
        concurrency: usize,
        effect: F,
    ) -> Self
    where
        K: 'static,
        F: FinishFn<S, K, DB> + 'static,
    {
        let effects = F::visit(NewEffectsLoop {
            claim,
            batch,
            concurrency,
            effect,
            health: &self.health,
            key: PhantomData,
        });
        self.loops.push(effects);
        self
    }

    /// A loop that relays the outbox through `relay`: a pass
    /// ([`Relay::pass`]) right after one that took messages, and after the
    /// poll wait after one that took none. Any number of relays may run
    /// on the same outbox.
    pub fn relay<P: Publisher + 'static>(mut self, relay: Relay<P>) -> Self {
        let beat = self.health.add(relay.table(), "relay");
        self.loops.push(Box::new(RelayLoop { relay, beat }));
        self
    }

    /// A loop that prunes the stores' tables as `prune` says, a round
    /// every [`Prune::every`].
    pub fn prune(mut self, prune: Prune) -> Self {
        let beat = self.health.add("stores", "prune");
        self.loops.push(Box::new(PruneLoop { prune, beat }));
        self
    }

    /// After the shutdown signal, how long running effects may take to
    /// finish and write their follow-ups; at the deadline the worker stops
    /// waiting, and what still runs is left to its lease.
    pub fn drain_within(self, drain: Duration) -> Self {
        Worker { drain, ..self }
    }

    /// How idle loops poll for work.
    pub fn poll(self, poll: Poll) -> Self {
        Worker { poll, ..self }
    }
}

#[cfg(feature = "postgres")]
impl Worker<sqlx::Postgres> {
    /// Listens for wake-ups ([`CHANNEL`]) on a connection of its own from
    /// the pool, held while the worker runs: a loop whose table a
    /// notification names looks for work at once instead of at its next
    /// poll. The notifications come from the triggers [`WakeUps`] writes,
    /// which must be in the database.
    ///
    /// Polling goes on beside it, so a notification lost (the connection
    /// dropped, a trigger missing) delays work until the next poll and
    /// never loses it; a connection dropped is opened again, and every
    /// loop woken then. `LISTEN` needs a session: through PgBouncer,
    /// give the worker a pool in session mode.
    pub fn listen(self) -> Self {
        let listen = wake::listen(self.pool.clone());
        Worker {
            listen: Some(listen),
            ..self
        }
    }
}

impl<DB: Batched> Worker<DB> {
    /// Runs every loop until `shutdown` completes, then drains:
    ///
    /// - each loop stops claiming and recovering at once;
    /// - rows claimed or taken over whose effect has not started are
    ///   released: their leases end now, in one statement, so that another
    ///   worker's recovery takes them at its next look, under the same
    ///   effect keys ([`LoopReport::released`]);
    /// - effects already running finish, and their follow-ups are written,
    ///   within [`Worker::drain_within`];
    /// - effects still running at that deadline are left to their lease:
    ///   recovery runs them again, under the same effect key, once it runs
    ///   out.
    ///
    /// A loop's errors (a lost connection, a timeout) are counted in its
    /// report and the loop goes on after its poll wait; a misuse found
    /// before the start ([`Misuse::NotInFlight`](crate::Misuse::NotInFlight)) is returned at once.
    ///
    /// The loops hand their wins to nobody: every row a claim or a
    /// recovery moved is run by the loop itself. A statement that fails
    /// after one that committed (a claim that moved rows, then failed to
    /// read them back; a follow-up that failed after its effect ran)
    /// leaves those rows in flight under their lease, counted in the
    /// report's errors, and a later recovery pass, of this worker or
    /// another, runs their effects under the same effect keys.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<WorkerReport, Error> {
        for lp in &self.loops {
            lp.check()?;
        }
        let (stop, stopped) = watch::channel(false);
        let Worker {
            pool,
            loops,
            drain,
            poll,
            health: _,
            listen,
        } = self;
        let mut wakes: Wakes = Vec::new();
        let loops = loops.into_iter().map(|lp| {
            let wake = Arc::new(Notify::new());
            if let Some(table) = lp.table() {
                wakes.push((wake::bare(table), wake.clone()));
            }
            let at = At {
                pool: pool.clone(),
                stopped: stopped.clone(),
                poll,
                wake,
            };
            lp.run(at)
        });
        let loops = join_all(loops.collect::<Vec<_>>());
        let listening = async {
            if let Some(listen) = listen {
                listen(wakes, stopped.clone(), poll).await;
            }
        };
        let running = async { tokio::join!(loops, listening).0 };
        tokio::pin!(running);
        tokio::pin!(shutdown);
        let loops = tokio::select! {
            loops = &mut running => loops,
            () = &mut shutdown => {
                // Nobody may be listening any more: that is fine.
                let _ = stop.send(true);
                match tokio::time::timeout(drain, &mut running).await {
                    Ok(loops) => loops,
                    Err(_) => {
                        return Ok(WorkerReport {
                            loops: Vec::new(),
                            drained: false,
                        });
                    }
                }
            }
        };
        Ok(WorkerReport {
            loops,
            drained: true,
        })
    }
}

/// What a loop runs with: the pool, the stop, the poll, and the handle
/// that wakes it early.
struct At<DB: Batched> {
    pool: Pool<DB>,
    stopped: watch::Receiver<bool>,
    poll: Poll,
    wake: Arc<Notify>,
}

/// One loop of a worker, its machine's types erased.
trait Loop<DB: Batched>: Send {
    /// Whether the loop can run at all.
    fn check(&self) -> Result<(), Error>;

    /// The table whose wake-ups start the loop early, if any.
    fn table(&self) -> Option<&'static str>;

    /// Runs until `at.stopped` turns true.
    fn run(self: Box<Self>, at: At<DB>) -> BoxFuture<'static, LoopReport>;
}

/// The span a loop runs in, from start to stop: the spans of the calls it
/// makes (`stateguard.claim`, `stateguard.finish_many`,
/// `stateguard.recover`, `stateguard.relay`) nest in it.
fn loop_span(machine: &'static str, name: &'static str) -> tracing::Span {
    tracing::info_span!(
        "stateguard.worker",
        stateguard.machine = machine,
        stateguard.transition = name
    )
}

/// After a look for work: at once, and the next wait the least, if it
/// found some; otherwise after `wait`, the stop or a wake-up, and the
/// next wait twice as long (the least after a wake-up), up to the most.
async fn idle<DB: Batched>(found: bool, wait: Duration, at: &mut At<DB>) -> Duration {
    let poll = at.poll;
    if found {
        return poll.min;
    }
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        _ = at.stopped.changed() => {}
        () = at.wake.notified() => return poll.min,
    }
    (wait * 2).min(poll.max)
}
