//! Validating the Stripe face's form parameters (parsed by `faces::form`): the ones
//! `POST /v1/payment_intents`, `POST /v1/payment_intents/{id}/capture` and `POST /v1/refunds`
//! need, and `expand[]`, refused in Stripe's words.

use std::collections::BTreeMap;

use super::errors;
use crate::faces::form::{collect_metadata, Params};
use crate::ledger::{CaptureMethod, Reply};

/// A validated `POST /v1/payment_intents` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CreateParams {
    /// Amount in the currency's minor unit, within the currency's charge limits.
    pub(crate) amount: i64,
    /// Three-letter ISO currency code, lowercase, one the fake charges in.
    pub(crate) currency: String,
    /// The `payment_method` token, which picks the behaviour.
    pub(crate) payment_method: String,
    /// Whether to attempt the charge now (`confirm=true`) or only create the PaymentIntent.
    pub(crate) confirm: bool,
    /// `metadata[<k>]=<v>` pairs.
    pub(crate) metadata: BTreeMap<String, String>,
    /// `capture_method`: `automatic` (the default) or `manual` (authorize only).
    pub(crate) capture_method: CaptureMethod,
    /// `error_on_requires_action=true`: fail the attempt rather than ask for an action.
    pub(crate) error_on_requires_action: bool,
    /// `off_session` other than `false`: the customer is not there to act.
    pub(crate) off_session: bool,
    /// Where the customer comes back to after an action (a valid URL).
    pub(crate) return_url: Option<String>,
    /// `expand[]=latest_charge`: inline the Charge in the answer.
    pub(crate) expand_latest_charge: bool,
}

/// The top-level create parameters the fake understands. Anything else is refused with
/// `parameter_unknown`, as Stripe refuses a parameter it does not know ("Error codes":
/// `parameter_unknown`) — better a loud 400 than a real parameter silently ignored.
const CREATE_PARAMETERS: &[&str] = &[
    "amount",
    "automatic_payment_methods[allow_redirects]",
    "automatic_payment_methods[enabled]",
    "capture_method",
    "confirm",
    "currency",
    "description",
    "error_on_requires_action",
    "mandate",
    "off_session",
    "payment_method",
    "return_url",
];

/// Parameters Stripe accepts on create only together with `confirm=true`: each carries "This
/// parameter can only be used with confirm=true" in Stripe's API reference ("Create a
/// PaymentIntent"). `mandate_data` stands for the whole `mandate_data[...]` hash.
pub(crate) const CONFIRM_ONLY_PARAMETERS: &[&str] = &[
    "error_on_requires_action",
    "mandate",
    "mandate_data",
    "off_session",
    "return_url",
];

impl CreateParams {
    /// Validates the parameters of a create request, answering like Stripe on the first problem.
    /// Every refusal here is a validation error: the model answers it before the idempotency
    /// key is looked at and stores nothing under the key.
    pub(crate) fn from_params(params: &Params) -> Result<Self, Reply> {
        if let Some(unknown) = params.keys().find(|name| !is_create_parameter(name)) {
            return Err(errors::parameter_unknown(unknown));
        }

        let amount = required(params, "amount")?;
        let amount: i64 = amount.parse().map_err(|_| {
            errors::invalid_request(
                Some("parameter_invalid_integer"),
                Some("amount"),
                &format!("Invalid integer: {amount}"),
            )
        })?;
        if amount < 1 {
            return Err(errors::invalid_request(
                Some("parameter_invalid_integer"),
                Some("amount"),
                "This value must be greater than or equal to 1.",
            ));
        }

        let currency = required(params, "currency")?;
        // Stripe accepts any case and always answers in lowercase.
        let currency = currency.to_ascii_lowercase();
        let Some(minimum) = crate::currency::minimum_charge_minor(&currency) else {
            return Err(errors::invalid_request(
                Some("parameter_invalid"),
                Some("currency"),
                &format!(
                    "Invalid currency: {currency}. The fake PSP charges only in the currencies \
                     of Stripe's minimum charge amounts table."
                ),
            ));
        };

        let payment_method = required(params, "payment_method")?.to_owned();
        let confirm = optional_bool(params, "confirm")?.unwrap_or(false);
        let error_on_requires_action =
            optional_bool(params, "error_on_requires_action")?.unwrap_or(false);
        // "Create a PaymentIntent": `automatic` (default), `automatic_async`, `manual`; the fake
        // models the first and the last, and refuses what it does not model.
        let capture_method =
            match optional_enum(params, "capture_method", &["automatic", "manual"])? {
                Some("manual") => CaptureMethod::Manual,
                _ => CaptureMethod::Automatic,
            };
        let return_url = match params.get("return_url") {
            None => None,
            Some(url) if url::Url::parse(url).is_ok() => Some(url.clone()),
            Some(_) => {
                return Err(errors::invalid_request(
                    Some("url_invalid"),
                    Some("return_url"),
                    "Not a valid URL",
                ))
            }
        };
        let expand_latest_charge = expand_latest_charge(params)?;
        let off_session = optional_enum(
            params,
            "off_session",
            &["true", "false", "one_off", "recurring"],
        )?
        .is_some_and(|value| value != "false");
        let redirects = optional_enum(
            params,
            "automatic_payment_methods[allow_redirects]",
            &["always", "never"],
        )?;
        let automatic = optional_bool(params, "automatic_payment_methods[enabled]")?;
        if redirects.is_some() && automatic.is_none() {
            // `enabled` is the hash's one required field.
            return Err(errors::parameter_missing(
                "automatic_payment_methods[enabled]",
            ));
        }
        let metadata = metadata(params)?;

        // Stripe, "Create a PaymentIntent": "This parameter can only be used with confirm=true."
        if !confirm {
            if let Some(name) = CONFIRM_ONLY_PARAMETERS
                .iter()
                .find(|name| params.keys().any(|given| belongs_to(given, name)))
            {
                return Err(errors::confirm_only(name));
            }
        }

        // Stripe, "Supported currencies" → "Minimum and maximum charge amounts".
        if amount < minimum {
            return Err(errors::amount_too_small(minimum, &currency));
        }
        if amount > crate::currency::MAXIMUM_CHARGE_MINOR {
            return Err(errors::amount_too_large(
                crate::currency::MAXIMUM_CHARGE_MINOR,
                &currency,
            ));
        }

        Ok(Self {
            amount,
            currency,
            payment_method,
            confirm,
            metadata,
            capture_method,
            error_on_requires_action,
            off_session,
            return_url,
            expand_latest_charge,
        })
    }
}

/// A validated `POST /v1/payment_intents/{id}/capture` request ("Capture a PaymentIntent").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CaptureParams {
    /// At least 1; `None` captures all that is capturable.
    pub(crate) amount_to_capture: Option<i64>,
    /// `expand[]=latest_charge`.
    pub(crate) expand_latest_charge: bool,
}

impl CaptureParams {
    /// Validates a capture request's parameters; the PaymentIntent's state and what it has
    /// capturable are checked afterwards, under the key.
    pub(crate) fn from_params(params: &Params) -> Result<Self, Reply> {
        if let Some(unknown) = params
            .keys()
            .find(|name| name.as_str() != "amount_to_capture" && !belongs_to(name, "expand"))
        {
            return Err(errors::parameter_unknown(unknown));
        }
        let amount_to_capture = optional_positive_integer(params, "amount_to_capture")?;
        Ok(Self {
            amount_to_capture,
            expand_latest_charge: expand_latest_charge(params)?,
        })
    }
}

/// Whether `expand[]` (or `expand[<n>]`) asks for `latest_charge`, the one expansion the fake
/// serves; any other expansion, or `expand` without brackets, is refused.
pub(crate) fn expand_latest_charge(params: &Params) -> Result<bool, Reply> {
    let mut expand = false;
    for (name, value) in params.iter().filter(|(name, _)| belongs_to(name, "expand")) {
        let index = name
            .strip_prefix("expand[")
            .and_then(|rest| rest.strip_suffix(']'));
        if !index.is_some_and(|index| index.bytes().all(|b| b.is_ascii_digit())) {
            return Err(errors::invalid_request(
                Some("parameter_invalid"),
                Some(name),
                &format!("Invalid array: {name} must be given as expand[]=<field>."),
            ));
        }
        if value != "latest_charge" {
            return Err(errors::invalid_request(
                None,
                Some(name),
                &format!(
                    "This property cannot be expanded ({value}). The fake PSP expands only \
                     latest_charge."
                ),
            ));
        }
        expand = true;
    }
    Ok(expand)
}

/// An optional integer parameter of at least 1.
fn optional_positive_integer(params: &Params, name: &str) -> Result<Option<i64>, Reply> {
    let Some(value) = params.get(name) else {
        return Ok(None);
    };
    let parsed: i64 = value.parse().map_err(|_| {
        errors::invalid_request(
            Some("parameter_invalid_integer"),
            Some(name),
            &format!("Invalid integer: {value}"),
        )
    })?;
    if parsed < 1 {
        return Err(errors::invalid_request(
            Some("parameter_invalid_integer"),
            Some(name),
            "This value must be greater than or equal to 1.",
        ));
    }
    Ok(Some(parsed))
}

/// A validated `POST /v1/refunds` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RefundParams {
    /// The PaymentIntent to refund (required here; Stripe also takes `charge`, the fake does not).
    pub(crate) payment_intent: String,
    /// Minor units, at least 1; `None` refunds what is left unrefunded.
    pub(crate) amount: Option<i64>,
    /// `duplicate`, `fraudulent` or `requested_by_customer`.
    pub(crate) reason: Option<String>,
    /// `metadata[<k>]=<v>` pairs.
    pub(crate) metadata: BTreeMap<String, String>,
}

/// The refund parameters the fake understands; anything else is `parameter_unknown`, including
/// Stripe's own `charge`, `refund_application_fee`, ... which payonce never sends.
const REFUND_PARAMETERS: &[&str] = &["amount", "payment_intent", "reason"];

/// Stripe, "Create a refund": the values `reason` may take.
const REFUND_REASONS: &[&str] = &["duplicate", "fraudulent", "requested_by_customer"];

impl RefundParams {
    /// Validates the parameters of a refund request, answering like Stripe on the first problem.
    /// Every refusal here is a validation error, answered before the idempotency key is looked
    /// at; whether the PaymentIntent exists and what is left to refund are checked afterwards.
    pub(crate) fn from_params(params: &Params) -> Result<Self, Reply> {
        if let Some(unknown) = params.keys().find(|name| {
            !REFUND_PARAMETERS.contains(&name.as_str()) && !name.starts_with("metadata")
        }) {
            return Err(errors::parameter_unknown(unknown));
        }
        let payment_intent = required(params, "payment_intent")?.to_owned();
        let amount = match params.get("amount") {
            None => None,
            Some(amount) => {
                let parsed: i64 = amount.parse().map_err(|_| {
                    errors::invalid_request(
                        Some("parameter_invalid_integer"),
                        Some("amount"),
                        &format!("Invalid integer: {amount}"),
                    )
                })?;
                if parsed < 1 {
                    return Err(errors::invalid_request(
                        Some("parameter_invalid_integer"),
                        Some("amount"),
                        "This value must be greater than or equal to 1.",
                    ));
                }
                Some(parsed)
            }
        };
        let reason = optional_enum(params, "reason", REFUND_REASONS)?.map(str::to_owned);
        let metadata = metadata(params)?;
        Ok(Self {
            payment_intent,
            amount,
            reason,
            metadata,
        })
    }
}

/// Whether `given` is the parameter `name` or part of its hash (`name[...]`).
fn belongs_to(given: &str, name: &str) -> bool {
    given
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('['))
}

/// Whether a create request may carry this (flattened) parameter name. `metadata...` names are
/// checked in detail by [`metadata`].
fn is_create_parameter(name: &str) -> bool {
    CREATE_PARAMETERS.contains(&name)
        || name.starts_with("metadata")
        || belongs_to(name, "expand")
        || belongs_to(name, "mandate_data")
}

/// A required, non-empty parameter.
fn required<'p>(params: &'p Params, name: &str) -> Result<&'p str, Reply> {
    match params.get(name).map(String::as_str) {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(errors::parameter_missing(name)),
    }
}

/// An optional `true`/`false` parameter.
pub(crate) fn optional_bool(params: &Params, name: &str) -> Result<Option<bool>, Reply> {
    match params.get(name).map(String::as_str) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(errors::invalid_request(
            Some("parameter_invalid"),
            Some(name),
            &format!("Invalid boolean: {other}"),
        )),
    }
}

/// An optional parameter restricted to a few values.
pub(crate) fn optional_enum<'p>(
    params: &'p Params,
    name: &str,
    allowed: &[&str],
) -> Result<Option<&'p str>, Reply> {
    match params.get(name).map(String::as_str) {
        None => Ok(None),
        Some(value) if allowed.contains(&value) => Ok(Some(value)),
        Some(other) => Err(errors::invalid_request(
            Some("parameter_invalid"),
            Some(name),
            &format!(
                "Invalid {name}: must be one of {}; got '{other}'.",
                allowed.join(", ")
            ),
        )),
    }
}

/// Collects `metadata[<k>]=<v>` into a map, answering like Stripe on a malformed name.
fn metadata(params: &Params) -> Result<BTreeMap<String, String>, Reply> {
    collect_metadata(params).map_err(|name| {
        errors::invalid_request(
            Some("parameter_invalid"),
            Some(name),
            &format!("Invalid metadata parameter: {name}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faces::form::parse_form;

    fn params(body: &str) -> Params {
        parse_form(body.as_bytes())
    }

    fn error_code(reply: &Reply) -> Option<String> {
        let body: serde_json::Value = serde_json::from_str(&reply.body).ok()?;
        body["error"]["code"].as_str().map(str::to_owned)
    }

    #[test]
    fn parses_bracket_syntax_and_percent_encoding() {
        let p = params(
            "amount=3000&currency=JPY&payment_method=pm_card_visa&confirm=true\
             &metadata%5Bpayment_id%5D=pay_1&metadata[order]=a%20b\
             &automatic_payment_methods[enabled]=true\
             &automatic_payment_methods[allow_redirects]=never",
        );
        assert_eq!(
            CreateParams::from_params(&p),
            Ok(CreateParams {
                amount: 3000,
                currency: "jpy".into(),
                payment_method: "pm_card_visa".into(),
                confirm: true,
                metadata: [("order", "a b"), ("payment_id", "pay_1")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                capture_method: CaptureMethod::Automatic,
                error_on_requires_action: false,
                off_session: false,
                return_url: None,
                expand_latest_charge: false,
            })
        );
    }

    #[test]
    fn same_parameter_set_in_another_order_is_equal() {
        assert_eq!(
            params("a=1&metadata[x]=2&b=%33"),
            params("b=3&a=1&metadata%5Bx%5D=2")
        );
    }

    #[test]
    fn confirm_defaults_to_false() {
        let p = params("amount=50&currency=usd&payment_method=pm_anything");
        assert_eq!(CreateParams::from_params(&p).map(|c| c.confirm), Ok(false));
    }

    #[test]
    fn missing_and_invalid_amounts_are_rejected() {
        let missing = CreateParams::from_params(&params("currency=usd&payment_method=pm_x"));
        assert_eq!(
            missing.err().as_ref().and_then(error_code).as_deref(),
            Some("parameter_missing")
        );
        for bad in ["12.5", "abc", "0", "-3"] {
            let p = params(&format!("amount={bad}&currency=usd&payment_method=pm_x"));
            let err = CreateParams::from_params(&p).err();
            assert_eq!(
                err.as_ref().and_then(error_code).as_deref(),
                Some("parameter_invalid_integer"),
                "{bad}"
            );
        }
    }

    #[test]
    fn missing_currency_or_payment_method_is_rejected() {
        for body in [
            "amount=1&payment_method=pm_x",
            "amount=1&currency=&payment_method=pm_x",
            "amount=1&currency=usd",
        ] {
            let err = CreateParams::from_params(&params(body)).err();
            assert_eq!(
                err.as_ref().and_then(error_code).as_deref(),
                Some("parameter_missing"),
                "{body}"
            );
        }
    }

    #[test]
    fn refund_parameters_are_validated() {
        let ok = RefundParams::from_params(&params(
            "payment_intent=pi_1&amount=500&reason=duplicate&metadata[refund_id]=r1",
        ));
        assert_eq!(
            ok,
            Ok(RefundParams {
                payment_intent: "pi_1".into(),
                amount: Some(500),
                reason: Some("duplicate".into()),
                metadata: [("refund_id".to_owned(), "r1".to_owned())].into(),
            })
        );
        for (body, code) in [
            ("amount=5", "parameter_missing"),
            ("payment_intent=", "parameter_missing"),
            ("payment_intent=pi_1&amount=0", "parameter_invalid_integer"),
            ("payment_intent=pi_1&amount=-1", "parameter_invalid_integer"),
            (
                "payment_intent=pi_1&amount=1.5",
                "parameter_invalid_integer",
            ),
            ("payment_intent=pi_1&reason=other", "parameter_invalid"),
            ("payment_intent=pi_1&metadata[]=x", "parameter_invalid"),
            ("payment_intent=pi_1&charge=ch_1", "parameter_unknown"),
        ] {
            let err = RefundParams::from_params(&params(body)).err();
            assert_eq!(
                err.as_ref().and_then(error_code).as_deref(),
                Some(code),
                "{body}"
            );
        }
    }

    #[test]
    fn bad_booleans_and_metadata_names_are_rejected() {
        let base = "amount=50&currency=usd&payment_method=pm_x";
        for extra in [
            "confirm=yes",
            "metadata[]=v",
            "metadata[a][b]=v",
            "metadatax=1",
        ] {
            let p = params(&format!("{base}&{extra}"));
            assert!(CreateParams::from_params(&p).is_err(), "{extra}");
        }
    }
}
