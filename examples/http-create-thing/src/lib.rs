//! An idempotent "create a thing" HTTP function: `POST /things {"name": …}` writes one item to
//! the things table and answers 201. payonce's layer makes a retried request (same caller, same
//! `Idempotency-Key`) get the first answer back instead of a second thing.

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::http::StatusCode;
use lambda_http::tower::ServiceBuilder;
use lambda_http::{service_fn, Body, Error, Request, Response};
use payonce::idempotency::layer::Idempotent;
use payonce::idempotency::{Attempt, Idempotency, IdempotencyLayer, IdempotencyStore};
use serde::Deserialize;
use serde_json::json;

/// The operation's name in the idempotency table.
pub const SCOPE: &str = "things.create";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewThing {
    name: String,
}

/// The handler, unaware of idempotency except for the attempt id it names the thing after: a
/// run that takes over a crashed one writes the same item again rather than a second one.
pub async fn create_thing(
    things: &aws_sdk_dynamodb::Client,
    table: &str,
    request: Request,
) -> Result<Response<Body>, Error> {
    let Ok(thing) = serde_json::from_slice::<NewThing>(request.body().as_ref()) else {
        return Ok(Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .header("content-type", "application/json")
            .body(r#"{"error":"send {\"name\": \"…\"}"}"#.into())?);
    };
    let attempt = request
        .extensions()
        .get::<Attempt>()
        .ok_or("the idempotency layer is missing")?;
    let id = format!("thing_{}", attempt.attempt_id);
    things
        .put_item()
        .table_name(table)
        .item("id", AttributeValue::S(id.clone()))
        .item("name", AttributeValue::S(thing.name.clone()))
        .send()
        .await?;
    let body = json!({"id": id, "name": thing.name});
    Ok(Response::builder()
        .status(StatusCode::CREATED)
        .header("content-type", "application/json")
        .header("location", format!("/things/{id}"))
        .body(body.to_string().into())?)
}

/// The function as `lambda_http::run` takes it: the handler behind the idempotency layer.
pub fn service<S: IdempotencyStore + 'static>(
    idempotency: Idempotency<S>,
    things: aws_sdk_dynamodb::Client,
    table: String,
) -> Idempotent<
    S,
    impl lambda_http::Service<
            Request,
            Response = Response<Body>,
            Error = Error,
            Future = impl Send + 'static,
        > + Clone
        + Send
        + 'static,
> {
    ServiceBuilder::new()
        .layer(IdempotencyLayer::new(idempotency, SCOPE))
        .service(service_fn(move |request| {
            let (things, table) = (things.clone(), table.clone());
            async move { create_thing(&things, &table, request).await }
        }))
}
