//! The example against DynamoDB Local: a redelivered message ships nothing more, a message whose
//! order is being shipped elsewhere is retried by SQS, each with its budget of requests.

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use example_sqs_consumer::{handle, ship, EVENT_KEY, SCOPE};
use lambda_runtime::{Context, LambdaEvent};
use payonce::adapters::dynamodb::{
    create_idempotency_table, DynamoIdempotencyStore, RequestCounter,
};
use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotentEvents};
use payonce_tests::{dynamodb_client, unique_table};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Notify;

struct Setup {
    counter: RequestCounter,
    client: aws_sdk_dynamodb::Client,
    shipments_table: String,
    events: IdempotentEvents<DynamoIdempotencyStore>,
}

async fn setup() -> Setup {
    let counter = RequestCounter::new();
    let client = dynamodb_client(&counter);
    let idempotency_table = unique_table("example-idem");
    let shipments_table = unique_table("example-ship");
    create_idempotency_table(&client, &idempotency_table)
        .await
        .expect("idempotency table");
    client
        .create_table()
        .table_name(&shipments_table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("shipments table");
    counter.reset();
    let events = IdempotentEvents::new(
        Idempotency::new(
            DynamoIdempotencyStore::new(client.clone(), &idempotency_table),
            IdempotencyConfig::default(),
        ),
        SCOPE,
        EVENT_KEY,
    );
    Setup {
        counter,
        client,
        shipments_table,
        events,
    }
}

impl Setup {
    fn requests(&self) -> BTreeMap<String, u64> {
        let counts = self.counter.by_operation();
        self.counter.reset();
        counts
    }

    /// Orders shipped, one entry per shipment item.
    async fn shipped(&self) -> Vec<String> {
        let scan = self
            .client
            .scan()
            .table_name(&self.shipments_table)
            .send()
            .await
            .expect("scan");
        self.counter.reset();
        let mut orders: Vec<String> = scan
            .items()
            .iter()
            .map(|item| item["order_id"].as_s().expect("an order id").clone())
            .collect();
        orders.sort();
        orders
    }
}

/// An SQS event of messages (id, body), as Lambda delivers it.
fn batch(messages: &[(&str, &str)]) -> LambdaEvent<SqsEvent> {
    let records: Vec<_> = messages
        .iter()
        .map(|(id, body)| json!({"messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                                 "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                                 "eventSource": "aws:sqs"}))
        .collect();
    let event = serde_json::from_value(json!({ "Records": records })).expect("an SQS event");
    LambdaEvent::new(event, Context::default())
}

fn ops(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(op, n)| ((*op).to_owned(), *n)).collect()
}

fn failed(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

#[tokio::test]
async fn a_redelivered_message_ships_nothing_more() {
    let setup = setup().await;
    let messages = [
        ("m1", r#"{"order_id":"ord_a"}"#),
        ("m2", r#"{"order_id":"ord_b"}"#),
        ("m3", r#"{"order_id": "ord_a", "note": "sent twice"}"#),
    ];
    let response = handle(
        &setup.events,
        &setup.client,
        &setup.shipments_table,
        batch(&messages),
    )
    .await
    .unwrap();
    assert!(failed(&response).is_empty());
    assert_eq!(setup.shipped().await, ["ord_a", "ord_b"]);
    // Two new orders: claim, shipment, completion each; the repeat of ord_a: its claim.
    // (shipped() reset the counter after its scan, so count again from a fresh delivery.)
    let response = handle(
        &setup.events,
        &setup.client,
        &setup.shipments_table,
        batch(&messages),
    )
    .await
    .unwrap();
    assert!(failed(&response).is_empty());
    assert_eq!(
        setup.requests(),
        ops(&[("PutItem", 3)]),
        "a redelivery costs one claim per record"
    );
    assert_eq!(setup.shipped().await, ["ord_a", "ord_b"]);

    let fresh = handle(
        &setup.events,
        &setup.client,
        &setup.shipments_table,
        batch(&[("m4", r#"{"order_id":"ord_c"}"#)]),
    )
    .await
    .unwrap();
    assert!(failed(&fresh).is_empty());
    assert_eq!(setup.requests(), ops(&[("PutItem", 2), ("UpdateItem", 1)]));
}

#[tokio::test]
async fn a_message_whose_order_ships_elsewhere_or_has_no_key_is_given_back_to_sqs() {
    let setup = setup().await;
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let held = async {
        setup
            .events
            .sqs_batch(batch(&[("m1", r#"{"order_id":"ord_a"}"#)]), |record| {
                let (started, release) = (Arc::clone(&started), Arc::clone(&release));
                let (client, table) = (setup.client.clone(), setup.shipments_table.clone());
                async move {
                    // Only the delivery that claimed the order gets here.
                    started.notify_one();
                    release.notified().await;
                    ship(&client, &table, record).await
                }
            })
            .await
    };
    let concurrent = async {
        started.notified().await;
        let messages = [
            ("m2", r#"{"order_id":"ord_a"}"#),
            ("m3", r#"{"no_order": true}"#),
            ("m4", "not json"),
        ];
        let response = handle(
            &setup.events,
            &setup.client,
            &setup.shipments_table,
            batch(&messages),
        )
        .await
        .unwrap();
        release.notify_one();
        response
    };
    let (first, second) = tokio::join!(held, concurrent);
    assert!(failed(&first).is_empty());
    assert_eq!(failed(&second), ["m2", "m3", "m4"]);
    assert_eq!(setup.shipped().await, ["ord_a"]);

    // SQS redelivers m2 later: the stored result answers it.
    let later = handle(
        &setup.events,
        &setup.client,
        &setup.shipments_table,
        batch(&[("m2", r#"{"order_id":"ord_a"}"#)]),
    )
    .await
    .unwrap();
    assert!(failed(&later).is_empty());
    assert_eq!(setup.shipped().await, ["ord_a"]);
}
