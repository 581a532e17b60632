//! `verify`: the schema read against the machine before the first move.
//! A schema that fits, the golden migrations included, reports nothing;
//! each way one does not fit is reported, all at once, naming the table
//! and column.

use crate::common;

use common::{Db, TestBackend, TransferStatus};
use stateguard::ddl::Dialect;
use stateguard::{SchemaProblem, SchemaProblemKind as Kind, StateMachine};

/// The `transfers` table as `TransferStatus` has it, with a history and
/// an emitting transition.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version",
    history = "transfer_history"
)]
enum Logged {
    #[state(initial)]
    #[transition(start -> Sending, emit("transfer.sending"))]
    Pending,
    #[state(in_flight(lease = "1s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent, set(bank_ref = bind(String)))]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// A table that fits nothing well: no key, a nullable version, a status
/// too short for two of its states, no `sending_since`.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "loose", column = "status", key = "id", version = "version")]
enum Loose {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "1s", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    Failed,
}

/// A guard and a `set` expression that read columns the table lacks.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "readers", column = "status", key = "id", version = "version")]
enum Reads {
    #[state(initial)]
    #[transition(approve -> Approved, guard = "risk < 50")]
    #[transition(bump -> Bumped, set(tries = "tries + attempts"))]
    Open,
    Approved,
    Bumped,
}

/// A guard that calls a function no database has: every statement that
/// reads it fails, naming no column.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "callers", column = "status", key = "id", version = "version")]
enum Calls {
    #[state(initial)]
    #[transition(approve -> Approved, guard = "no_such_function(id) > 0")]
    Open,
    Approved,
}

/// A machine whose table was never made.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "nowhere", column = "status", key = "id")]
enum Nowhere {
    #[state(initial)]
    #[transition(go -> Gone)]
    Here,
    Gone,
}

backend_tests! {
    "verify_fits" => a_schema_that_fits_reports_nothing,
    "verify_problems" => every_problem_is_reported_at_once,
    "verify_reads" => what_set_and_guards_read_is_prepared,
    "verify_once" => each_defect_is_reported_once,
    "verify_again" => a_second_verify_sees_the_schema_as_it_is,
}

fn described(problems: &[SchemaProblem]) -> Vec<String> {
    problems.iter().map(ToString::to_string).collect()
}

/// Each problem as a program reads it: kind, table, column.
fn read(problems: &[SchemaProblem]) -> Vec<(Kind, &str, Option<&str>)> {
    problems
        .iter()
        .map(|p| (p.kind(), p.table(), p.column()))
        .collect()
}

async fn execute_all<DB: TestBackend>(
    db: &Db<DB>,
    statements: impl IntoIterator<Item = &'static str>,
) {
    let mut conn = db.pool.acquire().await.unwrap();
    if DB::DIALECT == Dialect::Sqlite {
        // A pooled SQLite connection may hold the schema as it was when it
        // last read it, and compiles `DROP TRIGGER IF EXISTS` of a trigger
        // made since into nothing: a read brings its schema up to date.
        DB::execute(&mut conn, "SELECT COUNT(*) FROM sqlite_master", &[])
            .await
            .unwrap();
    }
    for statement in statements {
        DB::execute(&mut conn, statement, &[])
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// `Loose`'s problems with its table, the enforcement DDL's left out.
async fn loose_problems<DB: TestBackend>(db: &Db<DB>) -> Vec<SchemaProblem> {
    let problems = Loose::verify(&db.pool).await.unwrap();
    problems
        .into_iter()
        .filter(|p| !p.is_enforcement())
        .collect()
}

/// Each problem's kind and state string.
fn states(problems: &[SchemaProblem]) -> Vec<(Kind, Option<&str>)> {
    problems.iter().map(|p| (p.kind(), p.state())).collect()
}

async fn a_schema_that_fits_reports_nothing<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    db.transfers(1).await;
    // The tables fit; the enforcement DDL is not there yet.
    let problems = TransferStatus::verify(&db.pool).await.unwrap();
    assert_eq!(
        read(&problems),
        [(Kind::EnforcementMissing, "transfers", Some("status"))],
        "{:?}",
        described(&problems)
    );
    assert!(problems[0].is_enforcement());
    // The migration file, run as sqlx runs a migration: one text.
    let ddl = stateguard::ddl::generate::<TransferStatus>(DB::DIALECT);
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql(ddl.migration_sql())
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let problems = TransferStatus::verify(&db.pool).await.unwrap();
    assert!(problems.is_empty(), "{:?}", described(&problems));

    // Another version of the enum on the same table: its DDL is stale,
    // and the history table and the outbox are missing until made.
    let problems = Logged::verify(&db.pool).await.unwrap();
    assert_eq!(
        read(&problems),
        [
            (Kind::EnforcementStale, "transfers", Some("status")),
            (Kind::MissingTable, "transfer_history", None),
            (Kind::MissingTable, "stateguard_outbox", None),
        ],
        "{:?}",
        described(&problems)
    );
    assert_eq!(
        described(&problems)[1..],
        [
            "transfer_history: the history table does not exist",
            "stateguard_outbox: the outbox table, which `emit` writes to, does not exist",
        ]
    );
    execute_all(&db, ddl.down()).await;
    execute_all(&db, stateguard::ddl::generate::<Logged>(DB::DIALECT).up()).await;
    execute_all(&db, stateguard::outbox::ddl(DB::DIALECT).iter().copied()).await;
    let problems = Logged::verify(&db.pool).await.unwrap();
    assert!(problems.is_empty(), "{:?}", described(&problems));

    // A history table without a column the history inserts write: the
    // column, on the history table, once.
    execute_all(&db, ["ALTER TABLE transfer_history DROP COLUMN reason"]).await;
    let problems = Logged::verify(&db.pool).await.unwrap();
    assert_eq!(
        read(&problems),
        [(Kind::DoesNotPrepare, "transfer_history", Some("reason"))],
        "{:?}",
        described(&problems)
    );
    execute_all(&db, ["ALTER TABLE transfer_history ADD reason TEXT"]).await;
    let problems = Logged::verify(&db.pool).await.unwrap();
    assert!(problems.is_empty(), "{:?}", described(&problems));

    // The states' check dropped by hand: said so.
    let drop: &[&'static str] = match DB::DIALECT {
        Dialect::Sqlite => &[
            "DROP TRIGGER transfers_status_states_insert",
            "DROP TRIGGER transfers_status_states_update",
        ],
        _ => &["ALTER TABLE transfers DROP CONSTRAINT transfers_status_states"],
    };
    execute_all(&db, drop.iter().copied()).await;
    let problems = Logged::verify(&db.pool).await.unwrap();
    assert_eq!(
        read(&problems),
        [(Kind::StatesUnchecked, "transfers", Some("status"))],
        "{:?}",
        described(&problems)
    );
    assert!(problems[0].is_enforcement());
}

async fn every_problem_is_reported_at_once<DB: TestBackend>(db: Db<DB>) {
    let create = match DB::DIALECT {
        Dialect::Sqlite => "CREATE TABLE loose (id BIGINT, status TEXT NOT NULL, version BIGINT)",
        _ => "CREATE TABLE loose (id BIGINT, status VARCHAR(7) NOT NULL, version BIGINT)",
    };
    execute_all(&db, [create]).await;
    let problems = Loose::verify(&db.pool).await.unwrap();
    // "pending" and "sending" fit seven characters exactly: no length
    // problem; a status of 4 would not hold them.
    assert_eq!(
        read(&problems),
        [
            (Kind::MissingColumn, "loose", Some("sending_since")),
            (Kind::VersionNullable, "loose", Some("version")),
            (Kind::KeyNotUnique, "loose", Some("id")),
            (Kind::EnforcementMissing, "loose", Some("status")),
        ],
        "{:?}",
        described(&problems)
    );
    assert_eq!(
        problems[0].to_string(),
        "loose.sending_since: a `since` column, missing from the table"
    );

    // A status too short, and (MySQL, PostgreSQL) values it cannot hold.
    let narrow = match DB::DIALECT {
        Dialect::Postgres => Some(vec![
            "DROP TABLE loose",
            "CREATE TYPE loose_status AS ENUM ('pending', 'sending')",
            "CREATE TABLE loose (id BIGINT PRIMARY KEY, status loose_status NOT NULL, version \
             BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ)",
        ]),
        Dialect::MySql => Some(vec![
            "DROP TABLE loose",
            "CREATE TABLE loose (id BIGINT PRIMARY KEY, status ENUM('pending', 'sending') NOT \
             NULL, version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3))",
        ]),
        _ => None,
    };
    if let Some(statements) = narrow {
        execute_all(&db, statements).await;
        let problems = loose_problems(&db).await;
        assert_eq!(
            states(&problems),
            [
                (Kind::StateNotALabel, Some("sent")),
                (Kind::StateNotALabel, Some("failed")),
            ],
            "{:?}",
            described(&problems)
        );
        assert!(problems.iter().all(|p| p.column() == Some("status")));
        let narrower = [
            "DROP TABLE loose",
            "CREATE TABLE loose (id BIGINT PRIMARY KEY, status VARCHAR(4) NOT NULL, version \
             BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMP NULL)",
        ];
        execute_all(&db, narrower).await;
        let problems = loose_problems(&db).await;
        assert_eq!(
            states(&problems),
            [
                (Kind::StateTooLong, Some("pending")),
                (Kind::StateTooLong, Some("sending")),
                (Kind::StateTooLong, Some("failed")),
            ],
            "{:?}",
            described(&problems)
        );
        assert!(problems.iter().all(|p| p.column() == Some("status")));
        let type_name = match DB::DIALECT {
            Dialect::MySql => "varchar(4)",
            _ => "character varying(4)",
        };
        assert_eq!(
            problems[0].to_string(),
            format!(
                "loose.status: the state string \"pending\" has 7 characters, more than the \
                 column's 4 ({type_name})"
            )
        );
    }

    // Columns of the wrong kind (SQLite stores anything anywhere).
    if DB::DIALECT != Dialect::Sqlite {
        let wrong_kinds = [
            "DROP TABLE loose",
            "CREATE TABLE loose (id BIGINT PRIMARY KEY, status BIGINT NOT NULL, version \
             VARCHAR(10) NOT NULL, sending_since BIGINT)",
        ];
        execute_all(&db, wrong_kinds).await;
        let problems = loose_problems(&db).await;
        assert_eq!(
            read(&problems),
            [
                (Kind::WrongType, "loose", Some("status")),
                (Kind::WrongType, "loose", Some("version")),
                (Kind::WrongType, "loose", Some("sending_since")),
            ],
            "{:?}",
            described(&problems)
        );
        let text = described(&problems);
        assert!(
            text[0].starts_with("loose.status: the status column is bigint"),
            "{text:?}"
        );
        assert!(text[1].ends_with("it must hold an integer"), "{text:?}");
    }

    // No table at all: that one problem.
    let problems = Nowhere::verify(&db.pool).await.unwrap();
    assert_eq!(read(&problems), [(Kind::MissingTable, "nowhere", None)]);
    assert_eq!(problems[0].to_string(), "nowhere: the table does not exist");
}

/// A column that only a guard or a `set` expression reads is no column the
/// machine writes: the catalog reads pass it, and preparing the
/// statements finds it missing.
async fn what_set_and_guards_read_is_prepared<DB: TestBackend>(db: Db<DB>) {
    let with = |extra: &'static str| -> [&'static str; 2] {
        [
            "DROP TABLE IF EXISTS readers",
            match extra {
                "" => {
                    "CREATE TABLE readers (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
                       version BIGINT NOT NULL DEFAULT 0, tries BIGINT NOT NULL DEFAULT 0)"
                }
                _ => {
                    "CREATE TABLE readers (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
                      version BIGINT NOT NULL DEFAULT 0, tries BIGINT NOT NULL DEFAULT 0, risk \
                      BIGINT, attempts BIGINT)"
                }
            },
        ]
    };
    execute_all(&db, with("")).await;
    let problems = Reads::verify(&db.pool).await.unwrap();
    let problems: Vec<SchemaProblem> = problems
        .into_iter()
        .filter(|p| !p.is_enforcement())
        .collect();
    // Each column once, however many statements read it.
    assert_eq!(
        read(&problems),
        [
            (Kind::DoesNotPrepare, "readers", Some("risk")),
            (Kind::DoesNotPrepare, "readers", Some("attempts")),
        ],
        "{:?}",
        described(&problems)
    );
    // The words name the first statement and count the others.
    let text = described(&problems);
    assert!(
        text[0].starts_with("readers.risk: `available` (and "),
        "{text:?}"
    );
    assert!(
        text[1].starts_with("readers.attempts: `bump`'s compare-and-set (and "),
        "{text:?}"
    );
    // With the columns, every statement plans.
    execute_all(&db, with("risk, attempts")).await;
    let problems = Reads::verify(&db.pool).await.unwrap();
    assert!(
        problems.iter().all(SchemaProblem::is_enforcement),
        "{:?}",
        described(&problems)
    );
}

/// Each defect once, naming the column it concerns: a key that nothing
/// makes unique names the key, the enforcement DDL the status column, and
/// an enum is held to its labels, not to the length of its longest one.
async fn each_defect_is_reported_once<DB: TestBackend>(db: Db<DB>) {
    execute_all(
        &db,
        [
            "CREATE TABLE loose (id BIGINT, status VARCHAR(7) NOT NULL, version BIGINT NOT NULL \
             DEFAULT 0, sending_since TIMESTAMP NULL)",
        ],
    )
    .await;
    let problems = Loose::verify(&db.pool).await.unwrap();
    assert_eq!(
        read(&problems),
        [
            (Kind::KeyNotUnique, "loose", Some("id")),
            (Kind::EnforcementMissing, "loose", Some("status")),
        ],
        "{:?}",
        described(&problems)
    );

    // A failure that names no column: once, by the database's message.
    execute_all(
        &db,
        [
            "CREATE TABLE callers (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, version \
             BIGINT NOT NULL DEFAULT 0)",
        ],
    )
    .await;
    let problems = Calls::verify(&db.pool).await.unwrap();
    let problems: Vec<SchemaProblem> = problems
        .into_iter()
        .filter(|p| !p.is_enforcement())
        .collect();
    assert_eq!(
        read(&problems),
        [(Kind::DoesNotPrepare, "callers", None)],
        "{:?}",
        described(&problems)
    );
    let text = described(&problems);
    assert!(
        text[0].starts_with("callers: `available` (and "),
        "{text:?}"
    );

    // Two states that are no label of the status's enum, each once (on
    // MySQL, not again as longer than the longest label).
    let labels = match DB::DIALECT {
        Dialect::Postgres => vec![
            "DROP TABLE loose",
            "CREATE TYPE loose_status AS ENUM ('sent', 'failed')",
            "CREATE TABLE loose (id BIGINT PRIMARY KEY, status loose_status NOT NULL, version \
             BIGINT NOT NULL DEFAULT 0, sending_since TIMESTAMPTZ)",
        ],
        Dialect::MySql => vec![
            "DROP TABLE loose",
            "CREATE TABLE loose (id BIGINT PRIMARY KEY, status ENUM('sent', 'failed') NOT NULL, \
             version BIGINT NOT NULL DEFAULT 0, sending_since DATETIME(3))",
        ],
        _ => return,
    };
    execute_all(&db, labels).await;
    let problems = loose_problems(&db).await;
    assert_eq!(
        states(&problems),
        [
            (Kind::StateNotALabel, Some("pending")),
            (Kind::StateNotALabel, Some("sending")),
        ],
        "{:?}",
        described(&problems)
    );
    assert!(problems.iter().all(|p| p.column() == Some("status")));
}

/// `verify` called again on a connection that prepared the machine's
/// statements before plans them again: a column dropped since is found.
async fn a_second_verify_sees_the_schema_as_it_is<DB: TestBackend>(db: Db<DB>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let options = (*db.pool.connect_options()).clone();
    let pool = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let run = async |sql: &'static str| {
        let mut conn = pool.acquire().await.unwrap();
        sqlx::raw_sql(sql).execute(&mut *conn).await.unwrap();
    };
    run(
        "CREATE TABLE readers (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, version \
         BIGINT NOT NULL DEFAULT 0, tries BIGINT NOT NULL DEFAULT 0, risk BIGINT, attempts BIGINT)",
    )
    .await;
    let problems = Reads::verify(&pool).await.unwrap();
    assert!(
        problems.iter().all(SchemaProblem::is_enforcement),
        "{:?}",
        described(&problems)
    );
    run("ALTER TABLE readers DROP COLUMN risk").await;
    let problems = Reads::verify(&pool).await.unwrap();
    let problems: Vec<SchemaProblem> = problems
        .into_iter()
        .filter(|p| !p.is_enforcement())
        .collect();
    assert_eq!(
        read(&problems),
        [(Kind::DoesNotPrepare, "readers", Some("risk"))],
        "{:?}",
        described(&problems)
    );
}
