//! The cleanup function (EventBridge schedule): removes expired records TTL has not removed yet.

pub mod handler;
