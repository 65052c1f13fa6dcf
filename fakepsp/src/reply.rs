//! Responses as the fake PSP stores and sends them, and Stripe's error shapes.
//!
//! A [`Reply`] is kept as a status plus the exact body bytes, so that an idempotent replay is
//! byte-for-byte the response the first request got (or would have got).

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};

/// The header Stripe sets on a response that was replayed from the idempotency cache.
pub(crate) const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// A JSON response: status and exact body bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The serialised JSON body.
    pub(crate) body: Bytes,
}

impl Reply {
    /// A response with `value` as its JSON body.
    pub(crate) fn json(status: StatusCode, value: &Value) -> Self {
        Self {
            status,
            body: Bytes::from(value.to_string()),
        }
    }

    /// Whether Stripe would remember this response under an idempotency key: everything except
    /// server errors, which a retry must be allowed to run again.
    pub(crate) fn is_storable(&self) -> bool {
        !self.status.is_server_error()
    }

    /// The HTTP response; `replayed` adds `Idempotent-Replayed: true`.
    pub(crate) fn into_response(self, replayed: bool) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if replayed {
            headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        response
    }
}

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
fn wrap(status: StatusCode, fields: Map<String, Value>) -> Reply {
    Reply::json(status, &json!({ "error": Value::Object(fields) }))
}

/// 400 `invalid_request_error` with an optional `code` and `param`.
pub(crate) fn invalid_request(code: Option<&str>, param: Option<&str>, message: &str) -> Reply {
    let status = StatusCode::BAD_REQUEST;
    wrap(status, error("invalid_request_error", code, param, message))
}

/// 400 `parameter_missing` for a required parameter.
pub(crate) fn parameter_missing(param: &str) -> Reply {
    invalid_request(
        Some("parameter_missing"),
        Some(param),
        &format!("Missing required param: {param}."),
    )
}

/// 404 `resource_missing`, e.g. for an unknown PaymentIntent id.
pub(crate) fn resource_missing(param: &str, message: &str) -> Reply {
    let status = StatusCode::NOT_FOUND;
    wrap(
        status,
        error(
            "invalid_request_error",
            Some("resource_missing"),
            Some(param),
            message,
        ),
    )
}

/// 401 for a missing or wrong API key, exactly as Stripe shapes it (no `code`).
pub(crate) fn unauthorized() -> Reply {
    let status = StatusCode::UNAUTHORIZED;
    wrap(
        status,
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
    let status = StatusCode::INTERNAL_SERVER_ERROR;
    wrap(status, error("api_error", None, None, message))
}

/// 400 `idempotency_error`: the key was first used with other parameters.
pub(crate) fn idempotency_mismatch(key: &str) -> Reply {
    let status = StatusCode::BAD_REQUEST;
    let message = format!(
        "Keys for idempotent requests can only be used with the same parameters they were first \
         used with. Try using a key other than '{key}' if you meant to execute a different request."
    );
    wrap(status, error("idempotency_error", None, None, &message))
}

/// 409 `idempotency_key_in_use`: another request with this key is still running.
pub(crate) fn idempotency_in_use(key: &str) -> Reply {
    let status = StatusCode::CONFLICT;
    let message = format!(
        "There is currently another in-progress request using this Idempotent Key (that probably \
         means you submitted twice, and the other request is still going through): {key}. \
         Please try again later."
    );
    wrap(
        status,
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
    let status = StatusCode::PAYMENT_REQUIRED;
    let mut fields = error("card_error", Some("card_declined"), None, message);
    fields.insert("decline_code".into(), decline_code.into());
    if let Some(charge) = charge {
        fields.insert("charge".into(), charge.into());
    }
    fields.insert("payment_intent".into(), payment_intent);
    wrap(status, fields)
}

/// 400 `payment_intent_unexpected_state` carrying the PaymentIntent, e.g. cancelling a
/// succeeded one.
pub(crate) fn unexpected_state(message: &str, payment_intent: Value) -> Reply {
    let status = StatusCode::BAD_REQUEST;
    let mut fields = error(
        "invalid_request_error",
        Some("payment_intent_unexpected_state"),
        None,
        message,
    );
    fields.insert("payment_intent".into(), payment_intent);
    wrap(status, fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(reply: &Reply) -> Value {
        serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
    }

    #[test]
    fn unauthorized_has_exactly_stripes_shape() {
        let reply = unauthorized();
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
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
    fn replayed_responses_carry_the_header() {
        let response = parameter_missing("amount").into_response(true);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers().get(IDEMPOTENT_REPLAYED),
            Some(&HeaderValue::from_static("true"))
        );
        let fresh = parameter_missing("amount").into_response(false);
        assert!(fresh.headers().get(IDEMPOTENT_REPLAYED).is_none());
    }
}
