//! The orders API: owner-scoped, versioned, locked while paying, idempotent creation.

use payonce::service::CrashPoint;
use payonce_tests::stack::{api_event, PaymentStack};
use payonce_tests::stores::PaymentStoreHarness as _;
use serde_json::json;

#[tokio::test]
async fn create_read_and_revise_an_order() {
    let stack = PaymentStack::start().await;
    let body = json!({"currency": "usd", "items": [{"sku": "A1", "quantity": 2, "unit_amount": 1999}, {"sku": "B2", "quantity": 1, "unit_amount": 1}]});
    let created = stack.post_order("alice", &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.json["amount"], 3999);
    assert_eq!(created.json["version"], 1);
    assert_eq!(created.json["payment_state"], "unpaid");
    assert_eq!(created.json["currency"], "usd");
    let id = created.json["order_id"].as_str().unwrap();

    let read = stack.get_order("alice", id).await;
    assert_eq!(read.json, created.json);

    let patch = json!({"items": [{"sku": "C3", "quantity": 1, "unit_amount": 500}]});
    let revised = stack
        .orders_request(api_event(
            "PATCH",
            &format!("/orders/{id}"),
            Some("alice"),
            &[],
            &patch.to_string(),
        ))
        .await;
    assert_eq!(revised.status, 200, "{}", revised.body);
    assert_eq!(
        (
            revised.json["version"].as_i64(),
            revised.json["amount"].as_i64()
        ),
        (Some(2), Some(500))
    );

    let stale = json!({"version": 1, "items": [{"sku": "C3", "quantity": 2, "unit_amount": 500}]});
    let refused = stack
        .orders_request(api_event(
            "PATCH",
            &format!("/orders/{id}"),
            Some("alice"),
            &[],
            &stale.to_string(),
        ))
        .await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.problem_type(), "/problems/order-version-mismatch");

    let other = stack.get_order("bob", id).await;
    assert_eq!(
        (other.status, other.problem_type()),
        (404, "/problems/not-found")
    );
    let bob_patch = stack
        .orders_request(api_event(
            "PATCH",
            &format!("/orders/{id}"),
            Some("bob"),
            &[],
            &patch.to_string(),
        ))
        .await;
    assert_eq!(bob_patch.status, 404);
    assert_eq!(stack.get_order("alice", id).await.json["version"], 2);
}

#[tokio::test]
async fn an_order_cannot_change_while_paying_or_once_paid() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let pay = json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
    let patch = json!({"items": [{"sku": "A1", "quantity": 1, "unit_amount": 1000}]});

    stack.charge.inject_crash(CrashPoint::AfterClaim);
    stack.pay("alice", "k1", pay.clone()).await;
    let before = stack.snapshot().await;
    let while_processing = stack
        .orders_request(api_event(
            "PATCH",
            &format!("/orders/{order}"),
            Some("alice"),
            &[],
            &patch.to_string(),
        ))
        .await;
    assert_eq!(
        (while_processing.status, while_processing.problem_type()),
        (409, "/problems/payment-in-progress")
    );
    assert_eq!(stack.snapshot().await, before);

    stack.clock.advance(std::time::Duration::from_secs(31));
    assert_eq!(stack.pay("alice", "k1", pay).await.status, 201);
    let once_paid = stack
        .orders_request(api_event(
            "PATCH",
            &format!("/orders/{order}"),
            Some("alice"),
            &[],
            &patch.to_string(),
        ))
        .await;
    assert_eq!(
        (once_paid.status, once_paid.problem_type()),
        (409, "/problems/order-already-paid")
    );
    let read = stack.get_order("alice", &order).await;
    assert_eq!(
        (read.json["version"].as_i64(), read.json["amount"].as_i64()),
        (Some(1), Some(3000))
    );
}

#[tokio::test]
async fn creating_with_an_idempotency_key_twice_makes_one_order() {
    let stack = PaymentStack::start().await;
    let body =
        json!({"currency": "jpy", "items": [{"sku": "A1", "quantity": 1, "unit_amount": 100}]})
            .to_string();
    let first = stack
        .orders_request(api_event(
            "POST",
            "/orders",
            Some("alice"),
            &[("idempotency-key", "order-k")],
            &body,
        ))
        .await;
    let second = stack
        .orders_request(api_event(
            "POST",
            "/orders",
            Some("alice"),
            &[("idempotency-key", "order-k")],
            &body,
        ))
        .await;
    assert_eq!((first.status, second.status), (201, 201));
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(first.json["order_id"], second.json["order_id"]);
    let orders = stack
        .snapshot()
        .await
        .1
        .keys()
        .filter(|pk| pk.starts_with("order#"))
        .count();
    assert_eq!(orders, 1);

    let other =
        json!({"currency": "jpy", "items": [{"sku": "A1", "quantity": 2, "unit_amount": 100}]})
            .to_string();
    let mismatch = stack
        .orders_request(api_event(
            "POST",
            "/orders",
            Some("alice"),
            &[("idempotency-key", "order-k")],
            &other,
        ))
        .await;
    assert_eq!(
        (mismatch.status, mismatch.problem_type()),
        (422, "/problems/idempotency-key-mismatch")
    );
}

#[tokio::test]
async fn a_total_below_the_psps_minimum_is_refused_and_stores_nothing() {
    let stack = PaymentStack::start().await;
    // Stripe's minimum charge per currency, in minor units.
    for (currency, minimum) in [
        ("usd", 50),
        ("eur", 50),
        ("sgd", 50),
        ("jpy", 50),
        ("gbp", 30),
        ("thb", 1000),
    ] {
        let key = format!("order-min-{currency}");
        let below = json!({"currency": currency, "items": [{"sku": "A1", "quantity": 1, "unit_amount": minimum - 1}]});
        let at = json!({"currency": currency, "items": [{"sku": "A1", "quantity": 1, "unit_amount": minimum}]});

        // WHEN an order's total is one minor unit below the minimum
        let before = stack.snapshot().await;
        let refused = stack
            .orders_request(api_event(
                "POST",
                "/orders",
                Some("alice"),
                &[("idempotency-key", &key)],
                &below.to_string(),
            ))
            .await;

        // THEN 400 amount-too-small naming the minimum, and nothing is written (not even the key)
        assert_eq!(
            (refused.status, refused.problem_type()),
            (400, "/problems/amount-too-small"),
            "{currency}: {}",
            refused.body
        );
        assert_eq!(
            refused.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(refused.json["minimum_amount"], minimum, "{currency}");
        assert_eq!(stack.snapshot().await, before, "{currency}");

        // AND the same key then creates the order at exactly the minimum
        let created = stack
            .orders_request(api_event(
                "POST",
                "/orders",
                Some("alice"),
                &[("idempotency-key", &key)],
                &at.to_string(),
            ))
            .await;
        assert_eq!(created.status, 201, "{currency}: {}", created.body);
        assert_eq!(created.header("idempotent-replayed"), None);
        assert_eq!(created.json["amount"], minimum);
        let id = created.json["order_id"].as_str().unwrap();

        // AND revising it below the minimum is refused alike, leaving version 1 as it was
        let before = stack.snapshot().await;
        let revised = stack
            .orders_request(api_event(
                "PATCH",
                &format!("/orders/{id}"),
                Some("alice"),
                &[],
                &json!({"version": 1, "items": [{"sku": "A1", "quantity": 1, "unit_amount": minimum - 1}]})
                    .to_string(),
            ))
            .await;
        assert_eq!(
            (revised.status, revised.problem_type()),
            (400, "/problems/amount-too-small"),
            "{currency}: {}",
            revised.body
        );
        assert_eq!(stack.snapshot().await, before, "{currency}");
    }
    assert_eq!(stack.psp.requests_seen(), 0);
}

/// An order store that, once the order is inserted, makes the idempotency record's completion
/// fail on every retry — as if the invocation died between the two writes.
struct DiesAfterInsert<O> {
    orders: O,
    records: payonce::adapters::faults::Faults,
    inserted: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl<O: payonce::ports::OrderStore> payonce::ports::OrderStore for DiesAfterInsert<O> {
    async fn create_order(
        &self,
        order: &payonce::domain::Order,
    ) -> Result<(), payonce::idempotency::StoreError> {
        let created = self.orders.create_order(order).await;
        if created.is_ok() {
            let mut inserted = self.inserted.lock().unwrap();
            if inserted.is_empty() {
                // The first invocation's completion and all its retries fail: the lease is
                // left to lapse.
                self.records.inject_conflicts(1_000);
            }
            inserted.push(order.order_id.clone());
        }
        created
    }
    async fn get_order(
        &self,
        order_id: &str,
    ) -> Result<Option<payonce::domain::Order>, payonce::idempotency::StoreError> {
        self.orders.get_order(order_id).await
    }
    async fn get_holder(
        &self,
        payment_id: &str,
    ) -> Result<Option<payonce::domain::Payment>, payonce::idempotency::StoreError> {
        self.orders.get_holder(payment_id).await
    }
    async fn revise_order(
        &self,
        read: &payonce::domain::Order,
        next: &payonce::domain::Order,
    ) -> Result<payonce::ports::ReviseOutcome, payonce::idempotency::StoreError> {
        self.orders.revise_order(read, next).await
    }
}

/// A crash between inserting the order and completing the record, then the client's retry: the
/// retry takes the attempt over and answers the order the crashed invocation inserted, rather
/// than inserting a second one nobody will ever see.
async fn a_takeover_after_a_crash_answers_the_order_already_inserted<H>(
    h: H,
    record_faults: payonce::adapters::faults::Faults,
) where
    H: payonce_tests::stores::PaymentStoreHarness,
{
    use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotencyKey, IdempotencyStore};
    use payonce::service::{Created, OrderService};
    let inserted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let dying = DiesAfterInsert {
        orders: h.payments().clone(),
        records: record_faults.clone(),
        inserted: inserted.clone(),
    };
    let service = OrderService::new(
        dying,
        Idempotency::new(h.records().clone(), IdempotencyConfig::default()),
    );
    let key = IdempotencyKey::parse("order-key-1").unwrap();
    let items = || {
        vec![
            serde_json::from_value(json!({"sku": "A1", "quantity": 1, "unit_amount": 1500}))
                .unwrap(),
        ]
    };
    let deadline = h.records().now_ms() + 10_000;

    let crashed = service
        .create("alice", Some(&key), "usd", items(), deadline)
        .await;
    assert!(
        crashed.is_err(),
        "the first invocation dies before completing: {crashed:?}"
    );
    record_faults.inject_conflicts(0);
    // The client retries once the dead invocation's lease has lapsed.
    h.clock().advance(std::time::Duration::from_secs(16));
    let retry = service
        .create(
            "alice",
            Some(&key),
            "usd",
            items(),
            h.records().now_ms() + 10_000,
        )
        .await
        .expect("the retry takes over");
    let Created::Fresh(view) = retry else {
        panic!("a takeover runs the work: {retry:?}")
    };
    let inserted = inserted.lock().unwrap().clone();
    assert_eq!(
        inserted.len(),
        1,
        "one order inserted, by the crashed invocation: {inserted:?}"
    );
    assert_eq!(view.order_id, inserted[0], "the retry answers that order");
    // AND a later replay answers it too
    let Created::Replayed(replayed) = service
        .create(
            "alice",
            Some(&key),
            "usd",
            items(),
            h.records().now_ms() + 10_000,
        )
        .await
        .unwrap()
    else {
        panic!("a replay")
    };
    assert_eq!(replayed.order_id, inserted[0]);
}

#[tokio::test]
async fn a_takeover_after_a_crash_answers_the_order_already_inserted_embedded() {
    let stores = payonce_tests::stores::memory_stores();
    let faults = stores.records().faults().clone();
    a_takeover_after_a_crash_answers_the_order_already_inserted(stores, faults).await;
}

#[tokio::test]
async fn a_takeover_after_a_crash_answers_the_order_already_inserted_dynamodb() {
    let stores = payonce_tests::stores::dynamo_stores().await;
    let faults = stores.records().faults().clone();
    a_takeover_after_a_crash_answers_the_order_already_inserted(stores, faults).await;
}
