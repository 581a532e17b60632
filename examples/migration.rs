//! Prints the migration that makes the database itself enforce the payout
//! machine: a CHECK constraint listing its states and a trigger that
//! rejects every status change that is not one of its transitions, whoever
//! writes the row.
//!
//! ```text
//! cargo run --example migration                  # PostgreSQL
//! cargo run --example migration sqlite           # or mysql (MySQL and MariaDB)
//! cargo run --example migration postgres --down  # the matching down migration
//! cargo run --example migration postgres --table # the payouts table itself
//! ```
//!
//! The text goes into a migration file of its own, next to the one that
//! creates the table, and runs with the other migrations:
//!
//! ```text
//! cargo run -q --example migration postgres \
//!     > migrations/20240601000000_payouts_status_enforcement.sql
//! sqlx migrate run        # or sqlx::migrate!() at start-up
//! ```
//!
//! For reversible migrations (`sqlx migrate add -r`), put the output in the
//! `.up.sql` file and the `--down` output in the `.down.sql` file. When the
//! enum gains a state or a transition, add a new migration holding the down
//! text followed by the new up text: the names depend only on the table and
//! the column, so that replaces the old rules with the new ones.
//!
//! `--table` prints the table the enforcement needs first, with every
//! column the machine's statements use (`stateguard::ddl::table`): the
//! start of the migration before this one, to edit where a comment asks
//! for a type.

use std::process::ExitCode;

use stateguard::ddl::{self, Dialect};

#[path = "payouts/status.rs"]
mod status;

use status::PayoutStatus;

const USAGE: &str =
    "usage: cargo run --example migration [postgres|sqlite|mysql] [--down | --table]";

fn main() -> ExitCode {
    let mut dialect = Dialect::Postgres;
    let mut down = false;
    let mut table = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "postgres" | "postgresql" => dialect = Dialect::Postgres,
            "sqlite" => dialect = Dialect::Sqlite,
            "mysql" | "mariadb" => dialect = Dialect::MySql,
            "--down" => down = true,
            "--table" => table = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::FAILURE;
            }
        }
    }
    if table {
        // The column types of `key_type` and `bind(Type)` are sqlx's, so
        // the table is written for a backend's type, not a dialect.
        match dialect {
            Dialect::Postgres => print!("{}", ddl::table::<PayoutStatus, sqlx::Postgres>()),
            Dialect::Sqlite => print!("{}", ddl::table::<PayoutStatus, sqlx::Sqlite>()),
            _ => print!("{}", ddl::table::<PayoutStatus, sqlx::MySql>()),
        }
        return ExitCode::SUCCESS;
    }
    let ddl = ddl::generate::<PayoutStatus>(dialect);
    if down {
        print!("{}", ddl.down_migration());
    } else {
        // `Display` is the whole migration file.
        print!("{ddl}");
    }
    if dialect == Dialect::Sqlite && !down {
        // Kept off stdout, which is the migration file.
        eprintln!(
            "note: a payouts table created from now on can carry the check itself:\n  {}",
            ddl.check_clause()
        );
    }
    ExitCode::SUCCESS
}
