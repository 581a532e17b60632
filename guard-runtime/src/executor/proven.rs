//! Running a statement so that only its own rows are believed.
//!
//! **Architecture Invariant:** a statement with a tag
//! ([`Statement::tag`], every PostgreSQL statement of a machine and of the
//! fixed-table stores) runs only through [`Proven`]: each row it returns
//! is checked to carry the statement's tag before any caller reads it, and
//! the rows it changed are counted by those rows, never by the command's
//! own count (`UPDATE 1` says nothing about which statement ran). A row
//! with another tag, or with none, is a [`StatementMixUp`]; it reaches the caller
//! as [`Error::StatementMixUp`](crate::Error::StatementMixUp), whose outcome
//! is unknown.

use super::sealed::Run;
use crate::dialect::sealed::Driver;
use crate::dialect::{BoxFuture, Column, Statement};
use crate::error::StatementMixUp;

type Row<E> = <<E as Run>::Database as sqlx::Database>::Row;
type Args<E> = <<E as Run>::Database as Driver>::Args;

/// [`Run`]'s statements, with each row proven to be the statement's own.
pub(crate) trait Proven: Run {
    /// Every row of `statement`'s result. A batch read that ends with a
    /// row of its own ([`Column::End`]) must end with it exactly once, and
    /// it is left out.
    fn rows<B>(
        &mut self,
        statement: Statement<B>,
        args: Args<Self>,
    ) -> BoxFuture<'_, Result<Vec<Row<Self>>, sqlx::Error>> {
        let (text, tag) = (statement.text(), statement.tag());
        let end = statement.column(Column::End);
        let rows = self.fetch_all(text, args);
        Box::pin(async move {
            let mut rows = rows.await?;
            prove_rows::<Self::Database>(text, tag, &rows)?;
            if let Some(tag) = tag {
                // A result that ends with a row of its own ends with it
                // exactly once.
                if let Some(end) = end {
                    let mut ends = Vec::new();
                    for (i, row) in rows.iter().enumerate() {
                        if <Self::Database as Driver>::int_opt(row, end)?.is_some() {
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
    ) -> BoxFuture<'_, Result<Option<Row<Self>>, sqlx::Error>> {
        let (text, tag) = (statement.text(), statement.tag());
        let found = statement.column(Column::Found);
        let row = self.fetch_optional(text, args);
        Box::pin(async move {
            let row = row.await?;
            if let Some(tag) = tag {
                match (&row, found) {
                    (Some(row), _) => prove::<Self::Database>(text, tag, row)?,
                    (None, Some(_)) => return Err(StatementMixUp::new(text, tag, None).into()),
                    (None, None) => {}
                }
            }
            match (row, found) {
                (Some(row), Some(found)) => {
                    let found = <Self::Database as Driver>::int_opt(&row, found)?;
                    Ok(found.is_some_and(|found| found != 0).then_some(row))
                }
                (row, _) => Ok(row),
            }
        })
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
                Box::pin(async move { Ok(<Self::Database as Driver>::rows_affected(&done.await?)) })
            }
        }
    }
}

impl<E: Run + ?Sized> Proven for E {}

/// Whether `row` is a row of the statement `text`, whose tag is `tag`:
/// the tag is its first column.
pub(crate) fn prove<DB: Driver>(
    text: &'static str,
    tag: &'static str,
    row: &DB::Row,
) -> Result<(), sqlx::Error> {
    match DB::text_opt(row, 0) {
        Ok(Some(found)) if found == tag => Ok(()),
        found => Err(StatementMixUp::new(text, tag, found.ok().flatten()).into()),
    }
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
