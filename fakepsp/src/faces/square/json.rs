//! What the Square face writes: Payment and PaymentRefund objects, error bodies, webhook events,
//! ids and version tokens (shapes of `square/connect-api-specification`'s `api.json`, cited as
//! `spec:L<n>` in `docs/psp-research-square.md`, and of the sandbox captures it quotes).

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::{PaymentExtra, RefundExtra};
use crate::faces::dates::rfc3339_ms;
use crate::ledger::{
    Decline, Failure, Intent, Ledger, ModelEvent, Refund, RefundStatus, Reply, Status,
};

/// The one seller the fake is: `merchant_id` of every event (Square's are 13 upper-case
/// alphanumerics, e.g. `6SSW7HV8K2ST5`).
pub(super) const MERCHANT_ID: &str = "PAYONCEFAKESQ";

/// The seller's main location, written when a create names none (CreatePayment: `location_id`
/// "defaults to the seller's main location").
pub(super) const DEFAULT_LOCATION_ID: &str = "LPAYONCEFAKE1";

/// `category` of a validation or lookup error.
pub(super) const INVALID_REQUEST_ERROR: &str = "INVALID_REQUEST_ERROR";

/// `category` of a decline.
pub(super) const PAYMENT_METHOD_ERROR: &str = "PAYMENT_METHOD_ERROR";

/// `category` of a refused refund.
pub(super) const REFUND_ERROR: &str = "REFUND_ERROR";

/// Length of a Payment id (the spec's examples: 29 characters, e.g.
/// `R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY`), of which the last two are `ZY`.
const PAYMENT_ID_LEN: usize = 29;

/// Length of the suffix of a refund id after `<payment id>_` (the spec's example:
/// `R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY_KlWP8IC1557ddwc9QWTKrCVU6m0JXDz15R2Qym5eQfR`).
const REFUND_SUFFIX_LEN: usize = 43;

/// Length of a `version_token` (the spec's examples: 45 characters ending in `o`).
const VERSION_TOKEN_LEN: usize = 45;

/// The characters of ids and version tokens.
const ALPHANUMERIC: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// An error object (`Error`, spec:L24305): `category`, `code`, `detail` and, when the request
/// field is known, `field`.
pub(super) fn error_object(category: &str, code: &str, detail: &str, field: Option<&str>) -> Value {
    let mut object = json!({"category": category, "code": code, "detail": detail});
    if let Some(field) = field {
        object["field"] = json!(field);
    }
    object
}

/// `{"errors":[error]}` with this HTTP status.
pub(super) fn error(
    status: u16,
    category: &str,
    code: &str,
    detail: &str,
    field: Option<&str>,
) -> Reply {
    Reply::json(
        status,
        &json!({"errors": [error_object(category, code, detail, field)]}),
    )
}

/// 400 INVALID_REQUEST_ERROR with `code`, about `field`.
pub(super) fn invalid(code: &str, detail: &str, field: Option<&str>) -> Reply {
    error(400, INVALID_REQUEST_ERROR, code, detail, field)
}

/// 400 INVALID_REQUEST_ERROR BAD_REQUEST ("A general error occurred with the request").
pub(super) fn bad_request(detail: &str) -> Reply {
    invalid("BAD_REQUEST", detail, None)
}

/// 404 INVALID_REQUEST_ERROR NOT_FOUND (the detail text is UNCONFIRMED).
pub(super) fn not_found(detail: &str) -> Reply {
    error(404, INVALID_REQUEST_ERROR, "NOT_FOUND", detail, None)
}

/// 404 for a Payment id the fake does not know.
pub(super) fn no_such_payment(id: &str) -> Reply {
    not_found(&format!("Could not find payment with id: {id}"))
}

/// 400 REFUND_ERROR with `code`.
pub(super) fn refund_error(code: &str, detail: &str) -> Reply {
    error(400, REFUND_ERROR, code, detail, None)
}

/// `{"amount":…,"currency":"USD"}` (`Money`, spec:L39593), the currency upper-case.
pub(super) fn money(amount: i64, currency: &str) -> Value {
    json!({"amount": amount, "currency": currency.to_ascii_uppercase()})
}

/// The Payment's `status` (spec:L43147): `APPROVED`, `PENDING`, `COMPLETED`, `CANCELED` or
/// `FAILED`.
pub(super) fn payment_status(intent: &Intent) -> &'static str {
    match intent.status {
        Status::RequiresCapture => "APPROVED",
        Status::Succeeded => "COMPLETED",
        Status::Canceled => "CANCELED",
        Status::RequiresPaymentMethod => "FAILED",
        // `RequiresConfirmation` is never reached on this face (every create is attempted at
        // once); kept total.
        Status::RequiresConfirmation | Status::Processing | Status::RequiresAction => "PENDING",
    }
}

/// `card_details.status` (spec:L8199): `AUTHORIZED`, `CAPTURED`, `VOIDED` or `FAILED`. A
/// pending payment reads `AUTHORIZED` (the brief's choice).
fn card_status(intent: &Intent) -> &'static str {
    match intent.status {
        Status::Succeeded => "CAPTURED",
        Status::Canceled => "VOIDED",
        Status::RequiresPaymentMethod => "FAILED",
        Status::RequiresCapture
        | Status::RequiresConfirmation
        | Status::Processing
        | Status::RequiresAction => "AUTHORIZED",
    }
}

/// A PaymentRefund's `status` (spec:L43954): `PENDING`, `COMPLETED` or `FAILED` (the fake
/// never answers `REJECTED`).
pub(super) fn refund_status(status: RefundStatus) -> &'static str {
    match status {
        RefundStatus::Pending => "PENDING",
        RefundStatus::Succeeded => "COMPLETED",
        RefundStatus::Failed => "FAILED",
    }
}

/// The decline error of a failed payment, as Square words it (`"Authorization error:
/// '<CODE>'"`, category PAYMENT_METHOD_ERROR): GENERIC_DECLINE, INSUFFICIENT_FUNDS, or
/// CARD_DECLINED_VERIFICATION_REQUIRED for a card whose buyer was never verified.
pub(super) fn decline_error(failure: Failure) -> Value {
    let code = match failure {
        Failure::Declined(Decline::Generic) => "GENERIC_DECLINE",
        Failure::Declined(Decline::InsufficientFunds) => "INSUFFICIENT_FUNDS",
        Failure::AuthenticationRequired | Failure::AuthenticationFailed => {
            "CARD_DECLINED_VERIFICATION_REQUIRED"
        }
    };
    error_object(
        PAYMENT_METHOD_ERROR,
        code,
        &format!("Authorization error: '{code}'"),
        None,
    )
}

/// The card a test token stands for: brand and last four digits (Stripe's test cards behind
/// the `pm_card_*` tokens; Square's sandbox Visa 4111 1111 1111 1111 behind
/// `cnon:card-nonce-ok`, its decline card 4000 0000 0000 0002 behind `cnon:card-nonce-declined`).
fn card(source_id: &str) -> (&'static str, &'static str) {
    match source_id {
        "pm_card_mastercard" => ("MASTERCARD", "4444"),
        "pm_card_refundFail" => ("VISA", "5126"),
        "pm_card_visa_chargeDeclined" | "cnon:card-nonce-declined" => ("VISA", "0002"),
        "pm_card_chargeDeclinedInsufficientFunds" => ("VISA", "9995"),
        "pm_card_threeDSecure2Required" => ("VISA", "3220"),
        "pm_card_authenticationRequired" => ("VISA", "3155"),
        "cnon:card-nonce-ok" => ("VISA", "1111"),
        _ => ("VISA", "4242"),
    }
}

/// A duration as Square writes `delay_duration` in answers: whole hours as `PT<h>H` (`P7D`
/// reads `PT168H`), else whole minutes, else seconds.
pub(super) fn duration_text(ms: i64) -> String {
    const HOUR_MS: i64 = 60 * 60 * 1000;
    const MINUTE_MS: i64 = 60 * 1000;
    if ms % HOUR_MS == 0 {
        format!("PT{}H", ms / HOUR_MS)
    } else if ms % MINUTE_MS == 0 {
        format!("PT{}M", ms / MINUTE_MS)
    } else if ms % 1000 == 0 {
        format!("PT{}S", ms / 1000)
    } else {
        format!("PT{}.{:03}S", ms / 1000, ms % 1000)
    }
}

/// A Payment (spec:L43086) as the face writes it, with `refunds` its refunds oldest first.
/// `refund_ids` and `refunded_money` appear once it has a refund (Square's refund guide);
/// `refunded_money` counts the refunds that hold their amount (pending and completed: what is
/// no longer refundable).
pub(super) fn payment_json(intent: &Intent, extra: &PaymentExtra, refunds: &[&Refund]) -> Value {
    let currency = &intent.currency;
    let failed = intent.status == Status::RequiresPaymentMethod;
    let (brand, last_4) = card(&extra.source_id);
    let mut timeline = Map::new();
    timeline.insert(
        "authorized_at".to_owned(),
        json!(rfc3339_ms(extra.created_ms)),
    );
    if let Some(at_ms) = extra.captured_at_ms {
        timeline.insert("captured_at".to_owned(), json!(rfc3339_ms(at_ms)));
    }
    if let Some(at_ms) = extra.voided_at_ms {
        timeline.insert("voided_at".to_owned(), json!(rfc3339_ms(at_ms)));
    }
    let mut card_details = json!({
        "status": card_status(intent),
        "card": {"card_brand": brand, "last_4": last_4},
        "entry_method": "KEYED",
        "card_payment_timeline": timeline,
    });
    if let Some(failure) = intent.failure.filter(|_| failed) {
        card_details["errors"] = json!([decline_error(failure)]);
    }
    // When the delay action runs: the ledger's own moment once the payment is authorized (a
    // payment that was pending is authorized later than it was created), else created_at +
    // delay_duration (spec:L43163).
    let delayed_until_ms = intent
        .capture_before_ms
        .unwrap_or_else(|| extra.created_ms.saturating_add(extra.delay_duration_ms));
    let mut object = json!({
        "id": intent.id,
        "created_at": rfc3339_ms(extra.created_ms),
        "updated_at": rfc3339_ms(extra.updated_ms),
        "amount_money": money(intent.amount, currency),
        "approved_money": money(if failed { 0 } else { intent.amount }, currency),
        "total_money": money(intent.amount, currency),
        "status": payment_status(intent),
        "source_type": "CARD",
        "card_details": card_details,
        "location_id": extra.location_id,
        "delay_action": extra.delay_action.as_str(),
        "delay_duration": duration_text(extra.delay_duration_ms),
        "delayed_until": rfc3339_ms(delayed_until_ms),
        "version_token": version_token(&intent.id, extra.version),
    });
    for (name, value) in [
        ("reference_id", &extra.reference_id),
        ("note", &extra.note),
        ("buyer_email_address", &extra.buyer_email_address),
    ] {
        if let Some(value) = value {
            object[name] = json!(value);
        }
    }
    if !refunds.is_empty() {
        let ids: Vec<&str> = refunds.iter().map(|refund| refund.id.as_str()).collect();
        let refunded: i64 = refunds
            .iter()
            .filter(|refund| refund.status.holds_amount())
            .map(|refund| refund.amount)
            .sum();
        object["refund_ids"] = json!(ids);
        object["refunded_money"] = money(refunded, currency);
    }
    object
}

/// A PaymentRefund (spec:L43939) as the face writes it.
pub(super) fn refund_json(refund: &Refund, extra: &RefundExtra) -> Value {
    let mut object = json!({
        "id": refund.id,
        "status": refund_status(refund.status),
        "amount_money": money(refund.amount, &refund.currency),
        "payment_id": refund.payment_intent,
        "location_id": extra.location_id,
        "created_at": rfc3339_ms(extra.created_ms),
        "updated_at": rfc3339_ms(extra.updated_ms),
    });
    if let Some(reason) = &refund.reason {
        object["reason"] = json!(reason);
    }
    object
}

/// A webhook event (spec:L43665, L44043, L45410, L45669): `{merchant_id, type, event_id,
/// created_at, data: {type, id, object: {<type>: object}}}`, its id a UUID drawn from the
/// ledger's randomness.
pub(super) fn event(
    ledger: &mut Ledger,
    kind: &str,
    object_type: &str,
    object: Value,
    at_ms: i64,
) -> ModelEvent {
    let event_id = uuid(ledger);
    let mut wrapped = Map::new();
    let object_id = object["id"].clone();
    wrapped.insert(object_type.to_owned(), object);
    let body = json!({
        "merchant_id": MERCHANT_ID,
        "type": kind,
        "event_id": event_id,
        "created_at": rfc3339_ms(at_ms),
        "data": {"type": object_type, "id": object_id, "object": wrapped},
    });
    ModelEvent {
        id: event_id,
        kind: kind.to_owned(),
        body: body.to_string(),
    }
}

/// A version-4 UUID in its lowercase text form, from the ledger's randomness (Square's event
/// ids look like `6a8f5f28-54a1-4eb0-a98a-3111513fd4fc`).
fn uuid(ledger: &mut Ledger) -> String {
    let bits = ledger.rng.u128(..);
    // Version 4, variant 10xx, as a random UUID has.
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A new Payment id: 27 random alphanumerics and `ZY`, like Square's.
pub(super) fn new_payment_id(ledger: &mut Ledger) -> String {
    let rng = &mut ledger.rng;
    let mut id: String = std::iter::repeat_with(|| rng.alphanumeric())
        .take(PAYMENT_ID_LEN - 2)
        .collect();
    id.push_str("ZY");
    id
}

/// A new refund id: `<payment id>_` and 43 random alphanumerics, the form of every refund id
/// in Square's examples.
pub(super) fn new_refund_id(ledger: &mut Ledger, payment_id: &str) -> String {
    let rng = &mut ledger.rng;
    let suffix: String = std::iter::repeat_with(|| rng.alphanumeric())
        .take(REFUND_SUFFIX_LEN)
        .collect();
    format!("{payment_id}_{suffix}")
}

/// The opaque `version_token` of version `version` of payment `id`: derived, not drawn, so that
/// it changes exactly when the payment does and costs the ledger's randomness nothing.
pub(super) fn version_token(id: &str, version: u64) -> String {
    let mut token = String::with_capacity(VERSION_TOKEN_LEN);
    let mut round: u8 = 0;
    while token.len() < VERSION_TOKEN_LEN - 1 {
        let digest = Sha256::new()
            .chain_update(id.as_bytes())
            .chain_update(version.to_be_bytes())
            .chain_update([round])
            .finalize();
        for byte in digest {
            if token.len() < VERSION_TOKEN_LEN - 1 {
                token.push(char::from(
                    ALPHANUMERIC[usize::from(byte) % ALPHANUMERIC.len()],
                ));
            }
        }
        round = round.wrapping_add(1);
    }
    token.push('o');
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_square_writes_them() {
        assert_eq!(duration_text(7 * 24 * 60 * 60 * 1000), "PT168H");
        assert_eq!(duration_text(90 * 60 * 1000), "PT90M");
        assert_eq!(duration_text(61_000), "PT61S");
        assert_eq!(duration_text(1_500), "PT1.500S");
    }

    #[test]
    fn version_tokens_are_stable_and_change_with_the_version() {
        let first = version_token("R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY", 1);
        assert_eq!(first.len(), VERSION_TOKEN_LEN);
        assert!(first.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(first, version_token("R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY", 1));
        assert_ne!(first, version_token("R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY", 2));
    }
}
