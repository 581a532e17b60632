//! [`Call`]: a call about to run (a transition's apply and claims, the
//! front doors' calls, recovery's claim, the reads), and the deadline it
//! keeps.

use core::future::{Future, IntoFuture};
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;

use crate::deadline::retry::DEFAULT_DEADLINE;
use crate::error::Error;

/// The boxed future a [`Call`] runs.
type Running<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// A call about to run: what [`Transition::apply`](crate::Transition::apply),
/// [`apply_many`](crate::Transition::apply_many), the claims
/// ([`claim`](crate::Transition::claim) and its siblings),
/// `idempotency::begin` and its siblings, `inbox::receive`,
/// [`claim_expired`](crate::claim_expired),
/// [`Machine::history`](crate::meta::Machine::history) and
/// [`Machine::load`](crate::meta::Machine::load) return. Await it
/// for its answer; it keeps [`DEFAULT_DEADLINE`] unless [`Call::within`]
/// sets another first:
///
/// ```no_run
/// # async fn handler(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use std::time::Duration;
/// use stateguard::idempotency::{self, Request};
///
/// let request = Request::new("acme:POST /payouts", "4f1c…", "sha256-of-the-body")?;
/// let begun = idempotency::begin(&pool, &request, idempotency::DEFAULT_LEASE)
///     .within(Duration::from_secs(2))
///     .await?;
/// # let _ = begun;
/// # Ok(()) }
/// ```
///
/// A call that runs out of its deadline ends in [`Error::Timeout`], whose
/// `transition` names the call (`begin`, `complete`, `receive`, …) and
/// whose `outcome_known` is false once a write of the call may have been
/// sent.
#[must_use = "a call runs only when awaited"]
pub struct Call<'a, T> {
    run: Box<dyn FnOnce(Duration) -> Running<'a, T> + Send + 'a>,
    deadline: Duration,
}

impl<'a, T> Call<'a, T> {
    /// The call `run` makes within the deadline it is given.
    pub(crate) fn new<F, Fut>(run: F) -> Self
    where
        F: FnOnce(Duration) -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, Error>> + Send + 'a,
    {
        Call {
            run: Box::new(move |deadline| Box::pin(run(deadline))),
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// The same call, keeping `deadline` instead of [`DEFAULT_DEADLINE`].
    pub fn within(self, deadline: Duration) -> Self {
        Call { deadline, ..self }
    }

    /// The deadline the call keeps.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
}

impl<'a, T> IntoFuture for Call<'a, T> {
    type Output = Result<T, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        (self.run)(self.deadline)
    }
}

impl<T> core::fmt::Debug for Call<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Call")
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Whether a call has sent a write (or begun the wait for the connection
/// to send it on: a pool's wait and the statement are one future), so that
/// a deadline cutting it off knows the outcome is open.
#[derive(Default)]
pub(crate) struct Sent(AtomicBool);

impl Sent {
    /// From now on a write may be in flight.
    pub(crate) fn write(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether a write may have gone out.
    pub(crate) fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// `work` within `deadline`; cut off, [`Error::Timeout`] naming `table`
/// and `call`, whose outcome is known unless `sent` says a write went out.
pub(crate) async fn bounded<T>(
    table: &'static str,
    call: &'static str,
    deadline: Duration,
    sent: &Sent,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(deadline, work).await {
        Ok(done) => done,
        Err(_) => Err(Error::Timeout {
            table,
            transition: call,
            deadline,
            outcome_known: !sent.any(),
        }),
    }
}
