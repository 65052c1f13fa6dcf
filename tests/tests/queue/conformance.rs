//! The queue conformance suite: every case runs against the embedded queue and against
//! moto's SQS, through the ports only, and checks what the queue holds afterwards, not only
//! what it answered.

use payonce::ports::{OutgoingMessage, QueueError, QueueReceive, QueueSend, ReceivedMessage};
use payonce_tests::queue::{QueueHarness, MAX_MESSAGE_BYTES, MAX_RECEIVE_COUNT, PAST, VISIBILITY};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A visibility timeout no test outlives: for cases that must not see redeliveries.
const LONG_VISIBILITY: Duration = Duration::from_secs(60);

/// A webhook event as the receiver queues it.
fn event(event_id: &str, body: String) -> OutgoingMessage {
    OutgoingMessage {
        body,
        attributes: BTreeMap::from([
            ("provider".to_owned(), "stripe".to_owned()),
            ("event_id".to_owned(), event_id.to_owned()),
        ]),
    }
}

/// A small webhook event with a unique id.
fn small_event() -> OutgoingMessage {
    let event_id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let body = format!(r#"{{"id":"{event_id}","type":"payment_intent.succeeded"}}"#);
    event(&event_id, body)
}

/// An event whose body pads it to exactly `size_bytes` as the queue counts them.
fn event_of_size(size_bytes: usize) -> OutgoingMessage {
    let event_id = format!("evt_{}", uuid::Uuid::new_v4().simple());
    let overhead = event(&event_id, String::new()).size_bytes();
    let message = event(&event_id, "x".repeat(size_bytes - overhead));
    assert_eq!(message.size_bytes(), size_bytes);
    message
}

async fn receive_one<H: QueueHarness>(h: &H, visibility: Duration) -> ReceivedMessage {
    let mut received = h.queue().receive(10, visibility).await.expect("receive");
    assert_eq!(
        received.len(),
        1,
        "{}: expected exactly one message",
        H::NAME
    );
    received.remove(0)
}

pub async fn sent_message_is_received_with_its_body_attributes_and_id<H: QueueHarness>(h: H) {
    // GIVEN a queued webhook event
    let sent = small_event();
    let message_id = h.queue().send(&sent).await.expect("send");

    // WHEN it is received
    let received = receive_one(&h, LONG_VISIBILITY).await;

    // THEN it is the same message, received for the first time
    assert_eq!(received.message_id, message_id);
    assert_eq!(received.body, sent.body);
    assert_eq!(received.attributes, sent.attributes);
    assert_eq!(received.attributes["provider"], "stripe");
    assert_eq!(received.receive_count, 1);
    assert!(!received.receipt_handle.is_empty());
    // AND it is still held (in flight) until deleted
    assert_eq!(h.queue().depth().await.expect("depth"), 1);
}

pub async fn received_message_is_invisible_until_its_visibility_timeout_passes<H: QueueHarness>(
    h: H,
) {
    // GIVEN a message received once
    let message_id = h.queue().send(&small_event()).await.expect("send");
    let first = receive_one(&h, VISIBILITY).await;

    // WHEN it is asked for again within its visibility timeout
    let hidden = h.queue().receive(10, VISIBILITY).await.expect("receive");

    // THEN nobody gets it, yet the queue still holds it
    assert!(hidden.is_empty(), "{}: got {hidden:?}", H::NAME);
    assert_eq!(h.queue().depth().await.expect("depth"), 1);

    // WHEN the timeout has passed
    h.advance(VISIBILITY + PAST).await;

    // THEN it is received again, counted twice, under a new receipt handle
    let second = receive_one(&h, VISIBILITY).await;
    assert_eq!(second.message_id, message_id);
    assert_eq!(second.body, first.body);
    assert_eq!(second.receive_count, 2);
    assert_ne!(second.receipt_handle, first.receipt_handle);
}

pub async fn deleted_message_is_gone_for_good<H: QueueHarness>(h: H) {
    // GIVEN a received message
    h.queue().send(&small_event()).await.expect("send");
    let received = receive_one(&h, VISIBILITY).await;

    // WHEN it is deleted
    h.queue()
        .delete(&received.receipt_handle)
        .await
        .expect("delete");

    // THEN the queue is empty, and stays so after the visibility timeout
    assert_eq!(h.queue().depth().await.expect("depth"), 0);
    h.advance(VISIBILITY + PAST).await;
    let after = h.queue().receive(10, VISIBILITY).await.expect("receive");
    assert!(after.is_empty(), "{}: got {after:?}", H::NAME);
    assert_eq!(h.queue().depth().await.expect("depth"), 0);
    assert_eq!(h.dlq().depth().await.expect("dlq depth"), 0);
}

pub async fn message_never_deleted_moves_to_the_dead_letter_queue<H: QueueHarness>(h: H) {
    // GIVEN a message whose processing keeps failing (received, never deleted)
    let sent = small_event();
    let message_id = h.queue().send(&sent).await.expect("send");
    for expected in 1..=MAX_RECEIVE_COUNT {
        let received = receive_one(&h, VISIBILITY).await;
        assert_eq!(received.receive_count, expected);
        h.advance(VISIBILITY + PAST).await;
    }

    // WHEN it would be received once more than maxReceiveCount allows
    let beyond = h.queue().receive(10, VISIBILITY).await.expect("receive");

    // THEN it is not delivered but moved: the queue is empty, the DLQ holds it as sent
    assert!(beyond.is_empty(), "{}: got {beyond:?}", H::NAME);
    let in_queue = h.queue().depth().await.expect("depth");
    let in_dlq = h.dlq().depth().await.expect("dlq depth");
    assert_eq!((in_queue, in_dlq), (0, 1), "{}", H::NAME);
    assert_eq!(in_queue + in_dlq, 1, "every message sent is somewhere");

    let mut dead = h
        .dlq()
        .receive(10, LONG_VISIBILITY)
        .await
        .expect("receive from the DLQ");
    assert_eq!(dead.len(), 1);
    let dead = dead.remove(0);
    assert_eq!(dead.message_id, message_id);
    assert_eq!(dead.body, sent.body);
    assert_eq!(dead.attributes, sent.attributes);
}

pub async fn message_over_the_size_limit_is_refused_and_not_queued<H: QueueHarness>(h: H) {
    // GIVEN a message one byte over the queue's limit (body plus attributes)
    let too_large = event_of_size(MAX_MESSAGE_BYTES + 1);
    let requests_before = h.requests();

    // WHEN it is sent
    let refused = h.queue().send(&too_large).await;

    // THEN it is refused as too large, before any request, and nothing is queued
    match refused {
        Err(QueueError::TooLarge {
            size_bytes,
            limit_bytes,
        }) => {
            assert_eq!(size_bytes, MAX_MESSAGE_BYTES + 1);
            assert_eq!(limit_bytes, MAX_MESSAGE_BYTES);
        }
        other => panic!("{}: expected TooLarge, got {other:?}", H::NAME),
    }
    assert_eq!(h.requests(), requests_before, "refused locally");
    assert_eq!(h.queue().depth().await.expect("depth"), 0);

    // AND a normal message and one exactly at the limit are accepted and delivered whole
    let normal = small_event();
    let at_limit = event_of_size(MAX_MESSAGE_BYTES);
    h.queue()
        .send(&normal)
        .await
        .expect("send a normal message");
    h.queue()
        .send(&at_limit)
        .await
        .expect("send a message exactly at the limit");
    assert_eq!(h.queue().depth().await.expect("depth"), 2);
    let received = h
        .queue()
        .receive(10, LONG_VISIBILITY)
        .await
        .expect("receive");
    let bodies: BTreeSet<_> = received.iter().map(|m| m.body.len()).collect();
    assert_eq!(
        bodies,
        BTreeSet::from([normal.body.len(), at_limit.body.len()])
    );
}

pub async fn receive_on_an_empty_queue_returns_nothing<H: QueueHarness>(h: H) {
    // GIVEN a new queue, WHEN asked for messages, THEN it answers an empty batch
    let received = h.queue().receive(10, VISIBILITY).await.expect("receive");
    assert!(received.is_empty(), "{}: got {received:?}", H::NAME);
    assert_eq!(h.queue().depth().await.expect("depth"), 0);
    // AND asking for none at all is answered the same way
    assert!(h
        .queue()
        .receive(0, VISIBILITY)
        .await
        .expect("receive none")
        .is_empty());
}

pub async fn batch_is_received_each_message_exactly_once<H: QueueHarness>(h: H) {
    // GIVEN ten queued events
    let mut sent = BTreeMap::new();
    for _ in 0..10 {
        let message = small_event();
        let message_id = h.queue().send(&message).await.expect("send");
        sent.insert(message_id, message.body);
    }

    // WHEN they are received in batches of up to ten until all have come (a short poll may
    // answer fewer than are visible, so a few rounds are allowed)
    let mut received = Vec::new();
    for _ in 0..20 {
        if received.len() >= sent.len() {
            break;
        }
        let batch = h
            .queue()
            .receive(10, LONG_VISIBILITY)
            .await
            .expect("receive");
        assert!(batch.len() <= 10);
        received.extend(batch);
    }

    // THEN each was received exactly once, for the first time, as sent
    assert_eq!(received.len(), sent.len(), "{}: no duplicates", H::NAME);
    let got: BTreeMap<_, _> = received
        .iter()
        .map(|m| (m.message_id.clone(), m.body.clone()))
        .collect();
    assert_eq!(got, sent);
    assert!(received.iter().all(|m| m.receive_count == 1));
    assert!(h
        .queue()
        .receive(10, LONG_VISIBILITY)
        .await
        .expect("receive")
        .is_empty());

    // AND deleting them all empties the queue
    for message in &received {
        h.queue()
            .delete(&message.receipt_handle)
            .await
            .expect("delete");
    }
    assert_eq!(h.queue().depth().await.expect("depth"), 0);
}

pub async fn a_body_with_a_character_the_queue_refuses_is_refused_and_not_queued<
    H: QueueHarness,
>(
    h: H,
) {
    // GIVEN a body holding U+FFFF, outside the characters SQS accepts
    let odd = event("evt_odd", "{\"description\":\"\u{FFFF}\"}".to_owned());
    assert!(!payonce::ports::queue_accepts(&odd.body));

    // WHEN it is sent, THEN it is refused for its contents (never "unavailable": sending it
    // again as it is never works), and nothing is queued
    let refused = h.queue().send(&odd).await;
    assert!(
        matches!(refused, Err(QueueError::Refused { .. })),
        "{}: {refused:?}",
        H::NAME
    );
    assert_eq!(h.queue().depth().await.expect("depth"), 0, "{}", H::NAME);
    // AND every character it accepts goes through, tabs and astral planes included
    let fine = event("evt_fine", "{\"d\":\"\t\u{E000}\u{1F600}\"}".to_owned());
    assert!(payonce::ports::queue_accepts(&fine.body));
    h.queue().send(&fine).await.expect("send");
    assert_eq!(receive_one(&h, LONG_VISIBILITY).await.body, fine.body);
}

macro_rules! conformance_suite {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(payonce_tests::queue::memory_queue_harness()).await;
                }
            )*
        }
        mod sqs {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(payonce_tests::queue::sqs_queue_harness().await).await;
                }
            )*
        }
    };
}

conformance_suite!(
    sent_message_is_received_with_its_body_attributes_and_id,
    received_message_is_invisible_until_its_visibility_timeout_passes,
    deleted_message_is_gone_for_good,
    message_never_deleted_moves_to_the_dead_letter_queue,
    message_over_the_size_limit_is_refused_and_not_queued,
    receive_on_an_empty_queue_returns_nothing,
    batch_is_received_each_message_exactly_once,
    a_body_with_a_character_the_queue_refuses_is_refused_and_not_queued,
);
