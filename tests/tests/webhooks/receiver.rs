//! The receiver verifies the raw body before anything else and enqueues only what verifies;
//! every refusal leaves the queue provably empty.

use payonce::adapters::sqs::SqsQueue;
use payonce::clock::{system_clock, Clock, SystemClock};
use payonce::ports::QueueReceive;
use payonce::service::webhooks::WebhookReceiver;
use payonce_fake_psp::sign_webhook;
use payonce_tests::queue::SqsHarness;
use payonce_tests::stack::{api_event, webhook_providers, Reply, STRIPE_WEBHOOK_SECRET};

fn deliver_event(provider: &str, signature: Option<&str>, body: &str) -> lambda_http::Request {
    let headers: Vec<(&str, &str)> = signature
        .map(|s| vec![("stripe-signature", s)])
        .unwrap_or_default();
    api_event(
        "POST",
        &format!("/webhooks/{provider}"),
        None,
        &headers,
        body,
    )
}

#[tokio::test]
async fn signature_attacks_are_refused_and_nothing_is_enqueued() {
    let sqs = SqsHarness::new().await;
    let queue = SqsQueue::new(sqs.client.clone(), sqs.queue_url.clone(), 262_144);
    let receiver = WebhookReceiver::new(webhook_providers(), queue.clone(), system_clock());
    let body = super::event("evt_attack", "payment_intent.succeeded", "pay_1", "pi_1");
    let now = SystemClock.now_s();
    let valid = sign_webhook(STRIPE_WEBHOOK_SECRET, now, body.as_bytes());
    let v1 = valid.split("v1=").nth(1).unwrap().to_owned();

    let attacks: Vec<(&str, Option<String>, String, u16, &str)> = vec![
        (
            "tampered body",
            Some(valid.clone()),
            body.replace("pay_1", "pay_2"),
            401,
            "/problems/webhook-signature-invalid",
        ),
        (
            "wrong secret",
            Some(sign_webhook("whsec_wrong", now, body.as_bytes())),
            body.clone(),
            401,
            "/problems/webhook-signature-invalid",
        ),
        (
            "missing header",
            None,
            body.clone(),
            400,
            "/problems/webhook-signature-missing",
        ),
        (
            "malformed header",
            Some("garbage".into()),
            body.clone(),
            400,
            "/problems/webhook-signature-missing",
        ),
        (
            "no timestamp",
            Some(format!("v1={v1}")),
            body.clone(),
            400,
            "/problems/webhook-signature-missing",
        ),
        (
            "timestamp 301 s old",
            Some(sign_webhook(
                STRIPE_WEBHOOK_SECRET,
                now - 301,
                body.as_bytes(),
            )),
            body.clone(),
            401,
            "/problems/webhook-signature-invalid",
        ),
        (
            "replayed signature of another time",
            Some(format!("t={},v1={v1}", now - 10)),
            body.clone(),
            401,
            "/problems/webhook-signature-invalid",
        ),
        (
            "uppercase signature",
            Some(format!("t={now},v1={}", v1.to_uppercase())),
            body.clone(),
            401,
            "/problems/webhook-signature-invalid",
        ),
        (
            "only v0",
            Some(format!("t={now},v0={v1}")),
            body.clone(),
            401,
            "/problems/webhook-signature-invalid",
        ),
    ];
    for (name, signature, body, status, problem) in attacks {
        let reply = Reply::from(
            payonce_webhook::receiver::handle(
                &receiver,
                deliver_event("stripe", signature.as_deref(), &body),
            )
            .await,
        );
        assert_eq!(
            (reply.status, reply.problem_type()),
            (status, problem),
            "{name}: {}",
            reply.body
        );
    }
    let unknown = Reply::from(
        payonce_webhook::receiver::handle(&receiver, deliver_event("paypal", Some(&valid), &body))
            .await,
    );
    assert_eq!(
        (unknown.status, unknown.problem_type()),
        (404, "/problems/not-found")
    );
    let huge = "x".repeat(1024 * 1024 + 1);
    let too_large = Reply::from(
        payonce_webhook::receiver::handle(&receiver, deliver_event("stripe", Some(&valid), &huge))
            .await,
    );
    assert_eq!(
        (too_large.status, too_large.problem_type()),
        (413, "/problems/body-too-large")
    );
    assert_eq!(queue.depth().await.unwrap(), 0, "nothing was enqueued");

    // Rotation: two v1 values, one valid, is accepted — and only that is enqueued.
    let rotated = format!("t={now},v1={},v1={v1}", "0".repeat(64));
    let accepted = Reply::from(
        payonce_webhook::receiver::handle(
            &receiver,
            deliver_event("stripe", Some(&rotated), &body),
        )
        .await,
    );
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    let received = queue
        .receive(10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].body, body,
        "the raw body is queued byte for byte"
    );
    assert_eq!(
        received[0].attributes.get("provider").map(String::as_str),
        Some("stripe")
    );
    assert_eq!(
        received[0].attributes.get("event_id").map(String::as_str),
        Some("evt_attack")
    );
}

#[tokio::test]
async fn an_unavailable_queue_is_a_5xx_so_the_psp_retries() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client = payonce_tests::queue::sqs_client_at(&format!("http://{closed}"));
    let queue = SqsQueue::new(
        client,
        format!("http://{closed}/123456789012/gone"),
        262_144,
    );
    let receiver = WebhookReceiver::new(webhook_providers(), queue, system_clock());
    let body = super::event("evt_down", "payment_intent.succeeded", "pay_1", "pi_1");
    let signature = sign_webhook(STRIPE_WEBHOOK_SECRET, SystemClock.now_s(), body.as_bytes());
    let reply = Reply::from(
        payonce_webhook::receiver::handle(
            &receiver,
            deliver_event("stripe", Some(&signature), &body),
        )
        .await,
    );
    assert_eq!(
        (reply.status, reply.problem_type()),
        (503, "/problems/service-unavailable"),
        "{}",
        reply.body
    );
    assert!(reply.header("retry-after").is_some());
}

/// What the PSP signed is never answered 400 for what it says. A body that verifies but does not
/// read as an event (a future API version, a thin event) is queued as it is (200) under a dedup
/// id of its own, and the processor fails it every time, so the queue dead-letters it for an
/// operator. A body the queue refuses as it is (a character SQS does not accept) is queued
/// hex-encoded (200, with an alarm), and the processor reads it back and applies it.
async fn verified_bodies_are_never_lost<Q>(queue: Q)
where
    Q: payonce::ports::QueueSend + QueueReceive + Clone + 'static,
{
    use payonce::service::webhooks::{ProcessError, QueuedEvent, WebhookProcessor};
    let receiver = WebhookReceiver::new(webhook_providers(), queue.clone(), system_clock());
    let now = SystemClock.now_s();
    let send = |body: String| {
        let signature = sign_webhook(STRIPE_WEBHOOK_SECRET, now, body.as_bytes());
        let receiver = &receiver;
        async move {
            Reply::from(
                payonce_webhook::receiver::handle(
                    receiver,
                    deliver_event("stripe", Some(&signature), &body),
                )
                .await,
            )
        }
    };
    let processor = WebhookProcessor::new(
        {
            use payonce_tests::stores::PaymentStoreHarness;
            payonce_tests::stores::memory_stores().payments().clone()
        },
        webhook_providers(),
        Default::default(),
    );
    let process = |body: &str| {
        let body = body.to_owned();
        let processor = &processor;
        async move {
            processor
                .process(&QueuedEvent {
                    message_id: "m",
                    provider: Some("stripe"),
                    body: &body,
                })
                .await
        }
    };

    // GIVEN a verified body that is JSON but no event: 200, queued as it is
    let thin = r#"{"object":"v2.core.event","id":"evt_thin","type":"v2.some.future"}"#;
    let reply = send(thin.to_owned()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let queued = queue
        .receive(10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].body, thin);
    assert!(queued[0]
        .attributes
        .get("event_id")
        .is_some_and(|id| id.starts_with("unparsed-")));
    // AND the processor fails it (retried, then dead-lettered by the queue), applying nothing
    assert!(matches!(
        process(&queued[0].body).await,
        Err(ProcessError::Unreadable(_))
    ));

    // GIVEN a verified event whose body holds a character SQS refuses (U+FFFF)
    let odd = super::event("evt_odd", "payment_intent.succeeded", "pay_1", "pi_1")
        .replace("\"jpy\"", "\"jpy\",\"description\":\"\u{FFFF}\"");
    let reply = send(odd.clone()).await;
    // THEN it is accepted, queued with the character escaped, and reads as the same event
    assert_eq!(reply.status, 200, "{}", reply.body);
    let queued = queue
        .receive(10, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(queued.len(), 1);
    assert_ne!(queued[0].body, odd);
    assert!(queued[0].body.contains("\\uffff"), "{}", queued[0].body);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&queued[0].body).unwrap(),
        serde_json::from_str::<serde_json::Value>(&odd).unwrap(),
        "the same event"
    );
    assert_eq!(
        queued[0].attributes.get("event_id").map(String::as_str),
        Some("evt_odd")
    );
    // (the payment it names is not ours here: read, then left to the queue's retries)
    assert!(matches!(
        process(&queued[0].body).await,
        Err(ProcessError::Apply(_))
    ));
}

#[tokio::test]
async fn verified_bodies_are_never_lost_on_sqs() {
    let sqs = SqsHarness::new().await;
    verified_bodies_are_never_lost(SqsQueue::new(
        sqs.client.clone(),
        sqs.queue_url.clone(),
        262_144,
    ))
    .await;
}

#[tokio::test]
async fn verified_bodies_are_never_lost_on_the_embedded_queue() {
    verified_bodies_are_never_lost(payonce::adapters::memory::MemoryQueue::new(
        system_clock(),
        payonce::service::webhooks::MAX_WEBHOOK_BYTES,
    ))
    .await;
}
