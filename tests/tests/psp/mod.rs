//! The PSP adapters' outcome classes: Stripe's over a transport scripted call by call (what a
//! real network may do between two calls) and over HTTP against the strict fake PSP; Omise's over
//! HTTP against the fake PSP's Omise face; 2C2P's over HTTP against its 2C2P face; PayPal's over
//! HTTP against its PayPal face, every call recorded.

mod omise;
mod paypal;
mod scripted;
mod stripe;
mod twoc2p;

use payonce::ports::{ChargeRequest, CheckedAmount};

/// What a PSP should report it charged for `request`.
fn charged(request: &ChargeRequest) -> CheckedAmount {
    CheckedAmount {
        minor: request.amount,
        currency: request.currency.as_str().to_owned(),
    }
}
