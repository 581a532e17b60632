//! The worker's loops over the library's own tables: the outbox relay,
//! and the pruning of idempotency keys, inbox entries and published
//! outbox messages.

use core::time::Duration;

use sqlx::Pool;

use super::report::LoopReport;
use tracing::Instrument;

use super::health::Beat;
use super::{At, Loop, idle, loop_span};
use crate::batch::batched::Batched;
use crate::dialect::BoxFuture;
use crate::error::Error;
use crate::outbox::{Publisher, Relay};
use crate::stores::Stores;

/// [`Worker::relay`](super::Worker::relay)'s loop.
pub(super) struct RelayLoop<P> {
    pub(super) relay: Relay<P>,
    pub(super) beat: Beat,
}

impl<DB: Batched, P: Publisher + 'static> Loop<DB> for RelayLoop<P> {
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }

    fn table(&self) -> Option<&'static str> {
        Some(self.relay.table())
    }

    fn run(self: Box<Self>, mut at: At<DB>) -> BoxFuture<'static, LoopReport> {
        let span = loop_span(self.relay.table(), "relay");
        Box::pin(Instrument::instrument(
            async move {
                let RelayLoop { relay, beat } = *self;
                let mut report = LoopReport::new(relay.table(), "relay");
                let mut wait = at.poll.min;
                while !*at.stopped.borrow() {
                    let found = match relay.pass(&at.pool).await {
                        Ok(pass) => {
                            beat.ok();
                            report.claimed += pass.taken();
                            report.done += pass.published();
                            report.retry_later += pass.retried();
                            report.failed += pass.given_up();
                            report.superseded += pass.lost();
                            pass.taken() > 0
                        }
                        Err(error) => {
                            beat.failed(&error);
                            report.error(error);
                            false
                        }
                    };
                    report.looked(found);
                    wait = idle(found, wait, &mut at).await;
                }
                report
            },
            span,
        ))
    }
}

/// What [`Worker::prune`](super::Worker::prune) removes, and how often.
///
/// ```
/// use std::time::Duration;
/// use stateguard::worker::Prune;
///
/// let day = Duration::from_secs(24 * 60 * 60);
/// // Every ten minutes: idempotency keys and inbox entries older than a
/// // week, published outbox messages older than a day.
/// let prune = Prune::every(Duration::from_secs(600))
///     .idempotency_keys(7 * day)
///     .inbox(7 * day)
///     .outbox(day);
/// # let _ = prune;
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Prune {
    stores: &'static Stores,
    every: Duration,
    idempotency_keys: Option<Duration>,
    inbox: Option<Duration>,
    outbox: Option<Duration>,
    limit: u32,
}

impl Prune {
    /// A round every `every`, in the tables the search path finds
    /// ([`Stores::search_path`]), removing nothing until a window is set.
    pub fn every(every: Duration) -> Self {
        Prune {
            stores: Stores::search_path(),
            every,
            idempotency_keys: None,
            inbox: None,
            outbox: None,
            limit: 1000,
        }
    }

    /// The stores in `stores`'s tables instead ([`stores!`](crate::stores!)).
    pub fn stores(self, stores: &'static Stores) -> Self {
        Prune { stores, ..self }
    }

    /// Removes idempotency keys created more than `window` ago that no
    /// request holds ([`idempotency::prune`](crate::idempotency::prune)):
    /// a retry later than that is a new request.
    pub fn idempotency_keys(self, window: Duration) -> Self {
        Prune {
            idempotency_keys: Some(window),
            ..self
        }
    }

    /// Removes inbox entries received more than `window` ago
    /// ([`inbox::prune`](crate::inbox::prune)): a redelivery later than
    /// that is handled again.
    pub fn inbox(self, window: Duration) -> Self {
        Prune {
            inbox: Some(window),
            ..self
        }
    }

    /// Removes outbox messages published more than `window` ago
    /// ([`outbox::prune`](crate::outbox::prune)); waiting and given-up
    /// messages stay.
    pub fn outbox(self, window: Duration) -> Self {
        Prune {
            outbox: Some(window),
            ..self
        }
    }

    /// At most `limit` rows per statement (1000 unless set): a round runs
    /// statements until one removes fewer, so that no statement holds
    /// its locks long.
    pub fn limit(self, limit: u32) -> Self {
        Prune {
            limit: limit.max(1),
            ..self
        }
    }
}

/// [`Worker::prune`](super::Worker::prune)'s loop.
pub(super) struct PruneLoop {
    pub(super) prune: Prune,
    pub(super) beat: Beat,
}

impl PruneLoop {
    /// One round: each table with a window, until a statement removes
    /// fewer than the limit.
    async fn round<DB: Batched>(&self, pool: &Pool<DB>, report: &mut LoopReport) {
        let mut failed = false;
        let Prune {
            stores,
            idempotency_keys,
            inbox,
            outbox,
            limit,
            ..
        } = self.prune;
        let tables: [(Option<Duration>, u8); 3] = [(idempotency_keys, 0), (inbox, 1), (outbox, 2)];
        for (window, table) in tables {
            let Some(window) = window else { continue };
            loop {
                let removed = match table {
                    0 => stores.idempotency().prune(pool, window, limit).await,
                    1 => stores.inbox().prune(pool, window, limit).await,
                    _ => stores.outbox().prune(pool, window, limit).await,
                };
                match removed {
                    Ok(n) => {
                        report.done += n as usize;
                        if n < u64::from(limit) {
                            break;
                        }
                    }
                    Err(error) => {
                        self.beat.failed(&error);
                        report.error(error);
                        failed = true;
                        break;
                    }
                }
            }
        }
        if !failed {
            self.beat.ok();
        }
    }
}

impl<DB: Batched> Loop<DB> for PruneLoop {
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }

    fn table(&self) -> Option<&'static str> {
        None
    }

    fn run(self: Box<Self>, at: At<DB>) -> BoxFuture<'static, LoopReport> {
        let At {
            pool, mut stopped, ..
        } = at;
        Box::pin(Instrument::instrument(
            async move {
                let mut report = LoopReport::new("stores", "prune");
                while !*stopped.borrow() {
                    self.round(&pool, &mut report).await;
                    tokio::select! {
                        () = tokio::time::sleep(self.prune.every) => {}
                        _ = stopped.changed() => {}
                    }
                }
                report
            },
            loop_span("stores", "prune"),
        ))
    }
}
