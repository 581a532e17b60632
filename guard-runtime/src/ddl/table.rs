//! [`table`]: the machine's own table, with every column its statements
//! use, and its history table, as `CREATE TABLE IF NOT EXISTS`.

use core::fmt;

use sqlx::TypeInfo;

use super::Dialect;
use crate::StateMachine;
use crate::dialect::Backend;
use crate::machine::{DeclaredType, TableColumn};

/// Implemented by the derive for every backend on which sqlx has a type
/// for each Rust type the machine declares for a column (`key_type =
/// "…"`, `set(column = bind(Type))`): [`table`] declares those columns
/// with them.
#[diagnostic::on_unimplemented(
    message = "the table of `{Self}` cannot be written for `{DB}`: sqlx has no type there for one \
               of the Rust types its columns are declared with",
    note = "the `key_type` and every `bind(Type)` type of the machine must implement \
            `sqlx::Type` for the database"
)]
pub trait ColumnTypes<DB: Backend>: StateMachine {
    /// How sqlx names, on `DB`, the SQL type of each Rust type the
    /// machine declares for a column, in the order the derive numbered
    /// them.
    #[doc(hidden)]
    const COLUMN_TYPES: &'static [SqlTypeFn];
}

/// sqlx's name of one Rust type's SQL type on one backend.
#[doc(hidden)]
pub type SqlTypeFn = fn() -> String;

/// The name sqlx gives `T`'s SQL type on `DB` (`TEXT`, `INT8`,
/// `BIGINT`): what [`ColumnTypes::COLUMN_TYPES`] holds for each of the
/// machine's Rust types.
#[doc(hidden)]
pub fn sql_type<DB: Backend, T: sqlx::Type<DB>>() -> String {
    T::type_info().name().to_owned()
}

/// The machine's own table and its history table, as
/// `CREATE TABLE IF NOT EXISTS` in one dialect: a starting point to edit
/// and keep with the migrations.
///
/// Made by [`table`]. Its `Display` is the whole text: a comment saying
/// where it came from and what it leaves out, then every statement
/// followed by `;` and a blank line; [`Table::statements`] are the same
/// statements without the `;`.
#[must_use = "the table text does nothing until it is written out or run"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    dialect: Dialect,
    table: &'static str,
    statements: Vec<String>,
    text: String,
}

/// The machine's own table, with every column its statements use, and
/// its history table (with `history = "…"`), for backend `DB`
/// (`sqlx::Postgres`, `sqlx::Sqlite` or `sqlx::MySql`).
///
/// The columns, each once: the key (its primary key), the status (`NOT
/// NULL DEFAULT` the initial state's string), the version (`NOT NULL
/// DEFAULT 0`), each state's `since` stamp, a `retry(…)` state's
/// attempts (`NOT NULL DEFAULT 0`) and next attempt, each `set` column,
/// the columns of `order = "…"`, and those the messages of `emit(…)`
/// carry. A time is the type the statements' clock writes (`TIMESTAMPTZ`,
/// SQLite's UTC text, `DATETIME(3)`). A column whose Rust type the machine
/// declares (`key_type = "…"`, `bind(Type)`) has the type sqlx gives it on
/// `DB`, with a length where MySQL needs one, which a comment points out.
/// A column whose type nothing says (a key without `key_type`, a `set`
/// expression, an order or payload column) has none, and a comment above
/// it says so: the text then does not run on PostgreSQL or MySQL until
/// someone writes one. The columns a guard reads are named in the header
/// comment, not guessed.
///
/// The history table's key columns are copied from the machine's table,
/// and its statements are those of the enforcement migration
/// ([`generate`](super::generate)), which therefore runs after this text.
///
/// Every statement creates only what does not exist yet: the text is safe
/// to run twice, and leaves the machine's table as it is where it exists
/// (it adds no column to it). It is text built from the enum's
/// declarations and sqlx's type names, not a `&'static str`: write it
/// into a migration file, which sqlx runs as it is. The same enum and
/// backend always give the same bytes.
///
/// The backend is a type, not a [`Dialect`], because the types of
/// `key_type` and `bind(Type)` are sqlx's on that backend: a machine with
/// one that sqlx has no type for on `DB` has no table there, and the
/// compiler says so (`S: ColumnTypes<DB>` does not hold).
///
/// ```
/// use stateguard::ddl;
/// use stateguard::StateMachine;
///
/// #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
/// #[state_machine(table = "payouts", column = "status", key = "id", key_type = "i64",
///                 version = "version")]
/// enum PayoutStatus {
///     #[state(initial)]
///     #[transition(start -> Sending)]
///     Pending,
///     #[state(in_flight(lease = "30s", since = "sending_since", done = confirm, failed = fail))]
///     #[transition(confirm -> Sent, set(bank_ref = bind(String), sent_at = "CURRENT_TIMESTAMP"))]
///     #[transition(fail -> Failed)]
///     Sending,
///     Sent,
///     Failed,
/// }
///
/// let table = ddl::table::<PayoutStatus, sqlx::Postgres>();
/// assert_eq!(table.statements()[0], r#"CREATE TABLE IF NOT EXISTS "payouts" (
///     "id" INT8 NOT NULL,
///     "status" TEXT NOT NULL DEFAULT 'pending',
///     "version" BIGINT NOT NULL DEFAULT 0,
///     "sending_since" TIMESTAMPTZ,
///     "bank_ref" TEXT,
///     -- stateguard: write the type of "sent_at": `confirm` sets it to CURRENT_TIMESTAMP
///     "sent_at",
///     PRIMARY KEY ("id")
/// )"#);
///
/// // The whole text, for a migration file: SQLite's types are sqlx's too.
/// let file = ddl::table::<PayoutStatus, sqlx::Sqlite>().to_string();
/// assert!(file.starts_with("-- stateguard: the table payouts of PayoutStatus, with every column"));
/// assert!(file.contains("    \"id\" INTEGER NOT NULL,\n"), "{file}");
/// ```
pub fn table<S: ColumnTypes<DB>, DB: Backend>() -> Table {
    let machine = S::MACHINE;
    let dialect = Dialect::of::<DB>();
    let text = DB::choose(&machine.table_text);
    let mut create = format!("{}\n", text.create);
    for column in text.columns {
        let (declared, note) = declared::<S, DB>(dialect, column);
        if !note.is_empty() {
            create.push_str(&format!("    -- stateguard: {note}\n"));
        }
        create.push_str(&format!("    {}{declared}{},\n", column.name, column.rest));
    }
    create.push_str(&format!("    {}\n)", text.primary_key));
    let mut statements = vec![create];
    statements.extend(text.history.iter().map(|s| (*s).to_owned()));
    let mut file = header::<S>(dialect);
    for statement in &statements {
        file.push('\n');
        file.push_str(statement);
        file.push_str(";\n");
    }
    Table {
        dialect,
        table: machine.table(),
        statements,
        text: file,
    }
}

/// What the text is and where it came from, and what it leaves out: the
/// columns a guard reads, the outbox table.
fn header<S: StateMachine>(dialect: Dialect) -> String {
    let machine = S::MACHINE;
    let name = machine.name();
    let tables = match machine.history_table() {
        Some(history) => format!(
            "the table {} of {name} and its history table {history}, with every column their \
             statements use.",
            machine.table()
        ),
        None => format!(
            "the table {} of {name}, with every column its statements use.",
            machine.table()
        ),
    };
    let backend = match dialect {
        Dialect::Postgres => "sqlx::Postgres",
        Dialect::Sqlite => "sqlx::Sqlite",
        Dialect::MySql => "sqlx::MySql",
    };
    let mut lines = vec![
        format!("stateguard: {tables}"),
        format!(
            "Generated by stateguard::ddl::table::<{name}, {backend}>(): a starting point, to \
             edit and keep with the migrations."
        ),
        "It creates only what does not exist yet, so it is safe to run twice; the enforcement \
         DDL (stateguard::ddl::generate) runs after it."
            .to_owned(),
    ];
    for transition in machine.transitions() {
        if let Some(guard) = transition.guard() {
            // A comment ends at the line's end.
            let guard = guard.split_whitespace().collect::<Vec<_>>().join(" ");
            lines.push(format!(
                "`{}`'s guard reads columns that may be missing here: {guard}",
                transition.name()
            ));
        }
    }
    if machine.transitions().iter().any(|t| t.emit().is_some()) {
        lines.push(format!(
            "The outbox table {}, which `emit` writes to, is not made here: see \
             stateguard::outbox.",
            machine.outbox_table()
        ));
    }
    lines.iter().map(|line| format!("-- {line}\n")).collect()
}

/// What follows a column's name, ` TEXT`, or nothing for a type not
/// known; and a note for a comment above it where the type needs one
/// (empty where it does not).
fn declared<S: ColumnTypes<DB>, DB: Backend>(
    dialect: Dialect,
    column: &TableColumn,
) -> (String, String) {
    let (n, written, key) = match column.declared {
        DeclaredType::Sql(sql) => return (format!(" {sql}"), String::new()),
        DeclaredType::Unknown => {
            let note = format!("write the type of {}: {}", column.name, column.note);
            return (String::new(), note);
        }
        DeclaredType::Rust { n, written, key } => (n, written, key),
    };
    let name = match S::COLUMN_TYPES.get(usize::from(n)) {
        Some(name) => name(),
        None => String::new(),
    };
    if name.is_empty() {
        let note = format!(
            "write the type of {}: sqlx names none for {written}",
            column.name
        );
        return (String::new(), note);
    }
    if dialect != Dialect::MySql {
        return (format!(" {name}"), String::new());
    }
    let upper = name.to_ascii_uppercase();
    // sqlx names MySQL's strings without the length a column needs.
    if ["VARCHAR", "VARBINARY", "CHAR", "BINARY"].contains(&upper.as_str()) {
        let note = format!(
            "sqlx gives {written} the type {name}, which MySQL declares with a length: 255 is a \
             choice"
        );
        return (format!(" {name}(255)"), note);
    }
    // InnoDB indexes text, blobs and JSON only by a prefix of each value.
    let unbounded = [
        "TINYTEXT",
        "TEXT",
        "MEDIUMTEXT",
        "LONGTEXT",
        "TINYBLOB",
        "BLOB",
        "MEDIUMBLOB",
        "LONGBLOB",
        "JSON",
    ];
    if key && unbounded.contains(&upper.as_str()) {
        let note = format!(
            "sqlx gives {written} the type {name}, which MySQL cannot make a key: write one of a \
             fixed length (BINARY(16) for a UUID)"
        );
        return (format!(" {name}"), note);
    }
    (format!(" {name}"), String::new())
}

impl Table {
    /// The dialect this text is written in.
    pub const fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The machine's table, as written in `#[state_machine(table = …)]`.
    pub const fn table(&self) -> &'static str {
        self.table
    }

    /// The statements, in order, without a trailing `;`: the machine's
    /// table, then the history table and its index.
    pub fn statements(&self) -> &[String] {
        &self.statements
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
