//! Faults in the statements a call sends, for the test suite's fault
//! matrix (`tests/backends/faults.rs`): every statement the library sends
//! passes `statement`, which, with the `fault-injection` feature and a
//! `Plan` in scope, counts it and can make it fail. Without the feature
//! `statement` hands the statement's future back untouched.
//!
//! A hook inside the library rather than a TCP proxy: it sees SQLite,
//! which has no wire, it counts statements as the library sends them
//! (not protocol messages, which differ per backend and per sqlx
//! version), and it fails the statement the matrix names, whatever
//! connection or task it runs on.
//!
//! **Architecture Invariant:** every statement the library sends on a
//! connection, a transaction's `BEGIN` and `COMMIT` included, goes
//! through `statement`: `executor/impls/` (the statements of
//! `OnConnection` and of a move with its inserts), `executor/tx/` (begin
//! and commit), and `executor/task.rs` carries the plan into the task it
//! spawns. A statement's prepare is part of the statement, as sqlx sends
//! it within the statement's first execution on a connection: the
//! prepares that MySQL's transactions send before their first write
//! (`Driver::PREPARES_FIRST`) are not counted apart, and a failure there
//! comes before anything of the transaction was written.

#[cfg(feature = "fault-injection")]
pub use self::injected::*;

#[cfg(not(feature = "fault-injection"))]
/// The statement's future, as it is.
#[inline(always)]
pub(crate) fn statement<F>(_sql: &'static str, run: F) -> F {
    run
}

#[cfg(not(feature = "fault-injection"))]
/// The statement's boxed future, as it is.
#[inline(always)]
pub(crate) fn boxed_statement<F>(_sql: &'static str, run: F) -> F {
    run
}

#[cfg(not(feature = "fault-injection"))]
/// `work`, as it is.
#[inline(always)]
pub(crate) fn carried<W>(work: W) -> W {
    work
}

#[cfg(feature = "fault-injection")]
mod injected {
    use core::future::Future;
    use std::borrow::Cow;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures_util::future::Either;

    use crate::dialect::BoxFuture;

    tokio::task_local! {
        static PLAN: Arc<Plan>;
    }

    /// What happens to the statement a [`Plan`] fails.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// The server refuses it before it runs: a database error whose
        /// outcome is known (nothing ran).
        Refuse,
        /// It runs, and the connection breaks before the answer arrives:
        /// an I/O error, the outcome unknown.
        Cut,
        /// It runs, and no answer comes: the call's deadline runs out
        /// (after the plan's `hang`, an I/O error).
        Hang,
    }

    /// The statements of one call: counted, and one of them failed (or
    /// every one from it on).
    #[derive(Debug)]
    pub struct Plan {
        fault: Option<(usize, Fault)>,
        text: Option<(&'static str, Fault)>,
        onward: bool,
        hang: Duration,
        sent: Mutex<Vec<&'static str>>,
    }

    impl Plan {
        /// Counts the statements, fails none.
        pub fn count() -> Arc<Plan> {
            Arc::new(Plan {
                fault: None,
                text: None,
                onward: false,
                hang: Duration::ZERO,
                sent: Mutex::new(Vec::new()),
            })
        }

        /// Fails statement `index` (from 0) with `fault`; a
        /// [`Fault::Hang`] waits `hang` before its error.
        pub fn fail(index: usize, fault: Fault, hang: Duration) -> Arc<Plan> {
            Arc::new(Plan {
                fault: Some((index, fault)),
                text: None,
                onward: false,
                hang,
                sent: Mutex::new(Vec::new()),
            })
        }

        /// Fails statement `index` and every statement after it with
        /// `fault`: a server that went away stays away, so that what a call
        /// sends to undo a change after a failure (a release, a rollback)
        /// fails too.
        pub fn fail_from(index: usize, fault: Fault, hang: Duration) -> Arc<Plan> {
            Arc::new(Plan {
                fault: Some((index, fault)),
                text: None,
                onward: true,
                hang,
                sent: Mutex::new(Vec::new()),
            })
        }

        /// Fails every statement whose text is `sql` with `fault`, at
        /// whatever index it is sent: for a statement a loop sends at a
        /// point no count can name beforehand.
        pub fn fail_text(sql: &'static str, fault: Fault, hang: Duration) -> Arc<Plan> {
            Arc::new(Plan {
                fault: None,
                text: Some((sql, fault)),
                onward: false,
                hang,
                sent: Mutex::new(Vec::new()),
            })
        }

        /// Runs `call` with this plan over every statement it sends, in
        /// its task and in the tasks the library spawns for it.
        pub async fn run<F: Future>(self: &Arc<Self>, call: F) -> F::Output {
            PLAN.scope(self.clone(), call).await
        }

        /// The statements sent so far, in order (the faulted one
        /// included).
        pub fn sent(&self) -> Vec<&'static str> {
            self.sent.lock().map(|s| s.clone()).unwrap_or_default()
        }

        /// What statement `sql`, the next one, meets.
        fn next(&self, sql: &'static str) -> Option<Fault> {
            let mut sent = self.sent.lock().ok()?;
            let index = sent.len();
            sent.push(sql);
            match (self.fault, self.text) {
                (Some((at, fault)), _) if at == index || (self.onward && index > at) => Some(fault),
                (_, Some((text, fault))) if text == sql => Some(fault),
                _ => None,
            }
        }
    }

    /// The statement `sql` whose future is `run`, as the plan in scope
    /// (if any) says: `run` itself, unboxed, when no plan is in scope, so
    /// that a build with the hook (the benchmarks are one) pays only the
    /// task-local lookup outside the fault matrix.
    pub(crate) fn statement<'c, T, F>(
        sql: &'static str,
        run: F,
    ) -> Either<F, BoxFuture<'c, Result<T, sqlx::Error>>>
    where
        T: Send + 'c,
        F: Future<Output = Result<T, sqlx::Error>> + Send + 'c,
    {
        let Ok((fault, hang)) = PLAN.try_with(|plan| (plan.next(sql), plan.hang)) else {
            return Either::Left(run);
        };
        Either::Right(Box::pin(async move {
            match fault {
                None => run.await,
                Some(Fault::Refuse) => {
                    drop(run);
                    Err(sqlx::Error::Database(Box::new(Refused { sql })))
                }
                Some(Fault::Cut) => {
                    run.await?;
                    Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "injected fault: the connection broke before the answer",
                    )))
                }
                Some(Fault::Hang) => {
                    run.await?;
                    tokio::time::sleep(hang).await;
                    Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "injected fault: the answer never came",
                    )))
                }
            }
        }))
    }

    /// [`statement`] for a future that is boxed already, and stays one.
    pub(crate) fn boxed_statement<'c, T: Send + 'c>(
        sql: &'static str,
        run: BoxFuture<'c, Result<T, sqlx::Error>>,
    ) -> BoxFuture<'c, Result<T, sqlx::Error>> {
        match statement(sql, run) {
            Either::Left(run) => run,
            Either::Right(faulted) => faulted,
        }
    }

    /// `work`, with the plan in scope (if any) carried into the task that
    /// will run it.
    pub(crate) fn carried<'w, T, W>(work: W) -> BoxFuture<'w, T>
    where
        W: Future<Output = T> + Send + 'w,
    {
        match PLAN.try_with(Arc::clone) {
            Ok(plan) => Box::pin(PLAN.scope(plan, work)),
            Err(_) => Box::pin(work),
        }
    }

    /// The server's refusal of a statement it did not run.
    #[derive(Debug)]
    struct Refused {
        sql: &'static str,
    }

    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let head: String = self.sql.chars().take(40).collect();
            write!(f, "injected fault: the server refused `{head}…`")
        }
    }

    impl std::error::Error for Refused {}

    impl sqlx::error::DatabaseError for Refused {
        fn message(&self) -> &str {
            "injected fault: the server refused the statement"
        }

        fn code(&self) -> Option<Cow<'_, str>> {
            // PostgreSQL's internal_error: no backend's retry or session
            // rule reads it.
            Some(Cow::Borrowed("XX000"))
        }

        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }

        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }

        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }

        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }
}
