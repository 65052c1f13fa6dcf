//! An idempotent SQS FIFO consumer: each message is a ledger entry for an account
//! (`{"entry_id": …, "account": …, "amount": …}`, the account as its `MessageGroupId`). SQS FIFO
//! delivers a group in order but still at least once, so two things must hold: an entry is
//! applied once however often it is delivered (payonce keys each record by its `entry_id`), and
//! an entry is never applied before the one sent ahead of it in its group, even when that one
//! failed (`sqs_fifo_batch` runs none of the later messages of the batch after a failure and
//! reports them, so SQS delivers them again, in order).

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Error, LambdaEvent};
use payonce::idempotency::{IdempotencyStore, IdempotentEvents};
use serde_json::{json, Value};

/// The operation's name in the idempotency table.
pub const SCOPE: &str = "ledger.apply";
/// Where each record's key is: the `entry_id` of its JSON body.
pub const EVENT_KEY: &str = "/body/entry_id";

/// Applies one entry: appends it to its account's ledger and adds its amount to the balance.
/// Neither is idempotent by itself; the layer keeps a redelivery from applying it twice.
pub async fn apply(
    accounts: &aws_sdk_dynamodb::Client,
    table: &str,
    record: Value,
) -> Result<Value, Error> {
    let body = &record["body"];
    let (Some(entry_id), Some(account), Some(amount)) = (
        body["entry_id"].as_str(),
        body["account"].as_str(),
        body["amount"].as_i64(),
    ) else {
        return Err("the message is not a ledger entry".into());
    };
    let updated = accounts
        .update_item()
        .table_name(table)
        .key("id", AttributeValue::S(account.to_owned()))
        .update_expression(
            "SET entries = list_append(if_not_exists(entries, :none), :entry) ADD balance :amount",
        )
        .expression_attribute_values(":none", AttributeValue::L(Vec::new()))
        .expression_attribute_values(
            ":entry",
            AttributeValue::L(vec![AttributeValue::S(entry_id.to_owned())]),
        )
        .expression_attribute_values(":amount", AttributeValue::N(amount.to_string()))
        .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
        .send()
        .await?;
    let balance = updated
        .attributes()
        .and_then(|a| a.get("balance"))
        .and_then(|b| b.as_n().ok())
        .and_then(|n| n.parse::<i64>().ok());
    Ok(json!({ "entry_id": entry_id, "balance": balance }))
}

/// The function's handler: the batch in order, stopping at the first failure; that message
/// and every later one are reported back.
pub async fn handle<S: IdempotencyStore>(
    events: &IdempotentEvents<S>,
    accounts: &aws_sdk_dynamodb::Client,
    table: &str,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, Error> {
    Ok(events
        .sqs_fifo_batch(event, |record| apply(accounts, table, record))
        .await)
}
