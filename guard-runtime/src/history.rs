//! History: with `#[state_machine(…, history = "payout_transitions")]`,
//! every move appends a row to that table in the same atomic act, and
//! [`Machine::history`] reads a row's history back.

use crate::StateMachine;
use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Column;
use crate::dialect::sealed::Driver;
use crate::error::{Error, Misuse};
use crate::executor::Runner;
use crate::executor::proven::Proven;
use crate::machine::key::{BindError, KeyOf, RowKey};
use crate::machine::{Machine, TransitionDef};
use crate::transition::Transition;
use crate::transition::bind::{self, Values};
use crate::transition::note::Note;
use crate::transition::row::Read;

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
    /// the time as text (PostgreSQL's in the session's time zone).
    pub at: String,
    /// When it moved, by the database's clock, in microseconds since the
    /// Unix epoch, UTC, on every backend (milliseconds on SQLite, whose
    /// clock text has no finer part): [`HistoryRow::moved_at`] as a
    /// number, to compare and store.
    pub at_unix_micros: i64,
    /// Who moved it, when the move was [noted](Note).
    pub actor: Option<String>,
    /// Why, when the move was noted.
    pub reason: Option<String>,
    /// The note's details, a JSON document, as the database writes it.
    pub details: Option<String>,
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
    /// not a guess, and so are details that are not JSON
    /// ([`Error::HistoryDetails`]). [`Misuse::NoHistory`](crate::Misuse::NoHistory) for a machine
    /// without a history table.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `PayoutStatus::history(&pool, id).within(d)` ([`Call`]); cut off,
    /// [`Error::Timeout`] (`history`, outcome known: it only reads).
    ///
    /// ```
    /// use stateguard::{Note, StateMachine};
    ///
    /// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    /// #[state_machine(table = "payouts", column = "status", key = "id", history = "payout_history")]
    /// enum PayoutStatus {
    ///     #[state(initial)]
    ///     #[transition(cancel -> Cancelled)]
    ///     Pending,
    ///     Cancelled,
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// # sqlx::query("CREATE TABLE payouts (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
    /// #     .execute(&pool).await?;
    /// # sqlx::query("INSERT INTO payouts VALUES (1, 'pending')").execute(&pool).await?;
    /// # for statement in stateguard::ddl::generate::<PayoutStatus>(stateguard::ddl::Dialect::Sqlite).up() {
    /// #     sqlx::raw_sql(statement).execute(&pool).await?;
    /// # }
    /// PayoutStatus::cancel()
    ///     .noted(Note::by("alice").because("duplicate request"))
    ///     .apply(&pool, 1_i64)
    ///     .await?;
    /// let history = PayoutStatus::MACHINE.history(&pool, 1_i64).await?;
    /// assert_eq!(history.len(), 1);
    /// assert_eq!(history[0].to, PayoutStatus::Cancelled);
    /// # Ok(()) }
    /// ```
    pub fn history<'a, E, K>(&'static self, executor: E, key: K) -> Call<'a, Vec<HistoryRow<S>>>
    where
        E: Runner + 'a,
        K: KeyOf<S, E::Database> + 'a,
    {
        Call::new(move |deadline| async move {
            let read = self.read_history(executor, key, i64::MAX);
            bounded(self.table(), "history", deadline, &Sent::default(), read).await
        })
    }

    /// The `limit` latest moves of the row whose key is `key`, oldest
    /// first: [`Machine::history`] for a page that must stay bounded
    /// however many times a row has moved. One statement, which reads at
    /// most `limit` rows with the history table's index on the key.
    ///
    /// Deadline: [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE), or
    /// `.within(d)` ([`Call`]); cut off, [`Error::Timeout`] (`history`,
    /// outcome known: it only reads).
    pub fn recent_history<'a, E, K>(
        &'static self,
        executor: E,
        key: K,
        limit: u32,
    ) -> Call<'a, Vec<HistoryRow<S>>>
    where
        E: Runner + 'a,
        K: KeyOf<S, E::Database> + 'a,
    {
        Call::new(move |deadline| async move {
            let read = self.read_history(executor, key, i64::from(limit));
            bounded(self.table(), "history", deadline, &Sent::default(), read).await
        })
    }

    /// The `limit` latest moves of the row, oldest first, without a
    /// deadline.
    async fn read_history<E, K>(
        &'static self,
        mut executor: E,
        key: K,
        limit: i64,
    ) -> Result<Vec<HistoryRow<S>>, Error>
    where
        E: Runner,
        K: RowKey<E::Database, S::KeyShape>,
    {
        let Some(sql) = self.history_sql() else {
            return Err(Error::Misuse(Misuse::NoHistory {
                machine: self.name(),
            }));
        };
        let error = |source| Error::database(self.table(), "history", source);
        let read = <E::Database as Driver>::statement(sql);
        let key = bind::key::<S::KeyShape, K>(&key);
        let values = Values {
            key: Some(&key),
            limit: Some(limit),
            ..Values::NONE
        };
        let args = bind::arguments::<E::Database>(read, &values)
            .map_err(|e| error(BindError::into_sqlx(e)))?;
        let mut rows = executor.rows(read, args).await.map_err(error)?;
        // Read newest first, so that a limit keeps the latest; told oldest
        // first.
        rows.reverse();
        rows.iter()
            .enumerate()
            .map(|(index, row)| {
                let row = Read::<E::Database>::new(read, row);
                let text = |column: Column| {
                    row.text(column).map_err(error)?.ok_or(Error::NullStatus {
                        table: self.history_table().unwrap_or_default(),
                        column: match column {
                            Column::Transition => "transition",
                            Column::From => "from_state",
                            Column::To => "to_state",
                            _ => "moved_at",
                        },
                    })
                };
                let name = text(Column::Transition)?;
                let transition =
                    self.transition(&name)
                        .ok_or_else(|| Error::UnknownTransition {
                            machine: self.name(),
                            name: name.clone(),
                        })?;
                let occurrence = row.int(Column::Occurrence).map_err(error)?;
                let details = row.text(Column::Details).map_err(error)?;
                if let Some(Err(problem)) = details
                    .as_deref()
                    .map(serde_json::from_str::<serde_json::Value>)
                {
                    return Err(Error::HistoryDetails {
                        table: self.history_table().unwrap_or_default(),
                        position: index + 1,
                        transition: transition.name(),
                        occurrence,
                        problem: problem.to_string(),
                    });
                }
                Ok(HistoryRow {
                    transition,
                    from: S::parse_db_str(&text(Column::From)?)?,
                    to: S::parse_db_str(&text(Column::To)?)?,
                    occurrence,
                    at: text(Column::At)?,
                    at_unix_micros: row.int(Column::AtMicros).map_err(error)?,
                    actor: row.text(Column::Actor).map_err(error)?,
                    reason: row.text(Column::Reason).map_err(error)?,
                    details,
                })
            })
            .collect()
    }
}

impl<S> HistoryRow<S> {
    /// When the row moved, by the database's clock, as a `SystemTime`
    /// ([`HistoryRow::at_unix_micros`]); `None` only for a time the
    /// platform's clock cannot hold.
    pub fn moved_at(&self) -> Option<std::time::SystemTime> {
        let micros = std::time::Duration::from_micros(self.at_unix_micros.unsigned_abs());
        match self.at_unix_micros >= 0 {
            true => std::time::UNIX_EPOCH.checked_add(micros),
            false => std::time::UNIX_EPOCH.checked_sub(micros),
        }
    }

    /// When the row moved, by the database's clock, in UTC
    /// ([`HistoryRow::at_unix_micros`]); `None` only for a time outside
    /// the `time` crate's range. With the `time` feature.
    #[cfg(feature = "time")]
    #[cfg_attr(docsrs, doc(cfg(feature = "time")))]
    pub fn moved_at_time(&self) -> Option<time::OffsetDateTime> {
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.at_unix_micros) * 1_000)
            .ok()
    }

    /// When the row moved, by the database's clock, in UTC
    /// ([`HistoryRow::at_unix_micros`]); `None` only for a time outside
    /// `chrono`'s range. With the `chrono` feature.
    #[cfg(feature = "chrono")]
    #[cfg_attr(docsrs, doc(cfg(feature = "chrono")))]
    pub fn moved_at_chrono(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        chrono::DateTime::from_timestamp_micros(self.at_unix_micros)
    }
}

/// A transition with a [`Note`] for the history row of the move it makes:
/// made by [`Transition::noted`]. A [`Transition`] whose `N` is the note;
/// it applies and claims as every transition does, and the history row of
/// each move records the note.
pub type Noted<S, P = ()> = Transition<S, P, Note>;

/// A machine declared with `history = "…"`, whose moves can carry a
/// [`Note`]: the derive implements it for such machines only, so that
/// [`Transition::noted`] on a machine without a history table does not
/// compile (rather than drop the note).
///
/// ```compile_fail
/// use stateguard::{Note, StateMachine};
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(cancel -> Cancelled)]
///     Pending,
///     Cancelled,
/// }
///
/// let _ = PayoutStatus::cancel().noted(Note::by("alice")); // no history table
/// ```
///
/// Implemented by hand on a machine without one, it lets a noted call
/// compile, and the call is refused with [`Misuse::NoHistory`](crate::Misuse::NoHistory).
pub trait HasHistory: StateMachine {}

impl<S: StateMachine, P> Transition<S, P> {
    /// [`Transition::noted`] for a machine not known to keep a history:
    /// the move is refused with [`Misuse::NoHistory`] if it keeps none.
    pub(crate) fn with_note(self, note: Note) -> Noted<S, P> {
        Transition {
            def: self.def,
            deadline: self.deadline,
            expected: self.expected,
            params: self.params,
            note,
        }
    }
}

impl<S: HasHistory, P> Transition<S, P> {
    /// This transition, with `note` recorded in the history row of the
    /// move it makes (`actor`, `reason`, `details`); with values, as
    /// `PayoutStatus::confirm(bank_ref).noted(note)`, or from a verdict's
    /// follow-up. Only a machine with a history table ([`HasHistory`])
    /// takes a note.
    pub fn noted(self, note: Note) -> Noted<S, P> {
        self.with_note(note)
    }
}
