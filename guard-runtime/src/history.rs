//! History: with `#[state_machine(…, history = "payout_transitions")]`,
//! every move appends a row to that table in the same atomic act, and
//! [`Machine::history`] reads a row's history back.

use crate::StateMachine;
use crate::dialect::sealed::Dialect;
use crate::error::Error;
use crate::executor::Executor;
use crate::key::RowKey;
use crate::machine::{Machine, TransitionDef};
use crate::retry::DEFAULT_DEADLINE;
use crate::transition::key_arguments;

/// One move of a row, as its history table records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow<S: 'static> {
    /// The transition that moved the row.
    pub transition: &'static TransitionDef<S>,
    /// The state the row left.
    pub from: S,
    /// The state it entered.
    pub to: S,
    /// The occurrence it entered (the version after the move; 0 without a
    /// version column).
    pub occurrence: i64,
    /// When it moved, by the database's clock, as the database writes
    /// the time as text.
    pub at: String,
}

impl<S: 'static> PartialEq for TransitionDef<S> {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::eq(self, other)
    }
}

impl<S: 'static> Eq for TransitionDef<S> {}

impl<S: StateMachine> Machine<S> {
    /// The history of the row whose key is `key`, oldest first: one
    /// [`HistoryRow`] per move. States and transition names are parsed; a
    /// string that is no state or transition of this machine is an error,
    /// not a guess. [`Error::NoHistory`] for a machine without a history
    /// table.
    pub async fn history<E, K>(
        &'static self,
        mut executor: E,
        key: K,
    ) -> Result<Vec<HistoryRow<S>>, Error>
    where
        E: Executor,
        K: RowKey<E::Database, S::KeyShape>,
    {
        let Some(sql) = self.history_sql() else {
            return Err(Error::NoHistory {
                machine: self.name(),
            });
        };
        let error = |source| Error::Database {
            table: self.table(),
            transition: "history",
            source,
        };
        let args = key_arguments::<E::Database, S::KeyShape, K>(&key).map_err(error)?;
        let read = executor.fetch_all(<E::Database as Dialect>::sql(sql), args);
        let rows = match tokio::time::timeout(DEFAULT_DEADLINE, read).await {
            Ok(rows) => rows.map_err(error)?,
            Err(_) => {
                return Err(Error::Timeout {
                    table: self.table(),
                    transition: "history",
                    deadline: DEFAULT_DEADLINE,
                    outcome_known: true,
                });
            }
        };
        rows.iter()
            .map(|row| {
                let text = |i| {
                    <E::Database as Dialect>::text_opt(row, i)
                        .map_err(error)?
                        .ok_or(Error::NullStatus {
                            table: self.history_table().unwrap_or_default(),
                            column: ["transition", "from_state", "to_state", "", "moved_at"][i],
                        })
                };
                let name = text(0)?;
                let transition =
                    self.transition(&name)
                        .ok_or_else(|| Error::UnknownTransition {
                            machine: self.name(),
                            name: name.clone(),
                        })?;
                Ok(HistoryRow {
                    transition,
                    from: S::parse_db_str(&text(1)?)?,
                    to: S::parse_db_str(&text(2)?)?,
                    occurrence: <E::Database as Dialect>::int(row, 3).map_err(error)?,
                    at: text(4)?,
                })
            })
            .collect()
    }
}
