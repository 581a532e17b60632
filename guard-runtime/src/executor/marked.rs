//! The pools `pooler::check` found multiplexed, so that a server error on
//! one of their statements can be read for what it may be (the pooler
//! guide's "What a multiplexed pool can show"); and the pools it found
//! dedicated whose caller chose to run the library's writes there without
//! their tags ([`Check::untagged_if_dedicated`]). It lives here, below the
//! check, because every executor asks it.
//!
//! A pool is known by its connect options' allocation
//! ([`Pool::connect_options`]), which every clone of the pool shares and
//! which these lists keep alive, so that a later pool cannot take its
//! address. Nothing is kept per statement: a call asks at the cost of one
//! atomic load until a check has marked a pool.
//!
//! [`Check::untagged_if_dedicated`]: crate::pooler::Check::untagged_if_dedicated

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use sqlx::{Database, Pool};

/// One list of pools: whether any is on it (the fast path), and the
/// connect options of each, kept alive.
struct Marks {
    any: AtomicBool,
    pools: RwLock<Vec<Arc<dyn Any + Send + Sync>>>,
}

impl Marks {
    const fn new() -> Self {
        Marks {
            any: AtomicBool::new(false),
            pools: RwLock::new(Vec::new()),
        }
    }

    #[cfg(any(feature = "postgres", test))]
    fn mark<DB: Database>(&self, pool: &Pool<DB>) {
        let options = pool.connect_options();
        let mut pools = self
            .pools
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !pools.iter().any(|kept| same(kept, &options)) {
            pools.push(options);
        }
        self.any.store(true, Ordering::Release);
    }

    fn holds<DB: Database>(&self, pool: &Pool<DB>) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let options = pool.connect_options();
        let pools = self
            .pools
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        pools.iter().any(|kept| same(kept, &options))
    }
}

/// The pools found multiplexed.
static MULTIPLEXED: Marks = Marks::new();

/// The pools found dedicated, whose caller asked for untagged writes.
static UNTAGGED: Marks = Marks::new();

/// Records that `pool`'s connections are multiplexed. Only the
/// PostgreSQL check finds a pool multiplexed.
#[cfg(any(feature = "postgres", test))]
pub(crate) fn mark<DB: Database>(pool: &Pool<DB>) {
    MULTIPLEXED.mark(pool);
}

/// Whether [`mark`] recorded `pool` (or a clone of it).
pub(crate) fn marked<DB: Database>(pool: &Pool<DB>) -> bool {
    MULTIPLEXED.holds(pool)
}

/// Records that the check found each of `pool`'s connections on a server
/// session of its own, and that its caller asked for the library's writes
/// to run untagged there.
#[cfg(any(feature = "postgres", test))]
pub(crate) fn mark_untagged<DB: Database>(pool: &Pool<DB>) {
    UNTAGGED.mark(pool);
}

/// Whether `pool` (or a clone of it) runs untagged writes: marked so by
/// [`mark_untagged`], and never found multiplexed, by that check or a
/// later one.
pub(crate) fn untagged<DB: Database>(pool: &Pool<DB>) -> bool {
    UNTAGGED.holds(pool) && !MULTIPLEXED.holds(pool)
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
        let kept = MULTIPLEXED.pools.read().expect("list");
        let copies = kept
            .iter()
            .filter(|kept| same(kept, &pool.connect_options()))
            .count();
        assert_eq!(copies, 1, "marked once, however often");
    }

    #[tokio::test]
    async fn a_multiplexed_mark_outweighs_an_untagged_one() {
        let pool = sqlx::SqlitePool::connect_lazy("sqlite::memory:").expect("pool");
        let other = sqlx::SqlitePool::connect_lazy("sqlite::memory:").expect("pool");
        assert!(!untagged(&pool));
        mark_untagged(&pool);
        assert!(untagged(&pool));
        assert!(untagged(&pool.clone()));
        assert!(!untagged(&other));
        // A later check that sees it multiplexed takes the untagged writes
        // back.
        mark(&pool);
        assert!(!untagged(&pool));
        assert!(marked(&pool));
    }
}
