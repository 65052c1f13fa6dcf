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
//! | the handler answers 5xx or fails | that answer; nothing stored, the key can be retried |
//! | the table fails | 503 `service-unavailable` + `Retry-After` (500 `internal` if it cannot be retried) |
//!
//! Problems are `application/problem+json` (see [`crate::http::Problem`]).

use super::{
    Attempt, Fingerprint, Idempotency, IdempotencyStore, Outcome, RunError, RunRequest, StoreError,
};
use crate::http::{
    authenticated_user, deadline_ms, idempotency_key, request_id, Problem, ProblemType,
};
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
}

impl<S: IdempotencyStore + 'static> IdempotencyLayer<S> {
    /// Idempotency for the operation `scope` (a stable name such as `things.create`, without
    /// `#`), with the defaults: the caller is the JWT `sub` API Gateway verified
    /// ([`authenticated_user`]), the fingerprint covers the method, the path and the body
    /// (JSON canonicalised, so key order and spacing do not matter: [`default_fingerprint`]),
    /// and a request without a key is refused.
    pub fn new(idempotency: Idempotency<S>, scope: impl Into<String>) -> Self {
        let scope = scope.into();
        assert!(
            !scope.is_empty() && !scope.contains('#'),
            "an idempotency scope is a non-empty name without '#'"
        );
        Self {
            idempotency: Arc::new(idempotency),
            options: Arc::new(Options {
                scope,
                identity: Box::new(authenticated_user),
                fingerprint: Box::new(default_fingerprint),
                raise_on_missing_key: true,
                fallback_timeout: Duration::from_secs(30),
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
    pub fn fallback_timeout(mut self, timeout: Duration) -> Self {
        self.options_mut().fallback_timeout = timeout;
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

/// The fingerprint [`IdempotencyLayer`] uses by default: the method, the path and the body,
/// a JSON body in canonical form (sorted keys, no insignificant whitespace), any other body as
/// its text (or bytes). Headers are not part of it: they change between honest retries.
pub fn default_fingerprint(request: &Request) -> Fingerprint {
    Fingerprint::of_value(&json!({
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "body": body_value(request.body()),
    }))
}

fn body_value(body: &Body) -> Value {
    let bytes: &[u8] = body.as_ref();
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes).unwrap_or_else(|_| match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => Value::String(hex::encode(bytes)),
    })
}

/// A response as stored in the record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredResponse {
    status: u16,
    headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
}

impl StoredResponse {
    fn of(response: &Response<Body>) -> Self {
        let headers = response
            .headers()
            .iter()
            .filter(|(name, _)| !NOT_STORED.contains(&name.as_str()))
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let (text, hex) = match response.body() {
            Body::Empty => (None, None),
            Body::Text(text) => (Some(text.clone()), None),
            Body::Binary(bytes) => (None, Some(hex::encode(bytes))),
            #[allow(unreachable_patterns)]
            _ => (None, None),
        };
        Self {
            status: response.status().as_u16(),
            headers,
            text,
            hex,
        }
    }

    fn response(&self) -> Response<Body> {
        let body = match (&self.text, &self.hex) {
            (Some(text), _) => Body::Text(text.clone()),
            (None, Some(hex)) => Body::Binary(hex::decode(hex).unwrap_or_default()),
            (None, None) => Body::Empty,
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
    /// The handler answered 5xx: passed on, not stored.
    #[error("the handler answered a server error")]
    ServerError(Response<Body>),
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
        // The fresh response, kept in case it is too large to store: it is still the answer.
        let fresh: Arc<Mutex<Option<Response<Body>>>> = Arc::default();
        let kept = Arc::clone(&fresh);
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
                    if response.status().is_server_error() {
                        return Err(Unstored::ServerError(response));
                    }
                    let stored = StoredResponse::of(&response);
                    *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(response);
                    Ok(stored)
                },
            )
            .await;
        let problem = match run {
            Ok(Outcome::Fresh(stored)) => return Ok(stored.response()),
            Ok(Outcome::Replayed(stored)) => {
                let mut response = stored.response();
                response
                    .headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
                return Ok(response);
            }
            Ok(Outcome::InProgress { retry_after }) => Problem::new(
                ProblemType::IdempotencyKeyInUse,
                "a request with this key is still being processed; retry after the delay",
            )
            .retry_after(retry_after),
            Ok(Outcome::Mismatch) => Problem::new(
                ProblemType::IdempotencyKeyMismatch,
                "this idempotency key was used with another request",
            ),
            Err(RunError::Work(Unstored::ServerError(response))) => return Ok(response),
            Err(RunError::Work(Unstored::Failed(error))) => return Err(error),
            Err(RunError::Store(error @ StoreError::ItemTooLarge { .. })) => {
                tracing::warn!(scope = %options.scope, "the response is too large to store: answered once, not replayable");
                if let Some(response) = fresh.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    return Ok(response);
                }
                Problem::internal(&error)
            }
            Err(RunError::Store(error)) if error.is_retryable() => {
                tracing::warn!(error = %error, "the idempotency table failed; asking the client to retry");
                Problem::new(
                    ProblemType::ServiceUnavailable,
                    "the request could not be recorded; retry with the same key",
                )
                .retry_after(Duration::from_secs(1))
            }
            Err(error) => Problem::internal(&error),
        };
        Ok(problem.into_response(&instance))
    }
}
