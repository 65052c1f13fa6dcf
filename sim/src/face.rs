//! Each PSP as the simulation runs it: the model's face (wire format), the adapter over the
//! simulated network, the webhook schemes of the receiver and the processor (built exactly as a
//! deployment builds them from its secret), how the PSP signs a delivery, the currencies shoppers
//! pay in and the PSP's minimum charge in each.

use crate::faults::{SimTransport, API_KEY, TWOC2P_MERCHANT_ID};
use lambda_http::http::{HeaderMap, HeaderName, HeaderValue};
use payonce::adapters::psp::b64::{self, Alphabet};
use payonce::adapters::psp::paypal_webhook::{self, CertFetch, PayPalWebhooks};
use payonce::adapters::psp::twoc2p_maintenance::{Maintenance, MaintenanceKeys};
use payonce::adapters::psp::{ConfiguredPsp, OmisePsp, PayPalPsp, SquarePsp, StripePsp, TwoC2pPsp};
use payonce::config::{webhook_parsers_for, webhook_providers_for, PspKind, PspSecrets};
use payonce::domain::Currency;
use payonce::service::webhooks::Providers;
use payonce_fake_psp::{
    sign_omise_webhook, sign_paypal_webhook, sign_square_webhook, sign_webhook, PayPalSigner,
    Provider, TwoC2pMaintenanceKeys, DEFAULT_PAYPAL_CLIENT_ID,
};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Stripe's webhook signing secret, shared by the PSP and the receiver.
const STRIPE_WEBHOOK_SECRET: &str = "whsec_payonce_sim";

/// Omise's webhook secret as its dashboard shows it: standard base64 (of
/// `payonce-sim-omise-webhook-key!!!`, 32 bytes), decoded into the HMAC key on both sides.
const OMISE_WEBHOOK_SECRET: &str = "cGF5b25jZS1zaW0tb21pc2Utd2ViaG9vay1rZXkhISE=";

/// The Square subscription's signature key, shared by the PSP and the receiver.
const SQUARE_SIGNATURE_KEY: &str = "payonce-sim-square-signature-key";

/// The Square subscription's notification URL, which Square signs with each body.
const SQUARE_NOTIFICATION_URL: &str = "https://payonce.sim.example/webhooks/square";

/// The PayPal subscription's webhook id, which PayPal signs with each notification.
const PAYPAL_WEBHOOK_ID: &str = "WH-SIM-4XM1T2";

/// Where the simulated PayPal names its certificate: on PayPal's sandbox host, which the
/// receiver allows (the certificate itself comes from [`paypal_signer`], no network).
const PAYPAL_CERT_URL: &str = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-sim";

/// The simulated PayPal's signing key and its certificate, valid from a day before the
/// simulation's epoch for a year: one per process (RSA key generation is its only cost).
fn paypal_signer() -> &'static PayPalSigner {
    static SIGNER: OnceLock<PayPalSigner> = OnceLock::new();
    SIGNER.get_or_init(|| {
        PayPalSigner::generate()
            .and_then(|signer| signer.valid_from(crate::world::EPOCH_MS / 1000 - 86_400))
            .expect("an RSA key and its certificate")
    })
}

/// The simulated PayPal's certificate, served to the receiver as PayPal's host would.
struct SimCertificate;

#[async_trait::async_trait]
impl CertFetch for SimCertificate {
    async fn fetch(&self, _url: &str) -> Result<Vec<u8>, String> {
        Ok(paypal_signer().certificate_pem().as_bytes().to_vec())
    }
}

/// How long the adapter waits for one PSP call (the adapters' default).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The model's face for `psp`.
pub fn provider(psp: PspKind) -> Provider {
    match psp {
        PspKind::Stripe => Provider::Stripe,
        PspKind::Omise => Provider::Omise,
        PspKind::TwoC2p => Provider::TwoC2p,
        PspKind::Square => Provider::Square,
        PspKind::PayPal => Provider::PayPal,
    }
}

/// The currencies shoppers buy in: ones `psp` charges in. Stripe keeps the sim's original four
/// (and their order, so Stripe seeds replay as before). Omise charges only in its account
/// country's currency; payonce knows three of those (no MYR). 2C2P documents no per-currency
/// rules; its fake takes any currency Stripe's table lists, and these are ones a Southeast Asian
/// merchant takes, with yen for a currency without a minor unit on 2C2P's decimal wire. Square
/// takes its seller's currency; payonce knows four of them, yen among them.
pub fn currencies(psp: PspKind) -> &'static [Currency] {
    match psp {
        PspKind::Stripe => &[Currency::Jpy, Currency::Usd, Currency::Thb, Currency::Gbp],
        PspKind::Omise => &[Currency::Jpy, Currency::Thb, Currency::Sgd],
        PspKind::TwoC2p => &[Currency::Thb, Currency::Sgd, Currency::Usd, Currency::Jpy],
        PspKind::Square => &[Currency::Usd, Currency::Jpy, Currency::Gbp, Currency::Eur],
        PspKind::PayPal => &[Currency::Usd, Currency::Jpy, Currency::Thb, Currency::Eur],
    }
}

/// The smallest order total `psp` charges in `currency` (minor units): payonce's one table per
/// PSP, which the order service checks orders against.
pub fn minimum_minor(psp: PspKind, currency: Currency) -> i64 {
    psp.minimum_charge_minor(currency)
        .expect("shoppers pay only in currencies the PSP charges")
}

/// Whether `psp`'s adapter can prove a key was never used (its fence), so that reconcile can
/// settle an attempt the PSP does not show. Stripe: the `confirm=false` re-send under the key;
/// 2C2P: taking the invoice's only payment token; Square: cancel by idempotency key. Omise: no
/// proof (`Fence::Unprovable`).
pub fn fence_proves_unused(psp: PspKind) -> bool {
    match psp {
        PspKind::Stripe | PspKind::TwoC2p | PspKind::Square => true,
        // PayPal proves nothing: a re-send under the key (within its 6 h) learns what it made, but
        // one it keeps failing leaves the attempt to an operator.
        PspKind::Omise | PspKind::PayPal => false,
    }
}

/// The 2C2P Payment Maintenance keys of every run that has them, as the model holds them and
/// as payonce's adapter does (RSA key generation and parsing are slow; the keys are test keys,
/// the same in every run).
pub fn twoc2p_maintenance_keys() -> &'static (TwoC2pMaintenanceKeys, Arc<MaintenanceKeys>) {
    static KEYS: OnceLock<(TwoC2pMaintenanceKeys, Arc<MaintenanceKeys>)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let (merchant_private, merchant_public) =
            MaintenanceKeys::generate_pair().expect("test keys");
        let (twoc2p_private, twoc2p_public) = MaintenanceKeys::generate_pair().expect("test keys");
        let ours = MaintenanceKeys::from_der(&merchant_private, &twoc2p_public).expect("test keys");
        let model = TwoC2pMaintenanceKeys {
            twoc2p_private_key_pkcs8: twoc2p_private,
            merchant_public_key_spki: merchant_public,
            merchant_private_key_pkcs8: Some(merchant_private),
        };
        (model, Arc::new(ours))
    })
}

/// The path of 2C2P's maintenance action on the model.
const TWOC2P_ACTION_PATH: &str = "/2C2PFrontend/PaymentAction/2.0/action";

/// The adapter for `psp` over `transport`, configured as a deployment configures it; on 2C2P
/// with the Payment Maintenance API when `twoc2p_refunds` (the keys of
/// [`twoc2p_maintenance_keys`]), for an account that settles manually when `twoc2p_manual`.
pub fn adapter(
    psp: PspKind,
    transport: SimTransport,
    twoc2p_refunds: bool,
    twoc2p_manual: bool,
) -> ConfiguredPsp<SimTransport> {
    if psp == PspKind::TwoC2p && twoc2p_refunds {
        let merchant = twoc2p_maintenance_keys().1.clone();
        let maintenance = Maintenance::new(
            transport.clone(),
            TWOC2P_ACTION_PATH,
            TWOC2P_MERCHANT_ID,
            merchant,
            REQUEST_TIMEOUT,
        );
        let twoc2p = TwoC2pPsp::with_transport(
            transport,
            psp.name(),
            TWOC2P_MERCHANT_ID,
            API_KEY,
            REQUEST_TIMEOUT,
        )
        .expect("a merchant id and a secret key")
        .with_maintenance(maintenance);
        return ConfiguredPsp::TwoC2p(if twoc2p_manual {
            twoc2p.settling_manually()
        } else {
            twoc2p
        });
    }
    match psp {
        PspKind::Stripe => ConfiguredPsp::Stripe(StripePsp::with_transport(
            transport,
            psp.name(),
            API_KEY,
            REQUEST_TIMEOUT,
        )),
        PspKind::Omise => ConfiguredPsp::Omise(OmisePsp::with_transport(
            transport,
            psp.name(),
            API_KEY,
            REQUEST_TIMEOUT,
        )),
        PspKind::TwoC2p => ConfiguredPsp::TwoC2p(
            TwoC2pPsp::with_transport(
                transport,
                psp.name(),
                TWOC2P_MERCHANT_ID,
                API_KEY,
                REQUEST_TIMEOUT,
            )
            .expect("a merchant id and a secret key"),
        ),
        PspKind::Square => ConfiguredPsp::Square(SquarePsp::with_transport(
            transport,
            psp.name(),
            API_KEY,
            None,
            REQUEST_TIMEOUT,
        )),
        PspKind::PayPal => ConfiguredPsp::PayPal(PayPalPsp::with_transport(
            transport,
            psp.name(),
            DEFAULT_PAYPAL_CLIENT_ID,
            API_KEY,
            REQUEST_TIMEOUT,
        )),
    }
}

/// The PSP secret a deployment on `psp` holds.
fn secrets(psp: PspKind) -> PspSecrets {
    match psp {
        PspKind::Stripe => PspSecrets {
            api_key: Some(API_KEY.to_owned()),
            webhook_secrets: vec![STRIPE_WEBHOOK_SECRET.to_owned()],
            ..PspSecrets::default()
        },
        PspKind::Omise => PspSecrets {
            secret_key: Some(API_KEY.to_owned()),
            webhook_secrets: vec![OMISE_WEBHOOK_SECRET.to_owned()],
            ..PspSecrets::default()
        },
        PspKind::TwoC2p => PspSecrets {
            secret_key: Some(API_KEY.to_owned()),
            merchant_id: Some(TWOC2P_MERCHANT_ID.to_owned()),
            ..PspSecrets::default()
        },
        PspKind::Square => PspSecrets {
            access_token: Some(API_KEY.to_owned()),
            signature_key: Some(SQUARE_SIGNATURE_KEY.to_owned()),
            notification_url: Some(SQUARE_NOTIFICATION_URL.to_owned()),
            ..PspSecrets::default()
        },
        PspKind::PayPal => PspSecrets {
            client_id: Some(DEFAULT_PAYPAL_CLIENT_ID.to_owned()),
            client_secret: Some(API_KEY.to_owned()),
            webhook_id: Some(PAYPAL_WEBHOOK_ID.to_owned()),
            ..PspSecrets::default()
        },
    }
}

/// The webhook receiver's providers: `psp`'s scheme, verifying with the deployment's secret.
/// PayPal's fetches its certificate from PayPal's host in a deployment; here the simulated
/// PayPal's own certificate stands at that host (the allow-list and every check are the same,
/// but for the test certificate's name).
pub fn receiver_providers(psp: PspKind, twoc2p_manual: bool) -> Providers {
    if psp == PspKind::PayPal {
        let scheme = PayPalWebhooks::with_origins(
            PAYPAL_WEBHOOK_ID,
            Arc::new(SimCertificate),
            &paypal_webhook::DEFAULT_CERT_ORIGINS,
            ".paypal.example",
        )
        .expect("the simulation's PayPal webhook id");
        return Providers::new().with(scheme);
    }
    if psp == PspKind::TwoC2p && twoc2p_manual {
        return Providers::new().with(settling_notifications());
    }
    webhook_providers_for(psp, &secrets(psp)).expect("the simulation's PSP secret is well formed")
}

/// The webhook processor's providers: `psp`'s scheme for reading what the receiver verified.
pub fn processor_providers(psp: PspKind, twoc2p_manual: bool) -> Providers {
    if psp == PspKind::TwoC2p && twoc2p_manual {
        return Providers::new().with(settling_notifications());
    }
    webhook_parsers_for(psp, Some(&secrets(psp)))
        .expect("the simulation's PSP secret is well formed")
}

/// 2C2P's notifications for an account that settles manually (`TWOC2P_SETTLEMENT=manual`,
/// which a deployment's every function reads): an approval is an authorization.
fn settling_notifications() -> payonce::adapters::psp::twoc2p_webhook::TwoC2pNotifications {
    payonce::adapters::psp::twoc2p_webhook::TwoC2pNotifications::new(TWOC2P_MERCHANT_ID, API_KEY)
        .expect("a merchant id and a secret key")
        .with_provider(PspKind::TwoC2p.name())
        .settling_manually(true)
}

/// The headers the PSP sends with one delivery of `body` at `now_s`, signed its way: Stripe's
/// `Stripe-Signature`; Omise's `Omise-Signature` and `Omise-Signature-Timestamp` keyed with the
/// decoded secret; none for 2C2P, whose notification body is itself a JWT the model signed with
/// the merchant's secret key; Square's `x-square-hmacsha256-signature` over the subscription's
/// notification URL and the body.
pub fn signature_headers(psp: PspKind, now_s: i64, body: &[u8]) -> HeaderMap {
    let pairs = match psp {
        PspKind::Stripe => vec![(
            "stripe-signature",
            sign_webhook(STRIPE_WEBHOOK_SECRET, now_s, body),
        )],
        PspKind::Omise => {
            let key = b64::decode(OMISE_WEBHOOK_SECRET, Alphabet::Standard)
                .expect("the Omise webhook secret is base64");
            let timestamp = now_s.to_string();
            vec![
                (
                    "omise-signature",
                    sign_omise_webhook(&key, &timestamp, body),
                ),
                ("omise-signature-timestamp", timestamp),
            ]
        }
        PspKind::TwoC2p => Vec::new(),
        PspKind::Square => vec![(
            "x-square-hmacsha256-signature",
            sign_square_webhook(SQUARE_SIGNATURE_KEY, SQUARE_NOTIFICATION_URL, body),
        )],
        PspKind::PayPal => {
            let time = rfc3339(now_s);
            // A transmission id per delivery, derived from what it carries (deterministic).
            let id = format!("sim-{:08x}-{now_s}", crc32fast::hash(body));
            let signature =
                sign_paypal_webhook(paypal_signer(), &id, &time, PAYPAL_WEBHOOK_ID, body);
            vec![
                ("paypal-transmission-id", id),
                ("paypal-transmission-time", time),
                ("paypal-transmission-sig", signature),
                ("paypal-cert-url", PAYPAL_CERT_URL.to_owned()),
                ("paypal-auth-algo", "SHA256withRSA".to_owned()),
            ]
        }
    };
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// `now_s` as RFC 3339 UTC (`2026-01-01T00:00:00Z`), as PayPal writes its transmission time.
fn rfc3339(now_s: i64) -> String {
    let days = now_s.div_euclid(86_400);
    let secs = now_s.rem_euclid(86_400);
    // H. Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_paypal_writes_them() {
        assert_eq!(
            rfc3339(crate::world::EPOCH_MS / 1000),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(rfc3339(1_796_032_805), "2026-11-30T10:00:05Z");
        assert_eq!(
            payonce::logging::epoch_ms_of_rfc3339(&rfc3339(1_796_032_805)),
            Some(1_796_032_805_000)
        );
    }

    #[test]
    fn the_omise_secret_is_base64_of_a_32_byte_key() {
        let key = b64::decode(OMISE_WEBHOOK_SECRET, Alphabet::Standard).unwrap();
        assert_eq!(key, b"payonce-sim-omise-webhook-key!!!");
    }

    #[test]
    fn every_psp_builds_its_schemes_and_shoppers_pay_above_its_minimum() {
        for psp in PspKind::ALL {
            let _ = receiver_providers(psp, false);
            let _ = processor_providers(psp, false);
            for &currency in currencies(psp) {
                assert!(minimum_minor(psp, currency) >= 1);
            }
        }
        assert_eq!(minimum_minor(PspKind::Omise, Currency::Thb), 2_000);
        assert_eq!(minimum_minor(PspKind::Stripe, Currency::Thb), 1_000);
    }

    #[test]
    fn omise_and_paypal_cannot_prove_a_key_unused() {
        let unprovable: Vec<_> = PspKind::ALL
            .into_iter()
            .filter(|psp| !fence_proves_unused(*psp))
            .collect();
        assert_eq!(unprovable, [PspKind::Omise, PspKind::PayPal]);
    }
}
