//! The enforcement DDL of `stateguard::ddl`: its text, locked by golden
//! files, and its effect on every backend with triggers.
//!
//! The golden files under `tests/ddl/` are what a user drops into
//! `migrations/`: `<machine>.<dialect>.sql` and `<machine>.<dialect>.down.sql`.
//! `STATEGUARD_BLESS=1 cargo test --test test_ddl` writes them anew; review
//! the diff.
//!
//! The server tests apply those very files. They reach sqlx as
//! `include_str!` literals, so no SQL built at run time is ever executed,
//! and each test first checks that the file is still exactly what the
//! generator returns.

mod common;

use std::path::{Path, PathBuf};

use common::PayoutStatus;
use stateguard::ddl::{self, Ddl, Dialect};
use stateguard::{Outcome, StateMachine};

/// The payout machine on a schema-qualified table: `schema.table` is a
/// PostgreSQL schema, a MySQL database and an attached SQLite database.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "sg_ddl_qualified.payouts", column = "status", key = "id")]
pub enum QualifiedStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP"))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    Failed,
    Cancelled,
}

/// States whose strings differ only in the case of a non-ASCII letter and in
/// accents: distinct to stateguard, one string to MariaDB's default
/// collation (`utf8mb4_general_ci`).
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "labels", column = "status", key = "id")]
pub enum AccentStatus {
    #[state(initial)]
    #[transition(settle -> Etat)]
    Pending,
    #[state(rename = "état")]
    #[transition(shout -> EtatUpper)]
    Etat,
    #[state(rename = "ÉTAT")]
    EtatUpper,
}

const DIALECTS: [Dialect; 3] = [Dialect::Postgres, Dialect::Sqlite, Dialect::MySql];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ddl")
}

/// Compares `actual` with the golden file `name`, or writes it when
/// `STATEGUARD_BLESS=1`. Returns what is wrong, if anything.
fn golden(name: &str, actual: &str) -> Option<String> {
    let path = golden_dir().join(name);
    if std::env::var("STATEGUARD_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(golden_dir()).expect("create tests/ddl");
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        return None;
    }
    let expected = match std::fs::read_to_string(&path) {
        Ok(expected) => expected,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    if expected == actual {
        return None;
    }
    let expected_lines: Vec<&str> = expected.lines().collect();
    let actual_lines: Vec<&str> = actual.lines().collect();
    let line = (0..expected_lines.len().max(actual_lines.len()))
        .find(|&i| expected_lines.get(i) != actual_lines.get(i))
        .unwrap_or(0);
    Some(format!(
        "{} differs from the generated DDL, first at line {}:\n  file:      {}\n  generated: {}\n\
         --- generated text ---\n{actual}",
        path.display(),
        line + 1,
        expected_lines.get(line).unwrap_or(&"<end of file>"),
        actual_lines.get(line).unwrap_or(&"<end of text>"),
    ))
}

fn golden_files(machine: &str, ddl: &Ddl) -> [(String, String); 2] {
    let dialect = ddl.dialect();
    [
        (format!("{machine}.{dialect}.sql"), ddl.migration()),
        (
            format!("{machine}.{dialect}.down.sql"),
            ddl.down_migration(),
        ),
    ]
}

#[test]
fn generated_ddl_matches_the_golden_files() {
    let mut problems = Vec::new();
    for dialect in DIALECTS {
        let files = [
            golden_files("payouts", &ddl::generate::<PayoutStatus>(dialect)),
            golden_files("qualified", &ddl::generate::<QualifiedStatus>(dialect)),
        ];
        for (name, text) in files.iter().flatten() {
            problems.extend(golden(name, text));
        }
    }
    for (name, text) in golden_files("accents", &ddl::mysql::<AccentStatus>()) {
        problems.extend(golden(&name, &text));
    }
    assert!(
        problems.is_empty(),
        "{}\n\nIf the change is intended, run `STATEGUARD_BLESS=1 cargo test --test test_ddl` \
         and review the diff of tests/ddl/.",
        problems.join("\n\n")
    );
}

#[test]
fn shorthands_display_and_statements_agree() {
    assert_eq!(
        ddl::postgres::<PayoutStatus>(),
        ddl::generate::<PayoutStatus>(Dialect::Postgres)
    );
    assert_eq!(
        ddl::sqlite::<PayoutStatus>(),
        ddl::generate::<PayoutStatus>(Dialect::Sqlite)
    );
    assert_eq!(
        ddl::mysql::<PayoutStatus>(),
        ddl::generate::<PayoutStatus>(Dialect::MySql)
    );
    for dialect in DIALECTS {
        let ddl = ddl::generate::<PayoutStatus>(dialect);
        assert_eq!(ddl.dialect(), dialect);
        assert_eq!(ddl.to_string(), ddl.migration());
        assert_eq!(ddl.table(), "payouts");
        assert_eq!(ddl.column(), "status");
        assert_eq!(ddl.constraint_name(), "payouts_status_states");
        assert_eq!(ddl.trigger_name(), "payouts_status_transitions");
        // Every statement appears in the file, followed by `;`.
        let text = ddl.migration();
        for statement in ddl.statements().iter().chain(ddl.down_statements()) {
            assert!(!statement.ends_with(';'), "{statement}");
        }
        for statement in ddl.statements() {
            assert!(text.contains(&format!("{statement};\n")), "{statement}");
        }
        // Every state is named by the check, every transition by the trigger.
        for state in PayoutStatus::MACHINE.states() {
            assert!(
                ddl.check_clause()
                    .contains(&format!("'{}'", state.db_str())),
                "{}",
                ddl.check_clause()
            );
        }
        assert!(
            text.contains("stateguard: illegal transition on payouts: "),
            "{text}"
        );
    }
    // The same enum always gives the same bytes.
    assert_eq!(
        ddl::postgres::<QualifiedStatus>().migration(),
        ddl::postgres::<QualifiedStatus>().migration()
    );
}

#[test]
fn qualified_tables_put_objects_in_the_tables_schema() {
    let pg = ddl::postgres::<QualifiedStatus>().migration();
    assert!(
        pg.contains(r#"ALTER TABLE "sg_ddl_qualified"."payouts""#),
        "{pg}"
    );
    assert!(
        pg.contains(r#"CREATE FUNCTION "sg_ddl_qualified"."payouts_status_transitions"()"#),
        "{pg}"
    );
    assert!(
        pg.contains(r#"CREATE TRIGGER "payouts_status_transitions""#),
        "{pg}"
    );
    let lite = ddl::sqlite::<QualifiedStatus>().migration();
    assert!(
        lite.contains(r#"CREATE TRIGGER "sg_ddl_qualified"."payouts_status_transitions""#),
        "{lite}"
    );
    assert!(lite.contains(r#"ON "payouts""#), "{lite}");
    let my = ddl::mysql::<QualifiedStatus>().migration();
    assert!(
        my.contains("CREATE TRIGGER `sg_ddl_qualified`.`payouts_status_transitions`"),
        "{my}"
    );
    assert!(
        my.contains("BEFORE UPDATE ON `sg_ddl_qualified`.`payouts`"),
        "{my}"
    );
}

/// The examples in `stateguard::ddl`'s documentation are the text the
/// payout machine really gets.
#[test]
fn documented_examples_are_generated_text() {
    let source = include_str!("../guard-runtime/src/ddl.rs");
    let generated: Vec<String> = DIALECTS
        .iter()
        .map(|&dialect| {
            let ddl = ddl::generate::<PayoutStatus>(dialect);
            format!("{}\n{}", ddl.migration(), ddl.check_clause())
        })
        .collect();
    let mut blocks = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in source.lines() {
        let line = line.trim_start();
        let Some(doc) = line
            .strip_prefix("//!")
            .or_else(|| line.strip_prefix("///"))
        else {
            continue;
        };
        let doc = doc.strip_prefix(' ').unwrap_or(doc);
        match (&mut block, doc) {
            (None, "```text") => block = Some(Vec::new()),
            (Some(lines), "```") => {
                blocks.push(lines.join("\n"));
                block = None;
            }
            (Some(lines), doc) => lines.push(doc),
            (None, _) => {}
        }
    }
    // Blocks that name the payouts table, quoted as in generated SQL.
    let examples: Vec<&String> = blocks
        .iter()
        .filter(|b| b.contains("\"payouts") || b.contains("`payouts"))
        .collect();
    assert!(examples.len() >= 4, "{examples:#?}");
    for example in examples {
        assert!(
            generated.iter().any(|text| text.contains(example.as_str())),
            "this example in guard-runtime/src/ddl.rs is not what the generator writes:\n{example}"
        );
    }
}

/// A machine whose names are too long for PostgreSQL and MySQL.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "payout_records_of_the_treasury_operations_team_in_the_eu",
    column = "current_settlement_status",
    key = "id"
)]
enum LongNames {
    #[state(initial)]
    #[transition(go -> Gone)]
    Here,
    Gone,
}

#[test]
fn long_names_are_shortened_to_63_characters() {
    for dialect in DIALECTS {
        let ddl = ddl::generate::<LongNames>(dialect);
        assert_eq!(ddl.constraint_name().len(), 63, "{}", ddl.constraint_name());
        assert_eq!(ddl.trigger_name().len(), 63, "{}", ddl.trigger_name());
        assert!(ddl.constraint_name().ends_with("_states"));
        assert!(ddl.trigger_name().ends_with("_transitions"));
        assert!(
            ddl.constraint_name()
                .starts_with("payout_records_of_the_treasury")
        );
        assert_ne!(ddl.constraint_name(), ddl.trigger_name());
    }
}

/// The statements of a migration file: the text after the header comment,
/// split where a statement ends (`;` and a blank line, which never occurs
/// inside one). Slices of a `&'static str` are `&'static str`, which sqlx
/// accepts as they are.
fn statements_of(file: &'static str) -> Vec<&'static str> {
    let (_header, body) = file.split_once("\n\n").expect("a header comment");
    body.strip_suffix(";\n")
        .expect("the file ends with `;`")
        .split(";\n\n")
        .collect()
}

/// The error of a statement that must fail, as the database reported it.
fn rejected<T: std::fmt::Debug>(result: Result<T, sqlx::Error>, what: &str) -> (String, String) {
    match result {
        Ok(done) => panic!("{what} must be rejected, but it ran: {done:?}"),
        Err(sqlx::Error::Database(db)) => (
            db.message().to_owned(),
            db.code().map(|c| c.into_owned()).unwrap_or_default(),
        ),
        Err(other) => panic!("{what} failed, but not in the database: {other:?}"),
    }
}

/// `check_clause()` of the payout machines, as a literal to build a
/// `CREATE TABLE` from.
macro_rules! check_clause {
    (Postgres) => {
        check_clause!(Sqlite)
    };
    (Sqlite) => {
        "CONSTRAINT \"payouts_status_states\" CHECK \
         (\"status\" IN ('pending', 'sending', 'sent', 'failed', 'cancelled'))"
    };
    (MySql) => {
        "CONSTRAINT `payouts_status_states` CHECK \
         (CAST(`status` AS BINARY) IN ('pending', 'sending', 'sent', 'failed', 'cancelled'))"
    };
}

/// One machine's enforcement on one database, from its golden files.
///
/// `$pool` holds a `payouts` table (reached as `$table`) with `id`,
/// `status`, `attempts` and `sent_at`. `$unknown` is part of the message
/// that rejects an unknown state; `$code` is the error code of the
/// transition trigger.
macro_rules! enforcement {
    (
        $pool:expr, $machine:ident, $golden:literal, $table:literal, $variant:ident => $dialect:literal,
        unknown: $unknown:expr, code: $code:literal $(,)?
    ) => {{
        let pool = $pool;
        let ddl = ddl::generate::<$machine>(Dialect::$variant);
        let up_file: &'static str = include_str!(concat!("ddl/", $golden, ".", $dialect, ".sql"));
        let down_file: &'static str =
            include_str!(concat!("ddl/", $golden, ".", $dialect, ".down.sql"));
        assert!(
            up_file == ddl.migration() && down_file == ddl.down_migration(),
            "tests/ddl/{}.{}*.sql are stale: run `STATEGUARD_BLESS=1 cargo test --test test_ddl`",
            $golden,
            $dialect
        );
        assert_eq!(statements_of(up_file), ddl.statements());
        assert_eq!(statements_of(down_file), ddl.down_statements());

        // The check clause, on a table created with it.
        let create_fresh: &'static str = concat!(
            "CREATE TABLE ",
            $table,
            "_fresh (id BIGINT PRIMARY KEY, status VARCHAR(32) NOT NULL, ",
            check_clause!($variant),
            ")"
        );
        assert!(create_fresh.contains(ddl.check_clause()), "{create_fresh}");
        sqlx::raw_sql(create_fresh).execute(pool).await.unwrap();
        sqlx::raw_sql(concat!(
            "INSERT INTO ",
            $table,
            "_fresh (id, status) VALUES (1, 'sent')"
        ))
        .execute(pool)
        .await
        .unwrap();
        let (message, _) = rejected(
            sqlx::raw_sql(concat!(
                "INSERT INTO ",
                $table,
                "_fresh (id, status) VALUES (2, 'exploded')"
            ))
            .execute(pool)
            .await,
            "an unknown state in a table with the check clause",
        );
        assert!(message.contains("payouts_status_states"), "{message}");
        sqlx::raw_sql(concat!("DROP TABLE ", $table, "_fresh"))
            .execute(pool)
            .await
            .unwrap();

        sqlx::raw_sql(concat!(
            "INSERT INTO ",
            $table,
            " (id, status) VALUES (1, 'pending'), (2, 'pending'), (3, 'pending')"
        ))
        .execute(pool)
        .await
        .unwrap();
        let status = |id: i64| async move {
            let sql: &'static str = match id {
                1 => concat!("SELECT status FROM ", $table, " WHERE id = 1"),
                2 => concat!("SELECT status FROM ", $table, " WHERE id = 2"),
                _ => concat!("SELECT status FROM ", $table, " WHERE id = 3"),
            };
            sqlx::query_scalar::<_, String>(sql)
                .fetch_one(pool)
                .await
                .unwrap()
        };
        let skip_to_sent = concat!("UPDATE ", $table, " SET status = 'sent' WHERE id = 1");

        // The whole file at once, as `sqlx migrate` runs it...
        sqlx::raw_sql(up_file).execute(pool).await.unwrap();
        rejected(
            sqlx::raw_sql(skip_to_sent).execute(pool).await,
            "pending -> sent",
        );
        // ...the down migration removes every rule...
        sqlx::raw_sql(down_file).execute(pool).await.unwrap();
        sqlx::raw_sql(skip_to_sent).execute(pool).await.unwrap();
        sqlx::raw_sql(concat!(
            "UPDATE ",
            $table,
            " SET status = 'pending' WHERE id = 1"
        ))
        .execute(pool)
        .await
        .unwrap();
        // ...and the statements one by one put them back.
        for statement in statements_of(up_file) {
            sqlx::raw_sql(statement).execute(pool).await.unwrap();
        }

        // An illegal raw UPDATE is rejected, naming the table and both states.
        let (message, code) = rejected(
            sqlx::raw_sql(skip_to_sent).execute(pool).await,
            "pending -> sent",
        );
        assert!(
            message.contains(concat!(
                "stateguard: illegal transition on ",
                $table,
                ": pending -> sent"
            )),
            "{message}"
        );
        assert_eq!(code, $code, "{message}");
        assert_eq!(status(1).await, "pending");

        // A legal one passes; going back is rejected again.
        let moved = sqlx::raw_sql(concat!(
            "UPDATE ",
            $table,
            " SET status = 'sending' WHERE id = 1"
        ))
        .execute(pool)
        .await
        .unwrap();
        assert_eq!(moved.rows_affected(), 1);
        let (message, _) = rejected(
            sqlx::raw_sql(concat!(
                "UPDATE ",
                $table,
                " SET status = 'pending' WHERE id = 1"
            ))
            .execute(pool)
            .await,
            "sending -> pending",
        );
        assert!(
            message.contains(concat!(
                "stateguard: illegal transition on ",
                $table,
                ": sending -> pending"
            )),
            "{message}"
        );

        // stateguard's own transitions keep working.
        assert!(
            $machine::confirm()
                .apply(pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(
            $machine::confirm().apply(pool, 1_i64).await.unwrap(),
            Outcome::AlreadyInState($machine::Sent)
        );
        assert_eq!(
            $machine::cancel().apply(pool, 1_i64).await.unwrap(),
            Outcome::Conflict {
                current: $machine::Sent
            }
        );
        assert!(
            $machine::start()
                .apply(pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(
            $machine::start().apply(pool, 2_i64).await.unwrap(),
            Outcome::AlreadyInState($machine::Sending)
        );
        assert!(
            $machine::cancel()
                .apply(pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(status(1).await, "sent");
        assert_eq!(status(2).await, "cancelled");

        // Other columns can still be written, with the status named or not.
        sqlx::raw_sql(concat!(
            "UPDATE ",
            $table,
            " SET attempts = attempts + 1 WHERE id = 1"
        ))
        .execute(pool)
        .await
        .unwrap();
        let all = sqlx::raw_sql(concat!(
            "UPDATE ",
            $table,
            " SET status = status, attempts = attempts + 1"
        ))
        .execute(pool)
        .await
        .unwrap();
        assert_eq!(all.rows_affected(), 3);

        // A terminal state stays terminal.
        let (message, _) = rejected(
            sqlx::raw_sql(concat!(
                "UPDATE ",
                $table,
                " SET status = 'pending' WHERE id = 1"
            ))
            .execute(pool)
            .await,
            "sent -> pending",
        );
        assert!(message.contains("sent -> pending"), "{message}");

        // Unknown states are rejected on INSERT and on UPDATE.
        let (message, _) = rejected(
            sqlx::raw_sql(concat!(
                "INSERT INTO ",
                $table,
                " (id, status) VALUES (9, 'exploded')"
            ))
            .execute(pool)
            .await,
            "an unknown state on INSERT",
        );
        assert!(message.contains($unknown), "{message}");
        let (message, _) = rejected(
            sqlx::raw_sql(concat!(
                "UPDATE ",
                $table,
                " SET status = 'exploded' WHERE id = 3"
            ))
            .execute(pool)
            .await,
            "an unknown state on UPDATE",
        );
        assert!(
            message.contains("exploded") || message.contains("payouts_status_states"),
            "{message}"
        );
        // A state string matches exactly: not in another case, not padded
        // (MySQL's default collations would compare both as equal).
        for sql in [
            concat!("UPDATE ", $table, " SET status = 'PENDING' WHERE id = 3"),
            concat!("UPDATE ", $table, " SET status = 'pending ' WHERE id = 3"),
            concat!("UPDATE ", $table, " SET status = 'SENDING' WHERE id = 3"),
            concat!(
                "INSERT INTO ",
                $table,
                " (id, status) VALUES (9, 'Pending')"
            ),
        ] {
            rejected(sqlx::raw_sql(sql).execute(pool).await, sql);
        }

        assert_eq!(status(1).await, "sent");
        assert_eq!(status(2).await, "cancelled");
        assert_eq!(status(3).await, "pending");
    }};
}

/// The payout machine grown by one transition the installed DDL does not
/// know yet: `abandon`, failed -> cancelled.
#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "payouts", column = "status", key = "id")]
pub enum Grown {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    #[transition(abandon -> Cancelled)]
    Failed,
    Cancelled,
}

/// An enum that moved ahead of its migration: the new transition fails in
/// the database with the trigger's message, as an error of `apply` (not a
/// retry, not a conflict), and the row stays where it was.
macro_rules! stale_migration {
    ($pool:expr, $dialect:literal, $status:literal) => {{
        let pool = $pool;
        sqlx::raw_sql("INSERT INTO payouts (id, status) VALUES (1, 'pending')")
            .execute(pool)
            .await
            .unwrap();
        sqlx::raw_sql(include_str!(concat!("ddl/payouts.", $dialect, ".sql")))
            .execute(pool)
            .await
            .unwrap();
        assert!(
            Grown::start()
                .apply(pool, 1_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert!(Grown::fail().apply(pool, 1_i64).await.unwrap().is_applied());
        let error = Grown::abandon().apply(pool, 1_i64).await.unwrap_err();
        let stateguard::Error::Database { source, .. } = &error else {
            panic!("expected Error::Database, got {error:?}");
        };
        let message = source.as_database_error().map(|e| e.message().to_owned());
        assert_eq!(
            message.as_deref(),
            Some("stateguard: illegal transition on payouts: failed -> cancelled"),
            "{error:?}"
        );
        let status: String = sqlx::query_scalar($status).fetch_one(pool).await.unwrap();
        assert_eq!(status, "failed");
    }};
}

mod sqlite {
    use std::time::Duration;

    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

    use super::*;

    #[tokio::test]
    async fn payouts() {
        let Some(db) = open!(Sqlite, "ddl_payouts") else {
            return;
        };
        enforcement!(
            &db.pool, PayoutStatus, "payouts", "payouts", Sqlite => "sqlite",
            unknown: "stateguard: unknown state on payouts: exploded",
            code: "1811", // SQLITE_CONSTRAINT_TRIGGER
        );
    }

    /// `sg_ddl_qualified.payouts` in a database attached under that name
    /// to the pool's one connection.
    #[tokio::test]
    async fn qualified() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let attached = dir.path().join("qualified.db");
        let attached = attached.to_str().expect("UTF-8 path").to_owned();
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .after_connect(move |conn, _| {
                let attached = attached.clone();
                Box::pin(async move {
                    sqlx::query("ATTACH DATABASE ?1 AS sg_ddl_qualified")
                        .bind(attached)
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            })
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(dir.path().join("main.db"))
                    .create_if_missing(true)
                    .busy_timeout(Duration::from_secs(30)),
            )
            .await
            .expect("open SQLite");
        sqlx::query(
            "CREATE TABLE sg_ddl_qualified.payouts (
                id INTEGER PRIMARY KEY,
                status TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                sent_at TEXT
            )",
        )
        .execute(&pool)
        .await
        .expect("create table");
        enforcement!(
            &pool, QualifiedStatus, "qualified", "sg_ddl_qualified.payouts", Sqlite => "sqlite",
            unknown: "stateguard: unknown state on sg_ddl_qualified.payouts: exploded",
            code: "1811",
        );
    }

    #[tokio::test]
    async fn an_enum_ahead_of_its_migration() {
        let Some(db) = open!(Sqlite, "ddl_stale") else {
            return;
        };
        stale_migration!(
            &db.pool,
            "sqlite",
            "SELECT status FROM payouts WHERE id = 1"
        );
    }
}

mod postgres {
    use super::*;

    #[tokio::test]
    async fn payouts() {
        let Some(db) = open!(Postgres, "ddl_payouts") else {
            return;
        };
        enforcement!(
            &db.pool, PayoutStatus, "payouts", "payouts", Postgres => "postgres",
            unknown: "payouts_status_states",
            code: "23514", // check_violation
        );
    }

    /// The schema `open!` makes is the one the machine's table names.
    #[tokio::test]
    async fn qualified() {
        let Some(db) = open!(Postgres, "ddl_qualified") else {
            return;
        };
        enforcement!(
            &db.pool, QualifiedStatus, "qualified", "sg_ddl_qualified.payouts", Postgres => "postgres",
            unknown: "payouts_status_states",
            code: "23514",
        );
    }

    #[tokio::test]
    async fn an_enum_ahead_of_its_migration() {
        let Some(db) = open!(Postgres, "ddl_stale") else {
            return;
        };
        stale_migration!(
            &db.pool,
            "postgres",
            "SELECT status FROM payouts WHERE id = 1"
        );
    }
}

mod mysql {
    use super::*;

    #[tokio::test]
    async fn payouts() {
        let Some(db) = open!(Mysql, "ddl_payouts") else {
            return;
        };
        enforcement!(
            &db.pool, PayoutStatus, "payouts", "payouts", MySql => "mysql",
            unknown: "payouts_status_states",
            code: "45000",
        );
    }

    /// The database `open!` makes is the one the machine's table names.
    #[tokio::test]
    async fn qualified() {
        let Some(db) = open!(Mysql, "ddl_qualified") else {
            return;
        };
        enforcement!(
            &db.pool, QualifiedStatus, "qualified", "sg_ddl_qualified.payouts", MySql => "mysql",
            unknown: "payouts_status_states",
            code: "45000",
        );
    }

    /// The trigger compares states as bytes, as the CHECK does: under a
    /// case- and accent-insensitive collation `'ÉTAT'` equals `'état'`, so a
    /// trigger comparing under the column's collation would take
    /// `pending -> ÉTAT` for the legal `pending -> état`, and `ÉTAT -> état`
    /// for no change at all. Fails with the trigger of the commit before.
    #[tokio::test]
    async fn transitions_compare_bytes_under_an_insensitive_collation() {
        let Some(db) = open!(Mysql, "ddl_bytes") else {
            return;
        };
        let pool = &db.pool;
        let up_file: &'static str = include_str!("ddl/accents.mysql.sql");
        assert_eq!(
            up_file,
            ddl::mysql::<AccentStatus>().migration(),
            "tests/ddl/accents.mysql.sql is stale: run \
             `STATEGUARD_BLESS=1 cargo test --test test_ddl`"
        );
        sqlx::raw_sql(
            "CREATE TABLE labels (
                id BIGINT PRIMARY KEY,
                status VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL
            )",
        )
        .execute(pool)
        .await
        .unwrap();
        // The collation does take one for the other.
        let equal: i64 = sqlx::query_scalar("SELECT CAST('ÉTAT' = 'état' AS SIGNED)")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(equal, 1);
        sqlx::raw_sql(up_file).execute(pool).await.unwrap();
        sqlx::raw_sql("INSERT INTO labels (id, status) VALUES (1, 'pending'), (2, 'pending')")
            .execute(pool)
            .await
            .unwrap();
        let status = |id: i64| async move {
            sqlx::query_scalar::<_, String>("SELECT status FROM labels WHERE id = ?")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap()
        };

        // pending -> ÉTAT is no transition, though ÉTAT equals état.
        let (message, code) = rejected(
            sqlx::raw_sql("UPDATE labels SET status = 'ÉTAT' WHERE id = 1")
                .execute(pool)
                .await,
            "pending -> ÉTAT",
        );
        assert!(message.contains("pending -> ÉTAT"), "{message}");
        assert_eq!(code, "45000");
        assert_eq!(status(1).await, "pending");

        // The legal path still passes: pending -> état -> ÉTAT.
        for statement in [
            "UPDATE labels SET status = 'état' WHERE id = 1",
            "UPDATE labels SET status = 'ÉTAT' WHERE id = 1",
        ] {
            sqlx::raw_sql(statement).execute(pool).await.unwrap();
        }
        assert_eq!(status(1).await, "ÉTAT");

        // ÉTAT -> état is a change of state, and no transition.
        rejected(
            sqlx::raw_sql("UPDATE labels SET status = 'état' WHERE id = 1")
                .execute(pool)
                .await,
            "ÉTAT -> état",
        );
        assert_eq!(status(1).await, "ÉTAT");

        // The machine's own statements agree.
        assert_eq!(
            AccentStatus::shout().apply(pool, 2_i64).await.unwrap(),
            Outcome::Conflict {
                current: AccentStatus::Pending
            }
        );
        assert!(
            AccentStatus::settle()
                .apply(pool, 2_i64)
                .await
                .unwrap()
                .is_applied()
        );
        assert_eq!(status(2).await, "état");
    }

    #[tokio::test]
    async fn an_enum_ahead_of_its_migration() {
        let Some(db) = open!(Mysql, "ddl_stale") else {
            return;
        };
        stale_migration!(&db.pool, "mysql", "SELECT status FROM payouts WHERE id = 1");
    }
}
