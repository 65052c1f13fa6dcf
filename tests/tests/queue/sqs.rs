//! SQS-only behaviour against moto: creating the queue pair (attributes, redrive policy,
//! running it again) and how SDK failures surface through the port.

use aws_sdk_sqs::types::QueueAttributeName;
use payonce::adapters::dynamodb::RequestCounter;
use payonce::adapters::sqs::{create_queue_with_dlq, SqsQueue};
use payonce::ports::{OutgoingMessage, QueueError, QueueReceive, QueueSend};
use payonce_tests::queue::{sqs_client, unique_queue, MAX_MESSAGE_BYTES};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

async fn attributes(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> HashMap<QueueAttributeName, String> {
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("read the queue's attributes")
        .attributes
        .unwrap_or_default()
}

#[tokio::test]
async fn queue_pair_is_created_with_its_redrive_policy_and_again_harmlessly() {
    // GIVEN no queue of that name
    let client = sqs_client(&RequestCounter::new());
    let name = unique_queue("setup");

    // WHEN the pair is created
    let pair = create_queue_with_dlq(
        &client,
        &name,
        3,
        Duration::from_secs(30),
        MAX_MESSAGE_BYTES,
    )
    .await
    .expect("create the pair");

    // THEN the queue redrives to the DLQ after 3 receives, with the asked timeout and size
    assert!(pair.queue_url.ends_with(&name), "{}", pair.queue_url);
    assert!(
        pair.dlq_url.ends_with(&format!("{name}-dlq")),
        "{}",
        pair.dlq_url
    );
    let queue = attributes(&client, &pair.queue_url).await;
    let dlq = attributes(&client, &pair.dlq_url).await;
    let policy: serde_json::Value =
        serde_json::from_str(&queue[&QueueAttributeName::RedrivePolicy])
            .expect("the redrive policy is JSON");
    assert_eq!(
        policy["deadLetterTargetArn"].as_str(),
        Some(dlq[&QueueAttributeName::QueueArn].as_str())
    );
    assert_eq!(policy["maxReceiveCount"].to_string().trim_matches('"'), "3");
    assert_eq!(queue[&QueueAttributeName::VisibilityTimeout], "30");
    assert_eq!(
        queue[&QueueAttributeName::MaximumMessageSize],
        MAX_MESSAGE_BYTES.to_string()
    );
    assert_eq!(
        dlq[&QueueAttributeName::MaximumMessageSize],
        MAX_MESSAGE_BYTES.to_string()
    );

    // WHEN it is created again, identically, THEN the same queues are answered
    let again = create_queue_with_dlq(
        &client,
        &name,
        3,
        Duration::from_secs(30),
        MAX_MESSAGE_BYTES,
    )
    .await
    .expect("create the pair again");
    assert_eq!(again, pair);

    // WHEN it is created again with other settings (a sub-second timeout rounds up),
    // THEN the existing queues take them
    let changed = create_queue_with_dlq(
        &client,
        &name,
        5,
        Duration::from_millis(1_500),
        MAX_MESSAGE_BYTES,
    )
    .await
    .expect("create the pair with other settings");
    assert_eq!(changed, pair);
    let queue = attributes(&client, &pair.queue_url).await;
    assert_eq!(queue[&QueueAttributeName::VisibilityTimeout], "2");
    let policy: serde_json::Value =
        serde_json::from_str(&queue[&QueueAttributeName::RedrivePolicy])
            .expect("the redrive policy is JSON");
    assert_eq!(policy["maxReceiveCount"].to_string().trim_matches('"'), "5");
}

#[tokio::test]
async fn a_missing_queue_is_unavailable_with_the_sdk_error_as_source() {
    // GIVEN an adapter pointed at a queue that does not exist
    let client = sqs_client(&RequestCounter::new());
    let pair = create_queue_with_dlq(
        &client,
        &unique_queue("gone"),
        2,
        Duration::from_secs(1),
        MAX_MESSAGE_BYTES,
    )
    .await
    .expect("create the pair");
    let missing = format!("{}-missing", pair.queue_url);
    let queue = SqsQueue::new(client, missing, MAX_MESSAGE_BYTES);
    let message = OutgoingMessage {
        body: "{}".to_owned(),
        attributes: BTreeMap::new(),
    };

    // WHEN each operation is attempted, THEN each fails as Unavailable, naming the operation
    // and keeping the SDK's error
    let failures = [
        ("SendMessage", queue.send(&message).await.err()),
        (
            "ReceiveMessage",
            queue.receive(1, Duration::from_secs(1)).await.err(),
        ),
        ("DeleteMessage", queue.delete("handle").await.err()),
        ("GetQueueAttributes", queue.depth().await.err()),
    ];
    for (expected, failure) in failures {
        match failure {
            Some(QueueError::Unavailable { operation, source }) => {
                assert_eq!(operation, expected);
                let text = format!("{source:?}");
                assert!(
                    text.contains("NonExistentQueue") || text.contains("QueueDoesNotExist"),
                    "{expected}: {text}"
                );
            }
            other => panic!("{expected}: expected Unavailable, got {other:?}"),
        }
    }
}
