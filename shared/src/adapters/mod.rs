//! Adapters: the only code that knows a backend's wire format or SDK.

pub mod dynamodb;
pub mod faults;
pub mod memory;
pub mod psp;
pub mod secrets;
pub mod sqs;
