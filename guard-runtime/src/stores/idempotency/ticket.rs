//! [`Ticket`]: a request's lease on its key, and what ends it: the
//! response stored in the work's transaction, or the key released.

use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Backend;
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::executor::sealed::Run;
use crate::executor::tx::Tx;
use crate::stores::schema::IdempotencySql;
use crate::transition::bind::{Fields, store_arguments};

use super::{Request, held, store_error};

#[cfg(doc)]
use super::{Begun, Stored, begin};

/// The lease on a key that [`begin`] gave this request. Dropping it
/// without [`complete`](Ticket::complete) or [`release`](Ticket::release)
/// (a crash, an error) leaves the key running until its lease runs out;
/// then a retry gets [`Begun::New`].
#[derive(Debug)]
#[must_use = "complete the ticket in the work's transaction, or release it"]
pub struct Ticket {
    pub(super) request: Request,
    pub(super) lease: i64,
    pub(super) sql: &'static IdempotencySql,
}

impl Ticket {
    /// The request.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Stores `status` and `body` as the key's response, in `tx`, the
    /// transaction that holds the request's own writes: they commit
    /// together. Call it last, just before the commit: from here to the
    /// commit, a retry's `begin` waits for this transaction.
    ///
    /// [`Error::IdempotencyLeaseLost`] when the lease ran out and another
    /// request took the key over: roll `tx` back (drop it), so that only
    /// the request holding the lease commits its work.
    ///
    /// One statement, in `tx`: nothing of it commits before `tx` does.
    /// After any error `tx` can no longer commit ([`Tx::commit`] answers
    /// [`Error::RolledBack`]): the work then did not happen, and once the
    /// lease runs out a retry does it afresh. Work committed without its
    /// response would be done again by that retry, and an error whose
    /// outcome is unknown ([`Error::is_outcome_unknown`]) may have stored
    /// the response in a transaction that must not commit either.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `ticket.complete(&mut tx, status, body).within(d)` ([`Call`]). Cut
    /// off, [`Error::Timeout`] (`complete`, outcome unknown).
    pub fn complete<'t, 'c, DB>(
        self,
        tx: &'t mut Tx<'c, DB>,
        status: u16,
        body: Vec<u8>,
    ) -> Call<'t, ()>
    where
        DB: Backend,
    {
        self.complete_with_headers(tx, status, Vec::new(), body)
    }

    /// [`complete`](Ticket::complete), storing `headers` with the status
    /// and body (a `Location`, a `Content-Type`): a replay's
    /// [`Stored::headers`] gives them back in the same order. Stored as a
    /// JSON array of `[name, value]` pairs.
    pub fn complete_with_headers<'t, 'c, DB>(
        self,
        tx: &'t mut Tx<'c, DB>,
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Call<'t, ()>
    where
        DB: Backend,
    {
        // Nothing is NULL: a table from before the column reads the same.
        let headers = match headers.is_empty() {
            true => None,
            false => Some(serde_json::to_string(&headers).unwrap_or_default()),
        };
        Call::new(move |deadline| async move {
            let mut tx = tx;
            let sent = Sent::default();
            let work = async {
                let db_error = |source| store_error(self.sql, "complete", source);
                let complete = DB::choose(&self.sql.complete);
                let fields = Fields {
                    status: Some(i64::from(status)),
                    body: Some(body),
                    headers: Some(headers),
                    ..held(&self.request, self.lease)
                };
                let args = store_arguments::<DB>(complete, fields).map_err(db_error)?;
                sent.write();
                let done = Proven::changed(&mut tx, complete, args)
                    .await
                    .map_err(db_error)?;
                match done {
                    1 => Ok(()),
                    _ => Err(Error::IdempotencyLeaseLost {
                        scope: self.request.scope,
                        key: self.request.key,
                    }),
                }
            };
            let completed = bounded(self.sql.table, "complete", deadline, &sent, work).await;
            if completed.is_err() {
                // The work must not commit without its response (a retry
                // would do it again), nor beside a response that may be
                // stored (the UPDATE may still run after a timeout), nor
                // after another request took the key over.
                Run::abandoned(&mut tx);
            }
            completed
        })
    }

    /// Gives the key up without a response, so that a retry gets
    /// [`Begun::New`] at once: for a failure the client should be free to
    /// retry (a 5xx, say). Nothing happens if the lease was lost.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `ticket.release(&pool).within(d)` ([`Call`]); cut off,
    /// [`Error::Timeout`] (`release`, outcome unknown).
    pub fn release<DB>(self, pool: &sqlx::Pool<DB>) -> Call<'_, ()>
    where
        DB: Backend,
    {
        Call::new(move |deadline| async move {
            let sent = Sent::default();
            let work = async {
                let db_error = |source| store_error(self.sql, "release", source);
                let release = DB::choose(&self.sql.release);
                let args = store_arguments::<DB>(release, held(&self.request, self.lease))
                    .map_err(db_error)?;
                let mut executor = pool;
                sent.write();
                Proven::changed(&mut executor, release, args)
                    .await
                    .map_err(db_error)?;
                Ok(())
            };
            bounded(self.sql.table, "release", deadline, &sent, work).await
        })
    }
}
