//! [`Publisher`] for NATS JetStream.

use async_nats::HeaderMap;
use async_nats::jetstream::Context;
use async_nats::jetstream::context::PublishError;

use super::{Message, Published, Publisher};

/// Publishes to NATS JetStream, each message with its id as `Nats-Msg-Id`:
/// a stream that already holds a message of that id within its duplicate
/// window (two minutes unless the stream says otherwise) keeps no second
/// copy, and acknowledges it as a duplicate ([`Published::duplicate`]).
/// A message published again after the window is stored again; the
/// consumer's inbox (`stateguard::inbox::receive`) absorbs that copy.
///
/// The subject is the message's topic; a stream must cover it, or the
/// server answers that no stream is listening (an error).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use stateguard::outbox::{JetStream, Message, Publisher};
///
/// let client = async_nats::connect("127.0.0.1:4222").await?;
/// let publisher = JetStream::new(async_nats::jetstream::new(client));
/// let message = Message { id: "payout:42:sent:1", topic: "payout.sent", payload: b"{}" };
/// let published = publisher.publish(message).await?;
/// # let _ = published;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct JetStream {
    context: Context,
}

impl JetStream {
    /// A publisher on `context` (`async_nats::jetstream::new(client)`).
    pub fn new(context: Context) -> Self {
        Self { context }
    }

    /// The JetStream context it publishes through.
    pub fn context(&self) -> &Context {
        &self.context
    }
}

/// Why JetStream did not accept a message: the publish itself failed, or
/// its acknowledgement did not come (the server or the stream is down, no
/// stream covers the subject, the acknowledgement timed out). Either way
/// the message may have been stored; publish it again with the same id.
#[derive(Debug, thiserror::Error)]
#[error("JetStream did not accept message {id:?} on {topic:?}: {source}")]
pub struct JetStreamError {
    id: String,
    topic: String,
    #[source]
    source: PublishError,
}

impl JetStreamError {
    /// The message's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The message's topic, the subject it was published on.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// What `async_nats` said (also the error's `source()`).
    pub fn publish_error(&self) -> &PublishError {
        &self.source
    }
}

impl Publisher for JetStream {
    type Error = JetStreamError;

    async fn publish(&self, message: Message<'_>) -> Result<Published, JetStreamError> {
        let failed = |source| JetStreamError {
            id: message.id.to_owned(),
            topic: message.topic.to_owned(),
            source,
        };
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, message.id);
        let payload = bytes::Bytes::copy_from_slice(message.payload);
        let ack = self
            .context
            .publish_with_headers(message.topic.to_owned(), headers, payload)
            .await
            .map_err(failed)?
            .await
            .map_err(failed)?;
        Ok(Published::new(ack.duplicate))
    }
}
