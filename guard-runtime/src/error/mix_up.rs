//! [`StatementMixUp`]: PostgreSQL answered one statement with the rows of
//! another.

use core::fmt;

/// PostgreSQL ran another statement in this one's place: a row came back
/// without the tag the statement returns in every row
/// ([`Statement::tag`](crate::meta::Statement::tag)), or one of the
/// library's statements failed because it ran with this call's values,
/// which end with another statement's tag, and wrote nothing.
///
/// sqlx prepares a named statement in one round trip and runs it in the
/// next. A connection pooler that hands the server session to another
/// client between the two, or lets two clients' statement names meet on
/// one session (PgBouncer in transaction or statement mode before 1.21,
/// or with `max_prepared_statements = 0`), makes the server run *another*
/// statement with this call's values. The library does not believe such
/// rows: it reports this instead of a win, a loss or a missing row that
/// the database did not confirm.
///
/// On a pool that `stateguard::pooler::check` found multiplexed (and
/// on a transaction begun on one), any server error of such a statement
/// is a mix-up too, with the server's error in
/// [`server_code`](StatementMixUp::server_code) and
/// [`server_message`](StatementMixUp::server_message): the statement never
/// confirmed that it was the one that ran, and the error may be another
/// client's statement's, run with this call's values, after it wrote.
///
/// The outcome is unknown ([`ErrorKind::OutcomeUnknown`](crate::ErrorKind::OutcomeUnknown)):
/// the statement that ran may have been another client's write. Apply the
/// transition again to learn the row's state, and fix the deployment: see
/// `stateguard::pooler`, whose check refuses such a pool before its first
/// move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementMixUp {
    statement: &'static str,
    expected: &'static str,
    found: Option<String>,
    /// The server's error, `(code, message)`, when the statement failed
    /// on a multiplexed pool.
    refusal: Option<(Option<String>, String)>,
}

impl StatementMixUp {
    pub(crate) fn new(
        statement: &'static str,
        expected: &'static str,
        found: Option<String>,
    ) -> Self {
        StatementMixUp {
            statement,
            expected,
            found,
            refusal: None,
        }
    }

    /// The statement tagged `expected` failed with the server's error
    /// `code` and `message` on a pool found multiplexed, before any row
    /// confirmed which statement ran.
    pub(crate) fn refused(
        statement: &'static str,
        expected: &'static str,
        code: Option<String>,
        message: String,
    ) -> Self {
        StatementMixUp {
            refusal: Some((code, message)),
            ..StatementMixUp::new(statement, expected, None)
        }
    }

    /// The text of the statement that was sent.
    pub fn statement(&self) -> &'static str {
        self.statement
    }

    /// The tag the statement's rows carry.
    pub fn expected(&self) -> &'static str {
        self.expected
    }

    /// The tag of the statement that ran instead, where the server says:
    /// a row's first column, or the statement that failed because it ran
    /// with this call's values (`stateguard …`); or, from a row, a value
    /// of a statement that is not the library's. `None` when the row held
    /// no text in the tag's place, or when no row came back from a read
    /// of one row, which returns a row whether or not it finds one.
    pub fn found(&self) -> Option<&str> {
        self.found.as_deref()
    }

    /// The SQLSTATE of the server's error, when the statement failed on a
    /// pool found multiplexed (`42P01`, `22P03`, `42P05`, …; see
    /// `stateguard::pooler`, "What a multiplexed pool can show").
    pub fn server_code(&self) -> Option<&str> {
        self.refusal.as_ref().and_then(|(code, _)| code.as_deref())
    }

    /// The server's error message, when the statement failed on a pool
    /// found multiplexed. It may speak of another client's statement:
    /// of a table this call never touches, or of values it never sent.
    pub fn server_message(&self) -> Option<&str> {
        self.refusal.as_ref().map(|(_, message)| message.as_str())
    }

    /// The mix-up `error` carries, if it is one.
    pub(crate) fn of(error: &sqlx::Error) -> Option<&StatementMixUp> {
        match error {
            sqlx::Error::Decode(source) => source.downcast_ref(),
            _ => None,
        }
    }
}

impl From<StatementMixUp> for sqlx::Error {
    fn from(mix_up: StatementMixUp) -> Self {
        sqlx::Error::Decode(Box::new(mix_up))
    }
}

impl fmt::Display for StatementMixUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found = match (&self.found, &self.refusal) {
            (_, Some((code, message))) => format!(
                "the server answered {} {message:?} before any row showed which statement \
                 ran, on a pool that stateguard::pooler::check found multiplexed, where it \
                 may be another client's statement's",
                code.as_deref().unwrap_or("an error without a code:")
            ),
            (Some(found), _) if found.starts_with("stateguard ") => {
                format!("another statement ran, tagged {found:?}")
            }
            (Some(_), _) => {
                "a row carried a value of a statement that is not stateguard's".to_owned()
            }
            (None, None) => {
                "a row carried no tag, or no row came back where one always does".to_owned()
            }
        };
        let (ran, mixing) = match self.refusal {
            Some(_) => ("may have run", "may be mixing"),
            None => ("ran", "is mixing"),
        };
        write!(
            f,
            "PostgreSQL {ran} another statement in place of the one sent ({found}; the \
             statement sent is tagged {:?}): a connection pooler or proxy {mixing} \
             prepared statements between clients, as PgBouncer in transaction or statement mode \
             does without max_prepared_statements; the outcome is unknown, apply again to learn \
             the row's state, and use session pooling, a direct connection, or PgBouncer 1.21+ \
             with max_prepared_statements above 0 (see stateguard::pooler)",
            self.expected
        )
    }
}

impl std::error::Error for StatementMixUp {}
