//! The four PSPs as the conformance suite sees them: the fake's face, the amounts, and each
//! one's webhooks in its own wire format (the shapes the fake's event builders write), signed as
//! the fake signs them, and forged the ways its scheme must refuse.

use super::harness::{Attack, Delivery};
use super::{Approval, EventFacts, Face, FenceProof, LookupBy};
use payonce::adapters::psp::b64::{self, Alphabet};
use payonce::adapters::psp::twoc2p_ids::invoice_no_for;
use payonce::domain::Currency;
use payonce_fake_psp::{
    sign_omise_webhook, sign_square_webhook, sign_twoc2p_jwt, sign_webhook, FakeCharge,
    FakePspConfig, DEFAULT_OMISE_WEBHOOK_SECRET, DEFAULT_SQUARE_SIGNATURE_KEY,
    DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_WEBHOOK_SECRET,
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
    // The confirmed PaymentIntent create.
    const CHARGE_REQUESTS: u64 = 1;

    fn fake() -> FakePspConfig {
        FakePspConfig::default()
    }

    fn event(facts: &EventFacts, now_s: i64) -> Delivery {
        let body = Self::body(facts);
        Delivery {
            headers: header(
                "stripe-signature",
                sign_webhook(DEFAULT_WEBHOOK_SECRET, now_s, body.as_bytes()),
            ),
            body,
        }
    }

    fn attacks(facts: &EventFacts, now_s: i64) -> Vec<Attack> {
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
    // The charge create.
    const CHARGE_REQUESTS: u64 = 1;

    fn fake() -> FakePspConfig {
        FakePspConfig::omise()
    }

    fn event(facts: &EventFacts, now_s: i64) -> Delivery {
        Self::signed(&Self::key(), &now_s.to_string(), &Self::body(facts))
    }

    fn attacks(facts: &EventFacts, now_s: i64) -> Vec<Attack> {
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
    const REFUNDS: bool = false;
    const REFUND_STARTS_PENDING: bool = false;
    const FENCE: FenceProof = FenceProof::TakenInvoice;
    const APPROVAL: Approval = Approval::Charges;
    const LOOKUP: LookupBy = LookupBy::OurId;
    // The Payment Token, the Do Payment, then the Payment Inquiry.
    const CHARGE_REQUESTS: u64 = 3;

    fn fake() -> FakePspConfig {
        FakePspConfig::twoc2p()
    }

    fn psp_id(charge: &FakeCharge) -> String {
        let invoice = charge.idempotency_key.clone();
        invoice.expect("a 2C2P charge has an invoice number")
    }

    fn event(facts: &EventFacts, _now_s: i64) -> Delivery {
        Self::envelope(&sign_twoc2p_jwt(FAKE_API_KEY, &Self::claims(facts)))
    }

    /// No timestamp is signed (2C2P sends none), so there is no stale-signature attack.
    fn attacks(facts: &EventFacts, _now_s: i64) -> Vec<Attack> {
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
    // The create (approved), then the completion of the payment whose id was stored.
    const CHARGE_REQUESTS: u64 = 2;

    fn fake() -> FakePspConfig {
        FakePspConfig::square()
    }

    fn event(facts: &EventFacts, _now_s: i64) -> Delivery {
        Self::signed(
            DEFAULT_SQUARE_SIGNATURE_KEY,
            SQUARE_NOTIFICATION_URL,
            &Self::body(facts),
        )
    }

    fn attacks(facts: &EventFacts, _now_s: i64) -> Vec<Attack> {
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
