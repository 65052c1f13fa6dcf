//! Table creation for tests, the sandbox and first-run set-up (SAM creates them in AWS).
//! Both tables have the string partition key `pk` and on-demand billing.

use super::IdempotencyAttributes;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;

/// Name of the sparse GSI over payments in `processing`.
pub const INFLIGHT_INDEX: &str = "inflight";

/// The TTL attribute of the idempotency table (epoch seconds).
pub const IDEMPOTENCY_TTL_ATTRIBUTE: &str = "expires_at";

/// Creates the idempotency table (TTL on `expires_at`) if it does not exist yet.
pub async fn create_idempotency_table(
    client: &Client,
    table: &str,
) -> Result<(), aws_sdk_dynamodb::Error> {
    create_idempotency_table_with(client, table, &IdempotencyAttributes::default()).await
}

/// Creates an idempotency table whose attributes are named `names` (partition key, TTL) if it
/// does not exist yet.
pub async fn create_idempotency_table_with(
    client: &Client,
    table: &str,
    names: &IdempotencyAttributes,
) -> Result<(), aws_sdk_dynamodb::Error> {
    if !create_table(client, table, &names.key, false).await? {
        return Ok(());
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(names.expiry.as_ref())
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}

#[cfg(feature = "payments")]
/// Creates the orders-and-payments table, with the sparse in-flight GSI reconcile reads
/// (`inflight` hash, `check_at_ms` range, keys only), if it does not exist yet.
pub async fn create_payments_table(
    client: &Client,
    table: &str,
) -> Result<(), aws_sdk_dynamodb::Error> {
    create_table(client, table, "pk", true).await.map(|_| ())
}

fn key(
    name: &str,
    key_type: KeyType,
) -> Result<KeySchemaElement, aws_sdk_dynamodb::error::BuildError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
}

fn attribute(
    name: &str,
    kind: ScalarAttributeType,
) -> Result<AttributeDefinition, aws_sdk_dynamodb::error::BuildError> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(kind)
        .build()
}

/// Creates the table; false when it already existed.
async fn create_table(
    client: &Client,
    table: &str,
    partition_key: &str,
    inflight_index: bool,
) -> Result<bool, aws_sdk_dynamodb::Error> {
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute(partition_key, ScalarAttributeType::S)?)
        .key_schema(key(partition_key, KeyType::Hash)?);
    if inflight_index {
        request = request
            .attribute_definitions(attribute("inflight", ScalarAttributeType::S)?)
            .attribute_definitions(attribute("check_at_ms", ScalarAttributeType::N)?)
            .global_secondary_indexes(
                GlobalSecondaryIndex::builder()
                    .index_name(INFLIGHT_INDEX)
                    .key_schema(key("inflight", KeyType::Hash)?)
                    .key_schema(key("check_at_ms", KeyType::Range)?)
                    .projection(
                        Projection::builder()
                            .projection_type(ProjectionType::KeysOnly)
                            .build(),
                    )
                    .build()?,
            );
    }
    match request.send().await {
        Ok(_) => Ok(true),
        Err(error) if super::service_code(&error) == Some("ResourceInUseException") => Ok(false),
        Err(error) => Err(error.into()),
    }
}
