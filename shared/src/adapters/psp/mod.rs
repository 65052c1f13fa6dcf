//! PSP adapters: the only code that knows a provider's wire format.

pub mod stripe;

pub use stripe::{StripeConfig, StripePsp};
