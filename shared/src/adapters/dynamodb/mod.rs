//! DynamoDB adapters: item mapping, conditional writes, table creation and request counting.

mod attributes;
mod capacity;
#[cfg(feature = "payments")]
mod charge_key;
#[cfg(feature = "payments")]
mod codec;
#[cfg(feature = "payments")]
mod counters;
mod counting;
#[cfg(feature = "payments")]
mod cursor;
#[cfg(feature = "payments")]
mod expr;
mod idempotency;
#[cfg(feature = "payments")]
mod inflight;
#[cfg(feature = "payments")]
mod operations;
#[cfg(feature = "payments")]
mod payments;
#[cfg(feature = "payments")]
mod refunds;
mod schema;
mod tables;

pub use capacity::{CapacityMeter, Counts};
pub use counting::RequestCounter;
pub use idempotency::{DynamoIdempotencyStore, IdempotencyAttributes};
#[cfg(feature = "payments")]
pub use inflight::INFLIGHT_INDEX;
#[cfg(feature = "payments")]
pub use payments::{DynamoPaymentStore, Tables};
#[cfg(feature = "payments")]
pub use schema::{inflight_shard, INFLIGHT_PARTITION, INFLIGHT_SHARDS};
#[cfg(feature = "payments")]
pub use tables::create_payments_table;
pub use tables::{
    create_idempotency_table, create_idempotency_table_with, IDEMPOTENCY_TTL_ATTRIBUTE,
};

use crate::idempotency::StoreError;
use crate::xray::{XRay, XRayInterceptor};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// The functions' DynamoDB client: `aws`'s settings, with each operation recorded as an X-Ray
/// subsegment when the function is traced (see [`crate::xray`]).
pub fn traced_client(aws: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(aws)
        .interceptor(XRayInterceptor::new("DynamoDB", XRay::from_env()))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// The name of the operation a request is for (`PutItem`, …), as an interceptor sees it.
pub(crate) fn operation_name(cfg: &aws_smithy_types::config_bag::ConfigBag) -> String {
    cfg.load::<aws_smithy_runtime_api::client::orchestrator::Metadata>()
        .map_or_else(|| "unknown".to_owned(), |m| m.name().to_owned())
}

/// Classifies an SDK error: whether DynamoDB rejected the request on a condition, reported a
/// transaction conflict, or failed otherwise.
pub(crate) fn service_code<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> Option<&str> {
    error.as_service_error().and_then(|e| e.code())
}

/// Whether DynamoDB refused the request because its condition did not hold.
pub(crate) fn is_condition_failure<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> bool {
    service_code(error) == Some("ConditionalCheckFailedException")
}

/// DynamoDB's answers to a request that is refused as such, and would be again: sending it once
/// more cannot help. Any other failure (a throttle, a server error, a lost connection) may pass.
/// (`UnrecognizedClientException` and `ItemCollectionSizeLimitExceededException`, which AWS's
/// error table marks as retryable, are not among them.)
const REFUSALS: [&str; 4] = [
    "ValidationException",
    "AccessDeniedException",
    "ResourceNotFoundException",
    "MissingAuthenticationTokenException",
];

/// Maps an SDK error the caller does not handle itself: a transaction conflict becomes the
/// retryable [`StoreError::Conflict`], a refusal [`StoreError::Refused`], anything else a
/// backend error; both keep their source.
pub(crate) fn backend<E, R>(
    operation: &'static str,
    item: &str,
    error: SdkError<E, R>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match service_code(&error) {
        Some("TransactionConflictException") => {
            return StoreError::Conflict {
                item: item.to_owned(),
            }
        }
        Some(code) if REFUSALS.contains(&code) => {
            return StoreError::Refused {
                operation,
                source: Box::new(error),
            }
        }
        _ => {}
    }
    StoreError::Backend {
        operation,
        source: Box::new(error),
    }
}
