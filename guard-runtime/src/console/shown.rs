//! A machine as the console shows it, whatever its type: the reads of
//! each page, behind one object-safe trait, and what they return.

use core::time::Duration;

use sqlx::Pool;

use crate::dialect::sealed::Driver;
use crate::dialect::{Backend, Bind, BoxFuture};
use crate::docs;
use crate::error::Error;
use crate::machine::key::{DecodeKey, KeyOf, ParseKey};
use crate::outcome::effect_key;
use crate::transition::Transition;
use crate::transition::available::GuardNow;
use crate::transition::note::Note;
use crate::transition::rows::PAGE_ROWS;
use crate::{Outcome, StateMachine};

/// How long each read of a page may take before the page shows its
/// error instead. A page's reads run at once: it answers within one.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(5);

/// A key the console can show and act on for machine `S` on `DB`: a
/// [`KeyOf`] the machine that is also read back from a row
/// ([`DecodeKey`]) and from its text in a URL ([`ParseKey`]). `i64`,
/// `String`, and tuples of such values for several key columns, are.
/// Implemented for every type that meets it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a console key of `{S}` on `{DB}`",
    note = "the console reads keys back from rows and from URLs: the key must be the machine's \
            key type, owned, with `FromStr` for each value (`i64`, `String`, a tuple of them)"
)]
pub trait ConsoleKey<S: StateMachine, DB: Backend>:
    KeyOf<S, DB> + DecodeKey<DB, S::KeyShape> + ParseKey<S::KeyShape> + 'static
{
}

impl<K, S, DB> ConsoleKey<S, DB> for K
where
    S: StateMachine,
    DB: Backend,
    K: KeyOf<S, DB> + DecodeKey<DB, S::KeyShape> + ParseKey<S::KeyShape> + 'static,
{
}

/// What a page could not show: the request's fault, a row that is not
/// there, or the database's answer.
pub(super) enum PageError {
    /// The request names no such thing, or a key that is not one: 400.
    BadRequest(String),
    /// No such machine, state or row: 404.
    NotFound(String),
    /// A press the console does not take from this request: 403.
    Forbidden(String),
    /// The console itself failed (no random token could be drawn): 500.
    Internal(String),
    /// The read failed: its error.
    Database(Error),
}

impl From<Error> for PageError {
    fn from(error: Error) -> Self {
        PageError::Database(error)
    }
}

/// The rows of one state.
pub(super) struct Count {
    pub(super) variant: &'static str,
    pub(super) db: &'static str,
    pub(super) rows: u64,
    pub(super) more: bool,
    /// In flight: the rows recovery may take over now.
    pub(super) due: Option<u64>,
    /// In flight with retries: the rows waiting for their next attempt.
    pub(super) waiting: Option<u64>,
    /// In flight with retries and a `failed` follow-up: the rows that
    /// ended there after their last attempt.
    pub(super) gave_up: Option<u64>,
}

/// A page of one state's rows.
pub(super) struct StatePage {
    pub(super) variant: &'static str,
    pub(super) db: &'static str,
    pub(super) rows: Vec<StateRow>,
    pub(super) more: bool,
    /// Whether the state counts attempts, and whether it keeps the last
    /// retry's reason: which columns the page has.
    pub(super) retrying: (bool, bool),
}

/// One row of a state's page.
pub(super) struct StateRow {
    pub(super) key: String,
    pub(super) age: Option<Duration>,
    pub(super) attempts: Option<i64>,
    pub(super) last_error: Option<String>,
}

/// One row, as its page shows it.
pub(super) struct RowPage {
    pub(super) key: String,
    pub(super) variant: &'static str,
    pub(super) db: &'static str,
    pub(super) occurrence: i64,
    /// Whether the machine counts occurrences: a press needs one.
    pub(super) versioned: bool,
    /// Whether the machine keeps a history: a press is noted there.
    pub(super) kept: bool,
    pub(super) effect_key: Option<String>,
    /// In a state that counts attempts: how many, of how many at most.
    pub(super) attempts: Option<(i64, u32)>,
    /// In such a state: how long until the next attempt, where one is set.
    pub(super) next_attempt_in: Option<Duration>,
    /// Where the state keeps it: the reason the last retry gave.
    pub(super) last_error: Option<String>,
    pub(super) choices: Vec<Button>,
    /// The history, oldest first, or why it could not be read; `None`
    /// without a history table.
    pub(super) history: Option<Result<Vec<Entry>, Error>>,
}

/// One transition the row's state allows.
pub(super) struct Button {
    pub(super) name: &'static str,
    pub(super) target: &'static str,
    /// Why the console cannot press it now, if it cannot.
    pub(super) blocked: Option<&'static str>,
}

/// One history row.
pub(super) struct Entry {
    pub(super) transition: &'static str,
    pub(super) from: &'static str,
    pub(super) to: &'static str,
    pub(super) occurrence: i64,
    pub(super) at: String,
    pub(super) actor: Option<String>,
    pub(super) reason: Option<String>,
    pub(super) details: Option<String>,
}

/// A button pressed on a row's page.
pub(super) struct Press {
    pub(super) transition: String,
    pub(super) occurrence: i64,
    pub(super) operator: String,
    pub(super) reason: Option<String>,
}

/// What a press did.
pub(super) enum Pressed {
    /// The row moved to this state.
    Moved(&'static str),
    /// The row moved on since the page: its state and occurrence now.
    Stale(&'static str, i64),
    /// The row already is in the target state.
    AlreadyThere(&'static str),
    /// The row's state does not allow the transition.
    Conflict(&'static str),
    /// The row does not meet the transition's guard.
    Refused(&'static str),
}

/// A machine as the console shows it.
pub(super) trait Shown<DB: Backend>: Send + Sync {
    /// The machine's name, which its URLs carry.
    fn name(&self) -> &'static str;

    /// Its table.
    fn table(&self) -> &'static str;

    /// Its diagram, as SVG.
    fn svg(&self) -> &str;

    /// The name of its state whose variant is written `name`, if any.
    fn variant(&self, name: &str) -> Option<&'static str>;

    /// The rows in each state, up to [`COUNT_CAP`](crate::COUNT_CAP).
    fn counts<'a>(&'a self, pool: &'a Pool<DB>) -> BoxFuture<'a, Result<Vec<Count>, Error>>;

    /// A page of the rows in the state stored as `state`, after the key
    /// whose text is `after`.
    fn rows<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        state: &'a str,
        after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<StatePage, PageError>>;

    /// The row whose key's text is `key`.
    fn row<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        key: &'a str,
    ) -> BoxFuture<'a, Result<RowPage, PageError>>;

    /// `press` on the row whose key's text is `key`.
    fn press<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        key: &'a str,
        press: Press,
    ) -> BoxFuture<'a, Result<Pressed, PageError>>;
}

/// Machine `S`, whose keys are `K`, as the console lists it.
pub(super) struct Listed<S, K> {
    svg: String,
    machine: core::marker::PhantomData<fn() -> (S, K)>,
}

impl<S: StateMachine, K> Listed<S, K> {
    pub(super) fn new() -> Self {
        Listed {
            svg: docs::svg::<S>(),
            machine: core::marker::PhantomData,
        }
    }

    /// The key whose text is `text`, or why there is none.
    fn key<DB: Backend>(text: &str) -> Result<K, PageError>
    where
        K: ConsoleKey<S, DB>,
    {
        K::parse_key(text).map_err(PageError::BadRequest)
    }

    /// The state stored as `db`.
    fn state(db: &str) -> Result<S, PageError> {
        S::MACHINE
            .states()
            .iter()
            .find(|state| state.db_str() == db)
            .map(|state| state.value())
            .ok_or_else(|| {
                PageError::NotFound(format!("{} has no state `{db}`", S::MACHINE.name()))
            })
    }

    /// Why a transition cannot be pressed from the console, if it cannot.
    fn blocked<DB: Backend>(
        transition: &'static crate::machine::TransitionDef<S>,
        guard: GuardNow,
    ) -> Option<&'static str> {
        let binds = <DB as Driver>::statement(transition.update_sql())
            .binds()
            .iter()
            .any(|bind| matches!(bind, Bind::Value(_)));
        if binds || guard == GuardNow::NeedsValues {
            return Some("it takes values the console cannot supply");
        }
        if guard == GuardNow::Fails {
            return Some("its guard does not pass");
        }
        if S::MACHINE.version().is_none() {
            return Some("the machine has no version column, so a stale page could not be told");
        }
        if S::MACHINE.history_table().is_none() {
            return Some("the machine keeps no history, so the operator could not be recorded");
        }
        None
    }
}

/// The variant name of `state`.
fn variant<S: StateMachine>(state: S) -> &'static str {
    S::MACHINE.state(state).map_or("", |s| s.variant())
}

impl<DB: Backend, S: StateMachine, K: ConsoleKey<S, DB>> Shown<DB> for Listed<S, K> {
    fn name(&self) -> &'static str {
        S::MACHINE.name()
    }

    fn table(&self) -> &'static str {
        S::MACHINE.table()
    }

    fn variant(&self, name: &str) -> Option<&'static str> {
        (S::MACHINE.states().iter())
            .map(|state| state.variant())
            .find(|variant| *variant == name)
    }

    fn svg(&self) -> &str {
        &self.svg
    }

    fn counts<'a>(&'a self, pool: &'a Pool<DB>) -> BoxFuture<'a, Result<Vec<Count>, Error>> {
        Box::pin(async move {
            let counts = S::MACHINE.counts(pool).within(PAGE_DEADLINE).await?;
            Ok(counts
                .into_iter()
                .map(|count| Count {
                    variant: variant(count.state),
                    db: count.state.as_str(),
                    rows: count.rows,
                    more: count.more,
                    due: count.due,
                    waiting: count.waiting,
                    gave_up: count.gave_up,
                })
                .collect())
        })
    }

    fn rows<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        state: &'a str,
        after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<StatePage, PageError>> {
        Box::pin(async move {
            let state = Self::state(state)?;
            let after = after.map(Self::key::<DB>).transpose()?;
            let page = S::MACHINE
                .rows(pool, state, after)
                .within(PAGE_DEADLINE)
                .await?;
            let retry = (S::MACHINE.state(state))
                .and_then(|s| s.in_flight())
                .and_then(|f| f.retry());
            Ok(StatePage {
                variant: variant(state),
                db: state.as_str(),
                rows: page
                    .rows
                    .into_iter()
                    .map(|row| StateRow {
                        key: row.key.key_text(),
                        age: row.age,
                        attempts: row.attempts,
                        last_error: row.last_error,
                    })
                    .collect(),
                more: page.more,
                retrying: (
                    retry.is_some(),
                    retry.is_some_and(|r| r.last_error_column().is_some()),
                ),
            })
        })
    }

    fn row<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        key: &'a str,
    ) -> BoxFuture<'a, Result<RowPage, PageError>> {
        Box::pin(async move {
            let parsed = Self::key::<DB>(key)?;
            let text = parsed.key_text();
            let read = S::MACHINE
                .available(pool, parsed.clone())
                .within(PAGE_DEADLINE);
            let history = async {
                match S::MACHINE.history_table() {
                    None => None,
                    Some(_) => Some(
                        S::MACHINE
                            .recent_history(pool, parsed, PAGE_ROWS as u32)
                            .within(PAGE_DEADLINE)
                            .await
                            .map(|rows| {
                                rows.into_iter()
                                    .map(|row| Entry {
                                        transition: row.transition.name(),
                                        from: variant(row.from),
                                        to: variant(row.to),
                                        occurrence: row.occurrence,
                                        at: row.at,
                                        actor: row.actor,
                                        reason: row.reason,
                                        details: row.details,
                                    })
                                    .collect()
                            }),
                    ),
                }
            };
            // Both reads at once: the page answers within one deadline.
            let (available, history) = tokio::join!(read, history);
            let available = available?.ok_or_else(|| {
                PageError::NotFound(format!("{} has no row `{text}`", S::MACHINE.table()))
            })?;
            let state = available.state();
            let in_flight = S::MACHINE.state(state).and_then(|s| s.in_flight());
            let most = in_flight.and_then(|f| f.retry()).map(|r| r.max_attempts());
            Ok(RowPage {
                effect_key: in_flight
                    .map(|_| effect_key::<S>(&text, state, available.occurrence())),
                attempts: available.attempts().zip(most),
                next_attempt_in: available.next_attempt_in(),
                last_error: available.last_error().map(str::to_owned),
                key: text,
                variant: variant(state),
                db: state.as_str(),
                occurrence: available.occurrence(),
                versioned: S::MACHINE.version().is_some(),
                kept: S::MACHINE.history_table().is_some(),
                choices: available
                    .choices()
                    .iter()
                    .map(|choice| Button {
                        name: choice.name(),
                        target: variant(choice.target()),
                        blocked: Self::blocked::<DB>(choice.transition(), choice.guard()),
                    })
                    .collect(),
                history,
            })
        })
    }

    fn press<'a>(
        &'a self,
        pool: &'a Pool<DB>,
        key: &'a str,
        press: Press,
    ) -> BoxFuture<'a, Result<Pressed, PageError>> {
        Box::pin(async move {
            let key = Self::key::<DB>(key)?;
            let text = key.key_text();
            let Some(def) = S::MACHINE.transition(&press.transition) else {
                return Err(PageError::BadRequest(format!(
                    "{} has no transition `{}`",
                    S::MACHINE.name(),
                    press.transition
                )));
            };
            // The same refusals the page shows, for a press made by hand;
            // a guard is the move's to tell.
            if let Some(why) = Self::blocked::<DB>(def, GuardNow::Unguarded) {
                return Err(PageError::BadRequest(format!(
                    "`{}` cannot be pressed: {why}",
                    def.name()
                )));
            }
            let mut note = Note::by(press.operator);
            if let Some(reason) = press.reason {
                note = note.because(reason);
            }
            let noted = Transition {
                expected: Some(press.occurrence),
                ..def.transition()
            }
            .with_note(note);
            let outcome = noted.apply(pool, key).within(PAGE_DEADLINE).await?;
            Ok(match outcome {
                Outcome::Applied(won) => Pressed::Moved(variant(won.state())),
                Outcome::Stale {
                    current,
                    occurrence,
                } => Pressed::Stale(variant(current), occurrence),
                Outcome::AlreadyInState(state) => Pressed::AlreadyThere(variant(state)),
                Outcome::Conflict { current } => Pressed::Conflict(variant(current)),
                Outcome::Refused { current } => Pressed::Refused(variant(current)),
                Outcome::NotFound => {
                    return Err(PageError::NotFound(format!(
                        "{} has no row `{text}`",
                        S::MACHINE.table()
                    )));
                }
            })
        })
    }
}
