//! The operators' console (feature `console`): an axum `Router` that a
//! service mounts under a path of its choosing, behind its own
//! authentication, and that shows the machines it is given.
//!
//! Its pages:
//! - **the overview** (`/`): each machine's diagram
//!   ([`docs::svg`](crate::docs::svg)) beside the rows in each state, read
//!   with [`Machine::counts`], each count stopping past
//!   [`COUNT_CAP`](crate::COUNT_CAP);
//! - **a state** (`/{machine}/states/{state}`): its rows in key order,
//!   [`PAGE_ROWS`](crate::PAGE_ROWS) a page, each with how long it has
//!   been there ([`Machine::rows`]);
//! - **a row** (`/{machine}/rows/{key}`): its state and occurrence, the
//!   transitions it can take now ([`Machine::available`]), its effect key
//!   in an in-flight state, and its history as a timeline
//!   ([`Machine::history`]);
//! - **a move** (`POST /{machine}/rows/{key}`), only where
//!   [`Console::actions`] turned actions on: the transition pressed,
//!   applied with [`expecting`](crate::Transition::expecting) the
//!   occurrence the page showed, and noted in the history with the
//!   [`Operator`] the service's authentication named.
//!
//! A key in a URL is the key's text ([`KeyText`](crate::KeyText)), read
//! back as the machine's key type ([`ParseKey`](crate::ParseKey)); a text
//! that is not such a key is a 400 page that says why.
//!
//! **Architecture Invariant:** every page is server-rendered HTML that
//! works without JavaScript, every value in it is escaped by the
//! templates (`maud`), no SQL is built from a request, and every read is
//! a statement the derive (or the stores) wrote, bounded by
//! [`PAGE_DEADLINE`]: the overview runs one per machine and one for the
//! outbox, a state's page one, a row's page two (its row, its history),
//! a press the move and then the row's page. Every read stops at a row
//! limit: a count at [`COUNT_CAP`](crate::COUNT_CAP), a list at
//! [`PAGE_ROWS`](crate::PAGE_ROWS), a row's history at its latest
//! [`PAGE_ROWS`](crate::PAGE_ROWS) moves.
//!
//! [`Machine::counts`]: crate::meta::Machine::counts
//! [`Machine::rows`]: crate::meta::Machine::rows
//! [`Machine::available`]: crate::meta::Machine::available
//! [`Machine::history`]: crate::meta::Machine::history
//!
//! Feature `console`; without it the module is empty.

#[cfg(feature = "console")]
mod base;
#[cfg(feature = "console")]
mod markup;
#[cfg(feature = "console")]
mod router;
#[cfg(feature = "console")]
mod shown;
#[cfg(feature = "console")]
mod token;

#[cfg(feature = "console")]
pub use self::router::Console;
#[cfg(feature = "console")]
pub use self::shown::{ConsoleKey, PAGE_DEADLINE};
#[cfg(feature = "console")]
pub use self::token::Operator;
