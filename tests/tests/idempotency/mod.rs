//! The idempotency layer: one conformance suite over both stores, concurrency storms and
//! request budgets against DynamoDB Local.

mod budget;
mod concurrency;
mod conformance;
mod layer;
mod promises;

use lambda_http::tower::Service;
use lambda_http::{Body, Request, Response};
use serde_json::Value;

/// One request through a wrapped service, as the runtime sends it.
pub(crate) async fn call<S>(service: &mut S, request: Request) -> Response<Body>
where
    S: Service<Request, Response = Response<Body>>,
    S::Error: std::fmt::Debug,
{
    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .expect("ready");
    service.call(request).await.expect("an answer")
}

/// The problem `type` of an answer (`""` when it is not a problem).
pub(crate) fn problem(response: &Response<Body>) -> String {
    let body: Value = serde_json::from_slice(response.body().as_ref()).unwrap_or(Value::Null);
    body["type"].as_str().unwrap_or("").to_owned()
}
