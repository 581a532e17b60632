//! What an effect on an in-flight row decided, and the values its
//! follow-up binds.

use core::any::{Any, TypeId};
use core::fmt;
use std::sync::Arc;

use crate::StateMachine;
use crate::dialect::Backend;
use crate::dialect::sealed::Driver;
use crate::error::Error;
use crate::machine::{InFlightDef, TransitionDef};
use crate::transition::note::{Note, NoteSlot};
use crate::transition::{Params, Transition};

/// How an effect on an in-flight row ended.
///
/// A follow-up that binds values per call
/// (`#[transition(confirm -> Sent, set(bank_ref = bind(String)))]`) takes
/// them from the verdict: return its constructor, converted,
/// `PayoutStatus::confirm(receipt.id).into()`, and the statement that ends
/// the row writes them. The crate documentation of `stateguard` (*Per-call values*) shows
/// one end to end.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// It happened: run the state's `done` transition.
    ///
    /// Only for a `done` transition that binds no values: one with
    /// `bind(Type)` values needs its constructor with them
    /// (`PayoutStatus::confirm(bank_ref).into()`), and a bare `Done` ends
    /// in [`Error::FollowUpValues`](crate::Error::FollowUpValues) after the
    /// effect ran, leaving the row in flight, where recovery fails the same
    /// way (the compiler does not catch it).
    Done,
    /// It will never happen (the far side refused for good): run the
    /// state's `failed` transition.
    ///
    /// Only for a `failed` transition that binds no values, as with
    /// [`Done`](Verdict::Done).
    Failed,
    /// It may not have happened and may be tried again (a timeout, a 503):
    /// leave the row in flight; recovery retries it with the same effect
    /// key once the lease runs out or, where the state declares
    /// `retry(…)`, once its backoff has passed. The same as
    /// `Verdict::Retry(Retry::later())`.
    RetryLater,
    /// [`RetryLater`](Verdict::RetryLater), with a reason or a time of its
    /// own: `Retry::after(wait).because("bank answered 503").into()`.
    Retry(Retry),
    /// End the row with this follow-up, the state's `done` or `failed`
    /// transition, and the values it binds: made with `.into()` from the
    /// transition's constructor, or from it [noted](crate::Transition::noted)
    /// (`PayoutStatus::fail().noted(Note::because("account closed")).into()`),
    /// for the history row of the follow-up.
    FollowUp(FollowUp),
}

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
/// ([`Error::RetryNotDeclared`]).
///
/// ```
/// use std::time::Duration;
/// use stateguard::{Retry, Verdict};
///
/// // The provider answered 429 with `Retry-After: 120`.
/// let verdict: Verdict = Retry::after(Duration::from_secs(120)).because("rate limited").into();
/// assert!(matches!(verdict, Verdict::Retry(_)));
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

impl From<Retry> for Verdict {
    fn from(retry: Retry) -> Verdict {
        Verdict::Retry(retry)
    }
}

/// A follow-up transition named by a [`Verdict`], with the values it binds.
///
/// Made from a transition constructor: `Verdict::from(PayoutStatus::confirm(bank_ref))`.
#[derive(Clone)]
pub struct FollowUp {
    machine: TypeId,
    machine_name: &'static str,
    transition: &'static str,
    values: Arc<Values>,
    note: Note,
}

impl FollowUp {
    /// The name of the transition.
    pub fn transition(&self) -> &'static str {
        self.transition
    }

    /// The note for the follow-up's history row ([`Note::NONE`] unless the
    /// verdict was made from a noted transition).
    pub fn note(&self) -> &Note {
        &self.note
    }
}

impl fmt::Debug for FollowUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FollowUp")
            .field("machine", &self.machine_name)
            .field("transition", &self.transition)
            .field("note", &self.note)
            .finish_non_exhaustive()
    }
}

impl FollowUp {
    /// The verdict that ends the row with `transition` of machine `S`,
    /// binding `values`, with `note` for its history row.
    fn verdict<S: StateMachine, P: Send + Sync + 'static>(
        transition: Transition<S>,
        values: P,
        note: Note,
    ) -> Verdict {
        Verdict::FollowUp(FollowUp {
            machine: TypeId::of::<S>(),
            machine_name: S::MACHINE.name(),
            transition: transition.name(),
            values: Arc::new(values),
            note,
        })
    }
}

impl<S: StateMachine, P: Send + Sync + 'static, N: NoteSlot> From<Transition<S, P, N>> for Verdict {
    fn from(transition: Transition<S, P, N>) -> Verdict {
        let plain = transition.transition();
        FollowUp::verdict(plain, transition.params, transition.note.into_note_slot())
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
    /// transitions binds its values.
    #[doc(hidden)]
    fn follow_up_values(transition: usize) -> Binder<DB>;
}

/// Values of any type, as a verdict carries them.
type Values = dyn Any + Send + Sync;

/// Binds value `n` of `values` into `args`: `None` when they are not of
/// the declared type.
type BindFn<DB> = fn(&Values, usize, &mut <DB as Driver>::Args) -> Option<Result<(), sqlx::Error>>;

/// How one follow-up binds its values: made by the derive for the types
/// the transition declares.
#[doc(hidden)]
pub struct Binder<DB: Backend> {
    expects: &'static str,
    fits: fn(&Values) -> bool,
    bind: BindFn<DB>,
}

/// The follow-up a verdict runs, with the values to bind: `None` for
/// [`Verdict::RetryLater`].
pub(crate) struct Chosen<S: 'static> {
    pub(crate) transition: &'static TransitionDef<S>,
    pub(crate) sql: &'static crate::dialect::Sql,
    pub(crate) failed: bool,
    values: Arc<Values>,
    /// For the follow-up's history row.
    pub(crate) note: Note,
}

impl<S: StateMachine> Chosen<S> {
    /// Which follow-up of `state` the verdict names, or why it names none.
    pub(crate) fn of(
        verdict: Verdict,
        in_flight: &'static InFlightDef<S>,
        state: S,
    ) -> Result<Option<Chosen<S>>, Error> {
        let no_failed = || Error::NoFailedTransition {
            machine: S::MACHINE.name(),
            state: state.as_str(),
        };
        let done = (in_flight.done, in_flight.done_sql(), false);
        let failed = || match (in_flight.failed, in_flight.failed_sql()) {
            (Some(transition), Some(sql)) => Ok((transition, sql, true)),
            _ => Err(no_failed()),
        };
        let ((transition, sql, is_failed), values, note): (_, Arc<Values>, _) = match verdict {
            Verdict::RetryLater | Verdict::Retry(_) => return Ok(None),
            Verdict::Done => (done, Arc::new(()), Note::NONE),
            Verdict::Failed => (failed()?, Arc::new(()), Note::NONE),
            Verdict::FollowUp(follow_up) => {
                let named = follow_up.machine == TypeId::of::<S>();
                let chosen = if named && follow_up.transition == in_flight.done.name() {
                    done
                } else if named
                    && in_flight
                        .failed
                        .is_some_and(|f| f.name() == follow_up.transition)
                {
                    failed()?
                } else {
                    return Err(Error::NotAFollowUp {
                        machine: S::MACHINE.name(),
                        state: state.as_str(),
                        verdict: follow_up.transition,
                    });
                };
                if follow_up.note != Note::NONE && S::MACHINE.history_table().is_none() {
                    return Err(Error::NoHistory {
                        machine: S::MACHINE.name(),
                    });
                }
                // Before the follow-up is sent, as `apply` checks its own.
                follow_up
                    .note
                    .checked(S::MACHINE.table(), chosen.0.name())?;
                (chosen, follow_up.values, follow_up.note)
            }
        };
        Ok(Some(Chosen {
            transition,
            sql,
            failed: is_failed,
            values,
            note,
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
            return Err(Error::NoFailedTransition {
                machine: S::MACHINE.name(),
                state: state.as_str(),
            });
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
            false => Err(Error::FollowUpValues {
                machine: S::MACHINE.name(),
                transition: self.transition.name(),
                expects: binder.expects,
            }),
        }
    }
}

#[doc(hidden)]
pub mod construct {
    use super::{Backend, Binder, Params};

    /// The binder a follow-up with values of type `P` gets.
    pub fn binder<DB: Backend, P: Params<DB> + 'static>() -> Binder<DB> {
        Binder {
            expects: core::any::type_name::<P>(),
            fits: |values| values.is::<P>(),
            bind: |values, n, args| Some(values.downcast_ref::<P>()?.bind_range(args, n..n + 1)),
        }
    }
}

/// A verdict's values of the declared types, [`Bind::Value`](crate::meta::Bind::Value).
pub(crate) struct ChosenValues<'a, DB: Backend> {
    values: &'a Values,
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
