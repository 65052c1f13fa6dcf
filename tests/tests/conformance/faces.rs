//! The five PSPs as the conformance suite sees them: the fake's face, the amounts, and each
//! one's webhooks in its own wire format (the shapes the fake's event builders write), signed as
//! the fake signs them, and forged the ways its scheme must refuse.

use super::harness::{Attack, Delivery};
use super::{Approval, EventFacts, Face, FenceProof, LookupBy, PayerAction};
use payonce::adapters::psp::b64::{self, Alphabet};
use payonce::adapters::psp::paypal_webhook::{
    AUTH_ALGO, CERT_URL, TRANSMISSION_ID, TRANSMISSION_SIG, TRANSMISSION_TIME,
};
use payonce::adapters::psp::twoc2p_ids::invoice_no_for;
use payonce::domain::Currency;
use payonce_fake_psp::{
    sign_omise_webhook, sign_square_webhook, sign_twoc2p_jwt, sign_webhook, FakeCharge,
    FakePspConfig, RunningFakePsp, DEFAULT_OMISE_WEBHOOK_SECRET, DEFAULT_SQUARE_SIGNATURE_KEY,
    DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_WEBHOOK_SECRET,
};
use payonce_fake_psp::{
    sign_paypal_webhook, PayPalSigner, DEFAULT_PAYPAL_WEBHOOK_ID, PAYPAL_AUTH_ALGO,
};
use payonce_tests::stack::{FAKE_API_KEY, SQUARE_NOTIFICATION_URL};
use serde_json::{json, Value};

/// A header list of one header.
fn header(name: &str, value: String) -> Vec<(String, String)> {
    vec![(name.to_owned(), value)]
}

/// Stripe: PaymentIntents, `Stripe-Signature`.
pub struct Stripe;

impl Stripe {
    /// A `payment_intent.succeeded` / `payment_intent.payment_failed` event body.
    fn body(facts: &EventFacts) -> String {
        let (kind, status) = if facts.succeeded {
            ("payment_intent.succeeded", "succeeded")
        } else {
            ("payment_intent.payment_failed", "requires_payment_method")
        };
        let mut intent = json!({
            "id": facts.provider_payment_id,
            "object": "payment_intent",
            "amount": facts.amount,
            "currency": facts.currency.as_str(),
            "status": status,
            "metadata": {"payment_id": facts.payment_id},
        });
        if !facts.succeeded {
            intent["last_payment_error"] = json!({"type": "card_error", "code": "card_declined",
                "decline_code": "generic_decline"});
        }
        json!({"id": format!("evt_{}", facts.event_id), "object": "event", "type": kind,
               "created": 1_796_000_000, "livemode": false, "data": {"object": intent}})
        .to_string()
    }
}

impl Face for Stripe {
    const NAME: &'static str = "stripe";
    const WEBHOOK_PROVIDER: &'static str = "fake";
    const CURRENCY: Currency = Currency::Jpy;
    const AMOUNT: i64 = 3000;
    // Stripe's minimum in yen is ¥50.
    const BELOW_MINIMUM: i64 = 49;
    const BELOW_MINIMUM_ANSWER: (u16, &'static str) = (402, "/problems/payment-failed");
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str = "/problems/amount-too-small";
    const DECLINE_CODE: &'static str = "generic_decline";
    const REJECTED_METHOD_ANSWER: (u16, &'static str) = (402, "/problems/payment-method-rejected");
    const LOST_RESPONSE_STATUS: u16 = 202;
    // payment_intent.succeeded.
    const CHARGE_WEBHOOKS: usize = 1;
    const REFUNDS: bool = true;
    const REFUND_STARTS_PENDING: bool = false;
    const FENCE: FenceProof = FenceProof::CanceledIntent;
    const APPROVAL: Approval = Approval::Charges;
    const LOOKUP: LookupBy = LookupBy::OurId;
    const PAYER_ACTION: PayerAction = PayerAction::Waits;
    // The confirmed PaymentIntent create.
    const CHARGE_REQUESTS: u64 = 1;

    fn fake() -> FakePspConfig {
        FakePspConfig::default()
    }

    fn event(facts: &EventFacts, now_s: i64, _psp: &RunningFakePsp) -> Delivery {
        let body = Self::body(facts);
        Delivery {
            headers: header(
                "stripe-signature",
                sign_webhook(DEFAULT_WEBHOOK_SECRET, now_s, body.as_bytes()),
            ),
            body,
        }
    }

    fn attacks(facts: &EventFacts, now_s: i64, _psp: &RunningFakePsp) -> Vec<Attack> {
        let body = Self::body(facts);
        let signed = |secret: &str, at: i64, body: &str| Delivery {
            headers: header(
                "stripe-signature",
                sign_webhook(secret, at, body.as_bytes()),
            ),
            body: body.to_owned(),
        };
        let with_header = |value: String| Delivery {
            headers: header("stripe-signature", value),
            body: body.clone(),
        };
        let valid = sign_webhook(DEFAULT_WEBHOOK_SECRET, now_s, body.as_bytes());
        let v1 = valid.split("v1=").nth(1).unwrap_or_default().to_owned();
        let mut tampered = signed(DEFAULT_WEBHOOK_SECRET, now_s, &body);
        tampered.body = body.replace(&facts.payment_id, "pay_someone_else");
        vec![
            Attack::invalid("tampered body", tampered),
            Attack::invalid("wrong secret", signed("whsec_wrong", now_s, &body)),
            Attack::missing(
                "missing signature",
                Delivery {
                    headers: Vec::new(),
                    body: body.clone(),
                },
            ),
            Attack::missing("malformed header", with_header("garbage".into())),
            Attack::missing("no timestamp", with_header(format!("v1={v1}"))),
            Attack::invalid(
                "timestamp 301 s old",
                signed(DEFAULT_WEBHOOK_SECRET, now_s - 301, &body),
            ),
            Attack::invalid(
                "signature moved to another time",
                with_header(format!("t={},v1={v1}", now_s - 10)),
            ),
            Attack::invalid(
                "uppercase signature",
                with_header(format!("t={now_s},v1={}", v1.to_uppercase())),
            ),
            Attack::invalid("only v0", with_header(format!("t={now_s},v0={v1}"))),
        ]
    }
}

/// Omise: Charges, `Omise-Signature` over `<timestamp>.<body>` with the base64-decoded secret.
pub struct Omise;

impl Omise {
    /// The fake's webhook key: its base64 secret, decoded.
    fn key() -> Vec<u8> {
        b64::decode(DEFAULT_OMISE_WEBHOOK_SECRET, Alphabet::Standard).expect("base64 secret")
    }

    /// A `charge.complete` event body about a `successful` or `failed` charge.
    fn body(facts: &EventFacts) -> String {
        let (status, failure_code) = if facts.succeeded {
            ("successful", Value::Null)
        } else {
            ("failed", json!("payment_rejected"))
        };
        let id = format!("evnt_test_{}", facts.event_id);
        json!({"object": "event", "id": id, "livemode": false, "location": format!("/events/{id}"),
               "key": "charge.complete", "created_at": "2026-11-29T10:00:00Z",
               "data": {"object": "charge", "id": facts.provider_payment_id, "livemode": false,
                        "amount": facts.amount, "currency": facts.currency.as_str(),
                        "status": status, "failure_code": failure_code,
                        "metadata": {"payment_id": facts.payment_id}}})
        .to_string()
    }

    fn signed(key: &[u8], timestamp: &str, body: &str) -> Delivery {
        Delivery {
            headers: vec![
                (
                    "omise-signature".into(),
                    sign_omise_webhook(key, timestamp, body.as_bytes()),
                ),
                ("omise-signature-timestamp".into(), timestamp.to_owned()),
            ],
            body: body.to_owned(),
        }
    }
}

impl Face for Omise {
    const NAME: &'static str = "omise";
    const WEBHOOK_PROVIDER: &'static str = "omise";
    const CURRENCY: Currency = Currency::Thb;
    const AMOUNT: i64 = 3000;
    // Omise's minimum in baht is ฿20.00 (Stripe's is ฿10.00).
    const BELOW_MINIMUM: i64 = 1999;
    const BELOW_MINIMUM_ANSWER: (u16, &'static str) = (402, "/problems/payment-failed");
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str = "/problems/amount-too-small";
    const DECLINE_CODE: &'static str = "payment_rejected";
    const REJECTED_METHOD_ANSWER: (u16, &'static str) = (402, "/problems/payment-method-rejected");
    const LOST_RESPONSE_STATUS: u16 = 202;
    // charge.complete.
    const CHARGE_WEBHOOKS: usize = 1;
    const REFUNDS: bool = true;
    const REFUND_STARTS_PENDING: bool = false;
    const FENCE: FenceProof = FenceProof::Unprovable;
    const APPROVAL: Approval = Approval::Charges;
    const LOOKUP: LookupBy = LookupBy::OurId;
    const PAYER_ACTION: PayerAction = PayerAction::Waits;
    // The charge create.
    const CHARGE_REQUESTS: u64 = 1;

    fn fake() -> FakePspConfig {
        FakePspConfig::omise()
    }

    fn event(facts: &EventFacts, now_s: i64, _psp: &RunningFakePsp) -> Delivery {
        Self::signed(&Self::key(), &now_s.to_string(), &Self::body(facts))
    }

    fn attacks(facts: &EventFacts, now_s: i64, _psp: &RunningFakePsp) -> Vec<Attack> {
        let body = Self::body(facts);
        let now = now_s.to_string();
        let valid = Self::signed(&Self::key(), &now, &body);
        let mut tampered = valid.clone();
        tampered.body = body.replace(&facts.payment_id, "pay_someone_else");
        let without = |name: &str| Delivery {
            headers: valid
                .headers
                .iter()
                .filter(|(header, _)| header != name)
                .cloned()
                .collect(),
            body: body.clone(),
        };
        let mut not_a_number = Self::signed(&Self::key(), &now, &body);
        not_a_number.headers[1].1 = format!("{now}.0");
        vec![
            Attack::invalid("tampered body", tampered),
            Attack::invalid(
                "wrong secret",
                Self::signed(b"another-32-byte-omise-webhook-key", &now, &body),
            ),
            Attack::invalid(
                "the secret as text, not decoded",
                Self::signed(DEFAULT_OMISE_WEBHOOK_SECRET.as_bytes(), &now, &body),
            ),
            Attack::missing("missing signature", without("omise-signature")),
            Attack::missing("missing timestamp", without("omise-signature-timestamp")),
            Attack::missing("timestamp not epoch seconds", not_a_number),
            Attack::invalid(
                "timestamp 301 s old",
                Self::signed(&Self::key(), &(now_s - 301).to_string(), &body),
            ),
            Attack::invalid("signature moved to another time", {
                let mut moved = valid.clone();
                moved.headers[1].1 = (now_s - 10).to_string();
                moved
            }),
        ]
    }
}

/// 2C2P: backend notifications `{"payload":"<JWT>"}`, HS256 with the merchant's secret key.
pub struct TwoC2p;

impl TwoC2p {
    /// The notification's claims, as the fake writes them (the Payment Inquiry's).
    fn claims(facts: &EventFacts) -> Value {
        let (code, desc) = if facts.succeeded {
            ("0000", "Success")
        } else {
            ("4005", "Do not honor")
        };
        json!({
            "merchantID": DEFAULT_TWOC2P_MERCHANT_ID,
            "invoiceNo": invoice_no_for(&facts.payment_id).unwrap_or_default(),
            "amount": decimal(facts.amount, facts.currency),
            "currencyCode": facts.currency.as_str().to_ascii_uppercase(),
            "tranRef": facts.provider_payment_id,
            "channelCode": "CC",
            "transactionDateTime": "20261129100000",
            "respCode": code,
            "respDesc": desc,
        })
    }

    fn envelope(token: &str) -> Delivery {
        Delivery {
            headers: Vec::new(),
            body: json!({ "payload": token }).to_string(),
        }
    }

    /// A compact JWS with the header `header` over `claims`, with a valid HS256 MAC under `key`
    /// whatever the header says (so only the header can make it refused).
    fn token_with_header(key: &str, header: &Value, claims: &Value) -> String {
        let header = b64::encode(header.to_string().as_bytes(), Alphabet::UrlSafeNoPad);
        let claims = b64::encode(claims.to_string().as_bytes(), Alphabet::UrlSafeNoPad);
        format!("{header}.{claims}.{}", hs256(key, &header, &claims))
    }
}

/// The base64url HMAC-SHA256 of `<header>.<claims>` under `key`. The tests crate has no HMAC of
/// its own: the fake's Omise signer computes exactly HMAC-SHA256(key, `<timestamp>.<payload>`)
/// in hex, so it is called with the header as the "timestamp".
fn hs256(key: &str, header: &str, claims: &str) -> String {
    let hex = sign_omise_webhook(key.as_bytes(), header, claims.as_bytes());
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect();
    b64::encode(&bytes, Alphabet::UrlSafeNoPad)
}

/// Minor units as the decimal string 2C2P writes in notifications (`"30.00"`; yen `"3000"`).
fn decimal(minor: i64, currency: Currency) -> String {
    match currency.minor_unit_digits() {
        0 => minor.to_string(),
        _ => format!("{}.{:02}", minor / 100, minor % 100),
    }
}

impl Face for TwoC2p {
    const NAME: &'static str = "2c2p";
    const WEBHOOK_PROVIDER: &'static str = "2c2p";
    const CURRENCY: Currency = Currency::Sgd;
    const AMOUNT: i64 = 3000;
    // 2C2P publishes no minimum; the face refuses a non-positive amount (9009, "Amount is
    // invalid"), the one amount below every minimum.
    const BELOW_MINIMUM: i64 = 0;
    const BELOW_MINIMUM_ANSWER: (u16, &'static str) = (402, "/problems/payment-failed");
    // A total of nothing is refused as invalid (it is below every minimum).
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str = "/problems/invalid-request";
    const DECLINE_CODE: &'static str = "4005";
    // Do Payment refuses an unknown card token with 9004 ("Invalid value: securePayToken"):
    // the payment method is rejected, as on the other PSPs.
    const REJECTED_METHOD_ANSWER: (u16, &'static str) = (402, "/problems/payment-method-rejected");
    // The adapter runs the Payment Inquiry after a lost Do Payment answer, and learns the
    // outcome there.
    const LOST_RESPONSE_STATUS: u16 = 201;
    // The backend notification.
    const CHARGE_WEBHOOKS: usize = 1;
    // With the Payment Maintenance keys the fake generated (`twoc2p_for`); without them the
    // refund API answers 409 before anything (`refunds/unsupported.rs`).
    const REFUNDS: bool = true;
    const REFUND_STARTS_PENDING: bool = false;
    const FENCE: FenceProof = FenceProof::TakenInvoice;
    const APPROVAL: Approval = Approval::Charges;
    const LOOKUP: LookupBy = LookupBy::OurId;
    const PAYER_ACTION: PayerAction = PayerAction::Waits;
    // The Payment Token, the Do Payment, then the Payment Inquiry.
    const CHARGE_REQUESTS: u64 = 3;

    fn fake() -> FakePspConfig {
        FakePspConfig::twoc2p()
    }

    fn psp_id(charge: &FakeCharge) -> String {
        let invoice = charge.idempotency_key.clone();
        invoice.expect("a 2C2P charge has an invoice number")
    }

    fn event(facts: &EventFacts, _now_s: i64, _psp: &RunningFakePsp) -> Delivery {
        Self::envelope(&sign_twoc2p_jwt(FAKE_API_KEY, &Self::claims(facts)))
    }

    /// No timestamp is signed (2C2P sends none), so there is no stale-signature attack.
    fn attacks(facts: &EventFacts, _now_s: i64, _psp: &RunningFakePsp) -> Vec<Attack> {
        let claims = Self::claims(facts);
        let valid = sign_twoc2p_jwt(FAKE_API_KEY, &claims);
        let segments: Vec<&str> = valid.split('.').collect();
        let mut other = claims.clone();
        other["invoiceNo"] = json!(invoice_no_for(&format!("pay_{}", "f".repeat(32))));
        let tampered_claims = b64::encode(other.to_string().as_bytes(), Alphabet::UrlSafeNoPad);
        vec![
            Attack::invalid(
                "tampered claims",
                Self::envelope(&format!(
                    "{}.{tampered_claims}.{}",
                    segments[0], segments[2]
                )),
            ),
            Attack::invalid(
                "wrong secret",
                Self::envelope(&sign_twoc2p_jwt("not-the-merchant-key", &claims)),
            ),
            Attack::missing(
                "no payload",
                Delivery {
                    headers: Vec::new(),
                    body: claims.to_string(),
                },
            ),
            Attack::missing(
                "signature stripped",
                Self::envelope(&format!("{}.{}", segments[0], segments[1])),
            ),
            Attack::invalid(
                "alg none, no signature",
                Self::envelope(&format!(
                    "{}.{}.",
                    b64::encode(br#"{"alg":"none","typ":"JWT"}"#, Alphabet::UrlSafeNoPad),
                    segments[1]
                )),
            ),
            Attack::invalid(
                "alg HS512",
                Self::envelope(&Self::token_with_header(
                    FAKE_API_KEY,
                    &json!({"alg": "HS512", "typ": "JWT"}),
                    &claims,
                )),
            ),
            Attack::invalid(
                "alg hs256 (case)",
                Self::envelope(&Self::token_with_header(
                    FAKE_API_KEY,
                    &json!({"alg": "hs256", "typ": "JWT"}),
                    &claims,
                )),
            ),
            Attack::invalid(
                "crit extension",
                Self::envelope(&Self::token_with_header(
                    FAKE_API_KEY,
                    &json!({"alg": "HS256", "typ": "JWT", "crit": ["exp"], "exp": 0}),
                    &claims,
                )),
            ),
        ]
    }
}

/// 2C2P on a merchant account that settles manually (`TWOC2P_SETTLEMENT=manual`): the same wire
/// format, but every approval is an authorization that payonce settles (a Payment Maintenance
/// `S`) before the payment succeeds, as Square's approvals are completed.
pub struct TwoC2pSettling;

impl Face for TwoC2pSettling {
    const NAME: &'static str = TwoC2p::NAME;
    const WEBHOOK_PROVIDER: &'static str = TwoC2p::WEBHOOK_PROVIDER;
    const CURRENCY: Currency = TwoC2p::CURRENCY;
    const AMOUNT: i64 = TwoC2p::AMOUNT;
    const BELOW_MINIMUM: i64 = TwoC2p::BELOW_MINIMUM;
    const BELOW_MINIMUM_ANSWER: (u16, &'static str) = TwoC2p::BELOW_MINIMUM_ANSWER;
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str = TwoC2p::BELOW_MINIMUM_ORDER_PROBLEM;
    const DECLINE_CODE: &'static str = TwoC2p::DECLINE_CODE;
    const REJECTED_METHOD_ANSWER: (u16, &'static str) = TwoC2p::REJECTED_METHOD_ANSWER;
    const LOST_RESPONSE_STATUS: u16 = TwoC2p::LOST_RESPONSE_STATUS;
    const CHARGE_WEBHOOKS: usize = TwoC2p::CHARGE_WEBHOOKS;
    const REFUNDS: bool = TwoC2p::REFUNDS;
    const REFUND_STARTS_PENDING: bool = TwoC2p::REFUND_STARTS_PENDING;
    const FENCE: FenceProof = TwoC2p::FENCE;
    const APPROVAL: Approval = Approval::ApprovesThenCompleted;
    const LOOKUP: LookupBy = TwoC2p::LOOKUP;
    const PAYER_ACTION: PayerAction = TwoC2p::PAYER_ACTION;
    // The Payment Token, the Do Payment, the Payment Inquiry, then the settle.
    const CHARGE_REQUESTS: u64 = 4;
    const LOOKUP_TELLS_COMPLETED: bool = false;
    const SUCCESS_EVENT_MOVES_MONEY: bool = false;

    fn fake() -> FakePspConfig {
        FakePspConfig {
            twoc2p_manual_settlement: true,
            ..FakePspConfig::twoc2p()
        }
    }

    fn psp_id(charge: &FakeCharge) -> String {
        TwoC2p::psp_id(charge)
    }

    fn event(facts: &EventFacts, now_s: i64, psp: &RunningFakePsp) -> Delivery {
        TwoC2p::event(facts, now_s, psp)
    }

    fn attacks(facts: &EventFacts, now_s: i64, psp: &RunningFakePsp) -> Vec<Attack> {
        TwoC2p::attacks(facts, now_s, psp)
    }
}

/// Square: Payments API (`/v2/payments`), `x-square-hmacsha256-signature` (standard base64 of
/// HMAC-SHA256 with the subscription's signature key over the notification URL followed by the
/// raw body). Square signs no timestamp, so no attack here depends on time.
pub struct Square;

/// The header a Square delivery carries its signature in.
const SQUARE_SIGNATURE: &str = "x-square-hmacsha256-signature";

impl Square {
    /// A `payment.updated` event body in Square's envelope (`{merchant_id, type, event_id,
    /// created_at, data: {type, id, object: {payment}}}`) about a payment of ours (by its
    /// `reference_id`): `COMPLETED` (money moved), or `FAILED` with the decline on its card.
    fn body(facts: &EventFacts) -> String {
        let currency = facts.currency.as_str().to_ascii_uppercase();
        let money = |amount: i64| json!({"amount": amount, "currency": currency});
        let (status, card_status, approved) = if facts.succeeded {
            ("COMPLETED", "CAPTURED", facts.amount)
        } else {
            ("FAILED", "FAILED", 0)
        };
        let mut payment = json!({
            "id": facts.provider_payment_id,
            "created_at": "2026-11-29T10:00:00.000Z",
            "updated_at": "2026-11-29T10:00:01.000Z",
            "amount_money": money(facts.amount),
            "approved_money": money(approved),
            "total_money": money(facts.amount),
            "status": status,
            "source_type": "CARD",
            "card_details": {
                "status": card_status,
                "card": {"card_brand": "VISA", "last_4": "4242"},
                "entry_method": "KEYED",
                "card_payment_timeline": {"authorized_at": "2026-11-29T10:00:00.100Z"},
            },
            "location_id": "LPAYONCEFAKE1",
            "reference_id": facts.payment_id,
            "delay_action": "CANCEL",
            "delay_duration": "PT168H",
            "delayed_until": "2026-12-06T10:00:00.000Z",
        });
        if facts.succeeded {
            payment["card_details"]["card_payment_timeline"]["captured_at"] =
                json!("2026-11-29T10:00:01.000Z");
        } else {
            payment["card_details"]["errors"] = json!([{"category": "PAYMENT_METHOD_ERROR",
                "code": "GENERIC_DECLINE", "detail": "Authorization error: 'GENERIC_DECLINE'"}]);
        }
        // Square's event ids are UUIDs in their hyphenated form.
        let event_id = uuid::Uuid::parse_str(&facts.event_id)
            .map(|id| id.hyphenated().to_string())
            .unwrap_or_else(|_| facts.event_id.clone());
        json!({"merchant_id": "PAYONCEFAKESQ", "type": "payment.updated", "event_id": event_id,
               "created_at": "2026-11-29T10:00:01.000Z",
               "data": {"type": "payment", "id": facts.provider_payment_id,
                        "object": {"payment": payment}}})
        .to_string()
    }

    /// `body` with `signature` in Square's header.
    fn with_signature(signature: String, body: &str) -> Delivery {
        Delivery {
            headers: header(SQUARE_SIGNATURE, signature),
            body: body.to_owned(),
        }
    }

    /// `body` signed with `key` over `notification_url`, as Square signs a delivery to it.
    fn signed(key: &str, notification_url: &str, body: &str) -> Delivery {
        Self::with_signature(
            sign_square_webhook(key, notification_url, body.as_bytes()),
            body,
        )
    }
}

impl Face for Square {
    const NAME: &'static str = "square";
    const WEBHOOK_PROVIDER: &'static str = "square";
    const CURRENCY: Currency = Currency::Usd;
    const AMOUNT: i64 = 3000;
    // Square documents no minimum beyond a positive amount ("as low as 1 cent"): the face
    // refuses 0 with VALUE_TOO_LOW, a refusal every re-send repeats.
    const BELOW_MINIMUM: i64 = 0;
    const BELOW_MINIMUM_ANSWER: (u16, &'static str) = (402, "/problems/payment-failed");
    // A total of nothing is refused as invalid (it is below every minimum).
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str = "/problems/invalid-request";
    const DECLINE_CODE: &'static str = "GENERIC_DECLINE";
    // An unknown token is 404 NOT_FOUND ("Card nonce not found").
    const REJECTED_METHOD_ANSWER: (u16, &'static str) = (402, "/problems/payment-method-rejected");
    // The adapter sends a create whose answer was lost again at once under its key, and
    // Square's replay names the one payment, which is then completed.
    const LOST_RESPONSE_STATUS: u16 = 201;
    // payment.created at the approval, payment.updated at the completion.
    const CHARGE_WEBHOOKS: usize = 2;
    const REFUNDS: bool = true;
    // A new refund starts PENDING until the funds are secured (Refunds API reference).
    const REFUND_STARTS_PENDING: bool = true;
    const FENCE: FenceProof = FenceProof::VoidedByKey;
    const APPROVAL: Approval = Approval::ApprovesThenCompleted;
    const LOOKUP: LookupBy = LookupBy::StoredId;
    const PAYER_ACTION: PayerAction = PayerAction::Waits;
    // The create (approved), then the completion of the payment whose id was stored.
    const CHARGE_REQUESTS: u64 = 2;

    fn fake() -> FakePspConfig {
        FakePspConfig::square()
    }

    fn event(facts: &EventFacts, _now_s: i64, _psp: &RunningFakePsp) -> Delivery {
        Self::signed(
            DEFAULT_SQUARE_SIGNATURE_KEY,
            SQUARE_NOTIFICATION_URL,
            &Self::body(facts),
        )
    }

    fn attacks(facts: &EventFacts, _now_s: i64, _psp: &RunningFakePsp) -> Vec<Attack> {
        let body = Self::body(facts);
        let valid = sign_square_webhook(
            DEFAULT_SQUARE_SIGNATURE_KEY,
            SQUARE_NOTIFICATION_URL,
            body.as_bytes(),
        );
        let mut tampered = Self::with_signature(valid.clone(), &body);
        tampered.body = body.replace(&facts.payment_id, "pay_someone_else");
        // The same MAC written as hex digits: they are base64 characters too, but decode to
        // 48 bytes, which no HMAC-SHA256 is.
        let hex: String = b64::decode(&valid, Alphabet::Standard)
            .expect("a base64 signature")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        vec![
            Attack::invalid("tampered body", tampered),
            Attack::invalid(
                "another signature key",
                Self::signed(
                    "another-square-signature-key",
                    SQUARE_NOTIFICATION_URL,
                    &body,
                ),
            ),
            Attack::invalid(
                "signed over another notification URL",
                Self::signed(
                    DEFAULT_SQUARE_SIGNATURE_KEY,
                    "https://attacker.example/webhooks/square",
                    &body,
                ),
            ),
            Attack::invalid(
                "signed over the body alone",
                Self::signed(DEFAULT_SQUARE_SIGNATURE_KEY, "", &body),
            ),
            Attack::missing(
                "missing signature",
                Delivery {
                    headers: Vec::new(),
                    body: body.clone(),
                },
            ),
            Attack::missing(
                "only the legacy x-square-signature header",
                Delivery {
                    headers: header("x-square-signature", valid.clone()),
                    body: body.clone(),
                },
            ),
            Attack::invalid("hex instead of base64", Self::with_signature(hex, &body)),
            Attack::missing(
                "empty signature",
                Self::with_signature(String::new(), &body),
            ),
            Attack::missing(
                "not base64",
                Self::with_signature(format!("{valid}!"), &body),
            ),
        ]
    }
}

/// PayPal: Orders v2 with a vaulted card, charged in the create (the fake's default one-step
/// mode); webhooks signed as PayPal signs them: `PAYPAL-TRANSMISSION-SIG`, the base64 of an RSA
/// PKCS#1 v1.5 SHA-256 signature over `<transmission id>|<transmission time>|<webhook id>|<crc32
/// of the raw body>` by the key of the certificate `PAYPAL-CERT-URL` names. The signer is the
/// running fake's, and the certificate the one it serves on its own origin, the only origin the
/// stack's receiver fetches from.
pub struct PayPal;

/// A PayPal delivery's transmission, as its headers state it.
struct Transmission {
    id: String,
    time: String,
    cert_url: String,
    algorithm: String,
}

impl PayPal {
    /// A `PAYMENT.CAPTURE.COMPLETED` / `PAYMENT.CAPTURE.DECLINED` event in PayPal's envelope, its
    /// resource the capture as the Payments API writes it (`capture-2`): our payment id as
    /// `custom_id` and `invoice_id`, the order in `supplementary_data.related_ids`; a declined
    /// one with `status_details.reason`.
    fn body(facts: &EventFacts) -> String {
        let (kind, status, summary) = if facts.succeeded {
            (
                "PAYMENT.CAPTURE.COMPLETED",
                "COMPLETED",
                "Payment completed",
            )
        } else {
            ("PAYMENT.CAPTURE.DECLINED", "DECLINED", "Payment declined")
        };
        let currency = facts.currency.as_str().to_ascii_uppercase();
        let value = facts.currency.decimal_from_minor(facts.amount);
        // PayPal's event ids are `WH-<17>-<17>`, its object ids upper-case letters and digits.
        let upper = facts.event_id.to_ascii_uppercase();
        let (first, rest) = upper.split_at(upper.len().min(17));
        let mut capture = json!({
            "id": format!("3C{}", &first[..first.len().min(15)]),
            "status": status,
            "amount": {"currency_code": currency, "value": value},
            "final_capture": true,
            "seller_protection": {"status": "NOT_ELIGIBLE"},
            "custom_id": facts.payment_id,
            "invoice_id": facts.payment_id,
            "supplementary_data": {"related_ids": {"order_id": facts.provider_payment_id}},
            "create_time": "2026-11-29T10:00:00Z",
            "update_time": "2026-11-29T10:00:01Z",
        });
        if !facts.succeeded {
            capture["status_details"] = json!({"reason": "DECLINED_BY_RISK_FRAUD_FILTERS"});
        }
        json!({"id": format!("WH-{first}-{rest}"), "event_version": "1.0",
               "create_time": "2026-11-29T10:00:01.000Z", "resource_type": "capture",
               "resource_version": "2.0", "event_type": kind,
               "summary": format!("{summary} for {value} {currency}"), "resource": capture})
        .to_string()
    }

    /// The running fake's signer (the PayPal face has one).
    fn signer(psp: &RunningFakePsp) -> std::sync::Arc<PayPalSigner> {
        psp.paypal_signer()
            .expect("the PayPal face signs its webhooks")
    }

    /// A transmission at `now_s` naming the fake's certificate, as the fake sends one.
    fn transmission(psp: &RunningFakePsp, now_s: i64) -> Transmission {
        Transmission {
            id: uuid::Uuid::new_v4().to_string(),
            time: rfc3339(now_s),
            cert_url: psp
                .paypal_cert_url()
                .expect("the PayPal face's certificate"),
            algorithm: PAYPAL_AUTH_ALGO.to_owned(),
        }
    }

    /// `body` with the headers of `transmission` and `signature`.
    fn delivery(transmission: &Transmission, signature: String, body: &str) -> Delivery {
        Delivery {
            headers: vec![
                (TRANSMISSION_ID.to_owned(), transmission.id.clone()),
                (TRANSMISSION_TIME.to_owned(), transmission.time.clone()),
                (TRANSMISSION_SIG.to_owned(), signature),
                (CERT_URL.to_owned(), transmission.cert_url.clone()),
                (AUTH_ALGO.to_owned(), transmission.algorithm.clone()),
            ],
            body: body.to_owned(),
        }
    }

    /// `body` sent as `transmission`, signed by `signer` for the subscription `webhook_id` over
    /// what the transmission states.
    fn signed(
        signer: &PayPalSigner,
        webhook_id: &str,
        transmission: &Transmission,
        body: &str,
    ) -> Delivery {
        let signature = sign_paypal_webhook(
            signer,
            &transmission.id,
            &transmission.time,
            webhook_id,
            body.as_bytes(),
        );
        Self::delivery(transmission, signature, body)
    }

    /// `delivery` with header `name` set to `value` (the signature left as it was).
    fn with_header(mut delivery: Delivery, name: &str, value: String) -> Delivery {
        for (header, old) in &mut delivery.headers {
            if header == name {
                *old = value.clone();
            }
        }
        delivery
    }
}

/// Epoch seconds as PayPal writes a transmission time (RFC 3339, UTC, whole seconds).
fn rfc3339(epoch_s: i64) -> String {
    let text = payonce::logging::rfc3339_ms(epoch_s * 1000);
    text.replace(".000Z", "Z")
}

impl Face for PayPal {
    const NAME: &'static str = "paypal";
    const WEBHOOK_PROVIDER: &'static str = "paypal";
    // Yen, which PayPal writes without decimals ("3000").
    const CURRENCY: Currency = Currency::Jpy;
    const AMOUNT: i64 = 3000;
    // PayPal documents no minimum beyond a positive amount: the face refuses 0 with 422
    // CANNOT_BE_ZERO_OR_NEGATIVE, a refusal every re-send repeats.
    const BELOW_MINIMUM: i64 = 0;
    const BELOW_MINIMUM_ANSWER: (u16, &'static str) = (402, "/problems/payment-failed");
    // A total of nothing is refused as invalid (it is below every minimum).
    const BELOW_MINIMUM_ORDER_PROBLEM: &'static str = "/problems/invalid-request";
    // A completed order holding a declined capture, its `status_details.reason`.
    const DECLINE_CODE: &'static str = "DECLINED_BY_RISK_FRAUD_FILTERS";
    // An unknown vault id is 422 TOKEN_ID_NOT_FOUND: the payment method is rejected.
    const REJECTED_METHOD_ANSWER: (u16, &'static str) = (402, "/problems/payment-method-rejected");
    // The adapter sends a create whose answer was lost again at once under its request id, and
    // PayPal's replay (200) answers the one order, captured.
    const LOST_RESPONSE_STATUS: u16 = 201;
    // PAYMENT.CAPTURE.COMPLETED.
    const CHARGE_WEBHOOKS: usize = 1;
    const REFUNDS: bool = true;
    // The capture's refund is COMPLETED at once for an ordinary card.
    const REFUND_STARTS_PENDING: bool = false;
    const FENCE: FenceProof = FenceProof::Resend;
    const APPROVAL: Approval = Approval::Captures;
    const LOOKUP: LookupBy = LookupBy::StoredId;
    const PAYER_ACTION: PayerAction = PayerAction::NeedsReturnUrl;
    // The OAuth token (the adapter's first call), then the create.
    const CHARGE_REQUESTS: u64 = 2;

    fn fake() -> FakePspConfig {
        FakePspConfig::paypal()
    }

    fn event(facts: &EventFacts, now_s: i64, psp: &RunningFakePsp) -> Delivery {
        Self::signed(
            &Self::signer(psp),
            DEFAULT_PAYPAL_WEBHOOK_ID,
            &Self::transmission(psp, now_s),
            &Self::body(facts),
        )
    }

    fn attacks(facts: &EventFacts, now_s: i64, psp: &RunningFakePsp) -> Vec<Attack> {
        let body = Self::body(facts);
        let signer = Self::signer(psp);
        let at = |now_s: i64| Self::transmission(psp, now_s);
        let valid = Self::signed(&signer, DEFAULT_PAYPAL_WEBHOOK_ID, &at(now_s), &body);
        let mut tampered = valid.clone();
        tampered.body = body.replace(&facts.payment_id, "pay_someone_else");
        let header_of = |name: &str| {
            valid
                .headers
                .iter()
                .find(|(header, _)| header == name)
                .map(|(_, value)| value.clone())
                .unwrap_or_default()
        };
        let without = |name: &str| Delivery {
            headers: valid
                .headers
                .iter()
                .filter(|(header, _)| header != name)
                .cloned()
                .collect(),
            body: body.clone(),
        };
        // The same delivery, signed over what it states, but naming another certificate URL.
        let naming = |cert_url: String| {
            let transmission = Transmission {
                cert_url,
                ..at(now_s)
            };
            Self::signed(&signer, DEFAULT_PAYPAL_WEBHOOK_ID, &transmission, &body)
        };
        let base = psp.base_url();
        let port = psp.local_addr().port();
        let another_key = PayPalSigner::generate().expect("an RSA key");
        vec![
            Attack::invalid("tampered body", tampered),
            Attack::invalid(
                "signed by another key",
                Self::signed(&another_key, DEFAULT_PAYPAL_WEBHOOK_ID, &at(now_s), &body),
            ),
            Attack::invalid(
                "signed for another subscription's webhook id",
                Self::signed(&signer, "WH0THERSUBSCRIPT", &at(now_s), &body),
            ),
            Attack::invalid(
                "another transmission id",
                Self::with_header(
                    valid.clone(),
                    TRANSMISSION_ID,
                    uuid::Uuid::new_v4().to_string(),
                ),
            ),
            Attack::invalid(
                "signature moved to another time",
                Self::with_header(valid.clone(), TRANSMISSION_TIME, rfc3339(now_s - 10)),
            ),
            Attack::invalid(
                "transmission 301 s old",
                Self::signed(&signer, DEFAULT_PAYPAL_WEBHOOK_ID, &at(now_s - 301), &body),
            ),
            // (Further ahead than the tolerance by a margin: the attacks are posted a few
            // seconds after `now_s`, which brings a time ahead closer.)
            Attack::invalid(
                "transmission 330 s ahead",
                Self::signed(&signer, DEFAULT_PAYPAL_WEBHOOK_ID, &at(now_s + 330), &body),
            ),
            Attack::invalid(
                "another algorithm",
                Self::with_header(valid.clone(), AUTH_ALGO, "SHA1withRSA".into()),
            ),
            // Certificate URLs off the allow-list (the fake's origin exactly) are never fetched.
            Attack::invalid(
                "a certificate on PayPal's own host (not the sandbox's)",
                naming("https://api.paypal.com/v1/notifications/certs/CERT-1".into()),
            ),
            Attack::invalid(
                "a certificate on a foreign host",
                naming("https://evil.example/_fake/paypal/cert.pem".into()),
            ),
            Attack::invalid(
                "a certificate on the fake's port under another host name",
                naming(format!("http://localhost:{port}/_fake/paypal/cert.pem")),
            ),
            Attack::invalid(
                "a certificate on the fake's host and port over https",
                naming(format!("https://127.0.0.1:{port}/_fake/paypal/cert.pem")),
            ),
            Attack::invalid(
                "a certificate URL with credentials",
                naming(format!(
                    "http://user@127.0.0.1:{port}/_fake/paypal/cert.pem"
                )),
            ),
            Attack::missing("missing transmission id", without(TRANSMISSION_ID)),
            Attack::missing("missing transmission time", without(TRANSMISSION_TIME)),
            Attack::missing("missing signature", without(TRANSMISSION_SIG)),
            Attack::missing("missing certificate URL", without(CERT_URL)),
            Attack::missing("missing algorithm", without(AUTH_ALGO)),
            Attack::missing(
                "signature not base64",
                Self::with_header(
                    valid.clone(),
                    TRANSMISSION_SIG,
                    format!("{}!", header_of(TRANSMISSION_SIG)),
                ),
            ),
            Attack::missing(
                "empty signature",
                Self::with_header(valid.clone(), TRANSMISSION_SIG, String::new()),
            ),
            Attack::missing(
                "transmission time not RFC 3339",
                Self::with_header(valid.clone(), TRANSMISSION_TIME, now_s.to_string()),
            ),
            Attack::missing(
                "a separator in the transmission id",
                Self::signed(
                    &signer,
                    DEFAULT_PAYPAL_WEBHOOK_ID,
                    &Transmission {
                        id: format!("{}|{}", header_of(TRANSMISSION_ID), facts.event_id),
                        ..at(now_s)
                    },
                    &body,
                ),
            ),
            // An allowed origin that serves no certificate: nothing can be verified now, and
            // PayPal is asked to deliver again (503), rather than told the delivery is forged.
            Attack {
                name: "a certificate URL on the allowed origin that serves none",
                delivery: naming(format!("{base}/_fake/paypal/no-such-cert.pem")),
                status: 503,
                problem: "/problems/service-unavailable",
            },
        ]
    }
}

#[test]
fn the_jws_helper_signs_as_the_2c2p_face_does() {
    // The forged-header tokens above differ from a valid one only by their header.
    let claims = json!({"merchantID": DEFAULT_TWOC2P_MERCHANT_ID, "respCode": "0000"});
    assert_eq!(
        TwoC2p::token_with_header(
            FAKE_API_KEY,
            &json!({"alg": "HS256", "typ": "JWT"}),
            &claims
        ),
        sign_twoc2p_jwt(FAKE_API_KEY, &claims)
    );
}
