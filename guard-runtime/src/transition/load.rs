//! `Machine::load`: a row's state and occurrence now.

use super::apply::{key_arguments, status_of};
use crate::StateMachine;
use crate::dialect::Column;
use crate::dialect::sealed::Driver;
use crate::error::Error;
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::machine::Machine;
use crate::machine::key::{KeyOf, RowKey};
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
        K: KeyOf<S, E::Database> + 'a,
    {
        // A locking read inside a transaction, as the losing path's.
        let select = self.select_for(executor.in_transaction());
        self.read_row(executor, key, select, "load", |_, current| Ok(current))
    }

    /// The row whose key is `key`, read with `sql` within the call's
    /// deadline (`call` names it in errors), or `None` if there is no such
    /// row: its state and occurrence, and what `more` reads of its other
    /// columns. A read, so a cut-off call's outcome is known.
    pub(crate) fn read_row<'a, E, K, T>(
        &'static self,
        mut executor: E,
        key: K,
        sql: &'static crate::dialect::Sql,
        call: &'static str,
        more: impl FnOnce(&Read<'_, E::Database>, Current<S>) -> Result<T, Error> + Send + 'a,
    ) -> crate::Call<'a, Option<T>>
    where
        E: Runner + 'a,
        K: RowKey<E::Database, S::KeyShape> + 'a,
        T: Send + 'a,
    {
        crate::Call::new(move |deadline| async move {
            let read = async move {
                let error = |source| Error::database(self.table(), call, source);
                let select = <E::Database as Driver>::statement(sql);
                let args =
                    key_arguments::<E::Database, S::KeyShape, K>(select, &key).map_err(error)?;
                let Some(row) = executor.row(select, args).await.map_err(error)? else {
                    return Ok(None);
                };
                let row = Read::<E::Database>::new(select, &row);
                let state = status_of::<S, E::Database>(&row, error)?;
                let occurrence = row.int(Column::Occurrence).map_err(error)?;
                more(&row, Current::new(state, occurrence)).map(Some)
            };
            let sent = crate::deadline::call::Sent::default();
            crate::deadline::call::bounded(self.table(), call, deadline, &sent, read).await
        })
    }
}
