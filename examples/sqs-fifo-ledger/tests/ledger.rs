//! The example against DynamoDB Local: entries are applied once each and in order per account;
//! after a failed entry the rest of the batch waits for it, and a redelivery applies nothing twice.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use example_sqs_fifo_ledger::{apply, handle, EVENT_KEY, SCOPE};
use lambda_runtime::{Context, LambdaEvent};
use payonce::adapters::dynamodb::RequestCounter;
use payonce::adapters::dynamodb::{create_idempotency_table, DynamoIdempotencyStore};
use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotentEvents};
use payonce_tests::{dynamodb_client, unique_table};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

struct Setup {
    client: aws_sdk_dynamodb::Client,
    accounts_table: String,
    events: IdempotentEvents<DynamoIdempotencyStore>,
}

async fn setup() -> Setup {
    let client = dynamodb_client(&RequestCounter::new());
    let idempotency_table = unique_table("example-idem");
    let accounts_table = unique_table("example-accounts");
    create_idempotency_table(&client, &idempotency_table)
        .await
        .expect("idempotency table");
    client
        .create_table()
        .table_name(&accounts_table)
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
        .expect("accounts table");
    let events = IdempotentEvents::new(
        Idempotency::new(
            DynamoIdempotencyStore::new(client.clone(), &idempotency_table),
            IdempotencyConfig::default(),
        ),
        SCOPE,
        EVENT_KEY,
    );
    Setup {
        client,
        accounts_table,
        events,
    }
}

impl Setup {
    /// The account's ledger (entry ids in the order applied) and balance.
    async fn account(&self, id: &str) -> (Vec<String>, i64) {
        let item = self
            .client
            .get_item()
            .table_name(&self.accounts_table)
            .key("id", AttributeValue::S(id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .expect("get the account")
            .item
            .unwrap_or_default();
        let entries = item
            .get("entries")
            .and_then(|e| e.as_l().ok())
            .map(|list| list.iter().map(|v| v.as_s().unwrap().clone()).collect())
            .unwrap_or_default();
        let balance = item
            .get("balance")
            .and_then(|b| b.as_n().ok())
            .map(|n| n.parse().unwrap())
            .unwrap_or(0);
        (entries, balance)
    }
}

fn entry(message_id: &str, entry_id: &str, account: &str, amount: i64) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(message_id.to_owned());
    message.receipt_handle = Some(format!("receipt-{message_id}-{entry_id}"));
    message.body =
        Some(json!({"entry_id": entry_id, "account": account, "amount": amount}).to_string());
    message.attributes = HashMap::from([("MessageGroupId".to_owned(), account.to_owned())]);
    message
}

fn batch(messages: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    event.records = messages;
    LambdaEvent::new(event, Context::default())
}

fn failed(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

#[tokio::test]
async fn a_failed_entry_holds_back_the_rest_and_a_redelivery_applies_nothing_twice() {
    let setup = setup().await;
    let table = setup.accounts_table.clone();
    // The second entry fails once (a throttle, say), as SQS would see it.
    let flaky = AtomicBool::new(true);
    let work = |record: serde_json::Value| {
        let fail = record["body"]["entry_id"] == "ent_2" && flaky.swap(false, Ordering::SeqCst);
        let (client, table) = (setup.client.clone(), table.clone());
        async move {
            if fail {
                return Err("throttled".into());
            }
            apply(&client, &table, record).await
        }
    };
    let first = vec![
        entry("m1", "ent_1", "acct_a", 500),
        entry("m2", "ent_2", "acct_a", -200),
        entry("m3", "ent_3", "acct_a", 50),
        entry("m4", "ent_9", "acct_b", 10),
    ];
    let answer = setup.events.sqs_fifo_batch(batch(first), work).await;
    assert_eq!(
        failed(&answer),
        ["m2", "m3", "m4"],
        "the failed entry and everything after it"
    );
    assert_eq!(
        setup.account("acct_a").await,
        (vec!["ent_1".to_owned()], 500)
    );
    assert_eq!(
        setup.account("acct_b").await,
        (vec![], 0),
        "not run after the failure"
    );

    // SQS delivers the reported messages again, in order, with the first one once more.
    let again = vec![
        entry("m1", "ent_1", "acct_a", 500),
        entry("m2", "ent_2", "acct_a", -200),
        entry("m3", "ent_3", "acct_a", 50),
        entry("m4", "ent_9", "acct_b", 10),
    ];
    let answer = setup.events.sqs_fifo_batch(batch(again), work).await;
    assert_eq!(failed(&answer), Vec::<String>::new());
    assert_eq!(
        setup.account("acct_a").await,
        (
            vec!["ent_1".to_owned(), "ent_2".to_owned(), "ent_3".to_owned()],
            350
        ),
        "each entry once, in order"
    );
    assert_eq!(
        setup.account("acct_b").await,
        (vec!["ent_9".to_owned()], 10)
    );
}

#[tokio::test]
async fn the_sample_event_applies_its_duplicate_once() {
    let setup = setup().await;
    let sample: SqsEvent = serde_json::from_str(include_str!("../events/ledger.json")).unwrap();
    let answer = handle(
        &setup.events,
        &setup.client,
        &setup.accounts_table,
        LambdaEvent::new(sample, Context::default()),
    )
    .await
    .unwrap();
    assert_eq!(failed(&answer), Vec::<String>::new());
    assert_eq!(
        setup.account("acct_example").await,
        (vec!["ent_1".to_owned(), "ent_2".to_owned()], 300)
    );
}
