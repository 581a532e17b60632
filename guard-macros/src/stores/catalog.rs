//! What `verify` reads of the database's catalog, in the order of the
//! runtime's `verify/catalog.rs`: a table's columns, its unique indexes,
//! and the definitions that enforce its states. PostgreSQL binds the
//! table as the quoted, qualified name `to_regclass` reads; SQLite the
//! table and its schema (`main`); MySQL the schema (empty for the
//! connection's database) and the table.

use super::{Place, tag};
use crate::dialect::Dialect;
use crate::plan::{Field, TAG};

pub(super) const STATEMENTS: [fn(Dialect, &Place) -> String; 3] = [columns, unique, enforcement];

/// MySQL: rows of the schema bound, or of the connection's database.
fn mysql_schema() -> String {
    format!("COALESCE(NULLIF({}, ''), DATABASE())", Field::Schema.mark())
}

/// A table's columns: name, `NOT NULL` (1 or 0), most characters, enum
/// values as a JSON array, type.
fn columns(d: Dialect, _: &Place) -> String {
    let (table, schema) = (Field::Table.mark(), Field::Schema.mark());
    match d {
        Dialect::Postgres => format!(
            "SELECT {}a.attname::text, CAST(CASE WHEN a.attnotnull THEN 1 ELSE 0 END AS BIGINT), \
             CAST(CASE WHEN t.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4 THEN \
             a.atttypmod - 4 END AS BIGINT), CASE WHEN t.typtype = 'e' THEN (SELECT \
             json_agg(e.enumlabel::text ORDER BY e.enumsortorder)::text FROM pg_enum AS e WHERE \
             e.enumtypid = t.oid) END, format_type(a.atttypid, a.atttypmod) FROM pg_attribute AS \
             a JOIN pg_type AS t ON t.oid = a.atttypid WHERE a.attrelid = to_regclass({table}) \
             AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            tag(d)
        ),
        Dialect::Sqlite => format!(
            "SELECT name, \"notnull\", NULL, NULL, type FROM pragma_table_info({table}, {schema}) \
             ORDER BY cid"
        ),
        Dialect::MySql => format!(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(CASE WHEN IS_NULLABLE = 'NO' THEN 1 ELSE 0 \
             END AS SIGNED), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), CASE WHEN DATA_TYPE = \
             'enum' THEN CAST(COLUMN_TYPE AS CHAR) END, CAST(COLUMN_TYPE AS CHAR) FROM \
             information_schema.COLUMNS WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {table} ORDER \
             BY ORDINAL_POSITION",
            mysql_schema()
        ),
    }
}

/// The column sets of a table's unique indexes (and primary key), each a
/// JSON array of names.
fn unique(d: Dialect, _: &Place) -> String {
    let (table, schema) = (Field::Table.mark(), Field::Schema.mark());
    match d {
        Dialect::Postgres => format!(
            "SELECT {}json_agg(a.attname::text)::text FROM pg_index AS i JOIN pg_attribute AS a \
             ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = \
             to_regclass({table}) AND i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid",
            tag(d)
        ),
        Dialect::Sqlite => format!(
            "SELECT json_group_array(ii.name) FROM pragma_index_list({table}, {schema}) AS il, \
             pragma_index_info(il.name, {schema}) AS ii WHERE il.\"unique\" = 1 AND il.partial = \
             0 GROUP BY il.name UNION ALL SELECT json_group_array(name) FROM \
             pragma_table_info({table}, {schema}) WHERE pk > 0 HAVING COUNT(*) > 0"
        ),
        Dialect::MySql => format!(
            "SELECT CAST(CONCAT('[', GROUP_CONCAT(JSON_QUOTE(COLUMN_NAME)), ']') AS CHAR) FROM \
             information_schema.STATISTICS WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {table} AND \
             NON_UNIQUE = 0 GROUP BY INDEX_NAME",
            mysql_schema()
        ),
    }
}

/// The definitions that enforce a table's states and transitions: each
/// trigger's body (`trigger`) and each CHECK constraint's clause
/// (`check`; on SQLite, whose checks live in the table's `CREATE TABLE`,
/// that text).
fn enforcement(d: Dialect, _: &Place) -> String {
    let table = Field::Table.mark();
    match d {
        Dialect::Postgres => format!(
            "SELECT {}'trigger', p.prosrc FROM pg_trigger AS t JOIN pg_proc AS p ON p.oid = \
             t.tgfoid WHERE t.tgrelid = to_regclass({table}) AND NOT t.tgisinternal UNION ALL \
             SELECT {TAG}, 'check', pg_get_constraintdef(c.oid) FROM pg_constraint AS c WHERE \
             c.conrelid = to_regclass({table}) AND c.contype = 'c'",
            tag(d)
        ),
        Dialect::Sqlite => format!(
            "SELECT CASE type WHEN 'trigger' THEN 'trigger' ELSE 'check' END, sql FROM \
             sqlite_master WHERE tbl_name = {table} AND type IN ('trigger', 'table')"
        ),
        Dialect::MySql => format!(
            "SELECT 'trigger', CAST(ACTION_STATEMENT AS CHAR) FROM information_schema.TRIGGERS \
             WHERE EVENT_OBJECT_SCHEMA = {schema} AND EVENT_OBJECT_TABLE = {table} UNION ALL \
             SELECT 'check', CAST(cc.CHECK_CLAUSE AS CHAR) FROM \
             information_schema.TABLE_CONSTRAINTS AS tc JOIN information_schema.CHECK_CONSTRAINTS \
             AS cc ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = \
             tc.CONSTRAINT_NAME WHERE tc.CONSTRAINT_TYPE = 'CHECK' AND tc.TABLE_SCHEMA = {schema} \
             AND tc.TABLE_NAME = {table}",
            schema = mysql_schema()
        ),
    }
}
