//! [`Store`]: the idempotency store in the tables of one [`Stores`].

use std::time::Duration;

use crate::deadline::call::{Call, Sent, bounded};
use crate::dialect::Backend;
pub use crate::stores::schema::Store;

use super::claim::begin_on;
use super::{Begun, Request, prune_table};

impl Store {
    /// [`begin`](crate::idempotency::begin), on this store's table.
    pub fn begin<'a, DB>(
        &self,
        pool: &'a sqlx::Pool<DB>,
        request: &'a Request,
        lease: Duration,
    ) -> Call<'a, Begun>
    where
        DB: Backend,
    {
        let sql = self.sql;
        Call::new(move |deadline| async move {
            let sent = Sent::default();
            let mut executor = pool;
            let work = begin_on(sql, &mut executor, request, lease, &sent);
            bounded(sql.table, "begin", deadline, &sent, work).await
        })
    }

    /// [`prune`](crate::idempotency::prune), on this store's table.
    pub fn prune<'p, DB>(
        &self,
        pool: &'p sqlx::Pool<DB>,
        window: Duration,
        limit: u32,
    ) -> Call<'p, u64>
    where
        DB: Backend,
    {
        prune_table::<DB>(pool, &self.sql.prune, self.sql.table, window, limit)
    }

    /// [`running`](crate::idempotency::running), of this store's table.
    pub fn running<'p, DB: Backend>(&self, pool: &'p sqlx::Pool<DB>) -> Call<'p, u64> {
        let sql = self.sql;
        Call::new(move |deadline| {
            crate::stores::counted_on_pool(pool, sql.table, "running", deadline, &sql.running)
        })
    }
}
