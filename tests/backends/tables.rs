//! `ddl::table`: a machine's tables made from its declarations alone.
//! The text, run twice and again after the enforcement migration, makes
//! tables that `verify` finds nothing wrong with, on which a move into an
//! in-flight state, a follow-up with a value, a retry and the history
//! write every column they use.
//!
//! The text run is the golden file `tests/ddl/every_column.<dialect>.table.sql`,
//! an `include_str!` literal, after checking that it is still exactly what
//! `ddl::table` generates (`STATEGUARD_BLESS=1 cargo test --test derive ddl::`
//! writes it anew).

use crate::common;

use common::{Db, EveryColumn, KeyColumn, TestBackend};
use stateguard::bounds::{ColumnTypes, FollowUpValues};
use stateguard::ddl::{self, Dialect};
use stateguard::{Effect, Finished, Retry, SchemaProblemKind, StateMachine};

backend_tests! {
    "tables_made" => the_generated_tables_fit_the_machine,
}

/// The golden file of `EveryColumn`'s tables for `DB`.
pub(crate) fn golden<DB: TestBackend>() -> &'static str {
    match DB::DIALECT {
        Dialect::Postgres => include_str!("../ddl/every_column.postgres.table.sql"),
        Dialect::Sqlite => include_str!("../ddl/every_column.sqlite.table.sql"),
        _ => include_str!("../ddl/every_column.mysql.table.sql"),
    }
}

/// A row as the database has it: status, version, bank reference,
/// attempts, and its stamps in microseconds since the epoch, by its own
/// clock.
#[derive(Debug, PartialEq)]
struct Row {
    status: String,
    version: i64,
    bank_ref: Option<String>,
    attempts: i64,
    sending_since: Option<i64>,
    sent_at: Option<i64>,
    next_attempt_at: Option<i64>,
}

async fn row<DB: TestBackend>(db: &Db<DB>, id: i64) -> Row {
    let read = match DB::DIALECT {
        Dialect::Postgres => {
            "SELECT status, version, bank_ref, attempts,
                    CAST(EXTRACT(EPOCH FROM sending_since) * 1000000 AS BIGINT),
                    CAST(EXTRACT(EPOCH FROM sent_at) * 1000000 AS BIGINT),
                    CAST(EXTRACT(EPOCH FROM next_attempt_at) * 1000000 AS BIGINT)
             FROM sg_table_payouts WHERE id = $1"
        }
        Dialect::Sqlite => {
            "SELECT status, version, bank_ref, attempts,
                    CAST(ROUND(unixepoch(sending_since, 'subsec') * 1000) AS INTEGER) * 1000,
                    CAST(ROUND(unixepoch(sent_at, 'subsec') * 1000) AS INTEGER) * 1000,
                    CAST(ROUND(unixepoch(next_attempt_at, 'subsec') * 1000) AS INTEGER) * 1000
             FROM sg_table_payouts WHERE id = ?"
        }
        _ => {
            "SELECT status, version, bank_ref, attempts,
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', sending_since),
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', sent_at),
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', next_attempt_at)
             FROM sg_table_payouts WHERE id = ?"
        }
    };
    let mut conn = db.pool.acquire().await.unwrap();
    type Columns = (
        String,
        i64,
        Option<String>,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let (status, version, bank_ref, attempts, sending_since, sent_at, next_attempt_at): Columns =
        DB::fetch_one(&mut conn, read, &[common::Bind::Int(id)])
            .await
            .unwrap();
    Row {
        status,
        version,
        bank_ref,
        attempts,
        sending_since,
        sent_at,
        next_attempt_at,
    }
}

async fn the_generated_tables_fit_the_machine<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    EveryColumn: ColumnTypes<DB> + FollowUpValues<DB>,
    i64: KeyColumn<DB>,
{
    let file = golden::<DB>();
    assert!(
        file == ddl::table::<EveryColumn, DB>().to_string(),
        "tests/ddl/every_column.{}.table.sql is stale: run `STATEGUARD_BLESS=1 cargo test --test \
         derive ddl::`",
        DB::DIALECT
    );
    let run = |text: &'static str| {
        let pool = db.pool.clone();
        async move {
            let mut conn = pool.acquire().await.unwrap();
            sqlx::raw_sql(text)
                .execute(&mut *conn)
                .await
                .unwrap_or_else(|e| panic!("{text}\n{e}"));
        }
    };
    // Twice: the second run finds every table and index made.
    run(file).await;
    run(file).await;
    let problems = EveryColumn::verify(&db.pool).await.unwrap();
    let kinds: Vec<SchemaProblemKind> = problems.iter().map(|p| p.kind()).collect();
    assert_eq!(
        kinds,
        [SchemaProblemKind::EnforcementMissing],
        "{problems:?}"
    );
    // The enforcement migration makes the history table with the same
    // statements, so it runs after the tables; and they run after it.
    run(ddl::generate::<EveryColumn>(DB::DIALECT).migration_sql()).await;
    run(file).await;
    let problems = EveryColumn::verify(&db.pool).await.unwrap();
    assert!(problems.is_empty(), "{problems:?}");

    // A row takes its status, version and attempts from the defaults.
    run("INSERT INTO sg_table_payouts (id) VALUES (1), (2)").await;
    let fresh = Row {
        status: "pending".to_owned(),
        version: 0,
        bank_ref: None,
        attempts: 0,
        sending_since: None,
        sent_at: None,
        next_attempt_at: None,
    };
    assert_eq!(row(&db, 1).await, fresh);

    // Into the in-flight state: its stamp and its first attempt.
    let won = EveryColumn::start()
        .apply(&db.pool, 1_i64)
        .await
        .unwrap()
        .won()
        .unwrap();
    assert_eq!(won.attempt(), Some(1));
    let sending = row(&db, 1).await;
    assert_eq!(
        (sending.status.as_str(), sending.version, sending.attempts),
        ("sending", 1, 1)
    );
    let since = sending.sending_since.expect("the in-flight state's stamp");
    // The follow-up writes its bound value and the `sent` state's stamp.
    let finished = won
        .finish(&db.pool, |_: Effect<EveryColumn, i64>| async {
            EveryColumn::confirm("bank-1".to_owned()).into()
        })
        .await
        .unwrap();
    assert_eq!(
        finished,
        Finished::Done {
            state: EveryColumn::Sent,
            occurrence: 2
        }
    );
    let sent = row(&db, 1).await;
    assert_eq!(
        (
            sent.status.as_str(),
            sent.version,
            sent.bank_ref.as_deref(),
            sent.attempts,
            sent.next_attempt_at,
        ),
        ("sent", 2, Some("bank-1"), 1, None)
    );
    assert!(sent.sent_at.expect("the `sent` state's stamp") >= since);

    // A retry: the next attempt's time, a minute on by the database's clock.
    let won = EveryColumn::start()
        .apply(&db.pool, 2_i64)
        .await
        .unwrap()
        .won()
        .unwrap();
    let later = won
        .finish(&db.pool, |_: Effect<EveryColumn, i64>| async {
            Retry::after(std::time::Duration::from_secs(60)).into()
        })
        .await
        .unwrap();
    assert_eq!(later, Finished::RetryLater);
    let waiting = row(&db, 2).await;
    assert_eq!(
        (waiting.status.as_str(), waiting.version, waiting.attempts),
        ("sending", 1, 1)
    );
    let (since, next) = (
        waiting.sending_since.unwrap(),
        waiting.next_attempt_at.expect("the next attempt"),
    );
    assert!(next - since >= 59_000_000, "{waiting:?}");

    // Each move is in the history table, with its occurrence.
    let history = EveryColumn::history(&db.pool, 1_i64).await.unwrap();
    let moves: Vec<_> = history
        .iter()
        .map(|h| (h.transition.name(), h.from, h.to, h.occurrence))
        .collect();
    assert_eq!(
        moves,
        [
            ("start", EveryColumn::Pending, EveryColumn::Sending, 1),
            ("confirm", EveryColumn::Sending, EveryColumn::Sent, 2),
        ]
    );
}
