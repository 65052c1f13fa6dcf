//! POST /payments and the orders API through the real handlers, fed API Gateway v2 events,
//! against DynamoDB Local and the fake PSP over HTTP.

mod bad_input;
mod charge;
mod checkout;
mod checkout_2c2p;
mod concurrency;
mod limits;
mod operations;
mod orders;
mod stale_reads;
mod store_down;
