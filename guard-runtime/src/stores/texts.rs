//! Every statement and table of the fixed-table stores, written once as
//! `concat!` pieces, with the schema's quoted name before each table name
//! (`schema.rs` builds the stores of them).

/// A store statement's tag column on PostgreSQL, `$hex` its digest and
/// `$bound` the placeholder that binds the tag last: the tag where the
/// value bound there is the tag, a failure of the whole statement
/// otherwise. The same column as a machine's statements have, which
/// `guard-macros/src/plan.rs` (`checked`) writes and explains, and
/// `executor/proven.rs` reads.
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_store_tag {
    ($hex:literal, [$($tag:tt)*], $bound:literal) => {
        concat!(
            "CASE WHEN ", $bound, "::text = 'stateguard ", $hex, $($tag)* "' THEN 'stateguard ",
            $hex, $($tag)* "'::text ELSE CAST(concat('stateguard mix-up: ran stateguard ",
            $hex, $($tag)* " with ', ", $bound, "::text) AS INTEGER)::text END"
        )
    };
}

/// The texts of the stores' statements and tables, with each table name
/// after the schema's prefix in each dialect (`$pg`, `$lite`, `$my`: none,
/// or `"payments".` and `` `payments`. ``), and the schema in each
/// PostgreSQL tag (`$tag`: none, or ` payments`). Written once here, for
/// the tables found through the search path ([`Stores::search_path`](crate::Stores::search_path))
/// and for [`stores!`](crate::stores!).
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_store_texts {
    (
        schema = $schema:expr,
        pg = [$($pg:tt)*],
        lite = [$($lite:tt)*],
        my = [$($my:tt)*],
        tag = [$($tag:tt)*],
        idempotency = $idempotency:expr,
        inbox = $inbox:expr,
        outbox = $outbox:expr $(,)?
    ) => {
        $crate::__private::StoreTexts {
            schema: $schema,
            idempotency_table: $idempotency,
            inbox_table: $inbox,
            outbox_table: $outbox,
            idempotency: [
            // READ
            [
                concat!("SELECT ", $crate::__stateguard_store_tag!("3d88c9364f7c4664", [$($tag)*], "$3"), ", fingerprint, state, lease, CAST(response_status AS BIGINT), \
               response_body, \
               CAST(CASE WHEN locked_until < statement_timestamp() THEN 1 ELSE 0 END AS BIGINT), \
               response_headers FROM ", $($pg)* "stateguard_idempotency WHERE scope = $1 AND idem_key = $2"),
                concat!("SELECT fingerprint, state, lease, response_status, response_body, \
             CASE WHEN locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END, \
             response_headers FROM ", $($lite)* "stateguard_idempotency WHERE scope = ?1 AND idem_key = ?2"),
                concat!("SELECT fingerprint, state, lease, CAST(response_status AS SIGNED), response_body, \
            CAST(CASE WHEN locked_until < UTC_TIMESTAMP(3) THEN 1 ELSE 0 END AS SIGNED), \
            response_headers FROM ", $($my)* "stateguard_idempotency WHERE scope = ? AND idem_key = ?"),
            ],
            // CLAIM
            [
                concat!("WITH __sg_new AS (INSERT INTO ", $($pg)* "stateguard_idempotency (scope, idem_key, \
               fingerprint, state, lease, locked_until, created_at) VALUES ($1, $2, $3, \
               'running', 1, statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 \
               millisecond', statement_timestamp()) ON CONFLICT (scope, idem_key) DO NOTHING \
               RETURNING lease) SELECT ", $crate::__stateguard_store_tag!("16997da6303b4e50", [$($tag)*], "$5"), ", CAST(1 AS BIGINT), CAST(NULL AS TEXT), CAST(NULL AS \
               TEXT), lease, CAST(NULL AS BIGINT), CAST(NULL AS BYTEA), CAST(0 AS BIGINT), \
               CAST(NULL AS TEXT), set_config('synchronous_commit', 'off', true) FROM __sg_new \
               UNION ALL SELECT \
               ", $crate::__stateguard_store_tag!("16997da6303b4e50", [$($tag)*], "$5"), ", CAST(0 AS BIGINT), fingerprint, state, lease, CAST(response_status AS BIGINT), \
               response_body, CAST(CASE WHEN locked_until < statement_timestamp() THEN 1 ELSE 0 \
               END AS BIGINT), response_headers, CAST(NULL AS TEXT) FROM ", $($pg)* "stateguard_idempotency WHERE scope = $1 \
               AND idem_key = $2 AND NOT EXISTS (SELECT 1 FROM __sg_new)"),
                concat!("INSERT INTO ", $($lite)* "stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
             locked_until, created_at) VALUES (?1, ?2, ?3, 'running', 1, strftime('%Y-%m-%d \
             %H:%M:%f', 'now', printf('+%.3f seconds', CAST(?4 AS INTEGER) / 1000.0)), \
             strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (scope, idem_key) DO NOTHING \
             RETURNING 1"),
                concat!("INSERT IGNORE INTO ", $($my)* "stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
            locked_until, created_at) VALUES (?, ?, ?, 'running', 1, UTC_TIMESTAMP(3) + INTERVAL \
            (? * 1000) MICROSECOND, UTC_TIMESTAMP(3))"),
            ],
            // TAKE_OVER
            [
                concat!("UPDATE ", $($pg)* "stateguard_idempotency SET lease = lease + 1, locked_until = \
               statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 millisecond' WHERE \
               scope = $1 AND idem_key = $2 AND state = 'running' AND lease = $3 AND \
               locked_until < statement_timestamp() RETURNING ", $crate::__stateguard_store_tag!("1190baf70b829cdd", [$($tag)*], "$5"), ", lease"),
                concat!("UPDATE ", $($lite)* "stateguard_idempotency SET lease = lease + 1, locked_until = \
             strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', CAST(?4 AS INTEGER) / \
             1000.0)) WHERE scope = ?1 AND idem_key = ?2 AND state = 'running' AND lease = ?3 \
             AND locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now') RETURNING lease"),
                concat!("UPDATE ", $($my)* "stateguard_idempotency SET lease = LAST_INSERT_ID(lease + 1), locked_until = \
            UTC_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND WHERE scope = ? AND idem_key = ? \
            AND state = 'running' AND lease = ? AND locked_until < UTC_TIMESTAMP(3)"),
            ],
            // COMPLETE
            [
                concat!("UPDATE ", $($pg)* "stateguard_idempotency SET state = 'done', response_status = $4, \
               response_body = $5, response_headers = $6, locked_until = NULL, completed_at = \
               statement_timestamp() WHERE scope = $1 AND idem_key = $2 AND state = 'running' AND \
               lease = $3 RETURNING ", $crate::__stateguard_store_tag!("66c62059d5e14d3b", [$($tag)*], "$7"), ""),
                concat!("UPDATE ", $($lite)* "stateguard_idempotency SET state = 'done', response_status = ?4, \
             response_body = ?5, response_headers = ?6, locked_until = NULL, completed_at = strftime('%Y-%m-%d \
             %H:%M:%f', 'now') WHERE scope = ?1 AND idem_key = ?2 AND state = 'running' AND \
             lease = ?3"),
                concat!("UPDATE ", $($my)* "stateguard_idempotency SET state = 'done', response_status = ?, \
            response_body = ?, response_headers = ?, locked_until = NULL, completed_at = UTC_TIMESTAMP(3) WHERE \
            scope = ? AND idem_key = ? AND state = 'running' AND lease = ?"),
            ],
            // RELEASE
            [
                concat!("DELETE FROM ", $($pg)* "stateguard_idempotency WHERE scope = $1 AND idem_key = $2 AND \
               state = 'running' AND lease = $3 RETURNING ", $crate::__stateguard_store_tag!("a2703f3d6b1b237d", [$($tag)*], "$4"), ""),
                concat!("DELETE FROM ", $($lite)* "stateguard_idempotency WHERE scope = ?1 AND idem_key = ?2 AND \
             state = 'running' AND lease = ?3"),
                concat!("DELETE FROM ", $($my)* "stateguard_idempotency WHERE scope = ? AND idem_key = ? AND \
            state = 'running' AND lease = ?"),
            ],
            // PRUNE
            [
                concat!("WITH __sg_p AS MATERIALIZED (SELECT scope, idem_key FROM ", $($pg)* "stateguard_idempotency \
               WHERE created_at < statement_timestamp() - CAST($1 AS BIGINT) * INTERVAL '1 millisecond' \
               AND (state = 'done' OR locked_until < statement_timestamp()) ORDER BY created_at \
               LIMIT $2 FOR UPDATE SKIP LOCKED) DELETE FROM ", $($pg)* "stateguard_idempotency WHERE (scope, \
               idem_key) IN (SELECT scope, idem_key FROM __sg_p) RETURNING ", $crate::__stateguard_store_tag!("a2895d520b4ff07f", [$($tag)*], "$3"), ""),
                concat!("DELETE FROM ", $($lite)* "stateguard_idempotency WHERE rowid IN (SELECT rowid FROM \
             ", $($lite)* "stateguard_idempotency WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', \
             printf('-%.3f seconds', CAST(?1 AS INTEGER) / 1000.0)) AND (state = 'done' OR \
             locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now')) ORDER BY created_at LIMIT ?2)"),
                concat!("DELETE FROM ", $($my)* "stateguard_idempotency WHERE created_at < UTC_TIMESTAMP(3) - INTERVAL \
            (? * 1000) MICROSECOND AND (state = 'done' OR locked_until < UTC_TIMESTAMP(3)) \
            ORDER BY created_at LIMIT ?"),
            ],
            ],
            idempotency_ddl: (
            [concat!("CREATE TABLE ", $($pg)* "stateguard_idempotency (
    scope TEXT COLLATE \"C\" NOT NULL,
    idem_key TEXT COLLATE \"C\" NOT NULL,
    fingerprint TEXT COLLATE \"C\" NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease BIGINT NOT NULL,
    locked_until TIMESTAMPTZ,
    response_status INTEGER,
    response_body BYTEA,
    response_headers TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    completed_at TIMESTAMPTZ,
    PRIMARY KEY (scope, idem_key)
)"), concat!("CREATE INDEX stateguard_idempotency_created_at ON ", $($pg)* "stateguard_idempotency (created_at)")],
            [concat!("CREATE TABLE ", $($lite)* "stateguard_idempotency (
    scope TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    lease INTEGER NOT NULL,
    locked_until TEXT,
    response_status INTEGER,
    response_body BLOB,
    response_headers TEXT,
    created_at TEXT NOT NULL,
    completed_at TEXT,
    PRIMARY KEY (scope, idem_key)
)"), concat!("CREATE INDEX ", $($lite)* "stateguard_idempotency_created_at ON stateguard_idempotency (created_at)")],
            [concat!("CREATE TABLE ", $($my)* "stateguard_idempotency (
    scope VARBINARY(1020) NOT NULL,
    idem_key VARBINARY(1020) NOT NULL,
    fingerprint VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state VARCHAR(16) NOT NULL,
    lease BIGINT NOT NULL,
    locked_until DATETIME(3) NULL,
    response_status INT NULL,
    response_body LONGBLOB NULL,
    response_headers LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    created_at DATETIME(3) NOT NULL,
    completed_at DATETIME(3) NULL,
    PRIMARY KEY (scope, idem_key),
    KEY stateguard_idempotency_created_at (created_at)
)")],
            ),
            inbox: [
            // RECEIVE
            [
                concat!("INSERT INTO ", $($pg)* "stateguard_inbox (consumer, message_id, received_at) VALUES ($1, $2, \
               statement_timestamp()) ON CONFLICT (consumer, message_id) DO NOTHING RETURNING \
               ", $crate::__stateguard_store_tag!("71961e9b53b7904c", [$($tag)*], "$3"), ""),
                concat!("INSERT INTO ", $($lite)* "stateguard_inbox (consumer, message_id, received_at) VALUES (?1, ?2, \
             strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (consumer, message_id) DO NOTHING"),
                concat!("INSERT IGNORE INTO ", $($my)* "stateguard_inbox (consumer, message_id, received_at) VALUES \
            (?, ?, UTC_TIMESTAMP(3))"),
            ],
            // PRUNE
            [
                concat!("WITH __sg_p AS MATERIALIZED (SELECT consumer, message_id FROM ", $($pg)* "stateguard_inbox \
               WHERE received_at < statement_timestamp() - CAST($1 AS BIGINT) * INTERVAL '1 \
               millisecond' ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED) DELETE FROM ", $($pg)* "stateguard_inbox \
               WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM __sg_p) RETURNING ", $crate::__stateguard_store_tag!("418f58a46da0fb44", [$($tag)*], "$3"), ""),
                concat!("DELETE FROM ", $($lite)* "stateguard_inbox WHERE rowid IN (SELECT rowid FROM ", $($lite)* "stateguard_inbox \
             WHERE received_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', \
             CAST(?1 AS INTEGER) / 1000.0)) ORDER BY received_at LIMIT ?2)"),
                concat!("DELETE FROM ", $($my)* "stateguard_inbox WHERE received_at < UTC_TIMESTAMP(3) - INTERVAL \
            (? * 1000) MICROSECOND ORDER BY received_at LIMIT ?"),
            ],
            ],
            inbox_ddl: (
            [concat!("CREATE TABLE ", $($pg)* "stateguard_inbox (
    consumer TEXT COLLATE \"C\" NOT NULL,
    message_id TEXT COLLATE \"C\" NOT NULL,
    received_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, message_id)
)"), concat!("CREATE INDEX stateguard_inbox_received_at ON ", $($pg)* "stateguard_inbox (received_at)")],
            [concat!("CREATE TABLE ", $($lite)* "stateguard_inbox (
    consumer TEXT NOT NULL,
    message_id TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (consumer, message_id)
)"), concat!("CREATE INDEX ", $($lite)* "stateguard_inbox_received_at ON stateguard_inbox (received_at)")],
            [concat!("CREATE TABLE ", $($my)* "stateguard_inbox (
    consumer VARBINARY(1020) NOT NULL,
    message_id VARBINARY(1020) NOT NULL,
    received_at DATETIME(3) NOT NULL,
    PRIMARY KEY (consumer, message_id),
    KEY stateguard_inbox_received_at (received_at)
)")],
            ),
            outbox: [
            // ENQUEUE
            [
                concat!("INSERT INTO ", $($pg)* "stateguard_outbox (message_id, order_key, topic, payload, \
               created_at, next_attempt_at) VALUES ($1, $2, $3, $4, statement_timestamp(), \
               statement_timestamp()) ON CONFLICT (message_id) DO NOTHING RETURNING \
               ", $crate::__stateguard_store_tag!("2a8183e698eb2586", [$($tag)*], "$5"), ""),
                concat!("INSERT INTO ", $($lite)* "stateguard_outbox (message_id, order_key, topic, payload, \
             created_at, next_attempt_at) VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%d %H:%M:%f', \
             'now'), strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (message_id) DO NOTHING"),
                concat!("INSERT IGNORE INTO ", $($my)* "stateguard_outbox (message_id, order_key, topic, payload, \
            created_at, next_attempt_at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))"),
            ],
            // CLAIM: up to $1 due messages, each the earliest unpublished
            // of its order key, leased for $2 milliseconds under claim $3.
            [
                concat!("WITH __sg_due AS MATERIALIZED (SELECT d.seq FROM ", $($pg)* "stateguard_outbox AS d WHERE \
               d.published_at IS NULL AND d.dead_at IS NULL AND d.next_attempt_at <= \
               statement_timestamp() AND (d.locked_until IS NULL OR d.locked_until < \
               statement_timestamp()) AND NOT EXISTS (SELECT 1 FROM ", $($pg)* "stateguard_outbox AS e WHERE \
               e.order_key = d.order_key AND e.seq < d.seq AND e.published_at IS NULL) ORDER BY \
               d.seq LIMIT $1 FOR UPDATE OF d SKIP LOCKED) UPDATE ", $($pg)* "stateguard_outbox AS o SET \
               claim = $3, lease = o.lease + 1, attempts = o.attempts + 1, locked_until = \
               statement_timestamp() + CAST($2 AS BIGINT) * INTERVAL '1 millisecond' FROM \
               __sg_due WHERE o.seq = __sg_due.seq AND o.published_at IS NULL AND \
               (o.locked_until IS NULL OR o.locked_until < statement_timestamp()) RETURNING ",
               $crate::__stateguard_store_tag!("0c99d2d54564e824", [$($tag)*], "$4"), ", o.seq, o.lease, \
               o.message_id, o.topic, o.payload, CAST(o.attempts AS BIGINT)"),
                concat!("UPDATE ", $($lite)* "stateguard_outbox SET claim = ?3, lease = lease + 1, attempts = \
             attempts + 1, locked_until = strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f \
             seconds', CAST(?2 AS INTEGER) / 1000.0)) WHERE seq IN (SELECT d.seq FROM ", $($lite)* "stateguard_outbox \
             AS d WHERE d.published_at IS NULL AND d.dead_at IS NULL AND d.next_attempt_at <= \
             strftime('%Y-%m-%d %H:%M:%f', 'now') AND (d.locked_until IS NULL OR \
             d.locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now')) AND NOT EXISTS (SELECT 1 \
             FROM ", $($lite)* "stateguard_outbox AS e WHERE e.order_key = d.order_key AND e.seq < d.seq AND \
             e.published_at IS NULL) ORDER BY d.seq LIMIT ?1) RETURNING seq, lease, message_id, \
             topic, payload, attempts"),
                concat!("UPDATE ", $($my)* "stateguard_outbox AS o JOIN (SELECT d.seq FROM ", $($my)* "stateguard_outbox AS d \
            WHERE d.published_at IS NULL AND d.dead_at IS NULL AND d.next_attempt_at <= \
            UTC_TIMESTAMP(3) AND (d.locked_until IS NULL OR d.locked_until < UTC_TIMESTAMP(3)) \
            AND NOT EXISTS (SELECT 1 FROM ", $($my)* "stateguard_outbox AS e WHERE e.order_key = d.order_key \
            AND e.seq < d.seq AND e.published_at IS NULL) ORDER BY d.seq LIMIT ?) AS __sg_due ON \
            o.seq = __sg_due.seq SET o.claim = ?, o.lease = o.lease + 1, o.attempts = \
            o.attempts + 1, o.locked_until = UTC_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND \
            WHERE o.published_at IS NULL AND (o.locked_until IS NULL OR o.locked_until < \
            UTC_TIMESTAMP(3))"),
            ],
            // TAKEN: the messages claim $1 holds (MySQL, whose UPDATE
            // returns no rows).
            [
                concat!("SELECT ", $crate::__stateguard_store_tag!("062f1c2d9786e69a", [$($tag)*], "$2"), ", \
               seq, lease, message_id, topic, payload, CAST(attempts AS BIGINT) FROM ", $($pg)* "stateguard_outbox \
               WHERE claim = $1 AND published_at IS NULL ORDER BY seq"),
                concat!("SELECT seq, lease, message_id, topic, payload, attempts FROM ", $($lite)* "stateguard_outbox \
             WHERE claim = ?1 AND published_at IS NULL ORDER BY seq"),
                concat!("SELECT seq, lease, CAST(message_id AS CHAR), CAST(topic AS CHAR), payload, \
            CAST(attempts AS SIGNED) FROM ", $($my)* "stateguard_outbox WHERE claim = ? AND published_at IS \
            NULL ORDER BY seq"),
            ],
            // PUBLISHED: the messages of claim $1 whose seqs the JSON
            // array $2 lists, published: one statement for a pass's
            // batch, fenced by the claim, which a takeover replaces.
            [
                concat!("UPDATE ", $($pg)* "stateguard_outbox SET published_at = statement_timestamp(), \
               locked_until = NULL WHERE claim = $1 AND seq IN (SELECT CAST(value AS BIGINT) FROM \
               json_array_elements_text(CAST($2 AS JSON))) AND published_at IS NULL RETURNING ",
               $crate::__stateguard_store_tag!("64bcdce62df31e41", [$($tag)*], "$3"), ""),
                concat!("UPDATE ", $($lite)* "stateguard_outbox SET published_at = strftime('%Y-%m-%d %H:%M:%f', \
             'now'), locked_until = NULL WHERE claim = ?1 AND seq IN (SELECT value FROM \
             json_each(?2)) AND published_at IS NULL"),
                concat!("UPDATE ", $($my)* "stateguard_outbox SET published_at = UTC_TIMESTAMP(3), locked_until = \
            NULL WHERE claim = ? AND seq IN (SELECT j.seq FROM JSON_TABLE(?, '$[*]' COLUMNS (seq \
            BIGINT PATH '$')) AS j) AND published_at IS NULL"),
            ],
            // FAILED: message $1, still under lease $2, failed with $3:
            // due again in $4 milliseconds, or given up after $5 attempts.
            [
                concat!("UPDATE ", $($pg)* "stateguard_outbox SET last_error = $3, locked_until = NULL, \
               next_attempt_at = statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 \
               millisecond', dead_at = CASE WHEN attempts >= $5 THEN statement_timestamp() END \
               WHERE seq = $1 AND lease = $2 AND published_at IS NULL RETURNING ",
               $crate::__stateguard_store_tag!("acdbab41d6447ce0", [$($tag)*], "$6"), ""),
                concat!("UPDATE ", $($lite)* "stateguard_outbox SET last_error = ?3, locked_until = NULL, \
             next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', \
             CAST(?4 AS INTEGER) / 1000.0)), dead_at = CASE WHEN attempts >= ?5 THEN \
             strftime('%Y-%m-%d %H:%M:%f', 'now') END WHERE seq = ?1 AND lease = ?2 AND \
             published_at IS NULL"),
                concat!("UPDATE ", $($my)* "stateguard_outbox SET last_error = ?, locked_until = NULL, \
            next_attempt_at = UTC_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND, dead_at = \
            CASE WHEN attempts >= ? THEN UTC_TIMESTAMP(3) END WHERE seq = ? AND lease = ? AND \
            published_at IS NULL"),
            ],
            // DEAD: up to $1 given-up messages, oldest first.
            [
                concat!("SELECT ", $crate::__stateguard_store_tag!("d0db3b2b2ee45f60", [$($tag)*], "$2"), ", \
               message_id, topic, CAST(attempts AS BIGINT), last_error FROM ", $($pg)* "stateguard_outbox \
               WHERE dead_at IS NOT NULL ORDER BY seq LIMIT $1"),
                concat!("SELECT message_id, topic, attempts, last_error FROM ", $($lite)* "stateguard_outbox WHERE \
             dead_at IS NOT NULL ORDER BY seq LIMIT ?1"),
                concat!("SELECT CAST(message_id AS CHAR), CAST(topic AS CHAR), CAST(attempts AS SIGNED), \
            last_error FROM ", $($my)* "stateguard_outbox WHERE dead_at IS NOT NULL ORDER BY seq LIMIT ?"),
            ],
            // REQUEUE: the given-up message $1, due again with no attempts.
            [
                concat!("UPDATE ", $($pg)* "stateguard_outbox SET dead_at = NULL, attempts = 0, last_error = \
               NULL, next_attempt_at = statement_timestamp() WHERE message_id = $1 AND dead_at \
               IS NOT NULL RETURNING ", $crate::__stateguard_store_tag!("6d3836f02e80c314", [$($tag)*], "$2"), ""),
                concat!("UPDATE ", $($lite)* "stateguard_outbox SET dead_at = NULL, attempts = 0, last_error = \
             NULL, next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE message_id = ?1 \
             AND dead_at IS NOT NULL"),
                concat!("UPDATE ", $($my)* "stateguard_outbox SET dead_at = NULL, attempts = 0, last_error = \
            NULL, next_attempt_at = UTC_TIMESTAMP(3) WHERE message_id = ? AND dead_at IS NOT NULL"),
            ],
            // PRUNE: up to $2 messages published more than $1 milliseconds
            // ago, oldest first.
            [
                concat!("WITH __sg_p AS MATERIALIZED (SELECT seq FROM ", $($pg)* "stateguard_outbox WHERE \
               published_at < statement_timestamp() - CAST($1 AS BIGINT) * INTERVAL '1 millisecond' \
               ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED) DELETE FROM ", $($pg)* "stateguard_outbox WHERE seq IN \
               (SELECT seq FROM __sg_p) RETURNING ",
               $crate::__stateguard_store_tag!("578370e1809a9880", [$($tag)*], "$3"), ""),
                concat!("DELETE FROM ", $($lite)* "stateguard_outbox WHERE seq IN (SELECT seq FROM ", $($lite)* "stateguard_outbox \
             WHERE published_at < strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', \
             CAST(?1 AS INTEGER) / 1000.0)) ORDER BY seq LIMIT ?2)"),
                concat!("DELETE FROM ", $($my)* "stateguard_outbox WHERE published_at < UTC_TIMESTAMP(3) - INTERVAL \
            (? * 1000) MICROSECOND ORDER BY seq LIMIT ?"),
            ],
            // STATUS: message $1's state (published, dead or waiting),
            // attempts and last error.
            [
                concat!("SELECT ", $crate::__stateguard_store_tag!("0b7e2a33ddf49d24", [$($tag)*], "$2"), ", \
               CASE WHEN published_at IS NOT NULL THEN 'published' WHEN dead_at IS NOT NULL THEN \
               'dead' ELSE 'waiting' END, CAST(attempts AS BIGINT), last_error FROM ", $($pg)* "stateguard_outbox \
               WHERE message_id = $1"),
                concat!("SELECT CASE WHEN published_at IS NOT NULL THEN 'published' WHEN dead_at IS NOT \
             NULL THEN 'dead' ELSE 'waiting' END, attempts, last_error FROM ", $($lite)* "stateguard_outbox \
             WHERE message_id = ?1"),
                concat!("SELECT CASE WHEN published_at IS NOT NULL THEN 'published' WHEN dead_at IS NOT \
            NULL THEN 'dead' ELSE 'waiting' END, CAST(attempts AS SIGNED), last_error FROM ", $($my)* "stateguard_outbox \
            WHERE message_id = ?"),
            ],
            ],
            outbox_ddl: (
            [concat!("CREATE TABLE ", $($pg)* "stateguard_outbox (
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
)"), concat!("CREATE INDEX stateguard_outbox_order ON ", $($pg)* "stateguard_outbox (order_key, seq)"),
            concat!("CREATE INDEX stateguard_outbox_due ON ", $($pg)* "stateguard_outbox (next_attempt_at) \
WHERE published_at IS NULL AND dead_at IS NULL")],
            [concat!("CREATE TABLE ", $($lite)* "stateguard_outbox (
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
)"), concat!("CREATE INDEX ", $($lite)* "stateguard_outbox_order ON stateguard_outbox (order_key, seq)"),
            concat!("CREATE INDEX ", $($lite)* "stateguard_outbox_due ON stateguard_outbox (next_attempt_at) \
WHERE published_at IS NULL AND dead_at IS NULL")],
            [concat!("CREATE TABLE ", $($my)* "stateguard_outbox (
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
    KEY stateguard_outbox_order (order_key, seq),
    KEY stateguard_outbox_due (published_at, dead_at, next_attempt_at),
    KEY stateguard_outbox_claim (claim)
)")],
            ),
        }
    };
}
