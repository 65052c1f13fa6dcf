//! Operator-grade logs: what the functions write at TRACE, through their own subscriber, is flat
//! JSON with the invocation's ids, and carries no token, secret, signature or webhook body.

mod metrics;
mod xray;

use lambda_http::lambda_runtime::layers::trace::request_span;
use lambda_http::lambda_runtime::Context;
use payonce::adapters::sqs::SqsQueue;
use payonce::clock::{Clock, SystemClock};
use payonce::ports::QueueReceive;
use payonce::service::REFUND_OAUTH_SCOPE;
use payonce_fake_psp::{sign_webhook, DEFAULT_WEBHOOK_SECRET};
use payonce_tests::logs::LogCapture;
use payonce_tests::queue::sqs_event;
use payonce_tests::queue::SqsHarness;
use payonce_tests::stack::{api_event, scoped_api_event, PaymentStack, Reply, FAKE_API_KEY, STAFF};
use serde_json::{json, Value};
use std::future::Future;
use std::time::Duration;
use tracing::Instrument;

const USER: &str = "alice";

/// A bearer token shaped as the identity provider's: a signed JWT (header, claims, signature).
const JWT: &str = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InBheW9uY2UtdGVzdCJ9.eyJpc3MiOiJodHRwczovL2lzc3Vlci5leGFtcGxlLmNvbSIsInN1YiI6ImFsaWNlIiwic2NvcGUiOiJwYXltZW50czpyZWZ1bmQiLCJleHAiOjE3OTYwMDM2MDB9.c2lnbmF0dXJlLW9mLXRoZS1pZGVudGl0eS1wcm92aWRlcg";

/// Runs one invocation as the Lambda runtime does: inside its `request_span`, after its own
/// TRACE line of the raw event (which carries the `Authorization` header and the body).
async fn invoke<T>(request_id: &str, raw_event: &Value, handler: impl Future<Output = T>) -> T {
    let mut context = Context::default();
    context.request_id = request_id.to_owned();
    context.xray_trace_id = Some(format!(
        "Root=1-6650f2a0-{};Parent=53995c3f42cd8ad8;Sampled=1",
        &uuid::Uuid::new_v4().simple().to_string()[..24]
    ));
    let span = request_span(&context);
    async {
        // What `lambda_runtime::layers::api_response` logs for every invocation at TRACE.
        tracing::trace!(
            target: "lambda_runtime::layers::api_response",
            body = %raw_event,
            "raw JSON event received from Lambda"
        );
        handler.await
    }
    .instrument(span)
    .await
}

/// The raw API Gateway event's parts that matter here: the headers and the body.
fn raw_event(headers: &[(&str, &str)], body: &str) -> Value {
    let headers: serde_json::Map<_, _> = headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect();
    json!({"version": "2.0", "headers": headers, "body": body})
}

/// Where `needle` is followed by a token character (a token, not just its masked prefix).
fn token_after(line: &str, needle: &str) -> bool {
    line.match_indices(needle).any(|(at, _)| {
        line[at + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[tokio::test]
async fn a_charge_a_webhook_and_a_refund_logged_at_trace_show_no_token_or_secret() {
    // GIVEN the functions' own subscriber at TRACE, a stack on the fake PSP (Stripe face), its
    // webhooks kept at a loopback endpoint, and the receiver in front of an SQS queue on moto
    let (logs, _capture) = LogCapture::install();
    let stack = PaymentStack::start().await;
    let sink = stack.webhook_sink().await;
    let sqs = SqsHarness::new().await;
    let queue = SqsQueue::new(sqs.client.clone(), sqs.queue_url.clone(), 262_144);
    let receiver = stack.receiver(queue.clone());
    let bearer = format!("Bearer {JWT}");
    let order = stack.create_order(USER).await;

    // WHEN alice pays with a bearer token and the PSP's answer is lost on the way back
    let pay_body =
        json!({"order_id": order, "order_version": 1, "payment_method": "pm_fake_lost_response"})
            .to_string();
    let pay_headers = [
        ("idempotency-key", "k-1"),
        ("authorization", bearer.as_str()),
    ];
    let pay = || api_event("POST", "/payments", Some(USER), &pay_headers, &pay_body);
    let first = invoke("charge-1", &raw_event(&pay_headers, &pay_body), async {
        Reply::from(payonce_charge::handler::handle(&stack.charge, pay()).await)
    })
    .await;
    assert_eq!(
        (first.status, first.json["status"].as_str()),
        (202, Some("processing")),
        "{}",
        first.body
    );
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();

    // AND the PSP's signed success webhook goes through the receiver, SQS and the processor
    let body = sink
        .wait_for(1, |event| event["type"] == "payment_intent.succeeded")
        .await
        .remove(0);
    let signature = sign_webhook(DEFAULT_WEBHOOK_SECRET, SystemClock.now_s(), body.as_bytes());
    let hook_headers = [("stripe-signature", signature.as_str())];
    let received = invoke("receiver-1", &raw_event(&hook_headers, &body), async {
        let request = api_event("POST", "/webhooks/fake", None, &hook_headers, &body);
        Reply::from(payonce_webhook::receiver::handle(&receiver, request).await)
    })
    .await;
    assert_eq!(received.status, 200, "{}", received.body);
    let messages = queue
        .receive(10, Duration::from_secs(30))
        .await
        .expect("receive from moto");
    assert_eq!(messages.len(), 1);
    let event = sqs_event(&messages);
    let raw = serde_json::to_value(&event).expect("the SQS event as JSON");
    let batch = invoke("processor-1", &raw, async {
        payonce_webhook::processor::handle(&stack.processor, event).await
    })
    .await;
    assert!(batch.batch_item_failures.is_empty());
    assert_eq!(
        stack.payment(&payment_id).await.status.as_str(),
        "succeeded"
    );

    // AND alice's retry replays the success
    let replay = invoke("charge-2", &raw_event(&pay_headers, &pay_body), async {
        Reply::from(payonce_charge::handler::handle(&stack.charge, pay()).await)
    })
    .await;
    assert_eq!(replay.status, 201, "{}", replay.body);

    // AND a payment method the PSP does not know is rejected (its message quotes the token)
    let other = stack.create_order(USER).await;
    let unknown_body =
        json!({"order_id": other, "order_version": 1, "payment_method": "pm_card_nonexistent"})
            .to_string();
    let unknown_headers = [
        ("idempotency-key", "k-2"),
        ("authorization", bearer.as_str()),
    ];
    let rejected = invoke(
        "charge-3",
        &raw_event(&unknown_headers, &unknown_body),
        async {
            let request = api_event(
                "POST",
                "/payments",
                Some(USER),
                &unknown_headers,
                &unknown_body,
            );
            Reply::from(payonce_charge::handler::handle(&stack.charge, request).await)
        },
    )
    .await;
    assert_eq!(rejected.status / 100, 4, "{}", rejected.body);

    // AND staff refund part of the payment with their own bearer token
    let refund_body = json!({"amount": 1000}).to_string();
    let refund_headers = [
        ("idempotency-key", "r-1"),
        ("authorization", bearer.as_str()),
    ];
    let refunded = invoke(
        "refund-1",
        &raw_event(&refund_headers, &refund_body),
        async {
            let request = scoped_api_event(
                "POST",
                &format!("/payments/{payment_id}/refunds"),
                Some(STAFF),
                &[REFUND_OAUTH_SCOPE],
                &refund_headers,
                &refund_body,
            );
            Reply::from(
                payonce_refund::handler::handle(&stack.refunds, &stack.operations, request).await,
            )
        },
    )
    .await;
    assert_eq!(refunded.status, 201, "{}", refunded.body);

    // THEN every line is one flat JSON object with a timestamp, a level and cold_start
    let lines = logs.lines();
    let events = logs.events();
    assert_eq!(events.len(), lines.len(), "every line is JSON: {lines:#?}");
    assert!(
        events.iter().any(|e| e["message"] == "webhook queued")
            && events.iter().any(|e| e["message"] == "webhook applied")
            && events
                .iter()
                .any(|e| e["message"] == "the PSP rejected the payment method"),
        "{lines:#?}"
    );
    for (line, event) in lines.iter().zip(&events) {
        let stamp = event["timestamp"].as_str().unwrap_or_default();
        assert!(
            stamp.len() == 24 && stamp.ends_with('Z'),
            "RFC 3339 UTC with milliseconds: {line}"
        );
        assert!(
            event["level"].is_string() && event["message"].is_string(),
            "{line}"
        );
        assert!(event["cold_start"].is_boolean(), "{line}");
        assert!(
            event.get("fields").is_none() && event.get("span").is_none(),
            "{line}"
        );
        // AND other crates never log below INFO, whatever the level (the runtime's raw event,
        // the SDK's signing, hyper's frames)
        let target = event["target"].as_str().unwrap_or_default();
        if !payonce::logging::LevelRule::is_own(target) {
            assert!(
                matches!(event["level"].as_str(), Some("INFO" | "WARN" | "ERROR")),
                "{line}"
            );
        }
    }
    // AND each handler's lines carry their invocation's request id and X-Ray trace id; only the
    // first invocation is a cold start
    let of = |request_id: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["function_request_id"] == request_id)
            .collect()
    };
    for request_id in [
        "charge-1",
        "receiver-1",
        "processor-1",
        "charge-2",
        "charge-3",
        "refund-1",
    ] {
        let lines = of(request_id);
        if request_id != "refund-1" {
            assert!(!lines.is_empty(), "no line of {request_id}");
        }
        for line in lines {
            assert!(
                line["xray_trace_id"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("Root=1-")),
                "{line}"
            );
            assert_eq!(line["cold_start"], request_id == "charge-1", "{line}");
        }
    }
    let queued = of("receiver-1");
    assert!(
        queued.iter().any(|e| e["message"] == "webhook queued"),
        "{queued:#?}"
    );
    let applied = of("processor-1");
    assert!(
        applied
            .iter()
            .any(|e| e["message"] == "webhook applied" && e["message_id"].is_string()),
        "the processor's span fields are on its lines: {applied:#?}"
    );
    assert!(of("charge-3")
        .iter()
        .any(|e| e["message"] == "the PSP rejected the payment method"));

    // AND no line holds the bearer token, any JWT, the PSP API key, the webhook secret, the
    // signature header or its digest, the webhook body, or a payment method token
    let digest = signature.split("v1=").nth(1).expect("a v1 signature");
    let forbidden = [
        JWT,
        "eyJ",
        "Bearer",
        FAKE_API_KEY,
        DEFAULT_WEBHOOK_SECRET,
        signature.as_str(),
        digest,
        body.as_str(),
    ];
    for line in &lines {
        for value in forbidden {
            assert!(!line.contains(value), "a line shows {value:?}: {line}");
        }
        for token in ["pm_", "tokn_", "sk_", "whsec_"] {
            assert!(
                !token_after(line, token),
                "a line shows a {token} token: {line}"
            );
        }
    }
}
