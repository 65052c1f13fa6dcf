//! Adapters: the only code that knows a backend's wire format or SDK.

#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod faults;
pub mod memory;
#[cfg(feature = "psp")]
pub mod psp;
#[cfg(feature = "psp")]
pub mod secrets;
#[cfg(feature = "sqs")]
pub mod sqs;

/// A payment's view as the idempotency record mirrors it, with an encoding failure as a store error.
#[cfg(feature = "payments")]
pub(crate) fn encode_view(
    payment: &crate::domain::Payment,
) -> Result<String, crate::idempotency::StoreError> {
    payment
        .view_json()
        .map_err(|e| crate::idempotency::StoreError::Backend {
            operation: "encode payment view",
            source: Box::new(e),
        })
}
