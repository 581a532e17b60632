//! Where the stores' tables live: found through the connection's search
//! path ([`Stores::search_path`]), or in a schema named at compile time
//! ([`stores!`](crate::stores!)).
//!
//! Each statement is one literal per dialect, written by the derive
//! crate's `__store_statements!` through the same bind plans as a
//! machine's statements (`guard-macros/src/stores/`), with the schema's
//! quoted name before each table name: the schema is never formatted into
//! a statement at run time, and a name that is not a plain identifier
//! fails to compile.

use crate::ddl::Dialect as DdlDialect;
use crate::dialect::{Sql, Statement};
use crate::transition::bind::Field;

/// The stores of one schema, as `__store_statements!` writes them: each
/// statement rendered per dialect with its plan, and each table's DDL.
#[doc(hidden)]
#[allow(missing_docs)]
pub struct StoreParts {
    pub schema: Option<&'static str>,
    pub idempotency_table: &'static str,
    /// `read`, `claim`, `take_over`, `complete`, `release`, `prune`,
    /// `running`.
    pub idempotency: [Sql<Statement<Field>>; 7],
    pub idempotency_ddl: TableDdl,
    pub inbox_table: &'static str,
    /// `receive`, `prune`.
    pub inbox: [Sql<Statement<Field>>; 2],
    pub inbox_ddl: TableDdl,
    pub outbox_table: &'static str,
    /// `enqueue`, `claim`, `taken`, `published`, `failed`, `dead`,
    /// `requeue`, `prune`, `status`, `backlog`.
    pub outbox: [Sql<Statement<Field>>; 10],
    pub outbox_ddl: OutboxDdl,
    /// PostgreSQL: the trigger that wakes listening workers.
    pub outbox_wake_up: &'static str,
}

/// The idempotency store's statements and table in one schema.
pub(crate) struct IdempotencySql {
    pub(crate) table: &'static str,
    /// The key's row: fingerprint, state, lease, response status and body,
    /// and whether the lease has run out.
    pub(crate) read: Sql<Statement<Field>>,
    /// A new key's row, running under lease 1 for `$4` milliseconds, or
    /// the existing row, with the columns of `read` after a first column
    /// that says which (1 for a new row). PostgreSQL answers both in this
    /// one statement; SQLite returns a row only for a new key, and MySQL
    /// only says how many rows it inserted (its `INSERT IGNORE` is safe
    /// here: every value was checked to fit), so that `read` follows for
    /// an existing key.
    ///
    /// PostgreSQL commits a new key's row without waiting for its WAL
    /// flush (`set_config('synchronous_commit', 'off', true)`, for this
    /// statement's own transaction, in the last column): others see the
    /// row at once all the same, and it only matters once the work
    /// commits, whose synchronous commit flushes the WAL up to it, the
    /// claim included. A crash before that may lose the claim, and then
    /// there is no work to lose either: a retry starts afresh. One flush
    /// per request instead of two.
    pub(crate) claim: Sql<Statement<Field>>,
    /// A running key whose lease `$3` ran out, taken over under the next
    /// lease for `$4` milliseconds; returns the new lease (MySQL: through
    /// `LAST_INSERT_ID`, its placeholders in the order milliseconds,
    /// scope, key, lease).
    pub(crate) take_over: Sql<Statement<Field>>,
    /// The response `$4`, `$5` of the running key held under lease `$3`
    /// (MySQL: status, body, scope, key, lease).
    pub(crate) complete: Sql<Statement<Field>>,
    /// The running key held under lease `$3`, removed.
    pub(crate) release: Sql<Statement<Field>>,
    /// Up to `$2` keys created more than `$1` milliseconds ago that no
    /// lease holds, oldest first, removed.
    pub(crate) prune: Sql<Statement<Field>>,
    /// How many keys are running, up to `$1` rows.
    pub(crate) running: Sql<Statement<Field>>,
    pub(crate) ddl: TableDdl,
}

/// The inbox's statements and table in one schema.
pub(crate) struct InboxSql {
    pub(crate) table: &'static str,
    /// The message's row; nothing if it is there. MySQL's `INSERT IGNORE`
    /// is safe here: both values were checked to fit.
    pub(crate) receive: Sql<Statement<Field>>,
    /// Up to `$2` messages received more than `$1` milliseconds ago,
    /// oldest first, removed.
    pub(crate) prune: Sql<Statement<Field>>,
    pub(crate) ddl: TableDdl,
}

/// The outbox's statements and table in one schema.
pub(crate) struct OutboxSql {
    pub(crate) table: &'static str,
    /// The message's row, due at once; nothing if a message with its id is
    /// there. MySQL's `INSERT IGNORE` is safe here: the id, the order key
    /// and the topic were checked to fit, and the payload is a `LONGBLOB`.
    pub(crate) enqueue: Sql<Statement<Field>>,
    /// Up to `$1` due messages, each the earliest unpublished of its order
    /// key, leased for `$2` milliseconds under the relay's claim `$3`:
    /// their seq, new lease, id, topic, payload and attempts so far, this
    /// one counted (MySQL returns nothing; `taken` reads them).
    pub(crate) claim: Sql<Statement<Field>>,
    /// The unpublished messages of claim `$1`, as `claim` returns them.
    pub(crate) taken: Sql<Statement<Field>>,
    /// The messages of claim `$1` whose seqs the JSON array `$2` lists,
    /// published (those still under the claim).
    pub(crate) published: Sql<Statement<Field>>,
    /// Message `$1`, still under lease `$2`, failed with `$3`: due again
    /// in `$4` milliseconds, or given up once it has had `$5` attempts.
    pub(crate) failed: Sql<Statement<Field>>,
    /// Up to `$1` given-up messages, oldest first: id, topic, attempts,
    /// last error.
    pub(crate) dead: Sql<Statement<Field>>,
    /// The given-up message `$1`, due again with no attempts.
    pub(crate) requeue: Sql<Statement<Field>>,
    /// Up to `$2` messages published more than `$1` milliseconds ago,
    /// oldest first, removed.
    pub(crate) prune: Sql<Statement<Field>>,
    /// Message `$1`'s state (`published`, `dead` or `waiting`), attempts
    /// and last error.
    pub(crate) status: Sql<Statement<Field>>,
    /// How many messages wait to be published, up to `$1` rows.
    pub(crate) backlog: Sql<Statement<Field>>,
    pub(crate) ddl: OutboxDdl,
    /// PostgreSQL: the trigger that wakes listening workers.
    pub(crate) wake_up: &'static str,
}

/// The fixed-table stores, the idempotency keys' and the inbox's, with
/// their tables in one schema: [`Stores::search_path`] finds them through
/// the connection's search path, [`stores!`](crate::stores!) names a
/// schema.
///
/// ```
/// use stateguard::ddl::Dialect;
/// use stateguard::Stores;
///
/// static PAYMENTS: Stores = stateguard::stores!(schema = "payments");
///
/// assert_eq!(PAYMENTS.schema(), Some("payments"));
/// assert_eq!(PAYMENTS.idempotency().table(), "payments.stateguard_idempotency");
/// assert!(PAYMENTS.inbox().ddl(Dialect::Postgres)[0]
///     .starts_with(r#"CREATE TABLE "payments".stateguard_inbox ("#));
/// ```
pub struct Stores {
    schema: Option<&'static str>,
    pub(crate) idempotency: IdempotencySql,
    pub(crate) inbox: InboxSql,
    pub(crate) outbox: OutboxSql,
}

impl Stores {
    /// The stores' tables found through the connection's search path (on
    /// MySQL, in the connection's database; on SQLite, in `main`):
    /// `stateguard_idempotency` and `stateguard_inbox`, unqualified. What
    /// `idempotency::begin`, `inbox::receive` and the other free
    /// functions use.
    pub const fn search_path() -> &'static Stores {
        &DEFAULT
    }

    /// The schema the tables are in; `None` for [`Stores::search_path`].
    pub const fn schema(&self) -> Option<&'static str> {
        self.schema
    }

    /// The idempotency store in these tables.
    pub const fn idempotency(&'static self) -> Store {
        Store::new(&self.idempotency)
    }

    /// The inbox in these tables.
    pub const fn inbox(&'static self) -> Inbox {
        Inbox::new(&self.inbox)
    }

    /// The outbox in these tables: `stateguard_outbox`, the messages
    /// waiting to be published.
    pub const fn outbox(&'static self) -> Outbox {
        Outbox { sql: &self.outbox }
    }
}

/// The idempotency store in one schema's table:
/// [`Stores::idempotency`](crate::Stores::idempotency). The module's free
/// functions are those of [`Stores::search_path`](crate::Stores::search_path)'s,
/// found through the connection's search path.
#[derive(Debug, Clone, Copy)]
pub struct Store {
    pub(crate) sql: &'static IdempotencySql,
}

impl Store {
    pub(crate) const fn new(sql: &'static IdempotencySql) -> Self {
        Store { sql }
    }

    /// The table, as errors name it: `stateguard_idempotency`, or
    /// `payments.stateguard_idempotency` in the schema `payments`.
    pub const fn table(&self) -> &'static str {
        self.sql.table
    }

    /// The statements that create the store's table and its index in
    /// `dialect`, in this store's schema, without trailing `;`. Run them
    /// once, in a migration (the schema must exist).
    pub const fn ddl(&self, dialect: DdlDialect) -> &'static [&'static str] {
        pick(&self.sql.ddl, dialect)
    }
}

/// The inbox in one schema's table: [`Stores::inbox`](crate::Stores::inbox).
/// The module's free functions are those of
/// [`Stores::search_path`](crate::Stores::search_path)'s, found through
/// the connection's search path.
#[derive(Debug, Clone, Copy)]
pub struct Inbox {
    pub(crate) sql: &'static InboxSql,
}

impl Inbox {
    pub(crate) const fn new(sql: &'static InboxSql) -> Self {
        Inbox { sql }
    }

    /// The table, as errors name it: `stateguard_inbox`, or
    /// `payments.stateguard_inbox` in the schema `payments`.
    pub const fn table(&self) -> &'static str {
        self.sql.table
    }

    /// The statements that create the inbox table and its index in
    /// `dialect`, in this inbox's schema, without trailing `;`. Run them
    /// once, in a migration (the schema must exist).
    pub const fn ddl(&self, dialect: DdlDialect) -> &'static [&'static str] {
        pick(&self.sql.ddl, dialect)
    }
}

/// The outbox in one schema's table: [`Stores::outbox`]. The free
/// functions of `stateguard::outbox` are those of
/// [`Stores::search_path`]'s, found through the connection's search path.
#[derive(Debug, Clone, Copy)]
pub struct Outbox {
    pub(crate) sql: &'static OutboxSql,
}

impl Default for Outbox {
    /// The outbox in no schema: the table `stateguard_outbox`, as
    /// `outbox::ddl` creates it.
    fn default() -> Self {
        DEFAULT.outbox()
    }
}

impl Outbox {
    /// The table, as errors name it: `stateguard_outbox`, or
    /// `payments.stateguard_outbox` in the schema `payments`.
    pub const fn table(&self) -> &'static str {
        self.sql.table
    }

    /// The statements that create the outbox table and its indexes in
    /// `dialect`, in this outbox's schema, without trailing `;`. Run them
    /// once, in a migration (the schema must exist).
    pub const fn ddl(&self, dialect: DdlDialect) -> &'static [&'static str] {
        pick(&self.sql.ddl, dialect)
    }

    /// PostgreSQL: the trigger that notifies listening workers after every
    /// statement that inserts messages into this outbox; what
    /// `worker::WakeUps::outbox` collects.
    pub const fn wake_up(&self) -> &'static str {
        self.sql.wake_up
    }
}

/// One table's DDL per dialect: PostgreSQL's and SQLite's table and
/// index, MySQL's table with its index inside.
type TableDdl = ([&'static str; 2], [&'static str; 2], [&'static str; 1]);

/// The outbox table's DDL per dialect: with two indexes.
type OutboxDdl = ([&'static str; 3], [&'static str; 3], [&'static str; 1]);

/// The statements of `ddl` in `dialect`.
const fn pick<const P: usize, const L: usize>(
    ddl: &'static ([&'static str; P], [&'static str; L], [&'static str; 1]),
    dialect: DdlDialect,
) -> &'static [&'static str] {
    match dialect {
        DdlDialect::Postgres => &ddl.0,
        DdlDialect::Sqlite => &ddl.1,
        DdlDialect::MySql => &ddl.2,
    }
}

// The texts are long: a ticket or a store shows its table.
impl core::fmt::Debug for IdempotencySql {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IdempotencySql")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for InboxSql {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InboxSql")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for OutboxSql {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OutboxSql")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl core::fmt::Debug for Stores {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Stores")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

/// [`Stores::search_path`].
pub(crate) static DEFAULT: Stores = stateguard_macros::__store_statements!(crate);

/// The stores of `parts`.
#[doc(hidden)]
pub const fn stores(parts: StoreParts) -> Stores {
    let [read, claim, take_over, complete, release, prune, running] = parts.idempotency;
    let [receive, inbox_prune] = parts.inbox;
    let [
        enqueue,
        claim_due,
        taken,
        published,
        failed,
        dead,
        requeue,
        prune_published,
        status,
        backlog,
    ] = parts.outbox;
    Stores {
        schema: parts.schema,
        idempotency: IdempotencySql {
            table: parts.idempotency_table,
            read,
            claim,
            take_over,
            complete,
            release,
            prune,
            running,
            ddl: parts.idempotency_ddl,
        },
        inbox: InboxSql {
            table: parts.inbox_table,
            receive,
            prune: inbox_prune,
            ddl: parts.inbox_ddl,
        },
        outbox: OutboxSql {
            table: parts.outbox_table,
            enqueue,
            claim: claim_due,
            taken,
            published,
            failed,
            dead,
            requeue,
            prune: prune_published,
            status,
            backlog,
            ddl: parts.outbox_ddl,
            wake_up: parts.outbox_wake_up,
        },
    }
}

/// One store statement in each dialect, with its plan: what
/// `__store_statements!` writes for each.
#[doc(hidden)]
pub const fn store_statement(
    [postgres, sqlite, mysql]: [&'static str; 3],
    [pg_binds, lite_binds, my_binds]: [&'static [Field]; 3],
) -> Sql<Statement<Field>> {
    Sql {
        postgres: Statement::new(postgres, pg_binds),
        sqlite: Statement::new(sqlite, lite_binds),
        mysql: Statement::new(mysql, my_binds),
    }
}

/// The fixed-table stores with their tables in schema `$schema`
/// ([`Stores`]): on PostgreSQL the schema, on MySQL/MariaDB the database,
/// on SQLite an attached database. Every statement names its table
/// `"payments".stateguard_idempotency` (MySQL: `` `payments`.… ``), fixed
/// at compile time, so the tables are found wherever the connection's
/// search path points: what a transaction-mode pooler, which does not
/// keep a session's `SET search_path`, needs.
///
/// ```
/// # async fn run(pool: sqlx::PgPool) -> Result<(), stateguard::Error> {
/// use std::time::Duration;
/// use stateguard::idempotency::{Begun, Request};
/// use stateguard::Stores;
///
/// static PAYMENTS: Stores = stateguard::stores!(schema = "payments");
///
/// let request = Request::new("acme:POST /payouts", "key-1", "fingerprint")?;
/// match PAYMENTS.idempotency().begin(&pool, &request, Duration::from_secs(60)).await? {
///     Begun::New(ticket) => { /* do the work, then complete the ticket */ drop(ticket) }
///     _ => {}
/// }
/// # Ok(()) }
/// ```
///
/// A schema that is not 1 to 63 ASCII letters, digits and `_` (not
/// starting with a digit) fails to compile:
///
/// ```compile_fail
/// static BAD: stateguard::Stores = stateguard::stores!(schema = "pay\"ments");
/// ```
#[macro_export]
macro_rules! stores {
    (schema = $schema:literal $(,)?) => {
        $crate::__private::store_statements!($crate, $schema)
    };
}

#[cfg(test)]
mod tests;
