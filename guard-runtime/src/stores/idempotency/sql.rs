//! The store's statements, one per dialect, each with the plan that
//! binds it.

use crate::dialect::{Sql, Statement};
use crate::transition::bind::Field;

/// The key's row: fingerprint, state, lease, response status and body,
/// and whether the lease has run out.
pub(super) const READ: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "SELECT 'stateguard ea6b00b4791e7fae'::text, fingerprint, state, lease, CAST(response_status AS BIGINT), \
               response_body, \
               CAST(CASE WHEN locked_until < statement_timestamp() THEN 1 ELSE 0 END AS BIGINT) \
               FROM stateguard_idempotency WHERE scope = $1 AND idem_key = $2",
        &[Field::Scope, Field::Key],
    ),
    sqlite: Statement::new(
        "SELECT fingerprint, state, lease, response_status, response_body, \
             CASE WHEN locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 1 ELSE 0 END \
             FROM stateguard_idempotency WHERE scope = ?1 AND idem_key = ?2",
        &[Field::Scope, Field::Key],
    ),
    mysql: Statement::new(
        "SELECT fingerprint, state, lease, CAST(response_status AS SIGNED), response_body, \
            CAST(CASE WHEN locked_until < UTC_TIMESTAMP(3) THEN 1 ELSE 0 END AS SIGNED) \
            FROM stateguard_idempotency WHERE scope = ? AND idem_key = ?",
        &[Field::Scope, Field::Key],
    ),
};

/// A new key's row, running under lease 1 for `$4` milliseconds, or the
/// existing row, with the columns of [`READ`] after a first column that
/// says which (1 for a new row). PostgreSQL answers both in this one
/// statement; SQLite returns a row only for a new key, and MySQL only says
/// how many rows it inserted (its `INSERT IGNORE` is safe here: every value
/// was checked to fit), so that [`READ`] follows for an existing key.
///
/// PostgreSQL commits a new key's row without waiting for its WAL flush
/// (`set_config('synchronous_commit', 'off', true)`, for this statement's
/// own transaction, in the last column): others see the row at once all
/// the same, and it only matters once the work commits, whose synchronous
/// commit flushes the WAL up to it, the claim included. A crash before
/// that may lose the claim, and then there is no work to lose either: a
/// retry starts afresh. One flush per request instead of two.
pub(super) const CLAIM: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "WITH __sg_new AS (INSERT INTO stateguard_idempotency (scope, idem_key, \
               fingerprint, state, lease, locked_until, created_at) VALUES ($1, $2, $3, \
               'running', 1, statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 \
               millisecond', statement_timestamp()) ON CONFLICT (scope, idem_key) DO NOTHING \
               RETURNING lease) SELECT 'stateguard 9bc5726a461318b4'::text, CAST(1 AS BIGINT), CAST(NULL AS TEXT), CAST(NULL AS \
               TEXT), lease, CAST(NULL AS BIGINT), CAST(NULL AS BYTEA), CAST(0 AS BIGINT), \
               set_config('synchronous_commit', 'off', true) FROM __sg_new UNION ALL SELECT \
               'stateguard 9bc5726a461318b4'::text, CAST(0 AS BIGINT), fingerprint, state, lease, CAST(response_status AS BIGINT), \
               response_body, CAST(CASE WHEN locked_until < statement_timestamp() THEN 1 ELSE 0 \
               END AS BIGINT), CAST(NULL AS TEXT) FROM stateguard_idempotency WHERE scope = $1 \
               AND idem_key = $2 AND NOT EXISTS (SELECT 1 FROM __sg_new)",
        &[Field::Scope, Field::Key, Field::Fingerprint, Field::Millis],
    ),
    sqlite: Statement::new(
        "INSERT INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
             locked_until, created_at) VALUES (?1, ?2, ?3, 'running', 1, strftime('%Y-%m-%d \
             %H:%M:%f', 'now', printf('+%.3f seconds', CAST(?4 AS INTEGER) / 1000.0)), \
             strftime('%Y-%m-%d %H:%M:%f', 'now')) ON CONFLICT (scope, idem_key) DO NOTHING \
             RETURNING 1",
        &[Field::Scope, Field::Key, Field::Fingerprint, Field::Millis],
    ),
    mysql: Statement::new(
        "INSERT IGNORE INTO stateguard_idempotency (scope, idem_key, fingerprint, state, lease, \
            locked_until, created_at) VALUES (?, ?, ?, 'running', 1, UTC_TIMESTAMP(3) + INTERVAL \
            (? * 1000) MICROSECOND, UTC_TIMESTAMP(3))",
        &[Field::Scope, Field::Key, Field::Fingerprint, Field::Millis],
    ),
};

/// A running key whose lease `$3` ran out, taken over under the next lease
/// for `$4` milliseconds; returns the new lease (MySQL: through
/// `LAST_INSERT_ID`, its placeholders in the order milliseconds, scope,
/// key, lease).
pub(super) const TAKE_OVER: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "UPDATE stateguard_idempotency SET lease = lease + 1, locked_until = \
               statement_timestamp() + CAST($4 AS BIGINT) * INTERVAL '1 millisecond' WHERE \
               scope = $1 AND idem_key = $2 AND state = 'running' AND lease = $3 AND \
               locked_until < statement_timestamp() RETURNING 'stateguard ab3297261f68674d'::text, lease",
        &[Field::Scope, Field::Key, Field::Lease, Field::Millis],
    ),
    sqlite: Statement::new(
        "UPDATE stateguard_idempotency SET lease = lease + 1, locked_until = \
             strftime('%Y-%m-%d %H:%M:%f', 'now', printf('+%.3f seconds', CAST(?4 AS INTEGER) / \
             1000.0)) WHERE scope = ?1 AND idem_key = ?2 AND state = 'running' AND lease = ?3 \
             AND locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now') RETURNING lease",
        &[Field::Scope, Field::Key, Field::Lease, Field::Millis],
    ),
    mysql: Statement::new(
        "UPDATE stateguard_idempotency SET lease = LAST_INSERT_ID(lease + 1), locked_until = \
            UTC_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND WHERE scope = ? AND idem_key = ? \
            AND state = 'running' AND lease = ? AND locked_until < UTC_TIMESTAMP(3)",
        &[Field::Millis, Field::Scope, Field::Key, Field::Lease],
    ),
};

/// The response `$4`, `$5` of the running key held under lease `$3`
/// (MySQL: status, body, scope, key, lease).
pub(super) const COMPLETE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "UPDATE stateguard_idempotency SET state = 'done', response_status = $4, \
               response_body = $5, locked_until = NULL, completed_at = statement_timestamp() \
               WHERE scope = $1 AND idem_key = $2 AND state = 'running' AND lease = $3 \
               RETURNING 'stateguard a5a96a879df33d18'::text",
        &[
            Field::Scope,
            Field::Key,
            Field::Lease,
            Field::Status,
            Field::Body,
        ],
    ),
    sqlite: Statement::new(
        "UPDATE stateguard_idempotency SET state = 'done', response_status = ?4, \
             response_body = ?5, locked_until = NULL, completed_at = strftime('%Y-%m-%d \
             %H:%M:%f', 'now') WHERE scope = ?1 AND idem_key = ?2 AND state = 'running' AND \
             lease = ?3",
        &[
            Field::Scope,
            Field::Key,
            Field::Lease,
            Field::Status,
            Field::Body,
        ],
    ),
    mysql: Statement::new(
        "UPDATE stateguard_idempotency SET state = 'done', response_status = ?, \
            response_body = ?, locked_until = NULL, completed_at = UTC_TIMESTAMP(3) WHERE \
            scope = ? AND idem_key = ? AND state = 'running' AND lease = ?",
        &[
            Field::Status,
            Field::Body,
            Field::Scope,
            Field::Key,
            Field::Lease,
        ],
    ),
};

/// The running key held under lease `$3`, removed.
pub(super) const RELEASE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE scope = $1 AND idem_key = $2 AND \
               state = 'running' AND lease = $3 RETURNING 'stateguard f6ab0159f41130b5'::text",
        &[Field::Scope, Field::Key, Field::Lease],
    ),
    sqlite: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE scope = ?1 AND idem_key = ?2 AND \
             state = 'running' AND lease = ?3",
        &[Field::Scope, Field::Key, Field::Lease],
    ),
    mysql: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE scope = ? AND idem_key = ? AND \
            state = 'running' AND lease = ?",
        &[Field::Scope, Field::Key, Field::Lease],
    ),
};

/// Up to `$2` keys created more than `$1` milliseconds ago that no lease
/// holds, oldest first, removed.
pub(super) const PRUNE: Sql<Statement<Field>> = Sql {
    postgres: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE (scope, idem_key) IN (SELECT scope, \
               idem_key FROM stateguard_idempotency WHERE created_at < statement_timestamp() - \
               CAST($1 AS BIGINT) * INTERVAL '1 millisecond' AND (state = 'done' OR \
               locked_until < statement_timestamp()) ORDER BY created_at LIMIT $2 FOR UPDATE \
               SKIP LOCKED) RETURNING 'stateguard 09c1355c593479fc'::text",
        &[Field::Millis, Field::Limit],
    ),
    sqlite: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE rowid IN (SELECT rowid FROM \
             stateguard_idempotency WHERE created_at < strftime('%Y-%m-%d %H:%M:%f', 'now', \
             printf('-%.3f seconds', CAST(?1 AS INTEGER) / 1000.0)) AND (state = 'done' OR \
             locked_until < strftime('%Y-%m-%d %H:%M:%f', 'now')) ORDER BY created_at LIMIT ?2)",
        &[Field::Millis, Field::Limit],
    ),
    mysql: Statement::new(
        "DELETE FROM stateguard_idempotency WHERE created_at < UTC_TIMESTAMP(3) - INTERVAL \
            (? * 1000) MICROSECOND AND (state = 'done' OR locked_until < UTC_TIMESTAMP(3)) \
            ORDER BY created_at LIMIT ?",
        &[Field::Millis, Field::Limit],
    ),
};

#[cfg(test)]
mod plans {
    use super::*;

    #[test]
    fn every_statement_has_a_plan_entry_per_placeholder() {
        crate::transition::bind::assert_plans_fit("READ", &READ);
        crate::transition::bind::assert_plans_fit("CLAIM", &CLAIM);
        crate::transition::bind::assert_plans_fit("TAKE_OVER", &TAKE_OVER);
        crate::transition::bind::assert_plans_fit("COMPLETE", &COMPLETE);
        crate::transition::bind::assert_plans_fit("RELEASE", &RELEASE);
        crate::transition::bind::assert_plans_fit("PRUNE", &PRUNE);
    }
}
