//! POST /webhooks/{provider}: verify the raw body, enqueue it, answer 200 — or tell the PSP to
//! retry (5xx) when the queue is unavailable, so nothing is lost.

use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, Response};
use payonce::http::{
    json_response, not_this_function, operation_of, request_id, with_request_id, Operation,
    Problem, ProblemType,
};
use payonce::ports::{QueueSend, SignatureError};
use payonce::service::webhooks::{ReceiveError, WebhookReceiver};
use std::time::Duration;

/// Handles one delivery.
pub async fn handle<Q: QueueSend>(
    receiver: &WebhookReceiver<Q>,
    request: Request,
) -> Response<Body> {
    let id = request_id(&request);
    let answer = match operation_of(&request) {
        Ok((Operation::ReceiveWebhook, Some(provider))) => {
            receive(receiver, provider, &request).await
        }
        Ok(_) => Err(not_this_function()),
        Err(problem) => Err(problem),
    };
    let response = answer.unwrap_or_else(|problem| {
        tracing::info!(request_id = %id, problem = %problem.kind.uri(), "webhook refused");
        problem.into_response(&id)
    });
    with_request_id(response, &id)
}

async fn receive<Q: QueueSend>(
    receiver: &WebhookReceiver<Q>,
    provider: &str,
    request: &Request,
) -> Result<Response<Body>, Problem> {
    let body: &[u8] = request.body().as_ref();
    match receiver.receive(provider, request.headers(), body).await {
        Ok(_) => json_response(StatusCode::OK, &serde_json::json!({"received": true})),
        Err(ReceiveError::UnknownProvider) => Err(Problem::new(
            ProblemType::NotFound,
            "unknown webhook provider",
        )),
        Err(ReceiveError::TooLarge) => Err(Problem::new(
            ProblemType::BodyTooLarge,
            "the webhook body exceeds 1 MiB",
        )),
        Err(ReceiveError::Signature(SignatureError::Missing | SignatureError::Malformed)) => {
            Err(Problem::new(
                ProblemType::WebhookSignatureMissing,
                "the signature header is missing or cannot be parsed",
            ))
        }
        Err(ReceiveError::Signature(SignatureError::NoValidSignature | SignatureError::Stale)) => {
            Err(Problem::new(
                ProblemType::WebhookSignatureInvalid,
                "no valid signature for this body within the tolerance",
            ))
        }
        Err(ReceiveError::Signature(SignatureError::KeyUnavailable)) => {
            // An allowed certificate that did not come: PayPal delivers again.
            Err(Problem::new(
                ProblemType::ServiceUnavailable,
                "the signing certificate could not be fetched; retry later",
            )
            .retry_after(Duration::from_secs(5)))
        }
        Err(ReceiveError::Unreadable(detail)) => {
            Err(Problem::new(ProblemType::MalformedJson, detail))
        }
        Err(ReceiveError::Queue(error)) => {
            tracing::error!(error = %error, "the webhook queue is unavailable; the PSP will retry");
            Err(Problem::new(
                ProblemType::ServiceUnavailable,
                "temporarily unable to accept the event; retry later",
            )
            .retry_after(Duration::from_secs(5)))
        }
    }
}
