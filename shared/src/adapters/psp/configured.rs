//! The one PSP a deployment uses, chosen at start-up (`PSP`: `stripe`, `omise`, `2c2p` or
//! `square`; see [`crate::config::psp`]): an enum over the adapters that implements [`Psp`] by handing
//! every call to the adapter it holds, so the services stay generic over one `P: Psp` and a
//! function binary needs no other code path per provider.
//!
//! Also the processor's side of webhooks: [`ParseOnlyWebhooks`] reads events the receiver has
//! already verified, for the schemes whose reading needs no secret (Stripe, Omise, Square).

use super::transport::{HttpTransport, PspTransport};
use super::{OmisePsp, PayPalPsp, SquarePsp, StripePsp, TwoC2pPsp};
use crate::domain::{Payment, RefundSettlement};
use crate::ports::{
    ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspError, PspEvent, PspLookup,
    PspOutcome, RefundOutcome, RefundRequest, SiblingSource, SignatureError, WebhookScheme,
};
use async_trait::async_trait;
use lambda_http::http::HeaderMap;
use std::time::Duration;

/// The configured PSP adapter (one per deployment).
#[derive(Debug)]
pub enum ConfiguredPsp<T = HttpTransport> {
    /// Stripe PaymentIntents and Refunds.
    Stripe(StripePsp<T>),
    /// Omise (Opn Payments) charges and refunds.
    Omise(OmisePsp<T>),
    /// 2C2P PGW v4.3 (no refunds: see [`TwoC2pPsp`]).
    TwoC2p(TwoC2pPsp<T>),
    /// Square's Payments and Refunds.
    Square(SquarePsp<T>),
    /// PayPal's Orders and Payments.
    PayPal(PayPalPsp<T>),
}

/// Hands the call to the adapter held, whichever it is.
macro_rules! delegate {
    ($self:ident, $psp:ident => $call:expr) => {
        match $self {
            ConfiguredPsp::Stripe($psp) => $call,
            ConfiguredPsp::Omise($psp) => $call,
            ConfiguredPsp::TwoC2p($psp) => $call,
            ConfiguredPsp::Square($psp) => $call,
            ConfiguredPsp::PayPal($psp) => $call,
        }
    };
}

#[async_trait]
impl<T: PspTransport> Psp for ConfiguredPsp<T> {
    fn name(&self) -> &str {
        delegate!(self, psp => psp.name())
    }

    fn kind(&self) -> crate::domain::PspKind {
        delegate!(self, psp => psp.kind())
    }

    fn supports_refunds(&self) -> bool {
        delegate!(self, psp => psp.supports_refunds())
    }

    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        delegate!(self, psp => psp.create_charge(request, timeout).await)
    }

    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        delegate!(self, psp => psp.lookup(payment_id).await)
    }

    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        delegate!(self, psp => psp.lookup_payment(payment).await)
    }

    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        delegate!(self, psp => psp.fence(request).await)
    }

    fn charge_keys_kept(&self) -> Duration {
        delegate!(self, psp => psp.charge_keys_kept())
    }

    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        delegate!(self, psp => psp.cancel(provider_payment_id).await)
    }

    fn captures_later(&self) -> bool {
        delegate!(self, psp => psp.captures_later())
    }

    fn moves_money_only_under_a_stored_id(&self) -> bool {
        delegate!(self, psp => psp.moves_money_only_under_a_stored_id())
    }

    fn captures_partially(&self) -> bool {
        delegate!(self, psp => psp.captures_partially())
    }

    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        delegate!(self, psp => psp.operate(request, timeout).await)
    }

    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        delegate!(self, psp => psp.create_refund(request, timeout).await)
    }

    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        delegate!(self, psp => psp.lookup_refund(provider_payment_id, refund_id).await)
    }

    async fn create_refund_among(
        &self,
        request: &RefundRequest,
        siblings: &dyn SiblingSource,
        timeout: Duration,
    ) -> RefundOutcome {
        delegate!(self, psp => psp.create_refund_among(request, siblings, timeout).await)
    }

    async fn lookup_refund_among(
        &self,
        request: &RefundRequest,
        siblings: &dyn SiblingSource,
    ) -> Result<Option<RefundSettlement>, PspError> {
        delegate!(self, psp => psp.lookup_refund_among(request, siblings).await)
    }
}

/// A webhook scheme that only reads: for the processor, which takes events off the queue only
/// the receiver writes to, after the receiver verified them. It holds no secret, so it never
/// verifies anything ([`WebhookScheme::verify`] always refuses): given to a receiver by mistake,
/// it would refuse every delivery rather than accept unsigned ones.
pub struct ParseOnlyWebhooks {
    provider: String,
    parse: fn(&[u8]) -> Result<PspEvent, serde_json::Error>,
}

impl std::fmt::Debug for ParseOnlyWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParseOnlyWebhooks")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl ParseOnlyWebhooks {
    /// Reads Stripe events (`stripe_webhook::parse_event`) under `provider`.
    pub fn stripe(provider: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            parse: super::stripe_webhook::parse_event,
        }
    }

    /// Reads Omise events (`omise_webhook::parse_event`) under `provider`.
    pub fn omise(provider: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            parse: super::omise_webhook::parse_event,
        }
    }

    /// Reads PayPal events (`paypal_events::parse_event`) under `provider`.
    pub fn paypal(provider: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            parse: super::paypal_events::parse_event,
        }
    }

    /// Reads Square events (`square_webhook::parse_event`) under `provider`.
    pub fn square(provider: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            parse: super::square_webhook::parse_event,
        }
    }
}

impl WebhookScheme for ParseOnlyWebhooks {
    fn provider(&self) -> &str {
        &self.provider
    }

    /// Never verifies: this scheme holds no secret.
    fn verify(
        &self,
        _headers: &HeaderMap,
        _body: &[u8],
        _now_s: i64,
    ) -> Result<(), SignatureError> {
        Err(SignatureError::NoValidSignature)
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        (self.parse)(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::psp::transport::scripted::{reply, Scripted};
    use crate::adapters::psp::twoc2p::REFUNDS_UNSUPPORTED;
    use crate::domain::{Currency, RefundReason};
    use serde_json::json;

    const TIMEOUT: Duration = Duration::from_secs(5);

    fn stripe(transport: Scripted) -> ConfiguredPsp<Scripted> {
        ConfiguredPsp::Stripe(StripePsp::with_transport(
            transport,
            "stripe",
            "sk_test_configured",
            TIMEOUT,
        ))
    }

    fn omise(transport: Scripted) -> ConfiguredPsp<Scripted> {
        ConfiguredPsp::Omise(OmisePsp::with_transport(
            transport,
            "omise",
            "skey_test_configured",
            TIMEOUT,
        ))
    }

    fn twoc2p(transport: Scripted) -> ConfiguredPsp<Scripted> {
        ConfiguredPsp::TwoC2p(
            TwoC2pPsp::with_transport(transport, "2c2p", "JT01", "configured-key", TIMEOUT)
                .unwrap(),
        )
    }

    fn calls(psp: &ConfiguredPsp<Scripted>) -> Vec<crate::adapters::psp::transport::WireCall> {
        match psp {
            ConfiguredPsp::Stripe(p) => p.transport().calls(),
            ConfiguredPsp::Omise(p) => p.transport().calls(),
            ConfiguredPsp::TwoC2p(p) => p.transport().calls(),
            ConfiguredPsp::Square(p) => p.transport().calls(),
            ConfiguredPsp::PayPal(p) => p.transport().calls(),
        }
    }

    fn charge() -> ChargeRequest {
        ChargeRequest {
            payment_id: "pay_0123456789abcdef0123456789abcdef".into(),
            amount: 2000,
            currency: Currency::Thb,
            payment_method: "tokn_test_1".into(),
            idempotency_key: "payonce-charge-pay_0123456789abcdef0123456789abcdef".into(),
            return_url: None,
            capture: crate::domain::CaptureMethod::Automatic,
            earlier_may_run: false,
        }
    }

    fn refund() -> RefundRequest {
        RefundRequest {
            payment_id: "pay_0123456789abcdef0123456789abcdef".into(),
            refund_id: "ref_1".into(),
            provider_payment_id: "chrg_test_1".into(),
            amount: 2000,
            currency: Currency::Thb,
            reason: Some(RefundReason::RequestedByCustomer),
            idempotency_key: "payonce-refund-pay_0123456789abcdef0123456789abcdef-1".into(),
            resend: false,
            provider_refund_id: None,
            captured: 0,
        }
    }

    #[test]
    fn each_variant_answers_with_its_adapters_name_and_refund_support() {
        // GIVEN one configured PSP of each kind
        // THEN each names itself as its adapter does, and only 2C2P refuses refunds
        let answers: Vec<(String, bool)> = [
            stripe(Scripted::new([])),
            omise(Scripted::new([])),
            twoc2p(Scripted::new([])),
        ]
        .iter()
        .map(|psp| (psp.name().to_owned(), psp.supports_refunds()))
        .collect();
        assert_eq!(
            answers,
            [
                ("stripe".to_owned(), true),
                ("omise".to_owned(), true),
                ("2c2p".to_owned(), false),
            ]
        );
    }

    #[tokio::test]
    async fn calls_reach_the_adapter_held_and_speak_its_wire_format() {
        // GIVEN a configured Stripe whose PSP answers a fence with 400 idempotency_error
        let psp = stripe(Scripted::new([reply(
            400,
            json!({"error": {"type": "idempotency_error", "message": "scripted"}}),
        )]));
        // WHEN it fences a key
        let fence = psp.fence(&charge()).await.unwrap();
        // THEN Stripe's PaymentIntents create was sent, and read as Stripe reads it
        assert_eq!(fence, Fence::KeyUsed);
        let sent = calls(&psp);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].path, "/v1/payment_intents");

        // GIVEN a configured Omise: it has no fence, and says so without a call
        let psp = omise(Scripted::new([]));
        assert_eq!(psp.fence(&charge()).await.unwrap(), Fence::Unprovable);
        assert!(calls(&psp).is_empty());
        // AND it cancels nothing
        assert!(psp.cancel("chrg_test_1").await.is_err());

        // GIVEN a configured 2C2P: a refund is never sent
        let psp = twoc2p(Scripted::new([]));
        assert_eq!(
            psp.create_refund(&refund(), TIMEOUT).await,
            RefundOutcome::NotSent {
                reason: REFUNDS_UNSUPPORTED.to_owned()
            }
        );
        assert!(calls(&psp).is_empty());
    }

    #[test]
    fn a_parse_only_scheme_reads_but_never_verifies() {
        // GIVEN the processor's Stripe and Omise schemes
        let stripe = ParseOnlyWebhooks::stripe("stripe");
        let omise = ParseOnlyWebhooks::omise("omise");
        // THEN neither verifies anything, whatever the headers
        for scheme in [&stripe, &omise] {
            assert_eq!(
                scheme.verify(&HeaderMap::new(), b"{}", 0),
                Err(SignatureError::NoValidSignature)
            );
        }
        // AND each reads its own provider's events
        let stripe_event = json!({"id": "evt_1", "type": "payment_intent.created", "livemode": false,
            "data": {"object": {"object": "payment_intent", "id": "pi_1", "metadata": {}}}});
        assert_eq!(
            stripe
                .parse(stripe_event.to_string().as_bytes())
                .unwrap()
                .event_id,
            "evt_1"
        );
        let omise_event = json!({"object": "event", "id": "evnt_test_1", "key": "customer.create",
            "livemode": false, "data": {"object": "customer", "id": "cust_1"}});
        assert_eq!(
            omise
                .parse(omise_event.to_string().as_bytes())
                .unwrap()
                .event_id,
            "evnt_test_1"
        );
        assert_eq!((stripe.provider(), omise.provider()), ("stripe", "omise"));
    }
}
