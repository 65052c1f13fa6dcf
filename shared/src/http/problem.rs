//! RFC 9457 problem details with stable `type` URIs.

use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Response};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Declares [`ProblemType`] and its one table: each row gives a variant its status, slug
/// (the stable `type` URI's last part), title, what it means and what the client should do.
/// [`ProblemType::describe`], the `/problems/{slug}` pages ([`ProblemType::page`]) and the
/// list `docs/openapi.json` is checked against ([`ProblemType::ALL`]) all read this table.
macro_rules! problem_types {
    ($(
        $(#[$doc:meta])*
        $variant:ident => ($status:ident, $slug:literal, $title:literal,
            meaning: $meaning:literal,
            advice: $advice:literal $(,)?)
    ),+ $(,)?) => {
        /// Every kind of problem payonce answers with; the slug is the stable `type` URI's last part.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProblemType {
            $($(#[$doc])* $variant,)+
        }

        impl ProblemType {
            /// Every problem type, in the table's order.
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$variant,)+];

            /// Status, slug and title.
            pub fn describe(self) -> (StatusCode, &'static str, &'static str) {
                match self {
                    $(ProblemType::$variant => (StatusCode::$status, $slug, $title),)+
                }
            }

            /// What the problem means, for the documentation page.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $meaning,)+
                }
            }

            /// What a client should do about it, for the documentation page.
            pub fn advice(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $advice,)+
                }
            }
        }
    };
}

problem_types! {
    /// 401: no or invalid identity.
    Unauthorized => (UNAUTHORIZED, "unauthorized", "Authentication required",
        meaning: "The request carries no verified identity: the token's subject is missing, empty, too long or holds a character payonce does not accept. (A missing or invalid token is refused by API Gateway's JWT authorizer before payonce runs, with its own `{\"message\":\"Unauthorized\"}`.)",
        advice: "Send `Authorization: Bearer <token>` with a valid, unexpired JWT from your identity provider whose `sub` is 1 to 255 characters without `#`."),
    /// 404: no such route.
    RouteNotFound => (NOT_FOUND, "route-not-found", "No such route",
        meaning: "No route matches the path: a path parameter that cannot be an id payonce issues (1 to 64 characters of A-Z a-z 0-9 _ -) names nothing.",
        advice: "Check the path against the API document (`/openapi.json`); ids are used exactly as payonce returned them."),
    /// 405: the route exists with other methods.
    MethodNotAllowed => (METHOD_NOT_ALLOWED, "method-not-allowed", "Method not allowed",
        meaning: "The path exists, but not with this method. Behind API Gateway (or the sandbox) such a request matches no route and is answered 404 before payonce runs; a function invoked directly answers this.",
        advice: "Use a method the API document lists for the path."),
    /// 404: the resource does not exist or is not the caller's.
    NotFound => (NOT_FOUND, "not-found", "Not found",
        meaning: "The order, payment or webhook provider does not exist, or belongs to another user: payonce does not tell the two apart.",
        advice: "Check the id, and that the token is the owner's. Do not retry unchanged."),
    /// 400: the `Idempotency-Key` header is absent.
    IdempotencyKeyMissing => (BAD_REQUEST, "idempotency-key-missing", "Idempotency-Key header required",
        meaning: "The operation needs an `Idempotency-Key` header and the request has none. Nothing was done.",
        advice: "Create one key per logical operation (a UUID), keep it before sending, and send it with the first request and every retry of that operation."),
    /// 400: the `Idempotency-Key` header breaks the key rules.
    IdempotencyKeyInvalid => (BAD_REQUEST, "idempotency-key-invalid", "Invalid Idempotency-Key",
        meaning: "The `Idempotency-Key` header is empty, longer than 255 characters, or holds a character outside printable ASCII (0x21 to 0x7E). Nothing was done.",
        advice: "Send a key of 1 to 255 printable ASCII characters without spaces, such as a UUID."),
    /// 422: the key was used with another request.
    IdempotencyKeyMismatch => (UNPROCESSABLE_ENTITY, "idempotency-key-mismatch", "Idempotency-Key reused with a different request",
        meaning: "This user already used the key for a request with another body (another order, version, payment method, amount or reason). Nothing was written.",
        advice: "A key names one operation: to do something else, use a new key. To learn the first request's outcome, repeat it exactly."),
    /// 409: another invocation holds the key.
    IdempotencyKeyInUse => (CONFLICT, "idempotency-key-in-use", "A request with this Idempotency-Key is in progress",
        meaning: "A request with the same key is still being processed (or the store was briefly contended). This request changed nothing.",
        advice: "Wait for the `Retry-After` seconds, then send the same request with the same key: it answers the first request's outcome."),
    /// 409: the key's request completed, but its response was too large to store.
    IdempotencyResultTooLarge => (CONFLICT, "idempotency-result-too-large", "The first response with this Idempotency-Key was too large to keep",
        meaning: "A request with this key completed, but its response was over the idempotency table's item limit, so only the fact that it completed was stored. The work was not run again, and there is no response to replay.",
        advice: "Do not retry: the operation happened. Read the resource it created or changed to learn its state."),
    /// 429: over the payment attempt limits of the user or the order (card testing).
    TooManyAttempts => (TOO_MANY_REQUESTS, "too-many-attempts", "Too many payment attempts",
        meaning: "The user or the order made too many payment attempts (or had too many declines) within the limit's window, as card testing does. Nothing was claimed or sent to the payment provider.",
        advice: "Wait for the `Retry-After` seconds before a new attempt; a replay of an earlier key is never limited."),
    /// 400: the body is not JSON.
    MalformedJson => (BAD_REQUEST, "malformed-json", "The body is not valid JSON",
        meaning: "The body is not well-formed JSON (the detail gives the position, never the text). Nothing was done.",
        advice: "Send a JSON object encoded as UTF-8."),
    /// 400: the JSON does not match the schema (unknown field, wrong type, bad value).
    InvalidRequest => (BAD_REQUEST, "invalid-request", "The request is invalid",
        meaning: "The JSON does not match the operation's schema: an unknown field, a missing one, a wrong type or a value out of range (the detail names the field and the rule, never the value). Nothing was done.",
        advice: "Fix the body as the detail says; the API document gives every field and its rules."),
    /// 400: the order total is below the PSP's minimum charge for its currency.
    AmountTooSmall => (BAD_REQUEST, "amount-too-small", "The order total is below the minimum charge",
        meaning: "The order's total is below the smallest amount the payment provider charges in its currency (`minimum_amount`, in minor units). Nothing was written.",
        advice: "Raise the total to at least `minimum_amount`."),
    /// 413: the body exceeds the limit.
    BodyTooLarge => (PAYLOAD_TOO_LARGE, "body-too-large", "The body is too large",
        meaning: "The body exceeds the limit: 64 KiB for API requests, 1 MiB for webhooks. Nothing was done.",
        advice: "Send a smaller body; no valid request comes near the limit."),
    /// 415: the body is not declared as JSON.
    UnsupportedMediaType => (UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type", "The body must be application/json",
        meaning: "The request declares a `Content-Type` other than `application/json`. Nothing was done.",
        advice: "Send `Content-Type: application/json` (or no `Content-Type`)."),
    /// 400: the webhook signature header is missing or unparseable.
    WebhookSignatureMissing => (BAD_REQUEST, "webhook-signature-missing", "Webhook signature missing or malformed",
        meaning: "The provider's signature header (or 2C2P's signed payload) is missing or cannot be parsed. Nothing was enqueued.",
        advice: "Only the payment provider sends webhooks; check that the endpoint URL is configured for the right provider."),
    /// 401: the webhook signature does not verify (or is stale).
    WebhookSignatureInvalid => (UNAUTHORIZED, "webhook-signature-invalid", "Webhook signature invalid",
        meaning: "No signature on the webhook verifies with the configured secret, or its timestamp is outside the tolerance. Nothing was enqueued.",
        advice: "Check that the webhook signing secret payonce holds is the provider's current one."),
    /// 409: the order moved to another version.
    OrderVersionMismatch => (CONFLICT, "order-version-mismatch", "The order has changed",
        meaning: "The request names an order version that is no longer current (`current_version` gives the current one). Nothing was charged or changed.",
        advice: "Show the shopper the current order, then pay or edit `current_version` with a new key."),
    /// 409: the order is paid.
    OrderAlreadyPaid => (CONFLICT, "order-already-paid", "The order is already paid",
        meaning: "Another payment already paid this order, so it can be neither paid again nor edited. Nothing was charged.",
        advice: "Treat the order as paid; read it (`GET /orders/{order_id}`) to show its state."),
    /// 409: another attempt is processing the order.
    PaymentInProgress => (CONFLICT, "payment-in-progress", "Another payment for this order is in progress",
        meaning: "Another payment attempt (with another key) is processing this order; until it ends, no other may start and the order cannot change. Nothing was charged.",
        advice: "Wait for the other attempt: retry it with its own key, or read the order until it is `paid` or `unpaid` again."),
    /// 409: an authorized payment holds the order.
    OrderAlreadyAuthorized => (CONFLICT, "order-already-authorized", "An authorized payment holds this order",
        meaning: "A payment for this order was authorized to be captured later: until staff capture it (the order is then paid) or cancel it (the order is free again), no other attempt may start and the order cannot change. Nothing was charged.",
        advice: "Do not pay again: read the order (`GET /orders/{order_id}`) until it is `paid` or `unpaid`."),
    /// 409: `capture: "manual"` on a PSP that cannot capture later.
    CaptureNotSupported => (CONFLICT, "capture-not-supported", "This payment provider cannot capture later",
        meaning: "The request asks to authorize now and capture later (`capture: \"manual\"`), which this deployment's payment provider cannot do through payonce. Nothing was claimed or sent.",
        advice: "Leave `capture` out (or send `\"automatic\"`) to charge at once."),
    /// 400: the `return_url` is not on one of the deployment's checkout origins.
    ReturnUrlNotAllowed => (BAD_REQUEST, "return-url-not-allowed", "The return URL is not allowed",
        meaning: "`return_url` is not an absolute `https` URL (or `http` on loopback in the sandbox) on one of the deployment's checkout origins, the origins allowed to call the API from a browser. Nothing was written.",
        advice: "Send a URL of your checkout's own origin, such as the page that resumes the payment after the customer comes back."),
    /// 402: the card needs authentication and no `return_url` was given.
    AuthenticationRequired => (PAYMENT_REQUIRED, "authentication-required", "The card needs the customer to authenticate",
        meaning: "The card issuer asks the customer to authenticate (3-D Secure), and the request gave no `return_url` to send them back to, so the provider failed the attempt. Nothing was charged; the order is free again; the answer is stored and replayed for the same key.",
        advice: "Pay again with a new key and a `return_url`, then send the customer to the `next_action` URL of the `requires_action` answer."),
    /// 402: the customer failed or refused the authentication.
    AuthenticationFailed => (PAYMENT_REQUIRED, "authentication-failed", "The customer did not authenticate",
        meaning: "The customer failed or refused the card issuer's authentication (3-D Secure). Nothing was charged; the order is free again; the answer is stored and replayed for the same key.",
        advice: "Ask the shopper to try again or use another payment method, with a new key."),
    /// 402: the issuer declined.
    CardDeclined => (PAYMENT_REQUIRED, "card-declined", "The card was declined",
        meaning: "The card issuer declined the charge (`decline_code` says why). The attempt is final and stored: the same key replays this answer.",
        advice: "Ask the shopper for another payment method and pay with a new key."),
    /// 402: the PSP refused the payment method.
    PaymentMethodRejected => (PAYMENT_REQUIRED, "payment-method-rejected", "The payment method was rejected",
        meaning: "The payment provider refused the payment method itself (unknown, expired or unusable token). Nothing was charged; the answer is stored and replayed for the same key.",
        advice: "Collect a new payment method and pay with a new key."),
    /// 402: the attempt failed without a decline.
    PaymentFailed => (PAYMENT_REQUIRED, "payment-failed", "The payment failed",
        meaning: "The attempt ended without a charge and without a decline: the provider refused the request, or payonce proved the provider never ran it and gave it up. The order is free again; the answer is stored and replayed for the same key.",
        advice: "Pay again with a new key."),
    /// 503: the PSP could not be reached.
    PspUnavailable => (SERVICE_UNAVAILABLE, "psp-unavailable", "The payment provider is unavailable",
        meaning: "payonce could not reach the payment provider: nothing was charged or refunded by this request.",
        advice: "Retry the same request with the same key after `Retry-After` seconds."),
    /// 403: the token lacks the scope the route needs (`payments:refund`).
    InsufficientScope => (FORBIDDEN, "insufficient-scope", "The token lacks the required scope",
        meaning: "The route needs an OAuth scope the token does not carry (`payments:refund` for refunds, `payments:capture` for captures and for canceling an authorized payment). Nothing was done.",
        advice: "Use a staff token whose `scope` claim includes the scope."),
    /// 409: the payment is not succeeded (processing or failed), so nothing can be refunded.
    PaymentNotRefundable => (CONFLICT, "payment-not-refundable", "The payment cannot be refunded",
        meaning: "Only a succeeded payment can be refunded; this one is processing or failed (`payment_status`). Nothing was written.",
        advice: "Wait until a processing payment settles, then refund it with a new key; a failed payment charged nothing."),
    /// 409: the refund is larger than what is neither refunded nor pending.
    RefundExceedsRemaining => (CONFLICT, "refund-exceeds-remaining", "The refund exceeds what remains refundable",
        meaning: "The amount is more than what remains refundable: captured, less refunded and pending refunds (`remaining_amount`). Nothing was written.",
        advice: "Refund at most `remaining_amount`, or wait for pending refunds to settle."),
    /// 402: the PSP refused or failed the refund.
    RefundFailed => (PAYMENT_REQUIRED, "refund-failed", "The refund failed",
        meaning: "The payment provider refused or failed the refund (`failure_code`); no money went back through it. The answer is stored and replayed for the same key.",
        advice: "Check the payment in the provider's dashboard; a new refund needs a new key."),
    /// 409: the deployment's PSP cannot refund from a server (2C2P without its key exchange).
    RefundNotSupported => (CONFLICT, "refund-not-supported", "The payment provider cannot refund from payonce",
        meaning: "This deployment's payment provider offers no refund payonce can make (2C2P's refund API needs keys exchanged with 2C2P). Nothing was claimed or sent.",
        advice: "Refund from the payment provider's portal."),
    /// 409: the payment is not authorized (or another operation is under way), so it cannot be captured.
    PaymentNotCapturable => (CONFLICT, "payment-not-capturable", "The payment cannot be captured",
        meaning: "Only an authorized payment can be captured, once: this one is not authorized (`payment_status`), or a capture or cancel of it is already under way under another key. Nothing was captured.",
        advice: "Read the payment (`GET /payments/{payment_id}`): a succeeded one is captured already; an operation under way is finished by retrying it with its own key."),
    /// 409: the capture asks for more than the authorization holds.
    CaptureExceedsAuthorized => (CONFLICT, "capture-exceeds-authorized", "The capture exceeds the authorization",
        meaning: "The amount is more than can be captured (`amount_capturable`). Nothing was written or sent.",
        advice: "Capture at most `amount_capturable`, or leave `amount` out to capture all of it."),
    /// 402: the PSP refused the capture.
    CaptureFailed => (PAYMENT_REQUIRED, "capture-failed", "The capture failed",
        meaning: "The payment provider refused the capture (`failure_code`), for example because the authorization lapsed or was canceled. Nothing was captured; the answer is stored and replayed for the same key.",
        advice: "Read the payment: a canceled one can no longer be captured; charge the customer again with a new payment."),
    /// 409: the payment cannot be canceled (captured, failed, canceled, or another operation is under way).
    PaymentNotCancelable => (CONFLICT, "payment-not-cancelable", "The payment cannot be canceled",
        meaning: "Only a payment waiting for its customer (`requires_action`) or authorized can be canceled: this one is captured, failed or canceled already (`payment_status`), or a capture or cancel of it is under way under another key; or the payment provider refused the cancel because the payment had moved on. Nothing was canceled.",
        advice: "Read the payment (`GET /payments/{payment_id}`); refund a succeeded one instead."),
    /// 503: a dependency (DynamoDB, SQS) is unavailable; retry.
    ServiceUnavailable => (SERVICE_UNAVAILABLE, "service-unavailable", "Temporarily unavailable",
        meaning: "A dependency (the database or the queue) is unavailable; nothing was accepted.",
        advice: "Retry after `Retry-After` seconds (a payment provider retries webhooks by itself)."),
    /// 500: a bug or an unexpected failure; never carries detail.
    Internal => (INTERNAL_SERVER_ERROR, "internal", "Internal error",
        meaning: "An unexpected failure; it was logged with the request id. The answer never carries internal detail.",
        advice: "Retry later; a request with an Idempotency-Key is retried safely with the same key. If it persists, report the `instance` (the request id)."),
}

impl ProblemType {
    /// The stable `type` URI, e.g. `/problems/idempotency-key-mismatch`.
    pub fn uri(self) -> String {
        format!("/problems/{}", self.slug())
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        self.describe().0
    }

    /// The slug: the `type` URI's last part.
    pub fn slug(self) -> &'static str {
        self.describe().1
    }

    /// The short, fixed title.
    pub fn title(self) -> &'static str {
        self.describe().2
    }

    /// The problem type whose slug is `slug`.
    pub fn from_slug(slug: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|kind| kind.slug() == slug)
    }

    /// The human-readable page its `type` URI resolves to (`GET /problems/{slug}`): title,
    /// status, meaning and what to do, as HTML.
    pub fn page(self) -> String {
        let (status, slug, title) = self.describe();
        format!(
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>{title} ({code}) · payonce</title>\n</head>\n<body>\n\
             <main>\n<p><code>type: /problems/{slug}</code></p>\n<h1>{title}</h1>\n\
             <p>HTTP status <strong>{code} {reason}</strong>, as \
             <code>application/problem+json</code>.</p>\n\
             <h2>What it means</h2>\n<p>{meaning}</p>\n\
             <h2>What to do</h2>\n<p>{advice}</p>\n\
             <p>Every problem carries <code>instance</code>: the request id (the \
             <code>x-request-id</code> header; for a replayed stored problem, the first \
             request's). Quote it when asking for help.</p>\n\
             <p><a href=\"/openapi.json\">The API document</a></p>\n</main>\n</body>\n</html>\n",
            title = html_text(title),
            code = status.as_u16(),
            reason = status.canonical_reason().unwrap_or(""),
            meaning = html_text(self.meaning()),
            advice = html_text(self.advice()),
        )
    }
}

/// `text` escaped for HTML, with `code spans` as `<code>`.
fn html_text(text: &str) -> String {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    let mut out = String::with_capacity(escaped.len());
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str("<code>");
            out.push_str(part);
            out.push_str("</code>");
        } else {
            out.push_str(part);
        }
    }
    out
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
    /// `Allow`, with a 405: the methods the path takes.
    pub allow: Option<String>,
}

impl Problem {
    /// A problem of `kind` with `detail`.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            extra: Map::new(),
            retry_after: None,
            allow: None,
        }
    }

    /// The 500 answer: logs `error` with its sources, tells the client nothing of it.
    pub fn internal(error: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(error = %crate::error_chain(error), "internal error");
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

    /// Adds `Allow` (a 405 must name the methods the path takes).
    pub fn allow(mut self, methods: &[&str]) -> Self {
        self.allow = Some(methods.join(", "));
        self
    }

    /// The `application/problem+json` response, its `instance` the request id: the id of the
    /// request being answered, or for a stored problem replayed, the original request's.
    pub fn into_response(self, instance: &str) -> Response<Body> {
        let (status, _, title) = self.kind.describe();
        let mut body = json!({
            "type": self.kind.uri(),
            "title": title,
            "status": status.as_u16(),
            "detail": self.detail,
            "instance": instance,
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
        if let Some(allow) = self.allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
            response.headers_mut().insert(header::ALLOW, allow);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_type_has_one_slug_and_a_page_from_the_table() {
        let mut slugs = std::collections::BTreeSet::new();
        for &kind in ProblemType::ALL {
            assert!(slugs.insert(kind.slug()), "{kind:?}: slug used twice");
            assert_eq!(ProblemType::from_slug(kind.slug()), Some(kind));
            assert_eq!(kind.uri(), format!("/problems/{}", kind.slug()));
            assert!(
                kind.status().is_client_error() || kind.status().is_server_error(),
                "{kind:?}"
            );
            let page = kind.page();
            for part in [
                html_text(kind.title()),
                format!("{}", kind.status().as_u16()),
                html_text(kind.meaning()),
                html_text(kind.advice()),
                format!("/problems/{}", kind.slug()),
            ] {
                assert!(page.contains(&part), "{kind:?}: {part} not on its page");
            }
        }
        assert_eq!(ProblemType::from_slug("no-such-problem"), None);
        assert_eq!(ProblemType::from_slug(""), None);
    }

    #[test]
    fn page_text_is_escaped_and_code_spans_are_marked() {
        assert_eq!(
            html_text("send `Idempotency-Key` <b> & \"x\""),
            "send <code>Idempotency-Key</code> &lt;b&gt; &amp; &quot;x&quot;"
        );
    }

    #[test]
    fn a_problem_carries_its_instance() {
        let response = Problem::new(ProblemType::NotFound, "no such order").into_response("req-1");
        let body: Value = serde_json::from_slice(response.body().as_ref()).unwrap();
        assert_eq!(
            body,
            json!({
                "type": "/problems/not-found",
                "title": "Not found",
                "status": 404,
                "detail": "no such order",
                "instance": "req-1",
            })
        );
    }
}
