//! The rows in one state, page by page: [`Machine::rows`], what an
//! operator's page of a state shows.

use core::time::Duration;

use crate::StateMachine;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Column;
use crate::dialect::sealed::Driver;
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::machine::Machine;
use crate::machine::key::{BindError, DecodeKey, KeyOf};
use crate::transition::bind::{self, Values};
use crate::transition::row::Read;

/// How many rows one call of [`Machine::rows`] returns at most.
pub const PAGE_ROWS: usize = 50;

/// The rows of one state that [`Machine::rows`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RowsPage<K> {
    /// The rows, in key order, at most [`PAGE_ROWS`].
    pub rows: Vec<InState<K>>,
    /// Whether more rows follow the last one: the next page is the rows
    /// after its key.
    pub more: bool,
}

/// One row of a [`RowsPage`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InState<K> {
    /// The row's key.
    pub key: K,
    /// How long the row has been in its state, by the database's clock:
    /// since its state's `since` stamp (an in-flight state's, or
    /// `#[state(since = "…")]`), or else since the history's last move
    /// into it; `None` where the machine keeps neither, or the row has no
    /// stamp.
    pub age: Option<Duration>,
    /// In an in-flight state that counts attempts (`retry(…)`), how many
    /// times the row's effect was started there; `None` elsewhere.
    pub attempts: Option<i64>,
    /// In such a state that keeps it (`last_error = "…"`), the reason the
    /// row's last retry gave; `None` where it gave none, or elsewhere.
    pub last_error: Option<String>,
}

impl<S: StateMachine> Machine<S> {
    /// The rows in `state`, in key order, at most [`PAGE_ROWS`] of them:
    /// from the first, or (`after`) from the one after that key. One
    /// statement, a range of the key's index for each page however many
    /// pages come before it.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `.within(d)` ([`Call`]); cut off, [`Error::Timeout`] (`rows`,
    /// outcome known: it only reads).
    ///
    /// ```
    /// use stateguard::StateMachine;
    ///
    /// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// #[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64")]
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
    /// # sqlx::query("INSERT INTO payouts VALUES (1, 'pending'), (2, 'sent'), (3, 'pending')")
    /// #     .execute(&pool).await?;
    /// let page = PayoutStatus::MACHINE.rows(&pool, PayoutStatus::Pending, None).await?;
    /// let keys: Vec<i64> = page.rows.iter().map(|row| row.key).collect();
    /// assert_eq!((keys, page.more), (vec![1, 3], false));
    /// // The page after key 1.
    /// let next = PayoutStatus::MACHINE.rows(&pool, PayoutStatus::Pending, Some(1)).await?;
    /// assert_eq!(next.rows[0].key, 3);
    /// # Ok(()) }
    /// ```
    pub fn rows<'a, E, K>(
        &'static self,
        executor: E,
        state: S,
        after: Option<K>,
    ) -> Call<'a, RowsPage<K>>
    where
        E: Runner + 'a,
        K: KeyOf<S, E::Database> + DecodeKey<E::Database, S::KeyShape> + 'a,
    {
        Call::new(move |deadline| async move {
            let read = self.read_rows(executor, state, after);
            bounded(self.table(), "rows", deadline, &Sent::default(), read).await
        })
    }

    /// [`Machine::rows`], without its deadline.
    async fn read_rows<E, K>(
        &'static self,
        mut executor: E,
        state: S,
        after: Option<K>,
    ) -> Result<RowsPage<K>, Error>
    where
        E: Runner,
        K: KeyOf<S, E::Database> + DecodeKey<E::Database, S::KeyShape>,
    {
        let error = |source| Error::database(self.table(), "rows", source);
        let read = <E::Database as Driver>::statement(self.rows_sql(after.is_some()));
        let key = after.as_ref().map(bind::key::<S::KeyShape, K>);
        let values = Values {
            key: key.as_ref().map(|key| key as _),
            state: Some(state.as_str()),
            // One past the page: whether another follows.
            limit: Some(PAGE_ROWS as i64 + 1),
            ..Values::NONE
        };
        let args = bind::arguments::<E::Database>(read, &values)
            .map_err(|e| error(BindError::into_sqlx(e)))?;
        let rows = executor.rows(read, args).await.map_err(error)?;
        let more = rows.len() > PAGE_ROWS;
        let rows = rows
            .iter()
            .take(PAGE_ROWS)
            .map(|row| {
                let row = Read::<E::Database>::new(read, row);
                let key = row.key::<K, S::KeyShape>().map_err(error)?;
                let age = row.int_opt(Column::Age).map_err(error)?;
                let attempts = row.int_if(Column::Attempt).map_err(error)?;
                let last_error = row.text_if(Column::Reason).map_err(error)?;
                Ok(InState {
                    key,
                    // A stamp ahead of the database's clock reads as new.
                    age: age.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
                    attempts,
                    last_error,
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(RowsPage { rows, more })
    }
}
