//! 2C2P's backend notification (PGW v4.3): `POST /webhooks/2c2p` with the body
//! `{"payload":"<JWS>"}`, a compact JWS (RFC 7515) signed HS256 — HMAC-SHA256 over
//! `<base64url header>.<base64url claims>` as transmitted — with the merchant's secret key. The
//! key is the secret key's text, used as bytes (not hex-decoded: 2C2P's own JWT sample only
//! reproduces that way).
//!
//! Verification is strict: exactly three segments, each strict unpadded base64url, a header
//! that is a JSON object whose `alg` is exactly `HS256` (`none`, `HS512`, `hs256`, … are
//! refused, as is any `crit` extension), and a signature compared in constant time. A body
//! without a readable envelope, or a token that does not parse → [`SignatureError::Malformed`]
//! (400); a wrong `alg` or signature → `NoValidSignature` (401).
//!
//! **No timestamp is checked**: the notification carries no `iat`/`exp` and no signed time
//! (2C2P documents none), so a captured notification stays valid forever. Replays are harmless
//! only because the event id is derived from the content (SHA-256 of invoiceNo, respCode and
//! tranRef, see [`event_id_for`]) and events are deduplicated, and because settlements only
//! move forward.

use super::b64::{self, Alphabet};
use super::twoc2p_ids::payment_id_for_invoice;
use crate::domain::{Currency, Settlement};
use crate::ports::{CheckedAmount, PspEvent, SignatureError, WebhookScheme};
use hmac::{Hmac, KeyInit, Mac};
use lambda_http::http::HeaderMap;
use serde::de::Error as _;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The provider name 2C2P notifications arrive under by default (`/webhooks/2c2p`).
pub const TWOC2P_PROVIDER: &str = crate::domain::PspKind::TwoC2p.name();

/// The event kind of a backend notification (2C2P gives it no type).
pub const NOTIFICATION_KIND: &str = "backend_notification";

/// The `minor` reported when a notification's amount cannot be read exactly (not a decimal, more
/// significant fractional digits than the currency has, an unsupported currency, no amount):
/// never a payment's amount, so the cross-check refuses the event and raises its alarm rather
/// than skipping the check.
pub const UNREADABLE_AMOUNT_MINOR: i64 = -1;

/// The only JWS algorithm accepted.
const ALG: &str = "HS256";

/// Why the scheme's configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwoC2pConfigError {
    /// No merchant id: no notification could be recognised as ours.
    #[error("the 2C2P merchant id is empty")]
    EmptyMerchantId,
    /// No secret key: an HMAC key must not be empty.
    #[error("the 2C2P secret key is empty")]
    EmptySecretKey,
}

/// The 2C2P notification scheme for one merchant.
pub struct TwoC2pNotifications {
    provider: String,
    merchant_id: String,
    secret_key: Vec<u8>,
    /// The account settles manually: an approval is an authorization payonce settles.
    settles_manually: bool,
}

impl std::fmt::Debug for TwoC2pNotifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoC2pNotifications")
            .field("provider", &self.provider)
            .field("merchant_id", &self.merchant_id)
            .finish_non_exhaustive()
    }
}

impl TwoC2pNotifications {
    /// The scheme for provider `2c2p`, merchant `merchant_id`, verifying with `secret_key`
    /// (the merchant's secret key as 2C2P issues it, used as text). Empty values are refused.
    pub fn new(
        merchant_id: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Result<Self, TwoC2pConfigError> {
        let (merchant_id, secret_key) = (merchant_id.into(), secret_key.into());
        if merchant_id.is_empty() {
            return Err(TwoC2pConfigError::EmptyMerchantId);
        }
        if secret_key.is_empty() {
            return Err(TwoC2pConfigError::EmptySecretKey);
        }
        Ok(Self {
            provider: TWOC2P_PROVIDER.to_owned(),
            merchant_id,
            secret_key: secret_key.into_bytes(),
            settles_manually: false,
        })
    }

    /// For an account that settles manually (`settles_manually`): an approval then holds the
    /// money until payonce settles it, and reads as an authorization, never a success.
    pub fn settling_manually(mut self, settles_manually: bool) -> Self {
        self.settles_manually = settles_manually;
        self
    }

    /// The same scheme under another provider name (e.g. a fake PSP speaking 2C2P's format).
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// Verifies a compact JWS and returns its claims' bytes (JSON, not yet parsed).
    pub fn verify_token(&self, token: &str) -> Result<Vec<u8>, SignatureError> {
        let mut segments = token.split('.');
        let (Some(header), Some(claims), Some(signature), None) = (
            segments.next(),
            segments.next(),
            segments.next(),
            segments.next(),
        ) else {
            return Err(SignatureError::Malformed);
        };
        let decode = |segment: &str| {
            b64::decode(segment, Alphabet::UrlSafeNoPad).ok_or(SignatureError::Malformed)
        };
        let header_json: Map<String, Value> =
            serde_json::from_slice(&decode(header)?).map_err(|_| SignatureError::Malformed)?;
        let claims_bytes = decode(claims)?;
        let signature_bytes = decode(signature)?;
        // The algorithm is ours to choose, never the token's; no critical extension is understood.
        if header_json.get("alg").and_then(Value::as_str) != Some(ALG)
            || header_json.contains_key("crit")
        {
            return Err(SignatureError::NoValidSignature);
        }
        // verify_slice compares in constant time (and refuses any other length).
        mac(&self.secret_key, header, claims)
            .verify_slice(&signature_bytes)
            .map_err(|_| SignatureError::NoValidSignature)?;
        Ok(claims_bytes)
    }

    /// The verified claims of a notification body.
    fn verified_claims(&self, body: &[u8]) -> Result<Vec<u8>, SignatureError> {
        let envelope: Envelope =
            serde_json::from_slice(body).map_err(|_| SignatureError::Malformed)?;
        self.verify_token(&envelope.payload)
    }
}

/// The HMAC-SHA256 of `<header>.<claims>` (the segments as transmitted) under `key`.
fn mac(key: &[u8], header: &str, claims: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(header.as_bytes());
    mac.update(b".");
    mac.update(claims.as_bytes());
    mac
}

/// A compact JWS of `claims` with header `{"alg":"HS256","typ":"JWT"}`, signed with
/// `secret_key`'s text, as 2C2P (and a fake PSP speaking its format) signs them.
pub fn sign_token(secret_key: &str, claims: &Value) -> String {
    sign_claims_json(secret_key, &claims.to_string())
}

/// [`sign_token`] over claims given as JSON text, signed as is: for claims whose exact text
/// matters (2C2P's decimal `amount`, written without going through a float).
pub(crate) fn sign_claims_json(secret_key: &str, claims_json: &str) -> String {
    let header = b64::encode(br#"{"alg":"HS256","typ":"JWT"}"#, Alphabet::UrlSafeNoPad);
    let claims = b64::encode(claims_json.as_bytes(), Alphabet::UrlSafeNoPad);
    let signature = mac(secret_key.as_bytes(), &header, &claims)
        .finalize()
        .into_bytes();
    format!(
        "{header}.{claims}.{}",
        b64::encode(&signature, Alphabet::UrlSafeNoPad)
    )
}

#[derive(Deserialize)]
struct Envelope {
    payload: String,
}

/// The dedup key of a notification (2C2P sends no event id): the lowercase hex SHA-256 of the
/// three values, each written as `<byte length>:<value>;` so no two triples share an encoding
/// (`("ab","c",…)` and `("a","bc",…)` differ). A missing value counts as empty.
pub fn event_id_for(invoice_no: &str, resp_code: &str, tran_ref: &str) -> String {
    let mut hash = Sha256::new();
    for value in [invoice_no, resp_code, tran_ref] {
        hash.update(format!("{}:", value.len()).as_bytes());
        hash.update(value.as_bytes());
        hash.update(b";");
    }
    hex::encode(hash.finalize())
}

/// What a 2C2P payment response code (`respCode`) says, by the research notes' reading of
/// developer.2c2p.com's response-code tables. 2C2P publishes no final/pending flags, so only
/// codes listed here are classified; every other code is [`ResponseClass::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseClass {
    /// `0000`: paid.
    Approved,
    /// `0001` pending, `2001` in progress, `4009` request in progress, `1000`–`1005` a customer
    /// action (3-D Secure, redirect, QR) payonce cannot provide: not final.
    Pending,
    /// The issuer refusals `4001 4002 4004 4005 4007 4012 4013 4014 4015 4033 4034 4035 4036
    /// 4037 4038 4039 4041 4043 4051 4054`: final.
    Declined,
    /// `0004` (soft decline, "resubmit after 3DS authentication"): final, nothing paid. 2C2P
    /// answers it both for a card that needed 3-D Secure under `request3DS: "N"` and for an
    /// authentication that failed; which one it was, the payment knows (it asked for 3-D Secure
    /// only with a `return_url`).
    AuthenticationRequired,
    /// `0003`: cancelled, nothing paid: final.
    Canceled,
    /// `2002`: transaction not found (an inquiry's answer).
    NotFound,
    /// Anything else — system errors (`0999`, `2003`, `4050`, `99xx`), approval-like or partial
    /// codes (`4000`, `4008`, `4010`, `4011`, `4016`, `4032`, `4045`–`4048`), merchant
    /// configuration (`4003`, `90xx`) and unlisted codes: never mapped silently.
    Unknown,
}

/// Classifies a `respCode`.
pub fn classify(resp_code: &str) -> ResponseClass {
    match resp_code {
        "0000" => ResponseClass::Approved,
        "0001" | "2001" | "4009" | "1000" | "1001" | "1002" | "1003" | "1004" | "1005" => {
            ResponseClass::Pending
        }
        "0004" => ResponseClass::AuthenticationRequired,
        "4001" | "4002" | "4004" | "4005" | "4007" | "4012" | "4013" | "4014" | "4015" | "4033"
        | "4034" | "4035" | "4036" | "4037" | "4038" | "4039" | "4041" | "4043" | "4051"
        | "4054" => ResponseClass::Declined,
        "0003" => ResponseClass::Canceled,
        "2002" => ResponseClass::NotFound,
        _ => ResponseClass::Unknown,
    }
}

/// A claim as text: a string as is, a number in its JSON form; `None` otherwise.
pub(crate) fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The currency of `currencyCode`: ISO 4217 alphabetic in any case (`"THB"`), or numeric
/// (`"764"` or `764`, as older 2C2P APIs write it).
fn currency_of(code: &str) -> Option<Currency> {
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()) {
        let numeric: u16 = code.parse().ok()?;
        return Currency::ALL
            .into_iter()
            .find(|c| c.iso_numeric() == numeric);
    }
    Currency::parse(&code.to_ascii_lowercase())
}

/// The amount and currency a notification reports, with [`UNREADABLE_AMOUNT_MINOR`] when the
/// amount cannot be read exactly in a supported currency.
///
/// `amount` is decimal major units, a string as sent (`"230.87"`) or a JSON number, read
/// through its text. serde_json (without `arbitrary_precision`) reads a JSON number with a
/// fraction as the nearest `f64` and writes it back in the shortest form that reads as the same
/// `f64`; for a decimal of at most 15 significant digits that form has the same value (`30.0` →
/// `"30.0"`, `1000.00` → `"1000.0"`, `230.87` → `"230.87"`), and every amount payonce accepts has
/// at most 10 (8 digits of minor units). Longer forms either carry non-zero digits beyond the
/// currency's exponent or exceed the largest amount, and exponent forms (`1e300`) are not
/// decimals: all are refused. What no reading of an `f64` can tell apart is a number sent with
/// more digits than it keeps (`30.0000000000000001` reads as `30.0`); 2C2P's D(12,5) format
/// never carries one. No arithmetic is done in floating point.
pub(crate) fn checked_amount(claims: &Map<String, Value>) -> CheckedAmount {
    let code = text(claims.get("currencyCode")).unwrap_or_default();
    let currency = currency_of(&code);
    let minor = currency
        .zip(text(claims.get("amount")))
        .and_then(|(currency, amount)| currency.minor_from_decimal(&amount))
        .unwrap_or(UNREADABLE_AMOUNT_MINOR);
    CheckedAmount {
        minor,
        currency: currency.map_or_else(|| code.to_ascii_lowercase(), |c| c.as_str().to_owned()),
    }
}

impl TwoC2pNotifications {
    /// Reads a notification, verifying it again first (so no claim is ever read from an
    /// unverified body, whoever calls this).
    ///
    /// - `event_id`: [`event_id_for`] (invoiceNo, respCode, tranRef).
    /// - A notification for another `merchantID` than ours names no payment, settles nothing and
    ///   reports no amount: the processor acknowledges and ignores it (it is not refused at
    ///   verification: the signature is good, the event just is not ours).
    /// - `payment_id`: from `invoiceNo` by [`payment_id_for_invoice`]; none for an invoice
    ///   number payonce did not make.
    /// - `settlement` by [`classify`]: approved → succeeded; declined → declined with the
    ///   `respCode` as decline code; cancelled → canceled (abandoned); `0004` → authentication
    ///   required; anything else → none (an unknown code is logged). The PSP's id is the invoice
    ///   number, as in the adapter's answers: one id whatever the notification carries.
    /// - `amount`: `amount` (a JSON number or a decimal string, major units) converted exactly
    ///   by the currency's exponent, and `currencyCode`, lowercased (see
    ///   [`UNREADABLE_AMOUNT_MINOR`]).
    /// - No `livemode`: 2C2P has none (the merchant id and host tell sandbox from production).
    pub fn parse_notification(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        let claims = self.verified_claims(body).map_err(|error| {
            serde_json::Error::custom(format!("the notification does not verify: {error}"))
        })?;
        let claims: Map<String, Value> = serde_json::from_slice(&claims)?;
        let invoice_no = text(claims.get("invoiceNo"));
        let resp_code = text(claims.get("respCode"));
        let tran_ref = text(claims.get("tranRef"));
        let event_id = event_id_for(
            invoice_no.as_deref().unwrap_or(""),
            resp_code.as_deref().unwrap_or(""),
            tran_ref.as_deref().unwrap_or(""),
        );
        let mut event = PspEvent {
            event_id,
            kind: NOTIFICATION_KIND.to_owned(),
            payment_id: None,
            settlement: None,
            refund: None,
            refunds_changed: false,
            amount: None,
            livemode: None,
            account: None,
        };
        if text(claims.get("merchantID")).as_deref() != Some(self.merchant_id.as_str()) {
            return Ok(event);
        }
        event.payment_id = invoice_no.as_deref().and_then(payment_id_for_invoice);
        // The PSP's id of a 2C2P payment is its invoice number, as in every answer the adapter
        // reads (see `provider_id` there); `tranRef` only tells notifications apart.
        let provider_id =
            if crate::mutations::active(crate::mutations::Mutation::TwoC2pNamesByTranRef) {
                tran_ref.clone().or(invoice_no.clone())
            } else {
                invoice_no.clone()
            };
        event.amount = Some(checked_amount(&claims));
        let code = resp_code.unwrap_or_default();
        event.settlement = match classify(&code) {
            ResponseClass::Approved if self.settles_manually => {
                let amount = event
                    .amount
                    .as_ref()
                    .map_or(UNREADABLE_AMOUNT_MINOR, |a| a.minor);
                provider_id.map(|provider_payment_id| Settlement::Authorized {
                    provider_payment_id,
                    amount_capturable: amount,
                    capture_before_ms: None,
                })
            }
            ResponseClass::Approved => {
                provider_id.map(|provider_payment_id| Settlement::Succeeded {
                    provider_payment_id,
                })
            }
            ResponseClass::Declined => Some(Settlement::Declined {
                provider_payment_id: provider_id,
                decline_code: code,
            }),
            // Cancelled, nothing paid: what the inquiry's lookup says too (a 3-D Secure payment
            // the customer left ends here).
            ResponseClass::Canceled => Some(Settlement::Canceled {
                provider_payment_id: provider_id,
                reason: crate::domain::CancellationReason::Abandoned,
            }),
            ResponseClass::AuthenticationRequired => Some(Settlement::AuthenticationRequired {
                provider_payment_id: provider_id,
            }),
            ResponseClass::Pending | ResponseClass::NotFound => None,
            ResponseClass::Unknown => {
                tracing::error!(event_id = %event.event_id, payment_id = ?event.payment_id,
                    resp_code = %code, resp_desc = ?text(claims.get("respDesc")), alarm = "psp-answer-untrusted",
                    "a 2C2P notification carries a response code payonce does not classify; nothing applied");
                None
            }
        };
        Ok(event)
    }
}

impl WebhookScheme for TwoC2pNotifications {
    fn provider(&self) -> &str {
        &self.provider
    }

    /// Verifies the body's token. The headers carry nothing 2C2P signs, and `now_s` is unused:
    /// there is no timestamp to check (see the module's documentation).
    fn verify(&self, _headers: &HeaderMap, body: &[u8], _now_s: i64) -> Result<(), SignatureError> {
        self.verified_claims(body).map(|_| ())
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        self.parse_notification(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MERCHANT: &str = "JT01";
    const KEY: &str = "C2P0000000000000000000000000VECTORSKEY00000000000000000000000000";
    const INVOICE: &str = "0123456789abcdef0123456789abcdef";
    const PAY: &str = "pay_0123456789abcdef0123456789abcdef";

    fn scheme() -> TwoC2pNotifications {
        TwoC2pNotifications::new(MERCHANT, KEY).unwrap()
    }

    fn body(token: &str) -> Vec<u8> {
        json!({ "payload": token }).to_string().into_bytes()
    }

    /// Every vector of testdata/2c2p-notification-jwts.json, computed independently of this code
    /// (a copy of the steering repository's shared/testdata, checked against it when that folder
    /// sits beside the repository, as in CI), through the scheme's body handling.
    #[test]
    fn passes_the_independent_vectors() {
        let here = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/2c2p-notification-jwts.json"
        );
        let text = std::fs::read_to_string(here).expect("the vendored test vectors");
        let upstream = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/testdata/2c2p-notification-jwts.json"
        );
        if let Ok(original) = std::fs::read_to_string(upstream) {
            assert_eq!(
                original, text,
                "the vendored vectors drifted from shared/testdata"
            );
        }
        let vectors: Value = serde_json::from_str(&text).unwrap();
        let scheme =
            TwoC2pNotifications::new(MERCHANT, vectors["secret_key"].as_str().unwrap()).unwrap();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 9);
        for case in cases {
            let name = &case["name"];
            let token = case["payload"].as_str().unwrap();
            let outcome = scheme.verify(&HeaderMap::new(), &body(token), 0);
            let valid = case["valid"].as_bool().unwrap();
            assert_eq!(outcome.is_ok(), valid, "{name}: {outcome:?}");
            if !valid {
                let expected = match case["why"].as_str().unwrap_or("") {
                    "a JWS has three segments" | "malformed signature" | "no token" => {
                        SignatureError::Malformed
                    }
                    _ => SignatureError::NoValidSignature,
                };
                assert_eq!(outcome, Err(expected), "{name}");
                assert!(scheme.parse(&body(token)).is_err(), "{name}");
                continue;
            }
            let claims: Value =
                serde_json::from_slice(&scheme.verify_token(token).unwrap()).unwrap();
            assert_eq!(claims, case["claims"], "{name}");
            // The vectors' invoice number is not one payonce makes: the rest is still read.
            let event = scheme.parse(&body(token)).unwrap();
            assert_eq!(
                event,
                PspEvent {
                    event_id: event_id_for("p1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6", "0000", "4254860"),
                    kind: NOTIFICATION_KIND.into(),
                    payment_id: None,
                    settlement: Some(Settlement::Succeeded {
                        provider_payment_id: "p1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6".into()
                    }),
                    refund: None,
                    refunds_changed: false,
                    amount: Some(CheckedAmount {
                        minor: 3000,
                        currency: "sgd".into()
                    }),
                    livemode: None,
                    account: None,
                },
                "{name}"
            );
        }
    }

    /// 2C2P's own sample (developer.2c2p.com/docs/json-web-tokens-jwt) reproduces with the key's
    /// text as the HMAC key, not with the key hex-decoded.
    #[test]
    fn the_key_is_the_secret_keys_text() {
        let key = "1F4EDB965BBB3094F791A83750FBDCDA3852131CB5218E21E4F42929A1975E60";
        let token = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJtZXJjaGFudElEIjoiSlQwMSIsImludm9pY2VObyI6IjE1MjM5NTM2NjEiLCJkZXNjcmlwdGlvbiI6Iml0ZW0gMSIsImFtb3VudCI6MTAwMCwiY3VycmVuY3lDb2RlIjoiU0dEIn0.ElmhOULUdK63FnriSs2XyhH1LxULoTVIopTUuQ77DvA";
        let scheme = TwoC2pNotifications::new(MERCHANT, key).unwrap();
        let claims: Value = serde_json::from_slice(&scheme.verify_token(token).unwrap()).unwrap();
        assert_eq!(
            claims,
            json!({"merchantID":"JT01","invoiceNo":"1523953661","description":"item 1","amount":1000,"currencyCode":"SGD"})
        );
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let mut hex_keyed = Hmac::<Sha256>::new_from_slice(&hex::decode(key).unwrap()).unwrap();
        hex_keyed.update(signed.as_bytes());
        let expected = b64::decode(signature, Alphabet::UrlSafeNoPad).unwrap();
        assert!(hex_keyed.verify_slice(&expected).is_err());
    }

    /// A token with `header` (JSON text) over `claims`, signed with `key`.
    fn token_with(header: &str, claims: &Value, key: &str) -> String {
        let header = b64::encode(header.as_bytes(), Alphabet::UrlSafeNoPad);
        let claims = b64::encode(claims.to_string().as_bytes(), Alphabet::UrlSafeNoPad);
        let signature = mac(key.as_bytes(), &header, &claims)
            .finalize()
            .into_bytes();
        format!(
            "{header}.{claims}.{}",
            b64::encode(&signature, Alphabet::UrlSafeNoPad)
        )
    }

    fn claims(resp_code: &str) -> Value {
        // developer.2c2p.com/docs/api-payment-response-backend, with our invoice number.
        json!({
            "merchantID": MERCHANT,
            "invoiceNo": INVOICE,
            "cardNo": "411111XXXXXX1111",
            "amount": "230.87",
            "currencyCode": "THB",
            "tranRef": "2868821",
            "referenceNo": "2785703",
            "approvalCode": "531484",
            "eci": "05",
            "transactionDateTime": "20200528080508",
            "respCode": resp_code,
            "respDesc": "Success",
        })
    }

    #[test]
    fn only_hs256_with_our_key_over_the_token_as_sent_verifies() {
        let claims = claims("0000");
        let verify = |token: &str| scheme().verify(&HeaderMap::new(), &body(token), 0);
        assert_eq!(verify(&sign_token(KEY, &claims)), Ok(()));
        assert_eq!(
            verify(&token_with(r#"{"alg":"HS256"}"#, &claims, KEY)),
            Ok(())
        );
        assert_eq!(
            verify(&sign_token("another key", &claims)),
            Err(SignatureError::NoValidSignature)
        );
        for header in [
            r#"{"alg":"none"}"#,
            r#"{"alg":"HS512"}"#,
            r#"{"alg":"hs256"}"#,
            r#"{"alg":"HS256 "}"#,
            r#"{"typ":"JWT"}"#,
            r#"{"alg":["HS256"]}"#,
            r#"{"alg":"HS256","crit":["exp"],"exp":1}"#,
        ] {
            assert_eq!(
                verify(&token_with(header, &claims, KEY)),
                Err(SignatureError::NoValidSignature),
                "{header}"
            );
        }
        // The header must be a JSON object.
        for header in ["[]", "\"HS256\"", "not json", ""] {
            assert_eq!(
                verify(&token_with(header, &claims, KEY)),
                Err(SignatureError::Malformed),
                "{header:?}"
            );
        }
        // Strict base64url in every segment: no padding, no standard alphabet, no junk.
        let good = sign_token(KEY, &claims);
        let segments: Vec<&str> = good.split('.').collect();
        for i in 0..3 {
            for junk in ["=", "+", "/", " ", "*", "\n"] {
                let mut altered = segments.clone();
                let changed = format!("{}{junk}", segments[i]);
                altered[i] = &changed;
                assert_eq!(
                    verify(&altered.join(".")),
                    Err(SignatureError::Malformed),
                    "segment {i} + {junk:?}"
                );
            }
        }
        // A signature cut short, or extended, is not the signature.
        let short = &good[..good.len() - 3];
        assert_eq!(verify(short), Err(SignatureError::NoValidSignature));
        let long = format!("{good}AAAA");
        assert_eq!(verify(&long), Err(SignatureError::NoValidSignature));
        // Four segments, or none.
        assert_eq!(verify(&format!("{good}.")), Err(SignatureError::Malformed));
        assert_eq!(verify(".."), Err(SignatureError::Malformed));
    }

    #[test]
    fn an_unreadable_envelope_is_malformed_and_time_is_not_checked() {
        let scheme = scheme();
        for bad in [
            &b"not json"[..],
            b"",
            b"[]",
            b"{}",
            br#"{"payload":5}"#,
            br#"{"payload":null}"#,
            br#"{"Payload":"a.b.c"}"#,
        ] {
            assert_eq!(
                scheme.verify(&HeaderMap::new(), bad, 0),
                Err(SignatureError::Malformed),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let token = body(&sign_token(KEY, &claims("0000")));
        for now in [i64::MIN, 0, 1_796_000_000, i64::MAX] {
            assert_eq!(scheme.verify(&HeaderMap::new(), &token, now), Ok(()));
        }
    }

    #[test]
    fn parsing_verifies_again() {
        let claims = claims("0000");
        let forged = token_with(r#"{"alg":"none"}"#, &claims, KEY);
        assert!(scheme().parse(&body(&forged)).is_err());
        assert!(scheme()
            .parse(&body(&sign_token("another key", &claims)))
            .is_err());
        assert!(scheme().parse(b"not json").is_err());
        // Signed claims that are not a JSON object are an error too.
        let token = token_with(r#"{"alg":"HS256"}"#, &json!(["0000"]), KEY);
        assert!(scheme().parse(&body(&token)).is_err());
    }

    fn parsed(claims: &Value) -> PspEvent {
        scheme().parse(&body(&sign_token(KEY, claims))).unwrap()
    }

    #[test]
    fn the_documented_notification_settles_our_payment() {
        assert_eq!(
            parsed(&claims("0000")),
            PspEvent {
                event_id: event_id_for(INVOICE, "0000", "2868821"),
                kind: NOTIFICATION_KIND.into(),
                payment_id: Some(PAY.into()),
                settlement: Some(Settlement::Succeeded {
                    provider_payment_id: INVOICE.into()
                }),
                refund: None,
                refunds_changed: false,
                amount: Some(CheckedAmount {
                    minor: 23087,
                    currency: "thb".into()
                }),
                livemode: None,
                account: None,
            }
        );
        // No tranRef: the invoice number stands in as the PSP's id.
        let mut bare = claims("0000");
        bare.as_object_mut().unwrap().remove("tranRef");
        assert_eq!(
            parsed(&bare).settlement,
            Some(Settlement::Succeeded {
                provider_payment_id: INVOICE.into()
            })
        );
    }

    #[test]
    fn response_codes_settle_by_class() {
        let declined = |code: &str| {
            Some(Settlement::Declined {
                provider_payment_id: Some(INVOICE.into()),
                decline_code: code.into(),
            })
        };
        for code in ["4005", "4051", "4054", "4014", "4041", "4043"] {
            assert_eq!(classify(code), ResponseClass::Declined, "{code}");
            assert_eq!(parsed(&claims(code)).settlement, declined(code), "{code}");
        }
        // The soft decline is not the card's fault: authentication was required (or failed).
        assert_eq!(classify("0004"), ResponseClass::AuthenticationRequired);
        assert_eq!(
            parsed(&claims("0004")).settlement,
            Some(Settlement::AuthenticationRequired {
                provider_payment_id: Some(INVOICE.into())
            })
        );
        assert_eq!(classify("0003"), ResponseClass::Canceled);
        assert_eq!(
            parsed(&claims("0003")).settlement,
            Some(Settlement::Canceled {
                provider_payment_id: Some(INVOICE.into()),
                reason: crate::domain::CancellationReason::Abandoned
            })
        );
        for code in ["0001", "2001", "4009", "1000", "1001", "1005"] {
            assert_eq!(classify(code), ResponseClass::Pending, "{code}");
            assert_eq!(parsed(&claims(code)).settlement, None, "{code}");
        }
        assert_eq!(classify("2002"), ResponseClass::NotFound);
        for code in [
            "0999", "2003", "4000", "4003", "4006", "4008", "4010", "4011", "4016", "4032", "4045",
            "4050", "9015", "9999", "", "000", "00000",
        ] {
            assert_eq!(classify(code), ResponseClass::Unknown, "{code:?}");
            assert_eq!(parsed(&claims(code)).settlement, None, "{code:?}");
        }
        // Every notification names the payment, whatever its code.
        assert_eq!(parsed(&claims("4006")).payment_id.as_deref(), Some(PAY));
    }

    #[test]
    fn another_merchants_or_invoices_notification_is_not_ours() {
        let mut other = claims("0000");
        other["merchantID"] = json!("JT02");
        let event = parsed(&other);
        assert_eq!(
            (event.payment_id, event.settlement, event.amount),
            (None, None, None)
        );
        assert_eq!(event.event_id, event_id_for(INVOICE, "0000", "2868821"));
        let mut missing = claims("0000");
        missing.as_object_mut().unwrap().remove("merchantID");
        assert_eq!(parsed(&missing).settlement, None);
        // An invoice number payonce did not make (2C2P's documentation sample).
        let mut foreign = claims("0000");
        foreign["invoiceNo"] = json!("280520075921");
        assert_eq!(parsed(&foreign).payment_id, None);
    }

    fn amount_of(amount: Value, currency: Value) -> CheckedAmount {
        let mut claims = claims("0000");
        claims["amount"] = amount;
        claims["currencyCode"] = currency;
        parsed(&claims).amount.unwrap()
    }

    fn checked(minor: i64, currency: &str) -> CheckedAmount {
        CheckedAmount {
            minor,
            currency: currency.into(),
        }
    }

    #[test]
    fn amounts_convert_exactly_from_strings_and_numbers() {
        let cases = [
            (json!("230.87"), json!("THB"), checked(23087, "thb")),
            (
                json!("000000002500.90000"),
                json!("THB"),
                checked(250090, "thb"),
            ),
            (json!(30.0), json!("SGD"), checked(3000, "sgd")),
            (json!(1000), json!("SGD"), checked(100000, "sgd")),
            (json!(230.87), json!("THB"), checked(23087, "thb")),
            (json!(0.29), json!("USD"), checked(29, "usd")),
            (json!(4.35), json!("USD"), checked(435, "usd")),
            (json!(999999.99), json!("USD"), checked(99999999, "usd")),
            (json!(1500), json!("JPY"), checked(1500, "jpy")),
            (json!("1500"), json!("jpy"), checked(1500, "jpy")),
            (json!(1500.0), json!("JPY"), checked(1500, "jpy")),
            // Numeric ISO 4217 codes.
            (json!("230.87"), json!("764"), checked(23087, "thb")),
            (json!("230.87"), json!(764), checked(23087, "thb")),
            (json!("30"), json!("702"), checked(3000, "sgd")),
        ];
        for (amount, currency, expected) in cases {
            assert_eq!(
                amount_of(amount.clone(), currency.clone()),
                expected,
                "{amount} {currency}"
            );
        }
        // The JSON text of a number with a fraction is its exact value.
        let number: Value = serde_json::from_str("1000.00").unwrap();
        assert_eq!(amount_of(number, json!("SGD")), checked(100000, "sgd"));
    }

    #[test]
    fn amounts_that_cannot_be_read_exactly_never_match() {
        let unreadable = |currency: &str| checked(UNREADABLE_AMOUNT_MINOR, currency);
        let cases = [
            (json!("30.001"), json!("SGD"), unreadable("sgd")),
            (json!(30.001), json!("SGD"), unreadable("sgd")),
            (json!("1500.5"), json!("JPY"), unreadable("jpy")),
            (json!("-1.00"), json!("SGD"), unreadable("sgd")),
            (json!(-1.0), json!("SGD"), unreadable("sgd")),
            (json!("1e3"), json!("SGD"), unreadable("sgd")),
            (json!(1e300), json!("SGD"), unreadable("sgd")),
            (json!(1e-7), json!("SGD"), unreadable("sgd")),
            (json!(1234567.891234567), json!("SGD"), unreadable("sgd")),
            (json!(0.1 + 0.2), json!("SGD"), unreadable("sgd")),
            (json!("1000000.00"), json!("USD"), unreadable("usd")),
            (json!(""), json!("SGD"), unreadable("sgd")),
            (json!(null), json!("SGD"), unreadable("sgd")),
            (json!(true), json!("SGD"), unreadable("sgd")),
            (json!("230.87"), json!("MYR"), unreadable("myr")),
            (json!("230.87"), json!("458"), unreadable("458")),
            (json!("230.87"), json!(""), unreadable("")),
            (json!("230.87"), json!(null), unreadable("")),
        ];
        for (amount, currency, expected) in cases {
            assert_eq!(
                amount_of(amount.clone(), currency.clone()),
                expected,
                "{amount} {currency}"
            );
        }
        let mut missing = claims("0000");
        missing.as_object_mut().unwrap().remove("amount");
        assert_eq!(parsed(&missing).amount, Some(unreadable("thb")));
    }

    #[test]
    fn event_ids_are_unambiguous_hashes_of_invoice_code_and_reference() {
        let id = event_id_for(INVOICE, "0000", "2868821");
        assert_eq!(id.len(), 64);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(id, event_id_for(INVOICE, "0000", "2868821"));
        assert_ne!(id, event_id_for(INVOICE, "4051", "2868821"));
        assert_ne!(id, event_id_for(INVOICE, "0000", "2868822"));
        assert_ne!(event_id_for("ab", "c", "d"), event_id_for("a", "bc", "d"));
        assert_ne!(event_id_for("a", "", "b"), event_id_for("a", "b", ""));
        // The exact encoding, so other implementations (a fake PSP) can derive the same ids.
        assert_eq!(
            event_id_for("inv", "0000", "tr"),
            hex::encode(Sha256::digest(b"3:inv;4:0000;2:tr;"))
        );
        // Numbers are read as their text.
        let mut numeric = claims("0000");
        numeric["tranRef"] = json!(2868821);
        assert_eq!(parsed(&numeric).event_id, id);
    }

    #[test]
    fn configuration_is_checked_and_the_key_never_shown() {
        assert_eq!(
            TwoC2pNotifications::new("", KEY).unwrap_err(),
            TwoC2pConfigError::EmptyMerchantId
        );
        assert_eq!(
            TwoC2pNotifications::new(MERCHANT, "").unwrap_err(),
            TwoC2pConfigError::EmptySecretKey
        );
        assert_eq!(scheme().provider(), "2c2p");
        assert_eq!(scheme().with_provider("fake").provider(), "fake");
        let shown = format!("{:?}", scheme());
        assert!(shown.contains(MERCHANT) && !shown.contains(KEY), "{shown}");
    }
}
