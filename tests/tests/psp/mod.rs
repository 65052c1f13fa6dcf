//! The PSP adapters' outcome classes: Stripe's over a transport scripted call by call (what a
//! real network may do between two calls) and over HTTP against the strict fake PSP; Omise's over
//! HTTP against the fake PSP's Omise face.

mod omise;
mod scripted;
mod stripe;
