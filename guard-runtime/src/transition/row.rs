//! Reading a statement's result by what each column holds.
//!
//! **Architecture Invariant:** a row of a machine's statement is read
//! through the columns the derive declared beside it
//! ([`Statement::returns`]), never by a bare index. A key's columns come
//! together, in order, after the tag where there is one, and `DecodeKey`
//! reads them from the first.
//!
//! Every row read here was proven to be the statement's own when it was
//! fetched (`executor/proven.rs`).

use crate::dialect::{Backend, Column, Statement};
use crate::machine::key::{DecodeKey, KeyShape};

/// A row of `statement`'s result.
pub(crate) struct Read<'r, DB: Backend> {
    statement: Statement,
    row: &'r DB::Row,
}

impl<'r, DB: Backend> Read<'r, DB> {
    pub(crate) fn new(statement: Statement, row: &'r DB::Row) -> Self {
        Read { statement, row }
    }

    fn at(&self, column: Column) -> Result<usize, sqlx::Error> {
        self.statement.column(column).ok_or_else(|| {
            sqlx::Error::Protocol(format!(
                "the statement returns no {column:?}: {}",
                self.statement.text()
            ))
        })
    }

    /// The row's key.
    pub(crate) fn key<K: DecodeKey<DB, Sh>, Sh: KeyShape>(&self) -> Result<K, sqlx::Error> {
        K::decode(self.row, self.at(Column::Key(0))?)
    }

    /// `column` as an integer.
    pub(crate) fn int(&self, column: Column) -> Result<i64, sqlx::Error> {
        DB::int(self.row, self.at(column)?)
    }

    /// `column` as an integer, NULL as 0.
    pub(crate) fn int_or_zero(&self, column: Column) -> Result<i64, sqlx::Error> {
        DB::int_opt(self.row, self.at(column)?).map(Option::unwrap_or_default)
    }

    /// `column` as an integer, or NULL; `None` too where the statement
    /// does not return it (a machine without what it holds).
    pub(crate) fn int_if(&self, column: Column) -> Result<Option<i64>, sqlx::Error> {
        match self.statement.column(column) {
            Some(at) => DB::int_opt(self.row, at),
            None => Ok(None),
        }
    }

    /// `column` as text, or NULL; `None` too where the statement does not
    /// return it.
    pub(crate) fn text_if(&self, column: Column) -> Result<Option<String>, sqlx::Error> {
        match self.statement.column(column) {
            Some(at) => DB::text_opt(self.row, at),
            None => Ok(None),
        }
    }

    /// `column` as an integer, or NULL.
    pub(crate) fn int_opt(&self, column: Column) -> Result<Option<i64>, sqlx::Error> {
        DB::int_opt(self.row, self.at(column)?)
    }

    /// `column` as text, or NULL.
    pub(crate) fn text(&self, column: Column) -> Result<Option<String>, sqlx::Error> {
        DB::text_opt(self.row, self.at(column)?)
    }
}
