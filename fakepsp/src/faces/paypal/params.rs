//! Reading and validating the PayPal face's JSON requests (Orders v2 and Payments v2), in
//! PayPal's error words: a refusal is an [`Issue`] (`details[0]` of PayPal's error body), which
//! the face writes with a `debug_id` drawn from the ledger. Every refusal here is answered before
//! the `PayPal-Request-Id` is looked at or used, so it stores nothing under it.
//!
//! Sources: `docs/psp-research-paypal.md` (PayPal's `checkout_orders_v2.json` \[O\] and
//! `payments_payment_v2.json` \[P\]); the limits are cited where they are used.

use serde_json::{Map, Value};

use super::json::Issue;

/// `PayPal-Request-Id` is 1 to 108 characters (\[O\] `#/components/parameters/paypal_request_id`;
/// the newer docs allow more on capture, the fake keeps 108 everywhere, as the brief says).
pub(super) const MAX_REQUEST_ID_CHARS: usize = 108;

/// `custom_id` and `invoice_id`: 1 to 127 (\[O\] `purchase_unit_request`; \[P\] `refund_request`).
const MAX_ID_FIELD: usize = 127;

/// `reference_id`: 1 to 256 (\[O\] `purchase_unit_request`).
const MAX_REFERENCE_ID: usize = 256;

/// `description`: 1 to 127 (\[O\] `purchase_unit_request`).
const MAX_DESCRIPTION: usize = 127;

/// `note_to_payer`: 1 to 255 (\[P\] `refund_request`, `capture_request`).
const MAX_NOTE_TO_PAYER: usize = 255;

/// `soft_descriptor`: at most 22 (\[P\] `capture_request`).
const MAX_SOFT_DESCRIPTOR: usize = 22;

/// `vault_id`: 1 to 255 of `[0-9a-zA-Z_-]` (\[O\] `#/components/schemas/vault_id`).
const MAX_VAULT_ID: usize = 255;

/// `purchase_units`: 1 to 10 items (\[O\] `order_request`).
const MAX_PURCHASE_UNITS: usize = 10;

/// `money.value`: at most 32 characters (\[O\] `#/components/schemas/money`).
const MAX_VALUE_CHARS: usize = 32;

/// "The `amount.value` field supports up to 15 digits preceding the decimal" (\[O\]
/// `purchase_unit_request/properties/amount`; 422 MAX_VALUE_EXCEEDED: "Should be less than or
/// equal to 999999999999999.99").
const MAX_WHOLE_DIGITS: usize = 15;

/// The currencies the fake's merchant account takes (the brief's list; UNCONFIRMED: the
/// fake's choice, PayPal takes many more).
pub(super) const CURRENCIES: &[&str] = &["USD", "EUR", "GBP", "JPY", "AUD", "CAD", "SGD", "THB"];

/// Currencies without decimals: "This currency does not support decimals" (PayPal's currency
/// codes table, read through mirrors: UNCONFIRMED, research §3). Only JPY of them is in
/// [`CURRENCIES`]; the others are kept so the rule reads as PayPal's.
const NO_DECIMALS: &[&str] = &["HUF", "JPY", "TWD"];

/// A JSON request body.
pub(super) type Body = Map<String, Value>;

/// `intent` of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OrderIntent {
    /// `CAPTURE`: the payment is captured when the order completes.
    Capture,
    /// `AUTHORIZE`: the payment is authorized, then captured through the Payments API.
    Authorize,
}

impl OrderIntent {
    /// The wire word.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Capture => "CAPTURE",
            Self::Authorize => "AUTHORIZE",
        }
    }
}

/// Which `payment_source` a create names, as the fake models them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// None: the buyer approves on the `approve` link and picks how to pay there.
    None,
    /// `card.vault_id`: a vaulted card (the fake's test token).
    Card { vault_id: String },
    /// `paypal.vault_id`: a vaulted PayPal wallet (the fake's test token).
    PayPalVault { vault_id: String },
    /// `paypal` without a `vault_id`: the buyer approves on the `payer-action` link.
    PayPalWallet,
}

impl Source {
    /// The vaulted test token, if the source is vaulted.
    pub(super) fn vault_id(&self) -> Option<&str> {
        match self {
            Self::Card { vault_id } | Self::PayPalVault { vault_id } => Some(vault_id),
            Self::None | Self::PayPalWallet => None,
        }
    }

    /// The JSON pointer of the source's `vault_id`.
    pub(super) fn vault_field(&self) -> &'static str {
        match self {
            Self::PayPalVault { .. } => "/payment_source/paypal/vault_id",
            _ => "/payment_source/card/vault_id",
        }
    }
}

/// A validated `amount` (`money`): minor units and the upper-case currency code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Money {
    pub(super) minor: i64,
    pub(super) currency: String,
}

/// The one purchase unit of a create, validated.
#[derive(Clone, Debug)]
pub(super) struct Unit {
    pub(super) reference_id: Option<String>,
    pub(super) custom_id: Option<String>,
    pub(super) invoice_id: Option<String>,
    pub(super) description: Option<String>,
    pub(super) amount: Money,
}

/// A validated `POST /v2/checkout/orders`.
#[derive(Clone, Debug)]
pub(super) struct CreateOrder {
    pub(super) intent: OrderIntent,
    pub(super) unit: Unit,
    pub(super) source: Source,
    /// Whether the request named a `payment_source` at all (then a `PayPal-Request-Id` is
    /// required).
    pub(super) has_payment_source: bool,
    /// The source's `experience_context.return_url`, if any.
    pub(super) return_url: Option<String>,
    /// The source's `experience_context.cancel_url`, if any.
    pub(super) cancel_url: Option<String>,
}

/// A validated `POST /v2/payments/authorizations/{id}/capture` (\[P\] `capture_request`).
#[derive(Clone, Debug, Default)]
pub(super) struct CaptureAuthorization {
    pub(super) amount: Option<Money>,
    pub(super) final_capture: bool,
    pub(super) invoice_id: Option<String>,
    pub(super) note_to_payer: Option<String>,
}

/// A validated `POST /v2/payments/captures/{id}/refund` (\[P\] `refund_request`).
#[derive(Clone, Debug, Default)]
pub(super) struct RefundCapture {
    pub(super) amount: Option<Money>,
    pub(super) custom_id: Option<String>,
    pub(super) invoice_id: Option<String>,
    pub(super) note_to_payer: Option<String>,
}

/// The `PayPal-Request-Id` header: absent, or 1 to 108 characters (else 400 INVALID_REQUEST
/// INVALID_STRING_LENGTH).
pub(super) fn request_id(header: Option<&str>) -> Result<Option<String>, Issue> {
    match header {
        None => Ok(None),
        Some(id) if !id.is_empty() && id.chars().count() <= MAX_REQUEST_ID_CHARS => {
            Ok(Some(id.to_owned()))
        }
        Some(id) => Err(Issue::bad(
            "INVALID_STRING_LENGTH",
            "PayPal-Request-Id",
            "header",
            &format!(
                "The value of a field is either too short or too long: PayPal-Request-Id must be \
                 1 to {MAX_REQUEST_ID_CHARS} characters, not {}.",
                id.chars().count()
            ),
        )),
    }
}

/// The body as a JSON object; with `empty_ok`, an empty body reads as `{}`. Anything else → 400
/// MALFORMED_REQUEST_JSON.
pub(super) fn object(body: &[u8], empty_ok: bool) -> Result<Body, Issue> {
    if empty_ok && body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(Issue::bad(
            "MALFORMED_REQUEST_JSON",
            "/",
            "body",
            "The request JSON is not well formed.",
        )),
    }
}

/// `value` with every object's keys in order, as text: what a `PayPal-Request-Id` is compared
/// on ("the same request" is the same JSON, whatever its key order or spacing).
pub(super) fn canonical(value: &Value) -> String {
    match value {
        Value::Object(object) => {
            let mut fields: Vec<(&String, &Value)> = object.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let fields: Vec<String> = fields
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

/// Validates a create (\[O\] `order_request`); see the face's module docs for each refusal.
/// Schema refusals (400) come before business ones (422): the one-unit rule for `AUTHORIZE`
/// and the amount's value.
pub(super) fn create_order(body: &Body) -> Result<CreateOrder, Issue> {
    refuse_unknown(body, &["intent", "payment_source", "purchase_units"], "")?;
    let intent = match body.get("intent") {
        None | Some(Value::Null) => return Err(missing("/intent")),
        Some(Value::String(text)) if text == "CAPTURE" => OrderIntent::Capture,
        Some(Value::String(text)) if text == "AUTHORIZE" => OrderIntent::Authorize,
        Some(other) => return Err(invalid_value("/intent", other, "CAPTURE or AUTHORIZE")),
    };
    let units = match body.get("purchase_units") {
        None | Some(Value::Null) => return Err(missing("/purchase_units")),
        Some(Value::Array(units)) => units,
        Some(_) => return Err(syntax("/purchase_units", "an array")),
    };
    if units.is_empty() {
        return Err(Issue::bad(
            "INVALID_ARRAY_MIN_ITEMS",
            "/purchase_units",
            "body",
            "The number of items in an array parameter is too small: at least 1.",
        ));
    }
    if units.len() > MAX_PURCHASE_UNITS {
        return Err(Issue::bad(
            "INVALID_ARRAY_MAX_ITEMS",
            "/purchase_units",
            "body",
            "The number of items in an array parameter is too large: at most 10.",
        ));
    }
    if units.len() > 1 && intent == OrderIntent::Capture {
        return Err(Issue::bad(
            "NOT_SUPPORTED",
            "/purchase_units",
            "body",
            "The fake PSP models orders of exactly one purchase unit.",
        ));
    }
    let Some(Value::Object(unit)) = units.first() else {
        return Err(syntax("/purchase_units/0", "an object"));
    };
    let (unit, amount_field) = purchase_unit(unit)?;
    let (source, return_url, cancel_url) = match body.get("payment_source") {
        None | Some(Value::Null) => (Source::None, None, None),
        Some(Value::Object(source)) => payment_source(source)?,
        Some(_) => return Err(syntax("/payment_source", "an object")),
    };
    // Business rules (422), after the schema.
    if units.len() > 1 {
        return Err(Issue::unprocessable(
            "UNSUPPORTED_INTENT",
            "/purchase_units",
            "body",
            "intent=AUTHORIZE is not supported for multiple purchase units. Only intent=CAPTURE \
             is supported.",
        ));
    }
    let amount = money_value(&unit.1, &amount_field)?;
    let (fields, _) = unit;
    Ok(CreateOrder {
        intent,
        unit: Unit {
            reference_id: fields.reference_id,
            custom_id: fields.custom_id,
            invoice_id: fields.invoice_id,
            description: fields.description,
            amount,
        },
        has_payment_source: !matches!(body.get("payment_source"), None | Some(Value::Null)),
        source,
        return_url,
        cancel_url,
    })
}

/// The text fields of a purchase unit, before its amount's value is judged.
#[derive(Clone, Debug)]
pub(super) struct UnitFields {
    reference_id: Option<String>,
    custom_id: Option<String>,
    invoice_id: Option<String>,
    description: Option<String>,
}

/// An `amount` whose schema is right, its value not yet judged: the value text and the
/// upper-case currency code.
#[derive(Clone, Debug)]
pub(super) struct RawMoney {
    value: String,
    currency: String,
}

/// The first purchase unit's schema; returns its fields, its raw amount, and the JSON pointer
/// of the amount (PayPal's style: `/purchase_units/@reference_id=='default'/amount`).
fn purchase_unit(unit: &Body) -> Result<((UnitFields, RawMoney), String), Issue> {
    refuse_unknown(
        unit,
        &[
            "amount",
            "custom_id",
            "description",
            "invoice_id",
            "reference_id",
        ],
        "/purchase_units/0/",
    )?;
    let reference_id = string(
        unit,
        "reference_id",
        "/purchase_units/0/reference_id",
        MAX_REFERENCE_ID,
    )?;
    let prefix = format!(
        "/purchase_units/@reference_id=='{}'",
        reference_id.as_deref().unwrap_or("default")
    );
    let fields = UnitFields {
        custom_id: string(
            unit,
            "custom_id",
            &format!("{prefix}/custom_id"),
            MAX_ID_FIELD,
        )?,
        invoice_id: string(
            unit,
            "invoice_id",
            &format!("{prefix}/invoice_id"),
            MAX_ID_FIELD,
        )?,
        description: string(
            unit,
            "description",
            &format!("{prefix}/description"),
            MAX_DESCRIPTION,
        )?,
        reference_id,
    };
    let amount_field = format!("{prefix}/amount");
    let raw = match unit.get("amount") {
        None | Some(Value::Null) => return Err(missing(&amount_field)),
        Some(Value::Object(amount)) => money_schema(amount, &amount_field)?,
        Some(_) => return Err(syntax(&amount_field, "an object")),
    };
    Ok(((fields, raw), amount_field))
}

/// `payment_source` (\[O\] `#/components/schemas/payment_source`): exactly one of `card` and
/// `paypal`, as the fake models them. Returns the source and its experience context's return
/// and cancel URLs.
fn payment_source(source: &Body) -> Result<(Source, Option<String>, Option<String>), Issue> {
    let modelled = ["card", "paypal"];
    if let Some(other) = sorted_keys(source)
        .into_iter()
        .find(|name| !modelled.contains(&name.as_str()))
    {
        return Err(Issue::bad(
            "NOT_SUPPORTED",
            &format!("/payment_source/{other}"),
            "body",
            "The fake PSP models only the card and paypal payment sources.",
        ));
    }
    match (source.get("card"), source.get("paypal")) {
        (Some(_), Some(_)) => Err(Issue::bad(
            "INVALID_PARAMETER_VALUE",
            "/payment_source",
            "body",
            "Only one payment source may be given.",
        )),
        (None, None) => Err(missing("/payment_source/card")),
        (Some(Value::Object(card)), None) => {
            refuse_unknown(
                card,
                &["experience_context", "vault_id"],
                "/payment_source/card/",
            )?;
            let vault_id = vault_id(card, "/payment_source/card/vault_id")?
                .ok_or_else(|| missing("/payment_source/card/vault_id"))?;
            let (return_url, cancel_url) = match card.get("experience_context") {
                None | Some(Value::Null) => (None, None),
                Some(Value::Object(context)) => {
                    refuse_unknown(
                        context,
                        &["cancel_url", "return_url"],
                        "/payment_source/card/experience_context/",
                    )?;
                    urls(context, "/payment_source/card/experience_context")?
                }
                Some(_) => {
                    return Err(syntax(
                        "/payment_source/card/experience_context",
                        "an object",
                    ))
                }
            };
            Ok((Source::Card { vault_id }, return_url, cancel_url))
        }
        (None, Some(Value::Object(paypal))) => {
            refuse_unknown(
                paypal,
                &["experience_context", "vault_id"],
                "/payment_source/paypal/",
            )?;
            let vault_id = vault_id(paypal, "/payment_source/paypal/vault_id")?;
            let (return_url, cancel_url) = match paypal.get("experience_context") {
                None | Some(Value::Null) => (None, None),
                Some(Value::Object(context)) => paypal_context(context)?,
                Some(_) => {
                    return Err(syntax(
                        "/payment_source/paypal/experience_context",
                        "an object",
                    ))
                }
            };
            let source = match vault_id {
                Some(vault_id) => Source::PayPalVault { vault_id },
                None => Source::PayPalWallet,
            };
            Ok((source, return_url, cancel_url))
        }
        (Some(_), None) => Err(syntax("/payment_source/card", "an object")),
        (None, Some(_)) => Err(syntax("/payment_source/paypal", "an object")),
    }
}

/// `paypal.experience_context` (\[O\] `paypal_wallet_experience_context`): the URLs, and the
/// enums the fake accepts without acting on them.
fn paypal_context(context: &Body) -> Result<(Option<String>, Option<String>), Issue> {
    const PREFIX: &str = "/payment_source/paypal/experience_context";
    refuse_unknown(
        context,
        &[
            "brand_name",
            "cancel_url",
            "landing_page",
            "locale",
            "payment_method_preference",
            "return_url",
            "shipping_preference",
            "user_action",
        ],
        &format!("{PREFIX}/"),
    )?;
    for (name, allowed) in [
        ("user_action", &["CONTINUE", "PAY_NOW"][..]),
        (
            "landing_page",
            &["LOGIN", "GUEST_CHECKOUT", "NO_PREFERENCE"],
        ),
        (
            "shipping_preference",
            &["GET_FROM_FILE", "NO_SHIPPING", "SET_PROVIDED_ADDRESS"],
        ),
        (
            "payment_method_preference",
            &["UNRESTRICTED", "IMMEDIATE_PAYMENT_REQUIRED"],
        ),
    ] {
        let field = format!("{PREFIX}/{name}");
        if let Some(value) = string(context, name, &field, 255)? {
            if !allowed.contains(&value.as_str()) {
                return Err(invalid_value(
                    &field,
                    &Value::String(value),
                    &allowed.join(", "),
                ));
            }
        }
    }
    string(context, "brand_name", &format!("{PREFIX}/brand_name"), 127)?;
    string(context, "locale", &format!("{PREFIX}/locale"), 10)?;
    urls(context, PREFIX)
}

/// `return_url` and `cancel_url` of an experience context: absolute URLs when given.
fn urls(context: &Body, prefix: &str) -> Result<(Option<String>, Option<String>), Issue> {
    let mut found = [None, None];
    for (slot, name) in found.iter_mut().zip(["return_url", "cancel_url"]) {
        let field = format!("{prefix}/{name}");
        if let Some(url) = string(context, name, &field, 4000)? {
            if url::Url::parse(&url).is_err() {
                return Err(syntax(&field, "an absolute URL"));
            }
            *slot = Some(url);
        }
    }
    let [return_url, cancel_url] = found;
    Ok((return_url, cancel_url))
}

/// An optional `vault_id`: 1 to 255 of `[0-9a-zA-Z_-]`.
fn vault_id(source: &Body, field: &str) -> Result<Option<String>, Issue> {
    let Some(id) = string(source, "vault_id", field, MAX_VAULT_ID)? else {
        return Ok(None);
    };
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(syntax(field, "of [0-9a-zA-Z_-]"));
    }
    Ok(Some(id))
}

/// Validates the body of an order's `/capture` or `/authorize`: `{}` or none (\[O\]
/// `order_capture_request` has only `payment_source`, which the fake does not model there).
pub(super) fn order_action(body: &Body) -> Result<(), Issue> {
    refuse_unknown(body, &[], "")
}

/// Validates a capture of an authorization (\[P\] `capture_request`, all optional).
pub(super) fn capture_authorization(body: &Body) -> Result<CaptureAuthorization, Issue> {
    refuse_unknown(
        body,
        &[
            "amount",
            "final_capture",
            "invoice_id",
            "note_to_payer",
            "soft_descriptor",
        ],
        "",
    )?;
    let final_capture = match body.get("final_capture") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(value)) => *value,
        Some(_) => return Err(syntax("/final_capture", "a boolean")),
    };
    string(
        body,
        "soft_descriptor",
        "/soft_descriptor",
        MAX_SOFT_DESCRIPTOR,
    )?;
    Ok(CaptureAuthorization {
        amount: optional_money(body)?,
        final_capture,
        invoice_id: string(body, "invoice_id", "/invoice_id", MAX_ID_FIELD)?,
        note_to_payer: string(body, "note_to_payer", "/note_to_payer", MAX_NOTE_TO_PAYER)?,
    })
}

/// Validates a refund of a capture (\[P\] `refund_request`, all optional).
pub(super) fn refund_capture(body: &Body) -> Result<RefundCapture, Issue> {
    refuse_unknown(
        body,
        &["amount", "custom_id", "invoice_id", "note_to_payer"],
        "",
    )?;
    Ok(RefundCapture {
        amount: optional_money(body)?,
        custom_id: string(body, "custom_id", "/custom_id", MAX_ID_FIELD)?,
        invoice_id: string(body, "invoice_id", "/invoice_id", MAX_ID_FIELD)?,
        note_to_payer: string(body, "note_to_payer", "/note_to_payer", MAX_NOTE_TO_PAYER)?,
    })
}

/// Validates the body of a void: none, or `{}` (\[P\]: the void takes no body).
pub(super) fn void(body: &Body) -> Result<(), Issue> {
    refuse_unknown(body, &[], "")
}

/// An optional top-level `amount`, judged whole.
fn optional_money(body: &Body) -> Result<Option<Money>, Issue> {
    match body.get("amount") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(amount)) => {
            let raw = money_schema(amount, "/amount")?;
            money_value(&raw, "/amount").map(Some)
        }
        Some(_) => Err(syntax("/amount", "an object")),
    }
}

/// A `money` object's schema (\[O\] `#/components/schemas/money`): `currency_code` three
/// characters, `value` a decimal string (`^((-?[0-9]+)|(-?([0-9]+)?[.][0-9]+))$`, at most 32).
fn money_schema(amount: &Body, field: &str) -> Result<RawMoney, Issue> {
    refuse_unknown(amount, &["currency_code", "value"], &format!("{field}/"))?;
    let currency_field = format!("{field}/currency_code");
    let currency = match amount.get("currency_code") {
        None | Some(Value::Null) => return Err(missing(&currency_field)),
        Some(Value::String(code)) if code.chars().count() == 3 => code.clone(),
        Some(Value::String(_)) => {
            return Err(Issue::bad(
                "INVALID_STRING_LENGTH",
                &currency_field,
                "body",
                "The value of a field is either too short or too long: currency_code is 3 \
                 characters.",
            ))
        }
        Some(_) => return Err(syntax(&currency_field, "a string")),
    };
    let value_field = format!("{field}/value");
    let value = match amount.get("value") {
        None | Some(Value::Null) => return Err(missing(&value_field)),
        Some(Value::String(value))
            if value.len() <= MAX_VALUE_CHARS && is_decimal_pattern(value) =>
        {
            value.clone()
        }
        Some(Value::String(_)) => return Err(syntax(&value_field, "a decimal string")),
        Some(_) => return Err(syntax(&value_field, "a string")),
    };
    Ok(RawMoney { value, currency })
}

/// Whether `text` matches `money.value`'s pattern `^((-?[0-9]+)|(-?([0-9]+)?[.][0-9]+))$`.
fn is_decimal_pattern(text: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    match unsigned.split_once('.') {
        None => digits(unsigned),
        Some((whole, fraction)) => {
            (whole.is_empty() || digits(whole)) && digits(fraction) && !fraction.contains('.')
        }
    }
}

/// Judges an amount whose schema is right (422s): a currency the fake takes
/// (INVALID_CURRENCY_CODE), no decimals for a currency without them (DECIMALS_NOT_SUPPORTED),
/// at most two decimals (DECIMAL_PRECISION), more than zero (CANNOT_BE_ZERO_OR_NEGATIVE), at
/// most 15 whole digits (MAX_VALUE_EXCEEDED). Returns it in minor units.
fn money_value(raw: &RawMoney, field: &str) -> Result<Money, Issue> {
    let currency_field = format!("{field}/currency_code");
    let value_field = format!("{field}/value");
    if !CURRENCIES.contains(&raw.currency.as_str()) {
        return Err(Issue::unprocessable(
            "INVALID_CURRENCY_CODE",
            &currency_field,
            "body",
            &format!(
                "Currency code is invalid or is not currently supported (the fake takes {}).",
                CURRENCIES.join(", ")
            ),
        )
        .with_value(&raw.currency));
    }
    let text = raw.value.as_str();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let decimals = exponent(&raw.currency);
    if decimals == 0 && text.contains('.') {
        return Err(Issue::unprocessable(
            "DECIMALS_NOT_SUPPORTED",
            &value_field,
            "body",
            "Currency does not support decimals.",
        )
        .with_value(text));
    }
    if fraction.len() > decimals {
        return Err(Issue::unprocessable(
            "DECIMAL_PRECISION",
            &value_field,
            "body",
            "If the currency supports decimals, only two decimal place precision is supported.",
        )
        .with_value(text));
    }
    let negative = whole.starts_with('-');
    let whole_digits = whole.trim_start_matches('-').trim_start_matches('0');
    if whole_digits.len() > MAX_WHOLE_DIGITS {
        return Err(Issue::unprocessable(
            "MAX_VALUE_EXCEEDED",
            &value_field,
            "body",
            "Should be less than or equal to 999999999999999.99.",
        )
        .with_value(text));
    }
    // At most 15 whole digits and 2 decimals: fits an i64 in minor units.
    let mut minor: i64 = 0;
    let padded = format!("{fraction:0<decimals$}");
    for digit in whole_digits.bytes().chain(padded.bytes()) {
        minor = minor
            .saturating_mul(10)
            .saturating_add(i64::from(digit - b'0'));
    }
    if negative || minor <= 0 {
        return Err(Issue::unprocessable(
            "CANNOT_BE_ZERO_OR_NEGATIVE",
            &value_field,
            "body",
            "Must be greater than zero.",
        )
        .with_value(text));
    }
    Ok(Money {
        minor,
        currency: raw.currency.clone(),
    })
}

/// The number of decimals of an upper-case currency code (0 for HUF, JPY, TWD; else 2).
pub(super) fn exponent(currency: &str) -> usize {
    if NO_DECIMALS.contains(&currency) {
        0
    } else {
        2
    }
}

/// An optional string (absent or `null`: `None`) of 1 to `max_chars` characters; `field` is
/// its JSON pointer.
fn string(body: &Body, name: &str, field: &str, max_chars: usize) -> Result<Option<String>, Issue> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => {
            let chars = value.chars().count();
            if chars == 0 || chars > max_chars {
                return Err(Issue::bad(
                    "INVALID_STRING_LENGTH",
                    field,
                    "body",
                    &format!(
                        "The value of a field is either too short or too long: 1 to {max_chars} \
                         characters."
                    ),
                ));
            }
            Ok(Some(value.clone()))
        }
        Some(_) => Err(syntax(field, "a string")),
    }
}

/// The object's keys in name order.
fn sorted_keys(body: &Body) -> Vec<&String> {
    let mut names: Vec<&String> = body.keys().collect();
    names.sort();
    names
}

/// 400 NOT_SUPPORTED for the first field (in name order) not in `known`: PayPal ignores or
/// refuses fields the fake does not model; refusing them is the fake's choice (UNCONFIRMED).
fn refuse_unknown(body: &Body, known: &[&str], prefix: &str) -> Result<(), Issue> {
    match sorted_keys(body)
        .into_iter()
        .find(|name| !known.contains(&name.as_str()))
    {
        None => Ok(()),
        Some(name) => Err(Issue::bad(
            "NOT_SUPPORTED",
            &format!("/{}{name}", prefix.trim_start_matches('/')),
            "body",
            "This field is not currently supported (the fake PSP refuses what it does not \
             model).",
        )),
    }
}

/// 400 MISSING_REQUIRED_PARAMETER on `field`.
fn missing(field: &str) -> Issue {
    Issue::bad(
        "MISSING_REQUIRED_PARAMETER",
        field,
        "body",
        "A required field / parameter is missing.",
    )
}

/// 400 INVALID_PARAMETER_SYNTAX on `field`, which should be `what`.
fn syntax(field: &str, what: &str) -> Issue {
    Issue::bad(
        "INVALID_PARAMETER_SYNTAX",
        field,
        "body",
        &format!("The value of a field does not conform to the expected format: {what}."),
    )
}

/// 400 INVALID_PARAMETER_VALUE on `field`, which should be one of `allowed`.
fn invalid_value(field: &str, value: &Value, allowed: &str) -> Issue {
    let shown = value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned);
    Issue::bad(
        "INVALID_PARAMETER_VALUE",
        field,
        "body",
        &format!("The value of a field is invalid: one of {allowed}."),
    )
    .with_value(&shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn money(value: &str, currency: &str) -> Result<Money, String> {
        let raw = RawMoney {
            value: value.to_owned(),
            currency: currency.to_owned(),
        };
        money_value(&raw, "/amount").map_err(|issue| issue.issue.to_owned())
    }

    #[test]
    fn amounts_read_in_minor_units_by_the_currencys_exponent() {
        assert_eq!(money("30.00", "USD").map(|m| m.minor), Ok(3000));
        assert_eq!(money("30", "USD").map(|m| m.minor), Ok(3000));
        assert_eq!(money("30.5", "USD").map(|m| m.minor), Ok(3050));
        assert_eq!(money(".5", "EUR").map(|m| m.minor), Ok(50));
        assert_eq!(money("3000", "JPY").map(|m| m.minor), Ok(3000));
        assert_eq!(
            money("999999999999999.99", "USD").map(|m| m.minor),
            Ok(99_999_999_999_999_999)
        );
    }

    #[test]
    fn amounts_are_refused_with_paypals_issues() {
        assert_eq!(money("30.001", "USD"), Err("DECIMAL_PRECISION".into()));
        assert_eq!(money("30.0", "JPY"), Err("DECIMALS_NOT_SUPPORTED".into()));
        assert_eq!(
            money("0.00", "USD"),
            Err("CANNOT_BE_ZERO_OR_NEGATIVE".into())
        );
        assert_eq!(money("-1", "USD"), Err("CANNOT_BE_ZERO_OR_NEGATIVE".into()));
        assert_eq!(
            money("1000000000000000", "USD"),
            Err("MAX_VALUE_EXCEEDED".into())
        );
        assert_eq!(money("30.00", "usd"), Err("INVALID_CURRENCY_CODE".into()));
        assert_eq!(money("30.00", "CHF"), Err("INVALID_CURRENCY_CODE".into()));
    }

    #[test]
    fn the_value_pattern_is_paypals() {
        for good in ["1", "-1", "1.5", ".5", "-.5", "007"] {
            assert!(is_decimal_pattern(good), "{good}");
        }
        for bad in ["", "-", "1.", ".", "1.2.3", "1e3", " 1", "1,00", "+1"] {
            assert!(!is_decimal_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn request_ids_are_1_to_108_characters() {
        assert_eq!(request_id(None).ok(), Some(None));
        assert!(request_id(Some(&"x".repeat(108))).is_ok());
        for bad in [String::new(), "x".repeat(109)] {
            assert_eq!(
                request_id(Some(&bad)).err().map(|issue| issue.issue),
                Some("INVALID_STRING_LENGTH")
            );
        }
    }
}
