//! `begin_tx`: the claim and the work's transaction begun together, the
//! claim on a second pooled connection when one is idle.

use std::pin::pin;
use std::time::Duration;

use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Backend;
use crate::error::Error;
use crate::executor::sealed::Run;
use crate::executor::seam::Seam;
use crate::executor::tx::Tx;

use super::claim::begin_on;
use super::{Begun, Request, Store, Ticket, Work};
use crate::stores::schema::IdempotencySql;

impl Store {
    /// [`begin`](Store::begin), with the work's transaction begun at the same time, the
    /// claim on a second pooled connection when one is idle: a new key adds
    /// one round trip to the request's wait instead of two. `New` carries the [`Ticket`] and the
    /// open [`Tx`], in which the request does its work, then
    /// [`Ticket::complete`]s and commits:
    ///
    /// ```no_run
    /// # async fn handler(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
    /// use stateguard::idempotency::{self, Begun, Request, Work};
    ///
    /// let request = Request::new("acme:POST /payouts", "4f1c…", "sha256-of-the-body")?;
    /// match idempotency::begin_tx(&pool, &request, idempotency::DEFAULT_LEASE).await? {
    ///     Begun::New(Work { ticket, mut tx }) => {
    ///         // … INSERT the payout on &mut *tx …
    ///         ticket.complete(&mut tx, 201, br#"{"id":42}"#.to_vec()).await?;
    ///         tx.commit(()).await?;
    ///     }
    ///     Begun::Replay(stored) => { /* respond stored.status(), stored.body() */ }
    ///     Begun::InProgress => { /* respond 409 */ }
    ///     Begun::Mismatch => { /* respond 422 */ }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// The claim takes a connection only if the pool has one idle at that
    /// moment (checked as the pool's `acquire` checks it, when the pool tests
    /// connections before handing them out; the pool's `before_acquire` hook
    /// does not run for it), and gives it back as soon as it answers: a
    /// request never holds one connection while it waits for another, so a
    /// pool that runs out of connections cannot deadlock. Without an idle
    /// connection, or when it turns out dead, the claim runs first and the
    /// transaction begins after it, as with [`begin`](Store::begin) and [`Tx::begin`]: a
    /// new key then costs the two round trips it costs there. SQLite has no
    /// round trips to save, and a transaction begun first could hold the write
    /// lock the claim needs: there the claim always runs first, and the
    /// transaction begins only for `New`.
    ///
    /// For any answer but `New` the answer does not wait for the transaction:
    /// as everywhere with [`Tx::begin`], its `BEGIN` runs in a task of its own
    /// that sees it through and rolls the transaction back when nobody waits
    /// for it any more. If the transaction cannot begin, a `New` key's
    /// claim, committed already, is released again (a retry gets `New` at
    /// once rather than 409 until the lease runs out), and the error is
    /// [`Error::Begin`]. When the claim stays (the pool itself failed,
    /// timed out or closed, or the release failed too), nothing is hidden:
    /// the error is [`Error::Unreported`], whose outcome is unknown, and the
    /// key runs under a lease nobody holds until it runs out.
    ///
    /// On MySQL and MariaDB the transaction prepares
    /// [`Ticket::complete`]'s statement before it is handed over, so that
    /// nothing is prepared after the work's writes (a Galera node can
    /// lose its abort of the transaction to a prepare). A prepare that
    /// fails is met as a transaction that cannot begin: the claim is
    /// released, and the error is [`Error::Store`] (`begin_tx`), or
    /// [`Error::Unreported`] when the claim stays.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE) for the whole
    /// call, claim, `BEGIN` and the waits for their connections, or
    /// `idempotency::begin_tx(&pool, &request, lease).within(d)` ([`Call`]);
    /// the transaction keeps the same deadline for its later calls unless
    /// [`Tx::within`] says otherwise. Cut off, [`Error::Timeout`]
    /// (`begin_tx`), with the outcome unknown once the claim may have been
    /// sent, as for [`begin`](Store::begin) (a `BEGIN` cut off by its own deadline is
    /// `Timeout` naming `BEGIN`).
    pub fn begin_tx<'a, DB>(
        &self,
        pool: &'a sqlx::Pool<DB>,
        request: &'a Request,
        lease: Duration,
    ) -> Call<'a, Begun<Work<DB>>>
    where
        DB: Backend,
    {
        begin_both(self.sql, pool, request, lease, None)
    }

    /// [`begin_tx`](Store::begin_tx), with the transaction begun by `statement`, as
    /// [`Tx::begin_with`] does: `"BEGIN ISOLATION LEVEL SERIALIZABLE"` on
    /// PostgreSQL, say, or `"BEGIN IMMEDIATE"` on SQLite. (PostgreSQL takes a
    /// repeatable-read snapshot at the first statement after `BEGIN`, so the
    /// work sees the claim; a MySQL `START TRANSACTION WITH CONSISTENT
    /// SNAPSHOT` may not, which only matters to work that reads the store.)
    /// Its deadline is [`begin_tx`](Store::begin_tx)'s.
    pub fn begin_tx_with<'a, DB>(
        &self,
        pool: &'a sqlx::Pool<DB>,
        request: &'a Request,
        lease: Duration,
        statement: &'static str,
    ) -> Call<'a, Begun<Work<DB>>>
    where
        DB: Backend,
    {
        begin_both(self.sql, pool, request, lease, Some(statement))
    }
}

/// [`begin_tx`] and [`begin_tx_with`], within the call's deadline.
fn begin_both<'a, DB>(
    sql: &'static IdempotencySql,
    pool: &'a sqlx::Pool<DB>,
    request: &'a Request,
    lease: Duration,
    statement: Option<&'static str>,
) -> Call<'a, Begun<Work<DB>>>
where
    DB: Backend,
{
    Call::new(move |deadline| async move {
        let sent = Sent::default();
        let work = claim_and_begin(sql, pool, request, lease, statement, deadline, &sent);
        bounded(sql.table, BEGIN_TX, deadline, &sent, work).await
    })
}

/// The claim and the `BEGIN` of [`begin_both`]; the transaction keeps
/// `deadline`.
async fn claim_and_begin<DB>(
    sql: &'static IdempotencySql,
    pool: &sqlx::Pool<DB>,
    request: &Request,
    lease: Duration,
    statement: Option<&'static str>,
    deadline: Duration,
    sent: &Sent,
) -> Result<Begun<Work<DB>>, Error>
where
    DB: Backend,
{
    // The claim runs on a connection the pool has idle right now while the
    // transaction begins on another. With none idle, or on SQLite (no round
    // trips to save; and a `BEGIN IMMEDIATE` ahead of the claim would hold
    // the write lock the claim needs), or when the idle one turns out dead,
    // the claim runs first, and the transaction begins only for a new key.
    let idle = match DB::EMBEDDED {
        true => None,
        false => Run::try_idle(&pool),
    };
    if let Some(conn) = idle
        && let Some(answer) =
            alongside(sql, pool, conn, request, lease, statement, deadline, sent).await
    {
        return answer;
    }
    let ticket = match begin_on(sql, &mut &*pool, request, lease, sent)
        .await?
        .answered()
    {
        Ok(answer) => return Ok(answer),
        Err(ticket) => ticket,
    };
    let tx = crate::executor::tx::begin_in_task(pool, statement, deadline).await;
    started(pool, ticket, tx).await
}

/// The claim on `conn`, an idle connection of `pool`, while the work's
/// transaction begins on another; `None` when `conn` failed the pool's
/// check before anything ran on it (the transaction, if it began, is rolled
/// back). The claim gives `conn` back as soon as it answers, so the request
/// never holds a connection while it waits for one: a busy pool cannot
/// deadlock on requests each holding half of what they need. For any
/// answer but `New` the answer does not wait for the transaction: dropped
/// half-way, [`Tx::begin`] still sees its `BEGIN` through in a task of its
/// own, and rolls it back.
#[allow(clippy::too_many_arguments)]
async fn alongside<DB, C>(
    sql: &'static IdempotencySql,
    pool: &sqlx::Pool<DB>,
    mut conn: C,
    request: &Request,
    lease: Duration,
    statement: Option<&'static str>,
    deadline: Duration,
    sent: &Sent,
) -> Option<Result<Begun<Work<DB>>, Error>>
where
    DB: Backend,
    C: Run<Db = DB>,
{
    // `try_idle` skips the check the pool's `acquire` makes (the
    // transaction's side makes it, at the same time).
    let test = pool.options().get_test_before_acquire();
    let claim = async move {
        if test && conn.ping().await.is_err() {
            return None;
        }
        Some(begin_on(sql, &mut conn, request, lease, sent).await)
    };
    let mut claim = pin!(claim);
    let mut opening = pin!(crate::executor::tx::begin_in_task(
        pool, statement, deadline
    ));
    let mut opened = None;
    let claimed = loop {
        tokio::select! {
            claimed = &mut claim => break claimed,
            tx = &mut opening, if opened.is_none() => opened = Some(tx),
        }
    };
    let ticket = match claimed?.map(Begun::answered) {
        Err(error) => return Some(Err(error)),
        Ok(Ok(answer)) => return Some(Ok(answer)),
        Ok(Err(ticket)) => ticket,
    };
    let tx = match opened {
        Some(tx) => tx,
        None => opening.await,
    };
    Some(started(pool, ticket, tx).await)
}

/// `New` with the transaction, or the transaction's error after releasing
/// the new key's claim, which would otherwise stay until its lease runs out
/// (not when the pool itself failed: the release would wait for it in
/// vain, and the lease ends the claim all the same). A claim that stays
/// is a change the caller is not handed: the error passes through a
/// [`Seam`].
async fn started<DB>(
    pool: &sqlx::Pool<DB>,
    ticket: Ticket,
    tx: Result<Tx<'static, DB>, Error>,
) -> Result<Begun<Work<DB>>, Error>
where
    DB: Backend,
{
    // `complete` runs in the work's transaction, after the caller's
    // writes: prepared before them (`Driver::PREPARES_FIRST`).
    let tx = match tx {
        Ok(mut tx) => {
            let complete = DB::choose(&ticket.sql.complete).text();
            match Run::prepare_first(&mut &mut tx, vec![complete]).await {
                Ok(()) => Ok(tx),
                Err(source) => Err(super::store_error(ticket.sql, BEGIN_TX, source)),
            }
        }
        Err(error) => Err(error),
    };
    match tx {
        Ok(tx) => Ok(Begun::New(Work { ticket, tx })),
        Err(error) => {
            let mut seam = Seam::new(ticket.sql.table, BEGIN_TX);
            let pool_failed = matches!(
                &error,
                Error::Begin {
                    source: sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
                }
            );
            let released = match pool_failed {
                true => false,
                false => ticket.release(pool).await.is_ok(),
            };
            seam.changed_if(!released);
            Err(seam.failed(&mut &*pool, error))
        }
    }
}

/// What [`Error::Timeout`] and [`Error::Unreported`] name a `begin_tx`.
const BEGIN_TX: &str = "begin_tx";

impl Begun {
    /// The answer, for anything but `New`; `New`'s ticket otherwise.
    fn answered<N>(self) -> Result<Begun<N>, Ticket> {
        match self {
            Begun::New(ticket) => Err(ticket),
            Begun::Replay(stored) => Ok(Begun::Replay(stored)),
            Begun::InProgress => Ok(Begun::InProgress),
            Begun::Mismatch => Ok(Begun::Mismatch),
        }
    }
}
