//! The SQS adapter (to be written).
