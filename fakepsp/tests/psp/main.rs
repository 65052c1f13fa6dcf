//! End-to-end tests of the fake PSP over real HTTP: each test starts its own server on
//! 127.0.0.1:0 and talks to it with reqwest, as payonce's PSP client will.
//!
//! One test binary with modules (rather than one binary per file) keeps link time down.

mod support;

mod actions;
mod api;
mod binary;
mod faults;
mod idempotency;
mod omise;
mod paypal;
mod refunds;
mod square;
mod webhooks;
