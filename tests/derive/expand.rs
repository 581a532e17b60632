//! `tests/expand/payouts.expanded.rs` is the derive's output for the payout
//! enum of `examples/payouts/status.rs`, formatted, for reviewers to read.
//! stateguard-macros' unit tests keep it fresh (`STATEGUARD_BLESS=1 cargo
//! test -p stateguard-macros` rewrites it); this test proves that it is real code: it
//! compiles on a copy of the enum without the derive, and its metadata and
//! SQL are the derived enum's, literal for literal.

use stateguard::StateMachine;
use stateguard::ddl::{self, Dialect};
use stateguard::meta::Sql;

mod expanded {
    /// The payout enum without `#[derive(StateMachine)]` and its attributes:
    /// the snapshot supplies every impl.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PayoutStatus {
        Pending,
        Sending,
        Sent,
        Failed,
        Cancelled,
    }

    include!("../expand/payouts.expanded.rs");
}

use crate::status::PayoutStatus as Derived;
use expanded::PayoutStatus as Expanded;

fn same_sql(what: &str, derived: &Sql, expanded: &Sql) {
    assert_eq!(
        derived.postgres(),
        expanded.postgres(),
        "{what} (PostgreSQL)"
    );
    assert_eq!(derived.sqlite(), expanded.sqlite(), "{what} (SQLite)");
    assert_eq!(derived.mysql(), expanded.mysql(), "{what} (MySQL)");
}

#[test]
fn the_snapshot_is_the_derived_machine() {
    let (d, e) = (Derived::MACHINE, Expanded::MACHINE);
    assert_eq!(
        (d.name(), d.table(), d.column(), d.key(), d.version()),
        (e.name(), e.table(), e.column(), e.key(), e.version())
    );
    assert_eq!(d.initial().as_str(), e.initial().as_str());
    let states = |m: &'static stateguard::meta::Machine<Derived>| {
        m.states()
            .iter()
            .map(|s| (s.variant(), s.db_str()))
            .collect::<Vec<_>>()
    };
    let expanded_states: Vec<_> = e
        .states()
        .iter()
        .map(|s| (s.variant(), s.db_str()))
        .collect();
    assert_eq!(states(d), expanded_states);
    same_sql("select", d.select_sql(), e.select_sql());
    same_sql(
        "select in a transaction",
        d.select_in_transaction_sql(),
        e.select_in_transaction_sql(),
    );
    assert_eq!(d.transitions().len(), e.transitions().len());
    for (dt, et) in d.transitions().iter().zip(e.transitions()) {
        assert_eq!(dt.name(), et.name());
        assert_eq!(dt.target().as_str(), et.target().as_str());
        let sources = |s: &[Expanded]| s.iter().map(|s| s.as_str()).collect::<Vec<_>>();
        let derived_sources: Vec<_> = dt.sources().iter().map(|s| s.as_str()).collect();
        assert_eq!(derived_sources, sources(et.sources()));
        same_sql(dt.name(), dt.update_sql(), et.update_sql());
        same_sql(dt.name(), dt.read_back_sql(), et.read_back_sql());
    }
    for dialect in [Dialect::Postgres, Dialect::Sqlite, Dialect::MySql] {
        let (dd, ed) = (
            ddl::generate::<Derived>(dialect),
            ddl::generate::<Expanded>(dialect),
        );
        assert_eq!(dd.migration(), ed.migration(), "{dialect}");
        assert_eq!(dd.down_migration(), ed.down_migration(), "{dialect}");
        assert_eq!(dd.check_clause(), ed.check_clause(), "{dialect}");
    }
}

#[test]
fn the_snapshot_generates_working_impls() {
    let names = [
        Expanded::start(),
        Expanded::confirm("tr_1".to_owned()).transition(),
        Expanded::fail(),
        Expanded::cancel(),
    ]
    .map(|t| t.name());
    assert_eq!(names, ["start", "confirm", "fail", "cancel"]);
    assert_eq!(Expanded::Sending.to_string(), "sending");
    assert_eq!(
        "cancelled".parse::<Expanded>().ok(),
        Some(Expanded::Cancelled)
    );
    assert!("Cancelled".parse::<Expanded>().is_err());
}
