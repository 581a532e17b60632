//! What [`Error::Timeout`](super::Error::Timeout) says.

/// What [`Error::Timeout`](super::Error::Timeout) says: of a transition, of a call of the
/// idempotency store or the inbox, or (with no table) of a transaction's
/// own statement, where only a `COMMIT` in flight leaves the outcome open.
pub(super) fn timeout_message(
    table: &str,
    call: &str,
    deadline: &core::time::Duration,
    outcome_known: bool,
) -> String {
    if is_store(table) {
        return match outcome_known {
            true => format!(
                "`{call}` on table `{table}` ran out of its {deadline:?} deadline; nothing was \
                 written"
            ),
            false => format!(
                "`{call}` on table `{table}` ran out of its {deadline:?} deadline while its write \
                 was in flight: it may still be applied"
            ),
        };
    }
    match (table.is_empty(), outcome_known) {
        (false, true) => format!(
            "transition `{call}` on table `{table}` ran out of its {deadline:?} deadline; nothing \
             was changed"
        ),
        (false, false) => format!(
            "transition `{call}` on table `{table}` ran out of its {deadline:?} deadline; the \
             UPDATE was in flight and may still commit: apply again to learn the row's state"
        ),
        (true, true) => format!(
            "the transaction's `{call}` ran out of its {deadline:?} deadline; nothing was \
             committed, and the transaction cannot commit"
        ),
        (true, false) => format!(
            "the transaction's `{call}` ran out of its {deadline:?} deadline while in flight: \
             the transaction may have committed; read the rows to learn what happened"
        ),
    }
}

/// Whether `table` is one of the fixed-table stores', in a schema or not.
fn is_store(table: &str) -> bool {
    let name = table.rsplit('.').next().unwrap_or(table);
    matches!(name, "stateguard_idempotency" | "stateguard_inbox")
}

#[cfg(test)]
mod tests {
    use super::super::{Error, ErrorKind};

    #[test]
    fn a_store_timeout_names_the_call_and_whether_a_write_was_in_flight() {
        let timeout = |table, call, outcome_known| Error::Timeout {
            table,
            transition: call,
            deadline: core::time::Duration::from_secs(2),
            outcome_known,
        };
        let cut = timeout("stateguard_inbox", "receive", false);
        assert_eq!(
            cut.to_string(),
            "`receive` on table `stateguard_inbox` ran out of its 2s deadline while its write \
             was in flight: it may still be applied"
        );
        assert_eq!(cut.kind(), ErrorKind::OutcomeUnknown);
        let read = timeout("stateguard_idempotency", "begin", true);
        assert_eq!(
            read.to_string(),
            "`begin` on table `stateguard_idempotency` ran out of its 2s deadline; nothing was \
             written"
        );
        assert_eq!(read.kind(), ErrorKind::Transient);
        let moved = timeout("payouts", "start", true).to_string();
        assert!(
            moved.starts_with("transition `start` on table `payouts`"),
            "{moved}"
        );
    }
}
