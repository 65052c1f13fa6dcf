//! PSP adapters: the only code that knows a provider's wire format.

pub mod b64;
pub mod configured;
mod keyed;
pub mod omise;
mod omise_operations;
pub mod omise_webhook;
pub mod paypal;
pub mod paypal_events;
pub mod paypal_webhook;
pub mod square;
pub mod square_webhook;
pub mod stripe;
mod stripe_operations;
pub mod stripe_webhook;
pub mod transport;
pub mod twoc2p;
pub mod twoc2p_ids;
pub mod twoc2p_maintenance;
mod twoc2p_settle;
pub mod twoc2p_webhook;

pub use configured::{ConfiguredPsp, ParseOnlyWebhooks};
pub use omise::{OmiseConfig, OmisePsp};
pub use omise_webhook::OmiseWebhooks;
pub use paypal::{PayPalConfig, PayPalPsp};
pub use paypal_webhook::{HttpCertFetch, PayPalWebhooks};
pub use square::{SquareConfig, SquarePsp};
pub use square_webhook::SquareWebhooks;
pub use stripe::{StripeConfig, StripePsp};
pub use stripe_webhook::StripeWebhooks;
pub use twoc2p::{TwoC2pConfig, TwoC2pPsp};
pub use twoc2p_webhook::TwoC2pNotifications;
