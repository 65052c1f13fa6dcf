//! Business metrics: what the services emit in CloudWatch Embedded Metric Format for a charge,
//! a decline, a lost answer settled by its webhook, a redelivered webhook, a forged webhook,
//! a replay and a reconcile run, line by line and count by count.

use payonce::adapters::memory::MemoryQueue;
use payonce::clock::{system_clock, Clock, SystemClock};
use payonce::metrics::{self, MetricsCapture};
use payonce::service::reconcile::ReconcileConfig;
use payonce_fake_psp::sign_webhook;
use payonce_tests::logs::LogCapture;
use payonce_tests::stack::PaymentStack;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const USER: &str = "alice";
const SERVICE: &str = "payonce-test";

/// The metric values of `docs`, summed by metric name and its line's `outcome` (if any).
fn totals(docs: &[Value]) -> BTreeMap<String, f64> {
    let mut totals = BTreeMap::new();
    for doc in docs {
        for definition in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .expect("a Metrics array")
        {
            let name = definition["Name"].as_str().expect("a metric name");
            if name == metrics::PSP_LATENCY {
                continue;
            }
            let key = match doc["outcome"].as_str() {
                Some(outcome) => format!("{name}/{outcome}"),
                None => name.to_owned(),
            };
            *totals.entry(key).or_default() += doc[name].as_f64().expect("a numeric value");
        }
    }
    totals
}

#[tokio::test]
async fn payments_webhooks_and_reconcile_emit_one_emf_line_per_outcome() {
    // GIVEN this thread's metrics captured, and a stack on the fake PSP (Stripe face)
    let (capture, _guard) = MetricsCapture::install(SERVICE);
    // This test runs the log test's callsites, in parallel with it: under the functions' own
    // subscriber here too, tracing never caches them as uninteresting before that test's
    // subscriber exists.
    let (_logs, _log_guard) = LogCapture::install();
    let stack = PaymentStack::start().await;
    let pay = |order: &str, method: &str| json!({"order_id": order, "order_version": 1, "payment_method": method});

    // WHEN alice pays one order (201), is declined on another (402), and loses the PSP's answer
    // on a third (202)
    let paid = stack.create_order(USER).await;
    let reply = stack.pay(USER, "k-paid", pay(&paid, "pm_card_visa")).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let declined = stack.create_order(USER).await;
    let reply = stack
        .pay(
            USER,
            "k-declined",
            pay(&declined, "pm_card_visa_chargeDeclined"),
        )
        .await;
    assert_eq!(reply.status, 402, "{}", reply.body);
    let lost = stack.create_order(USER).await;
    let body = pay(&lost, "pm_fake_lost_response");
    let reply = stack.pay(USER, "k-lost", body.clone()).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let payment_id = reply.json["payment_id"].as_str().unwrap().to_owned();

    // AND the PSP's success webhook settles the lost one, and is delivered once more
    let event = crate::webhooks::event(
        "evt_metrics",
        "payment_intent.succeeded",
        &payment_id,
        "pi_m",
    );
    stack.deliver(&event).await.expect("applied");
    stack.deliver(&event).await.expect("changes nothing");
    assert_eq!(
        stack.payment(&payment_id).await.status.as_str(),
        "succeeded"
    );

    // AND a webhook signed with another secret reaches the receiver (401)
    let receiver = stack.receiver(MemoryQueue::new(system_clock(), 262_144));
    let forged = sign_webhook("whsec_wrong", SystemClock.now_s(), event.as_bytes());
    let mut headers = lambda_http::http::HeaderMap::new();
    headers.insert("stripe-signature", forged.parse().expect("a header value"));
    assert!(receiver
        .receive(stack.webhook_provider, &headers, event.as_bytes())
        .await
        .is_err());

    // AND alice's retry of the lost payment replays its success
    let reply = stack.pay(USER, "k-lost", body).await;
    assert_eq!(reply.status, 201, "{}", reply.body);

    // AND reconcile runs over nothing left to settle
    stack
        .reconciler(ReconcileConfig::default())
        .run()
        .await
        .expect("a reconcile run");

    // THEN every line is one EMF document: namespace payonce, the service dimension, every
    // dimension of every set present as a string, every metric's value a number at the top
    let docs = capture.documents();
    let lines = capture.lines();
    assert_eq!(docs.len(), lines.len(), "every line is JSON: {lines:#?}");
    for doc in &docs {
        let stamp = doc["_aws"]["Timestamp"].as_i64().expect("Timestamp in ms");
        assert!(stamp > 1_700_000_000_000, "{doc}");
        let directives = doc["_aws"]["CloudWatchMetrics"]
            .as_array()
            .expect("directives");
        assert_eq!(directives.len(), 1, "{doc}");
        let directive = &directives[0];
        assert_eq!(directive["Namespace"], "payonce", "{doc}");
        assert_eq!(doc["service"], SERVICE, "{doc}");
        for set in directive["Dimensions"].as_array().expect("dimension sets") {
            let set = set.as_array().expect("a dimension set");
            assert_eq!(set[0], "service", "{doc}");
            for name in set {
                let name = name.as_str().expect("a dimension name");
                assert!(doc[name].is_string(), "{name} of {doc}");
            }
        }
        for definition in directive["Metrics"].as_array().expect("metrics") {
            let name = definition["Name"].as_str().expect("a name");
            let unit = if name == metrics::PSP_LATENCY {
                "Milliseconds"
            } else {
                "Count"
            };
            assert_eq!(definition["Unit"], unit, "{doc}");
            assert!(doc[name].as_f64().is_some_and(|v| v >= 0.0), "{doc}");
        }
        // AND no payment id is ever a dimension value
        assert!(!doc.to_string().contains("pay_"), "{doc}");
    }

    // AND the counts are exactly what happened
    let expected: BTreeMap<String, f64> = [
        (metrics::PAYMENT_SUCCEEDED, 1.0),
        (metrics::PAYMENT_DECLINED, 1.0),
        (metrics::PAYMENT_PENDING, 1.0),
        (metrics::PAYMENT_REPLAYED, 1.0),
        ("PspCalls/approved", 1.0),
        ("PspCalls/declined", 1.0),
        ("PspCalls/unknown", 1.0),
        (metrics::WEBHOOK_APPLIED, 1.0),
        (metrics::WEBHOOK_UNCHANGED, 1.0),
        (metrics::WEBHOOK_SIGNATURE_REJECTED, 1.0),
        (metrics::RECONCILE_SETTLED, 0.0),
        (metrics::RECONCILE_FENCED, 0.0),
        (metrics::RECONCILE_STILL_PENDING, 0.0),
        (metrics::RECONCILE_REFUNDS_SETTLED, 0.0),
        (metrics::RECONCILE_ERRORS, 0.0),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    assert_eq!(totals(&docs), expected, "{lines:#?}");

    // AND each PSP call has its latency, by PSP and by PSP and outcome
    let calls: Vec<&Value> = docs.iter().filter(|d| d["PspCalls"] == 1).collect();
    assert_eq!(calls.len(), 3, "{lines:#?}");
    for call in calls {
        assert!(
            call["psp"].is_string() && call["PspLatency"].as_f64().is_some(),
            "{call}"
        );
        assert_eq!(
            call["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["service", "psp"], ["service", "psp", "outcome"]])
        );
    }
    // AND webhook lines carry the provider as `psp`
    for doc in docs.iter().filter(|d| {
        d.get(metrics::WEBHOOK_APPLIED).is_some() || d.get(metrics::WEBHOOK_DUPLICATE).is_some()
    }) {
        assert_eq!(doc["psp"], stack.webhook_provider, "{doc}");
    }
}
