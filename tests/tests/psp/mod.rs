//! The Stripe adapter's outcome classes: over a transport scripted call by call (what a real
//! network may do between two calls), and over HTTP against the strict fake PSP.

mod scripted;
mod stripe;
