//! The lambda_http layer's options on the embedded store: identity, 5xx answers and failures
//! not stored, requests without a key, payload validation; and the event wrapper's.

use super::{call, problem};
use lambda_http::lambda_runtime::{Context, LambdaEvent};
use lambda_http::tower::{Layer, Service};
use lambda_http::{service_fn, Body, Error, Request, Response};
use payonce::adapters::memory::MemoryIdempotencyStore;
use payonce::idempotency::{
    EventError, Idempotency, IdempotencyConfig, IdempotencyLayer, IdempotentEvents,
};
use payonce_tests::stack::api_event;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn store() -> MemoryIdempotencyStore {
    MemoryIdempotencyStore::default()
}

/// A handler answering `status` with a body counting its runs.
fn counting(
    status: u16,
    runs: &Arc<AtomicU32>,
) -> impl Service<Request, Response = Response<Body>, Error = Error, Future = impl Send + 'static>
       + Clone
       + Send
       + 'static {
    let runs = Arc::clone(runs);
    service_fn(move |_request: Request| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            Ok::<_, Error>(
                Response::builder()
                    .status(status)
                    .body(Body::from(format!("{{\"run\":{n}}}")))
                    .unwrap(),
            )
        }
    })
}

fn post(user: Option<&str>, key: Option<&str>, body: &str) -> Request {
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    api_event("POST", "/things", user, &headers, body)
}

#[tokio::test]
async fn a_server_error_is_passed_on_and_not_stored_so_the_retry_runs_again() {
    let runs = Arc::new(AtomicU32::new(0));
    let store = store();
    let mut service = IdempotencyLayer::new(
        Idempotency::new(store.clone(), IdempotencyConfig::default()),
        "things.create",
    )
    .layer(counting(503, &runs));
    let first = call(&mut service, post(Some("alice"), Some("k"), "{}")).await;
    assert_eq!(first.status(), 503);
    let retry = call(&mut service, post(Some("alice"), Some("k"), "{}")).await;
    assert_eq!(retry.status(), 503);
    assert!(retry.headers().get("idempotent-replayed").is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 2, "a 5xx is never replayed");
    assert_eq!(store.len(), 1, "the record stays, its lease handed back");
}

#[tokio::test]
async fn a_client_error_is_stored_and_replayed_like_any_answer() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut service = IdempotencyLayer::new(
        Idempotency::new(store(), IdempotencyConfig::default()),
        "things.create",
    )
    .layer(counting(402, &runs));
    call(&mut service, post(Some("alice"), Some("k"), "{}")).await;
    let replay = call(&mut service, post(Some("alice"), Some("k"), "{}")).await;
    assert_eq!(replay.status(), 402);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.body().as_ref(), br#"{"run":1}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn identity_keys_and_fingerprints_follow_the_options() {
    let runs = Arc::new(AtomicU32::new(0));
    let store = store();
    let idempotency = || Idempotency::new(store.clone(), IdempotencyConfig::default());

    // No identity: 401, nothing run or written.
    let mut default =
        IdempotencyLayer::new(idempotency(), "things.create").layer(counting(201, &runs));
    let anonymous = call(&mut default, post(None, Some("k"), "{}")).await;
    assert_eq!(
        (anonymous.status().as_u16(), problem(&anonymous)),
        (401, "/problems/unauthorized".to_owned())
    );
    let bad_key = call(&mut default, post(Some("alice"), Some("has space"), "{}")).await;
    assert_eq!(
        (bad_key.status().as_u16(), problem(&bad_key)),
        (400, "/problems/idempotency-key-invalid".to_owned())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.is_empty());

    // A key-less request runs unprotected when allowed.
    let mut optional = IdempotencyLayer::new(idempotency(), "things.create")
        .raise_on_missing_key(false)
        .layer(counting(201, &runs));
    assert_eq!(
        call(&mut optional, post(Some("alice"), None, "{}"))
            .await
            .status(),
        201
    );
    assert_eq!(
        call(&mut optional, post(Some("alice"), None, "{}"))
            .await
            .status(),
        201
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(store.is_empty());

    // A custom identity (an API key id header here) scopes the key.
    let mut by_tenant = IdempotencyLayer::new(idempotency(), "things.create")
        .identity(|request: &Request| {
            request
                .headers()
                .get("x-tenant")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .layer(counting(201, &runs));
    let tenant = |t: &str| {
        api_event(
            "POST",
            "/things",
            None,
            &[("idempotency-key", "k"), ("x-tenant", t)],
            "{}",
        )
    };
    call(&mut by_tenant, tenant("t1")).await;
    call(&mut by_tenant, tenant("t2")).await;
    let again = call(&mut by_tenant, tenant("t1")).await;
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 4);

    // Payload validation: only /amount must match; a changed note is the same request.
    let mut validated = IdempotencyLayer::new(idempotency(), "payments.create")
        .payload_validation("/amount")
        .layer(counting(201, &runs));
    call(
        &mut validated,
        post(Some("alice"), Some("p"), r#"{"amount":100,"note":"a"}"#),
    )
    .await;
    let note = call(
        &mut validated,
        post(Some("alice"), Some("p"), r#"{"note":"b","amount":100}"#),
    )
    .await;
    assert_eq!(note.headers()["idempotent-replayed"], "true");
    let amount = call(
        &mut validated,
        post(Some("alice"), Some("p"), r#"{"amount":200,"note":"a"}"#),
    )
    .await;
    assert_eq!(
        (amount.status().as_u16(), problem(&amount)),
        (422, "/problems/idempotency-key-mismatch".to_owned())
    );
    assert_eq!(runs.load(Ordering::SeqCst), 5);

    // The default fingerprint ignores key order and spacing, not values.
    let mut plain =
        IdempotencyLayer::new(idempotency(), "things.create").layer(counting(201, &runs));
    call(&mut plain, post(Some("bob"), Some("q"), r#"{"a":1,"b":2}"#)).await;
    let reordered = call(
        &mut plain,
        post(Some("bob"), Some("q"), r#"{ "b": 2, "a": 1 }"#),
    )
    .await;
    assert_eq!(reordered.headers()["idempotent-replayed"], "true");
    let changed = call(&mut plain, post(Some("bob"), Some("q"), r#"{"a":1,"b":3}"#)).await;
    assert_eq!(changed.status(), 422);
    assert_eq!(runs.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn events_are_handled_once_per_key_and_validated_when_asked() {
    let store = store();
    let events = IdempotentEvents::new(
        Idempotency::new(store.clone(), IdempotencyConfig::default()),
        "orders.ship",
        "/detail/order_id",
    )
    .payload_validation("/detail/amount");
    let runs = AtomicU32::new(0);
    let work = |event: Value| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            Ok::<_, std::convert::Infallible>(
                json!({"run": n, "order": event["detail"]["order_id"]}),
            )
        }
    };
    let event = |order: &str, amount: u32| {
        LambdaEvent::new(
            json!({"detail": {"order_id": order, "amount": amount}}),
            Context::default(),
        )
    };

    let first = events.handle(event("ord_1", 10), work).await.unwrap();
    let again = events.handle(event("ord_1", 10), work).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(first, json!({"run": 1, "order": "ord_1"}));
    let other = events.handle(event("ord_2", 10), work).await.unwrap();
    assert_eq!(other["run"], 2);
    assert!(matches!(
        events.handle(event("ord_1", 99), work).await,
        Err(EventError::Mismatch)
    ));
    let keyless = LambdaEvent::new(json!({"detail": {}}), Context::default());
    assert!(matches!(
        events.handle(keyless, work).await,
        Err(EventError::MissingKey)
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        store.len(),
        2,
        "one record per order, holding no business data in its key"
    );

    // A failed run stores nothing: the next delivery runs again.
    let failing = IdempotentEvents::new(
        Idempotency::new(store.clone(), IdempotencyConfig::default()),
        "orders.bill",
        "/id",
    );
    let refused = failing
        .run(json!({"id": 7}), None, |_| async {
            Err::<Value, _>("the bank is down")
        })
        .await;
    assert!(matches!(refused, Err(EventError::Work("the bank is down"))));
    let later = failing
        .run(json!({"id": 7}), None, |_| async {
            Ok::<_, &str>(json!("billed"))
        })
        .await;
    assert_eq!(later.unwrap(), json!("billed"));
}

#[test]
#[should_panic(expected = "shorter than the lease")]
fn a_layer_refuses_a_retention_shorter_than_its_lease() {
    let layer = IdempotencyLayer::new(
        Idempotency::new(
            store(),
            IdempotencyConfig::default().expires_after(std::time::Duration::from_secs(20)),
        ),
        "things.create",
    );
    // 20 s of retention holds the lease of a 10-second function, not of a 30-second one.
    let layer = layer.fallback_timeout(std::time::Duration::from_secs(10));
    let _ = layer.fallback_timeout(std::time::Duration::from_secs(30));
}

/// A store that refuses the claim as such (here: its table does not exist) is a deployment
/// fault a retry cannot get past: 500 `internal`, and the handler never runs. A store that
/// fails (unreachable, throttled) is a 503 with `Retry-After` instead (`payments::store_down`).
#[tokio::test]
async fn a_store_that_refuses_the_claim_is_an_internal_error_and_runs_nothing() {
    let client =
        payonce_tests::dynamodb_client(&payonce::adapters::dynamodb::RequestCounter::new());
    let store = payonce::adapters::dynamodb::DynamoIdempotencyStore::new(
        client,
        payonce_tests::unique_table("missing"),
    );
    let runs = Arc::new(AtomicU32::new(0));
    let mut service = IdempotencyLayer::new(
        Idempotency::new(store, IdempotencyConfig::default()),
        "things.create",
    )
    .layer(counting(201, &runs));
    let answer = call(&mut service, post(Some("alice"), Some("k"), "{}")).await;
    assert_eq!(answer.status(), 500);
    assert_eq!(problem(&answer), "/problems/internal");
    assert!(answer.headers().get("retry-after").is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
