//! Idempotency for a `lambda_http` function, as a tower [`Layer`]: the handler stays a plain
//! request → response function, and the layer answers duplicates from the table.
//!
//! ```no_run
//! use lambda_http::tower::ServiceBuilder;
//! use lambda_http::{service_fn, Body, Error, Request, Response};
//! use payonce::adapters::dynamodb::DynamoIdempotencyStore;
//! use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotencyLayer};
//!
//! async fn create_thing(request: Request) -> Result<Response<Body>, Error> {
//!     // Runs once per (caller, Idempotency-Key); `request.extensions().get::<Attempt>()`
//!     // holds the attempt id to derive downstream idempotency keys from.
//!     Ok(Response::builder().status(201).body(r#"{"id":"thing_1"}"#.into())?)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let aws = aws_config::load_from_env().await;
//!     let store = DynamoIdempotencyStore::from_env(aws_sdk_dynamodb::Client::new(&aws))?;
//!     let idempotency = Idempotency::new(store, IdempotencyConfig::from_env()?);
//!     let layer = IdempotencyLayer::new(idempotency, "things.create");
//!     lambda_http::run(ServiceBuilder::new().layer(layer).service(service_fn(create_thing))).await
//! }
//! ```
//!
//! What a request gets:
//!
//! | situation | answer |
//! |---|---|
//! | first request with a key | the handler's response, stored |
//! | the same request again (any instance) | the stored response, with `Idempotent-Replayed: true` |
//! | the same key while the first still runs | 409 `idempotency-key-in-use` + `Retry-After` |
//! | the same key with another request | 422 `idempotency-key-mismatch`; nothing runs |
//! | no `Idempotency-Key` | 400 `idempotency-key-missing`, or the handler without idempotency when [`IdempotencyLayer::raise_on_missing_key`] is off |
//! | a malformed key | 400 `idempotency-key-invalid` |
//! | no caller identity | 401 `unauthorized` |
//! | the handler answers 5xx, 408, 425 or 429 ([`IdempotencyLayer::do_not_store`]) or fails | that answer; nothing stored, the lease handed back: a retry with the key runs under the same attempt id |
//! | the handler panics or the invocation times out | the lease lapses at the deadline plus the margin; the retry then runs under the same attempt id |
//! | the first response was over the item limit | the first request gets it; a duplicate gets 409 `idempotency-result-too-large` and nothing runs |
//! | the table fails before the handler ran | 503 `service-unavailable` + `Retry-After` (500 `internal` if it cannot be retried) |
//! | the table fails to record the handler's response (after retries) | the handler's response; the record stays in progress until its lease lapses |
//!
//! Problems are `application/problem+json` (see [`crate::http::Problem`]).

use super::{
    Attempt, Fingerprint, Idempotency, IdempotencyStore, Outcome, RunError, RunRequest, StoreError,
};
use crate::http::{
    authenticated_user, deadline_ms, idempotency_key, request_id, Problem, ProblemType,
};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use lambda_http::http::{HeaderName, HeaderValue};
use lambda_http::tower::{Layer, Service};
use lambda_http::{Body, Request, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// Who the caller is: the key is scoped to it, so two callers never share a record.
pub type IdentityFn = dyn Fn(&Request) -> Option<String> + Send + Sync;
/// What makes two requests "the same": a mismatch is answered when a key comes back with
/// another fingerprint.
pub type FingerprintFn = dyn Fn(&Request) -> Fingerprint + Send + Sync;

/// The error a wrapped service may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Headers never stored with a response: per-request values, and cookies.
const NOT_STORED: [&str; 4] = ["x-request-id", "date", "set-cookie", "idempotent-replayed"];

/// The idempotency layer for `lambda_http` services (see the [module](self) docs).
pub struct IdempotencyLayer<S> {
    idempotency: Arc<Idempotency<S>>,
    options: Arc<Options>,
}

impl<S> Clone for IdempotencyLayer<S> {
    fn clone(&self) -> Self {
        Self {
            idempotency: Arc::clone(&self.idempotency),
            options: Arc::clone(&self.options),
        }
    }
}

struct Options {
    scope: String,
    identity: Box<IdentityFn>,
    fingerprint: Box<FingerprintFn>,
    raise_on_missing_key: bool,
    fallback_timeout: Duration,
    do_not_store: Vec<u16>,
}

/// Answers that are temporary by nature, passed on but never stored (the retry deserves a new
/// try): 408 Request Timeout, 425 Too Early, 429 Too Many Requests.
pub const DO_NOT_STORE: [u16; 3] = [408, 425, 429];

impl<S: IdempotencyStore + 'static> IdempotencyLayer<S> {
    /// Idempotency for the operation `scope` (a stable name such as `things.create`, without
    /// `#`), with the defaults: the caller is the JWT `sub` API Gateway verified
    /// ([`authenticated_user`]), the fingerprint covers the method, the path, the query and
    /// the body (JSON canonicalised, so key order and spacing do not matter:
    /// [`default_fingerprint`]), and a request without a key is refused.
    ///
    /// # Panics
    /// If `scope` is empty or holds `#`.
    pub fn new(idempotency: Idempotency<S>, scope: impl Into<String>) -> Self {
        let scope = scope.into();
        assert!(
            !scope.is_empty() && !scope.contains('#'),
            "an idempotency scope is a non-empty name without '#'"
        );
        let fallback_timeout = Duration::from_secs(30);
        Self {
            idempotency: Arc::new(idempotency),
            options: Arc::new(Options {
                scope,
                identity: Box::new(authenticated_user),
                fingerprint: Box::new(default_fingerprint),
                raise_on_missing_key: true,
                fallback_timeout,
                do_not_store: DO_NOT_STORE.to_vec(),
            }),
        }
    }

    fn options_mut(&mut self) -> &mut Options {
        Arc::get_mut(&mut self.options).expect("configure the layer before cloning it")
    }

    /// Scopes keys by `identity` instead of the JWT `sub` (an API key id, a tenant, a constant
    /// for an internal caller). `None` answers 401. A `#` in the identity is refused too.
    pub fn identity(
        mut self,
        identity: impl Fn(&Request) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.options_mut().identity = Box::new(identity);
        self
    }

    /// Fingerprints requests with `fingerprint` instead of [`default_fingerprint`].
    pub fn fingerprint(
        mut self,
        fingerprint: impl Fn(&Request) -> Fingerprint + Send + Sync + 'static,
    ) -> Self {
        self.options_mut().fingerprint = Box::new(fingerprint);
        self
    }

    /// Fingerprints only the part of the JSON body at `pointer` (RFC 6901, e.g. `/amount`),
    /// as Powertools' `payload_validation_jmespath`: other fields may change between retries.
    pub fn payload_validation(self, pointer: impl Into<String>) -> Self {
        let pointer = pointer.into();
        self.fingerprint(move |request| {
            let body = body_value(request.body());
            Fingerprint::of_value(body.pointer(&pointer).unwrap_or(&Value::Null))
        })
    }

    /// Whether a request without `Idempotency-Key` is refused with 400 (the default, as
    /// Powertools' `raise_on_no_idempotency_key`) or passed to the handler without idempotency.
    pub fn raise_on_missing_key(mut self, raise: bool) -> Self {
        self.options_mut().raise_on_missing_key = raise;
        self
    }

    /// The lease when the event carries no Lambda deadline (local runs): the function's timeout.
    ///
    /// # Panics
    /// If the configuration's retention is shorter than a lease of `timeout`
    /// ([`IdempotencyConfig::check_timeout`](super::IdempotencyConfig::check_timeout)).
    pub fn fallback_timeout(mut self, timeout: Duration) -> Self {
        if let Err(error) = self.idempotency.config().check_timeout(timeout) {
            panic!("{error}");
        }
        self.options_mut().fallback_timeout = timeout;
        self
    }

    /// The statuses passed on but never stored, besides every 5xx (default [`DO_NOT_STORE`]:
    /// 408, 425, 429): the lease is handed back and a retry with the key runs again, under the
    /// same attempt id.
    pub fn do_not_store(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.options_mut().do_not_store = statuses.into_iter().collect();
        self
    }
}

impl<S, Svc> Layer<Svc> for IdempotencyLayer<S> {
    type Service = Idempotent<S, Svc>;

    fn layer(&self, inner: Svc) -> Self::Service {
        Idempotent {
            layer: self.clone(),
            inner,
        }
    }
}

/// A service wrapped by [`IdempotencyLayer`].
pub struct Idempotent<S, Svc> {
    layer: IdempotencyLayer<S>,
    inner: Svc,
}

impl<S, Svc: Clone> Clone for Idempotent<S, Svc> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
            inner: self.inner.clone(),
        }
    }
}

/// The fingerprint [`IdempotencyLayer`] uses by default: the method, the path, the query string
/// (its parameters sorted by name, as a REST API or an ALB event rebuilds the query from a map
/// whose order is not the client's; each name's values keep their order) and the body with its kind — a JSON body in canonical form (sorted keys, no insignificant
/// whitespace), any other as its text or its bytes, so a text body never equals the JSON string
/// of the same characters. Headers are not part of it: they change between honest retries.
pub fn default_fingerprint(request: &Request) -> Fingerprint {
    Fingerprint::of_value(&json!({
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "query": request.uri().query().map(sorted_parameters),
        "body": body_kind(request.body()),
    }))
}

/// The query with its `&`-separated parameters sorted by name, stably: a REST API or an ALB
/// event rebuilds the query from a map, so the names may come in another order on a retry, but
/// each name's values keep the client's order (`?tag=b&tag=a` is not `?tag=a&tag=b`). A query
/// already in that order is unchanged, so its fingerprint is what it was before this sorting.
fn sorted_parameters(query: &str) -> String {
    let mut parameters: Vec<&str> = query.split('&').collect();
    parameters.sort_by_key(|parameter| parameter.split('=').next().unwrap_or_default());
    parameters.join("&")
}

/// The body as JSON, or `Null` when it is empty or not JSON.
fn body_value(body: &Body) -> Value {
    serde_json::from_slice(body.as_ref()).unwrap_or(Value::Null)
}

/// The body tagged with its kind: `{"json": …}`, `{"text": …}`, `{"bytes": base64}`, or `null`.
fn body_kind(body: &Body) -> Value {
    let bytes: &[u8] = body.as_ref();
    if bytes.is_empty() {
        return Value::Null;
    }
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return json!({ "json": value });
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "text": text }),
        Err(_) => json!({ "bytes": BASE64.encode(bytes) }),
    }
}

/// A response as stored in the record. Binary bodies are base64 (`hex` is read from records
/// written by earlier versions).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredResponse {
    status: u16,
    headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
    #[serde(default, skip_serializing)]
    hex: Option<String>,
}

impl StoredResponse {
    fn of(response: &Response<Body>) -> Self {
        // What a replay can carry: not per-request values, not cookies (a session must not be
        // handed to whoever replays the key), and only values that are visible ASCII.
        let headers = response
            .headers()
            .iter()
            .filter(|(name, _)| !NOT_STORED.contains(&name.as_str()))
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let (text, base64) = match response.body() {
            Body::Empty => (None, None),
            Body::Text(text) => (Some(text.clone()), None),
            Body::Binary(bytes) => (None, Some(BASE64.encode(bytes))),
            #[allow(unreachable_patterns)]
            _ => (None, None),
        };
        Self {
            status: response.status().as_u16(),
            headers,
            text,
            base64,
            hex: None,
        }
    }

    fn response(&self) -> Response<Body> {
        let body = if let Some(text) = &self.text {
            Body::Text(text.clone())
        } else if let Some(encoded) = &self.base64 {
            Body::Binary(BASE64.decode(encoded).unwrap_or_default())
        } else if let Some(hex) = &self.hex {
            Body::Binary(hex::decode(hex).unwrap_or_default())
        } else {
            Body::Empty
        };
        let mut response = Response::new(body);
        *response.status_mut() =
            lambda_http::http::StatusCode::from_u16(self.status).unwrap_or_default();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                response.headers_mut().append(name, value);
            }
        }
        response
    }
}

/// Why the wrapped work did not produce a storable response.
#[derive(Debug, thiserror::Error)]
enum Unstored {
    /// The handler answered 5xx or a status of [`IdempotencyLayer::do_not_store`]: passed on,
    /// not stored.
    #[error("the handler answered {}, which is not stored", .0.status())]
    Passed(Response<Body>),
    /// The handler failed.
    #[error("the handler failed")]
    Failed(#[source] BoxError),
}

impl<S, Svc> Service<Request> for Idempotent<S, Svc>
where
    S: IdempotencyStore + 'static,
    Svc: Service<Request, Response = Response<Body>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The service that was polled ready runs this request; a fresh clone waits for the next.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let layer = self.layer.clone();
        Box::pin(async move { layer.answer(inner, request).await })
    }
}

impl<S: IdempotencyStore + 'static> IdempotencyLayer<S> {
    async fn answer<Svc>(
        &self,
        mut inner: Svc,
        mut request: Request,
    ) -> Result<Response<Body>, BoxError>
    where
        Svc: Service<Request, Response = Response<Body>> + Send,
        Svc::Future: Send,
        Svc::Error: Into<BoxError>,
    {
        let options = &self.options;
        // Problems name the request they answer (`instance`): API Gateway's request id.
        let instance = request_id(&request);
        let key = match idempotency_key(&request) {
            Ok(Some(key)) => key,
            Ok(None) if !options.raise_on_missing_key => {
                return inner.call(request).await.map_err(Into::into)
            }
            Ok(None) => {
                return Ok(Problem::new(
                    ProblemType::IdempotencyKeyMissing,
                    "send an Idempotency-Key header (a UUID the client keeps for its retries)",
                )
                .into_response(&instance))
            }
            Err(problem) => return Ok(problem.into_response(&instance)),
        };
        let Some(user) = (options.identity)(&request).filter(|u| !u.is_empty() && !u.contains('#'))
        else {
            return Ok(
                Problem::new(ProblemType::Unauthorized, "the caller is not identified")
                    .into_response(&instance),
            );
        };
        let fingerprint = (options.fingerprint)(&request);
        let now_ms = self.idempotency.store().now_ms();
        let fallback_ms = i64::try_from(options.fallback_timeout.as_millis()).unwrap_or(i64::MAX);
        let deadline = deadline_ms(&request, now_ms, fallback_ms);
        // The handler's own response: the first answer is it, not its stored copy (which has no
        // cookies and only ASCII header values), and it stays the answer when it cannot be
        // stored.
        let fresh: Arc<Mutex<Option<Response<Body>>>> = Arc::default();
        let kept = Arc::clone(&fresh);
        let do_not_store = &options.do_not_store;
        let run = self
            .idempotency
            .run(
                RunRequest {
                    scope: &options.scope,
                    user: &user,
                    key: &key,
                    fingerprint,
                    deadline_ms: deadline,
                },
                |attempt: Attempt| async move {
                    request.extensions_mut().insert(attempt);
                    let response = inner
                        .call(request)
                        .await
                        .map_err(|e| Unstored::Failed(e.into()))?;
                    let status = response.status();
                    if status.is_server_error() || do_not_store.contains(&status.as_u16()) {
                        return Err(Unstored::Passed(response));
                    }
                    let stored = StoredResponse::of(&response);
                    *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(response);
                    Ok(stored)
                },
            )
            .await;
        // Set when the handler answered something storable, whatever the store did after.
        let original = fresh.lock().unwrap_or_else(|p| p.into_inner()).take();
        let in_use = |retry_after| {
            Problem::new(
                ProblemType::IdempotencyKeyInUse,
                "a request with this key is still being processed; retry after the delay",
            )
            .retry_after(retry_after)
        };
        let problem = match run {
            Ok(Outcome::Fresh(stored)) => return Ok(original.unwrap_or_else(|| stored.response())),
            Ok(Outcome::Replayed(stored)) => {
                let mut response = stored.response();
                response
                    .headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
                return Ok(response);
            }
            Ok(Outcome::TooLargeToReplay { size_bytes }) => Problem::new(
                ProblemType::IdempotencyResultTooLarge,
                format!("the request with this key completed; its response ({size_bytes} bytes) was too large to keep"),
            ),
            Ok(Outcome::InProgress { retry_after }) => in_use(retry_after),
            Ok(Outcome::Mismatch) => Problem::new(
                ProblemType::IdempotencyKeyMismatch,
                "this idempotency key was used with another request",
            ),
            Err(RunError::Work(Unstored::Passed(response))) => return Ok(response),
            Err(RunError::Work(Unstored::Failed(error))) => return Err(error),
            // Our lease lapsed while the handler ran, and another invocation took the attempt over:
            // its answer is the one the key will replay, so send the client there.
            Err(RunError::Store(StoreError::LeaseLost { .. })) => in_use(Duration::from_secs(1)),
            Err(RunError::Store(error)) => match original {
                // The handler ran and answered; only its record failed (after retries). Its
                // answer is the truth: pass it on rather than invite a retry that runs it again.
                Some(response) => {
                    tracing::warn!(scope = %options.scope, error = %error, "the response could not be recorded; answering it unrecorded");
                    return Ok(response);
                }
                None if error.is_retryable() => {
                    tracing::warn!(error = %error, "the idempotency table failed; asking the client to retry");
                    Problem::new(
                        ProblemType::ServiceUnavailable,
                        "the request could not be recorded; retry with the same key",
                    )
                    .retry_after(Duration::from_secs(1))
                }
                None => Problem::internal(&error),
            },
            Err(error) => Problem::internal(&error),
        };
        Ok(problem.into_response(&instance))
    }
}

#[cfg(test)]
mod tests {
    use super::sorted_parameters;

    #[test]
    fn parameters_are_sorted_by_name_keeping_each_names_values_in_order() {
        assert_eq!(sorted_parameters("size=1&color=red"), "color=red&size=1");
        assert_eq!(sorted_parameters("tag=b&x=1&tag=a"), "tag=b&tag=a&x=1");
        // Already sorted (or one parameter): unchanged, so such a query fingerprints as it did
        // before the sorting.
        assert_eq!(sorted_parameters("a=1&b=2"), "a=1&b=2");
        assert_eq!(sorted_parameters("a=1"), "a=1");
        assert_eq!(sorted_parameters(""), "");
    }
}
