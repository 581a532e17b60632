//! Work that must not stop half-way: a transaction sqlx began and nobody
//! waits for any more.
//!
//! sqlx 0.9 raises a transaction's rollback guard only once its `BEGIN`
//! has answered: a future dropped while the `BEGIN` is in flight hands its
//! connection back to the pool inside a transaction sqlx does not know of,
//! where later autocommit statements never commit. Such work runs here, in
//! a task of its own that sees it through whatever becomes of the caller.

use core::future::Future;

/// Runs `work` in a tokio task (in the caller's tracing span) and waits for
/// its output; a caller that stops waiting leaves the task to finish. A
/// panic in it goes on in the caller; a task cancelled with its runtime is
/// an I/O error saying that `what` was cut off.
pub(crate) async fn run_to_completion<T, W>(what: &'static str, work: W) -> Result<T, sqlx::Error>
where
    T: Send + 'static,
    W: Future<Output = Result<T, sqlx::Error>> + Send + 'static,
{
    let work = crate::executor::fault::carried(work);
    match tokio::spawn(tracing::Instrument::in_current_span(work)).await {
        Ok(output) => output,
        Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::other(format!(
            "the task that ran {what} was cancelled"
        )))),
    }
}
