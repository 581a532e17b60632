//! The machine's own table as `CREATE TABLE IF NOT EXISTS`, with every
//! column its statements use, and its history table: the text the
//! runtime's `stateguard::ddl::table` writes, built here, at expansion
//! time, but for the types of the Rust types the machine declares
//! (`key_type`, `bind(Type)`), which only sqlx knows, at run time.
//!
//! Every statement creates only what does not exist yet, so that the text
//! can run twice, and so that the enforcement migration, which makes the
//! history table with the same statements, runs after it.

use quote::ToTokens;

use crate::dialect::{Dialect, object_name};
use crate::model::{Assign, Model};

/// What a column holds, as the table text declares it.
pub enum DeclaredType {
    /// A type written here: `TIMESTAMPTZ`.
    Sql(&'static str),
    /// The Rust type numbered `n` in [`rust_types`], whose SQL type sqlx
    /// names at run time; `written` is the type as the attribute wrote it,
    /// and `key` says whether the column is a key column.
    Rust { n: u16, written: String, key: bool },
    /// Not known: the column is written without a type, and its note
    /// says why.
    Unknown,
}

/// One column of the machine's table.
pub struct TableColumn {
    /// Quoted.
    pub name: String,
    pub ty: DeclaredType,
    /// What follows the type: ` NOT NULL DEFAULT 0`, or nothing.
    pub rest: String,
    /// For a column of [`DeclaredType::Unknown`], what the machine says
    /// of it instead (`` `confirm` sets it to CURRENT_TIMESTAMP ``), for a
    /// comment above it; empty otherwise.
    pub note: String,
}

/// The machine's tables in one dialect, in pieces the runtime puts
/// together once sqlx has named the Rust types.
pub struct TableText {
    /// `CREATE TABLE IF NOT EXISTS "payouts" (`
    pub create: String,
    pub columns: Vec<TableColumn>,
    /// `PRIMARY KEY ("id")`
    pub primary_key: String,
    /// The history table and its index ([`history_table`]); empty
    /// without one.
    pub history: Vec<String>,
}

/// The Rust types the machine declares for columns of its table, each
/// once, in the order [`DeclaredType::Rust`] numbers them: the key's
/// (`key_type`), then each `bind(Type)` of a `set`, in declaration order.
pub fn rust_types<'a>(model: &'a Model) -> Vec<&'a syn::Type> {
    let mut types: Vec<&syn::Type> = Vec::new();
    let set_binds = (model.transitions.iter())
        .flat_map(|t| t.set.iter().filter_map(|(_, value)| value.bound()));
    for ty in model.key_types.iter().flatten().copied().chain(set_binds) {
        if !types.iter().any(|known| same_type(known, ty)) {
            types.push(ty);
        }
    }
    types
}

fn same_type(a: &syn::Type, b: &syn::Type) -> bool {
    a.to_token_stream().to_string() == b.to_token_stream().to_string()
}

/// The text an integer column is declared with.
pub fn integer(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres | Dialect::MySql => "BIGINT",
        Dialect::Sqlite => "INTEGER",
    }
}

/// The text a state string (or any short text) is declared with: on
/// MySQL as long as the longest state string may be (`ident.rs`).
pub fn text(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres | Dialect::Sqlite => "TEXT",
        Dialect::MySql => "VARCHAR(255)",
    }
}

/// The text a time the statements write is declared with: what the
/// dialect's clock (`sql/mod.rs`, `Dialect::now`) writes, and `verify`
/// holds a `since` column to.
pub fn time(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "TIMESTAMPTZ",
        // UTC text with milliseconds, which sorts as it compares.
        Dialect::Sqlite => "TEXT",
        Dialect::MySql => "DATETIME(3)",
    }
}

/// The machine's tables in `d`.
pub fn table(model: &Model, d: Dialect) -> TableText {
    let types = rust_types(model);
    let number = |ty: &syn::Type| types.iter().position(|known| same_type(known, ty));
    let mut columns = Columns {
        d,
        list: Vec::new(),
    };
    for (i, key) in model.key.iter().enumerate() {
        let declared = (model.key_types.as_ref())
            .and_then(|key_types| Some((number(key_types[i])?, key_types[i])));
        let (ty, note) = match declared {
            Some((n, ty)) => (
                DeclaredType::Rust {
                    n: n as u16,
                    written: written(ty),
                    key: true,
                },
                String::new(),
            ),
            None => (
                DeclaredType::Unknown,
                "the machine does not declare its key's (key_type = \"…\")".to_owned(),
            ),
        };
        columns.add(key, ty, " NOT NULL".to_owned(), note);
    }
    let initial = &model.states[model.initial].db;
    columns.add(
        &model.column,
        DeclaredType::Sql(text(d)),
        format!(" NOT NULL DEFAULT '{initial}'"),
        String::new(),
    );
    if let Some(version) = &model.version {
        let rest = " NOT NULL DEFAULT 0".to_owned();
        columns.add(version, DeclaredType::Sql(integer(d)), rest, String::new());
    }
    for state in &model.states {
        if let Some(since) = state.since_column() {
            columns.add(
                since,
                DeclaredType::Sql(time(d)),
                String::new(),
                String::new(),
            );
        }
        if let Some(retry) = state.in_flight.as_ref().and_then(|f| f.retry.as_ref()) {
            let rest = " NOT NULL DEFAULT 0".to_owned();
            columns.add(
                &retry.attempts,
                DeclaredType::Sql(integer(d)),
                rest,
                String::new(),
            );
            let next = &retry.next_attempt;
            columns.add(
                next,
                DeclaredType::Sql(time(d)),
                String::new(),
                String::new(),
            );
            if let Some(last_error) = &retry.last_error {
                // A reason of any length: TEXT on every dialect.
                columns.add(
                    last_error,
                    DeclaredType::Sql("TEXT"),
                    String::new(),
                    String::new(),
                );
            }
        }
    }
    for transition in &model.transitions {
        let name = syn::ext::IdentExt::unraw(transition.name).to_string();
        for (column, value) in &transition.set {
            let (ty, note) = match value {
                Assign::Bind(ty) => (
                    DeclaredType::Rust {
                        n: number(ty).unwrap_or_default() as u16,
                        written: written(ty),
                        key: false,
                    },
                    String::new(),
                ),
                Assign::Expr(expr) => (
                    DeclaredType::Unknown,
                    format!("`{name}` sets it to {}", one_line(expr)),
                ),
            };
            columns.add(column, ty, String::new(), note);
        }
    }
    if model.order != model.key {
        for column in &model.order {
            let note = format!(
                "claims take rows in its order (order = \"{}\")",
                model.order.join(", ")
            );
            columns.add(column, DeclaredType::Unknown, String::new(), note);
        }
    }
    for transition in &model.transitions {
        let name = syn::ext::IdentExt::unraw(transition.name).to_string();
        for column in transition.emit.iter().flat_map(|e| &e.payload) {
            let note = format!("`{name}`'s message carries it");
            columns.add(column, DeclaredType::Unknown, String::new(), note);
        }
    }
    let keys: Vec<String> = model.key.iter().map(|k| d.quote(k)).collect();
    TableText {
        create: format!("CREATE TABLE IF NOT EXISTS {} (", d.quote(&model.table)),
        columns: columns.list,
        primary_key: format!("PRIMARY KEY ({})", keys.join(", ")),
        history: match &model.history {
            Some(history) => history_table(d, &model.table, &model.key, history),
            None => Vec::new(),
        },
    }
}

/// The columns in the order first named, each once: a column named again
/// keeps its place, and takes the type the later mention knows where the
/// first did not.
struct Columns {
    d: Dialect,
    list: Vec<TableColumn>,
}

impl Columns {
    fn add(&mut self, name: &str, ty: DeclaredType, rest: String, note: String) {
        let quoted = self.d.quote(name);
        // Quoted names keep their case on PostgreSQL; SQLite and MySQL
        // take two names that differ in case for one column.
        let same = |c: &&mut TableColumn| match self.d {
            Dialect::Postgres => c.name == quoted,
            Dialect::Sqlite | Dialect::MySql => c.name.eq_ignore_ascii_case(&quoted),
        };
        match self.list.iter_mut().find(|c| same(c)) {
            Some(known) => {
                if matches!(known.ty, DeclaredType::Unknown) && !matches!(ty, DeclaredType::Unknown)
                {
                    (known.ty, known.note) = (ty, note);
                }
            }
            None => self.list.push(TableColumn {
                name: quoted,
                ty,
                rest,
                note,
            }),
        }
    }
}

/// A Rust type as the attribute wrote it, without the spaces tokens
/// print with.
fn written(ty: &syn::Type) -> String {
    ty.to_token_stream().to_string().replace(' ', "")
}

/// `text` on one line, for a `--` comment, which ends at the line's end.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The history table (its key columns copied from the machine's table, so
/// they keep their types) and its index on the key, each created only
/// where it does not exist yet: the table text and the enforcement
/// migration both run these statements.
pub fn history_table(d: Dialect, table: &str, key: &[String], history: &str) -> Vec<String> {
    let h = d.quote(history);
    let table = d.quote(table);
    let quoted_keys: Vec<String> = key.iter().map(|k| d.quote(k)).collect();
    let keys = quoted_keys.join(", ");
    let (schema_prefix, bare) = d.split_schema(history);
    let index = d.quote(&object_name(bare, "history", "key"));
    let (text, integer, time) = (text(d), integer(d), time(d));
    // The columns a history row has besides the key, as each dialect
    // declares them.
    let columns = match d {
        Dialect::Postgres => [
            "\"history_id\" BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY".to_owned(),
            format!("\"transition\" {text} NOT NULL"),
            format!("\"from_state\" {text} NOT NULL"),
            format!("\"to_state\" {text} NOT NULL"),
            format!("\"occurrence\" {integer} NOT NULL"),
            format!("\"moved_at\" {time} NOT NULL"),
            "\"actor\" TEXT".to_owned(),
            "\"reason\" TEXT".to_owned(),
            "\"details\" JSONB".to_owned(),
        ],
        Dialect::Sqlite => [
            "\"history_id\" INTEGER PRIMARY KEY AUTOINCREMENT".to_owned(),
            format!("\"transition\" {text} NOT NULL"),
            format!("\"from_state\" {text} NOT NULL"),
            format!("\"to_state\" {text} NOT NULL"),
            format!("\"occurrence\" {integer} NOT NULL"),
            format!("\"moved_at\" {time} NOT NULL"),
            "\"actor\" TEXT".to_owned(),
            "\"reason\" TEXT".to_owned(),
            "\"details\" TEXT".to_owned(),
        ],
        Dialect::MySql => [
            "`history_id` BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY".to_owned(),
            format!("`transition` {text} NOT NULL"),
            format!("`from_state` {text} NOT NULL"),
            format!("`to_state` {text} NOT NULL"),
            format!("`occurrence` {integer} NOT NULL"),
            format!("`moved_at` {time} NOT NULL"),
            "`actor` VARCHAR(255) NULL".to_owned(),
            "`reason` TEXT NULL".to_owned(),
            "`details` JSON NULL".to_owned(),
        ],
    };
    match d {
        // `CREATE TABLE … AS` takes no column definitions: the key's
        // columns come from the query, the others are added where missing.
        Dialect::Postgres => {
            let added: Vec<String> = columns
                .iter()
                .map(|c| format!("ADD COLUMN IF NOT EXISTS {c}"))
                .collect();
            vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} AS SELECT {keys} FROM {table} WITH NO DATA"
                ),
                format!("ALTER TABLE {h}\n    {}", added.join(",\n    ")),
                format!("CREATE INDEX IF NOT EXISTS {index} ON {h} ({keys})"),
            ]
        }
        // `CREATE TABLE … AS` takes no column definitions either: the
        // key's columns have no type, and hold what the history inserts
        // copy from the machine's table, as it stores them.
        Dialect::Sqlite => {
            let [history_id, rest @ ..] = &columns;
            vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {h} (\n    {history_id},\n    {},\n    {}\n)",
                    quoted_keys.join(",\n    "),
                    rest.join(",\n    ")
                ),
                format!(
                    "CREATE INDEX IF NOT EXISTS {schema_prefix}{index} ON {} ({keys})",
                    d.quote(bare)
                ),
            ]
        }
        // MySQL has neither `ADD COLUMN IF NOT EXISTS` nor `CREATE INDEX IF
        // NOT EXISTS` (MariaDB has both): one statement declares the
        // columns and the index, and takes the key's columns from the
        // query, after the others. The query copies no row, but strict
        // mode still refuses a `NOT NULL` column it leaves without a value
        // (MariaDB); `IGNORE` leaves that to the rows, of which there are
        // none.
        Dialect::MySql => vec![format!(
            "CREATE TABLE IF NOT EXISTS {h} (\n    {},\n    INDEX {index} ({keys})\n) IGNORE \
             SELECT {keys} FROM {table} WHERE 1 = 0",
            columns.join(",\n    ")
        )],
    }
}
