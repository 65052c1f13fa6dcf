//! The Stripe face's error answers: `{"error":{...}}` in Stripe's shapes, with the codes and
//! messages Stripe sends.

use serde_json::{json, Map, Value};

use crate::ledger::Reply;

/// Builds `{"error":{...}}` with the given fields, leaving out `code` and `param` when absent
/// (Stripe omits them too rather than sending nulls).
fn error(kind: &str, code: Option<&str>, param: Option<&str>, message: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("type".into(), kind.into());
    if let Some(code) = code {
        fields.insert("code".into(), code.into());
    }
    if let Some(param) = param {
        fields.insert("param".into(), param.into());
    }
    fields.insert("message".into(), message.into());
    fields
}

/// Wraps error fields into the response envelope.
fn wrap(status: u16, fields: Map<String, Value>) -> Reply {
    Reply::json(status, &json!({ "error": Value::Object(fields) }))
}

/// 400 `invalid_request_error` with an optional `code` and `param`.
pub(crate) fn invalid_request(code: Option<&str>, param: Option<&str>, message: &str) -> Reply {
    wrap(400, error("invalid_request_error", code, param, message))
}

/// 400 `parameter_missing` for a required parameter.
pub(crate) fn parameter_missing(param: &str) -> Reply {
    invalid_request(
        Some("parameter_missing"),
        Some(param),
        &format!("Missing required param: {param}."),
    )
}

/// 400 `parameter_unknown` for a parameter the endpoint does not take.
pub(crate) fn parameter_unknown(param: &str) -> Reply {
    invalid_request(
        Some("parameter_unknown"),
        Some(param),
        &format!("Received unknown parameter: {param}"),
    )
}

/// 400 for a parameter Stripe accepts only together with `confirm=true`. Stripe documents the
/// restriction but not the answer's `code`, so none is invented here; `param` names the culprit.
pub(crate) fn confirm_only(param: &str) -> Reply {
    invalid_request(
        None,
        Some(param),
        &format!("The parameter `{param}` can only be used with `confirm=true`."),
    )
}

/// 400 `amount_too_small` (the minimum is given in minor units).
pub(crate) fn amount_too_small(minimum_minor: i64, currency: &str) -> Reply {
    invalid_request(
        Some("amount_too_small"),
        Some("amount"),
        &format!(
            "Amount must be at least {} {currency}",
            major_units(minimum_minor, currency)
        ),
    )
}

/// 400 `amount_too_large` (the maximum is given in minor units).
pub(crate) fn amount_too_large(maximum_minor: i64, currency: &str) -> Reply {
    invalid_request(
        Some("amount_too_large"),
        Some("amount"),
        &format!(
            "Amount must be no more than {} {currency}",
            major_units(maximum_minor, currency)
        ),
    )
}

/// 400 for a refund larger than what is left on the charge, in Stripe's words. Stripe's error
/// codes list has none for this case (`amount_too_large` is about the maximum charge amount), and
/// Stripe sends this refusal with `param` but no `code`, so none is invented here.
pub(crate) fn refund_exceeds_unrefunded(amount: i64, unrefunded: i64, currency: &str) -> Reply {
    invalid_request(
        None,
        Some("amount"),
        &format!(
            "Refund amount ({}) is greater than unrefunded amount on charge ({})",
            money(amount, currency),
            money(unrefunded, currency)
        ),
    )
}

/// 400 `charge_already_refunded` ("Error codes": the charge you are attempting to refund has
/// already been refunded).
pub(crate) fn charge_already_refunded(charge: &str) -> Reply {
    invalid_request(
        Some("charge_already_refunded"),
        None,
        &format!("Charge {charge} has already been refunded."),
    )
}

/// 400 `charge_not_refundable` ("Error codes": the charge is not refundable) for a PaymentIntent
/// without a succeeded charge.
pub(crate) fn charge_not_refundable(payment_intent: &str) -> Reply {
    invalid_request(
        Some("charge_not_refundable"),
        None,
        &format!(
            "This PaymentIntent ({payment_intent}) does not have a successful charge to refund."
        ),
    )
}

/// `amount` minor units with the currency's symbol where Stripe's messages use one (`$30.00`),
/// else the upper-case code (`THB 1000.00`).
fn money(amount: i64, currency: &str) -> String {
    let major = major_units(amount, currency);
    match currency {
        "usd" => format!("${major}"),
        "eur" => format!("€{major}"),
        "gbp" => format!("£{major}"),
        "jpy" => format!("¥{major}"),
        other => format!("{} {major}", other.to_ascii_uppercase()),
    }
}

/// `amount` minor units as major units, for messages: `50 usd` → `0.50`, `50 jpy` → `50`.
fn major_units(amount: i64, currency: &str) -> String {
    if crate::currency::is_zero_decimal(currency) {
        amount.to_string()
    } else {
        format!("{}.{:02}", amount / 100, amount % 100)
    }
}

/// 404 `resource_missing`, e.g. for an unknown PaymentIntent id.
pub(crate) fn resource_missing(param: &str, message: &str) -> Reply {
    wrap(
        404,
        error(
            "invalid_request_error",
            Some("resource_missing"),
            Some(param),
            message,
        ),
    )
}

/// 401 for a missing or wrong API key, in the shape Stripe actually sends: type
/// `invalid_request_error` and no `code` (the `authentication_error` type of Stripe's error
/// reference is not what its API answers to a bad key).
pub(crate) fn unauthorized() -> Reply {
    wrap(
        401,
        error(
            "invalid_request_error",
            None,
            None,
            "Invalid API Key provided",
        ),
    )
}

/// 500 `api_error`: the PSP failed before doing anything.
pub(crate) fn api_error(message: &str) -> Reply {
    wrap(500, error("api_error", None, None, message))
}

/// 400 `idempotency_error`: the key was first used with other parameters or on another endpoint.
pub(crate) fn idempotency_mismatch(key: &str) -> Reply {
    let message = format!(
        "Keys for idempotent requests can only be used with the same parameters they were first \
         used with. Try using a key other than '{key}' if you meant to execute a different request."
    );
    wrap(400, error("idempotency_error", None, None, &message))
}

/// 409 `idempotency_key_in_use`: another request with this key is still running.
pub(crate) fn idempotency_in_use(key: &str) -> Reply {
    let message = format!(
        "There is currently another in-progress request using this Idempotent Key (that probably \
         means you submitted twice, and the other request is still going through): {key}. \
         Please try again later."
    );
    wrap(
        409,
        error(
            "invalid_request_error",
            Some("idempotency_key_in_use"),
            None,
            &message,
        ),
    )
}

/// 402 `card_error` carrying the declined PaymentIntent, as Stripe answers a failed confirm.
pub(crate) fn card_declined(
    decline_code: &str,
    message: &str,
    charge: Option<&str>,
    payment_intent: Value,
) -> Reply {
    let mut fields = error("card_error", Some("card_declined"), None, message);
    fields.insert("decline_code".into(), decline_code.into());
    if let Some(charge) = charge {
        fields.insert("charge".into(), charge.into());
    }
    fields.insert("payment_intent".into(), payment_intent);
    wrap(402, fields)
}

/// 402 `card_error` `authentication_required` carrying the PaymentIntent: a card that needs
/// authentication, confirmed with `error_on_requires_action=true` ("Error codes":
/// `authentication_required`).
pub(crate) fn authentication_required(message: &str, payment_intent: Value) -> Reply {
    let mut fields = error("card_error", Some("authentication_required"), None, message);
    fields.insert("decline_code".into(), "authentication_required".into());
    fields.insert("payment_intent".into(), payment_intent);
    wrap(402, fields)
}

/// 400 for an `amount_to_capture` above what the PaymentIntent has capturable, in the words
/// Stripe answers it with; the code is `amount_too_large` ("Error codes": the amount is greater
/// than the maximum allowed), which Stripe's answer is not documented to carry: a guess.
pub(crate) fn capture_exceeds_capturable() -> Reply {
    invalid_request(
        Some("amount_too_large"),
        Some("amount_to_capture"),
        "The payment could not be captured because the requested capture amount is greater \
         than the authorized amount. If you are trying to collect a tip or over-capture, your \
         account might not be configured for those features.",
    )
}

/// 400 `payment_intent_unexpected_state` carrying the PaymentIntent, e.g. cancelling a
/// succeeded one.
pub(crate) fn unexpected_state(message: &str, payment_intent: Value) -> Reply {
    let mut fields = error(
        "invalid_request_error",
        Some("payment_intent_unexpected_state"),
        None,
        message,
    );
    fields.insert("payment_intent".into(), payment_intent);
    wrap(400, fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(reply: &Reply) -> Value {
        serde_json::from_str(&reply.body).unwrap_or(Value::Null)
    }

    #[test]
    fn unauthorized_has_exactly_stripes_shape() {
        let reply = unauthorized();
        assert_eq!(reply.status, 401);
        assert_eq!(
            body(&reply),
            json!({"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}})
        );
    }

    #[test]
    fn server_errors_are_not_storable() {
        assert!(!api_error("boom").is_storable());
        assert!(parameter_missing("amount").is_storable());
        assert!(card_declined("generic_decline", "m", None, json!({})).is_storable());
    }

    #[test]
    fn amount_messages_use_major_units() {
        assert_eq!(
            body(&amount_too_small(50, "usd"))["error"]["message"],
            "Amount must be at least 0.50 usd"
        );
        assert_eq!(
            body(&amount_too_small(50, "jpy"))["error"]["message"],
            "Amount must be at least 50 jpy"
        );
        assert_eq!(
            body(&amount_too_large(99_999_999, "usd"))["error"]["message"],
            "Amount must be no more than 999999.99 usd"
        );
    }

    #[test]
    fn refund_refusals_have_stripes_shape() {
        assert_eq!(
            body(&refund_exceeds_unrefunded(2500, 2000, "usd")),
            json!({"error": {
                "type": "invalid_request_error",
                "param": "amount",
                "message": "Refund amount ($25.00) is greater than unrefunded amount on charge ($20.00)",
            }})
        );
        assert_eq!(
            body(&refund_exceeds_unrefunded(3001, 3000, "jpy"))["error"]["message"],
            "Refund amount (¥3001) is greater than unrefunded amount on charge (¥3000)"
        );
        assert_eq!(
            body(&charge_already_refunded("ch_1"))["error"]["code"],
            "charge_already_refunded"
        );
        assert_eq!(
            body(&charge_not_refundable("pi_1"))["error"]["code"],
            "charge_not_refundable"
        );
    }
}
