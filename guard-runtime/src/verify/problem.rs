//! What `verify` reports: [`SchemaProblem`], its [`SchemaProblemKind`],
//! and the identity by which each defect is reported once.

use core::fmt;

/// Which way the schema does not fit the machine: what a program matches
/// on to act on a [`SchemaProblem`] (refuse to start, leave the
/// enforcement DDL out, add a label to an enum type, …) without reading
/// its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaProblemKind {
    /// A table the machine uses does not exist: its own, its history
    /// table, or the outbox table a transition emits to. No column.
    MissingTable,
    /// A column the machine writes (the status, a key column, the
    /// version, a `since` stamp, a retry's columns, a `set` column) is
    /// missing from the table.
    MissingColumn,
    /// A column's type cannot hold what the machine writes in it: the
    /// status text (or an enum), the version an integer, a `since` stamp
    /// a timestamp. Never on SQLite, which stores any value anywhere.
    WrongType,
    /// No primary key or unique index makes the key unique, so one move
    /// could change several rows. The column is the key as the machine
    /// declares it (`key = "…"`).
    KeyNotUnique,
    /// The version column is nullable.
    VersionNullable,
    /// A state string is longer than the status column holds: widen the
    /// column. [`SchemaProblem::state`] names the state string.
    StateTooLong,
    /// A state string is not one of the values of the status column's
    /// enum type (PostgreSQL) or `ENUM` (MySQL/MariaDB): add the label.
    /// [`SchemaProblem::state`] names the state string.
    StateNotALabel,
    /// The enforcement DDL ([`ddl`](crate::ddl)) is not installed on the
    /// table.
    EnforcementMissing,
    /// The enforcement DDL installed was generated from another version
    /// of the enum: generate it again and install it.
    EnforcementStale,
    /// No CHECK constraint (on SQLite, no trigger of the enforcement DDL)
    /// lists every state string.
    StatesUnchecked,
    /// A statement of the machine does not prepare against the schema: a
    /// column that a guard or a `set` expression reads is missing, a
    /// history or outbox table has other columns than the generated ones,
    /// … The column is the one the database names as missing, and the
    /// table the one that lacks it: the table the database names, else
    /// the one the first failing statement is written for. Where the
    /// database names no column that one of the machine's tables lacks,
    /// there is no column, the table is the machine's, and the problem's
    /// words give the database's message. Either way they name the first
    /// statement that fails and count the others.
    DoesNotPrepare,
}

impl SchemaProblemKind {
    /// Whether the problem is with the enforcement DDL (missing, made
    /// from another version of the enum, or without the states' check)
    /// rather than with the tables the moves use.
    pub fn is_enforcement(self) -> bool {
        matches!(
            self,
            Self::EnforcementMissing | Self::EnforcementStale | Self::StatesUnchecked
        )
    }
}

/// One way the schema does not fit the machine: its
/// [kind](SchemaProblem::kind), the table and, where it concerns one, the
/// column (and the state string), and what is wrong, in words.
///
/// [`Machine::verify`](crate::meta::Machine::verify) reports each defect
/// once; what makes two problems the same defect is said there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    kind: SchemaProblemKind,
    table: String,
    column: Option<String>,
    state: Option<String>,
    /// What tells apart two problems of one kind on one table where no
    /// column does: the database's message, for a statement that does
    /// not prepare.
    detail: Option<String>,
    problem: String,
}

impl SchemaProblem {
    pub(super) fn new(
        kind: SchemaProblemKind,
        table: &str,
        column: Option<&str>,
        problem: impl Into<String>,
    ) -> Self {
        SchemaProblem {
            kind,
            table: table.to_owned(),
            column: column.map(str::to_owned),
            state: None,
            detail: None,
            problem: problem.into(),
        }
    }

    /// The problem, about the state string `state`.
    pub(super) fn of_state(mut self, state: &str) -> Self {
        self.state = Some(state.to_owned());
        self
    }

    /// The problem, told apart from others of its kind by `detail`.
    pub(super) fn detailed(mut self, detail: String) -> Self {
        self.detail = Some(detail);
        self
    }

    /// The problem, in the words `problem`.
    pub(super) fn worded(mut self, problem: String) -> Self {
        self.problem = problem;
        self
    }

    /// Which way the schema does not fit: what to match on.
    pub fn kind(&self) -> SchemaProblemKind {
        self.kind
    }

    /// Whether the problem is with the enforcement DDL rather than with
    /// the tables the moves use ([`SchemaProblemKind::is_enforcement`]):
    /// a service that does without enforcement can leave these out.
    pub fn is_enforcement(&self) -> bool {
        self.kind.is_enforcement()
    }

    /// The table, as the machine names it.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The column the problem concerns, where there is one: the missing
    /// or ill-typed column, the key as declared for
    /// [`KeyNotUnique`](SchemaProblemKind::KeyNotUnique), the version,
    /// the status column for a state that does not fit and for the
    /// enforcement DDL, the column the database names for a statement
    /// that does not prepare. `None` for a missing table, and for a
    /// statement whose failure names no column of the machine's tables.
    pub fn column(&self) -> Option<&str> {
        self.column.as_deref()
    }

    /// The state string, for a state that does not fit the status column
    /// ([`StateTooLong`](SchemaProblemKind::StateTooLong),
    /// [`StateNotALabel`](SchemaProblemKind::StateNotALabel)).
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }

    /// What is wrong, in words, for a person: the words may change, match
    /// on [`kind`](SchemaProblem::kind) instead.
    pub fn problem(&self) -> &str {
        &self.problem
    }

    /// What makes two problems the same defect.
    fn identity(&self) -> ProblemId<'_> {
        (
            self.kind,
            &self.table,
            self.column.as_deref(),
            self.state.as_deref(),
            self.detail.as_deref(),
        )
    }

    /// Whether `self` and `other` are the same defect (as
    /// [`Machine::verify`](crate::meta::Machine::verify) documents).
    pub(super) fn same_defect(&self, other: &SchemaProblem) -> bool {
        self.identity() == other.identity()
    }
}

type ProblemId<'a> = (
    SchemaProblemKind,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

/// `problems`, each defect once: the first of each, in order.
pub(super) fn once(problems: Vec<SchemaProblem>) -> Vec<SchemaProblem> {
    let mut out: Vec<SchemaProblem> = Vec::with_capacity(problems.len());
    for problem in problems {
        if !out.iter().any(|p| p.same_defect(&problem)) {
            out.push(problem);
        }
    }
    out
}

impl fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some(column) => write!(f, "{}.{}: {}", self.table, column, self.problem),
            None => write!(f, "{}: {}", self.table, self.problem),
        }
    }
}
