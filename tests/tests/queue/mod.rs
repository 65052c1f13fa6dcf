//! The queue port: one conformance suite over moto's SQS and the embedded queue, and the
//! SQS-only set-up (queue creation, error mapping) against moto.

mod conformance;
mod sqs;
