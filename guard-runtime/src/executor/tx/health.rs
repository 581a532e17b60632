//! What the library has seen of a transaction's health: whether it can
//! still commit, and whether its statements were all the library's.

use crate::dialect::Backend;

/// What the library has seen of a transaction's health.
#[derive(Debug, Default)]
pub(crate) struct TxHealth {
    /// A statement of this transaction failed in a way that the database
    /// answers by rolling the whole transaction back (a MySQL deadlock).
    pub(super) rolled_back: bool,
    /// The last statement on the connection was the library's own, and it
    /// succeeded: the transaction was open and not aborted then, and
    /// nothing has run since. Cleared when the caller takes the connection
    /// (`&mut *tx`), which is how its own statements run, and around
    /// savepoints.
    pub(super) verified: bool,
    /// The transaction runs on a connection of a pool that
    /// `pooler::check` found multiplexed
    /// ([`Run::multiplexed`](crate::executor::sealed::Run::multiplexed)).
    pub(crate) multiplexed: bool,
    /// The transaction runs on a connection of a pool whose writes run
    /// untagged ([`Run::untagged`](crate::executor::sealed::Run::untagged)).
    pub(crate) untagged: bool,
}

impl TxHealth {
    /// Records a failed statement. After a serialization failure, deadlock
    /// or busy database the library answers [`Error::RetryTransaction`],
    /// and MySQL has already rolled the whole transaction back: either way
    /// the transaction must not commit.
    pub(crate) fn failed<DB: Backend>(&mut self, error: &sqlx::Error) {
        self.verified = false;
        if DB::is_retryable(error) {
            self.rolled_back = true;
        }
    }

    /// Records a statement of the library's that succeeded.
    pub(crate) fn succeeded(&mut self) {
        self.verified = true;
    }

    /// A statement was cut off and may still complete on the server: what
    /// the transaction holds is unknown, so it must not commit.
    pub(crate) fn abandon(&mut self) {
        self.rolled_back = true;
    }

    /// Whether the transaction can no longer commit.
    pub(crate) fn rolled_back(&self) -> bool {
        self.rolled_back
    }

    /// Refuses a statement of the library's in a transaction that can no
    /// longer commit, before anything is sent: the database or sqlx may
    /// have rolled it back already (a MySQL deadlock, a `SAVEPOINT` cut
    /// off on PostgreSQL), and the statement would run outside it and
    /// commit on its own.
    pub(crate) fn refuse(&self) -> Result<(), sqlx::Error> {
        match self.rolled_back {
            true => Err(sqlx::Error::InvalidArgument(
                crate::error::REFUSED.to_owned(),
            )),
            false => Ok(()),
        }
    }
}
