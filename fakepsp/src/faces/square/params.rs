//! Reading and validating the Square face's JSON requests, in Square's error words
//! (`{"errors":[{category, code, detail, field}]}`, 400 INVALID_REQUEST_ERROR). Every refusal
//! here is answered before the idempotency key is used, so it stores nothing under it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::json::invalid;
use super::DelayAction;
use crate::ledger::Reply;

/// `idempotency_key` is 1 to 45 long (CreatePayment spec:L16747, CancelPaymentByIdempotencyKey
/// spec:L7186, RefundPayment's description); it "may hold fewer than 45 characters if
/// multi-byte characters are used", so the limit is on UTF-8 bytes.
pub(super) const MAX_IDEMPOTENCY_KEY_BYTES: usize = 45;

/// `reference_id`: max 40 (spec:L16793).
const MAX_REFERENCE_ID: usize = 40;

/// `note`: max 500 (spec:L16823).
const MAX_NOTE: usize = 500;

/// `buyer_email_address`: max 255 (spec:L16806).
const MAX_BUYER_EMAIL: usize = 255;

/// A refund's `reason`: max 192 (spec:L45559).
const MAX_REASON: usize = 192;

/// A custom `delay_duration` is at least one minute (Square staff, forum thread 3485).
const MIN_DELAY_MS: i64 = 60 * 1000;

/// The currencies the fake's seller takes (UNCONFIRMED: the fake's choice; Square takes the
/// seller's own currency only, which the fake does not pin down).
const CURRENCIES: &[&str] = &["USD", "CAD", "GBP", "EUR", "JPY", "AUD"];

/// CreatePayment's fields the face models (spec:L16733); any other is refused.
const CREATE_FIELDS: &[&str] = &[
    "accept_partial_authorization",
    "amount_money",
    "autocomplete",
    "buyer_email_address",
    "delay_action",
    "delay_duration",
    "idempotency_key",
    "location_id",
    "note",
    "reference_id",
    "source_id",
    "verification_token",
];

/// RefundPayment's fields the face models (spec:L45509); any other is refused.
const REFUND_FIELDS: &[&str] = &[
    "amount_money",
    "idempotency_key",
    "payment_id",
    "payment_version_token",
    "reason",
];

/// `Money`'s fields (spec:L39593).
const MONEY_FIELDS: &[&str] = &["amount", "currency"];

/// A JSON request body.
pub(super) type Body = Map<String, Value>;

/// A validated CreatePayment request.
#[derive(Clone, Debug)]
pub(super) struct CreatePayment {
    pub(super) idempotency_key: String,
    pub(super) source_id: String,
    pub(super) amount: i64,
    /// Lower-case ISO code, as the ledger keeps it.
    pub(super) currency: String,
    pub(super) autocomplete: bool,
    /// A custom `delay_duration`, in ms.
    pub(super) delay_ms: Option<i64>,
    pub(super) delay_action: DelayAction,
    pub(super) reference_id: Option<String>,
    pub(super) note: Option<String>,
    pub(super) location_id: Option<String>,
    pub(super) verification_token: Option<String>,
    pub(super) buyer_email_address: Option<String>,
}

/// A validated RefundPayment request.
#[derive(Clone, Debug)]
pub(super) struct RefundPayment {
    pub(super) idempotency_key: String,
    pub(super) payment_id: String,
    pub(super) amount: i64,
    /// Lower-case ISO code.
    pub(super) currency: String,
    pub(super) reason: Option<String>,
    pub(super) payment_version_token: Option<String>,
}

/// The body as a JSON object; with `empty_ok`, an empty body reads as `{}`. Anything else →
/// 400 EXPECTED_JSON_BODY.
pub(super) fn object(body: &[u8], empty_ok: bool) -> Result<Body, Reply> {
    if empty_ok && body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(invalid(
            "EXPECTED_JSON_BODY",
            "The request body must be a JSON object.",
            None,
        )),
    }
}

/// `value` with every object's keys in order, as text: what an idempotency key is compared on
/// ("the same request" is the same JSON, whatever its key order or spacing).
pub(super) fn canonical(value: &Value) -> String {
    match value {
        Value::Object(object) => {
            let sorted: BTreeMap<&String, &Value> = object.iter().collect();
            let fields: Vec<String> = sorted
                .into_iter()
                .map(|(name, value)| format!("{}:{}", Value::from(name.as_str()), canonical(value)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

/// Validates a CreatePayment body (see the face's module docs for each refusal). `minimums`
/// raises the minimum amount per lower-case currency; `max_delay_ms` is the longest
/// `delay_duration` (the default one).
pub(super) fn create_payment(
    body: &Body,
    minimums: &BTreeMap<String, i64>,
    max_delay_ms: i64,
) -> Result<CreatePayment, Reply> {
    refuse_unknown(body, CREATE_FIELDS, "")?;
    let idempotency_key = idempotency_key(body)?;
    let source_id = required_string(body, "source_id")?;
    let (amount, currency) = money(body, "amount_money", minimums)?;
    let autocomplete = boolean(body, "autocomplete")?.unwrap_or(true);
    let partial = boolean(body, "accept_partial_authorization")?.unwrap_or(false);
    if partial && autocomplete {
        return Err(invalid(
            "BAD_REQUEST",
            "accept_partial_authorization cannot be true when autocomplete is true.",
            Some("accept_partial_authorization"),
        ));
    }
    let delay_ms = match string(body, "delay_duration", None)? {
        None => None,
        Some(_) if autocomplete => return Err(delayed_only("delay_duration")),
        Some(text) => Some(delay(&text, max_delay_ms)?),
    };
    let delay_action = match string(body, "delay_action", None)?.as_deref() {
        None => DelayAction::Cancel,
        Some(_) if autocomplete => return Err(delayed_only("delay_action")),
        Some("CANCEL") => DelayAction::Cancel,
        Some("COMPLETE") => DelayAction::Complete,
        Some(other) => {
            return Err(invalid(
                "INVALID_ENUM_VALUE",
                &format!(
                    "`{other}` is not a valid enum value for delay_action (CANCEL, COMPLETE)."
                ),
                Some("delay_action"),
            ))
        }
    };
    Ok(CreatePayment {
        idempotency_key,
        source_id,
        amount,
        currency,
        autocomplete,
        delay_ms,
        delay_action,
        reference_id: string(body, "reference_id", Some(MAX_REFERENCE_ID))?,
        note: string(body, "note", Some(MAX_NOTE))?,
        location_id: non_empty(string(body, "location_id", None)?),
        verification_token: non_empty(string(body, "verification_token", None)?),
        buyer_email_address: string(body, "buyer_email_address", Some(MAX_BUYER_EMAIL))?,
    })
}

/// Validates a RefundPayment body: `idempotency_key`, `payment_id` (required: unlinked refunds
/// are not modelled), `amount_money`, `reason`, `payment_version_token`.
pub(super) fn refund_payment(body: &Body) -> Result<RefundPayment, Reply> {
    refuse_unknown(body, REFUND_FIELDS, "")?;
    let idempotency_key = idempotency_key(body)?;
    let (amount, currency) = money(body, "amount_money", &BTreeMap::new())?;
    let payment_id = required_string(body, "payment_id")?;
    Ok(RefundPayment {
        idempotency_key,
        payment_id,
        amount,
        currency,
        reason: string(body, "reason", Some(MAX_REASON))?,
        payment_version_token: string(body, "payment_version_token", None)?,
    })
}

/// Validates a CompletePayment body: only `version_token` (string or null).
pub(super) fn complete_payment(body: &Body) -> Result<Option<String>, Reply> {
    refuse_unknown(body, &["version_token"], "")?;
    string(body, "version_token", None)
}

/// Validates a CancelPayment body: none, or `{}`.
pub(super) fn cancel_payment(body: &Body) -> Result<(), Reply> {
    refuse_unknown(body, &[], "")
}

/// Validates a CancelPaymentByIdempotencyKey body: only `idempotency_key` (spec:L7186).
pub(super) fn cancel_by_key(body: &Body) -> Result<String, Reply> {
    refuse_unknown(body, &["idempotency_key"], "")?;
    idempotency_key(body)
}

/// 400 UNKNOWN_BODY_PARAMETER for the first field (in name order) not in `known`.
fn refuse_unknown(body: &Body, known: &[&str], prefix: &str) -> Result<(), Reply> {
    let mut names: Vec<&String> = body.keys().collect();
    names.sort();
    match names
        .into_iter()
        .find(|name| !known.contains(&name.as_str()))
    {
        None => Ok(()),
        Some(name) => {
            let field = format!("{prefix}{name}");
            Err(invalid(
                "UNKNOWN_BODY_PARAMETER",
                &format!("Unknown body parameter: {field} (the fake PSP refuses what it does not model)."),
                Some(&field),
            ))
        }
    }
}

/// `idempotency_key`: required, 1 to 45 bytes.
fn idempotency_key(body: &Body) -> Result<String, Reply> {
    let key = required_string(body, "idempotency_key")?;
    if key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
        return Err(too_long("idempotency_key", MAX_IDEMPOTENCY_KEY_BYTES));
    }
    Ok(key)
}

/// A required string at least one character long.
fn required_string(body: &Body, name: &str) -> Result<String, Reply> {
    match string(body, name, None)? {
        None => Err(missing(name)),
        Some(value) if value.is_empty() => Err(invalid(
            "VALUE_TOO_SHORT",
            &format!("Field must not be less than 1 character long: {name}."),
            Some(name),
        )),
        Some(value) => Ok(value),
    }
}

/// An optional string (absent or `null`: `None`) of at most `max_chars` characters.
fn string(body: &Body, name: &str, max_chars: Option<usize>) -> Result<Option<String>, Reply> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => match max_chars {
            Some(max) if value.chars().count() > max => Err(too_long(name, max)),
            _ => Ok(Some(value.clone())),
        },
        Some(_) => Err(incorrect_type(name, "a string")),
    }
}

/// An optional boolean (absent or `null`: `None`).
fn boolean(body: &Body, name: &str) -> Result<Option<bool>, Reply> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(incorrect_type(name, "a boolean")),
    }
}

/// A required `Money` (`{amount, currency}`): `amount` an integer of at least 1 (or the raised
/// minimum for its currency), `currency` one the fake's seller takes. Returns the amount and
/// the lower-case currency.
fn money(
    body: &Body,
    name: &str,
    minimums: &BTreeMap<String, i64>,
) -> Result<(i64, String), Reply> {
    let object = match body.get(name) {
        None | Some(Value::Null) => return Err(missing(name)),
        Some(Value::Object(object)) => object,
        Some(_) => return Err(incorrect_type(name, "an object")),
    };
    refuse_unknown(object, MONEY_FIELDS, &format!("{name}."))?;
    let amount_field = format!("{name}.amount");
    let amount = match object.get("amount") {
        None | Some(Value::Null) => return Err(missing(&amount_field)),
        Some(value) => value
            .as_i64()
            .ok_or_else(|| incorrect_type(&amount_field, "an integer"))?,
    };
    let currency_field = format!("{name}.currency");
    let currency = match object.get("currency") {
        None | Some(Value::Null) => return Err(missing(&currency_field)),
        Some(Value::String(currency)) if CURRENCIES.contains(&currency.as_str()) => {
            currency.to_ascii_lowercase()
        }
        Some(Value::String(currency)) => {
            return Err(invalid(
                "UNSUPPORTED_CURRENCY",
                &format!(
                    "The currency `{currency}` is not supported (the fake takes {}).",
                    CURRENCIES.join(", ")
                ),
                Some(&currency_field),
            ))
        }
        Some(_) => return Err(incorrect_type(&currency_field, "a string")),
    };
    let minimum = minimums.get(&currency).copied().unwrap_or(1).max(1);
    if amount < minimum {
        return Err(invalid(
            "VALUE_TOO_LOW",
            &format!("`{amount_field}` must be at least {minimum}."),
            Some(&amount_field),
        ));
    }
    Ok((amount, currency))
}

/// A custom `delay_duration` in ms: an RFC 3339 duration of at least one minute and at most
/// `max_ms` (Square: "less than the default threshold").
fn delay(text: &str, max_ms: i64) -> Result<i64, Reply> {
    let field = Some("delay_duration");
    let Some(ms) = parse_duration(text) else {
        return Err(invalid(
            "INVALID_VALUE",
            &format!("`{text}` is not an RFC 3339 duration."),
            field,
        ));
    };
    if ms < MIN_DELAY_MS {
        return Err(invalid(
            "VALUE_TOO_LOW",
            "delay_duration must be at least PT1M.",
            field,
        ));
    }
    if ms > max_ms {
        return Err(invalid(
            "VALUE_TOO_HIGH",
            &format!(
                "delay_duration must be at most {}.",
                super::json::duration_text(max_ms)
            ),
            field,
        ));
    }
    Ok(ms)
}

/// An RFC 3339 (ISO 8601) duration, `P[nW][nD][T[nH][nM][n[.fff]S]]` with at least one part,
/// in ms; `None` if it is not one.
pub(super) fn parse_duration(text: &str) -> Option<i64> {
    let rest = text.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) if !time.is_empty() => (date, Some(time)),
        Some(_) => return None,
        None => (rest, None),
    };
    let mut total: i64 = 0;
    let mut parts = 0;
    for (section, units) in [
        (date, &[('W', 7 * 86_400_000_i64), ('D', 86_400_000)][..]),
        (
            time.unwrap_or(""),
            &[('H', 3_600_000), ('M', 60_000), ('S', 1_000)][..],
        ),
    ] {
        let mut section = section;
        let mut next_unit = 0;
        while !section.is_empty() {
            let end = section.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
            let (number, after) = section.split_at(end);
            let unit = after.chars().next()?;
            let position = units.iter().skip(next_unit).position(|(u, _)| *u == unit)?;
            let (_, unit_ms) = units[next_unit + position];
            next_unit += position + 1;
            total = total.checked_add(amount_ms(number, unit_ms, unit == 'S')?)?;
            parts += 1;
            section = &after[1..];
        }
    }
    (parts > 0).then_some(total)
}

/// `number` (digits, with up to three decimals for seconds only) of a unit of `unit_ms`.
fn amount_ms(number: &str, unit_ms: i64, fraction_ok: bool) -> Option<i64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if number.contains('.') && (!fraction_ok || fraction.is_empty() || fraction.len() > 3) {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let millis: i64 = if fraction.is_empty() {
        0
    } else {
        format!("{fraction:0<3}").parse().ok()?
    };
    whole.checked_mul(unit_ms)?.checked_add(millis)
}

/// 400 MISSING_REQUIRED_PARAMETER about `field`.
fn missing(field: &str) -> Reply {
    invalid(
        "MISSING_REQUIRED_PARAMETER",
        &format!("Missing required parameter: {field}."),
        Some(field),
    )
}

/// 400 VALUE_TOO_LONG about `field`.
fn too_long(field: &str, max: usize) -> Reply {
    invalid(
        "VALUE_TOO_LONG",
        &format!("Field must not be greater than {max} length: {field}."),
        Some(field),
    )
}

/// 400 INCORRECT_TYPE about `field` ("The value provided in the request is the wrong type",
/// ErrorCode).
fn incorrect_type(field: &str, expected: &str) -> Reply {
    invalid(
        "INCORRECT_TYPE",
        &format!("Expected {expected} value: {field}."),
        Some(field),
    )
}

/// 400 BAD_REQUEST: `field` only goes with `autocomplete: false` (spec:L16765-L16769).
fn delayed_only(field: &str) -> Reply {
    invalid(
        "BAD_REQUEST",
        &format!("{field} can only be set when autocomplete is false."),
        Some(field),
    )
}

/// An empty string read as absent.
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_rfc_3339() {
        const HOUR: i64 = 3_600_000;
        assert_eq!(parse_duration("P7D"), Some(168 * HOUR));
        assert_eq!(parse_duration("PT168H"), Some(168 * HOUR));
        assert_eq!(parse_duration("P1W"), Some(168 * HOUR));
        assert_eq!(parse_duration("P1DT2H30M"), Some(26 * HOUR + 30 * 60_000));
        assert_eq!(parse_duration("PT1.5S"), Some(1_500));
        assert_eq!(parse_duration("PT90S"), Some(90_000));
        for bad in [
            "", "P", "PT", "7D", "P1H", "PT1D", "PT1M1H", "P1.5D", "PTH", "PT1.5M", "P1D1D",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_canonical_form_ignores_key_order_and_spacing() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,{"q":2,"p":1}],"x":"s"}}"#)
            .unwrap_or(Value::Null);
        let b: Value =
            serde_json::from_str(r#"{ "a": {"x":"s", "y":[1, {"p":1,"q":2}]}, "b": 1 }"#)
                .unwrap_or(Value::Null);
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(
            canonical(&a),
            r#"{"a":{"x":"s","y":[1,{"p":1,"q":2}]},"b":1}"#
        );
    }
}
