//! What differs between the SQL dialects, in one place: quoting, the length
//! of names, placeholders, and comparing strings byte for byte. The
//! statements themselves are shaped in `sql/` (DML) and `ddl.rs` (DDL)
//! from these pieces; a new dialect is a new variant here and its arms.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dialect {
    Postgres,
    Sqlite,
    MySql,
}

/// Every dialect, in the order of the runtime's `Sql { postgres, sqlite,
/// mysql }` fields.
pub const DIALECTS: [Dialect; 3] = [Dialect::Postgres, Dialect::Sqlite, Dialect::MySql];

/// The longest name, in characters: PostgreSQL truncates longer
/// identifiers, MySQL allows 64.
pub const MAX_IDENT: usize = 63;

impl Dialect {
    /// A short lowercase name: `postgres`, `sqlite` or `mysql`, as in
    /// `stateguard::ddl::postgres`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
            Dialect::MySql => "mysql",
        }
    }

    /// `name` quoted, each part of a `schema.table` on its own. Names are
    /// validated identifiers (`ident.rs`), so they hold no quote character.
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

    /// The `n`th bound value (from 1). MySQL's `?` is positional, so a value
    /// used twice is bound twice there.
    pub fn param(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}"),
            Dialect::Sqlite => format!("?{n}"),
            Dialect::MySql => "?".to_owned(),
        }
    }

    /// `schema.table` as the quoted schema with its dot (empty without
    /// one) and the bare table name: the prefix of objects that live in
    /// the table's schema, and the stem of their names.
    pub fn split_schema(self, name: &str) -> (String, &str) {
        match name.split_once('.') {
            Some((schema, bare)) => (format!("{}.", self.quote(schema)), bare),
            None => (String::new(), name),
        }
    }

    /// `value` as compared with state strings: its bytes on MySQL, where a
    /// `_ci`, accent-insensitive or PAD SPACE collation would take
    /// `'PENDING'`, `'pending '` or `'ÉTAT'` for `'pending'` or `'état'`.
    /// PostgreSQL and SQLite compare text by bytes unless told otherwise.
    pub fn bytes(self, value: &str) -> String {
        match self {
            Dialect::MySql => format!("CAST({value} AS BINARY)"),
            Dialect::Postgres | Dialect::Sqlite => value.to_owned(),
        }
    }
}

/// `<table>_<column>_<suffix>`, shortened to [`MAX_IDENT`] characters with a
/// hash of the whole name when longer, so it stays unique and the same on
/// every run. Names are ASCII (validated), so byte lengths are character
/// counts.
pub fn object_name(table: &str, column: &str, suffix: &str) -> String {
    let full = format!("{table}_{column}_{suffix}");
    if full.len() <= MAX_IDENT {
        return full;
    }
    // `<stem>_<8 hex digits>_<suffix>`
    let hash = format!("{:08x}", fnv1a32(full.as_bytes()));
    let keep = MAX_IDENT.saturating_sub(suffix.len() + hash.len() + 2);
    format!("{}_{hash}_{suffix}", &full[..keep])
}

/// 32-bit FNV-1a: stable across processes, platforms and Rust releases,
/// unlike `std`'s hashers, which names stored in a database need.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a32_matches_the_reference_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn long_names_are_shortened_stably_and_stay_distinct() {
        let table = "a".repeat(60);
        let states = object_name(&table, "status", "states");
        let transitions = object_name(&table, "status", "transitions");
        assert_eq!(states.len(), MAX_IDENT, "{states}");
        assert_eq!(transitions.len(), MAX_IDENT, "{transitions}");
        assert!(states.ends_with("_states"), "{states}");
        assert!(transitions.ends_with("_transitions"), "{transitions}");
        assert_eq!(states, object_name(&table, "status", "states"));
        // Two names that share their first 50 characters differ.
        let other = object_name(&format!("{}b", "a".repeat(59)), "status", "states");
        assert_ne!(states, other);
        assert_eq!(
            object_name("payouts", "status", "states"),
            "payouts_status_states"
        );
    }

    #[test]
    fn quoting_splits_a_schema() {
        assert_eq!(
            Dialect::Postgres.quote("billing.payouts"),
            "\"billing\".\"payouts\""
        );
        assert_eq!(Dialect::Sqlite.quote("payouts"), "\"payouts\"");
        assert_eq!(
            Dialect::MySql.quote("billing.payouts"),
            "`billing`.`payouts`"
        );
    }

    #[test]
    fn placeholders_and_byte_comparison() {
        assert_eq!(Dialect::Postgres.param(2), "$2");
        assert_eq!(Dialect::Sqlite.param(2), "?2");
        assert_eq!(Dialect::MySql.param(2), "?");
        assert_eq!(Dialect::MySql.bytes("`c`"), "CAST(`c` AS BINARY)");
        assert_eq!(Dialect::Postgres.bytes("\"c\""), "\"c\"");
    }
}
