//! The inbox's statements and table, in the order of the runtime's
//! `InboxSql`.

use super::Place;
use crate::dialect::Dialect;
use crate::plan::Field;

pub(super) const TABLE: &str = "stateguard_inbox";

pub(super) const STATEMENTS: [fn(Dialect, &Place) -> String; 2] = [receive, prune];

/// The message's row; nothing if it is there.
fn receive(d: Dialect, at: &Place) -> String {
    let values = format!(
        "(consumer, message_id, received_at) VALUES ({}, {}, {})",
        Field::Consumer.mark(),
        Field::MessageId.mark(),
        d.now(),
    );
    let table = at.table(d, TABLE);
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            format!("INSERT INTO {table} {values} ON CONFLICT (consumer, message_id) DO NOTHING")
        }
        // Safe here: both values were checked to fit.
        Dialect::MySql => format!("INSERT IGNORE INTO {table} {values}"),
    }
}

/// Up to a number of messages received more than a number of
/// milliseconds ago, oldest first, removed.
fn prune(d: Dialect, at: &Place) -> String {
    let table = at.table(d, TABLE);
    let due = format!(
        "received_at < {} ORDER BY received_at LIMIT {}",
        d.ago(&Field::Millis.mark()),
        Field::Limit.mark(),
    );
    match d {
        Dialect::Postgres => format!(
            "WITH __sg_p AS MATERIALIZED (SELECT consumer, message_id FROM {table} WHERE {due} \
             FOR UPDATE SKIP LOCKED) DELETE FROM {table} WHERE (consumer, message_id) IN \
             (SELECT consumer, message_id FROM __sg_p)"
        ),
        Dialect::Sqlite => {
            format!("DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {due})")
        }
        Dialect::MySql => format!("DELETE FROM {table} WHERE {due}"),
    }
}

/// The table and its index.
pub(super) fn ddl(d: Dialect, at: &Place) -> Vec<String> {
    let table = at.table(d, TABLE);
    let index = "stateguard_inbox_received_at";
    let create_index = format!(
        "CREATE INDEX {} ON {} (received_at)",
        at.index(d, index),
        at.indexed(d, TABLE)
    );
    match d {
        Dialect::Postgres => vec![
            format!(
                "CREATE TABLE {table} (
    consumer TEXT COLLATE \"C\" NOT NULL,
    message_id TEXT COLLATE \"C\" NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, message_id)
)"
            ),
            create_index,
        ],
        Dialect::Sqlite => vec![
            format!(
                "CREATE TABLE {table} (
    consumer TEXT NOT NULL,
    message_id TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (consumer, message_id)
)"
            ),
            create_index,
        ],
        Dialect::MySql => vec![format!(
            "CREATE TABLE {table} (
    consumer VARBINARY(1020) NOT NULL,
    message_id VARBINARY(1020) NOT NULL,
    received_at DATETIME(3) NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY {index} (received_at)
)"
        )],
    }
}
