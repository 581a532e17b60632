//! Claiming a key: the statements `begin` runs, in each dialect's order.

use std::time::Duration;

use crate::deadline::call::Sent;
use crate::deadline::retry::{MAX_ATTEMPTS, backoff};
use crate::dialect::Backend;
use crate::dialect::connection::read_back_failed;
use crate::error::Error;
use crate::executor::proven::Proven;
use crate::executor::sealed::Run;
use crate::transition::bind::{Fields, store_arguments};

use super::{Begun, Request, Stored, Ticket, keyed, store_error};
use crate::stores::schema::IdempotencySql;

/// [`begin`] on `executor`, a pool or a connection out of a transaction;
/// `sent` learns when the claim goes out.
pub(super) async fn begin_on<DB, E>(
    sql: &'static IdempotencySql,
    executor: &mut E,
    request: &Request,
    lease: Duration,
    sent: &Sent,
) -> Result<Begun, Error>
where
    DB: Backend,
    E: Run<Db = DB>,
{
    let db_error = |source| store_error(sql, "begin", source);
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let new = |lease| {
        Ok(Begun::New(Ticket {
            request: request.clone(),
            lease,
            sql,
        }))
    };
    // Each pass either answers or sees the row change under it (inserted,
    // taken over or pruned by another request); three passes see it settle.
    for _ in 0..3 {
        // SQLite reads first: its insert would wait for any write
        // transaction, including a running request's work. The others
        // claim first, which waits only for a request between its
        // `complete` and its commit.
        let found = match DB::EMBEDDED {
            true => match read(sql, executor, request).await? {
                Some(found) => Some(found),
                None => match claim(sql, executor, request, lease_ms, sent).await? {
                    KeyClaimed::New => return new(1),
                    KeyClaimed::Existing(row, at) => Some((row, at)),
                    KeyClaimed::Taken => None,
                },
            },
            false => match claim(sql, executor, request, lease_ms, sent).await? {
                KeyClaimed::New => return new(1),
                KeyClaimed::Existing(row, at) => Some((row, at)),
                KeyClaimed::Taken => read(sql, executor, request).await?,
            },
        };
        // Gone between the statements (pruned, or inserted after a read
        // and before a claim): another pass.
        let Some((row, at)) = found else {
            continue;
        };
        let fingerprint = DB::text_opt(&row, at).map_err(db_error)?;
        let state = DB::text_opt(&row, at + 1).map_err(db_error)?;
        let held = DB::int(&row, at + 2).map_err(db_error)?;
        let expired = DB::int(&row, at + 5).map_err(db_error)? != 0;
        if fingerprint.as_deref() != Some(request.fingerprint.as_str()) {
            return Ok(Begun::Mismatch);
        }
        if state.as_deref() == Some("done") {
            let status = DB::int_opt(&row, at + 3).map_err(db_error)?;
            let body = DB::bytes_opt(&row, at + 4).map_err(db_error)?;
            let status = status.and_then(|s| u16::try_from(s).ok());
            let (Some(status), Some(body)) = (status, body) else {
                return Err(Error::Store {
                    table: sql.table,
                    call: "begin",
                    source: sqlx::Error::Protocol(format!(
                        "key {:?} of scope {:?} is done without a response",
                        request.key, request.scope
                    )),
                });
            };
            let headers = DB::text_opt(&row, at + 6).map_err(db_error)?;
            let headers = match headers {
                None => Vec::new(),
                Some(json) => serde_json::from_str(&json).map_err(|error| Error::Store {
                    table: sql.table,
                    call: "begin",
                    source: sqlx::Error::Protocol(format!(
                        "key {:?} of scope {:?} stores headers that are not a JSON array of \
                         [name, value] pairs: {error}",
                        request.key, request.scope
                    )),
                })?,
            };
            return Ok(Begun::Replay(Stored {
                status,
                headers,
                body,
            }));
        }
        if !expired {
            return Ok(Begun::InProgress);
        }
        let take_over = DB::choose(&sql.take_over);
        let fields = Fields {
            millis: Some(lease_ms),
            ..super::held(request, held)
        };
        let args = store_arguments::<DB>(take_over, fields).map_err(db_error)?;
        sent.write();
        let taken = match DB::RETURNING {
            true => Proven::row(executor, take_over, args)
                .await
                .map_err(db_error)?
                .map(|row| DB::int(&row, take_over.after_tag()))
                .transpose()
                .map_err(db_error)?,
            false => {
                // The OK packet carries the new lease, or 0 where a trigger
                // on the table made MariaDB drop it: then it is read back.
                let (done, row) = Run::execute_then_fetch(
                    executor,
                    take_over.text(),
                    args,
                    DB::LAST_ID,
                    Default::default(),
                    DB::id_lost,
                )
                .await
                .map_err(db_error)?;
                // Taken over: a read back that fails leaves the lease
                // unknown.
                let row = row.map_err(read_back_failed).map_err(db_error)?;
                match (DB::rows_affected(&done) == 1, row) {
                    (false, _) => None,
                    (true, Some(row)) => Some(DB::int(&row, 0).map_err(db_error)?),
                    (true, None) => {
                        Some(i64::try_from(DB::last_insert_id(&done)).unwrap_or(i64::MAX))
                    }
                }
            }
        };
        if let Some(lease) = taken {
            return new(lease);
        }
    }
    Ok(Begun::InProgress)
}

/// What `claim` found.
pub(super) enum KeyClaimed<Row> {
    /// The key was new, and is this request's under lease 1.
    New,
    /// The key's row (PostgreSQL), and where `read`'s columns begin in
    /// it: after the tag and the flag.
    Existing(Row, usize),
    /// The key exists; `read` tells how.
    Taken,
}

/// Runs `claim`.
pub(super) async fn claim<DB, E>(
    sql: &'static IdempotencySql,
    executor: &mut E,
    request: &Request,
    lease_ms: i64,
    sent: &Sent,
) -> Result<KeyClaimed<<DB as sqlx::Database>::Row>, Error>
where
    DB: Backend,
    E: Run<Db = DB>,
{
    let db_error = |source| store_error(sql, "begin", source);
    let claim = DB::choose(&sql.claim);
    // In autocommit the statement is its own transaction: one the
    // database rolled back for a deadlock, or a Galera cluster refused
    // for a conflict with another node's, runs again.
    let mut attempts = 0;
    let row = loop {
        attempts += 1;
        let fields = Fields {
            millis: Some(lease_ms),
            ..keyed(request)
        };
        let args = store_arguments::<DB>(claim, fields).map_err(db_error)?;
        sent.write();
        let ran = match DB::RETURNING {
            false => Proven::changed(executor, claim, args).await.map(Err),
            true => Proven::row(executor, claim, args).await.map(Ok),
        };
        match ran {
            Err(error) if DB::is_retryable(&error) && attempts < MAX_ATTEMPTS => {
                tokio::time::sleep(backoff(attempts)).await;
            }
            Err(error) => return Err(db_error(error)),
            Ok(Err(changed)) => {
                return Ok(match changed {
                    1 => KeyClaimed::New,
                    _ => KeyClaimed::Taken,
                });
            }
            Ok(Ok(row)) => break row,
        }
    };
    let flag = claim.after_tag();
    Ok(match row {
        Some(row) if DB::int(&row, flag).map_err(db_error)? == 1 => KeyClaimed::New,
        Some(row) => KeyClaimed::Existing(row, flag + 1),
        None => KeyClaimed::Taken,
    })
}

/// Runs `read`: the key's row, and where its columns begin in it (after
/// the tag).
pub(super) async fn read<DB, E>(
    sql: &'static IdempotencySql,
    executor: &mut E,
    request: &Request,
) -> Result<Option<(<DB as sqlx::Database>::Row, usize)>, Error>
where
    DB: Backend,
    E: Run<Db = DB>,
{
    let db_error = |source| store_error(sql, "begin", source);
    let read = DB::choose(&sql.read);
    let args = store_arguments::<DB>(read, keyed(request)).map_err(db_error)?;
    let row = Proven::row(executor, read, args).await.map_err(db_error)?;
    Ok(row.map(|row| (row, read.after_tag())))
}
