//! `Outcome` of an attempt, and `Won`, the token only the winner holds.

use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;

use crate::StateMachine;
use crate::machine::key::KeyText;

/// What one attempt at a transition found.
///
/// Exactly one of any number of concurrent or replayed attempts gets
/// [`Outcome::Applied`]; only that one may run the side effect. `K` is the
/// row key's type; `C` says whether the win is committed yet ([`Committed`]
/// on a pool or connection, [`Uncommitted`] inside a transaction).
#[must_use = "only `Outcome::Applied` may run the side effect; match on the outcome"]
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<S, K, C = Committed> {
    /// This attempt changed the row. It holds the [`Won`] token.
    Applied(Won<S, K, C>),
    /// The row already is in the target state: a replay, or another attempt
    /// won. Nothing to do.
    AlreadyInState(S),
    /// The row is in a state this transition cannot start from.
    Conflict {
        /// The state the row is in.
        current: S,
    },
    /// No row has this key.
    NotFound,
    /// The row is in a state this transition starts from, but does not
    /// meet the transition's guard (`guard = "…"`): nothing changed.
    Refused {
        /// The state the row is in.
        current: S,
    },
    /// The row moved on since the occurrence the caller expected
    /// ([`Transition::expecting`](crate::Transition::expecting)): nothing
    /// changed.
    Stale {
        /// The state the row is in now.
        current: S,
        /// Its occurrence now: the value of the version column.
        occurrence: i64,
    },
}

impl<S: StateMachine, K, C> Outcome<S, K, C> {
    /// The winning token, if this attempt changed the row.
    pub fn won(self) -> Option<Won<S, K, C>> {
        match self {
            Outcome::Applied(won) => Some(won),
            _ => None,
        }
    }

    /// True for [`Outcome::Applied`].
    pub fn is_applied(&self) -> bool {
        matches!(self, Outcome::Applied(_))
    }

    /// The state the row is in after the attempt, if the row exists.
    pub fn state(&self) -> Option<S> {
        match self {
            Outcome::Applied(won) => Some(won.state()),
            Outcome::AlreadyInState(state)
            | Outcome::Conflict { current: state }
            | Outcome::Refused { current: state }
            | Outcome::Stale { current: state, .. } => Some(*state),
            Outcome::NotFound => None,
        }
    }
}

/// A row as [`Machine::load`](crate::meta::Machine::load) read it: its
/// state and occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current<S> {
    state: S,
    occurrence: i64,
}

impl<S: Copy> Current<S> {
    pub(crate) fn new(state: S, occurrence: i64) -> Self {
        Current { state, occurrence }
    }

    /// The state the row is in.
    pub fn state(&self) -> S {
        self.state
    }

    /// The value of the machine's version column (0 without one): pass it
    /// to [`Transition::expecting`](crate::Transition::expecting).
    pub fn occurrence(&self) -> i64 {
        self.occurrence
    }
}

/// Marks a [`Won`] whose statement has committed: its effect may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {}

/// A [`Won`] whose effect may run: a [`Committed`] one, and nothing else.
/// [`Won::run`] and [`Won::finish`] on an [`Uncommitted`] win ask for it,
/// so that the mistake is one compile error that says to commit first.
#[diagnostic::on_unimplemented(
    message = "this win is `Uncommitted`: its effect cannot run before the transaction that won \
               commits",
    label = "won inside a transaction that has not committed yet",
    note = "commit first, and run the effect on the win the commit hands back: \
            `let won = tx.commit(won).await?;` (or `won.commit(tx)`), then `won.finish(&pool, effect)`"
)]
pub trait MayRun<S: StateMachine, K>: may_run::Sealed {
    /// The same win, marked [`Committed`], which it already is.
    #[doc(hidden)]
    fn committed(self) -> Won<S, K, Committed>;
}

impl<S: StateMachine, K> MayRun<S, K> for Won<S, K, Committed> {
    fn committed(self) -> Won<S, K, Committed> {
        self
    }
}

mod may_run {
    use super::{Committed, StateMachine, Won};

    pub trait Sealed {}
    impl<S: StateMachine, K> Sealed for Won<S, K, Committed> {}
}

/// Marks a [`Won`] obtained inside a transaction that has not committed
/// yet. It cannot run an effect; [`Won::commit`] commits the transaction
/// and turns it into a committed `Won`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncommitted {}

/// Proof that this attempt, and no other, moved the row.
///
/// Only this crate creates one: for the attempt whose compare-and-set
/// changed the row, or for a recovery that took over an in-flight row whose
/// lease ran out. It is neither `Clone` nor `Copy`, so the effect it guards
/// runs once per win.
#[must_use = "the winning attempt is the one that must run the side effect"]
#[derive(PartialEq, Eq)]
pub struct Won<S, K, C = Committed> {
    state: S,
    key: K,
    occurrence: i64,
    /// The lease token of a win into an in-flight state (see
    /// `InFlightDef::renew_sql`); 0 otherwise.
    lease: i64,
    /// The transaction or savepoint the win happened in (see `executor/tx/`); 0
    /// once committed.
    scope: u64,
    /// How long `finish` may take, the effect included.
    deadline: Duration,
    /// When the statement that stamped the lease was sent, where known.
    leased_at: LeasedAt,
    /// The attempt a takeover counted; 0 for a win that entered the state
    /// (its first attempt).
    attempt: u32,
    commit: PhantomData<fn() -> C>,
}

/// When the statement that stamped a win's lease was sent: a bound on the
/// lease's age (the database stamps it later), so that `finish` can tell a
/// lease too young for anyone to have taken it over. Not part of a win's
/// identity: every value compares equal.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LeasedAt(pub(crate) Option<std::time::Instant>);

impl PartialEq for LeasedAt {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LeasedAt {}

impl<S: StateMachine, K, C> Won<S, K, C> {
    pub(crate) fn new(state: S, key: K, occurrence: i64, lease: i64, scope: u64) -> Self {
        Won {
            state,
            key,
            occurrence,
            lease,
            scope,
            deadline: crate::deadline::retry::DEFAULT_DEADLINE,
            leased_at: LeasedAt(None),
            attempt: 0,
            commit: PhantomData,
        }
    }

    /// The same win, whose lease was stamped by a statement sent at `sent`.
    pub(crate) fn leased_since(mut self, sent: LeasedAt) -> Self {
        self.leased_at = sent;
        self
    }

    /// The same win, at the attempt a takeover counted.
    pub(crate) fn at_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Which attempt at the effect this is, where the in-flight state
    /// counts them (`retry(…)` in its `#[state(in_flight(...))]`): 1 for
    /// the win that entered the state, and the count each recovery's
    /// takeover stored after it. `None` where the state counts no
    /// attempts.
    pub fn attempt(&self) -> Option<u32> {
        let counted = S::MACHINE
            .state(self.state)
            .and_then(|s| s.in_flight())
            .and_then(|f| f.retry())
            .is_some();
        counted.then_some(self.attempt.max(1))
    }

    /// Whether the lease is younger than `age` for certain.
    pub(crate) fn lease_younger_than(&self, age: Duration) -> bool {
        self.leased_at.0.is_some_and(|sent| sent.elapsed() < age)
    }

    /// The same win, whose [`finish`](Won::finish) keeps `deadline`
    /// instead of the deadline of the transition that won it (by default
    /// [`DEFAULT_DEADLINE`](crate::DEFAULT_DEADLINE)). The deadline covers
    /// the whole call, the effect included: give an effect that may take
    /// long a deadline to match.
    pub fn within(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The deadline [`finish`](Won::finish) keeps.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    pub(crate) fn into_parts(self) -> (S, K, i64) {
        (self.state, self.key, self.occurrence)
    }

    pub(crate) fn lease(&self) -> i64 {
        self.lease
    }

    pub(crate) fn scope(&self) -> u64 {
        self.scope
    }

    /// The same win, handed to another scope (a released savepoint's
    /// parent, or 0 once committed).
    pub(crate) fn rescope<D>(self, scope: u64) -> Won<S, K, D> {
        Won::new(self.state, self.key, self.occurrence, self.lease, scope)
            .within(self.deadline)
            .leased_since(self.leased_at)
            .at_attempt(self.attempt)
    }

    /// The state the row is in now: the transition's target.
    pub fn state(&self) -> S {
        self.state
    }

    /// The key of the row.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Which pass of the row through this state this is: the value of the
    /// machine's `version` column after the transition, or 0 when the
    /// machine has no version column (then no row passes through a
    /// transition twice).
    pub fn occurrence(&self) -> i64 {
        self.occurrence
    }
}

impl<S: StateMachine, K: KeyText<S::KeyShape>, C> Won<S, K, C> {
    /// The idempotency key for this win's external effect: pass it as the
    /// `Idempotency-Key` of the API the effect calls.
    ///
    /// Derived from the table and status column, the row key, the state the
    /// row entered and the occurrence (`payouts.status:42:sending:3`), so it is the same for every retry and every recovery
    /// of this win, and different for the next pass of the row through the
    /// same state. At most 255 characters: where `table.column:key:state:`
    /// is longer than 235 (leaving room for any occurrence), it keeps its
    /// first 169 characters and `~`, the SHA-256 of the whole in hex and
    /// `:` stand for the rest, so that row keys chosen by an attacker cannot
    /// make two wins share one; the occurrence always ends the key as it
    /// is. The message id `emit(…)` writes is this key.
    pub fn effect_key(&self) -> String {
        effect_key::<S>(&self.key.key_text(), self.state, self.occurrence)
    }
}

impl<S: fmt::Debug, K: fmt::Debug, C> fmt::Debug for Won<S, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Won")
            .field("state", &self.state)
            .field("key", &self.key)
            .field("occurrence", &self.occurrence)
            .field("committed", &(self.scope == 0))
            .finish()
    }
}

/// The effect key of one win: [`effect_key_prefix`] and the occurrence.
pub(crate) fn effect_key<S: StateMachine>(key: &str, state: S, occurrence: i64) -> String {
    let mut effect_key = effect_key_prefix::<S>(key, state);
    effect_key.push_str(itoa::Buffer::new().format(occurrence));
    effect_key
}

/// What an effect key holds before its occurrence:
/// `table.column:key:state:` (the column keeps two machines on one table
/// apart), or, when that is longer than [`PREFIX_LIMIT`], a part of it,
/// `~`, the SHA-256 of the whole in hex and `:`.
///
/// **Architecture Invariant:** this is the one definition of an effect
/// key. `Won::effect_key` appends the occurrence to it, and every
/// statement that writes an outbox row (`emit(…)`) binds it (a batch,
/// each row's beside the row's key: `Transition::effect_prefix`) and
/// appends the occurrence the move writes, which the statement alone may
/// know (`guard-macros/src/sql/outbox.rs`), so the message id is the
/// effect key on every path.
pub(crate) fn effect_key_prefix<S: StateMachine>(key: &str, state: S) -> String {
    let (table, column, state) = (S::MACHINE.table(), S::MACHINE.column(), state.as_str());
    // One allocation, with room for the occurrence: a batch makes one key
    // a row.
    let parts = [table, ".", column, ":", key, ":", state, ":"];
    let mut full = String::with_capacity(parts.iter().map(|part| part.len()).sum::<usize>() + 20);
    full.extend(parts);
    shorten(full)
}

/// The longest effect key: what `Idempotency-Key` headers commonly accept.
const EFFECT_KEY_LIMIT: usize = 255;

/// The longest prefix: the limit less the longest occurrence, an `i64`'s
/// 20 characters, so that the decision to shorten is the prefix's alone.
const PREFIX_LIMIT: usize = EFFECT_KEY_LIMIT - 20;

/// Hex characters of SHA-256 a shortened effect key keeps: all 64. The
/// key parts often come from input, so the attacker to fear picks two
/// inputs whose hashes agree (two payouts, one idempotency key), and a
/// collision of an n-bit hash takes about 2^(n/2) tries: the whole 256
/// bits leave 2^128, where 128 bits (32 hex characters) would leave 2^64,
/// which large hashing farms can afford. The prefix still keeps 169
/// characters of the readable key.
const EFFECT_KEY_HASH_HEX: usize = 64;

/// `full` (ending in `:`) itself if it fits [`PREFIX_LIMIT`], else its
/// start, `~`, its SHA-256 and `:`, [`PREFIX_LIMIT`] long at most.
fn shorten(full: String) -> String {
    use core::fmt::Write as _;
    use sha2::Digest as _;

    if full.len() <= PREFIX_LIMIT {
        return full;
    }
    let mut cut = PREFIX_LIMIT - 2 - EFFECT_KEY_HASH_HEX;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut short = String::with_capacity(EFFECT_KEY_LIMIT);
    short.push_str(&full[..cut]);
    short.push('~');
    for byte in sha2::Sha256::digest(full.as_bytes()) {
        // Writing to a String cannot fail.
        let _ = write!(short, "{byte:02x}");
    }
    short.push(':');
    debug_assert_eq!(short.len(), cut + 2 + EFFECT_KEY_HASH_HEX);
    short
}
