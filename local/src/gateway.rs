//! The sandbox plays API Gateway (HTTP API, payload 2.0): it turns an HTTP request into the
//! event Lambda would deliver — verified JWT claims in `requestContext.authorizer.jwt.claims`,
//! the token's scopes in `requestContext.authorizer.jwt.scopes`, a deadline in the Lambda
//! context — and the handler's response back into HTTP.

use axum::body::Bytes;
use axum::http::request::Parts;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use lambda_http::{Body, RequestExt};
use payonce::http::{with_request_id, Problem, ProblemType};
use serde_json::{json, Map, Value};

/// The API Gateway v2 event for `parts` + `body`, with `claims` from a verified token.
pub fn lambda_request(
    parts: &Parts,
    body: &Bytes,
    claims: Option<&Map<String, Value>>,
    request_id: &str,
    deadline_ms: i64,
) -> Result<lambda_http::Request, String> {
    let mut headers = Map::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let merged = match headers.remove(name.as_str()) {
            Some(Value::String(previous)) => format!("{previous},{value}"),
            _ => value,
        };
        headers.insert(name.as_str().to_owned(), Value::String(merged));
    }
    let path = parts.uri.path();
    let mut context = json!({
        "accountId": "000000000000",
        "apiId": "payonce-local",
        "domainName": "localhost",
        "domainPrefix": "localhost",
        "http": {"method": parts.method.as_str(), "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": headers.get("user-agent").cloned().unwrap_or(Value::Null)},
        "requestId": request_id,
        "routeKey": "$default",
        "stage": "$default",
        "timeEpoch": deadline_ms,
    });
    if let Some(claims) = claims {
        // API Gateway passes every claim on as a string.
        let strings: Map<String, Value> = claims
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::String(v.as_str().map_or_else(|| v.to_string(), str::to_owned)),
                )
            })
            .collect();
        // The scopes from the `scope` (or `scp`) claim, split on spaces; none: null, as there.
        let scopes = crate::jwt::scopes(claims);
        let scopes = if scopes.is_empty() {
            Value::Null
        } else {
            json!(scopes)
        };
        context["authorizer"] = json!({"jwt": {"claims": strings, "scopes": scopes}});
    }
    let (body, encoded) = match std::str::from_utf8(body) {
        Ok(text) => (text.to_owned(), false),
        Err(_) => (STANDARD.encode(body), true),
    };
    let event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": parts.uri.query().unwrap_or(""),
        "headers": headers,
        "requestContext": context,
        "body": body,
        "isBase64Encoded": encoded,
    });
    let request = lambda_http::request::from_str(&event.to_string()).map_err(|e| e.to_string())?;
    let mut lambda_context = lambda_http::Context::default();
    lambda_context.request_id = request_id.to_owned();
    lambda_context.deadline = u64::try_from(deadline_ms).unwrap_or(0);
    Ok(request.with_lambda_context(lambda_context))
}

/// The handler's response as an HTTP response.
pub fn http_response(response: lambda_http::Response<Body>) -> axum::response::Response {
    let (parts, body) = response.into_parts();
    let bytes = match body {
        Body::Empty => Vec::new(),
        Body::Text(text) => text.into_bytes(),
        Body::Binary(bytes) => bytes,
        _ => Vec::new(),
    };
    let mut out = axum::response::Response::new(axum::body::Body::from(bytes));
    *out.status_mut() = parts.status;
    *out.headers_mut() = parts.headers;
    out
}

/// API Gateway's own answers, which payonce cannot shape (its 401, its integration timeout).
pub fn gateway_answer(status: u16, message: &str, request_id: &str) -> axum::response::Response {
    let mut out = axum::response::Response::new(axum::body::Body::from(
        json!({ "message": message }).to_string(),
    ));
    *out.status_mut() = axum::http::StatusCode::from_u16(status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    out.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("application/json"),
    );
    if let Ok(id) = axum::http::HeaderValue::from_str(request_id) {
        out.headers_mut().insert("apigw-requestid", id);
    }
    out
}

/// API Gateway's refusal of a route whose `AuthorizationScopes` the token lacks, before any
/// function runs. API Gateway's own 403 is `{"message":"Forbidden"}`; the sandbox answers in
/// payonce's problem+json (`insufficient-scope`, what the function itself answers such a
/// token), with `x-request-id`.
pub fn insufficient_scope(scope: &str, request_id: &str) -> axum::response::Response {
    let problem = Problem::new(
        ProblemType::InsufficientScope,
        format!("this route needs a token with the {scope} scope"),
    );
    let mut out = http_response(with_request_id(
        problem.into_response(request_id),
        request_id,
    ));
    if let Ok(id) = axum::http::HeaderValue::from_str(request_id) {
        out.headers_mut().insert("apigw-requestid", id);
    }
    out
}
