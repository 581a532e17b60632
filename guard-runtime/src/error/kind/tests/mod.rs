//! Every variant of `Error` in its kind, with the database errors that
//! decide the kind of the variants that carry one.

use super::ErrorKind::{self, Data, Database, Misuse, OutcomeUnknown, Superseded, Transient};
use crate::error::Error;

mod fixtures;

use fixtures::{Lone, coded, reset, sources};

/// One value of every variant, with the kind it must have.
fn every_variant() -> Vec<(String, Error, ErrorKind)> {
    let (table, transition, machine, state) = ("payouts", "start", "PayoutStatus", "sending");
    let mut all: Vec<(String, Error, ErrorKind)> = Vec::new();
    let mut add = |what: &str, error: Error, kind: ErrorKind| {
        all.push((what.to_owned(), error, kind));
    };
    for (what, _, kind) in sources() {
        // A write may have committed before the connection broke.
        let written = match what {
            "broken connection"
            | "protocol error"
            | "worker crashed"
            | "PostgreSQL admin shutdown"
            | "PostgreSQL cannot connect now" => OutcomeUnknown,
            // A statement's value refused for what it is.
            "PostgreSQL invalid JSON text" => Data,
            _ => kind,
        };
        let source = || {
            sources()
                .into_iter()
                .find(|(w, ..)| *w == what)
                .map(|(_, source, _)| source)
                .unwrap_or(sqlx::Error::RowNotFound)
        };
        add(what, Error::Begin { source: source() }, kind);
        // The pooler check writes nothing: its kind is its source's.
        add(what, Error::PoolerCheck { source: source() }, kind);
        let store = Error::Store {
            table: "stateguard_idempotency",
            call: "begin",
            source: source(),
        };
        add(what, store, written);
        let recovery = Error::Recovery {
            table,
            state,
            source: source(),
        };
        add(what, recovery, written);
    }
    // In flight: a broken connection or ended session may have committed.
    let lost = |n| match n {
        0 => reset(),
        1 => coded("57P01"),
        2 => coded("57014"),
        _ => sqlx::Error::WorkerCrashed,
    };
    for n in 0..4 {
        let database = Error::Database {
            table,
            transition,
            source: lost(n),
        };
        add("lost in a statement", database, OutcomeUnknown);
        add(
            "lost in COMMIT",
            Error::Commit { source: lost(n) },
            OutcomeUnknown,
        );
        let rolled_back = Error::RolledBack {
            source: Some(lost(n)),
        };
        add("lost before COMMIT", rolled_back, OutcomeUnknown);
    }
    let database = |source| Error::Database {
        table,
        transition,
        source,
    };
    add("statement deadlock", database(coded("40P01")), Transient);
    #[cfg(feature = "sqlite")]
    add("statement busy", database(coded("5")), Transient);
    add(
        "statement pool timeout",
        database(sqlx::Error::PoolTimedOut),
        Transient,
    );
    add(
        "statement unique violation",
        database(coded("23505")),
        Database,
    );
    add("statement syntax error", database(coded("42601")), Database);
    // A value the database refused for what it is: the caller's input.
    for code in ["22001", "22003", "22P02"] {
        add("statement refused value", database(coded(code)), Data);
    }
    #[cfg(feature = "sqlite")]
    add("statement strict column", database(coded("3091")), Data);
    add(
        "COMMIT data exception",
        Error::Commit {
            source: coded("22001"),
        },
        Database,
    );
    // Not sent: its transaction can no longer commit. Another invalid
    // argument is no such thing.
    let refused = || sqlx::Error::InvalidArgument(crate::error::REFUSED.to_owned());
    assert!(database(refused()).is_retry_transaction());
    add("statement refused", database(refused()), Transient);
    let other = sqlx::Error::InvalidArgument("bad".to_owned());
    assert!(!database(other).is_retry_transaction());
    let other = sqlx::Error::InvalidArgument("bad".to_owned());
    add("statement invalid argument", database(other), Database);
    let commit = |source| Error::Commit { source };
    add("COMMIT serialization", commit(coded("40001")), Transient);
    add(
        "COMMIT deferred constraint",
        commit(coded("23503")),
        Database,
    );
    add(
        "COMMIT pool closed",
        commit(sqlx::Error::PoolClosed),
        Database,
    );
    let retry = Error::RetryTransaction {
        table,
        transition,
        source: coded("40001"),
    };
    add("RetryTransaction", retry, Transient);
    add("RolledBack", Error::RolledBack { source: None }, Transient);
    let rolled_back = Error::RolledBack {
        source: Some(coded("25P02")),
    };
    add("RolledBack, aborted", rolled_back, Transient);
    let contention = |last| Error::Contention {
        table,
        transition,
        attempts: 10,
        last,
    };
    add("Contention", contention(None), Transient);
    add(
        "Contention, deadlock",
        contention(Some(coded("40P01"))),
        Transient,
    );
    let timeout = |outcome_known| Error::Timeout {
        table,
        transition,
        deadline: core::time::Duration::from_secs(1),
        outcome_known,
    };
    add("Timeout, nothing in flight", timeout(true), Transient);
    add("Timeout, UPDATE in flight", timeout(false), OutcomeUnknown);
    let misuse = [
        Error::Misuse(crate::error::Misuse::NoVersionColumn {
            machine,
            transition,
        }),
        Error::Misuse(crate::error::Misuse::ForeignWin),
        Error::Misuse(crate::error::Misuse::ConnectionInTransaction),
        Error::Misuse(crate::error::Misuse::NestedTransaction { depth: 2 }),
        Error::Misuse(crate::error::Misuse::NotInFlight { machine, state }),
        Error::Misuse(crate::error::Misuse::NoFailedTransition { machine, state }),
        Error::Misuse(crate::error::Misuse::RetryNotDeclared { machine, state }),
        Error::Misuse(crate::error::Misuse::NotAFollowUp {
            machine,
            state,
            verdict: "start",
        }),
        Error::Misuse(crate::error::Misuse::FollowUpValues {
            machine,
            transition,
            expects: "String",
        }),
        Error::Misuse(crate::error::Misuse::ExpectingMany {
            table,
            transition,
            call: "claim",
        }),
        Error::Misuse(crate::error::Misuse::BatchOfWins {
            machine,
            reason: "the same row twice",
        }),
        Error::Misuse(crate::error::Misuse::BatchKey {
            table,
            transition,
            key: "BYTEA".into(),
            reason: "binds as bytes".into(),
        }),
        Error::Misuse(crate::error::Misuse::NoSinceColumn {
            machine,
            transition,
        }),
        Error::Misuse(crate::error::Misuse::NoTimeout {
            machine,
            transition,
        }),
        Error::Misuse(crate::error::Misuse::NoHistory { machine }),
    ];
    for error in misuse {
        add("misuse", error, Misuse);
    }
    let unknown = crate::StateMachine::parse_db_str;
    let data = [
        Error::BadKey {
            field: "idempotency key",
            length: 256,
        },
        Error::UnknownState(unknown("gone").map(|_: Lone| ()).err().unwrap_or_else(|| {
            panic!("`gone` parsed as a state");
        })),
        Error::NullStatus {
            table,
            column: "status",
        },
        Error::AmbiguousKey {
            table,
            key: "id",
            transition,
            rows: 2,
        },
        Error::UnknownTransition {
            machine,
            name: "teleport".into(),
        },
        Error::HistoryDetails {
            table: "payout_history",
            position: 1,
            transition,
            occurrence: 1,
            problem: "expected value at line 1 column 1".into(),
        },
        Error::NoteDetails {
            table,
            transition,
            problem: "expected value at line 1 column 1".into(),
        },
    ];
    for error in data {
        add("data", error, Data);
    }
    let lease_lost = Error::IdempotencyLeaseLost {
        scope: "payouts".into(),
        key: "k".into(),
    };
    add("IdempotencyLeaseLost", lease_lost, Superseded);
    add(
        "RowVanished",
        Error::RowVanished { table, transition },
        Superseded,
    );
    let read_only = Error::ReadOnly {
        table,
        transition,
        source: coded("25006"),
    };
    add("ReadOnly", read_only, Transient);
    let session = |pid| crate::error::ServerSession {
        pid,
        server_started: "2026-01-01 00:00:00+00".into(),
    };
    let moved = crate::error::Multiplexing::Moved {
        before: session(7),
        after: session(8),
    };
    add(
        "Multiplexed, moved",
        Error::Multiplexed { seen: moved },
        Database,
    );
    let shared = crate::error::Multiplexing::Shared {
        backend: session(7),
    };
    add(
        "Multiplexed, shared",
        Error::Multiplexed { seen: shared },
        Database,
    );
    let mix_up = || {
        crate::error::StatementMixUp::new(
            "UPDATE t SET s = 'b' WHERE k = $1 RETURNING 'stateguard 0123456789abcdef'::text",
            "stateguard 0123456789abcdef",
            Some("packed".into()),
        )
    };
    add(
        "StatementMixUp",
        Error::StatementMixUp(mix_up()),
        OutcomeUnknown,
    );
    // A server error on a multiplexed pool, which may be another
    // client's statement's.
    add(
        "StatementMixUp, refused",
        Error::StatementMixUp(crate::error::StatementMixUp::refused(
            "UPDATE t SET s = 'b' WHERE k = $1 RETURNING 'stateguard 0123456789abcdef'::text",
            "stateguard 0123456789abcdef",
            Some("42P01".into()),
            "relation \"elsewhere\" does not exist".into(),
        )),
        OutcomeUnknown,
    );
    // A mix-up that reached a wrapper of a database error is still one.
    add(
        "Database, mix-up",
        Error::Database {
            table,
            transition,
            source: mix_up().into(),
        },
        OutcomeUnknown,
    );
    // A known refusal after committed changes hides what committed: the
    // outcome is unknown, whatever the refusal's own kind.
    add(
        "Unreported",
        Error::Unreported {
            table,
            call: transition,
            source: Box::new(Error::Database {
                table,
                transition,
                source: sqlx::Error::Protocol("refused".into()),
            }),
        },
        OutcomeUnknown,
    );
    all
}

/// Which variant `error` is. No wildcard: a new variant stops this from
/// compiling until it gets a number here (and `VARIANTS` grows), and then
/// `every_variant_is_in_its_kind` fails until the table holds it too.
fn variant(error: &Error) -> usize {
    match error {
        Error::Database { .. } => 0,
        Error::UnknownState(_) => 1,
        Error::RetryTransaction { .. } => 2,
        Error::Contention { .. } => 3,
        Error::Timeout { .. } => 4,
        Error::Misuse(crate::error::Misuse::NoVersionColumn { .. }) => 5,
        Error::AmbiguousKey { .. } => 6,
        Error::Commit { .. } => 7,
        Error::RolledBack { .. } => 8,
        Error::Begin { .. } => 9,
        Error::Misuse(crate::error::Misuse::ForeignWin) => 10,
        Error::Misuse(crate::error::Misuse::ConnectionInTransaction) => 11,
        Error::Misuse(crate::error::Misuse::NestedTransaction { .. }) => 12,
        Error::NullStatus { .. } => 13,
        Error::Misuse(crate::error::Misuse::NotInFlight { .. }) => 14,
        Error::Misuse(crate::error::Misuse::NoFailedTransition { .. }) => 15,
        Error::Misuse(crate::error::Misuse::NotAFollowUp { .. }) => 16,
        Error::Misuse(crate::error::Misuse::FollowUpValues { .. }) => 17,
        Error::Misuse(crate::error::Misuse::ExpectingMany { .. }) => 18,
        Error::Misuse(crate::error::Misuse::BatchKey { .. }) => 19,
        Error::BadKey { .. } => 20,
        Error::IdempotencyLeaseLost { .. } => 21,
        Error::Store { .. } => 22,
        Error::Misuse(crate::error::Misuse::NoSinceColumn { .. }) => 23,
        Error::Misuse(crate::error::Misuse::NoTimeout { .. }) => 24,
        Error::Misuse(crate::error::Misuse::NoHistory { .. }) => 25,
        Error::UnknownTransition { .. } => 26,
        Error::RowVanished { .. } => 27,
        Error::Recovery { .. } => 28,
        Error::HistoryDetails { .. } => 29,
        Error::ReadOnly { .. } => 30,
        Error::Multiplexed { .. } => 31,
        Error::PoolerCheck { .. } => 32,
        Error::StatementMixUp(_) => 33,
        Error::Misuse(crate::error::Misuse::RetryNotDeclared { .. }) => 34,
        Error::Misuse(crate::error::Misuse::BatchOfWins { .. }) => 35,
        Error::Unreported { .. } => 36,
        Error::NoteDetails { .. } => 37,
    }
}

const VARIANTS: usize = 38;

#[test]
fn every_variant_is_in_its_kind() {
    let all = every_variant();
    let mut seen = [false; VARIANTS];
    let mut wrong = Vec::new();
    for (what, error, expected) in &all {
        seen[variant(error)] = true;
        let kind = error.kind();
        if kind != *expected {
            wrong.push(format!("{what}: {error:?} is {kind:?}, not {expected:?}"));
        }
        assert_eq!(error.is_transient(), kind == Transient, "{error:?}");
        assert_eq!(error.is_misuse(), kind == Misuse, "{error:?}");
        assert_eq!(
            error.is_outcome_unknown(),
            kind == OutcomeUnknown,
            "{error:?}"
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let missing: Vec<usize> = (0..VARIANTS).filter(|&v| !seen[v]).collect();
    assert!(missing.is_empty(), "variants without a case: {missing:?}");
}
