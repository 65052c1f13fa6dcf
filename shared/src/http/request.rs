//! Reading an API Gateway (HTTP API, payload 2.0) request: identity, headers, body.

use super::problem::{Problem, ProblemType};
use crate::idempotency::{IdempotencyKey, InvalidKey};
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest request body accepted, in bytes (64 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

fn v2_context(request: &Request) -> Option<&ApiGatewayV2httpRequestContext> {
    match request.request_context_ref()? {
        RequestContext::ApiGatewayV2(context) => Some(context),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// The caller, from `requestContext.authorizer.jwt.claims.sub` only — never a header or the body.
/// `None` (answer 401) when absent, empty, over 255 bytes, or holding `#` (it is a key part).
pub fn authenticated_user(request: &Request) -> Option<String> {
    let sub = v2_context(request)?
        .authorizer
        .as_ref()?
        .jwt
        .as_ref()?
        .claims
        .get("sub")?;
    let valid = !sub.is_empty()
        && sub.len() <= 255
        && !sub.contains('#')
        && sub.chars().all(|c| !c.is_control());
    valid.then(|| sub.clone())
}

/// Whether the caller's token carries the OAuth `scope`: API Gateway puts the token's `scope`
/// (or `scp`) claim, split on spaces, in `requestContext.authorizer.jwt.scopes`.
pub fn has_scope(request: &Request, scope: &str) -> bool {
    v2_context(request)
        .and_then(|c| c.authorizer.as_ref())
        .and_then(|a| a.jwt.as_ref())
        .is_some_and(|jwt| jwt.scopes.iter().flatten().any(|s| s == scope))
}

/// The longest request id kept (API Gateway's are far shorter); a longer one is replaced.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// API Gateway's request id, or a fresh one when it has none (or one that could not be a
/// header value of at most [`MAX_REQUEST_ID_LEN`] characters). It is the `x-request-id` header
/// and every problem's `instance`.
pub fn request_id(request: &Request) -> String {
    v2_context(request)
        .and_then(|c| c.request_id.clone())
        .filter(|id| {
            (1..=MAX_REQUEST_ID_LEN).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
        })
        .unwrap_or_else(|| crate::ids::new_uuid().to_string())
}

/// The invocation deadline in epoch ms: the Lambda context's, or `now_ms + fallback_ms` (the
/// function's configured timeout) when the request came without a plausible one — tests, and
/// emulators such as `cargo lambda watch`, which sends a duration where Lambda sends an epoch.
pub fn deadline_ms(request: &Request, now_ms: i64, fallback_ms: i64) -> i64 {
    plausible_deadline(
        request
            .lambda_context_ref()
            .and_then(|c| i64::try_from(c.deadline).ok()),
        now_ms,
        fallback_ms,
    )
}

/// A deadline already a day past cannot be a real invocation's; use the configured timeout.
fn plausible_deadline(deadline: Option<i64>, now_ms: i64, fallback_ms: i64) -> i64 {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    match deadline {
        Some(d) if d > now_ms - DAY_MS => d,
        Some(d) if d > 0 => {
            tracing::warn!(
                deadline = d,
                "the runtime's deadline is not an epoch time; using the configured timeout"
            );
            now_ms + fallback_ms
        }
        _ => now_ms + fallback_ms,
    }
}

/// The validated `Idempotency-Key` header.
pub fn idempotency_key(request: &Request) -> Result<Option<IdempotencyKey>, Problem> {
    let Some(raw) = request.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let text = raw.to_str().map_err(|_| {
        Problem::new(
            ProblemType::IdempotencyKeyInvalid,
            "the idempotency key has a character outside printable ASCII (0x21-0x7E)",
        )
    })?;
    IdempotencyKey::parse(text)
        .map(Some)
        .map_err(|e: InvalidKey| Problem::new(ProblemType::IdempotencyKeyInvalid, e.to_string()))
}

/// A 400's detail for a body of the wrong shape: the field (by its path in the body) and what
/// it must be, in serde's words — never the value the client sent, which may be anything (a card
/// number in the wrong field). An unknown field is not named either: its name is client text.
fn field_error(path: &str, message: &str) -> String {
    // serde_json appends the position: "... at line 1 column 9".
    let message = message
        .rsplit_once(" at line ")
        .map_or(message, |(before, _)| before);
    let expected = message.split_once(", expected ").map(|(_, e)| e);
    if message.starts_with("missing field ") || message.starts_with("duplicate field ") {
        // Both name one of our own fields.
        message.to_owned()
    } else if message.starts_with("unknown field ") {
        match expected {
            Some(allowed) => format!("a field is not allowed here; expected {allowed}"),
            None => "a field is not allowed here".to_owned(),
        }
    } else {
        let field = if path == "." || path.is_empty() {
            "the body".to_owned()
        } else {
            format!("`{path}`")
        };
        match expected {
            Some(expected) => format!("{field} must be {expected}"),
            None => format!("{field} has a value of the wrong type or range"),
        }
    }
}

/// Parses the body, a JSON object, into `T` (which should `deny_unknown_fields`): 413 over the
/// limit, 415 when declared as something other than JSON, 400 `malformed-json` for bad syntax,
/// 400 `invalid-request` for the wrong shape — a top-level array included, which serde would
/// otherwise read into a struct field by field.
pub fn parse_json_body<T: DeserializeOwned>(request: &Request) -> Result<T, Problem> {
    let bytes: &[u8] = request.body().as_ref();
    if bytes.len() > MAX_BODY_BYTES {
        return Err(Problem::new(
            ProblemType::BodyTooLarge,
            format!(
                "the body is {} bytes; at most {MAX_BODY_BYTES} are accepted",
                bytes.len()
            ),
        ));
    }
    if let Some(content_type) = request.headers().get(header::CONTENT_TYPE) {
        let essence = content_type
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" {
            return Err(Problem::new(
                ProblemType::UnsupportedMediaType,
                "send the body as application/json",
            ));
        }
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        if e.is_data() {
            Problem::new(
                ProblemType::InvalidRequest,
                field_error(&path, &e.to_string()),
            )
        } else {
            // Syntax errors name a position, never the text.
            Problem::new(ProblemType::MalformedJson, e.to_string())
        }
    })?;
    deserializer
        .end()
        .map_err(|e| Problem::new(ProblemType::MalformedJson, e.to_string()))?;
    // Well-formed JSON that is not an object (an array, a number...) is the wrong shape.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Problem::new(
            ProblemType::InvalidRequest,
            "the body must be a JSON object",
        ));
    }
    Ok(parsed)
}

/// A JSON response with `status` (a value that cannot be serialised is a 500).
pub fn json_response<T: Serialize>(
    status: StatusCode,
    value: &T,
) -> Result<Response<Body>, Problem> {
    let text = serde_json::to_string(value).map_err(|error| Problem::internal(&error))?;
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// Longest `return_url` accepted.
pub const MAX_RETURN_URL_LEN: usize = 2048;

/// Whether `url` may be a payment's `return_url`: at most [`MAX_RETURN_URL_LEN`] printable
/// ASCII characters without a fragment, on one of `origins` (each `scheme://host[:port]`,
/// nothing after): the URL is the origin followed by `/`, so no other host, port or user part
/// can pass. Plain `http` passes only on a loopback origin (`http://localhost[:port]`,
/// `http://127.0.0.1[:port]`: a checkout on this machine, the sandbox's), whatever is listed.
pub fn return_url_allowed(url: &str, origins: &[String]) -> bool {
    let loopback = |origin: &str| {
        ["http://localhost", "http://127.0.0.1"].iter().any(|host| {
            origin
                .strip_prefix(host)
                .is_some_and(|port| port.is_empty() || port.starts_with(':'))
        })
    };
    url.len() <= MAX_RETURN_URL_LEN
        && url.bytes().all(|b| b.is_ascii_graphic())
        && !url.contains('#')
        && origins.iter().any(|origin| {
            (origin.starts_with("https://") || loopback(origin))
                && url
                    .strip_prefix(origin.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
}

/// Adds `x-request-id` (every response payonce produces carries one).
pub fn with_request_id(mut response: Response<Body>, id: &str) -> Response<Body> {
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

#[cfg(test)]
mod deadline_tests {
    use super::plausible_deadline;

    #[test]
    fn an_epoch_deadline_is_kept_and_anything_else_falls_back_to_the_timeout() {
        let now = 1_796_000_000_000;
        assert_eq!(
            plausible_deadline(Some(now + 3_000), now, 25_000),
            now + 3_000
        );
        assert_eq!(
            plausible_deadline(Some(now - 1_000), now, 25_000),
            now - 1_000,
            "a passed deadline is still honoured"
        );
        assert_eq!(plausible_deadline(Some(600_000), now, 25_000), now + 25_000);
        assert_eq!(plausible_deadline(None, now, 25_000), now + 25_000);
        assert_eq!(plausible_deadline(Some(0), now, 25_000), now + 25_000);
    }
}

#[cfg(test)]
mod body_tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        order_id: String,
        order_version: i64,
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        unit_amount: i64,
    }

    fn refusal(body: &str) -> (String, String) {
        let request = Request::new(lambda_http::Body::from(body.to_owned()));
        let problem = parse_json_body::<Body>(&request).expect_err("refused");
        (problem.kind.uri(), problem.detail.clone())
    }

    #[test]
    fn a_wrong_shape_names_the_field_and_the_type_never_the_value() {
        let secret = "4242424242424242";
        let cases = [
            (
                format!(r#"{{"order_id": "o", "order_version": "{secret}", "items": []}}"#),
                "`order_version` must be i64",
            ),
            (
                format!(r#"{{"order_id": {secret}, "order_version": 1, "items": []}}"#),
                "`order_id` must be a string",
            ),
            (
                format!(
                    r#"{{"order_id": "o", "order_version": 1, "items": [{{"unit_amount": "{secret}"}}]}}"#
                ),
                "`items[0].unit_amount` must be i64",
            ),
            (
                format!(r#"{{"order_id": "o", "order_version": 1, "items": [], "{secret}": 1}}"#),
                "a field is not allowed here; expected one of `order_id`, `order_version`, `items`",
            ),
            (
                r#"{"order_id": "o", "items": []}"#.to_owned(),
                "missing field `order_version`",
            ),
        ];
        for (body, detail) in cases {
            let (kind, said) = refusal(&body);
            assert_eq!(
                (kind.as_str(), said.as_str()),
                ("/problems/invalid-request", detail),
                "{body}"
            );
            assert!(!said.contains(secret), "{said}");
        }
        let (kind, said) = refusal(&format!(r#"{{"order_id": "{secret}"#));
        assert_eq!(kind, "/problems/malformed-json");
        assert!(!said.contains(secret), "{said}");
        let (kind, _) = refusal(r#"{"order_id": "o", "order_version": 1, "items": []} x"#);
        assert_eq!(kind, "/problems/malformed-json");
    }
}

#[cfg(test)]
mod return_url_tests {
    use super::return_url_allowed;

    #[test]
    fn only_a_url_on_a_checkout_origin_passes() {
        let origins = [
            "https://shop.example".to_owned(),
            "http://localhost:8080".to_owned(),
            // listed, but plain http off loopback is never a return URL
            "http://plain.example".to_owned(),
        ];
        for ok in [
            "https://shop.example/",
            "https://shop.example/checkout/return?order=ord_1",
            "http://localhost:8080/return.html",
        ] {
            assert!(return_url_allowed(ok, &origins), "{ok}");
        }
        for refused in [
            "https://shop.example",
            "https://shop.example.evil.test/return",
            "https://shop.example@evil.test/return",
            "https://shop.example:8443/return",
            "http://shop.example/return",
            "http://localhost:9999/return",
            "http://plain.example/return",
            "https://evil.test/https://shop.example/",
            "https://shop.example/return#done",
            "https://shop.example/a b",
            "https://shop.example/\u{e9}",
            "javascript:alert(1)",
            "/relative/return",
            "",
        ] {
            assert!(!return_url_allowed(refused, &origins), "{refused}");
        }
        let long = format!("https://shop.example/{}", "a".repeat(2048));
        assert!(!return_url_allowed(&long, &origins));
        assert!(!return_url_allowed("https://shop.example/", &[]));
    }
}
