//! An idempotent SQS consumer: each message asks to ship an order (`{"order_id": …}`); SQS
//! delivers at least once, so without idempotency a redelivered message would ship twice.
//! payonce's event wrapper keys each record by its `order_id` and runs the shipment once.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Error, LambdaEvent};
use payonce::idempotency::{IdempotencyStore, IdempotentEvents};
use serde_json::{json, Value};

/// The operation's name in the idempotency table.
pub const SCOPE: &str = "orders.ship";
/// Where each record's key is: the `order_id` of its JSON body.
pub const EVENT_KEY: &str = "/body/order_id";

/// Ships the order of one record: one new shipment item (a fresh id, so only idempotency keeps
/// a redelivery from shipping again), and its id as the stored result.
pub async fn ship(
    shipments: &aws_sdk_dynamodb::Client,
    table: &str,
    record: Value,
) -> Result<Value, Error> {
    let order_id = record["body"]["order_id"]
        .as_str()
        .ok_or("the message has no order_id")?;
    let shipment_id = format!("ship_{}", uuid::Uuid::new_v4().simple());
    shipments
        .put_item()
        .table_name(table)
        .item("id", AttributeValue::S(shipment_id.clone()))
        .item("order_id", AttributeValue::S(order_id.to_owned()))
        .send()
        .await?;
    Ok(json!({ "shipment_id": shipment_id }))
}

/// The function's handler: every record of the batch once, the failed ones reported back.
pub async fn handle<S: IdempotencyStore>(
    events: &IdempotentEvents<S>,
    shipments: &aws_sdk_dynamodb::Client,
    table: &str,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, Error> {
    Ok(events
        .sqs_batch(event, |record| ship(shipments, table, record))
        .await)
}
