//! RFC 9457 problem details with stable `type` URIs.

use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Response};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Every kind of problem payonce answers with; the slug is the stable `type` URI's last part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemType {
    /// 401: no or invalid identity.
    Unauthorized,
    /// 404: no such route.
    RouteNotFound,
    /// 405: the route exists with other methods.
    MethodNotAllowed,
    /// 404: the resource does not exist or is not the caller's.
    NotFound,
    /// 400: the `Idempotency-Key` header is absent.
    IdempotencyKeyMissing,
    /// 400: the `Idempotency-Key` header breaks the key rules.
    IdempotencyKeyInvalid,
    /// 422: the key was used with another request.
    IdempotencyKeyMismatch,
    /// 409: another invocation holds the key.
    IdempotencyKeyInUse,
    /// 429: over the payment attempt limits of the user or the order (card testing).
    TooManyAttempts,
    /// 400: the body is not JSON.
    MalformedJson,
    /// 400: the JSON does not match the schema (unknown field, wrong type, bad value).
    InvalidRequest,
    /// 400: the order total is below the PSP's minimum charge for its currency.
    AmountTooSmall,
    /// 413: the body exceeds the limit.
    BodyTooLarge,
    /// 415: the body is not declared as JSON.
    UnsupportedMediaType,
    /// 400: the webhook signature header is missing or unparseable.
    WebhookSignatureMissing,
    /// 401: the webhook signature does not verify (or is stale).
    WebhookSignatureInvalid,
    /// 409: the order moved to another version.
    OrderVersionMismatch,
    /// 409: the order is paid.
    OrderAlreadyPaid,
    /// 409: another attempt is processing the order.
    PaymentInProgress,
    /// 402: the issuer declined.
    CardDeclined,
    /// 402: the PSP refused the payment method.
    PaymentMethodRejected,
    /// 402: the attempt failed without a decline.
    PaymentFailed,
    /// 503: the PSP could not be reached.
    PspUnavailable,
    /// 403: the token lacks the scope the route needs (`payments:refund`).
    InsufficientScope,
    /// 409: the payment is not succeeded (processing or failed), so nothing can be refunded.
    PaymentNotRefundable,
    /// 409: the refund is larger than what is neither refunded nor pending.
    RefundExceedsRemaining,
    /// 402: the PSP refused or failed the refund.
    RefundFailed,
    /// 409: the deployment's PSP cannot refund from a server (2C2P without its key exchange).
    RefundNotSupported,
    /// 503: a dependency (DynamoDB, SQS) is unavailable; retry.
    ServiceUnavailable,
    /// 500: a bug or an unexpected failure; never carries detail.
    Internal,
}

impl ProblemType {
    /// Status, slug and title.
    pub fn describe(self) -> (StatusCode, &'static str, &'static str) {
        use ProblemType::*;
        match self {
            Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Authentication required",
            ),
            RouteNotFound => (StatusCode::NOT_FOUND, "route-not-found", "No such route"),
            MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
            ),
            NotFound => (StatusCode::NOT_FOUND, "not-found", "Not found"),
            IdempotencyKeyMissing => (
                StatusCode::BAD_REQUEST,
                "idempotency-key-missing",
                "Idempotency-Key header required",
            ),
            IdempotencyKeyInvalid => (
                StatusCode::BAD_REQUEST,
                "idempotency-key-invalid",
                "Invalid Idempotency-Key",
            ),
            IdempotencyKeyMismatch => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-mismatch",
                "Idempotency-Key reused with a different request",
            ),
            IdempotencyKeyInUse => (
                StatusCode::CONFLICT,
                "idempotency-key-in-use",
                "A request with this Idempotency-Key is in progress",
            ),
            TooManyAttempts => (
                StatusCode::TOO_MANY_REQUESTS,
                "too-many-attempts",
                "Too many payment attempts",
            ),
            MalformedJson => (
                StatusCode::BAD_REQUEST,
                "malformed-json",
                "The body is not valid JSON",
            ),
            InvalidRequest => (
                StatusCode::BAD_REQUEST,
                "invalid-request",
                "The request is invalid",
            ),
            AmountTooSmall => (
                StatusCode::BAD_REQUEST,
                "amount-too-small",
                "The order total is below the minimum charge",
            ),
            BodyTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "The body is too large",
            ),
            UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "The body must be application/json",
            ),
            WebhookSignatureMissing => (
                StatusCode::BAD_REQUEST,
                "webhook-signature-missing",
                "Webhook signature missing or malformed",
            ),
            WebhookSignatureInvalid => (
                StatusCode::UNAUTHORIZED,
                "webhook-signature-invalid",
                "Webhook signature invalid",
            ),
            OrderVersionMismatch => (
                StatusCode::CONFLICT,
                "order-version-mismatch",
                "The order has changed",
            ),
            OrderAlreadyPaid => (
                StatusCode::CONFLICT,
                "order-already-paid",
                "The order is already paid",
            ),
            PaymentInProgress => (
                StatusCode::CONFLICT,
                "payment-in-progress",
                "Another payment for this order is in progress",
            ),
            CardDeclined => (
                StatusCode::PAYMENT_REQUIRED,
                "card-declined",
                "The card was declined",
            ),
            PaymentMethodRejected => (
                StatusCode::PAYMENT_REQUIRED,
                "payment-method-rejected",
                "The payment method was rejected",
            ),
            PaymentFailed => (
                StatusCode::PAYMENT_REQUIRED,
                "payment-failed",
                "The payment failed",
            ),
            PspUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "psp-unavailable",
                "The payment provider is unavailable",
            ),
            InsufficientScope => (
                StatusCode::FORBIDDEN,
                "insufficient-scope",
                "The token lacks the required scope",
            ),
            PaymentNotRefundable => (
                StatusCode::CONFLICT,
                "payment-not-refundable",
                "The payment cannot be refunded",
            ),
            RefundExceedsRemaining => (
                StatusCode::CONFLICT,
                "refund-exceeds-remaining",
                "The refund exceeds what remains refundable",
            ),
            RefundFailed => (
                StatusCode::PAYMENT_REQUIRED,
                "refund-failed",
                "The refund failed",
            ),
            RefundNotSupported => (
                StatusCode::CONFLICT,
                "refund-not-supported",
                "The payment provider cannot refund from payonce",
            ),
            ServiceUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "service-unavailable",
                "Temporarily unavailable",
            ),
            Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
            ),
        }
    }

    /// The stable `type` URI, e.g. `/problems/idempotency-key-mismatch`.
    pub fn uri(self) -> String {
        format!("/problems/{}", self.describe().1)
    }
}

/// A problem about to be answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// Its type.
    pub kind: ProblemType,
    /// Human-readable detail for this occurrence (never internal detail for 500s).
    pub detail: String,
    /// Extension members (`decline_code`, `payment_id`, ...).
    pub extra: Map<String, Value>,
    /// `Retry-After`, when the client should come back.
    pub retry_after: Option<Duration>,
}

impl Problem {
    /// A problem of `kind` with `detail`.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            extra: Map::new(),
            retry_after: None,
        }
    }

    /// The 500 answer: logs `error` with its sources, tells the client nothing of it.
    pub fn internal(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut chain = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            chain.push_str(": ");
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        tracing::error!(error = %chain, "internal error");
        Self::new(
            ProblemType::Internal,
            "An unexpected error occurred; it has been logged.",
        )
    }

    /// Adds an extension member.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(name.to_owned(), value.into());
        self
    }

    /// Adds `Retry-After`.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The `application/problem+json` response.
    pub fn into_response(self) -> Response<Body> {
        let (status, _, title) = self.kind.describe();
        let mut body = json!({
            "type": self.kind.uri(),
            "title": title,
            "status": status.as_u16(),
            "detail": self.detail,
        });
        if let Value::Object(map) = &mut body {
            map.extend(self.extra);
        }
        let mut response = Response::new(Body::from(body.to_string()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(after) = self.retry_after {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(after.as_secs().max(1)),
            );
        }
        response
    }
}
