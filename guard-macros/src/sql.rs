//! SQL text, built at expansion time from validated names. The output is a
//! string literal per dialect: nothing is formatted into SQL at run time.

#[derive(Clone, Copy)]
pub enum Dialect {
    Postgres,
    Sqlite,
    MySql,
}

pub const DIALECTS: [Dialect; 3] = [Dialect::Postgres, Dialect::Sqlite, Dialect::MySql];

/// PostgreSQL truncates longer identifiers; MySQL allows 64.
const MAX_IDENT: usize = 63;

/// Why `name` is not a plain SQL identifier, if it is not one.
pub fn check_ident(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("is empty".to_owned()),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            return Err(format!(
                "starts with {c:?}; it must start with a letter or `_`"
            ));
        }
        Some(_) => {}
    }
    if let Some(c) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_')) {
        return Err(format!(
            "contains {}; only ASCII letters, digits and `_` are allowed",
            describe(c)
        ));
    }
    if name.len() > MAX_IDENT {
        return Err(format!(
            "is {} characters long; the limit is {MAX_IDENT}",
            name.len()
        ));
    }
    Ok(())
}

/// A table name may be qualified by one schema: `billing.payouts`.
pub fn check_table(name: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 {
        return Err("has more than one `.`; write `table` or `schema.table`".to_owned());
    }
    if let [schema, table] = parts[..] {
        check_ident(schema).map_err(|why| format!("has a schema part `{schema}` that {why}"))?;
        check_ident(table).map_err(|why| format!("has a table part `{table}` that {why}"))?;
        return Ok(());
    }
    check_ident(name)
}

/// Why `value` cannot be stored as a state string, if it cannot.
///
/// State strings become SQL string literals; excluding quotes, backslashes
/// (an escape character in MySQL) and control characters keeps every
/// literal exactly what it looks like on every backend.
pub fn check_state_str(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("is empty".to_owned());
    }
    if let Some(c) = value
        .chars()
        .find(|c| *c == '\'' || *c == '\\' || c.is_control())
    {
        return Err(format!(
            "contains {}; quotes, backslashes and control characters are not allowed",
            describe(c)
        ));
    }
    if value.len() > 255 {
        return Err(format!("is {} bytes long; the limit is 255", value.len()));
    }
    Ok(())
}

/// A character as a message names it.
fn describe(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '\'' => "a single quote (')".to_owned(),
        '"' => "a double quote (\")".to_owned(),
        '\\' => "a backslash (\\)".to_owned(),
        '`' => "a backtick (`)".to_owned(),
        c if c.is_control() => format!("the control character {}", c.escape_unicode()),
        c => format!("`{c}`"),
    }
}

impl Dialect {
    pub fn quote(self, name: &str) -> String {
        let q = match self {
            Dialect::Postgres | Dialect::Sqlite => '"',
            Dialect::MySql => '`',
        };
        name.split('.')
            .map(|part| format!("{q}{part}{q}"))
            .collect::<Vec<_>>()
            .join(".")
    }

    fn param(self) -> &'static str {
        match self {
            Dialect::Postgres => "$1",
            Dialect::Sqlite => "?1",
            Dialect::MySql => "?",
        }
    }

    /// `UPDATE t SET c = 'target'[, col = expr…] WHERE k = $1 AND c IN ('source', …)`
    pub fn update(
        self,
        table: &str,
        column: &str,
        key: &str,
        target: &str,
        sources: &[&str],
        set: &[(String, String)],
    ) -> String {
        let column = self.quote(column);
        let mut assignments = format!("{column} = '{target}'");
        for (col, expr) in set {
            assignments.push_str(&format!(", {} = {expr}", self.quote(col)));
        }
        let sources: Vec<String> = sources.iter().map(|s| format!("'{s}'")).collect();
        format!(
            "UPDATE {} SET {assignments} WHERE {} = {} AND {column} IN ({})",
            self.quote(table),
            self.quote(key),
            self.param(),
            sources.join(", "),
        )
    }

    /// `SELECT c FROM t WHERE k = $1`, with the status read as text even
    /// from a PostgreSQL enum or a MySQL ENUM column.
    pub fn select(self, table: &str, column: &str, key: &str) -> String {
        let column = self.quote(column);
        let read = match self {
            Dialect::Postgres => format!("{column}::text"),
            Dialect::Sqlite => column,
            Dialect::MySql => format!("CAST({column} AS CHAR)"),
        };
        format!(
            "SELECT {read} FROM {} WHERE {} = {}",
            self.quote(table),
            self.quote(key),
            self.param()
        )
    }
}
