//! `Machine::load`: a row's state and occurrence now.

use super::apply::{key_arguments, status_of};
use crate::StateMachine;
use crate::dialect::Column;
use crate::dialect::sealed::Driver;
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::machine::Machine;
use crate::machine::key::RowKey;
use crate::outcome::Current;
use crate::transition::row::Read;

impl<S: StateMachine> Machine<S> {
    /// Reads the row whose key is `key`: its state and occurrence now, or
    /// `None` if there is no such row. A page can carry the occurrence to
    /// the next request and apply with [`Transition::expecting`](crate::Transition::expecting).
    ///
    /// One `SELECT`, a locking read inside a transaction as on the losing
    /// path of [`Transition::apply`](crate::Transition::apply).
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or `PayoutStatus::MACHINE.load(&pool,
    /// id).within(d)` ([`Call`](crate::Call)); cut off, [`Error::Timeout`]
    /// (`load`, outcome known: it only reads).
    pub fn load<'a, E, K>(&'static self, executor: E, key: K) -> crate::Call<'a, Option<Current<S>>>
    where
        E: Runner + 'a,
        K: RowKey<E::Database, S::KeyShape> + 'a,
    {
        crate::Call::new(move |deadline| async move {
            let read = self.read_current(executor, key);
            let sent = crate::deadline::call::Sent::default();
            crate::deadline::call::bounded(self.table(), "load", deadline, &sent, read).await
        })
    }

    /// [`Machine::load`], without its deadline.
    async fn read_current<E, K>(
        &'static self,
        mut executor: E,
        key: K,
    ) -> Result<Option<Current<S>>, Error>
    where
        E: Runner,
        K: RowKey<E::Database, S::KeyShape>,
    {
        let error = |source| Error::database(self.table(), "load", source);
        let select = <E::Database as Driver>::statement(self.select_for(executor.in_transaction()));
        let args = key_arguments::<E::Database, S::KeyShape, K>(select, &key).map_err(error)?;
        let Some(row) = executor.row(select, args).await.map_err(error)? else {
            return Ok(None);
        };
        let row = Read::<E::Database>::new(select, &row);
        let state = status_of::<S, E::Database>(&row, error)?;
        let occurrence = row.int(Column::Occurrence).map_err(error)?;
        Ok(Some(Current::new(state, occurrence)))
    }
}
