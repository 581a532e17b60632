//! The outbox's statements and table, in the order of the runtime's
//! `OutboxSql`.

use super::{Place, tag};
use crate::dialect::Dialect;
use crate::plan::Field;

pub(super) const TABLE: &str = "stateguard_outbox";

pub(super) const STATEMENTS: [fn(Dialect, &Place) -> String; 10] = [
    enqueue, claim, taken, published, failed, dead, requeue, prune, status, backlog,
];

/// The integer type a count is read as; SQLite's needs no cast.
fn int(d: Dialect, expr: &str) -> String {
    match d {
        Dialect::Postgres => format!("CAST({expr} AS BIGINT)"),
        Dialect::Sqlite => expr.to_owned(),
        Dialect::MySql => format!("CAST({expr} AS SIGNED)"),
    }
}

/// A `VARBINARY` column read as text on MySQL.
fn text(d: Dialect, column: &str) -> String {
    match d {
        Dialect::MySql => format!("CAST({column} AS CHAR)"),
        Dialect::Postgres | Dialect::Sqlite => column.to_owned(),
    }
}

/// The message's row, due at once; nothing if a message with its id is
/// there.
fn enqueue(d: Dialect, at: &Place) -> String {
    let now = d.now();
    let values = format!(
        "(message_id, order_key, topic, payload, created_at, next_attempt_at) VALUES ({}, {}, \
         {}, {}, {now}, {now})",
        Field::MessageId.mark(),
        Field::OrderKey.mark(),
        Field::Topic.mark(),
        Field::Payload.mark(),
    );
    let table = at.table(d, TABLE);
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            format!("INSERT INTO {table} {values} ON CONFLICT (message_id) DO NOTHING")
        }
        // Safe here: the id, the order key and the topic were checked to
        // fit, and the payload is a `LONGBLOB`.
        Dialect::MySql => format!("INSERT IGNORE INTO {table} {values}"),
    }
}

/// The columns a relay reads of a message it took: seq, lease, id,
/// topic, payload, attempts.
fn taken_columns(d: Dialect, alias: &str) -> String {
    format!(
        "{alias}seq, {alias}lease, {}, {}, {alias}payload, {}",
        text(d, &format!("{alias}message_id")),
        text(d, &format!("{alias}topic")),
        int(d, &format!("{alias}attempts")),
    )
}

/// Up to a number of due messages, each the earliest unpublished of its
/// order key, leased for a number of milliseconds under the relay's
/// claim: as [`taken_columns`] (MySQL returns nothing; `taken` reads
/// them).
///
/// The cost is the batch's, not the backlog's: the live messages are
/// walked in order through an index that holds no published one, and a
/// message is its key's head when it is the first entry of its key in the
/// index of unpublished messages (one index entry read, where a `NOT
/// EXISTS` over earlier messages read every entry of the key on MySQL).
fn claim(d: Dialect, at: &Place) -> String {
    let table = at.table(d, TABLE);
    let now = d.now();
    let due = format!(
        "SELECT d.seq FROM {table} AS d WHERE d.published_at IS NULL AND d.dead_at IS NULL AND \
         d.next_attempt_at <= {now} AND (d.locked_until IS NULL OR d.locked_until < {now}) AND \
         d.seq = (SELECT e.seq FROM {table} AS e WHERE e.order_key = d.order_key AND \
         e.published_at IS NULL ORDER BY e.seq LIMIT 1) ORDER BY d.seq LIMIT {}",
        Field::Limit.mark(),
    );
    let (claim, until) = (Field::Claim.mark(), d.later(&Field::Millis.mark()));
    let unlocked = format!("(o.locked_until IS NULL OR o.locked_until < {now})");
    match d {
        Dialect::Postgres => format!(
            "WITH __sg_due AS MATERIALIZED ({due} FOR UPDATE OF d SKIP LOCKED) UPDATE {table} \
             AS o SET claim = {claim}, lease = o.lease + 1, attempts = o.attempts + 1, \
             locked_until = {until} FROM __sg_due WHERE o.seq = __sg_due.seq AND o.published_at \
             IS NULL AND {unlocked} RETURNING {}{}",
            tag(d),
            taken_columns(d, "o."),
        ),
        Dialect::Sqlite => format!(
            "UPDATE {table} SET claim = {claim}, lease = lease + 1, attempts = attempts + 1, \
             locked_until = {until} WHERE seq IN ({due}) RETURNING {}",
            taken_columns(d, ""),
        ),
        Dialect::MySql => format!(
            "UPDATE {table} AS o JOIN ({due}) AS __sg_due ON o.seq = __sg_due.seq SET o.claim = \
             {claim}, o.lease = o.lease + 1, o.attempts = o.attempts + 1, o.locked_until = \
             {until} WHERE o.published_at IS NULL AND {unlocked}"
        ),
    }
}

/// The unpublished messages of a claim, as `claim` returns them (MySQL,
/// whose `UPDATE` returns no rows, reads them so).
fn taken(d: Dialect, at: &Place) -> String {
    format!(
        "SELECT {}{} FROM {} WHERE claim = {} AND published_at IS NULL ORDER BY seq",
        tag(d),
        taken_columns(d, ""),
        at.table(d, TABLE),
        Field::Claim.mark(),
    )
}

/// The messages of a claim whose seqs a JSON array lists, published: one
/// statement for a pass's batch, fenced by the claim, which a takeover
/// replaces.
fn published(d: Dialect, at: &Place) -> String {
    let seqs = Field::Seqs.mark();
    // PostgreSQL: the seqs as one array, so that the rows are found by
    // key; as an `IN` list its planner may scan the table for the claim
    // instead, which costs the table's size.
    let listed = match d {
        Dialect::Postgres => format!(
            "= ANY (ARRAY(SELECT CAST(value AS BIGINT) FROM \
             json_array_elements_text(CAST({seqs} AS JSON))))"
        ),
        Dialect::Sqlite => format!("IN (SELECT value FROM json_each({seqs}))"),
        Dialect::MySql => format!(
            "IN (SELECT j.seq FROM JSON_TABLE({seqs}, '$[*]' COLUMNS (seq BIGINT PATH '$')) AS \
             j)"
        ),
    };
    format!(
        "UPDATE {} SET published_at = {}, locked_until = NULL WHERE claim = {} AND seq \
         {listed} AND published_at IS NULL",
        at.table(d, TABLE),
        d.now(),
        Field::Claim.mark(),
    )
}

/// A message, still under the caller's lease, failed: due again in a
/// number of milliseconds, or given up once it has had as many attempts
/// as allowed.
fn failed(d: Dialect, at: &Place) -> String {
    format!(
        "UPDATE {} SET last_error = {}, locked_until = NULL, next_attempt_at = {}, dead_at = \
         CASE WHEN attempts >= {} THEN {} END WHERE seq = {} AND lease = {} AND published_at IS \
         NULL",
        at.table(d, TABLE),
        Field::Reason.mark(),
        d.later(&Field::Millis.mark()),
        Field::Attempts.mark(),
        d.now(),
        Field::Seq.mark(),
        Field::Lease.mark(),
    )
}

/// Up to a number of given-up messages, oldest first: id, topic,
/// attempts, last error.
fn dead(d: Dialect, at: &Place) -> String {
    format!(
        "SELECT {}{}, {}, {}, last_error FROM {} WHERE dead_at IS NOT NULL ORDER BY seq LIMIT {}",
        tag(d),
        text(d, "message_id"),
        text(d, "topic"),
        int(d, "attempts"),
        at.table(d, TABLE),
        Field::Limit.mark(),
    )
}

/// A given-up message, due again with no attempts.
fn requeue(d: Dialect, at: &Place) -> String {
    format!(
        "UPDATE {} SET dead_at = NULL, attempts = 0, last_error = NULL, next_attempt_at = {} \
         WHERE message_id = {} AND dead_at IS NOT NULL",
        at.table(d, TABLE),
        d.now(),
        Field::MessageId.mark(),
    )
}

/// Up to a number of messages published more than a number of
/// milliseconds ago, oldest first, removed.
fn prune(d: Dialect, at: &Place) -> String {
    let table = at.table(d, TABLE);
    let due = format!(
        "published_at < {} ORDER BY seq LIMIT {}",
        d.ago(&Field::Millis.mark()),
        Field::Limit.mark(),
    );
    match d {
        Dialect::Postgres => format!(
            "WITH __sg_p AS MATERIALIZED (SELECT seq FROM {table} WHERE {due} FOR UPDATE SKIP \
             LOCKED) DELETE FROM {table} WHERE seq IN (SELECT seq FROM __sg_p)"
        ),
        Dialect::Sqlite => {
            format!("DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE {due})")
        }
        Dialect::MySql => format!("DELETE FROM {table} WHERE {due}"),
    }
}

/// A message's state (`published`, `dead` or `waiting`), attempts and
/// last error.
fn status(d: Dialect, at: &Place) -> String {
    format!(
        "SELECT {}CASE WHEN published_at IS NOT NULL THEN 'published' WHEN dead_at IS NOT NULL \
         THEN 'dead' ELSE 'waiting' END, {}, last_error FROM {} WHERE message_id = {}",
        tag(d),
        int(d, "attempts"),
        at.table(d, TABLE),
        Field::MessageId.mark(),
    )
}

/// How many messages wait to be published (neither published nor given
/// up), counted up to a number of rows.
fn backlog(d: Dialect, at: &Place) -> String {
    super::count(
        d,
        &at.table(d, TABLE),
        "published_at IS NULL AND dead_at IS NULL",
    )
}

/// PostgreSQL: the trigger that wakes listening workers after every
/// statement that inserts messages (`stateguard::worker::WakeUps`); it
/// runs `stateguard_wake()`, which the runtime creates.
pub(super) fn wake_up(at: &Place) -> String {
    let d = Dialect::Postgres;
    format!(
        "CREATE OR REPLACE TRIGGER \"stateguard_outbox_stateguard_wake\"\n    AFTER INSERT ON {}\n    \
         FOR EACH STATEMENT EXECUTE FUNCTION stateguard_wake()",
        at.table(d, TABLE)
    )
}

/// The table and its indexes.
pub(super) fn ddl(d: Dialect, at: &Place) -> Vec<String> {
    let table = at.table(d, TABLE);
    let index = |name: &str, columns: &str| {
        format!(
            "CREATE INDEX {} ON {} {columns}",
            at.index(d, name),
            at.indexed(d, TABLE)
        )
    };
    // Both hold unpublished messages alone, so that a claim costs its
    // batch and not the backlog: the claim walks the live messages in
    // order (`next`), and asks of each whether an earlier one of its key
    // waits (`pending`, which keeps dead messages: they block their key).
    let order = index(
        "stateguard_outbox_pending",
        "(order_key, seq) WHERE published_at IS NULL",
    );
    let due = index(
        "stateguard_outbox_next",
        "(seq) WHERE published_at IS NULL AND dead_at IS NULL",
    );
    match d {
        Dialect::Postgres => vec![
            format!(
                "CREATE TABLE {table} (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id TEXT COLLATE \"C\" NOT NULL UNIQUE,
    order_key TEXT COLLATE \"C\" NOT NULL,
    occurrence BIGINT,
    topic TEXT NOT NULL,
    payload BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    last_error TEXT,
    lease BIGINT NOT NULL DEFAULT 0,
    claim BIGINT,
    locked_until TIMESTAMPTZ,
    published_at TIMESTAMPTZ,
    dead_at TIMESTAMPTZ
)"
            ),
            order,
            due,
        ],
        Dialect::Sqlite => vec![
            format!(
                "CREATE TABLE {table} (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    order_key TEXT NOT NULL,
    occurrence INTEGER,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    created_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    last_error TEXT,
    lease INTEGER NOT NULL DEFAULT 0,
    claim INTEGER,
    locked_until TEXT,
    published_at TEXT,
    dead_at TEXT
)"
            ),
            order,
            due,
        ],
        Dialect::MySql => vec![format!(
            "CREATE TABLE {table} (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    message_id VARBINARY(1020) NOT NULL,
    order_key VARBINARY(1020) NOT NULL,
    occurrence BIGINT NULL,
    topic VARBINARY(1020) NOT NULL,
    payload LONGBLOB NOT NULL,
    created_at DATETIME(3) NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(3) NOT NULL,
    last_error TEXT,
    lease BIGINT NOT NULL DEFAULT 0,
    claim BIGINT NULL,
    locked_until DATETIME(3) NULL,
    published_at DATETIME(3) NULL,
    dead_at DATETIME(3) NULL,
    UNIQUE KEY stateguard_outbox_message_id (message_id),
    KEY stateguard_outbox_pending (published_at, order_key, seq),
    KEY stateguard_outbox_next (published_at, dead_at, seq),
    KEY stateguard_outbox_claim (claim)
)"
        )],
    }
}
