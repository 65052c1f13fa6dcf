//! Table creation for tests, the sandbox and first-run set-up (SAM creates them in AWS).

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;

/// The TTL attribute of the idempotency table (epoch seconds).
pub const IDEMPOTENCY_TTL_ATTRIBUTE: &str = "expires_at";

/// Creates the idempotency table (`pk` string hash key, on-demand, TTL on `expires_at`) if it
/// does not exist yet.
pub async fn create_idempotency_table(
    client: &Client,
    table: &str,
) -> Result<(), aws_sdk_dynamodb::Error> {
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(error) if super::service_code(&error) == Some("ResourceInUseException") => {
            return Ok(())
        }
        Err(error) => return Err(error.into()),
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(IDEMPOTENCY_TTL_ATTRIBUTE)
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}
