//! What a stopped batch does with the rows whose effect never started:
//! it ends their leases in one statement, so that recovery takes them at
//! once instead of after the lease.

use std::sync::atomic::Ordering;

use crate::dialect::Backend;
use crate::effects::fenced::{Fenced, Moved};
use crate::effects::finished::Finished;
use crate::effects::verdict::FollowUpValues;
use crate::machine::key::BatchKey;

use super::{Finishing, NONE, lock};

impl<S, K, DB> Finishing<'_, S, K, DB>
where
    DB: Backend,
    S: FollowUpValues<DB>,
    K: BatchKey<S, DB>,
{
    /// Releases `indices`, rows whose effect never started: each row still
    /// held ends its lease now (and gives back the attempt its claim
    /// counted); a row another worker took over meanwhile is skipped. A
    /// release that failed leaves its rows to their leases, as a crash
    /// would: they are never started here either way.
    pub(super) async fn release(&self, indices: &[usize]) {
        let order: Vec<usize> = (self.order.iter().copied())
            .filter(|i| indices.contains(i))
            .collect();
        if order.is_empty() {
            return;
        }
        let statement = Fenced {
            sql: self.in_flight.release_many_sql(),
            inserts: [&NONE, &NONE],
            tokens: false,
        };
        let transition = self.in_flight.done().transition();
        let moved = self.fenced(transition, &statement, &order, None, &[]).await;
        let mut unstarted = lock(&self.unstarted);
        match moved {
            Ok(moved) => {
                for (&i, moved) in order.iter().zip(moved) {
                    match moved {
                        Moved::Yes(_) => {
                            unstarted.released += 1;
                            self.set_aside(i);
                        }
                        Moved::No(found) => self.skipped(i, found),
                    }
                }
            }
            Err(error) => {
                tracing::warn!(
                    table = S::MACHINE.table(),
                    %error,
                    rows = order.len(),
                    "releasing a stopped batch's unstarted rows failed; they wait out their leases"
                );
                unstarted.left += order.len();
                unstarted.error = Some(error);
                for &i in &order {
                    self.set_aside(i);
                }
            }
        }
    }

    /// Leaves row `i` out of the batch's rows: its effect never started.
    fn set_aside(&self, i: usize) {
        self.rows[i].unstarted.store(true, Ordering::Relaxed);
        // Settled, so that nothing renews or starts it; the value is
        // never reported.
        self.settle(i, Ok(Finished::RetryLater));
    }
}
