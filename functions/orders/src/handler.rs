//! API Gateway event → order service → response.

use lambda_http::http::{HeaderValue, StatusCode};
use lambda_http::{Body, Request, Response};
use payonce::domain::LineItem;
use payonce::http::{
    authenticated_user, deadline_ms, idempotency_key, json_response, not_this_function,
    operation_of, parse_json_body, request_id, with_request_id, Operation, Problem, ProblemType,
};
use payonce::idempotency::IdempotencyStore;
use payonce::ports::OrderStore;
use payonce::service::{Created, OrderService};
use serde::Deserialize;

/// The function's time budget when the event carries no Lambda context.
pub const FALLBACK_TIMEOUT_MS: i64 = 10_000;

/// Handles one request.
pub async fn handle<O: OrderStore, I: IdempotencyStore>(
    service: &OrderService<O, I>,
    request: Request,
) -> Response<Body> {
    let id = request_id(&request);
    let answer = match operation_of(&request) {
        Ok((operation, param)) => match (operation, param, authenticated_user(&request)) {
            // The API's documentation is public: problem `type`s resolve to these pages.
            (Operation::GetOpenApi, _, _) => Ok(document(
                "application/json",
                payonce::http::openapi_document(service.psp()),
            )),
            (Operation::GetProblem, Some(slug), _) => match ProblemType::from_slug(slug) {
                Some(kind) => Ok(document("text/html; charset=utf-8", kind.page())),
                None => Err(Problem::new(ProblemType::NotFound, "no such problem type")),
            },
            (Operation::CreateOrder | Operation::GetOrder | Operation::ReviseOrder, _, None) => {
                Err(Problem::new(
                    ProblemType::Unauthorized,
                    "a valid bearer token is required",
                ))
            }
            (Operation::CreateOrder, _, Some(user)) => create(service, &user, &request).await,
            (Operation::GetOrder, Some(order_id), Some(user)) => {
                match service.get(&user, order_id).await {
                    Ok(view) => json_response(StatusCode::OK, &view),
                    Err(error) => Err(Problem::from(error)),
                }
            }
            (Operation::ReviseOrder, Some(order_id), Some(user)) => {
                revise(service, &user, order_id, &request).await
            }
            _ => Err(not_this_function()),
        },
        Err(problem) => Err(problem),
    };
    let response = answer.unwrap_or_else(|problem| {
        tracing::info!(request_id = %id, problem = %problem.kind.uri(), "request refused");
        problem.into_response(&id)
    });
    with_request_id(response, &id)
}

/// A documentation page: cacheable for an hour, never sniffed, no script.
fn document(content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::Text(body));
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static(content_type));
    headers.insert(
        "cache-control",
        HeaderValue::from_static("public, max-age=3600"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'none'"),
    );
    response
}

/// The POST /orders body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    currency: String,
    items: Vec<LineItem>,
}

/// The PATCH /orders/{id} body: the new items, and optionally the version they replace.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviseBody {
    #[serde(default, deserialize_with = "payonce::domain::optional_integer")]
    version: Option<i64>,
    items: Vec<LineItem>,
}

async fn create<O: OrderStore, I: IdempotencyStore>(
    service: &OrderService<O, I>,
    user: &str,
    request: &Request,
) -> Result<Response<Body>, Problem> {
    let key = idempotency_key(request)?;
    let body: CreateBody = parse_json_body(request)?;
    let deadline = deadline_ms(request, service.now_ms(), FALLBACK_TIMEOUT_MS);
    match service
        .create(user, key.as_ref(), &body.currency, body.items, deadline)
        .await?
    {
        Created::Fresh(view) => json_response(StatusCode::CREATED, &view),
        Created::Replayed(view) => {
            let mut response = json_response(StatusCode::CREATED, &view)?;
            response
                .headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(response)
        }
    }
}

async fn revise<O: OrderStore, I: IdempotencyStore>(
    service: &OrderService<O, I>,
    user: &str,
    order_id: &str,
    request: &Request,
) -> Result<Response<Body>, Problem> {
    let body: ReviseBody = parse_json_body(request)?;
    let view = service
        .revise(user, order_id, body.version, body.items)
        .await?;
    json_response(StatusCode::OK, &view)
}
