//! How many rows are in each state: [`Machine::counts`], what an
//! operator's overview shows.

use crate::StateMachine;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Column;
use crate::dialect::sealed::Driver;
use crate::error::{Error, StatementMixUp};
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::machine::Machine;
use crate::machine::key::BindError;
use crate::transition::bind::{self, Values};
use crate::transition::row::Read;

/// How far [`Machine::counts`] counts the rows of one state: a state with
/// more rows reads as this many and [`more`](StateCount::more).
pub const COUNT_CAP: u64 = 10_000;

/// The rows in one state, as [`Machine::counts`] read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCount<S> {
    /// The state.
    pub state: S,
    /// How many rows are in it, up to [`COUNT_CAP`].
    pub rows: u64,
    /// Whether it holds more than [`COUNT_CAP`] rows.
    pub more: bool,
    /// For an in-flight state, how many of its rows recovery may take
    /// over now: past their lease, or, where it counts attempts, whose
    /// next attempt is due. Up to [`COUNT_CAP`], which reads as that many
    /// or more; `None` for another state.
    pub due: Option<u64>,
    /// For an in-flight state that counts attempts (`retry(…)`), how many
    /// of its rows wait for their next attempt, up to [`COUNT_CAP`];
    /// `None` for another state.
    pub waiting: Option<u64>,
    /// For an in-flight state that counts attempts and has a `failed`
    /// follow-up, how many rows are in that follow-up's state after their
    /// last attempt: they gave up (or their effect failed on that
    /// attempt). Up to [`COUNT_CAP`]; `None` for another state.
    pub gave_up: Option<u64>,
}

impl<S: StateMachine> Machine<S> {
    /// How many rows are in each state, in declaration order, and of an
    /// in-flight state how many recovery may take over now, how many
    /// wait for their next attempt and how many gave up ([`StateCount`]): one
    /// statement, whose every count stops one past [`COUNT_CAP`],
    /// so that a table of millions of rows costs the read no more than a
    /// few thousand rows a state. With an index on the status column each
    /// count reads index entries only; without one, a state with few rows
    /// is counted by a scan of the table.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `.within(d)` ([`Call`]); cut off, [`Error::Timeout`] (`counts`,
    /// outcome known: it only reads).
    ///
    /// ```
    /// use stateguard::{StateCount, StateMachine};
    ///
    /// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// #[state_machine(table = "payouts", column = "status", key = "id")]
    /// enum PayoutStatus {
    ///     #[state(initial)]
    ///     #[transition(send -> Sent)]
    ///     Pending,
    ///     Sent,
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
    /// #     .execute(&pool).await?;
    /// # sqlx::query("INSERT INTO payouts VALUES (1, 'pending'), (2, 'pending'), (3, 'sent')")
    /// #     .execute(&pool).await?;
    /// let counts = PayoutStatus::MACHINE.counts(&pool).await?;
    /// let pending = counts.iter().find(|c| c.state == PayoutStatus::Pending).unwrap();
    /// assert_eq!((pending.rows, pending.more), (2, false));
    /// # Ok(()) }
    /// ```
    pub fn counts<'a, E>(&'static self, executor: E) -> Call<'a, Vec<StateCount<S>>>
    where
        E: Runner + 'a,
    {
        Call::new(move |deadline| async move {
            let read = self.read_counts(executor);
            bounded(self.table(), "counts", deadline, &Sent::default(), read).await
        })
    }

    /// [`Machine::counts`], without its deadline.
    async fn read_counts<E: Runner>(
        &'static self,
        mut executor: E,
    ) -> Result<Vec<StateCount<S>>, Error> {
        let error = |source| Error::database(self.table(), "counts", source);
        let read = <E::Database as Driver>::statement(self.counts_sql());
        let args = bind::arguments::<E::Database>(read, &Values::NONE)
            .map_err(|e| error(BindError::into_sqlx(e)))?;
        // A read without a table answers one row: none is another
        // statement's answer.
        let row = executor.row(read, args).await.map_err(error)?;
        let Some(row) = row else {
            let lost = match read.tag() {
                Some(tag) => StatementMixUp::new(read.text(), tag, None).into(),
                None => sqlx::Error::RowNotFound,
            };
            return Err(error(lost));
        };
        let row = Read::<E::Database>::new(read, &row);
        self.states()
            .iter()
            .enumerate()
            .map(|(i, state)| {
                let n = u8::try_from(i).map_err(|_| {
                    error(sqlx::Error::Protocol(format!(
                        "state {i} has no count column"
                    )))
                })?;
                let count = |column| -> Result<u64, Error> {
                    let counted = row.int(column).map_err(error)?;
                    Ok(u64::try_from(counted).unwrap_or_default())
                };
                let counted = count(Column::Count(n))?;
                let in_flight = state.in_flight();
                let due = match in_flight {
                    Some(_) => Some(count(Column::Due(n))?.min(COUNT_CAP)),
                    None => None,
                };
                let retry = in_flight.and_then(|f| f.retry());
                let waiting = match retry {
                    Some(_) => Some(count(Column::Waiting(n))?.min(COUNT_CAP)),
                    None => None,
                };
                let gave_up = match (retry, in_flight.and_then(|f| f.failed())) {
                    (Some(_), Some(_)) => Some(count(Column::GaveUp(n))?.min(COUNT_CAP)),
                    _ => None,
                };
                Ok(StateCount {
                    state: state.value(),
                    rows: counted.min(COUNT_CAP),
                    more: counted > COUNT_CAP,
                    due,
                    waiting,
                    gave_up,
                })
            })
            .collect()
    }
}
