//! PSP adapters: the only code that knows a provider's wire format.

pub mod stripe;
pub mod stripe_webhook;

pub use stripe::{StripeConfig, StripePsp};
pub use stripe_webhook::StripeWebhooks;
