//! The pools `pooler::check` found multiplexed, so that a server error on
//! one of their statements can be read for what it may be (the pooler
//! guide's "What a multiplexed pool can show"). It lives here, below the
//! check, because every executor asks it.
//!
//! A pool is known by its connect options' allocation
//! ([`Pool::connect_options`]), which every clone of the pool shares and
//! which this list keeps alive, so that a later pool cannot take its
//! address. Nothing is kept per statement: a call asks only when a
//! statement failed, and the answer is `false` at the cost of one atomic
//! load until a check has found a pool multiplexed.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::{Database, Pool};

/// Whether any pool has been marked: the fast path of [`marked`].
static ANY: AtomicBool = AtomicBool::new(false);

/// The connect options of every pool marked, kept alive.
static MARKED: Mutex<Vec<Arc<dyn Any + Send + Sync>>> = Mutex::new(Vec::new());

/// Records that `pool`'s connections are multiplexed. Only the
/// PostgreSQL check finds a pool multiplexed.
#[cfg(any(feature = "postgres", test))]
pub(crate) fn mark<DB: Database>(pool: &Pool<DB>) {
    let options = pool.connect_options();
    let mut marked = MARKED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !marked.iter().any(|kept| same(kept, &options)) {
        marked.push(options);
    }
    ANY.store(true, Ordering::Release);
}

/// Whether [`mark`] recorded `pool` (or a clone of it).
pub(crate) fn marked<DB: Database>(pool: &Pool<DB>) -> bool {
    if !ANY.load(Ordering::Acquire) {
        return false;
    }
    let options = pool.connect_options();
    let marked = MARKED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    marked.iter().any(|kept| same(kept, &options))
}

/// Whether `kept` is the allocation `options` points to.
fn same<T>(kept: &Arc<dyn Any + Send + Sync>, options: &Arc<T>) -> bool {
    core::ptr::addr_eq(Arc::as_ptr(kept), Arc::as_ptr(options))
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pool_and_its_clones_are_marked_and_no_other() {
        let pool = sqlx::SqlitePool::connect_lazy("sqlite::memory:").expect("pool");
        let other = sqlx::SqlitePool::connect_lazy("sqlite::memory:").expect("pool");
        assert!(!marked(&pool));
        mark(&pool);
        mark(&pool.clone());
        assert!(marked(&pool));
        assert!(marked(&pool.clone()));
        assert!(!marked(&other));
        let kept = MARKED.lock().expect("list");
        let copies = kept
            .iter()
            .filter(|kept| same(kept, &pool.connect_options()))
            .count();
        assert_eq!(copies, 1, "marked once, however often");
    }
}
