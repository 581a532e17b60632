//! The tables a machine's statements use, as `CREATE … IF NOT EXISTS`
//! statements that make only what does not exist yet: the history table,
//! which the enforcement migration makes.

use crate::dialect::{Dialect, object_name};

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
