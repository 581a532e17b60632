//! The consumer's side of the outbox, against the real NATS JetStream
//! server: each delivery goes through `inbox::receive` in the transaction
//! of its effect, and is acknowledged only after that commit. A consumer
//! that stalls past the ack wait gets the message again, and the
//! redelivery is a `Duplicate` that acknowledges without a second effect.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, pull};
use common::{Db, PayoutStatus, TestBackend};
use futures_util::StreamExt;
use stateguard::bounds::Key;
use stateguard::inbox::{self, Received};
use stateguard::outbox::{JetStream, Message, Publisher};
use stateguard::{Outcome, Tx};

backend_tests! {
    impl Tests {
        "consumer_redelivery" => a_redelivery_past_the_ack_wait_has_no_second_effect,
    }
}

struct Tests<DB>(std::marker::PhantomData<DB>);

/// What one delivery did.
#[derive(Debug, PartialEq, Eq)]
enum Handled {
    /// The effect ran and committed with the inbox row.
    Applied,
    /// Received before: nothing done.
    Duplicate,
}

impl<DB: TestBackend> Tests<DB>
where
    i64: Key<DB>,
{
    /// One message; the consumer's ack wait is a second. The first
    /// delivery records the message and starts the payout (one attempt
    /// more) in one transaction, commits, and then stalls without
    /// acknowledging; the server delivers it again after the ack wait,
    /// and that delivery is a duplicate: acknowledged, nothing done.
    async fn a_redelivery_past_the_ack_wait_has_no_second_effect(db: Db<DB>) {
        let test = format!("consumer::a_redelivery_{:?}", DB::DIALECT);
        let Some((context, name)) = crate::outbox::stream_of_its_own(&test).await else {
            return;
        };
        let mut conn = db.pool.acquire().await.unwrap();
        for statement in inbox::ddl(DB::DIALECT) {
            DB::execute(&mut conn, statement, &[]).await.unwrap();
        }
        drop(conn);
        db.seed(1).await;
        let message = Message {
            id: "payouts.status:1:paid:1",
            topic: &format!("{name}.payout.paid"),
            payload: b"1",
        };
        JetStream::new(context.clone())
            .publish(message)
            .await
            .unwrap();
        let stream = context.get_stream(&name).await.unwrap();
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some("payouts".into()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(1),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut messages = consumer.messages().await.unwrap();
        let mut handled = Vec::new();
        while handled.len() < 2 {
            let delivered = tokio::time::timeout(Duration::from_secs(10), messages.next())
                .await
                .expect("a delivery within 10 s")
                .expect("the stream goes on")
                .unwrap();
            let id = delivered
                .headers
                .as_ref()
                .and_then(|headers| headers.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|id| id.as_str().to_owned())
                .expect("the outbox's message id");
            let mut tx = Tx::begin_with(&db.pool, DB::BEGIN_WRITE).await.unwrap();
            match inbox::receive(&mut tx, "payouts", &id).await.unwrap() {
                Received::First => {
                    let outcome = PayoutStatus::start().apply(&mut tx, 1_i64).await.unwrap();
                    assert!(matches!(outcome, Outcome::Applied(_)));
                    tx.commit(outcome.won()).await.unwrap();
                    handled.push(Handled::Applied);
                    // Stalls past the ack wait: no ack for this delivery.
                }
                Received::Duplicate => {
                    tx.rollback().await.unwrap();
                    delivered.ack().await.unwrap();
                    handled.push(Handled::Duplicate);
                }
            }
        }
        assert_eq!(handled, [Handled::Applied, Handled::Duplicate]);
        // One effect: `start` counts one attempt, once.
        assert_eq!(db.total_attempts().await, 1);
        assert_eq!(db.status(1).await.as_deref(), Some("sending"));
        context.delete_stream(&name).await.unwrap();
    }
}
