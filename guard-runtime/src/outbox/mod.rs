//! The outbox: messages written in the transaction of the work they
//! announce ([`enqueue`], into the table of [`ddl`]), and the way out, the
//! [`Publisher`] that hands each to a broker.
//!
//! A message written with the work leaves only if the work commits: no
//! message about a payout that rolled back, and none lost for a payout
//! that committed, whatever crashes in between. A [`Relay`] reads the
//! table and publishes what is due.
//!
//! A message carries an id that names it for good: the same message
//! published again carries the same id, so a broker that drops a repeated
//! id within a window (JetStream's `Nats-Msg-Id`, SQS FIFO's
//! `MessageDeduplicationId`) keeps one copy. [`Published::duplicate`] says
//! when the broker recognized one.
//!
//! A publisher is small: one method that publishes one message and
//! returns once the broker has accepted it (for JetStream, its
//! acknowledgement that the stream stored it). With the `nats` feature,
//! [`JetStream`] is one. A publisher of your own, for Kafka or RabbitMQ,
//! implements the same method:
//!
//! ```
//! use stateguard::outbox::{Message, Published, Publisher};
//!
//! /// A publisher that prints, for a test.
//! struct Print;
//!
//! impl Publisher for Print {
//!     type Error = std::convert::Infallible;
//!
//!     async fn publish(&self, message: Message<'_>) -> Result<Published, Self::Error> {
//!         println!("{} {} {} bytes", message.id, message.topic, message.payload.len());
//!         Ok(Published::new(false))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let message = Message { id: "payout:42:sent:1", topic: "payout.sent", payload: b"{}" };
//! let published = Print.publish(message).await.unwrap();
//! assert!(!published.duplicate());
//! # }
//! ```

#[cfg(feature = "nats")]
mod nats;
mod relay;
mod store;

#[cfg(feature = "nats")]
pub use self::nats::{JetStream, JetStreamError};
pub use self::relay::{Pass, Relay};
pub use self::store::{
    DeadLetter, Enqueued, MessageState, MessageStatus, Outbox, backlog, ddl, dead_letters, enqueue,
    prune, requeue, status,
};

use std::future::Future;

/// One message, as a [`Publisher`] receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The id that names the message for good: the same message, published
    /// again, carries the same id.
    pub id: &'a str,
    /// Where it goes: a NATS subject, a Kafka topic, a routing key.
    pub topic: &'a str,
    /// Its bytes.
    pub payload: &'a [u8],
}

/// What the broker said when it accepted a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    duplicate: bool,
}

impl Published {
    /// An acceptance; `duplicate` when the broker recognized the message's
    /// id as one it already holds.
    pub fn new(duplicate: bool) -> Self {
        Self { duplicate }
    }

    /// Whether the broker recognized the id as one it already holds, and
    /// kept no second copy. A broker that cannot tell says `false`.
    pub fn duplicate(&self) -> bool {
        self.duplicate
    }
}

/// Hands messages to a broker.
///
/// [`publish`](Publisher::publish) returns `Ok` only once the broker has
/// accepted the message for good (stored it, or confirmed it), so that what
/// called it may mark the message published. An error means it may or may
/// not have arrived: the message is published again later with the same id.
pub trait Publisher: Send + Sync {
    /// Why a message was not accepted.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Publishes `message` and waits for the broker to accept it.
    fn publish(
        &self,
        message: Message<'_>,
    ) -> impl Future<Output = Result<Published, Self::Error>> + Send;
}
