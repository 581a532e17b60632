//! The outbox's publisher for NATS JetStream, against the real server
//! (`STATEGUARD_NATS_URL`, for example `nats://127.0.0.1:4222`, JetStream
//! enabled), each test on a stream of its own that it deletes after.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use stateguard::outbox::{JetStream, Message, Publisher};

use crate::common::server_url;

/// A stream of its own on the server of `STATEGUARD_NATS_URL`, covering
/// `<name>.>`, with a two-minute duplicate window; `None` when the URL is
/// unset (skipped, with the reason printed).
pub(crate) async fn stream_of_its_own(test: &str) -> Option<(jetstream::Context, String)> {
    let url = server_url("STATEGUARD_NATS_URL", test)?;
    let client = async_nats::connect(url).await.expect("the NATS server");
    let context = jetstream::new(client);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("sg_outbox_{}_{nanos}", std::process::id());
    context
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("a JetStream stream (is the server started with -js?)");
    Some((context, name))
}

#[tokio::test]
async fn jetstream_keeps_one_copy_of_each_message_id() {
    let Some((context, name)) =
        stream_of_its_own("outbox::jetstream_keeps_one_copy_of_each_message_id").await
    else {
        return;
    };
    let publisher = JetStream::new(context.clone());
    let topic = format!("{name}.payout.sent");
    let ids: Vec<String> = (1..=50)
        .map(|row| format!("payouts:{row}:confirm:1"))
        .collect();
    let (mut stored, mut duplicates) = (0, 0);
    // Every message twice, as a relay that died between the publish and
    // marking it published would send it again.
    for round in 0..2 {
        for id in &ids {
            let payload = format!("{{\"round\":{round}}}");
            let message = Message {
                id,
                topic: &topic,
                payload: payload.as_bytes(),
            };
            match publisher.publish(message).await.unwrap().duplicate() {
                false => stored += 1,
                true => duplicates += 1,
            }
        }
    }
    assert_eq!((stored, duplicates), (50, 50));
    let mut stream = context.get_stream(&name).await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 50);
    // The copy kept is the first one published.
    let first = stream.get_raw_message(1).await.unwrap();
    assert_eq!(&first.payload[..], b"{\"round\":0}");
    let id = first.headers.get(async_nats::header::NATS_MESSAGE_ID);
    assert_eq!(id.map(|id| id.as_str()), Some("payouts:1:confirm:1"));
    context.delete_stream(&name).await.unwrap();
}

#[tokio::test]
async fn jetstream_refusal_is_a_typed_error_naming_the_message() {
    let Some((context, name)) =
        stream_of_its_own("outbox::jetstream_refusal_is_a_typed_error_naming_the_message").await
    else {
        return;
    };
    let publisher = JetStream::new(context.clone());
    // A subject no stream covers: the server has no stream to store it.
    let topic = format!("{name}_elsewhere.payout.sent");
    let message = Message {
        id: "payouts:7:confirm:1",
        topic: &topic,
        payload: b"{}",
    };
    let error = publisher.publish(message).await.unwrap_err();
    assert_eq!(error.id(), "payouts:7:confirm:1");
    assert_eq!(error.topic(), topic);
    let text = error.to_string();
    assert!(
        text.contains("payouts:7:confirm:1") && text.contains(&topic),
        "{text}"
    );
    context.delete_stream(&name).await.unwrap();
}
