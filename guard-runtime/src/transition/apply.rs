//! `apply`: the compare-and-set, its retries and the read that tells a
//! loser why.
//!
//! The body runs on a core that knows neither the machine nor the types
//! of the key and the values (`cas/`, [`CasPlan::run`]): it takes the
//! statements and names of one transition ([`CasPlan`]), the call's values
//! already erased for binding ([`CallParts`]), and returns what happened with
//! the status as the database wrote it ([`Raw`]).
//! [`Transition::apply_with`] is the thin generic wrapper that turns that
//! into an [`Outcome`], so that a binary carries one copy of the
//! compare-and-set per executor, not one per machine and values.

use crate::transition::note::Note;

use super::Transition;
use crate::StateMachine;
use crate::dialect::{Backend, BoxFuture};
use crate::error::Error;
use crate::executor::Runner;
use crate::machine::TransitionDef;
use crate::machine::key::RowKey;
use crate::outcome::{Outcome, Won, effect_key_prefix};
use crate::transition::bind::{self, Parts};
use crate::transition::row::Read;

pub(crate) use super::cas::{
    CallParts, CasPlan, Class, Left, Raw, key_arguments, outcome_label, status_of,
};

impl<S: StateMachine> Transition<S> {
    /// A row's effect key up to its occurrence on a win of this
    /// transition, from its key's text: [`effect_key_prefix`] with the
    /// transition's target, the same whichever row it moves. What a move
    /// binds for the message id of `emit(…)`, beside one key or each of a
    /// batch's.
    pub(crate) fn effect_prefix(self) -> impl Fn(&str) -> String + Sync {
        let target = self.target();
        move |key: &str| effect_key_prefix::<S>(key, target)
    }

    /// [`Transition::apply`], binding `values` (a call's values,
    /// [`bind::values`]) into the `set` assignments that take values per
    /// call, and `note` into the history row.
    pub(crate) async fn apply_with<E, K>(
        self,
        executor: &mut E,
        key: K,
        values: &(dyn Parts<E::Database> + Sync),
        note: &Note,
    ) -> Result<Outcome<S, K, E::Commit>, Error>
    where
        E: Runner,
        K: RowKey<E::Database, S::KeyShape>,
    {
        let def = self.def;
        let classify = |text: &str| classify(def, text);
        let raw = {
            let parts = bind::key::<S::KeyShape, K>(&key);
            let prefix = self.effect_prefix();
            let effect = || prefix(&key.key_text());
            let call = CallParts {
                key: &parts,
                values,
                note,
                shown: &key,
                effect: &effect,
                classify: &classify,
            };
            // Boxed: the caller's future holds a pointer to the core's,
            // not a copy of its state machine, and no call site inlines it.
            let run: BoxFuture<'_, Result<Raw, Error>> = Box::pin(self.plan().run(executor, &call));
            run.await?
        };
        Ok(match raw {
            Raw::Applied {
                occurrence,
                lease,
                sent,
            } => {
                let won = Won::new(def.target(), key, occurrence, lease, executor.scope());
                Outcome::Applied(won.within(self.deadline).leased_since(sent))
            }
            Raw::NotFound => Outcome::NotFound,
            Raw::Left { current, left } => {
                let current = S::parse_db_str(&current)?;
                match left {
                    Left::Stale(occurrence) => Outcome::Stale {
                        current,
                        occurrence,
                    },
                    Left::AlreadyInState => Outcome::AlreadyInState(current),
                    Left::Conflict => Outcome::Conflict { current },
                    Left::Refused => Outcome::Refused { current },
                }
            }
        })
    }

    /// What the core of `apply` needs of this transition.
    fn plan(self) -> CasPlan {
        let (def, machine) = (self.def, S::MACHINE);
        CasPlan {
            names: self.names(),
            deadline: self.deadline,
            expected: self.expected,
            select: match def.select_guarded_sql() {
                Some([plain, locked]) => [plain, locked],
                None => [machine.select_for(false), machine.select_for(true)],
            },
            update: def.update_sql(),
            update_expecting: def.update_expecting_sql(),
            history_insert: def.history_insert_sql(),
            outbox_insert: def.outbox_insert_sql(),
            read_back: def.read_back_sql(),
            versioned: machine.version().is_some(),
            leased: def.since_column().is_some(),
            guarded: def.guard().is_some(),
        }
    }

    /// The status `row` holds, parsed; NULL is an error of its own.
    pub(crate) fn read_status<DB: Backend>(self, row: &Read<'_, DB>) -> Result<S, Error> {
        status_of::<S, DB>(row, |e| self.db_error(e))
    }
}

/// Where the status text a losing read found stands for `def`: its target,
/// one of its sources, or elsewhere; a text that is no state of the
/// machine is [`Error::UnknownState`].
pub(crate) fn classify<S: StateMachine>(
    def: &TransitionDef<S>,
    text: &str,
) -> Result<Class, Error> {
    let current = S::parse_db_str(text)?;
    Ok(if current == def.target() {
        Class::Target
    } else if def.sources().contains(&current) {
        Class::Source
    } else {
        Class::Elsewhere
    })
}
