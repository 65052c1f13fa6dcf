//! What the generic layer promises, each case run on the embedded store and on DynamoDB Local:
//! the attempt id survives a failure, a response too large to store is never run again, the
//! first answer is the handler's own response, temporary answers are not stored, the fingerprint
//! tells the query and the body's kind apart, a record outlives its work, empty event keys are
//! missing keys, SQS validation reads the body, and a FIFO batch keeps its order.

use super::{call, problem};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_http::lambda_runtime::{Context, LambdaEvent};
use lambda_http::tower::{Layer, Service};
use lambda_http::{service_fn, Body, Error, Request, Response};
use payonce::idempotency::{
    Attempt, EventError, Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey,
    IdempotencyLayer, IdempotentEvents, RecordKey, RecordState,
};
use payonce::testkit::StoreHarness;
use payonce_tests::stack::api_event;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

const SCOPE: &str = "things.create";

fn layer<H: StoreHarness>(h: &H) -> IdempotencyLayer<H::Store> {
    IdempotencyLayer::new(
        Idempotency::new(h.store().clone(), IdempotencyConfig::default()),
        SCOPE,
    )
}

fn post(key: &str, body: &str) -> Request {
    api_event(
        "POST",
        "/things",
        Some("alice"),
        &[("idempotency-key", key)],
        body,
    )
}

fn record_key(key: &str) -> RecordKey {
    RecordKey::new(SCOPE, "alice", &IdempotencyKey::parse(key).unwrap())
}

/// A handler that answers the statuses of `script` in turn (the last one after that), each with
/// a body naming the attempt it ran under, and counts its runs.
#[derive(Clone)]
struct Scripted {
    script: Arc<Vec<u16>>,
    runs: Arc<AtomicU32>,
    attempts: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn new(script: &[u16]) -> Self {
        Self {
            script: Arc::new(script.to_vec()),
            runs: Arc::default(),
            attempts: Arc::default(),
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    fn attempts(&self) -> Vec<String> {
        self.attempts.lock().unwrap().clone()
    }

    fn service(
        &self,
    ) -> impl Service<Request, Response = Response<Body>, Error = Error, Future = impl Send + 'static>
           + Clone
           + Send
           + 'static {
        let this = self.clone();
        service_fn(move |request: Request| {
            let n = this.runs.fetch_add(1, Ordering::SeqCst) as usize;
            let status = this.script[n.min(this.script.len() - 1)];
            let attempt = request
                .extensions()
                .get::<Attempt>()
                .expect("the layer hands the attempt to the handler")
                .attempt_id
                .clone();
            this.attempts.lock().unwrap().push(attempt.clone());
            async move {
                Ok::<_, Error>(
                    Response::builder()
                        .status(status)
                        .body(Body::from(json!({"attempt": attempt}).to_string()))
                        .unwrap(),
                )
            }
        })
    }
}

/// A 5xx hands the attempt back: the retry runs under the same attempt id (a downstream key
/// derived from it repeats), and its answer is stored.
async fn a_server_error_keeps_the_attempt_id_for_the_retry<H: StoreHarness>(h: H) {
    let handler = Scripted::new(&[503, 201]);
    let mut service = layer(&h).layer(handler.service());

    let first = call(&mut service, post("k-5xx", "{}")).await;
    assert_eq!(first.status(), 503);
    let kept = h.raw(&record_key("k-5xx")).await.expect("the record stays");
    assert!(
        matches!(&kept.state, RecordState::InProgress { lease } if lease.was_released()),
        "{kept:?}"
    );
    let retry = call(&mut service, post("k-5xx", "{}")).await;
    assert_eq!(retry.status(), 201);
    let replay = call(&mut service, post("k-5xx", "{}")).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    let attempts = handler.attempts();
    assert_eq!(
        attempts.len(),
        2,
        "the 5xx and its retry ran, the replay did not"
    );
    assert_eq!(
        attempts[0], attempts[1],
        "one attempt id across the failure"
    );
    assert_eq!(kept.attempt_id, attempts[0]);
}

/// 408, 425 and 429 are passed on, not stored, and the retry runs; `do_not_store` changes the
/// list.
async fn temporary_answers_are_not_stored<H: StoreHarness>(h: H) {
    for status in [408, 425, 429] {
        let key = format!("k-{status}");
        let handler = Scripted::new(&[status, 201]);
        let mut service = layer(&h).layer(handler.service());
        assert_eq!(call(&mut service, post(&key, "{}")).await.status(), status);
        assert_eq!(call(&mut service, post(&key, "{}")).await.status(), 201);
        assert_eq!(handler.runs(), 2, "{status} was not replayed");
    }
    let handler = Scripted::new(&[429, 201]);
    let mut service = layer(&h).do_not_store([]).layer(handler.service());
    assert_eq!(
        call(&mut service, post("k-429-kept", "{}")).await.status(),
        429
    );
    let replay = call(&mut service, post("k-429-kept", "{}")).await;
    assert_eq!(replay.status(), 429);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(handler.runs(), 1);
}

/// The first answer is the handler's own response: its cookies and its non-ASCII header values
/// reach the client; the stored copy replays neither the cookie nor a value it cannot hold.
async fn the_first_answer_is_the_handlers_own_response<H: StoreHarness>(h: H) {
    let handler = service_fn(|_request: Request| async {
        Ok::<_, Error>(
            Response::builder()
                .status(201)
                .header("set-cookie", "session=abc; HttpOnly; Secure")
                .header(
                    "x-display-name",
                    lambda_http::http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
                )
                .header("x-plain", "kept")
                .body(Body::from(r#"{"id":"thing_1"}"#))
                .unwrap(),
        )
    });
    let mut service = layer(&h).layer(handler);
    let first = call(&mut service, post("k-cookie", "{}")).await;
    assert_eq!(
        first.headers()["set-cookie"],
        "session=abc; HttpOnly; Secure"
    );
    assert_eq!(first.headers()["x-display-name"].as_bytes(), b"caf\xc3\xa9");
    assert!(first.headers().get("idempotent-replayed").is_none());

    let replay = call(&mut service, post("k-cookie", "{}")).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert!(
        replay.headers().get("set-cookie").is_none(),
        "a session is never replayed"
    );
    assert_eq!(replay.headers()["x-plain"], "kept");
    assert_eq!(replay.body().as_ref(), br#"{"id":"thing_1"}"#);
}

/// The default fingerprint covers the query string, whatever the order its names arrive in (a
/// REST API or ALB event rebuilds the query from a map) but not the order of one name's values,
/// and a text body is not its JSON string.
async fn the_fingerprint_covers_the_query_and_the_body_kind<H: StoreHarness>(h: H) {
    let handler = Scripted::new(&[201]);
    let mut service = layer(&h).layer(handler.service());
    let with_query_key = |key: &str, query: &str| {
        let mut request = post(key, "{}");
        *request.uri_mut() = format!("https://payonce.example.com/things?{query}")
            .parse()
            .unwrap();
        request
    };
    let with_query = |query: &str| with_query_key("k-query", query);
    assert_eq!(
        call(&mut service, with_query("size=1&color=red"))
            .await
            .status(),
        201
    );
    let reordered = call(&mut service, with_query("color=red&size=1")).await;
    assert_eq!(reordered.status(), 201);
    assert_eq!(reordered.headers()["idempotent-replayed"], "true");
    let other = call(&mut service, with_query("size=2&color=red")).await;
    assert_eq!(other.status(), 422);
    assert_eq!(problem(&other), "/problems/idempotency-key-mismatch");
    // A name's values keep their order: another order of them is another request.
    let tags = call(&mut service, with_query_key("k-tags", "tag=b&tag=a")).await;
    assert_eq!(tags.status(), 201);
    let swapped = call(&mut service, with_query_key("k-tags", "tag=a&tag=b")).await;
    assert_eq!(swapped.status(), 422);

    assert_eq!(
        call(&mut service, post("k-kind", "hello")).await.status(),
        201
    );
    let json_string = call(&mut service, post("k-kind", r#""hello""#)).await;
    assert_eq!(
        json_string.status(),
        422,
        "a text body is not the JSON string \"hello\""
    );
    assert_eq!(handler.runs(), 3);
}

/// A response over the item limit is the first request's answer; a duplicate gets a problem of
/// its own and nothing runs. A binary body is stored as base64, so one that hex would have
/// pushed over the limit is replayed.
async fn an_oversized_response_runs_once_and_its_duplicate_is_told_so<H: StoreHarness>(h: H) {
    let runs = Arc::new(AtomicU32::new(0));
    let bytes = |size: usize| {
        let runs = Arc::clone(&runs);
        service_fn(move |_request: Request| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok::<_, Error>(
                    Response::builder()
                        .status(200)
                        .header("content-type", "application/octet-stream")
                        .body(Body::Binary(vec![0xA5; size]))
                        .unwrap(),
                )
            }
        })
    };
    let mut huge = layer(&h).layer(bytes(500 * 1024));
    let first = call(&mut huge, post("k-huge", "{}")).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.body().as_ref().len(), 500 * 1024);
    for _ in 0..3 {
        let again = call(&mut huge, post("k-huge", "{}")).await;
        assert_eq!(again.status(), 409);
        assert_eq!(problem(&again), "/problems/idempotency-result-too-large");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never run again");
    assert!(matches!(
        h.raw(&record_key("k-huge")).await.unwrap().state,
        RecordState::Completed { .. }
    ));

    // 250 KB: 500 KB as hex (over the limit), 333 KB as base64 (stored).
    let mut large = layer(&h).layer(bytes(250 * 1024));
    call(&mut large, post("k-large", "{}")).await;
    let replay = call(&mut large, post("k-large", "{}")).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.body().as_ref(), vec![0xA5; 250 * 1024].as_slice());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// When the record of a response cannot be written even after retries, the client still gets
/// the handler's response, not a 503 inviting a retry that runs it again.
async fn an_unrecorded_response_is_still_the_answer<H: StoreHarness>(h: H) {
    let faults = h.faults().clone();
    let handler = service_fn(move |_request: Request| {
        // Every completion try fails on the way.
        faults.inject_backend_failures(100);
        async {
            Ok::<_, Error>(
                Response::builder()
                    .status(201)
                    .body(Body::from("made"))
                    .unwrap(),
            )
        }
    });
    let mut service = layer(&h).layer(handler);
    let answer = call(&mut service, post("k-unrecorded", "{}")).await;
    h.faults().inject_backend_failures(0);
    assert_eq!(answer.status(), 201);
    assert_eq!(answer.body().as_ref(), b"made");
}

/// A message handler with counted runs, for the event cases.
fn counted(runs: &AtomicU32) -> impl Fn(Value) -> std::future::Ready<Result<Value, String>> + '_ {
    move |event: Value| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(Ok(json!({"run": n, "event": event["body"]})))
    }
}

fn events<H: StoreHarness>(h: &H, scope: &str, pointer: &str) -> IdempotentEvents<H::Store> {
    IdempotentEvents::new(
        Idempotency::new(h.store().clone(), IdempotencyConfig::default()),
        scope,
        pointer,
    )
}

fn sqs_message(id: &str, group: Option<&str>, body: Value) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(id.to_owned());
    message.receipt_handle = Some(format!("receipt-{}", uuid::Uuid::new_v4()));
    message.body = Some(body.to_string());
    message.attributes = group
        .map(|g| HashMap::from([("MessageGroupId".to_owned(), g.to_owned())]))
        .unwrap_or_default();
    message
}

fn batch(messages: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    event.records = messages;
    LambdaEvent::new(event, Context::default())
}

fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// `""`, `[]`, `{}` and arrays of nulls are missing keys (nothing written, the work not run);
/// `0` and `false` are keys.
async fn empty_event_keys_are_missing_keys<H: StoreHarness>(h: H) {
    let events = events(&h, "orders.ship", "/order_id");
    let runs = AtomicU32::new(0);
    for empty in [
        json!(""),
        json!([]),
        json!({}),
        json!([null, null]),
        json!(null),
    ] {
        let outcome = events
            .run(json!({"order_id": empty}), None, counted(&runs))
            .await;
        assert!(
            matches!(outcome, Err(EventError::MissingKey)),
            "{empty}: {outcome:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    for key in [json!(0), json!(false)] {
        events
            .run(json!({"order_id": key}), None, counted(&runs))
            .await
            .unwrap();
        let digest = Fingerprint::of_value(&key);
        let record = RecordKey::new(
            "orders.ship",
            "event",
            &IdempotencyKey::parse(digest.as_str()).unwrap(),
        );
        assert!(h.raw(&record).await.is_some(), "{key} is a key");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// On SQS, `payload_validation("")` compares message bodies: a redelivery (new receipt handle,
/// higher receive count) is the same message, and another body under the key is refused.
async fn sqs_payload_validation_reads_the_body<H: StoreHarness>(h: H) {
    let events = events(&h, "orders.ship", "/body/order_id").payload_validation("");
    let runs = AtomicU32::new(0);
    let first = sqs_message("m-1", None, json!({"order_id": "ord_1", "qty": 1}));
    let mut redelivered = sqs_message("m-1", None, json!({"order_id": "ord_1", "qty": 1}));
    redelivered
        .attributes
        .insert("ApproximateReceiveCount".into(), "2".into());
    let changed = sqs_message("m-2", None, json!({"order_id": "ord_1", "qty": 9}));

    let answers = [
        events.sqs_batch(batch(vec![first]), counted(&runs)).await,
        events
            .sqs_batch(batch(vec![redelivered]), counted(&runs))
            .await,
        events.sqs_batch(batch(vec![changed]), counted(&runs)).await,
    ];
    assert_eq!(failed_ids(&answers[0]), Vec::<String>::new());
    assert_eq!(
        failed_ids(&answers[1]),
        Vec::<String>::new(),
        "a redelivery is no mismatch"
    );
    assert_eq!(
        failed_ids(&answers[2]),
        vec!["m-2"],
        "another body under the key is refused"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A message whose result is 500 KB runs its work once across three redeliveries, and none of
/// them is reported as a failure.
async fn an_sqs_result_over_the_limit_runs_once_across_redeliveries<H: StoreHarness>(h: H) {
    let events = events(&h, "reports.build", "/body/report_id");
    let runs = AtomicU32::new(0);
    let big = |_event: Value| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, String>(json!("r".repeat(500 * 1024))))
    };
    for delivery in 0..4 {
        let message = sqs_message("m-report", None, json!({"report_id": "rep_1"}));
        let answer = events.sqs_batch(batch(vec![message]), big).await;
        assert_eq!(
            failed_ids(&answer),
            Vec::<String>::new(),
            "delivery {delivery}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A FIFO batch stops at its first failure: that message and every later one are reported
/// (the later ones not run); with `skip_group_on_error`, only the failed group's later ones,
/// where a message without a group counts as every group.
async fn a_fifo_batch_keeps_its_order_after_a_failure<H: StoreHarness>(h: H) {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let work = |event: Value| {
        let id = event["body"]["id"].as_str().unwrap().to_owned();
        runs.lock().unwrap().push(id.clone());
        std::future::ready(if id.starts_with("bad") {
            Err(format!("{id} failed"))
        } else {
            Ok(json!(id))
        })
    };
    let messages = || {
        vec![
            sqs_message("1", Some("a"), json!({"id": "a1"})),
            sqs_message("2", Some("a"), json!({"id": "bad-a2"})),
            sqs_message("3", Some("b"), json!({"id": "b1"})),
            sqs_message("4", Some("a"), json!({"id": "a3"})),
        ]
    };

    let strict = events(&h, "fifo.strict", "/body/id");
    let answer = strict.sqs_fifo_batch(batch(messages()), work).await;
    assert_eq!(failed_ids(&answer), vec!["2", "3", "4"]);
    assert_eq!(*runs.lock().unwrap(), vec!["a1", "bad-a2"]);

    runs.lock().unwrap().clear();
    let by_group = events(&h, "fifo.groups", "/body/id").skip_group_on_error(true);
    let answer = by_group.sqs_fifo_batch(batch(messages()), work).await;
    assert_eq!(failed_ids(&answer), vec!["2", "4"]);
    assert_eq!(*runs.lock().unwrap(), vec!["a1", "bad-a2", "b1"]);

    // A message without a group could be of any group: its failure holds every later message
    // back, and it waits for any earlier failure.
    runs.lock().unwrap().clear();
    let ungrouped = events(&h, "fifo.ungrouped", "/body/id").skip_group_on_error(true);
    let answer = ungrouped
        .sqs_fifo_batch(
            batch(vec![
                sqs_message("1", None, json!({"id": "bad-n1"})),
                sqs_message("2", None, json!({"id": "n2"})),
                sqs_message("3", Some("a"), json!({"id": "a1"})),
            ]),
            work,
        )
        .await;
    assert_eq!(failed_ids(&answer), vec!["1", "2", "3"]);
    assert_eq!(*runs.lock().unwrap(), vec!["bad-n1"]);

    runs.lock().unwrap().clear();
    let answer = ungrouped
        .sqs_fifo_batch(
            batch(vec![
                sqs_message("4", Some("a"), json!({"id": "bad-a4"})),
                sqs_message("5", Some("b"), json!({"id": "b5"})),
                sqs_message("6", None, json!({"id": "n6"})),
            ]),
            work,
        )
        .await;
    assert_eq!(failed_ids(&answer), vec!["4", "6"]);
    assert_eq!(*runs.lock().unwrap(), vec!["bad-a4", "b5"]);
}

macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(payonce_tests::memory_harness()).await;
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(payonce_tests::dynamo_harness().await).await;
                }
            )*
        }
    };
}

on_both_stores!(
    a_server_error_keeps_the_attempt_id_for_the_retry,
    temporary_answers_are_not_stored,
    the_first_answer_is_the_handlers_own_response,
    the_fingerprint_covers_the_query_and_the_body_kind,
    an_oversized_response_runs_once_and_its_duplicate_is_told_so,
    an_unrecorded_response_is_still_the_answer,
    empty_event_keys_are_missing_keys,
    sqs_payload_validation_reads_the_body,
    an_sqs_result_over_the_limit_runs_once_across_redeliveries,
    a_fifo_batch_keeps_its_order_after_a_failure,
);
