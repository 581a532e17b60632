//! Running a statement so that only its own rows are believed.
//!
//! **Architecture Invariant:** a statement with a tag
//! ([`Statement::tag`], every PostgreSQL statement of a machine and of the
//! fixed-table stores) runs only through [`Proven`]: each row it returns
//! is checked to carry the statement's tag before any caller reads it, and
//! the rows it changed are counted by those rows, never by the command's
//! own count (`UPDATE 1` says nothing about which statement ran). A row
//! with another tag, or with none, is a [`StatementMixUp`]; so is the
//! error a tagged statement raises when it runs with another call's values
//! (its tag column checks the tag bound last, and fails the statement,
//! undoing its writes), and, on a pool the pooler check found
//! multiplexed, any server error of a tagged statement. It reaches the
//! caller as
//! [`Error::StatementMixUp`](crate::Error::StatementMixUp), whose outcome
//! is unknown.

use super::Inserts;
use super::sealed::Run;
use crate::dialect::sealed::Driver;
use crate::dialect::{BoxFuture, Column, Statement};
use crate::error::StatementMixUp;

type DbRow<E> = <<E as Run>::Db as sqlx::Database>::Row;
type Args<E> = <<E as Run>::Db as Driver>::Args;

/// [`Run`]'s statements, with each row proven to be the statement's own.
pub(crate) trait Proven: Run {
    /// Every row of `statement`'s result. A batch read that ends with a
    /// row of its own ([`Column::End`]) must end with it exactly once, and
    /// it is left out.
    fn rows<B>(
        &mut self,
        statement: Statement<B>,
        args: Args<Self>,
    ) -> BoxFuture<'_, Result<Vec<DbRow<Self>>, sqlx::Error>> {
        let (text, tag) = (statement.text(), statement.tag());
        let end = statement.column(Column::End);
        let multiplexed = self.multiplexed();
        let rows = self.fetch_all(text, args);
        Box::pin(async move {
            let mut rows = rows
                .await
                .map_err(|error| raised(text, tag, error, multiplexed))?;
            prove_rows::<Self::Db>(text, tag, &rows)?;
            if let Some(tag) = tag {
                // A result that ends with a row of its own ends with it
                // exactly once.
                if let Some(end) = end {
                    let mut ends = Vec::new();
                    for (i, row) in rows.iter().enumerate() {
                        if <Self::Db as Driver>::int_opt(row, end)?.is_some() {
                            ends.push(i);
                        }
                    }
                    match ends[..] {
                        [at] => {
                            rows.remove(at);
                        }
                        _ => return Err(StatementMixUp::new(text, tag, None).into()),
                    }
                }
            }
            Ok(rows)
        })
    }

    /// The first row of `statement`'s result, if it returns one.
    ///
    /// A read of one row that says whether it found it
    /// ([`Column::Found`]) returns a row either way: one that did not find
    /// it is `None`, and no row at all is another statement's answer.
    fn row<B>(
        &mut self,
        statement: Statement<B>,
        args: Args<Self>,
    ) -> BoxFuture<'_, Result<Option<DbRow<Self>>, sqlx::Error>> {
        let (text, tag) = (statement.text(), statement.tag());
        let found = statement.column(Column::Found);
        let multiplexed = self.multiplexed();
        let row = self.fetch_optional(text, args);
        Box::pin(async move {
            let row = row
                .await
                .map_err(|error| raised(text, tag, error, multiplexed))?;
            if let Some(tag) = tag {
                match (&row, found) {
                    (Some(row), _) => prove::<Self::Db>(text, tag, row)?,
                    (None, Some(_)) => return Err(StatementMixUp::new(text, tag, None).into()),
                    (None, None) => {}
                }
            }
            match (row, found) {
                (Some(row), Some(found)) => {
                    let found = <Self::Db as Driver>::int_opt(&row, found)?;
                    Ok(found.is_some_and(|found| found != 0).then_some(row))
                }
                (row, _) => Ok(row),
            }
        })
    }

    /// The rows `update` returned: run alone, or after `inserts` in one
    /// transaction (SQLite's history rows and messages, which PostgreSQL
    /// writes in the update's own statement); each proven its own.
    fn rows_after_inserts<B>(
        &mut self,
        update: Statement<B>,
        args: Args<Self>,
        inserts: Inserts<Self::Db>,
    ) -> BoxFuture<'_, Result<Vec<DbRow<Self>>, sqlx::Error>> {
        if inserts.is_empty() {
            return self.rows(update, args);
        }
        let (text, tag) = (update.text(), update.tag());
        let moved = self.with_inserts(inserts, text, args, true, None);
        Box::pin(async move {
            let moved = moved.await?;
            prove_rows::<Self::Db>(text, tag, &moved.rows)?;
            Ok(moved.rows)
        })
    }

    /// The statement to count the rows of with [`changed`](Proven::changed):
    /// `statement`, or on an executor whose writes run untagged
    /// ([`Run::untagged`]) its untagged form where it has one
    /// ([`Statement::untagged`]). Bind the one it returns.
    fn counted<B: Copy>(&self, statement: Statement<B>) -> Statement<B> {
        // The statement first, which costs nothing; then the executor,
        // which costs an atomic load until a pool is marked.
        match statement.may_run_untagged() && self.untagged() {
            true => statement.untagged().unwrap_or(statement),
            false => statement,
        }
    }

    /// How many rows `statement` changed: its tagged rows where it has a
    /// tag (one per row changed), the command's own count where it has
    /// none.
    fn changed<B>(
        &mut self,
        statement: Statement<B>,
        args: Args<Self>,
    ) -> BoxFuture<'_, Result<u64, sqlx::Error>> {
        match statement.tag() {
            Some(_) => {
                let rows = self.rows(statement, args);
                Box::pin(async move { Ok(rows.await?.len() as u64) })
            }
            None => {
                let done = self.execute(statement.text(), args);
                Box::pin(async move { Ok(<Self::Db as Driver>::rows_affected(&done.await?)) })
            }
        }
    }
}

impl<E: Run + ?Sized> Proven for E {}

/// `error`, or the [`StatementMixUp`] it reports.
///
/// A tagged statement's tag column fails the statement, undoing its
/// writes, unless the value bound last is its own tag: a statement run
/// with the values of another call, which end with the other statement's
/// tag. The failure is a cast of a text that names the statement that ran
/// (`invalid input syntax for type integer: "stateguard mix-up: ran
/// stateguard … with stateguard …"`, 22P02), which the derive writes
/// (`guard-macros/src/plan.rs`, `checked`) and the stores copy.
///
/// On an executor whose pool the check found `multiplexed`, any other
/// server error of a tagged statement is one too: the statement never
/// confirmed that it was the one that ran, and the error may be another
/// client's statement's, run with this call's values (`relation … does
/// not exist`, `incorrect binary data format`), which may have written.
fn raised(
    text: &'static str,
    tag: Option<&'static str>,
    error: sqlx::Error,
    multiplexed: bool,
) -> sqlx::Error {
    const MIX_UP: &str = "stateguard mix-up: ran ";
    let (Some(tag), sqlx::Error::Database(database)) = (tag, &error) else {
        return error;
    };
    let ran = match database.code().as_deref() {
        Some("22P02") => database
            .message()
            .split_once(MIX_UP)
            .and_then(|(_, rest)| rest.split_once(" with "))
            .map(|(ran, _)| ran.to_owned()),
        _ => None,
    };
    match (ran, multiplexed) {
        (Some(ran), _) => StatementMixUp::new(text, tag, Some(ran)).into(),
        (None, true) => StatementMixUp::refused(
            text,
            tag,
            database.code().map(|code| code.into_owned()),
            database.message().to_owned(),
        )
        .into(),
        (None, false) => error,
    }
}

/// Whether `row` is a row of the statement `text`, whose tag is `tag`:
/// the tag is its first column.
pub(crate) fn prove<DB: Driver>(
    text: &'static str,
    tag: &'static str,
    row: &DB::Row,
) -> Result<(), sqlx::Error> {
    if DB::text_is(row, 0, tag) {
        return Ok(());
    }
    let found = DB::text_opt(row, 0).ok().flatten();
    Err(StatementMixUp::new(text, tag, found).into())
}

/// [`prove`] for each of `rows`, the rows of `statement`.
pub(crate) fn prove_all<'r, DB: Driver, B>(
    statement: Statement<B>,
    rows: impl IntoIterator<Item = &'r DB::Row>,
) -> Result<(), sqlx::Error>
where
    DB::Row: 'r,
{
    prove_rows::<DB>(statement.text(), statement.tag(), rows)
}

/// [`prove`] for each of `rows`, the rows of the statement `text`, if it
/// has a tag.
fn prove_rows<'r, DB: Driver>(
    text: &'static str,
    tag: Option<&'static str>,
    rows: impl IntoIterator<Item = &'r DB::Row>,
) -> Result<(), sqlx::Error>
where
    DB::Row: 'r,
{
    if let Some(tag) = tag {
        for row in rows {
            prove::<DB>(text, tag, row)?;
        }
    }
    Ok(())
}
