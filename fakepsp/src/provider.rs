//! Which PSP a fake PSP instance speaks (Stripe, Omise, 2C2P, Square or PayPal), and the
//! credentials each face accepts and signs with unless told otherwise.

/// The API key the fake PSP accepts unless told otherwise.
pub const DEFAULT_API_KEY: &str = "sk_test_payonce_fake";

/// The webhook signing secret the fake PSP uses unless told otherwise.
pub const DEFAULT_WEBHOOK_SECRET: &str = "whsec_payonce_fake";

/// The webhook secret of the Omise face unless told otherwise: standard base64, as Omise shows
/// its secrets (it decodes to the 32 bytes `payonce-fake-omise-webhook-key!!`).
pub const DEFAULT_OMISE_WEBHOOK_SECRET: &str = "cGF5b25jZS1mYWtlLW9taXNlLXdlYmhvb2sta2V5ISE=";

/// The merchant id (`merchantID`) the 2C2P face knows unless told otherwise.
pub const DEFAULT_TWOC2P_MERCHANT_ID: &str = "PAYONCEFAKE01";

/// The merchant secret key of the 2C2P face unless told otherwise ([`FakePspConfig::twoc2p`](crate::FakePspConfig::twoc2p)):
/// 64 characters, used as text for HS256, like the keys 2C2P issues.
pub const DEFAULT_TWOC2P_SECRET_KEY: &str =
    "C2P0000000000000000000000000FAKEPSPKEY00000000000000000000000000";

/// The webhook signature key of the Square face unless told otherwise
/// ([`FakePspConfig::square`](crate::FakePspConfig::square)): the subscription's signature key,
/// used as text for HMAC-SHA256 (see [`sign_square_webhook`](crate::sign_square_webhook)).
pub const DEFAULT_SQUARE_SIGNATURE_KEY: &str = "payonce_fake_square_signature_key";

/// The OAuth client id the PayPal face accepts unless told otherwise
/// ([`FakePspConfig::paypal`](crate::FakePspConfig::paypal)); its client secret is the
/// [`api_key`](crate::FakePspConfig::api_key), [`DEFAULT_API_KEY`] by default.
pub const DEFAULT_PAYPAL_CLIENT_ID: &str = "payonce_fake_paypal_client";

/// The wire format one fake PSP instance speaks. Whatever the face, the charges, refunds, test
/// tokens, time-driven transitions, search lag and injected failures are those of the one
/// [`model`](crate::model); only the requests understood and the objects, errors and webhooks written differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Stripe's PaymentIntents and Refunds under `/v1` (the default).
    #[default]
    Stripe,
    /// Omise's Charges, Refunds and Search at the API root (see the `faces::omise` module).
    Omise,
    /// 2C2P PGW v4.3's Payment Token, Do Payment and Payment Inquiry under `/payment/4.3`, and
    /// its backend notification; no refunds (see the `faces::twoc2p` module).
    TwoC2p,
    /// Square's Payments and Refunds API under `/v2`, with delayed capture and cancel by
    /// idempotency key (see the `faces::square` module).
    Square,
    /// PayPal's OAuth token endpoint, Orders v2 (`/v2/checkout/orders`) and Payments v2
    /// (`/v2/payments`: authorizations, captures, refunds), with webhooks signed SHA256withRSA
    /// (see the `faces::paypal` module).
    PayPal,
}

impl Provider {
    /// The provider's name as payonce stores it, and as `GET /_fake/charges` reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Omise => "omise",
            Self::TwoC2p => "2c2p",
            Self::Square => "square",
            Self::PayPal => "paypal",
        }
    }
}
