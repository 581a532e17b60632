//! `Machine::counts`: how many rows are in each state, each counted up to
//! `COUNT_CAP`, matched against the table's own `COUNT(*)`.

use crate::common;

use common::{Db, PayoutStatus, TestBackend};
use stateguard::bounds::Key;
use stateguard::{COUNT_CAP, StateMachine};

crate::backend_tests! {
    "counts_match" => counts_match_the_table,
}

async fn counts_match_the_table<DB: TestBackend>(db: Db<DB>)
where
    i64: Key<DB>,
{
    let cap = i64::try_from(COUNT_CAP).expect("cap");
    db.seed(cap + 20).await;
    for id in 1..=7 {
        let sending = PayoutStatus::start().apply(&db.pool, id).await;
        assert!(sending.expect("start").is_applied());
    }
    for id in 8..=9 {
        let cancelled = PayoutStatus::cancel().apply(&db.pool, id).await;
        assert!(cancelled.expect("cancel").is_applied());
    }
    // A status of another case is no state's: MySQL's collation alone
    // would count it as `pending`.
    db.set_status_raw(10, "PENDING").await;

    let counts = PayoutStatus::MACHINE
        .counts(&db.pool)
        .await
        .expect("counts");
    let states: Vec<PayoutStatus> = counts.iter().map(|c| c.state).collect();
    let declared: Vec<PayoutStatus> = PayoutStatus::MACHINE
        .states()
        .iter()
        .map(|s| s.value())
        .collect();
    assert_eq!(
        states, declared,
        "one count per state, in declaration order"
    );
    let of = |state: PayoutStatus| {
        let count = counts.iter().find(|c| c.state == state).expect("counted");
        (count.rows, count.more)
    };
    // `cap + 20 - 10` pending rows: counted to the cap, and more.
    assert_eq!(of(PayoutStatus::Pending), (COUNT_CAP, true));
    assert_eq!(of(PayoutStatus::Sending), (7, false));
    assert_eq!(of(PayoutStatus::Cancelled), (2, false));
    assert_eq!(of(PayoutStatus::Sent), (0, false));
    assert_eq!(of(PayoutStatus::Failed), (0, false));
    // Checked with SQL: every count below the cap is the table's.
    for count in counts.iter().filter(|c| !c.more) {
        let table = db.count_in(count.state.as_str()).await;
        assert_eq!(
            i64::try_from(count.rows).expect("rows"),
            table,
            "{:?}",
            count.state
        );
    }
}
