//! DynamoDB adapters: item mapping, conditional writes, table creation and request counting.

mod attributes;
mod counting;
mod idempotency;
mod tables;

pub use counting::RequestCounter;
pub use idempotency::DynamoIdempotencyStore;
pub use tables::{create_idempotency_table, IDEMPOTENCY_TTL_ATTRIBUTE};

use aws_sdk_dynamodb::error::SdkError;

/// Classifies an SDK error: whether DynamoDB rejected the request on a condition, reported a
/// transaction conflict, or failed otherwise.
pub(crate) fn service_code<E, R>(error: &SdkError<E, R>) -> Option<&str>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
{
    error.as_service_error().and_then(|e| e.code())
}
