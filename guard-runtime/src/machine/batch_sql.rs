//! The statements of a transition's batch, [`ManySql`].

use crate::dialect::Sql;

/// The statements of [`Transition::apply_many`](crate::Transition::apply_many)
/// for one transition.
#[derive(Debug, Clone, Copy)]
pub struct ManySql {
    pub(crate) update: Sql,
    pub(crate) read: Sql,
    pub(crate) lease_read: Sql,
    pub(crate) history_insert: Sql,
    pub(crate) outbox_insert: Sql,
}

impl ManySql {
    /// Moves every row among the keys that is in a source state (and
    /// meets the guard), and returns their keys, and versions and lease
    /// tokens where the machine has them.
    pub const fn update(&self) -> &Sql {
        &self.update
    }

    /// The state, version and guard of the rows among the keys: the
    /// losing part on PostgreSQL and SQLite; on MySQL it comes first,
    /// locking the rows.
    pub const fn read(&self) -> &Sql {
        &self.read
    }

    /// MySQL, after the update into an in-flight state: the moved rows'
    /// lease tokens. Empty on the other dialects, which return them.
    pub const fn lease_read(&self) -> &Sql {
        &self.lease_read
    }

    /// SQLite and MySQL, with a history table: the history rows' insert
    /// just before the update. Empty otherwise.
    pub const fn history_insert(&self) -> &Sql {
        &self.history_insert
    }

    /// SQLite and MySQL, for a transition that emits a message: the outbox
    /// rows' insert just before the update. Empty otherwise.
    pub const fn outbox_insert(&self) -> &Sql {
        &self.outbox_insert
    }

    /// Every statement MySQL's batch may send in its transaction, in the
    /// order it sends them: the locking read, the inserts, the update and
    /// the leases' read (some empty for a given machine).
    pub(crate) const fn in_transaction(&self) -> [&Sql; 5] {
        [
            &self.read,
            &self.history_insert,
            &self.outbox_insert,
            &self.update,
            &self.lease_read,
        ]
    }
}
