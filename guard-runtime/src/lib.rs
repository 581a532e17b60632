//! The runtime half of [stateguard](https://docs.rs/stateguard): everything
//! that touches a database. Depend on `stateguard`, which re-exports this
//! crate together with the derive.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
// With no backend feature there is nothing to run transitions on, and the
// executor and dialect plumbing goes unused.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(unused)
)]

mod batch;
pub mod console;
pub mod ddl;
mod deadline;
mod dialect;
pub mod docs;
mod effects;
mod error;
mod executor;
mod history;
mod machine;
pub mod outbox;
mod outcome;
pub mod pooler;
mod stores;
pub mod telemetry;
mod transition;
mod verify;
pub mod worker;

pub mod http {
    //! The caller's side of an idempotent HTTP call, as a ready effect
    //! (feature `reqwest`): [`HttpEffect`] sends the request an effect's row
    //! makes, with its effect key as the `Idempotency-Key`, and turns the
    //! answer into a [`Verdict`](crate::Verdict).
    //!
    //! A client that pays twice most often did one of two things: it made a
    //! new key for each attempt, or it sent a body that changed between
    //! attempts (a timestamp, a field order). Here the key is the effect key,
    //! the same on every retry and every recovery of the row's occurrence,
    //! and the body is built from the row by a function of the effect, so
    //! every attempt sends the same bytes, provided the function reads
    //! nothing else (no clock, no random, no map with a random order).
    //!
    //! The answers, as [`HttpEffect`] reads them:
    //!
    //! | answer | verdict |
    //! | --- | --- |
    //! | 2xx | [`Answers::done`], given the response: `Verdict::done()` by default, or the `done` transition with a value read from the body |
    //! | 409 | retry later (at its `Retry-After`, if it has one): the first attempt with this key is still running; a far side that crashed mid-request holds the key until its own lease ends, so give the state a `retry(…)` whose attempts outlast it |
    //! | 429 or 503 with `Retry-After` | retry at that time (seconds, or an HTTP date) |
    //! | 429, 503 without it, other 5xx | retry later, with the same key |
    //! | no answer: a timeout, a connection refused or cut | retry later, with the same key |
    //! | 422 | failed, logged at `error`: the far side saw the key with other parameters, so the body changed between attempts |
    //! | other 4xx | failed, with the body as the reason ([`Answers::failed`]) |
    //! | anything else (1xx, an unfollowed 3xx) | retry later, logged at `warn` |
    //!
    //! A retry later waits for the state's `retry(…)` backoff, or its lease
    //! without one. [`Answers::answer`] sees every response first and may
    //! decide it otherwise.
    //!
    //! Feature `reqwest`; without it the module is empty.

    #[cfg(feature = "reqwest")]
    #[doc(inline)]
    pub use crate::effects::http::*;
}

// Public modules that live in their concept's folder, at their short paths.
pub use crate::machine::key;

/// The fault matrix's hook (feature `fault-injection`): for stateguard's
/// own test suite, not part of the API and not covered by semver.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use crate::executor::fault;
pub use crate::stores::{Stores, idempotency, inbox};

pub use crate::batch::batched::{BatchRunner, Batched};
pub use crate::batch::many::APPLY_MANY_CHUNK;
pub use crate::ddl::ColumnTypes;
pub use crate::deadline::call::Call;
pub use crate::deadline::retry::DEFAULT_DEADLINE;
pub use crate::dialect::{Backend, Key};
pub use crate::effects::calls::{FinishFn, FinishFnOnce, finish_many, recover, recover_many};
pub use crate::effects::effect_fn::Effect;
pub use crate::effects::effect_fn::{EffectFn, EffectFnOnce};
pub use crate::effects::finish_many::{FLUSH_AFTER, FinishedRow};
pub use crate::effects::finished::{FinishError, Finished};
pub use crate::effects::recovery::{Recover, Recovered, SupersededRow, claim_expired};
pub use crate::effects::verdict::{
    FollowUp, FollowUpValues, PlainDone, PlainFailed, Retry, Verdict,
};
pub use crate::error::{Error, ErrorKind, Misuse};
pub use crate::executor::Runner;
pub use crate::executor::tx::{Begin, Savepoint, Staged, Tx};
pub use crate::history::{HasHistory, HistoryRow, Noted};
pub use crate::machine::key::{
    BatchKey, Batchable, Claimable, DecodeKey, KeyOf, KeyShape, KeyText, KeyType, ManyKeys,
    ParseKey, RowKey,
};
pub use crate::machine::{HasVersion, StateMachine, UnknownState};
pub use crate::outcome::{Committed, Current, MayRun, Outcome, Uncommitted, Won};
pub use crate::transition::available::{Available, Choice, GuardNow};
pub use crate::transition::counts::{COUNT_CAP, StateCount};
pub use crate::transition::note::{Note, NoteSlot};
pub use crate::transition::rows::{InState, PAGE_ROWS, RowsPage};
pub use crate::transition::{Binds, Bound, Transition};
pub use crate::verify::{SchemaProblem, SchemaProblemKind};

/// What a derived machine knows about itself, read through
/// [`StateMachine::MACHINE`]: its table and columns, states, transitions,
/// in-flight states and the SQL text of each statement per dialect. The
/// [`docs`] renderers and the [`ddl`] generators read it; so can a caller.
pub mod meta {
    pub use crate::dialect::{Bind, Column, Sql, Statement};
    pub use crate::machine::{
        InFlightDef, Machine, ManySql, RetryDef, SetColumn, StateDef, TransitionDef,
    };
    pub use crate::transition::counts::COUNT_CAP;
}

/// A statement in generated code, kept only where its backend's feature
/// is on: a binary that talks to one database carries one dialect's text.
#[cfg(feature = "postgres")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_postgres {
    ($statement:expr) => {
        $statement
    };
}

#[cfg(not(feature = "postgres"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_postgres {
    ($statement:expr) => {
        $crate::__private::NO_STATEMENT
    };
}

/// See [`__stateguard_postgres!`].
#[cfg(feature = "sqlite")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_sqlite {
    ($statement:expr) => {
        $statement
    };
}

#[cfg(not(feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_sqlite {
    ($statement:expr) => {
        $crate::__private::NO_STATEMENT
    };
}

/// See [`__stateguard_postgres!`].
#[cfg(feature = "mysql")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_mysql {
    ($statement:expr) => {
        $statement
    };
}

#[cfg(not(feature = "mysql"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_mysql {
    ($statement:expr) => {
        $crate::__private::NO_STATEMENT
    };
}

/// One statement in each dialect, as the derive writes it:
///
/// ```text
/// sql! {
///     "SELECT 'stateguard 0123456789abcdef'::text, … WHERE \"id\" = $1" on postgres,
///         binds = [Key(0)], reads = [Tag, Status, Occurrence];
///     "SELECT … WHERE \"id\" = ?1" on sqlite, binds = [Key(0)], reads = [Status, Occurrence];
///     "SELECT … WHERE `id` = ? AND …" on mysql, binds = [Key(0), Key(0)], reads = [Status, Occurrence];
/// }
/// ```
///
/// Each dialect's text, with what each placeholder binds ([`meta::Bind`])
/// and what each result column holds ([`meta::Column`]): on PostgreSQL
/// first the tag its rows carry ([`meta::Statement::tag`]), whose literal
/// is found in the text. A dialect left
/// out has no such statement; one whose backend's feature is off is not
/// kept.
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_sql {
    ($(
        $text:literal on $dialect:ident
        $(, binds = [$($bind:ident $(($($bn:literal),+))?),*])?
        $(, reads = [$($read:ident $(($rn:literal))?),*])?;
    )*) => {
        $crate::__private::Statements::NONE
            $(.$dialect($crate::__private::$dialect!($crate::__private::statement(
                $text,
                &[$($($crate::__private::Bind::$bind $(($($bn),+))?),*)?],
                &[$($($crate::__private::Column::$read $(($rn))?),*)?],
            ))))*
            .sql()
    };
}

/// What the derive implements for a machine's enum besides
/// `StateMachine`: `Display` and `FromStr` by the states' database text,
/// and sqlx's `Type`, `Encode` and `Decode` as that text, so that a status
/// binds and decodes like the column it lives in.
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_text {
    ($machine:ident) => {
        #[automatically_derived]
        impl ::core::fmt::Display for $machine {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str($crate::StateMachine::as_str(*self))
            }
        }

        #[automatically_derived]
        impl ::core::str::FromStr for $machine {
            type Err = $crate::UnknownState;

            fn from_str(value: &str) -> ::core::result::Result<Self, Self::Err> {
                <Self as $crate::StateMachine>::parse_db_str(value)
            }
        }

        #[automatically_derived]
        impl<__DB: $crate::__private::sqlx::Database> $crate::__private::sqlx::Type<__DB>
            for $machine
        where
            str: $crate::__private::sqlx::Type<__DB>,
        {
            fn type_info() -> <__DB as $crate::__private::sqlx::Database>::TypeInfo {
                <str as $crate::__private::sqlx::Type<__DB>>::type_info()
            }

            fn compatible(ty: &<__DB as $crate::__private::sqlx::Database>::TypeInfo) -> bool {
                <str as $crate::__private::sqlx::Type<__DB>>::compatible(ty)
            }
        }

        #[automatically_derived]
        impl<'__q, __DB: $crate::__private::sqlx::Database>
            $crate::__private::sqlx::Encode<'__q, __DB> for $machine
        where
            &'__q str: $crate::__private::sqlx::Encode<'__q, __DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <__DB as $crate::__private::sqlx::Database>::ArgumentBuffer,
            ) -> ::core::result::Result<
                $crate::__private::sqlx::encode::IsNull,
                $crate::__private::sqlx::error::BoxDynError,
            > {
                <&'__q str as $crate::__private::sqlx::Encode<'__q, __DB>>::encode(
                    $crate::StateMachine::as_str(*self),
                    buf,
                )
            }
        }

        #[automatically_derived]
        impl<'__r, __DB: $crate::__private::sqlx::Database>
            $crate::__private::sqlx::Decode<'__r, __DB> for $machine
        where
            &'__r str: $crate::__private::sqlx::Decode<'__r, __DB>,
        {
            fn decode(
                value: <__DB as $crate::__private::sqlx::Database>::ValueRef<'__r>,
            ) -> ::core::result::Result<Self, $crate::__private::sqlx::error::BoxDynError> {
                let text =
                    <&'__r str as $crate::__private::sqlx::Decode<'__r, __DB>>::decode(value)?;
                <Self as $crate::StateMachine>::from_db_str(text)
                    .ok_or_else(|| $crate::__private::unknown_state::<Self>(text))
            }
        }

        $crate::__private::serde_impls!($machine);
    };
}

/// With the `serde` feature, `Serialize` and `Deserialize` for a machine's
/// enum as its database strings (`"pending"`); a string that is no state
/// is an error that names it. Without the feature, nothing.
#[cfg(feature = "serde")]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_serde {
    ($machine:ident) => {
        #[automatically_derived]
        impl $crate::__private::serde::Serialize for $machine {
            fn serialize<__S: $crate::__private::serde::Serializer>(
                &self,
                serializer: __S,
            ) -> ::core::result::Result<__S::Ok, __S::Error> {
                serializer.serialize_str($crate::StateMachine::as_str(*self))
            }
        }

        #[automatically_derived]
        impl<'__de> $crate::__private::serde::Deserialize<'__de> for $machine {
            fn deserialize<__D: $crate::__private::serde::Deserializer<'__de>>(
                deserializer: __D,
            ) -> ::core::result::Result<Self, __D::Error> {
                let text: $crate::__private::CowStr<'__de> =
                    $crate::__private::serde::Deserialize::deserialize(deserializer)?;
                <Self as $crate::StateMachine>::parse_db_str(&text.0)
                    .map_err(<__D::Error as $crate::__private::serde::de::Error>::custom)
            }
        }
    };
}

#[cfg(not(feature = "serde"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __stateguard_serde {
    ($machine:ident) => {};
}

/// Items the derive's generated code names. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    /// Each dialect's statement, or [`NO_STATEMENT`] where its backend's
    /// feature is off.
    pub use crate::{
        __stateguard_mysql as mysql, __stateguard_postgres as postgres,
        __stateguard_sqlite as sqlite,
    };

    /// `Serialize` and `Deserialize`, with the `serde` feature.
    pub use crate::__stateguard_serde as serde_impls;
    /// One statement in each dialect.
    pub use crate::__stateguard_sql as sql;
    /// `Display`, `FromStr` and the sqlx impls of a machine's enum.
    pub use crate::__stateguard_text as text;
    #[cfg(feature = "serde")]
    pub use serde;

    /// A string a deserializer lends, or owns where it must (an escaped
    /// JSON string): what a state's `Deserialize` reads.
    #[cfg(feature = "serde")]
    pub struct CowStr<'de>(pub std::borrow::Cow<'de, str>);

    #[cfg(feature = "serde")]
    impl<'de> serde::Deserialize<'de> for CowStr<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Text;
            impl<'de> serde::de::Visitor<'de> for Text {
                type Value = CowStr<'de>;
                fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                    f.write_str("a state's database string")
                }
                fn visit_borrowed_str<E>(self, value: &'de str) -> Result<Self::Value, E> {
                    Ok(CowStr(std::borrow::Cow::Borrowed(value)))
                }
                fn visit_str<E>(self, value: &str) -> Result<Self::Value, E> {
                    Ok(CowStr(std::borrow::Cow::Owned(value.to_owned())))
                }
                fn visit_string<E>(self, value: String) -> Result<Self::Value, E> {
                    Ok(CowStr(std::borrow::Cow::Owned(value)))
                }
            }
            deserializer.deserialize_str(Text)
        }
    }
    pub use crate::machine::construct::Statements;

    /// The runtime's clock text per dialect, for the test that holds the
    /// derive's statements to it (`tests/derive/metadata.rs`).
    pub const NOW: [&str; 3] = [
        crate::dialect::NOW.postgres,
        crate::dialect::NOW.sqlite,
        crate::dialect::NOW.mysql,
    ];

    /// What a dialect whose backend's feature is off holds.
    pub const NO_STATEMENT: crate::meta::Statement =
        crate::machine::construct::statement("", &[], &[]);

    pub use sqlx;

    /// How the derive's `ColumnTypes` impl names each Rust type's SQL
    /// type, for `ddl::table`.
    pub use crate::ddl::{SqlTypeFn, sql_type};
    pub use crate::dialect::{Bind, Column, Sql};
    pub use crate::effects::verdict::Binder;
    pub use crate::effects::verdict::construct::binder;
    pub use crate::machine::construct::{
        DdlParts, InFlightParts, MachineParts, PerDialect, RetryParts, SetParts, StateParts,
        TableParts, TransitionParts, ddl, in_flight, machine, per_dialect, placeholder, rust_typed,
        set_column, state, statement, table_text, transition, typed, untyped,
    };
    pub use crate::machine::{Machine, StateDef, TransitionDef};
    pub use crate::stores::schema::{StoreParts, store_statement, stores};
    pub use crate::transition::bind::Field;
    /// The bounds the derive's impls name.
    pub use crate::{Binds, ColumnTypes, FollowUpValues, KeyType, PlainDone, PlainFailed};
    /// The stores of a schema (`stores!`).
    pub use stateguard_macros::__store_statements as store_statements;

    /// How `docs::mermaid` writes a label and a state's quoted
    /// description, for the test that draws arbitrary text with real
    /// Mermaid.
    pub use crate::docs::mermaid::{mermaid_quoted, mermaid_text};

    /// A transition constructor with `bind(Type)` values returns the
    /// transition with them.
    pub const fn bound<S: crate::StateMachine, P>(
        transition: crate::Transition<S>,
        params: P,
    ) -> crate::Bound<S, P> {
        transition.bind(params)
    }

    /// Decoding a status string inside `sqlx::Decode`.
    pub fn unknown_state<S: crate::StateMachine>(value: &str) -> sqlx::error::BoxDynError {
        Box::new(crate::UnknownState::new::<S>(value))
    }
}
