//! The enforcement DDL of a machine (a CHECK constraint on the status
//! column, triggers that reject illegal transitions), built at expansion
//! time like the DML of `sql/` and emitted as literals: the runtime's
//! `stateguard::ddl` only picks the dialect's text. What each statement
//! does, and why, is documented there.

pub mod table;
mod wake;

pub use self::wake::wake_up;

use crate::dialect::{Dialect, object_name};
use crate::model::Model;

/// MySQL's limit on `MESSAGE_TEXT`, in characters.
const MYSQL_MESSAGE_TEXT: usize = 128;

/// The enforcement DDL of one machine in one dialect, as the runtime's
/// `Ddl` returns it.
pub struct DdlText {
    /// `<table>_<column>_states`, unquoted.
    pub constraint: String,
    /// `<table>_<column>_transitions`, unquoted.
    pub trigger: String,
    pub check_clause: String,
    /// The statements, without a trailing `;`.
    pub up: Vec<String>,
    pub down: Vec<String>,
    /// The migration file: a header comment, then every statement.
    pub migration: String,
    pub down_migration: String,
}

/// The enforcement DDL of `model` in `dialect`.
pub fn ddl(model: &Model, dialect: Dialect) -> DdlText {
    Gen::new(model, dialect).ddl()
}

/// What the enforcement DDL enforces, as 16 hex digits: the table, the
/// status column, the states and the allowed changes. The transitions
/// trigger carries it in a comment (`-- stateguard fingerprint …`), which
/// the catalog keeps, so that `Machine::verify` can tell a trigger made
/// from another version of the enum.
pub fn fingerprint(model: &Model) -> String {
    fingerprint_of(&Gen::new(model, Dialect::Postgres))
}

fn fingerprint_of(g: &Gen) -> String {
    let mut text = format!("{}\n{}\n{}\n", g.table, g.column, g.states.join("\n"));
    for (source, targets) in &g.allowed {
        text.push_str(&format!("{source} -> {}\n", targets.join(" ")));
    }
    let mut digest = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut digest, text.as_bytes());
    format!("{:016x}", std::hash::Hasher::finish(&digest))
}

/// What every dialect's text is made of, read once from the model.
struct Gen<'a> {
    dialect: Dialect,
    /// The enum's Rust name.
    machine: String,
    /// As written: `payouts` or `billing.payouts`; used in messages.
    table: &'a str,
    column: &'a str,
    /// `billing.` quoted, or empty: the prefix of objects in the table's
    /// schema.
    schema_prefix: String,
    /// The table's own name, without the schema: the stem of object names.
    bare_table: &'a str,
    /// Every state string, in declaration order.
    states: Vec<&'a str>,
    /// Each state with outgoing transitions and the states they lead to,
    /// both in declaration order.
    allowed: Vec<(&'a str, Vec<&'a str>)>,
    /// The key columns.
    key: &'a [String],
    /// `history = "…"`, as written.
    history: Option<&'a str>,
    /// The line that carries [`fingerprint`] in the transitions trigger.
    stamp: String,
}

impl<'a> Gen<'a> {
    fn new(model: &'a Model, dialect: Dialect) -> Self {
        let table = model.table.as_str();
        let (schema_prefix, bare_table) = dialect.split_schema(table);
        let states = model.states.iter().map(|s| s.db.as_str()).collect();
        let allowed = (0..model.states.len())
            .filter_map(|source| {
                let targets: Vec<&str> = (0..model.states.len())
                    .filter(|&target| {
                        model
                            .transitions
                            .iter()
                            .any(|t| t.target == target && t.sources.contains(&source))
                    })
                    .map(|target| model.states[target].db.as_str())
                    .collect();
                (!targets.is_empty()).then(|| (model.states[source].db.as_str(), targets))
            })
            .collect();
        Gen {
            dialect,
            machine: syn::ext::IdentExt::unraw(model.ident).to_string(),
            table,
            column: &model.column,
            schema_prefix,
            bare_table,
            states,
            allowed,
            key: &model.key,
            history: model.history.as_deref(),
            stamp: String::new(),
        }
        .stamped()
    }

    fn stamped(mut self) -> Self {
        self.stamp = format!("-- stateguard fingerprint {}", fingerprint_of(&self));
        self
    }

    fn ddl(&self) -> DdlText {
        let constraint = self.name("states");
        let trigger = self.name("transitions");
        let check_clause = format!(
            "CONSTRAINT {} CHECK ({})",
            self.q(&constraint),
            self.state_check()
        );
        let (mut up, mut down) = match self.dialect {
            Dialect::Postgres => self.postgres(&constraint, &trigger),
            Dialect::Sqlite => self.sqlite(&trigger),
            Dialect::MySql => self.mysql(&constraint, &trigger),
        };
        if let Some(history) = self.history {
            let (history_up, history_down) = self.history(history);
            up.extend(history_up);
            // Its triggers go first; the table and its rows stay.
            down.splice(0..0, history_down);
        }
        let migration = self.migration(&check_clause, &up);
        let down_migration = self.down_migration(&down);
        DdlText {
            constraint,
            trigger,
            check_clause,
            up,
            down,
            migration,
            down_migration,
        }
    }

    /// The migration file: a comment saying where it came from, then every
    /// statement followed by `;` and a blank line.
    fn migration(&self, check_clause: &str, statements: &[String]) -> String {
        let mut header = vec![
            format!(
                "stateguard: the states and transitions of {}, enforced on {}.{}.",
                self.machine, self.table, self.column
            ),
            format!(
                "Generated by stateguard::ddl::{}::<{}>(); generate it again when the enum changes.",
                self.dialect.name(),
                self.machine
            ),
        ];
        if self.dialect == Dialect::Sqlite {
            header.push(
                "Needs SQLite 3.48 or later. SQLite cannot add a constraint to an existing table,"
                    .to_owned(),
            );
            header.push(
                "so two triggers check the states; a new table can have this constraint instead:"
                    .to_owned(),
            );
            header.push(format!("    {check_clause}"));
        }
        if self.dialect == Dialect::MySql {
            header.push(
                "sqlx runs this file as it is; the mysql command-line client needs DELIMITER \
                 around the trigger."
                    .to_owned(),
            );
        }
        file(&header, statements)
    }

    /// The down migration: removes the constraint (or the state triggers)
    /// and the transition trigger.
    fn down_migration(&self, statements: &[String]) -> String {
        let header = [format!(
            "Removes what stateguard::ddl::{}::<{}>() created on {}.{}.",
            self.dialect.name(),
            self.machine,
            self.table,
            self.column
        )];
        file(&header, statements)
    }

    /// `<table>_<column>_<suffix>`, at most `MAX_IDENT` characters.
    fn name(&self, suffix: &str) -> String {
        object_name(self.bare_table, self.column, suffix)
    }

    fn q(&self, name: &str) -> String {
        self.dialect.quote(name)
    }

    /// An object named `name` in the table's schema, quoted.
    fn in_schema(&self, name: &str) -> String {
        format!("{}{}", self.schema_prefix, self.q(name))
    }

    /// `('a', 'b', …)`
    fn list(values: &[&str]) -> String {
        let quoted: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
        format!("({})", quoted.join(", "))
    }

    /// The condition every stored status must meet: one of the states'
    /// strings, byte for byte (anything else `apply` cannot parse).
    fn state_check(&self) -> String {
        let column = self.dialect.bytes(&self.q(self.column));
        format!("{column} IN {}", Self::list(&self.states))
    }

    /// True for an allowed change of the status, false (never NULL) for any
    /// other, indented for a condition that starts at `indent`:
    ///
    /// ```text
    /// (CASE OLD.status
    ///     WHEN 'pending' THEN NEW.status IN ('sending', 'cancelled')
    ///     ELSE false
    /// END) IS NOT TRUE
    /// ```
    ///
    /// The `CASE` is false for a source with no transitions and for NULL,
    /// and `IS NOT TRUE` turns a NULL new status into a rejection too.
    fn illegal(&self, indent: &str) -> String {
        let column = self.q(self.column);
        let false_ = match self.dialect {
            Dialect::MySql => "FALSE",
            Dialect::Postgres | Dialect::Sqlite => "false",
        };
        if self.allowed.is_empty() {
            // A machine without transitions: every change is illegal (and a
            // `CASE` without `WHEN` is a syntax error).
            return format!("({false_}) IS NOT TRUE");
        }
        let old = self.dialect.bytes(&format!("OLD.{column}"));
        let new = self.dialect.bytes(&format!("NEW.{column}"));
        let mut text = format!("(CASE {old}\n");
        for (source, targets) in &self.allowed {
            text.push_str(&format!(
                "{indent}    WHEN '{source}' THEN {new} IN {}\n",
                Self::list(targets)
            ));
        }
        text.push_str(&format!(
            "{indent}    ELSE {false_}\n{indent}END) IS NOT TRUE"
        ));
        text
    }

    /// The history table and its index (`table::history_table`), and the
    /// triggers that keep it append-only. The down migration drops the
    /// triggers and keeps the table: its rows are the record.
    fn history(&self, history: &str) -> (Vec<String>, Vec<String>) {
        let d = self.dialect;
        let h = d.quote(history);
        let (schema_prefix, bare) = d.split_schema(history);
        let object = |suffix: &str| {
            format!(
                "{schema_prefix}{}",
                d.quote(&object_name(bare, "history", suffix))
            )
        };
        let message = format!("stateguard: the history table {history} is append-only");
        let mut up = table::history_table(d, self.table, self.key, history);
        match d {
            Dialect::Postgres => {
                let function = object("append_only");
                let trigger = d.quote(&object_name(bare, "history", "append_only"));
                up.extend([
                    format!(
                        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS \
                         $$\nBEGIN\n    RAISE EXCEPTION '{message}' USING ERRCODE = '23001';\nEND\n$$"
                    ),
                    format!(
                        "CREATE TRIGGER {trigger}\nBEFORE UPDATE OR DELETE ON {h}\nFOR EACH ROW \
                         EXECUTE FUNCTION {function}()"
                    ),
                ]);
                let down = vec![
                    format!("DROP TRIGGER IF EXISTS {trigger} ON {h}"),
                    format!("DROP FUNCTION IF EXISTS {function}()"),
                ];
                (up, down)
            }
            Dialect::Sqlite => {
                let no_update = object("no_update");
                let no_delete = object("no_delete");
                let h_bare = d.quote(bare);
                up.extend([
                    format!(
                        "CREATE TRIGGER {no_update}\nBEFORE UPDATE ON {h_bare}\nBEGIN\n    SELECT \
                         RAISE(ABORT, '{message}');\nEND"
                    ),
                    format!(
                        "CREATE TRIGGER {no_delete}\nBEFORE DELETE ON {h_bare}\nBEGIN\n    SELECT \
                         RAISE(ABORT, '{message}');\nEND"
                    ),
                ]);
                let down = vec![
                    format!("DROP TRIGGER IF EXISTS {no_delete}"),
                    format!("DROP TRIGGER IF EXISTS {no_update}"),
                ];
                (up, down)
            }
            Dialect::MySql => {
                let no_update = object("no_update");
                let no_delete = object("no_delete");
                let signal = |what: &str| {
                    let text: String = format!("{message}: no {what}")
                        .chars()
                        .take(MYSQL_MESSAGE_TEXT)
                        .collect();
                    format!("SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{text}'")
                };
                up.extend([
                    format!(
                        "CREATE TRIGGER {no_update}\nBEFORE UPDATE ON {h}\nFOR EACH ROW {}",
                        signal("UPDATE")
                    ),
                    format!(
                        "CREATE TRIGGER {no_delete}\nBEFORE DELETE ON {h}\nFOR EACH ROW {}",
                        signal("DELETE")
                    ),
                ]);
                let down = vec![
                    format!("DROP TRIGGER IF EXISTS {no_delete}"),
                    format!("DROP TRIGGER IF EXISTS {no_update}"),
                ];
                (up, down)
            }
        }
    }

    fn postgres(&self, constraint: &str, trigger: &str) -> (Vec<String>, Vec<String>) {
        let table = self.q(self.table);
        let column = self.q(self.column);
        let constraint = self.q(constraint);
        let function = self.in_schema(trigger);
        let trigger = self.q(trigger);
        let check = format!(
            "ALTER TABLE {table}\n    ADD CONSTRAINT {constraint}\n    CHECK ({})",
            self.state_check()
        );
        // The table name goes into RAISE's format string, where `%` is a
        // placeholder; identifiers cannot contain one. The states are
        // arguments, never part of the format.
        let stamp = &self.stamp;
        let body = format!(
            "BEGIN
    {stamp}
    IF NEW.{column} IS DISTINCT FROM OLD.{column}
        AND {}
    THEN
        RAISE EXCEPTION 'stateguard: illegal transition on {}: % -> %',
            OLD.{column}, NEW.{column}
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END",
            self.illegal("        "),
            self.table,
        );
        let tag = dollar_tag(&body);
        let create_function = format!(
            "CREATE FUNCTION {function}() RETURNS trigger\nLANGUAGE plpgsql AS {tag}\n{body}\n{tag}"
        );
        let create_trigger = format!(
            "CREATE TRIGGER {trigger}\n    BEFORE UPDATE OF {column} ON {table}\n    \
             FOR EACH ROW EXECUTE FUNCTION {function}()"
        );
        let up = vec![check, create_function, create_trigger];
        let down = vec![
            format!("DROP TRIGGER IF EXISTS {trigger} ON {table}"),
            format!("DROP FUNCTION IF EXISTS {function}()"),
            format!("ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {constraint}"),
        ];
        (up, down)
    }

    fn sqlite(&self, trigger: &str) -> (Vec<String>, Vec<String>) {
        // A trigger lives in its table's schema and names the table
        // unqualified.
        let table = self.q(self.bare_table);
        let column = self.q(self.column);
        let unknown = format!(
            "BEGIN\n    SELECT RAISE(ABORT, 'stateguard: unknown state on {}: ' || NEW.{column});\nEND",
            self.table
        );
        let states_when = format!("NEW.{column} NOT IN {}", Self::list(&self.states));
        let on_insert = self.in_schema(&self.name("states_insert"));
        let on_update = self.in_schema(&self.name("states_update"));
        let transitions = self.in_schema(trigger);
        let up = vec![
            format!(
                "CREATE TRIGGER {on_insert}\nBEFORE INSERT ON {table}\n\
                 FOR EACH ROW WHEN {states_when}\n{unknown}"
            ),
            format!(
                "CREATE TRIGGER {on_update}\nBEFORE UPDATE OF {column} ON {table}\n\
                 FOR EACH ROW WHEN {states_when}\n{unknown}"
            ),
            format!(
                "CREATE TRIGGER {transitions}\nBEFORE UPDATE OF {column} ON {table}\n\
                 FOR EACH ROW WHEN NEW.{column} IS NOT OLD.{column}\n    AND {}\n\
                 BEGIN\n    {}\n    SELECT RAISE(ABORT, 'stateguard: illegal transition on {}: '\n        \
                 || coalesce(OLD.{column}, 'NULL') || ' -> ' || coalesce(NEW.{column}, 'NULL'));\nEND",
                self.illegal("    "),
                self.stamp,
                self.table,
            ),
        ];
        let down = [transitions, on_update, on_insert]
            .iter()
            .map(|name| format!("DROP TRIGGER IF EXISTS {name}"))
            .collect();
        (up, down)
    }

    fn mysql(&self, constraint: &str, trigger: &str) -> (Vec<String>, Vec<String>) {
        let table = self.q(self.table);
        let column = self.q(self.column);
        let constraint = self.q(constraint);
        let trigger = self.in_schema(trigger);
        let check = format!(
            "ALTER TABLE {table}\n    ADD CONSTRAINT {constraint}\n    CHECK ({})",
            self.state_check()
        );
        // `SIGNAL … SET MESSAGE_TEXT` takes a variable or a literal, not an
        // expression; a value longer than 128 characters is an error in
        // strict mode, so it is cut first. Every comparison of states is of
        // bytes, as in the CHECK, so that no collation turns a change into
        // "no change" or one state into another.
        let unchanged = format!(
            "{} <=> {}",
            self.dialect.bytes(&format!("NEW.{column}")),
            self.dialect.bytes(&format!("OLD.{column}"))
        );
        let create_trigger = format!(
            "CREATE TRIGGER {trigger}
BEFORE UPDATE ON {table}
FOR EACH ROW
BEGIN
    {}
    DECLARE stateguard_message VARCHAR({MYSQL_MESSAGE_TEXT});
    IF NOT ({unchanged})
        AND {}
    THEN
        SET stateguard_message = LEFT(CONCAT('stateguard: illegal transition on {}: ',
            IFNULL(OLD.{column}, 'NULL'), ' -> ', IFNULL(NEW.{column}, 'NULL')), {MYSQL_MESSAGE_TEXT});
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = stateguard_message;
    END IF;
END",
            self.stamp,
            self.illegal("        "),
            self.table,
        );
        let up = vec![check, create_trigger];
        // MySQL has no `DROP CONSTRAINT IF EXISTS` (MariaDB has).
        let down = vec![
            format!("DROP TRIGGER IF EXISTS {trigger}"),
            format!("ALTER TABLE {table} DROP CONSTRAINT {constraint}"),
        ];
        (up, down)
    }
}

/// `-- ` comment lines, a blank line, then each statement with `;` and a
/// blank line between statements.
fn file(header: &[String], statements: &[String]) -> String {
    let mut text = String::new();
    for line in header {
        text.push_str("-- ");
        text.push_str(line);
        text.push('\n');
    }
    for statement in statements {
        text.push('\n');
        text.push_str(statement);
        text.push_str(";\n");
    }
    text
}

/// A dollar-quote tag for a PostgreSQL function body that does not occur in
/// it (a state string may contain `$`).
fn dollar_tag(body: &str) -> String {
    let mut tag = "$stateguard$".to_owned();
    let mut n = 0;
    while body.contains(&tag) {
        n += 1;
        tag = format!("$stateguard_{n}$");
    }
    tag
}

#[cfg(test)]
mod tests;
