//! The example against DynamoDB Local: a retried request is replayed, a concurrent one gets 409,
//! another request under the same key gets 422, each with its budget of DynamoDB requests.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use example_http_create_thing::{create_thing, service, SCOPE};
use lambda_http::tower::{Layer, Service};
use lambda_http::{service_fn, Body, Request, Response};
use payonce::adapters::dynamodb::{
    create_idempotency_table, DynamoIdempotencyStore, RequestCounter,
};
use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotencyLayer};
use payonce_tests::stack::api_event;
use payonce_tests::{dynamodb_client, unique_table};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Notify;

struct Setup {
    counter: RequestCounter,
    client: aws_sdk_dynamodb::Client,
    idempotency_table: String,
    things_table: String,
}

async fn setup() -> Setup {
    let counter = RequestCounter::new();
    let client = dynamodb_client(&counter);
    let idempotency_table = unique_table("example-idem");
    let things_table = unique_table("example-things");
    create_idempotency_table(&client, &idempotency_table)
        .await
        .expect("idempotency table");
    client
        .create_table()
        .table_name(&things_table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("things table");
    counter.reset();
    Setup {
        counter,
        client,
        idempotency_table,
        things_table,
    }
}

impl Setup {
    fn idempotency(&self) -> Idempotency<DynamoIdempotencyStore> {
        Idempotency::new(
            DynamoIdempotencyStore::new(self.client.clone(), &self.idempotency_table),
            IdempotencyConfig::default(),
        )
    }

    /// The requests sent since the last call, by operation.
    fn requests(&self) -> BTreeMap<String, u64> {
        let counts = self.counter.by_operation();
        self.counter.reset();
        counts
    }

    async fn things(&self) -> Vec<String> {
        let scan = self
            .client
            .scan()
            .table_name(&self.things_table)
            .send()
            .await
            .expect("scan");
        self.counter.reset();
        scan.items()
            .iter()
            .map(|item| item["name"].as_s().expect("a name").clone())
            .collect()
    }
}

fn create(key: &str, name: &str) -> Request {
    api_event(
        "POST",
        "/things",
        Some("alice"),
        &[("idempotency-key", key)],
        &format!(r#"{{"name":"{name}"}}"#),
    )
}

async fn call<S>(service: &mut S, request: Request) -> Response<Body>
where
    S: Service<Request, Response = Response<Body>>,
    S::Error: std::fmt::Debug,
{
    std::future::poll_fn(|cx| service.poll_ready(cx))
        .await
        .expect("ready");
    service.call(request).await.expect("an answer")
}

fn json(response: &Response<Body>) -> Value {
    serde_json::from_slice(response.body().as_ref()).expect("a JSON body")
}

fn ops(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(op, n)| ((*op).to_owned(), *n)).collect()
}

#[tokio::test]
async fn a_retried_request_is_replayed_and_creates_nothing_more() {
    let setup = setup().await;
    let mut function = service(
        setup.idempotency(),
        setup.client.clone(),
        setup.things_table.clone(),
    );

    let first = call(&mut function, create("key-1", "lamp")).await;
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    // The claim, the thing, the completion.
    assert_eq!(setup.requests(), ops(&[("PutItem", 2), ("UpdateItem", 1)]));

    let again = call(&mut function, create("key-1", "lamp")).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(json(&again), json(&first));
    assert_eq!(again.headers()["location"], first.headers()["location"]);
    // One request: the claim, refused, returns the stored answer.
    assert_eq!(setup.requests(), ops(&[("PutItem", 1)]));
    assert_eq!(setup.things().await, ["lamp"]);

    // Another caller's same key is another record.
    let bob = api_event(
        "POST",
        "/things",
        Some("bob"),
        &[("idempotency-key", "key-1")],
        r#"{"name":"lamp"}"#,
    );
    assert_eq!(call(&mut function, bob).await.status(), 201);
    assert_eq!(setup.things().await.len(), 2);
}

#[tokio::test]
async fn the_same_key_with_another_request_is_422_and_runs_nothing() {
    let setup = setup().await;
    let mut function = service(
        setup.idempotency(),
        setup.client.clone(),
        setup.things_table.clone(),
    );
    assert_eq!(
        call(&mut function, create("key-2", "lamp")).await.status(),
        201
    );
    setup.requests();

    let other = call(&mut function, create("key-2", "chair")).await;
    assert_eq!(other.status(), 422);
    assert_eq!(other.headers()["content-type"], "application/problem+json");
    assert_eq!(json(&other)["type"], "/problems/idempotency-key-mismatch");
    assert_eq!(setup.requests(), ops(&[("PutItem", 1)]));
    assert_eq!(setup.things().await, ["lamp"]);

    let missing = api_event("POST", "/things", Some("alice"), &[], r#"{"name":"sofa"}"#);
    let missing = call(&mut function, missing).await;
    assert_eq!(missing.status(), 400);
    assert_eq!(json(&missing)["type"], "/problems/idempotency-key-missing");
    assert!(
        setup.requests().is_empty(),
        "a refused request costs nothing"
    );
    assert_eq!(setup.things().await, ["lamp"]);
}

#[tokio::test]
async fn a_request_while_the_first_still_runs_is_409_with_retry_after() {
    let setup = setup().await;
    // The example's handler, held until the test lets it go.
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (client, table) = (setup.client.clone(), setup.things_table.clone());
    let (running, gate) = (Arc::clone(&started), Arc::clone(&release));
    let handler = service_fn(move |request| {
        let (client, table) = (client.clone(), table.clone());
        let (running, gate) = (Arc::clone(&running), Arc::clone(&gate));
        async move {
            // Only the request that claimed the key gets here.
            running.notify_one();
            gate.notified().await;
            create_thing(&client, &table, request).await
        }
    });
    let mut function = IdempotencyLayer::new(setup.idempotency(), SCOPE).layer(handler);
    let mut second = function.clone();

    let concurrent = async {
        // Wait until the first holds the key (its handler runs), then send it again.
        started.notified().await;
        let busy = call(&mut second, create("key-3", "lamp")).await;
        release.notify_one();
        busy
    };
    let (first, busy) = tokio::join!(call(&mut function, create("key-3", "lamp")), concurrent);
    assert_eq!(busy.status(), 409);
    assert_eq!(json(&busy)["type"], "/problems/idempotency-key-in-use");
    let retry_after: u64 = busy.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=40).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(first.status(), 201);
    // First: claim, thing, completion; the concurrent one: its refused claim.
    assert_eq!(setup.requests(), ops(&[("PutItem", 3), ("UpdateItem", 1)]));
    let replay = call(&mut second, create("key-3", "lamp")).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(setup.things().await, ["lamp"]);
}

/// Fails the first request it sees after it was sent: the write lands in DynamoDB, and the SDK
/// reports an error (a lost answer, as a timeout or a reset connection gives).
#[derive(Debug, Default)]
struct LoseTheFirstAnswer {
    lost: std::sync::atomic::AtomicBool,
}

impl aws_sdk_dynamodb::config::Intercept for LoseTheFirstAnswer {
    fn name(&self) -> &'static str {
        "LoseTheFirstAnswer"
    }

    fn read_after_transmit(
        &self,
        _context: &aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        Err("the answer was lost on the way back".into())
    }
}

#[tokio::test]
async fn a_put_that_landed_but_failed_then_the_retry_yields_one_thing() {
    let setup = setup().await;
    // The handler's own client: its first PutItem lands, then fails on the SDK side.
    let config = setup
        .client
        .config()
        .to_builder()
        .interceptor(LoseTheFirstAnswer::default())
        .build();
    let things = aws_sdk_dynamodb::Client::from_conf(config);
    let mut function = service(setup.idempotency(), things, setup.things_table.clone());

    let first = function.call(create("key-lost", "lamp")).await;
    assert!(
        first.is_err(),
        "the handler failed: {:?}",
        first.map(|r| r.status())
    );
    assert_eq!(setup.things().await, ["lamp"], "the write landed");

    // The client's retry: the same attempt id, so the same item, written again.
    let retry = call(&mut function, create("key-lost", "lamp")).await;
    assert_eq!(retry.status(), 201);
    let ids: Vec<String> = setup
        .client
        .scan()
        .table_name(&setup.things_table)
        .send()
        .await
        .expect("scan")
        .items()
        .iter()
        .map(|item| item["id"].as_s().unwrap().clone())
        .collect();
    assert_eq!(ids.len(), 1, "one thing: {ids:?}");
    assert_eq!(json(&retry)["id"], ids[0]);
}
