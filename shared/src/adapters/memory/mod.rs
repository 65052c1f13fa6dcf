//! The embedded adapters: in-process stores with the same semantics as the DynamoDB ones,
//! for the local sandbox and fast tests.

mod idempotency;
mod payments;
mod queue;

pub use idempotency::MemoryIdempotencyStore;
pub use payments::MemoryPaymentStore;
pub use queue::MemoryQueue;
