//! The 2C2P face: 2C2P PGW v4.3's Payment Token, Do Payment and Payment Inquiry, and its backend
//! notification, and the Payment Maintenance API (`maintenance`, in its JWS/JWE envelope,
//! `jose`), over the [ledger] (`ModelConfig::provider = Provider::TwoC2p`). The charges,
//! test tokens, time-driven transitions and injected failures are the ledger's, exactly as on the
//! Stripe and Omise faces; this module only reads 2C2P's requests and writes 2C2P's answers and
//! notifications, and keeps what only 2C2P has (invoices and their payment tokens). It calls the
//! ledger's provider-neutral `Ledger::attempt_charge` and `Ledger::insert` after validating a
//! request in 2C2P's terms.
//!
//! Sources are `docs/psp-research.md` (2C2P §8–§13, and §0.2 for the notification vectors) and
//! the developer.2c2p.com pages it cites;
//! the inspection fields are this crate's own contract (its top-level docs).
//! Each rule names what it follows; where 2C2P's documentation says nothing, the rule says so
//! (UNCONFIRMED) and what the fake does instead:
//!
//! - **JWT envelope** (notes §8, "JSON Web Tokens (JWT)"): Payment Token and Payment Inquiry take
//!   `{"payload":"<JWT>"}`, a compact JWS signed HS256 with the merchant's secret key used as
//!   text (`ModelConfig::api_key`), and answer the same way, signed with the same key. Only
//!   `HS256` is accepted (a header with another `alg` or with `crit` does not verify); every
//!   segment must be strict unpadded base64url; the signature is compared in constant time.
//! - **Merchant and signature** (API response codes, notes §8): the claims are read first only
//!   to find `merchantID` (as 2C2P must, to know whose key to verify with). No `payload` → `9005`
//!   (mandatory field missing); no `merchantID` → `9005`; another merchant than
//!   `ModelConfig::twoc2p_merchant_id` → `9007` "invalid merchant"; a token that does not verify
//!   with the key (or is not a JWS) → `9042` "hash value mismatch".
//! - **Error answers are plain**: whether 2C2P signs its error answers is UNCONFIRMED (notes §8);
//!   third-party clients handle a body without `payload` but with a `respCode`, so every API
//!   error (`9xxx`) is answered HTTP 200 `{"respCode":…,"respDesc":…}`, unsigned. What the
//!   Payment Inquiry says about a payment (including `2002`) is signed, since it is the payment
//!   response, not an API error.
//! - **Payment Token** (`POST /payment/4.3/paymentToken`, "Payment Token API" request and
//!   response parameters): claims `merchantID`, `invoiceNo` (M, AN 50), `description` (M, C 250),
//!   `amount` (M, D(12,5): decimal major units, a JSON number or a string), `currencyCode` (M,
//!   A 3), `paymentChannel` (O), `request3DS` (O: `Y` enable, the default, `F` force, `N`
//!   disable), `frontendReturnUrl` (O: an absolute http(s) URL, else `9004`). Validation comes before the
//!   invoice is looked at and stores nothing: a missing or empty mandatory claim → `9005`; an
//!   `invoiceNo` with other than ASCII letters and digits → `9004` (the fake's reading of "AN");
//!   `invoiceNo` over 50 or `description` over 250 characters → `9006`; an `amount` that is not a
//!   decimal of at most 12 integer and 5 fractional digits, is not positive, carries non-zero
//!   digits beyond the currency's exponent, exceeds eight digits of minor units or is below a
//!   `ModelConfig::minimum_overrides` minimum → `9009` (2C2P documents no limits: UNCONFIRMED);
//!   a `currencyCode` that is not an upper-case ISO 4217 code the fake charges in → `9010`; a
//!   `paymentChannel` other than `["CC"]` → `9057` (which of `9057`–`9060` is UNCONFIRMED); a bad
//!   `request3DS` → `9004`; any claim the fake does not model (`idempotencyID`, whose semantics
//!   2C2P does not document, included) → `9004` (refusing what it does not model is the fake's
//!   choice, as on the other faces). Then a new `invoiceNo` → `0000` with a `paymentToken` drawn
//!   from the seed and a `webPaymentUrl` (on a host that does not exist: the fake has no hosted
//!   page), signed; an `invoiceNo` the merchant used before — with a paid, declined, pending or
//!   never used token alike — → `9015` "Existing Invoice Number" (notes §11; that it fires for an
//!   unused token too is UNCONFIRMED, and it is what payonce's fence relies on). The invoice
//!   keeps `request3DS` and `frontendReturnUrl` for its Do Payment (3-D Secure, below).
//! - **Do Payment** (`POST /payment/4.3/payment`, plain JSON, "Do Payment API"): `paymentToken`,
//!   `payment.code.channelCode` (`CC` only, else `9057`) and `payment.data.securePayToken` (the
//!   test token: the same tokens as the other faces); other fields are accepted and ignored. Not
//!   JSON → `9004`; a missing field → `9005`. An unknown payment token → `9040` "the token is
//!   invalid"; one older than 30 minutes ("Valid for 30 minutes") → `9040` as well (the code for
//!   an expired token is UNCONFIRMED); a token already used → `9041` "Payment token already used"
//!   (single use, notes §11). Then the charge runs through the model: an unknown
//!   `securePayToken` → `9004` and nothing happens (the token stays unused, the inquiry keeps
//!   answering `2002`); `pm_fake_error_before_charge` → `9993` "An unknown error has occurred",
//!   nothing created, the token unused; anything that reached the charge step uses the token and
//!   is answered `2000` "Transaction is completed, please do payment inquiry request for full
//!   payment information." (approvals, declines, and the lost-response and slow tokens, whose
//!   answer is cut or held back as on the other faces), except a charge still in progress:
//!   `pm_fake_processing` → `2001` "Transaction in progress", and a charge waiting for 3-D
//!   Secure → `1001` "Redirect to authenticate ACS bank page." with the redirect URL in `data`
//!   ("Payment flow response code": full redirect).
//! - **3-D Secure**: a card that needs it (`pm_card_threeDSecure2Required`,
//!   `pm_card_authenticationRequired`) under a token that asked for it (`request3DS` `Y` or `F`)
//!   and named a `frontendReturnUrl` waits for the customer: `1001` with `data` the fake's page
//!   `<base_url>/_fake/authenticate/<tranRef>`, inquiry `0001` pending, `_fake/charges` outcome
//!   `pending`. The page (shared with the Omise face): `GET` the form, `POST result=complete` →
//!   `0000`, `result=fail` → `0004` (2C2P's soft decline answers a failed challenge too:
//!   UNCONFIRMED), each with its backend notification and a 303 to the `frontendReturnUrl`; a
//!   charge no longer waiting → 409, unknown → 404. A page never answered lapses after
//!   `requires_action_for` into `0004` with its notification (2C2P's own timeout and code for an
//!   abandoned challenge are UNCONFIRMED). Under `request3DS: "N"`, or without a
//!   `frontendReturnUrl` (2C2P would fall back to the merchant profile's URL: UNCONFIRMED), the
//!   card is soft-declined at once: Do Payment `2000`, inquiry and notification `0004`.
//!   `pm_fake_requires_action` waits alike (with no return URL) and fails `0004` after
//!   `requires_action_for`.
//! - **Payment Inquiry** (`POST /payment/4.3/paymentInquiry`, "Payment Inquiry API"): claims
//!   `merchantID` and either `invoiceNo` or `paymentToken` (neither → `9005`), `locale`
//!   (optional); others → `9004`. Answered signed: an invoice the merchant never used, or one
//!   whose token never paid → `2002` "Transaction not found" (for a minted but unused token
//!   2C2P might answer `0001` instead: UNCONFIRMED, notes §11; `2002` is what payonce's adapter
//!   reads as "not found"). A charge → `merchantID`, `invoiceNo`, `amount` (decimal string in
//!   major units with the currency's exponent, as in the notification), `currencyCode`
//!   (upper case), `tranRef` (the charge's id, seven digits from the seed), `channelCode` `CC`,
//!   `transactionDateTime` (`yyyyMMddHHmmss`, UTC), `respCode`, `respDesc`, where `respCode` is
//!   ("Payment response codes"): `0000` approved (captured, or authorized on a
//!   manual-settlement account); a decline by its Stripe decline code —
//!   `insufficient_funds` → `4051` "Insufficient Funds", any other (`generic_decline`) → `4005`
//!   "Do not honor" (the 40xx block mirrors ISO 8583 issuer codes, notes §9); authentication
//!   never done → `0004` (soft decline, 3-D Secure required); waiting → `0001` "Transaction is
//!   pending"; cancelled → `0003` (voided through the maintenance API, or an authorization that
//!   lapsed).
//! - **Backend notification** ("Payment response – backend", notes §10 and the vectors of §0.2):
//!   when a charge becomes final (approved, an authorization of a manual-settlement account
//!   included, or declined: at once for approvals and declines, when the time-driven transition
//!   falls due for the processing and requires-action tokens, when the 3-D Secure page is
//!   answered), the body `{"payload":"<JWT>"}` with the inquiry's claims, signed HS256 with the
//!   merchant's secret key, is sent to the webhook URL (no header: the body carries its
//!   signature; the webhook secret is not used). Its id, for the fake's own bookkeeping, is payonce's dedup key: SHA-256
//!   of (invoiceNo, respCode, tranRef). 2C2P documents no retry schedule or event id.
//! - **Manual settlement** (`ModelConfig::twoc2p_manual_settlement`, off by default: a setting
//!   of the merchant account, not of a payment; notes "2C2P authorize now, settle later"): on
//!   such an account every charge Do Payment (or the 3-D Secure page, or the end of
//!   `pm_fake_processing`) approves is created as the ledger's manual-capture authorization
//!   (`requires_capture`, `_fake/charges` outcome `authorized`, `capture_method` `manual`,
//!   nothing captured) instead of being charged, until the maintenance API settles (`S`) or
//!   voids (`V`) it; unsettled, it lapses after `authorization_expires_after` (the ledger's
//!   cancel: `outcome` `canceled`). Do Payment, the Payment Inquiry, the 3-D Secure return and
//!   the backend notification read exactly as for an approved payment (`2000`, `0000`): 2C2P
//!   documents no way to tell an authorization apart there. A lapse sends no notification
//!   (2C2P notifies a payment's result, not its void) and the inquiry then reads `0003`, as for
//!   a voided payment.
//! - **Refunds, voids and settlements** (notes §12) go through the Payment Maintenance API at
//!   `POST /2C2PFrontend/PaymentAction/2.0/action`, with exchanged RSA keys: see the
//!   `maintenance` module. Every other path → 404 (a fake's body, 2C2P's is undocumented).
//! - **Inspection** (the crate's contract): `_fake/refunds` entries carry `provider: "2c2p"`,
//!   `id` (the `refundReferenceNo`), `status` (`RF`, `RP`, `RFF`), `invoice_no`, `payment_id`
//!   (read from the invoice number), `idempotency_key` (the `idempotencyID`, if sent) and no
//!   `refund_id` (2C2P carries none of payonce's). `_fake/charges` entries carry `provider: "2c2p"`, `status` (the
//!   inquiry's `respCode`), `outcome`, `amount` (minor units), `currency`, `idempotency_key` and
//!   `invoice_no` (the invoiceNo), and `payment_id`, read from the invoice number the way payonce
//!   makes it (`pay_` + the 32 hex digits; none for another invoice number). 2C2P has no
//!   metadata; the fake keeps none.
//!
//! [ledger]: crate::ledger

mod jose;
pub(crate) mod maintenance;

use std::collections::BTreeMap;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::currency::{is_zero_decimal, minimum_charge_minor, MAXIMUM_CHARGE_MINOR};
use crate::faces::dates::iso8601;
use crate::faces::page::{answer_page, AUTHENTICATE_PATH};
use crate::ledger::{
    millis, Attempt, CaptureMethod, Decline, Face, Failure, FakeCharge, FakeRefund, Handled, Hold,
    Intent, Ledger, ModelEvent, NewCharge, OnAction, PageAnswer, Refund, RefundStatus, Reply,
    Status, WireRequest,
};
use crate::twoc2p_keys::TwoC2pMaintenanceKeys;

use self::maintenance::{Maintenance, ACTION_PATH};

/// `POST` Payment Token.
pub(crate) const PAYMENT_TOKEN_PATH: &str = "/payment/4.3/paymentToken";
/// `POST` Do Payment.
pub(crate) const DO_PAYMENT_PATH: &str = "/payment/4.3/payment";
/// `POST` Payment Inquiry.
pub(crate) const INQUIRY_PATH: &str = "/payment/4.3/paymentInquiry";

/// The only JWS algorithm accepted.
pub(crate) const ALG: &str = "HS256";

/// The only payment channel modelled (cards).
const CHANNEL: &str = "CC";

/// "Valid for 30 minutes" (Payment Token response parameters).
pub(crate) const TOKEN_LIFETIME_MS: i64 = 30 * 60 * 1000;

/// `invoiceNo` is AN 50.
const INVOICE_NO_MAX: usize = 50;

/// `description` is C 250 (C 255 on one page version: the stricter one).
const DESCRIPTION_MAX: usize = 250;

/// D(12,5): at most 12 integer and 5 fractional digits.
const AMOUNT_INTEGER_DIGITS: usize = 12;
const AMOUNT_FRACTION_DIGITS: usize = 5;

/// The Payment Token claims the face models.
const TOKEN_CLAIMS: &[&str] = &[
    "merchantID",
    "invoiceNo",
    "description",
    "amount",
    "currencyCode",
    "paymentChannel",
    "request3DS",
    "frontendReturnUrl",
];

/// The Payment Inquiry claims the face models.
const INQUIRY_CLAIMS: &[&str] = &["merchantID", "invoiceNo", "paymentToken", "locale"];

/// The notification's event kind (2C2P gives it no type; payonce's name for it).
pub(crate) const NOTIFICATION_KIND: &str = "backend_notification";

/// What the face remembers besides the charges: the invoices and their tokens.
#[derive(Debug, Default)]
pub(crate) struct Invoices {
    /// invoiceNo → the invoice.
    by_invoice: BTreeMap<String, Invoice>,
    /// paymentToken → invoiceNo.
    by_token: BTreeMap<String, String>,
}

/// One invoice: the one token issued for it, and the charge made with it, if any.
#[derive(Debug)]
struct Invoice {
    amount: i64,
    /// Lowercase ISO code.
    currency: String,
    description: String,
    issued_ms: i64,
    /// Whether the token asks for 3-D Secure: `request3DS` `Y` (the default) or `F`, not `N`.
    three_ds: bool,
    /// `frontendReturnUrl`: where the customer goes back to after 3-D Secure.
    return_url: Option<String>,
    /// Position in `intents` of the charge its token paid (or tried to), once it reached the
    /// charge step: the token is used.
    charge: Option<usize>,
}

/// A plain (unsigned) API answer.
fn plain(code: &str, desc: &str) -> Reply {
    Reply::json(200, &json!({"respCode": code, "respDesc": desc}))
}

/// A signed answer: `{"payload":"<JWT of claims>"}`.
fn signed(config: &TwoC2pFace, claims: &Value) -> Reply {
    Reply::json(200, &json!({ "payload": sign(&config.api_key, claims) }))
}

/// HMAC-SHA256 of `<header>.<claims>` under `key`.
pub(crate) fn mac(key: &str, header: &str, claims: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(header.as_bytes());
    mac.update(b".");
    mac.update(claims.as_bytes());
    mac
}

/// A compact JWS of `claims`, header `{"alg":"HS256","typ":"JWT"}`, signed with `key` as text.
pub fn sign(key: &str, claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string().as_bytes());
    let signature = mac(key, &header, &claims).finalize().into_bytes();
    format!("{header}.{claims}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// The claims of a `{"payload":"<JWT>"}` body, verified with the merchant's key, or the plain
/// error answer (see the module docs: `9005`, `9007`, `9042`).
pub(crate) fn verified(config: &TwoC2pFace, body: &[u8]) -> Result<Map<String, Value>, Reply> {
    let envelope: Option<Map<String, Value>> = serde_json::from_slice(body).ok();
    let Some(token) = envelope
        .as_ref()
        .and_then(|envelope| envelope.get("payload"))
        .and_then(Value::as_str)
    else {
        return Err(plain("9005", "Mandatory fields are missing: payload."));
    };
    let mismatch = || plain("9042", "Hash value mismatch.");
    let segments: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = segments.as_slice() else {
        return Err(mismatch());
    };
    let decode = |segment: &str| URL_SAFE_NO_PAD.decode(segment).ok();
    // Read, not yet trusted: only to find whose key verifies it.
    let Some(claims_json) =
        decode(claims).and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
    else {
        return Err(mismatch());
    };
    match claims_json.get("merchantID").and_then(Value::as_str) {
        None | Some("") => return Err(plain("9005", "Mandatory fields are missing: merchantID.")),
        Some(merchant) if merchant != config.merchant_id => {
            return Err(plain("9007", "Invalid merchant."))
        }
        Some(_) => {}
    }
    let header_json =
        decode(header).and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok());
    let alg_ok = header_json.is_some_and(|header| {
        header.get("alg").and_then(Value::as_str) == Some(ALG) && !header.contains_key("crit")
    });
    let signature_ok = decode(signature).is_some_and(|signature| {
        mac(&config.api_key, header, claims)
            .verify_slice(&signature)
            .is_ok()
    });
    if alg_ok && signature_ok {
        Ok(claims_json)
    } else {
        Err(mismatch())
    }
}

/// A claim as text: a string as is, a number in its JSON form.
fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The currency's exponent (the fake's tables: zero-decimal currencies 0, the rest 2).
fn exponent(currency: &str) -> u32 {
    if is_zero_decimal(currency) {
        0
    } else {
        2
    }
}

/// Minor units of a D(12,5) decimal in `currency`, if it is one with no non-zero digits beyond
/// the currency's exponent. A JSON number is read through its text (serde_json's shortest form
/// of the `f64`, exact for the amounts in question).
fn minor_from_decimal(text: &str, currency: &str) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || whole.len() > AMOUNT_INTEGER_DIGITS
        || !digits(whole)
        || (text.contains('.') && fraction.is_empty())
        || fraction.len() > AMOUNT_FRACTION_DIGITS
        || !digits(fraction)
    {
        return None;
    }
    let places = usize::try_from(exponent(currency)).unwrap_or(0);
    let (kept, beyond) = fraction.split_at(fraction.len().min(places));
    if beyond.bytes().any(|b| b != b'0') {
        return None;
    }
    let mut minor: i64 = whole.parse().ok()?;
    for _ in 0..places {
        minor = minor.checked_mul(10)?;
    }
    let kept_value: i64 = if kept.is_empty() {
        0
    } else {
        kept.parse().ok()?
    };
    let pad = 10_i64.checked_pow(u32::try_from(places - kept.len()).ok()?)?;
    minor.checked_add(kept_value.checked_mul(pad)?)
}

/// Minor units as the decimal string 2C2P writes (`"30.00"`, JPY `"1500"`).
fn decimal_from_minor(minor: i64, currency: &str) -> String {
    match exponent(currency) {
        0 => minor.to_string(),
        places => {
            let scale = 10_i64.pow(places);
            let width = usize::try_from(places).unwrap_or(2);
            format!("{}.{:0width$}", minor / scale, minor % scale)
        }
    }
}

/// The payonce payment an invoice number stands for (`pay_` + its 32 lowercase hex digits), as
/// payonce makes them; `None` for any other invoice number.
fn payment_id_for_invoice(invoice_no: &str) -> Option<String> {
    let ours = invoice_no.len() == 32
        && invoice_no
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ours.then(|| format!("pay_{invoice_no}"))
}

/// The inquiry's `respCode` and `respDesc` for a charge as it is now. An authorization (a
/// manual-settlement account's approval, not yet settled) reads approved, as 2C2P documents no
/// way to tell one apart.
fn resp_code(intent: &Intent) -> (&'static str, &'static str) {
    match (intent.status, intent.failure) {
        (Status::Succeeded | Status::RequiresCapture, _) => ("0000", "Success"),
        (Status::RequiresPaymentMethod, Some(Failure::Declined(decline))) => match decline {
            Decline::InsufficientFunds => ("4051", "Insufficient Funds"),
            Decline::Generic => ("4005", "Do not honor"),
        },
        (
            Status::RequiresPaymentMethod,
            Some(Failure::AuthenticationRequired | Failure::AuthenticationFailed),
        ) => (
            "0004",
            "Transaction is soft-declined, please resubmit after 3DS authentication.",
        ),
        (Status::Canceled, _) => ("0003", "Transaction is cancelled."),
        _ => ("0001", "Transaction is pending."),
    }
}

/// Epoch seconds as `yyyyMMddHHmmss` (UTC; 2C2P writes no offset).
fn transaction_date_time(epoch_s: i64) -> String {
    iso8601(epoch_s)
        .chars()
        .filter(char::is_ascii_digit)
        .collect()
}

/// payonce's dedup key of a notification: lowercase hex SHA-256 of `<len>:<value>;` for
/// invoiceNo, respCode, tranRef.
pub(crate) fn notification_id(invoice_no: &str, resp_code: &str, tran_ref: &str) -> String {
    let mut hash = Sha256::new();
    for value in [invoice_no, resp_code, tran_ref] {
        hash.update(format!("{}:", value.len()).as_bytes());
        hash.update(value.as_bytes());
        hash.update(b";");
    }
    hex::encode(hash.finalize())
}

/// The 2C2P face: the merchant it knows, its secret key, the raised minimums it enforces, and
/// what it remembers besides the ledger's charges (the invoices and their payment tokens).
#[derive(Debug)]
pub(crate) struct TwoC2pFace {
    /// The merchant's secret key, used as text for HS256: it verifies requests and signs answers
    /// and notifications.
    api_key: String,
    /// The one merchant (`merchantID`) the face knows.
    merchant_id: String,
    /// Per lowercase currency, a minimum charge (minor units); 2C2P documents none.
    minimum_overrides: BTreeMap<String, i64>,
    /// The invoices and payment tokens issued so far.
    invoices: Invoices,
    /// The fake's own URL: the authentication page is served under it.
    base_url: String,
    /// Whether the inquiry answers `2002` for a payment waiting for 3-D Secure (see
    /// `ModelConfig::twoc2p_challenge_unregistered`).
    challenge_unregistered: bool,
    /// The Payment Maintenance API's keys, settlement delay and call log.
    maintenance: Maintenance,
    /// The merchant account's "manual settlement" setting (see
    /// `ModelConfig::twoc2p_manual_settlement`): every approval is an authorization.
    manual_settlement: bool,
}

impl TwoC2pFace {
    /// A face for merchant `merchant_id` with secret key `api_key`, enforcing
    /// `minimum_overrides`, serving its authentication pages under `base_url`.
    pub(crate) fn new(
        api_key: String,
        merchant_id: String,
        minimum_overrides: BTreeMap<String, i64>,
        base_url: String,
    ) -> Self {
        Self {
            api_key,
            merchant_id,
            minimum_overrides,
            invoices: Invoices::default(),
            base_url,
            challenge_unregistered: false,
            maintenance: Maintenance::default(),
            manual_settlement: false,
        }
    }

    /// The same face, whose Payment Maintenance API works with `keys` (made on first use if
    /// `None`) and settles a charge `settle_after` after it succeeded.
    pub(crate) fn with_maintenance(
        mut self,
        keys: Option<TwoC2pMaintenanceKeys>,
        settle_after: Duration,
    ) -> Self {
        self.maintenance = Maintenance::new(keys, settle_after);
        self
    }

    /// The same face, on a manual-settlement merchant account if `manual`: what it approves is
    /// only authorized until the Payment Maintenance API settles (`S`) or voids (`V`) it.
    pub(crate) fn with_manual_settlement(mut self, manual: bool) -> Self {
        self.manual_settlement = manual;
        self
    }

    /// The same face, whose inquiry answers `2002` (no transaction, no `tranRef`) while a
    /// payment waits for 3-D Secure, if `unregistered`.
    pub(crate) fn with_challenge_unregistered(mut self, unregistered: bool) -> Self {
        self.challenge_unregistered = unregistered;
        self
    }
}

impl Face for TwoC2pFace {
    fn name(&self) -> &'static str {
        "2c2p"
    }

    /// Routes a request of the 2C2P face; every request is counted.
    fn handle(&mut self, ledger: &mut Ledger, request: &WireRequest<'_>, now_ms: i64) -> Handled {
        ledger.requests_seen += 1;
        match (request.method, request.path) {
            ("POST", PAYMENT_TOKEN_PATH) => {
                Handled::plain(self.payment_token(ledger, request.body, now_ms))
            }
            ("POST", DO_PAYMENT_PATH) => self.do_payment(ledger, request.body, now_ms),
            ("POST", INQUIRY_PATH) => Handled::plain(self.inquiry(ledger, request.body)),
            ("POST", ACTION_PATH) => self.payment_action(ledger, request.body, now_ms),
            _ => Handled::plain(Reply::json(
                404,
                &json!({
                    "error": "not_found",
                    "message": format!(
                        "the fake PSP's 2C2P face does not serve {} {}",
                        request.method, request.path
                    ),
                }),
            )),
        }
    }

    /// A `tranRef`: seven digits.
    fn new_charge_id(&self, ledger: &mut Ledger) -> String {
        new_tran_ref(ledger)
    }

    /// A `refundReferenceNo`: ten digits, unused so far.
    fn new_refund_id(&self, ledger: &mut Ledger, _charge_id: &str) -> String {
        loop {
            let id = ledger.rng.u64(1_000_000_000..10_000_000_000).to_string();
            if !ledger.refund_by_id.contains_key(&id) {
                return id;
            }
        }
    }

    /// The maintenance API's words: `RF`, `RP`, `RFF`.
    fn refund_status(&self, status: RefundStatus) -> &'static str {
        maintenance::refund_status(status)
    }

    /// With the invoice it refunded as `invoice_no`, and the payonce payment read from it.
    fn inspect_refund(&self, refund: &Refund) -> FakeRefund {
        let mut view = refund.inspect(self.name(), self.refund_status(refund.status));
        view.invoice_no = self.maintenance.refund_invoice(&refund.id).cloned();
        view.payment_id = view.invoice_no.as_deref().and_then(payment_id_for_invoice);
        view
    }

    /// The backend notification, once the charge is final; none when an authorization of a
    /// manual-settlement account lapses (2C2P notifies a payment's result, not its void).
    fn charge_moved_on(&self, ledger: &mut Ledger, index: usize, _at_ms: i64) -> Vec<ModelEvent> {
        let intent = &ledger.intents[index];
        if intent.authorization_lapsed() {
            return Vec::new();
        }
        self.notification(intent).into_iter().collect()
    }

    /// The page of a charge waiting for 3-D Secure (see the module docs): 303 back to the
    /// `frontendReturnUrl` once answered.
    fn action_page(
        &self,
        ledger: &mut Ledger,
        charge_id: &str,
        form: Option<&[u8]>,
        now_ms: i64,
    ) -> PageAnswer {
        answer_page(self, ledger, charge_id, form, now_ms)
    }

    /// The inquiry's `respCode`.
    fn charge_status(&self, intent: &Intent) -> &'static str {
        resp_code(intent).0
    }

    /// With the invoice number as `invoice_no`, and the payonce payment read from it.
    fn inspect_charge(&self, intent: &Intent) -> FakeCharge {
        let mut charge = intent.inspect(self.name(), self.charge_status(intent));
        charge.payment_id = intent
            .idempotency_key
            .as_deref()
            .and_then(payment_id_for_invoice);
        charge.invoice_no = intent.idempotency_key.clone();
        charge
    }
}

impl TwoC2pFace {
    /// `POST /payment/4.3/paymentToken`.
    fn payment_token(&mut self, ledger: &mut Ledger, body: &[u8], now_ms: i64) -> Reply {
        let claims = match verified(self, body) {
            Ok(claims) => claims,
            Err(reply) => return reply,
        };
        let (invoice_no, invoice) = match token_request(self, &claims, now_ms) {
            Ok(request) => request,
            Err(reply) => return reply,
        };
        if self.invoices.by_invoice.contains_key(&invoice_no) {
            return plain("9015", "Existing Invoice Number.");
        }
        let token = loop {
            let rng = &mut ledger.rng;
            let token: String = std::iter::repeat_with(|| rng.alphanumeric())
                .take(80)
                .collect();
            if !self.invoices.by_token.contains_key(&token) {
                break token;
            }
        };
        self.invoices
            .by_token
            .insert(token.clone(), invoice_no.clone());
        self.invoices.by_invoice.insert(invoice_no, invoice);
        signed(
            self,
            &json!({
                "webPaymentUrl": format!(
                    "https://pgw-ui.fake-psp.invalid/payment/4.3/#/token/{token}"
                ),
                "paymentToken": token,
                "respCode": "0000",
                "respDesc": "Success",
            }),
        )
    }

    /// `POST /payment/4.3/payment`.
    fn do_payment(&mut self, ledger: &mut Ledger, body: &[u8], now_ms: i64) -> Handled {
        let Ok(body) = serde_json::from_slice::<Value>(body) else {
            return Handled::plain(plain("9004", "Invalid request: not JSON."));
        };
        let field = |pointer: &str| {
            body.pointer(pointer)
                .and_then(Value::as_str)
                .filter(|value| !value.is_empty())
                .map(str::to_owned)
        };
        let (Some(token), Some(channel), Some(method)) = (
            field("/paymentToken"),
            field("/payment/code/channelCode"),
            field("/payment/data/securePayToken"),
        ) else {
            return Handled::plain(plain("9005", "Mandatory fields are missing."));
        };
        if channel != CHANNEL {
            return Handled::plain(plain("9057", "Payment channel is invalid."));
        }
        let Some(invoice_no) = self.invoices.by_token.get(&token).cloned() else {
            return Handled::plain(plain("9040", "The token is invalid."));
        };
        let Some(invoice) = self.invoices.by_invoice.get(&invoice_no) else {
            return Handled::plain(plain("9040", "The token is invalid."));
        };
        if invoice.charge.is_some() {
            return Handled::plain(plain("9041", "Payment token already used."));
        }
        if now_ms.saturating_sub(invoice.issued_ms) > TOKEN_LIFETIME_MS {
            return Handled::plain(plain("9040", "The token is invalid."));
        }
        let charge = NewCharge {
            amount: invoice.amount,
            currency: invoice.currency.clone(),
            payment_method: method,
            description: Some(invoice.description.clone()),
            metadata: BTreeMap::new(),
            confirm: true,
            // A manual-settlement account authorizes only: the maintenance API settles it.
            capture_method: if self.manual_settlement {
                CaptureMethod::Manual
            } else {
                CaptureMethod::Automatic
            },
            // A card that needs 3-D Secure waits for the customer if the token asked for it and
            // named where to send them back; otherwise it is soft-declined (`0004`).
            on_action: match (&invoice.return_url, invoice.three_ds) {
                (Some(return_url), true) => OnAction::Wait {
                    return_url: Some(return_url.clone()),
                },
                _ => OnAction::Fail,
            },
            hold: Hold::default(),
        };
        let action_lapses_ms = now_ms.saturating_add(millis(ledger.timings().requires_action_for));
        match ledger.attempt_charge(self, charge, Some(invoice_no.clone()), now_ms) {
            Attempt::UnknownMethod => {
                Handled::plain(plain("9004", "Invalid value: securePayToken."))
            }
            Attempt::FailedBeforeCharge => {
                Handled::plain(plain("9993", "An unknown error has occurred."))
            }
            Attempt::Made {
                mut intent,
                delivery,
            } => {
                let mut answer = json!({"channelCode": CHANNEL, "invoiceNo": invoice_no});
                let (code, desc) = match intent.status {
                    Status::Processing => ("2001", "Transaction in progress."),
                    Status::RequiresAction => {
                        // An action never answered lapses (UNCONFIRMED: 2C2P's own timeout).
                        intent.due_ms.get_or_insert(action_lapses_ms);
                        answer["data"] = json!(format!(
                            "{}{AUTHENTICATE_PATH}/{}",
                            self.base_url, intent.id
                        ));
                        ("1001", "Redirect to authenticate ACS bank page.")
                    }
                    _ => (
                        "2000",
                        "Transaction is completed, please do payment inquiry request for full \
                         payment information.",
                    ),
                };
                answer["respCode"] = json!(code);
                answer["respDesc"] = json!(desc);
                let events = self.notification(&intent).into_iter().collect();
                let index = ledger.intents.len();
                ledger.insert(self, *intent, now_ms);
                if let Some(invoice) = self.invoices.by_invoice.get_mut(&invoice_no) {
                    invoice.charge = Some(index);
                }
                Handled {
                    reply: Reply::json(200, &answer),
                    replayed: false,
                    delivery,
                    events,
                }
            }
        }
    }

    /// `POST /payment/4.3/paymentInquiry`.
    fn inquiry(&self, ledger: &Ledger, body: &[u8]) -> Reply {
        let claims = match verified(self, body) {
            Ok(claims) => claims,
            Err(reply) => return reply,
        };
        if claims
            .keys()
            .any(|name| !INQUIRY_CLAIMS.contains(&name.as_str()))
        {
            return plain("9004", "Invalid value: a field the fake does not model.");
        }
        let invoice_no = match (
            text(claims.get("invoiceNo")).filter(|s| !s.is_empty()),
            text(claims.get("paymentToken")).filter(|s| !s.is_empty()),
        ) {
            (Some(invoice_no), _) => invoice_no,
            (None, Some(token)) => self
                .invoices
                .by_token
                .get(&token)
                .cloned()
                .unwrap_or_default(),
            (None, None) => {
                return plain(
                    "9005",
                    "Mandatory fields are missing: invoiceNo or paymentToken.",
                )
            }
        };
        let charge = self
            .invoices
            .by_invoice
            .get(&invoice_no)
            .and_then(|invoice| invoice.charge)
            .and_then(|index| ledger.intents.get(index));
        let answer = match charge {
            Some(intent)
                if !(self.challenge_unregistered && intent.status == Status::RequiresAction) =>
            {
                inquiry_claims(self, intent)
            }
            _ => json!({
                "merchantID": self.merchant_id,
                "invoiceNo": invoice_no,
                "respCode": "2002",
                "respDesc": "Transaction not found.",
            }),
        };
        signed(self, &answer)
    }

    /// The backend notification for `intent` if it is final now (an authorization of a
    /// manual-settlement account is: it reads approved); `None` while it waits.
    fn notification(&self, intent: &Intent) -> Option<ModelEvent> {
        let final_now = matches!(
            (intent.status, intent.failure),
            (
                Status::Succeeded | Status::RequiresCapture | Status::Canceled,
                _
            ) | (Status::RequiresPaymentMethod, Some(_))
        );
        if !final_now {
            return None;
        }
        let claims = inquiry_claims(self, intent);
        let (code, _) = resp_code(intent);
        let invoice_no = intent.idempotency_key.clone().unwrap_or_default();
        Some(ModelEvent {
            id: notification_id(&invoice_no, code, &intent.id),
            kind: NOTIFICATION_KIND.to_owned(),
            body: json!({ "payload": sign(&self.api_key, &claims) }).to_string(),
        })
    }
}

/// A new `tranRef`: seven digits from the seed, unused so far.
fn new_tran_ref(ledger: &mut Ledger) -> String {
    loop {
        let tran_ref = ledger.rng.u32(1_000_000..10_000_000).to_string();
        if !ledger.by_id.contains_key(&tran_ref) {
            return tran_ref;
        }
    }
}

/// The inquiry's (and the notification's) claims about a charge.
fn inquiry_claims(config: &TwoC2pFace, intent: &Intent) -> Value {
    let (code, desc) = resp_code(intent);
    json!({
        "merchantID": config.merchant_id,
        "invoiceNo": intent.idempotency_key,
        "amount": decimal_from_minor(intent.amount, &intent.currency),
        "currencyCode": intent.currency.to_ascii_uppercase(),
        "tranRef": intent.id,
        "channelCode": CHANNEL,
        "transactionDateTime": transaction_date_time(intent.created),
        "respCode": code,
        "respDesc": desc,
    })
}

/// A verified Payment Token request's invoice number and invoice, validated (see the module
/// docs), or the plain refusal.
fn token_request(
    config: &TwoC2pFace,
    claims: &Map<String, Value>,
    now_ms: i64,
) -> Result<(String, Invoice), Reply> {
    if claims
        .keys()
        .any(|name| !TOKEN_CLAIMS.contains(&name.as_str()))
    {
        return Err(plain(
            "9004",
            "Invalid value: a field the fake does not model.",
        ));
    }
    let mandatory = |name: &str| text(claims.get(name)).filter(|value| !value.is_empty());
    let (Some(invoice_no), Some(description), Some(amount), Some(currency_code)) = (
        mandatory("invoiceNo"),
        mandatory("description"),
        mandatory("amount"),
        mandatory("currencyCode"),
    ) else {
        return Err(plain("9005", "Mandatory fields are missing."));
    };
    if !invoice_no.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(plain("9004", "Invalid value: invoiceNo."));
    }
    if invoice_no.len() > INVOICE_NO_MAX {
        return Err(plain("9006", "Field exceeded length: invoiceNo."));
    }
    if description.chars().count() > DESCRIPTION_MAX {
        return Err(plain("9006", "Field exceeded length: description."));
    }
    let currency = currency_code.to_ascii_lowercase();
    let known = currency_code.len() == 3
        && currency_code.bytes().all(|b| b.is_ascii_uppercase())
        && minimum_charge_minor(&currency).is_some();
    if !known {
        return Err(plain("9010", "Invalid currency code."));
    }
    let minimum = config
        .minimum_overrides
        .get(&currency)
        .copied()
        .unwrap_or(1);
    match minor_from_decimal(&amount, &currency) {
        Some(minor) if (minimum.max(1)..=MAXIMUM_CHARGE_MINOR).contains(&minor) => {
            if let Some(channels) = claims.get("paymentChannel") {
                if channels != &json!([CHANNEL]) {
                    return Err(plain("9057", "Payment option is invalid."));
                }
            }
            let three_ds = match claims.get("request3DS") {
                None => true,
                Some(value) => match value.as_str() {
                    Some("Y" | "F") => true,
                    Some("N") => false,
                    _ => return Err(plain("9004", "Invalid value: request3DS.")),
                },
            };
            let return_url = match claims.get("frontendReturnUrl") {
                None => None,
                Some(Value::String(url))
                    if (url.starts_with("https://") || url.starts_with("http://"))
                        && !url.chars().any(char::is_whitespace) =>
                {
                    Some(url.clone())
                }
                Some(_) => return Err(plain("9004", "Invalid value: frontendReturnUrl.")),
            };
            Ok((
                invoice_no,
                Invoice {
                    amount: minor,
                    currency,
                    description,
                    issued_ms: now_ms,
                    three_ds,
                    return_url,
                    charge: None,
                },
            ))
        }
        _ => Err(plain("9009", "Amount is invalid.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_exactly_by_the_currency_exponent() {
        assert_eq!(minor_from_decimal("30.0", "sgd"), Some(3000));
        assert_eq!(minor_from_decimal("230.87", "thb"), Some(23087));
        assert_eq!(minor_from_decimal("1500", "jpy"), Some(1500));
        assert_eq!(minor_from_decimal("1500.0", "jpy"), Some(1500));
        assert_eq!(minor_from_decimal("1500.5", "jpy"), None);
        assert_eq!(minor_from_decimal("1.2345", "usd"), None);
        assert_eq!(minor_from_decimal("0000000000001.00", "usd"), None);
        assert_eq!(decimal_from_minor(3000, "sgd"), "30.00");
        assert_eq!(decimal_from_minor(5, "usd"), "0.05");
        assert_eq!(decimal_from_minor(1500, "jpy"), "1500");
    }
}
