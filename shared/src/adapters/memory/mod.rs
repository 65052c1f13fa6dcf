//! The embedded adapters: in-process stores with the same semantics as the DynamoDB ones,
//! for the local sandbox and fast tests.

mod idempotency;
#[cfg(feature = "payments")]
mod operations;
#[cfg(feature = "payments")]
mod payments;
#[cfg(feature = "payments")]
mod queue;
mod tables;

pub use idempotency::MemoryIdempotencyStore;
#[cfg(feature = "payments")]
pub use payments::MemoryPaymentStore;
#[cfg(feature = "payments")]
pub use queue::MemoryQueue;
