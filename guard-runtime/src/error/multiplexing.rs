//! [`Multiplexing`]: what `stateguard::pooler::check` saw that
//! shows a pool's connections are multiplexed onto shared server sessions.

use core::fmt;

/// A PostgreSQL server session, as the pooler check names it: the
/// backend's process id and the time its server started (which tells two
/// servers' equal process ids apart).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerSession {
    /// `pg_backend_pid()`.
    pub pid: i32,
    /// `pg_postmaster_start_time()`, as PostgreSQL writes it.
    pub server_started: String,
}

impl fmt::Display for ServerSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backend {}", self.pid)
    }
}

/// What shows that client connections do not each own a server session.
/// Neither can happen on a direct connection or under session pooling,
/// where a client connection is one server session for its whole life.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Multiplexing {
    /// One client connection ran its statements on one server session,
    /// then on another.
    Moved {
        /// The session it ran on first.
        before: ServerSession,
        /// The session it ran on later.
        after: ServerSession,
    },
    /// Two client connections, both open, ran on the same server session.
    Shared {
        /// The session both ran on.
        backend: ServerSession,
    },
    /// The pooler refused a transaction block: it hands out a server
    /// session per statement (PgBouncer's `pool_mode = statement`).
    NoTransactions {
        /// What the pooler answered to `BEGIN`.
        refusal: String,
    },
}

impl fmt::Display for Multiplexing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Multiplexing::Moved { before, after } => {
                write!(f, "one client connection ran on {before}, then on {after}")
            }
            Multiplexing::Shared { backend } => {
                write!(f, "two open client connections both ran on {backend}")
            }
            Multiplexing::NoTransactions { refusal } => {
                write!(f, "the pooler refused a transaction block: {refusal}")
            }
        }
    }
}
