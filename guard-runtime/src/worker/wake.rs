//! Wake-ups on PostgreSQL: a trigger notifies the channel
//! [`CHANNEL`] when a row enters a state a claim takes rows from (or a
//! message enters the outbox), and a worker that listens
//! ([`Worker::listen`](super::Worker::listen)) starts the loop of that
//! table at once instead of at its next poll.
//!
//! The poll stays: a notification lost (the listening connection dropped,
//! the trigger missing) delays work until the next poll, and never loses
//! it, since every loop still looks for work on its own schedule.

use core::fmt;
use std::sync::Arc;

use tokio::sync::{Notify, watch};

use crate::StateMachine;
use crate::outbox::Outbox;

/// The channel the wake-up triggers notify, with the table's name as the
/// payload.
pub const CHANNEL: &str = "stateguard_wake";

/// The function the wake-up triggers run: it notifies [`CHANNEL`] with the
/// table's name. PostgreSQL sends one notification per transaction for
/// each table, however many rows moved, and only once it commits.
const FUNCTION: &str = "CREATE OR REPLACE FUNCTION stateguard_wake() RETURNS trigger
LANGUAGE plpgsql AS $stateguard$
BEGIN
    PERFORM pg_notify('stateguard_wake', TG_TABLE_NAME);
    RETURN NULL;
END
$stateguard$";

/// The PostgreSQL triggers that wake listening workers
/// ([`Worker::listen`](super::Worker::listen)): one function, a trigger on
/// each machine's table for the states its claims take rows from
/// (written by the derive, with the machine's other statements), and one
/// on the outbox table for every insert. Every statement can run twice
/// (`CREATE OR REPLACE`, PostgreSQL 14 or later); run them with the
/// migrations.
///
/// Its `Display` is the whole text, each statement followed by `;`.
///
/// ```
/// use stateguard::StateMachine;
/// use stateguard::worker::WakeUps;
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent)]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
///
/// let ddl = WakeUps::new().machine::<PayoutStatus>().outbox(Default::default());
/// assert_eq!(ddl.statements().len(), 3);
/// assert!(ddl.statements()[1].contains(r#"WHEN (NEW."status" IN ('pending'))"#));
/// ```
#[must_use = "the wake-up triggers do nothing until they are run"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeUps {
    statements: Vec<&'static str>,
}

impl Default for WakeUps {
    fn default() -> Self {
        WakeUps::new()
    }
}

impl WakeUps {
    /// The function the triggers run, and no trigger yet.
    pub fn new() -> Self {
        WakeUps {
            statements: vec![FUNCTION],
        }
    }

    /// The triggers on `T`'s table that notify when a row is inserted
    /// into, or moves into, a state that one of `T`'s transitions into an
    /// in-flight state takes rows from (`pending` for `start: Pending ->
    /// Sending`). A machine without such a transition adds nothing.
    pub fn machine<T: StateMachine>(mut self) -> Self {
        let triggers = (T::MACHINE.states().iter())
            .filter_map(|state| state.in_flight())
            .map(|in_flight| in_flight.wake_up_sql())
            .filter(|trigger| !trigger.is_empty());
        self.statements.extend(triggers);
        self
    }

    /// The trigger on `outbox`'s table that notifies after every statement
    /// that inserts messages: `Outbox::default()` for `stateguard_outbox`,
    /// or a schema's ([`Stores::outbox`](crate::Stores::outbox)).
    pub fn outbox(mut self, outbox: Outbox) -> Self {
        self.statements.push(outbox.wake_up());
        self
    }

    /// The statements, without a trailing `;`, in the order to run them:
    /// `sqlx::raw_sql(statement)` runs each as it is.
    pub fn statements(&self) -> &[&'static str] {
        &self.statements
    }
}

impl fmt::Display for WakeUps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "-- stateguard: wake-ups for listening workers (Worker::listen), PostgreSQL 14 or later."
        )?;
        for statement in &self.statements {
            write!(f, "\n{statement};\n")?;
        }
        Ok(())
    }
}

/// A table name as the trigger's payload names it: without its schema
/// or quotes.
pub(super) fn bare(table: &str) -> &str {
    table.rsplit('.').next().unwrap_or(table).trim_matches('"')
}

/// Each loop's table and the handle that wakes it.
pub(super) type Wakes = Vec<(&'static str, Arc<Notify>)>;

/// What [`Worker::listen`](super::Worker::listen) runs beside the loops:
/// told which loop each table wakes, it listens until the stop.
pub(super) type Listen = Box<
    dyn FnOnce(Wakes, watch::Receiver<bool>, super::Poll) -> crate::dialect::BoxFuture<'static, ()>
        + Send,
>;

#[cfg(feature = "postgres")]
pub(super) fn listen(pool: sqlx::PgPool) -> Listen {
    Box::new(move |wakes, stopped, poll| Box::pin(listening(pool, wakes, stopped, poll)))
}

/// Listens on [`CHANNEL`] on a connection of its own from `pool`, and
/// wakes the loops of each table a notification names, until the stop.
/// A lost connection is opened again; every loop is woken then, since
/// notifications sent meanwhile are gone.
#[cfg(feature = "postgres")]
async fn listening(
    pool: sqlx::PgPool,
    wakes: Wakes,
    mut stopped: watch::Receiver<bool>,
    poll: super::Poll,
) {
    use sqlx::postgres::PgListener;
    let wake_all = || wakes.iter().for_each(|(_, wake)| wake.notify_one());
    let mut listener: Option<PgListener> = None;
    while !*stopped.borrow() {
        let current = match &mut listener {
            Some(current) => current,
            None => {
                let connected = async {
                    let mut fresh = PgListener::connect_with(&pool).await?;
                    fresh.listen(CHANNEL).await?;
                    Ok::<_, sqlx::Error>(fresh)
                };
                match connected.await {
                    Ok(fresh) => {
                        // Whatever was notified before it listened.
                        wake_all();
                        listener.insert(fresh)
                    }
                    Err(error) => {
                        tracing::warn!(%error, "listening for wake-ups failed; polling meanwhile");
                        tokio::select! {
                            () = tokio::time::sleep(poll.max) => {}
                            _ = stopped.changed() => {}
                        }
                        continue;
                    }
                }
            }
        };
        tokio::select! {
            received = current.try_recv() => match received {
                Ok(Some(notification)) => {
                    let table = notification.payload();
                    for (_, wake) in wakes.iter().filter(|(t, _)| *t == table) {
                        wake.notify_one();
                    }
                }
                // The connection dropped and was opened again: what was
                // notified meanwhile is lost.
                Ok(None) => wake_all(),
                Err(error) => {
                    tracing::warn!(%error, "the wake-up connection failed; opening another");
                    listener = None;
                    wake_all();
                }
            },
            _ = stopped.changed() => {}
        }
    }
}
