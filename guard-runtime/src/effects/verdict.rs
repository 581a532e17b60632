//! What an effect on an in-flight row decided, and the values its
//! follow-up binds.

use core::any::Any;
use core::fmt;
use core::marker::PhantomData;
use std::sync::Arc;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::dialect::sealed::Driver;
use crate::error::{Error, Misuse};
use crate::machine::{InFlightDef, TransitionDef};
use crate::transition::note::{Note, NoteSlot};
use crate::transition::{Binds, Transition};

/// How an effect on an in-flight row of machine `S` ended.
///
/// The effect returns one of:
/// - [`Verdict::done()`]: it happened; the state's `done` transition ends
///   the row.
/// - [`Verdict::failed()`]: it will never happen; the state's `failed`
///   transition ends the row.
/// - The follow-up's constructor, converted: a `done` or `failed`
///   transition that binds values per call
///   (`#[transition(confirm -> Sent, set(bank_ref = bind(String)))]`)
///   takes them from the verdict, `PayoutStatus::confirm(receipt.id).into()`,
///   and one that writes a note takes it the same way,
///   `PayoutStatus::fail().noted(Note::because("account closed")).into()`.
/// - [`Verdict::RetryLater`], or a [`Retry`] with a wait or a reason of
///   its own.
///
/// `Verdict::done()` compiles only for a machine whose in-flight states'
/// `done` transitions bind no values, and `Verdict::failed()` only for one
/// whose `failed` transitions bind none: a verdict cannot choose a
/// follow-up without the values it writes, which would fail only after
/// the effect ran, and again on every recovery. The crate documentation of `stateguard` (*Per-call values*)
/// shows a follow-up with values end to end.
pub enum Verdict<S> {
    /// It may not have happened and may be tried again (a timeout, a 503):
    /// leave the row in flight; recovery retries it with the same effect
    /// key once the lease runs out or, where the state declares
    /// `retry(…)`, once its backoff has passed. The same as
    /// `Verdict::Retry(Retry::later())`.
    RetryLater,
    /// [`RetryLater`](Verdict::RetryLater), with a reason or a time of its
    /// own: `Retry::after(wait).because("bank answered 503").into()`.
    Retry(Retry),
    /// End the row with a follow-up: [`Verdict::done()`],
    /// [`Verdict::failed()`], or the state's `done` or `failed` transition
    /// made with `.into()` from its constructor, with the values it binds
    /// and the note it writes.
    FollowUp(FollowUp<S>),
}

impl<S: StateMachine> Verdict<S> {
    /// It happened: end the row with its state's `done` transition.
    ///
    /// Only for a machine whose in-flight states' `done` transitions bind
    /// no values; where one does, return its constructor with them
    /// (`PayoutStatus::confirm(bank_ref).into()`), and this is a compile
    /// error ([`PlainDone`](crate::PlainDone)).
    pub fn done() -> Verdict<S>
    where
        S: PlainDone,
    {
        Verdict::FollowUp(FollowUp::plain(Plain::Done))
    }

    /// It will never happen (the far side refused for good): end the row
    /// with its state's `failed` transition.
    ///
    /// Only for a machine whose in-flight states' `failed` transitions
    /// bind no values; where one does, return its constructor with them
    /// (`PayoutStatus::decline(reason).into()`), and this is a compile
    /// error ([`PlainFailed`](crate::PlainFailed)).
    pub fn failed() -> Verdict<S>
    where
        S: PlainFailed,
    {
        Verdict::FollowUp(FollowUp::plain(Plain::Failed))
    }
}

impl<S> Clone for Verdict<S> {
    fn clone(&self) -> Self {
        match self {
            Verdict::RetryLater => Verdict::RetryLater,
            Verdict::Retry(retry) => Verdict::Retry(retry.clone()),
            Verdict::FollowUp(follow_up) => Verdict::FollowUp(follow_up.clone()),
        }
    }
}

impl<S> fmt::Debug for Verdict<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::RetryLater => f.write_str("RetryLater"),
            Verdict::Retry(retry) => f.debug_tuple("Retry").field(retry).finish(),
            Verdict::FollowUp(follow_up) => f.debug_tuple("FollowUp").field(follow_up).finish(),
        }
    }
}

/// Implemented by the derive for a machine with in-flight states whose
/// `done` transitions bind no values: [`Verdict::done()`] can end its
/// rows.
#[diagnostic::on_unimplemented(
    message = "`Verdict::done()` cannot end a row of `{Self}`: it has no in-flight state, or the \
               `done` transition of one binds values",
    label = "this verdict would carry none of the values its follow-up writes",
    note = "return that transition's constructor with its values instead, converted, as in \
            `{Self}::confirm(bank_ref).into()`"
)]
pub trait PlainDone: StateMachine {}

/// Implemented by the derive for a machine with in-flight states whose
/// `failed` transitions bind no values: [`Verdict::failed()`] can end its
/// rows.
#[diagnostic::on_unimplemented(
    message = "`Verdict::failed()` cannot end a row of `{Self}`: it has no in-flight state, or \
               the `failed` transition of one binds values",
    label = "this verdict would carry none of the values its follow-up writes",
    note = "return that transition's constructor with its values instead, converted, as in \
            `{Self}::decline(reason).into()`"
)]
pub trait PlainFailed: StateMachine {}

/// When, and why, an effect asks to be tried again: see
/// [`Verdict::Retry`].
///
/// An in-flight state that declares
/// `retry(max = 8, backoff = "2s..1h", attempts = "…", next_attempt = "…")`
/// counts each attempt, waits out a growing backoff (or the time given
/// here) before the next, and ends the row in its `failed` follow-up
/// instead of starting attempt `max + 1`; the reason goes into that
/// follow-up's history row. A state without `retry(…)` is retried once
/// its lease runs out, so it refuses a time of its own
/// ([`Misuse::RetryNotDeclared`](crate::Misuse::RetryNotDeclared)).
///
/// ```
/// use std::time::Duration;
/// use stateguard::{Retry, Verdict};
///
/// /// The provider answered 429 with `Retry-After: 120`.
/// fn rate_limited<S>() -> Verdict<S> {
///     Retry::after(Duration::from_secs(120)).because("rate limited").into()
/// }
/// # let verdict: Verdict<()> = rate_limited();
/// # assert!(matches!(verdict, Verdict::Retry(r) if r.reason() == Some("rate limited")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retry {
    after: Option<core::time::Duration>,
    reason: Option<String>,
}

impl Retry {
    /// After the state's backoff (or its lease, without `retry(…)`).
    pub fn later() -> Retry {
        Retry::default()
    }

    /// After `wait`, by the database's clock (for example a provider's
    /// `Retry-After` in seconds), instead of the state's backoff.
    pub fn after(wait: core::time::Duration) -> Retry {
        Retry {
            after: Some(wait),
            reason: None,
        }
    }

    /// At `when` (for example a provider's `Retry-After` date), turned into
    /// a wait by this machine's clock; a time already past retries as soon
    /// as recovery runs.
    pub fn at(when: std::time::SystemTime) -> Retry {
        let wait = when
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        Retry::after(wait)
    }

    /// The same request, with the reason the effect gives: logged, and
    /// recorded in the history row when the attempts run out.
    pub fn because(self, reason: impl Into<String>) -> Retry {
        Retry {
            reason: Some(reason.into()),
            ..self
        }
    }

    /// The wait asked for, if not the state's backoff.
    pub fn wait(&self) -> Option<core::time::Duration> {
        self.after
    }

    /// The reason given, if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
}

impl<S> From<Retry> for Verdict<S> {
    fn from(retry: Retry) -> Verdict<S> {
        Verdict::Retry(retry)
    }
}

/// The follow-up a [`Verdict`] ends the row with, with the values it
/// binds and the note it writes.
///
/// Made by [`Verdict::done()`] and [`Verdict::failed()`], or from a
/// transition constructor: `Verdict::from(PayoutStatus::confirm(bank_ref))`.
pub struct FollowUp<S> {
    which: Named,
    values: Arc<AnyValues>,
    note: Note,
    machine: PhantomData<fn() -> S>,
}

/// The follow-up a verdict names.
#[derive(Debug, Clone, Copy)]
enum Named {
    /// The row's state's own `done` or `failed`, binding nothing.
    Plain(Plain),
    /// The transition of this name, which must be the state's `done` or
    /// `failed`.
    Named(&'static str),
}

/// [`Verdict::done()`] or [`Verdict::failed()`].
#[derive(Debug, Clone, Copy)]
enum Plain {
    Done,
    Failed,
}

impl<S> FollowUp<S> {
    /// The transition the follow-up names: `None` for
    /// [`Verdict::done()`] and [`Verdict::failed()`], which take the
    /// in-flight state's own.
    pub fn transition(&self) -> Option<&'static str> {
        match self.which {
            Named::Named(name) => Some(name),
            Named::Plain(_) => None,
        }
    }

    /// The note for the follow-up's history row ([`Note::NONE`] unless the
    /// verdict was made from a noted transition).
    pub fn note(&self) -> &Note {
        &self.note
    }

    /// The state's own `done` or `failed`, binding nothing.
    fn plain(plain: Plain) -> FollowUp<S> {
        FollowUp {
            which: Named::Plain(plain),
            values: Arc::new(()),
            note: Note::NONE,
            machine: PhantomData,
        }
    }
}

impl<S> Clone for FollowUp<S> {
    fn clone(&self) -> Self {
        FollowUp {
            which: self.which,
            values: Arc::clone(&self.values),
            note: self.note.clone(),
            machine: PhantomData,
        }
    }
}

impl<S> fmt::Debug for FollowUp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FollowUp")
            .field("machine", &core::any::type_name::<S>())
            .field("transition", &self.which)
            .field("note", &self.note)
            .finish_non_exhaustive()
    }
}

impl<S: StateMachine, P: Send + Sync + 'static, N: NoteSlot> From<Transition<S, P, N>>
    for Verdict<S>
{
    fn from(transition: Transition<S, P, N>) -> Verdict<S> {
        Verdict::FollowUp(FollowUp {
            which: Named::Named(transition.name()),
            values: Arc::new(transition.params),
            note: transition.note.into_note_slot(),
            machine: PhantomData,
        })
    }
}

/// Binds the values a [`Verdict`] carries into the follow-up statement of
/// a machine's in-flight states, on backend `DB`.
///
/// Implemented by the derive, for every backend that can bind the
/// follow-ups' `bind(Type)` values; [`Won::finish`](crate::Won::finish)
/// and [`recover`](crate::recover) need it. A machine whose follow-ups bind
/// nothing implements it for every backend.
#[diagnostic::on_unimplemented(
    message = "the follow-up values of `{Self}` cannot be bound on `{DB}`",
    note = "every `bind(Type)` type of an in-flight state's `done`/`failed` transition must \
            implement `sqlx::Encode` and `sqlx::Type` for the database"
)]
pub trait FollowUpValues<DB: Backend>: StateMachine {
    /// How the follow-up at position `transition` among the machine's
    /// transitions binds its values: by default, as one that binds none
    /// (what the derive leaves for a machine none of whose follow-ups
    /// binds values).
    #[doc(hidden)]
    fn follow_up_values(transition: usize) -> Binder<DB> {
        let _ = transition;
        construct::binder::<DB, ()>()
    }
}

/// Values of any type, as a verdict carries them.
type AnyValues = dyn Any + Send + Sync;

/// Binds value `n` of `values` into `args`: `None` when they are not of
/// the declared type.
type BindFn<DB> =
    fn(&AnyValues, usize, &mut <DB as Driver>::Args) -> Option<Result<(), sqlx::Error>>;

/// How one follow-up binds its values: made by the derive for the types
/// the transition declares.
#[doc(hidden)]
pub struct Binder<DB: Backend> {
    expects: &'static str,
    fits: fn(&AnyValues) -> bool,
    bind: BindFn<DB>,
}

/// The follow-up a verdict runs, with the values to bind: `None` for
/// [`Verdict::RetryLater`].
pub(crate) struct Chosen<S: 'static> {
    pub(crate) transition: &'static TransitionDef<S>,
    pub(crate) sql: &'static crate::dialect::Sql,
    pub(crate) failed: bool,
    values: Arc<AnyValues>,
    /// For the follow-up's history row.
    pub(crate) note: Note,
}

impl<S: StateMachine> Chosen<S> {
    /// Named follow-up of `state` the verdict names, or why it names none.
    pub(crate) fn of(
        verdict: Verdict<S>,
        in_flight: &'static InFlightDef<S>,
        state: S,
    ) -> Result<Option<Chosen<S>>, Error> {
        let no_failed = || {
            Error::Misuse(Misuse::NoFailedTransition {
                machine: S::MACHINE.name(),
                state: state.as_str(),
            })
        };
        let done = (in_flight.done, in_flight.done_sql(), false);
        let failed = || match (in_flight.failed, in_flight.failed_sql()) {
            (Some(transition), Some(sql)) => Ok((transition, sql, true)),
            _ => Err(no_failed()),
        };
        let follow_up = match verdict {
            Verdict::RetryLater | Verdict::Retry(_) => return Ok(None),
            Verdict::FollowUp(follow_up) => follow_up,
        };
        let chosen = match follow_up.which {
            Named::Plain(Plain::Done) => done,
            Named::Plain(Plain::Failed) => failed()?,
            Named::Named(name) if name == in_flight.done.name() => done,
            Named::Named(name) if in_flight.failed.is_some_and(|f| f.name() == name) => failed()?,
            Named::Named(name) => {
                return Err(Error::Misuse(Misuse::NotAFollowUp {
                    machine: S::MACHINE.name(),
                    state: state.as_str(),
                    verdict: name,
                }));
            }
        };
        if follow_up.note != Note::NONE && S::MACHINE.history_table().is_none() {
            return Err(Error::Misuse(Misuse::NoHistory {
                machine: S::MACHINE.name(),
            }));
        }
        // Before the follow-up is sent, as `apply` checks its own.
        follow_up
            .note
            .checked(S::MACHINE.table(), chosen.0.name())?;
        let (transition, sql, failed) = chosen;
        Ok(Some(Chosen {
            transition,
            sql,
            failed,
            values: follow_up.values,
            note: follow_up.note,
        }))
    }

    /// The state's `failed` follow-up, run because the effect's attempts
    /// ran out, with `note` for its history row where there is one. The
    /// derive refuses `retry(…)` on a state whose `failed` binds values.
    pub(crate) fn give_up(
        in_flight: &'static InFlightDef<S>,
        state: S,
        note: Note,
    ) -> Result<Chosen<S>, Error> {
        let (Some(transition), Some(sql)) = (in_flight.failed, in_flight.failed_sql()) else {
            return Err(Error::Misuse(Misuse::NoFailedTransition {
                machine: S::MACHINE.name(),
                state: state.as_str(),
            }));
        };
        Ok(Chosen {
            transition,
            sql,
            failed: true,
            values: Arc::new(()),
            note: match S::MACHINE.history_table() {
                Some(_) => note,
                None => Note::NONE,
            },
        })
    }

    /// The verdict's values, as the follow-up's statements bind them:
    /// refused unless they are of the types the follow-up declares.
    pub(crate) fn values<DB: Backend>(&self) -> Result<ChosenValues<'_, DB>, Error>
    where
        S: FollowUpValues<DB>,
    {
        // The follow-up's position among the machine's transitions, which
        // the metadata holds as one static array.
        let position = S::MACHINE
            .transitions()
            .iter()
            .position(|t| core::ptr::eq(t, self.transition))
            .unwrap_or(usize::MAX);
        let binder = S::follow_up_values(position);
        match (binder.fits)(&*self.values) {
            true => Ok(ChosenValues {
                values: &*self.values,
                binder,
            }),
            false => Err(Error::Misuse(Misuse::FollowUpValues {
                machine: S::MACHINE.name(),
                transition: self.transition.name(),
                expects: binder.expects,
            })),
        }
    }
}

#[doc(hidden)]
pub mod construct {
    use super::{Binder, Binds};

    /// The binder a follow-up with values of type `P` gets.
    pub fn binder<DB: Binds<P>, P: 'static>() -> Binder<DB> {
        Binder {
            expects: core::any::type_name::<P>(),
            fits: |values| values.is::<P>(),
            bind: |values, n, args| {
                Some(DB::bind_range(values.downcast_ref::<P>()?, args, n..n + 1))
            },
        }
    }
}

/// A verdict's values of the declared types, [`Bind::Value`](crate::meta::Bind::Value).
pub(crate) struct ChosenValues<'a, DB: Backend> {
    values: &'a AnyValues,
    binder: Binder<DB>,
}

impl<DB: Backend> crate::transition::bind::Parts<DB> for ChosenValues<'_, DB> {
    fn bind_part(
        &self,
        n: usize,
        args: &mut <DB as Driver>::Args,
    ) -> Result<(), crate::machine::key::BindError> {
        let bound = (self.binder.bind)(self.values, n, args).unwrap_or_else(|| {
            Err(sqlx::Error::Protocol(format!(
                "follow-up values are not of type {}",
                self.binder.expects
            )))
        });
        bound.map_err(crate::machine::key::BindError::Encode)
    }
}

#[cfg(test)]
mod tests {
    use super::Retry;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_time_becomes_a_wait_and_a_past_one_none() {
        let past = SystemTime::now() - Duration::from_secs(5);
        assert_eq!(Retry::at(past).wait(), Some(Duration::ZERO));
        let wait = Retry::at(SystemTime::now() + Duration::from_secs(60))
            .wait()
            .unwrap();
        assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        let retry = Retry::later().because("503");
        assert_eq!((retry.wait(), retry.reason()), (None, Some("503")));
    }
}
