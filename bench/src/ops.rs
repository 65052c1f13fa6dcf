//! Requests, capacity and latency of the operations, against DynamoDB Local.

use payonce::adapters::dynamodb::{
    create_idempotency_table, create_payments_table, CapacityMeter, Counts, DynamoIdempotencyStore,
    DynamoPaymentStore, Tables,
};
use payonce::adapters::memory::MemoryIdempotencyStore;
use payonce::adapters::psp::{StripeConfig, StripePsp};
use payonce::clock::{Clock, ManualClock};
use payonce::domain::{CaptureMethod, OperationKind};
use payonce::domain::{LineItem, NewOrder, Order, OrderPaymentState};
use payonce::idempotency::{
    Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey, IdempotencyStore, Outcome,
    RunRequest,
};
use payonce::ports::OrderStore;
use payonce::service::limits::{AttemptLimiter, AttemptLimits};
use payonce::service::reconcile::{ReconcileConfig, Reconciler};
use payonce::service::webhooks::{Processed, ProcessorConfig, QueuedEvent, WebhookProcessor};
use payonce::service::{
    Caller, ChargeConfig, ChargeService, EventApplied, OperationAnswer, OperationCommand,
    OperationConfig, OperationService, PayAnswer, PayRequest, RefundAnswer, RefundCommand,
    RefundConfig, RefundService,
};
use payonce_fake_psp::{FakePsp, FakePspConfig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const ROUNDS: u32 = 20;

fn client(meter: &CapacityMeter) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "bench",
        ))
        .endpoint_url(payonce_tests::dynamodb_endpoint())
        .interceptor(meter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// Measures `op` ROUNDS times: average requests and capacity units per run.
async fn per_op<F, Fut>(meter: &CapacityMeter, mut op: F) -> Value
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut total = Counts::default();
    for i in 0..ROUNDS {
        meter.reset();
        op(i).await;
        add(&mut total, &meter.counts());
    }
    summary(&total, f64::from(ROUNDS))
}

/// Adds `more` to `total`.
fn add(total: &mut Counts, more: &Counts) {
    for (name, (n, units)) in &more.by_operation {
        let entry = total.by_operation.entry(name.clone()).or_default();
        entry.0 += n;
        entry.1 += units;
    }
    for (table, units) in &more.by_table {
        *total.by_table.entry(table.clone()).or_default() += units;
    }
    for (item, n) in &more.writes_by_item {
        *total.writes_by_item.entry(item.clone()).or_default() += n;
    }
}

/// A bench table's run-unique name (`bench-pay-…`, `bench-pay-…/inflight`) as the role it plays.
fn table_role(name: &str) -> String {
    let (table, index) = name
        .split_once('/')
        .map_or((name, None), |(t, i)| (t, Some(i)));
    let role = if table.starts_with("bench-idem") {
        "idempotency"
    } else if table.starts_with("bench-pay") {
        "payments"
    } else {
        table
    };
    index.map_or_else(|| role.to_owned(), |index| format!("{role}/{index}"))
}

/// Requests and capacity per operation, per table or index and in total, and item writes by
/// kind, divided by `per`.
fn summary(counts: &Counts, per: f64) -> Value {
    let requests: u64 = counts.by_operation.values().map(|v| v.0).sum();
    let units: f64 = counts.by_operation.values().map(|v| v.1).sum();
    json!({
        "requests": requests as f64 / per,
        "capacity_units": units / per,
        "by_operation": counts.by_operation
            .iter()
            .map(|(k, (n, u))| (k.clone(), json!({"requests": *n as f64 / per, "capacity_units": u / per})))
            .collect::<serde_json::Map<_, _>>(),
        "by_table": counts.by_table
            .iter()
            .map(|(k, u)| (table_role(k), json!(u / per)))
            .collect::<serde_json::Map<_, _>>(),
        "writes_by_item": counts.writes_by_item
            .iter()
            .map(|(k, n)| (k.clone(), json!(*n as f64 / per)))
            .collect::<serde_json::Map<_, _>>(),
    })
}

struct Stack {
    meter: CapacityMeter,
    clock: std::sync::Arc<ManualClock>,
    records: DynamoIdempotencyStore,
    store: DynamoPaymentStore,
    charge: ChargeService<DynamoPaymentStore, StripePsp>,
    /// The same, counting each new attempt against the deployed default attempt limits.
    limited: ChargeService<DynamoPaymentStore, StripePsp>,
    _psp: payonce_fake_psp::RunningFakePsp,
}

async fn stack() -> Stack {
    let meter = CapacityMeter::default();
    let client = client(&meter);
    let tables = Tables {
        idempotency: payonce_tests::unique_table("bench-idem"),
        payments: payonce_tests::unique_table("bench-pay"),
    };
    create_idempotency_table(&client, &tables.idempotency)
        .await
        .expect("idempotency table");
    create_payments_table(&client, &tables.payments)
        .await
        .expect("payments table");
    let clock = ManualClock::at_system_time();
    let psp = FakePsp::start(
        FakePspConfig::default(),
        "127.0.0.1:0".parse().expect("address"),
    )
    .await
    .expect("fake PSP");
    let stripe = StripePsp::new(StripeConfig::new(
        psp.base_url(),
        payonce_fake_psp::DEFAULT_API_KEY,
    ))
    .expect("client");
    let store = DynamoPaymentStore::new(client.clone(), tables.clone()).with_clock(clock.clone());
    Stack {
        records: DynamoIdempotencyStore::new(client, &tables.idempotency).with_clock(clock.clone()),
        limited: ChargeService::new(store.clone(), stripe.clone(), ChargeConfig::default())
            .with_attempt_limits(AttemptLimiter::new(AttemptLimits::default())),
        charge: ChargeService::new(store.clone(), stripe, ChargeConfig::default()),
        store,
        meter,
        clock,
        _psp: psp,
    }
}

async fn order(stack: &Stack, user: &str) -> Order {
    let new = NewOrder::validate(
        "jpy",
        vec![LineItem {
            sku: "A1".into(),
            quantity: 2,
            unit_amount: 1500,
        }],
        payonce::domain::PspKind::Stripe,
    )
    .expect("order");
    let now = stack.clock.now_ms();
    let order = Order {
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        owner: user.into(),
        version: 1,
        currency: new.currency,
        items: new.items,
        amount: new.amount,
        payment_state: OrderPaymentState::Unpaid,
        payment_id: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    stack
        .store
        .create_order(&order)
        .await
        .expect("create order");
    order
}

async fn pay(stack: &Stack, order: &Order, key: &str, pm: &str) -> PayAnswer {
    pay_with(&stack.charge, stack, order, key, pm).await
}

/// Pays `order` (owned by its owner) through `charge`.
async fn pay_with(
    charge: &ChargeService<DynamoPaymentStore, StripePsp>,
    stack: &Stack,
    order: &Order,
    key: &str,
    pm: &str,
) -> PayAnswer {
    let request = PayRequest {
        order_id: order.order_id.clone(),
        order_version: 1,
        payment_method: pm.into(),
        return_url: None,
        capture: payonce::domain::CaptureMethod::Automatic,
    };
    let key = IdempotencyKey::parse(key).expect("key");
    charge
        .pay(
            &order.owner,
            &key,
            &request,
            stack.clock.now_ms() + 25_000,
            "bench-request",
        )
        .await
        .expect("pay")
}

/// The checkout origin of the bench's 3-D Secure payments.
const CHECKOUT_ORIGIN: &str = "https://shop.example";

/// Pays `order` through `checkout`: with `action`, a 3-D Secure card and a return URL (the
/// answer waits for the customer); without, a manual capture (the answer is an authorization).
async fn checkout_pay(
    checkout: &ChargeService<DynamoPaymentStore, StripePsp>,
    stack: &Stack,
    order: &Order,
    key: &str,
    action: Option<()>,
) -> PayAnswer {
    let request = match action {
        Some(()) => PayRequest {
            order_id: order.order_id.clone(),
            order_version: 1,
            payment_method: "pm_card_threeDSecure2Required".into(),
            return_url: Some(format!("{CHECKOUT_ORIGIN}/return")),
            capture: CaptureMethod::Automatic,
        },
        None => PayRequest {
            order_id: order.order_id.clone(),
            order_version: 1,
            payment_method: "pm_card_visa".into(),
            return_url: None,
            capture: CaptureMethod::Manual,
        },
    };
    let key = IdempotencyKey::parse(key).expect("key");
    checkout
        .pay(
            &order.owner,
            &key,
            &request,
            stack.clock.now_ms() + 25_000,
            "bench-request",
        )
        .await
        .expect("pay")
}

fn run_request<'a>(
    key: &'a IdempotencyKey,
    fingerprint: &Fingerprint,
    deadline_ms: i64,
) -> RunRequest<'a> {
    RunRequest {
        scope: "bench",
        user: "bench",
        key,
        fingerprint: fingerprint.clone(),
        deadline_ms,
    }
}

/// Requests and capacity per operation.
pub async fn requests() -> Value {
    let s = stack().await;
    let layer = Idempotency::new(s.records.clone(), IdempotencyConfig::default());
    let fp = Fingerprint::of_value(&json!({"order_id": "o1", "order_version": 1}));
    let deadline = || s.clock.now_ms() + 10_000;
    let noop = |_| async { Ok::<_, std::convert::Infallible>(json!({"ok": true})) };

    let keys: Vec<IdempotencyKey> = (0..ROUNDS)
        .map(|i| IdempotencyKey::parse(&format!("generic-{i}")).expect("key"))
        .collect();
    let generic_first = per_op(&s.meter, |i| {
        let (layer, key, fp) = (&layer, &keys[i as usize], &fp);
        async move {
            assert!(matches!(
                layer.run(run_request(key, fp, deadline()), noop).await,
                Ok(Outcome::Fresh(_))
            ));
        }
    })
    .await;
    let generic_replay = per_op(&s.meter, |i| {
        let (layer, key, fp) = (&layer, &keys[i as usize], &fp);
        async move {
            assert!(matches!(
                layer.run(run_request(key, fp, deadline()), noop).await,
                Ok(Outcome::Replayed(_))
            ));
        }
    })
    .await;
    // In flight: a duplicate arrives while the first holds the lease (measured inside its work).
    let mut inflight = Vec::new();
    for i in 0..ROUNDS {
        let key = IdempotencyKey::parse(&format!("inflight-{i}")).expect("key");
        let (layer, fp, meter) = (&layer, &fp, &s.meter);
        let _ = layer
            .run(run_request(&key, fp, deadline()), |_| async {
                meter.reset();
                let inner = layer.run(run_request(&key, fp, deadline()), noop).await;
                assert!(matches!(inner, Ok(Outcome::InProgress { .. })));
                inflight.push(meter.total());
                Ok::<_, std::convert::Infallible>(json!(1))
            })
            .await;
    }
    let inflight_dup = json!({
        "requests": inflight.iter().map(|t| t.0 as f64).sum::<f64>() / f64::from(ROUNDS),
        "capacity_units": inflight.iter().map(|t| t.1).sum::<f64>() / f64::from(ROUNDS),
    });

    let mut orders = Vec::new();
    for _ in 0..ROUNDS {
        orders.push(order(&s, "bench").await);
    }
    let charge_first = per_op(&s.meter, |i| {
        let (s, order) = (&s, &orders[i as usize]);
        async move {
            assert!(matches!(
                pay(s, order, &format!("charge-{i}"), "pm_card_visa").await,
                PayAnswer::Fresh(_)
            ));
        }
    })
    .await;
    let charge_replay = per_op(&s.meter, |i| {
        let (s, order) = (&s, &orders[i as usize]);
        async move {
            assert!(matches!(
                pay(s, order, &format!("charge-{i}"), "pm_card_visa").await,
                PayAnswer::Replayed { .. }
            ));
        }
    })
    .await;

    // The first charge as deployed: each new attempt counted against the attempt limits (one
    // user per order, so no counter fills).
    let mut limited_orders = Vec::new();
    for i in 0..ROUNDS {
        limited_orders.push(order(&s, &format!("bench-limited-{i}")).await);
    }
    let charge_first_limited = per_op(&s.meter, |i| {
        let (s, order) = (&s, &limited_orders[i as usize]);
        async move {
            assert!(matches!(
                pay_with(
                    &s.limited,
                    s,
                    order,
                    &format!("limited-{i}"),
                    "pm_card_visa"
                )
                .await,
                PayAnswer::Fresh(_)
            ));
        }
    })
    .await;

    // Webhook apply: events for attempts whose answer was lost.
    let mut lost = Vec::new();
    for i in 0..ROUNDS {
        let o = order(&s, "bench").await;
        let PayAnswer::Fresh(view) =
            pay(&s, &o, &format!("lost-{i}"), "pm_fake_lost_response").await
        else {
            panic!("202 expected")
        };
        lost.push(view.payment_id);
    }
    let processor = WebhookProcessor::new(
        s.store.clone(),
        payonce_tests::stack::webhook_providers(),
        ProcessorConfig::default(),
    );
    let webhook_apply = per_op(&s.meter, |i| {
        let (processor, payment_id) = (&processor, &lost[i as usize]);
        async move {
            let body = json!({"id": format!("evt_bench_{i}"), "type": "payment_intent.succeeded",
                "data": {"object": {"id": format!("pi_bench_{i}"), "metadata": {"payment_id": payment_id}}}})
            .to_string();
            processor.process(&QueuedEvent { message_id: "m", provider: Some("fake"), body: &body }).await.expect("applied");
        }
    })
    .await;

    // Reconcile per attempt: stuck attempts settled from the PSP's lookup.
    for i in 0..ROUNDS {
        let o = order(&s, "bench").await;
        let _ = pay(&s, &o, &format!("stuck-{i}"), "pm_fake_lost_response").await;
    }
    s.clock.advance(Duration::from_secs(600));
    let reconciler = Reconciler::new(
        s.store.clone(),
        s.charge.psp().clone(),
        ReconcileConfig::default(),
    );
    s.meter.reset();
    let report = reconciler.run().await.expect("reconcile");
    let mut reconcile = summary(&s.meter.counts(), f64::from(report.succeeded.max(1)));
    reconcile["settled"] = json!(report.succeeded);

    // The webhook that confirms a payment the charge already recorded (the usual case).
    // (payment id, the PSP's id): the event names the PSP payment the charge recorded, as the
    // PSP's own does (an event naming another is refused, recorded, and is not this case).
    let charged: Vec<(String, String)> = {
        let mut ids = Vec::new();
        for (i, o) in orders.iter().enumerate() {
            if let PayAnswer::Replayed { view, .. } =
                pay(&s, o, &format!("charge-{i}"), "pm_card_visa").await
            {
                let provider_id = view
                    .provider_payment_id
                    .expect("a charged payment has its PSP id");
                ids.push((view.payment_id, provider_id));
            }
        }
        ids
    };
    let webhook_confirm = per_op(&s.meter, |i| {
        let (processor, (payment_id, provider_id)) = (&processor, &charged[i as usize]);
        async move {
            let body = json!({"id": format!("evt_confirm_{i}"), "type": "payment_intent.succeeded",
                "data": {"object": {"id": provider_id, "metadata": {"payment_id": payment_id}}}})
            .to_string();
            let processed = processor
                .process(&QueuedEvent {
                    message_id: "m",
                    provider: Some("fake"),
                    body: &body,
                })
                .await
                .expect("processed");
            assert!(
                matches!(processed, Processed::Applied(EventApplied::Unchanged(_))),
                "the confirming webhook changes nothing: {processed:?}"
            );
        }
    })
    .await;

    // Refunds of the charged payments: a first partial refund, then its replay.
    let refunds = RefundService::new(
        s.store.clone(),
        s.charge.psp().clone(),
        RefundConfig::default(),
    );
    let refund = |i: u32| {
        let (refunds, (payment_id, _)) = (&refunds, &charged[i as usize]);
        async move {
            let key = IdempotencyKey::parse(&format!("refund-{i}")).expect("key");
            let command = RefundCommand {
                payment_id: payment_id.clone(),
                amount: Some(1000),
                reason: None,
            };
            refunds
                .refund("staff", &key, &command, deadline(), "bench-request")
                .await
                .expect("refunded")
        }
    };
    let refund_first = per_op(&s.meter, |i| {
        let refund = &refund;
        async move { assert!(matches!(refund(i).await, RefundAnswer::Fresh(_))) }
    })
    .await;
    let refund_replay = per_op(&s.meter, |i| {
        let refund = &refund;
        async move { assert!(matches!(refund(i).await, RefundAnswer::Replayed { .. })) }
    })
    .await;

    // Captures and cancels of authorized payments, and the replay of a payment waiting for
    // 3-D Secure.
    let checkout = ChargeService::new(
        s.store.clone(),
        s.charge.psp().clone(),
        ChargeConfig {
            checkout_origins: vec![CHECKOUT_ORIGIN.to_owned()],
            ..ChargeConfig::default()
        },
    );
    let operations = OperationService::new(
        s.store.clone(),
        s.charge.psp().clone(),
        OperationConfig::default(),
    );
    let mut authorized = Vec::new();
    for i in 0..2 * ROUNDS {
        let order = order(&s, "shopper").await;
        let answer = checkout_pay(&checkout, &s, &order, &format!("manual-{i}"), None).await;
        let PayAnswer::Fresh(view) = answer else {
            panic!("authorized: {answer:?}")
        };
        assert_eq!(view.status, payonce::domain::PaymentStatus::Authorized);
        authorized.push(view.payment_id);
    }
    let operate = |kind: OperationKind, payment_id: String, key: String| {
        let operations = &operations;
        async move {
            let key = IdempotencyKey::parse(&key).expect("key");
            let command = OperationCommand {
                kind,
                payment_id,
                amount: None,
            };
            let caller = Caller {
                user: "staff",
                staff: true,
            };
            let answer = operations
                .run(caller, &key, &command, deadline(), "bench-request")
                .await
                .expect("operated");
            assert!(matches!(answer, OperationAnswer::Done { .. }), "{answer:?}");
        }
    };
    let capture = per_op(&s.meter, |i| {
        operate(
            OperationKind::Capture,
            authorized[i as usize].clone(),
            format!("capture-{i}"),
        )
    })
    .await;
    let capture_replay = per_op(&s.meter, |i| {
        operate(
            OperationKind::Capture,
            authorized[i as usize].clone(),
            format!("capture-{i}"),
        )
    })
    .await;
    let cancel = per_op(&s.meter, |i| {
        operate(
            OperationKind::Cancel,
            authorized[(ROUNDS + i) as usize].clone(),
            format!("cancel-{i}"),
        )
    })
    .await;
    let mut waiting = Vec::new();
    for i in 0..ROUNDS {
        let order = order(&s, "shopper").await;
        let key = format!("action-{i}");
        let answer = checkout_pay(&checkout, &s, &order, &key, Some(())).await;
        assert!(
            matches!(&answer, PayAnswer::Fresh(view) if view.status == payonce::domain::PaymentStatus::RequiresAction),
            "{answer:?}"
        );
        waiting.push((order, key));
    }
    let action_replay = per_op(&s.meter, |i| {
        let (checkout, s, (order, key)) = (&checkout, &s, &waiting[i as usize]);
        async move {
            let answer = checkout_pay(checkout, s, order, key, Some(())).await;
            assert!(matches!(answer, PayAnswer::Replayed { .. }), "{answer:?}");
        }
    })
    .await;

    json!({
        "capture_first": capture,
        "capture_replay": capture_replay,
        "cancel_first": cancel,
        "requires_action_replay": action_replay,
        "refund_first": refund_first,
        "refund_replay": refund_replay,
        "generic_first": generic_first,
        "generic_replay": generic_replay,
        "generic_inflight_duplicate": inflight_dup,
        "charge_first": charge_first,
        "charge_first_limited": charge_first_limited,
        "charge_replay": charge_replay,
        "webhook_apply": webhook_apply,
        "webhook_confirm": webhook_confirm,
        "reconcile_per_attempt": reconcile,
    })
}

fn percentiles(mut samples: Vec<f64>) -> Value {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    json!({"p50_ms": at(0.5), "p99_ms": at(0.99), "n": samples.len()})
}

async fn time_runs<S: IdempotencyStore>(
    layer: &Idempotency<S>,
    n: usize,
    prefix: &str,
) -> (Value, Value) {
    let fp = Fingerprint::of_value(
        &json!({"order_id": "o1", "order_version": 1, "payment_method": "pm_card_visa"}),
    );
    let keys: Vec<IdempotencyKey> = (0..n)
        .map(|i| {
            IdempotencyKey::parse(&format!("{prefix}-{i}-{}", uuid::Uuid::new_v4().simple()))
                .expect("key")
        })
        .collect();
    let deadline = || layer.store().now_ms() + 10_000;
    let noop = |_| async { Ok::<_, std::convert::Infallible>(json!({"ok": true})) };
    // Warm-up: connections, table, JIT of the emulator.
    for key in keys.iter().take(n / 10) {
        let _ = layer.run(run_request(key, &fp, deadline()), noop).await;
    }
    let (mut first, mut replay) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for key in keys.iter().skip(n / 10) {
        let started = Instant::now();
        let outcome = layer.run(run_request(key, &fp, deadline()), noop).await;
        first.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(matches!(outcome, Ok(Outcome::Fresh(_))), "{outcome:?}");
    }
    for key in keys.iter().skip(n / 10) {
        let started = Instant::now();
        let outcome = layer.run(run_request(key, &fp, deadline()), noop).await;
        replay.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(matches!(outcome, Ok(Outcome::Replayed(_))), "{outcome:?}");
    }
    (percentiles(first), percentiles(replay))
}

/// The floor under the wrapper: the same DynamoDB requests made directly with the SDK, no layer
/// around them — a conditional PutItem of the same in-progress item and the completing,
/// token-conditioned UpdateItem for a first call; the refused PutItem returning the stored item
/// (its result parsed) for a replay.
async fn time_floor(client: &aws_sdk_dynamodb::Client, table: &str, n: usize) -> (Value, Value) {
    use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let num = |v: i64| AttributeValue::N(v.to_string());
    let fp = Fingerprint::of_value(
        &json!({"order_id": "o1", "order_version": 1, "payment_method": "pm_card_visa"}),
    );
    let keys: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "bench.floor#alice#floor-{i}-{}",
                uuid::Uuid::new_v4().simple()
            )
        })
        .collect();
    let now_ms = || {
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap()
    };
    let claim = |key: &str| {
        let now = now_ms();
        client
            .put_item()
            .table_name(table)
            .item("pk", s(key))
            .item("status", s("INPROGRESS"))
            .item("fingerprint", s(fp.as_str()))
            .item("attempt_id", s(&uuid::Uuid::new_v4().to_string()))
            .item("created_at_ms", num(now))
            .item("lease_token", s("token"))
            .item("lease_until_ms", num(now + 15_000))
            .item("expires_at", num(now / 1000 + 86_400))
            .condition_expression("attribute_not_exists(#pk) OR #expires_at < :now_s")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#expires_at", "expires_at")
            .expression_attribute_values(":now_s", num(now / 1000))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
    };
    let first_call = |key: String| async move {
        claim(&key).await.expect("claim");
        client
            .update_item()
            .table_name(table)
            .key("pk", s(&key))
            .update_expression(
                "SET #status = :done, #result = :result REMOVE #lease_token, #lease_until_ms",
            )
            .condition_expression("#lease_token = :token")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#result", "result")
            .expression_attribute_names("#lease_token", "lease_token")
            .expression_attribute_names("#lease_until_ms", "lease_until_ms")
            .expression_attribute_values(":done", s("COMPLETED"))
            .expression_attribute_values(":result", s(r#"{"ok":true}"#))
            .expression_attribute_values(":token", s("token"))
            .send()
            .await
            .expect("complete");
    };
    let replay_call = |key: String| async move {
        let refused = claim(&key).await.expect_err("a replay's claim is refused");
        let item = refused
            .as_service_error()
            .and_then(|e| match e {
                aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c) => c.item(),
                _ => None,
            })
            .expect("the stored item");
        let result: Value =
            serde_json::from_str(item["result"].as_s().expect("result")).expect("json");
        assert_eq!(result, json!({"ok": true}));
    };
    for key in keys.iter().take(n / 10) {
        first_call(key.clone()).await;
    }
    let (mut first, mut replay) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for key in keys.iter().skip(n / 10) {
        let started = Instant::now();
        first_call(key.clone()).await;
        first.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    for key in keys.iter().skip(n / 10) {
        let started = Instant::now();
        replay_call(key.clone()).await;
        replay.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    (percentiles(first), percentiles(replay))
}

/// Latency of the generic wrapper around a no-op, first call and replay, and of the raw-SDK
/// floor, in one round: `round` (the round's number in `scripts/bench`) decides which side goes
/// first, so over alternating rounds drift in the emulator touches both sides alike.
pub async fn latency(n: usize, round: u32) -> Value {
    let meter = CapacityMeter::default();
    let client = client(&meter);
    let table = std::env::var("BENCH_IDEMPOTENCY_TABLE")
        .unwrap_or_else(|_| payonce_tests::unique_table("bench-lat"));
    create_idempotency_table(&client, &table)
        .await
        .expect("table");
    // The timed client carries no interceptor at all: the adapter as shipped.
    let timed = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "bench",
            ))
            .endpoint_url(payonce_tests::dynamodb_endpoint())
            .build(),
    );
    let dynamo = Idempotency::new(
        DynamoIdempotencyStore::new(timed.clone(), &table),
        IdempotencyConfig::default(),
    );
    let ((first, replay), (floor_first, floor_replay)) = if round.is_multiple_of(2) {
        let ours = time_runs(&dynamo, n, "lat").await;
        (ours, time_floor(&timed, &table, n).await)
    } else {
        let floor = time_floor(&timed, &table, n).await;
        (time_runs(&dynamo, n, "lat").await, floor)
    };
    let embedded = Idempotency::new(
        MemoryIdempotencyStore::default(),
        IdempotencyConfig::default(),
    );
    let (embedded_first, embedded_replay) = time_runs(&embedded, n.max(1000), "emb").await;
    json!({"dynamodb_local": {"first": first, "replay": replay},
           "floor": {"first": floor_first, "replay": floor_replay},
           "embedded": {"first": embedded_first, "replay": embedded_replay}})
}
