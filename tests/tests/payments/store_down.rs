//! DynamoDB failing (not contention: its tables gone, as when permissions or the service fail):
//! every route answers 503 `service-unavailable` with `Retry-After`, never a 500, and nothing is
//! sent to the PSP.

use payonce::adapters::dynamodb::RequestCounter;
use payonce::adapters::dynamodb::{DynamoIdempotencyStore, DynamoPaymentStore, Tables};
use payonce::idempotency::{Idempotency, IdempotencyConfig};
use payonce::service::{
    ChargeConfig, ChargeService, OperationConfig, OperationService, OrderService, RefundConfig,
    RefundService,
};
use payonce_tests::dynamodb_client;
use payonce_tests::stack::{api_event, scoped_api_event, start_fake_psp, stripe_for, Reply};

#[tokio::test]
async fn every_route_answers_503_with_retry_after_when_dynamodb_fails() {
    // GIVEN the functions on tables DynamoDB does not have (every request fails)
    let client = dynamodb_client(&RequestCounter::new());
    let tables = Tables {
        idempotency: format!("gone-idem-{}", uuid::Uuid::new_v4().simple()),
        payments: format!("gone-pay-{}", uuid::Uuid::new_v4().simple()),
    };
    let psp = start_fake_psp(Default::default()).await;
    let store = DynamoPaymentStore::new(client.clone(), tables.clone());
    let charge = ChargeService::new(store.clone(), stripe_for(&psp), ChargeConfig::default());
    let refunds = RefundService::new(store.clone(), stripe_for(&psp), RefundConfig::default());
    let operations =
        OperationService::new(store.clone(), stripe_for(&psp), OperationConfig::default());
    let orders = OrderService::new(
        store,
        Idempotency::new(
            DynamoIdempotencyStore::new(client, &tables.idempotency),
            IdempotencyConfig::default(),
        ),
    );
    let order = r#"{"currency":"jpy","items":[{"sku":"A1","quantity":1,"unit_amount":1500}]}"#;
    let pay = r#"{"order_id":"ord_1","order_version":1,"payment_method":"pm_card_visa"}"#;
    let key = [("idempotency-key", "k-1")];
    let staff = ["payments:refund"];
    let capture = ["payments:capture"];

    // WHEN each route is called
    let answers = vec![
        (
            "POST /orders",
            payonce_orders::handler::handle(
                &orders,
                api_event("POST", "/orders", Some("alice"), &key, order),
            )
            .await,
        ),
        (
            "GET /orders/{id}",
            payonce_orders::handler::handle(
                &orders,
                api_event("GET", "/orders/ord_1", Some("alice"), &[], ""),
            )
            .await,
        ),
        (
            "PATCH /orders/{id}",
            payonce_orders::handler::handle(
                &orders,
                api_event(
                    "PATCH",
                    "/orders/ord_1",
                    Some("alice"),
                    &[],
                    r#"{"version":1,"items":[{"sku":"A1","quantity":2,"unit_amount":1500}]}"#,
                ),
            )
            .await,
        ),
        (
            "POST /payments",
            payonce_charge::handler::handle(
                &charge,
                api_event("POST", "/payments", Some("alice"), &key, pay),
            )
            .await,
        ),
        (
            "GET /payments/{id}",
            payonce_charge::handler::handle(
                &charge,
                api_event("GET", "/payments/pay_1", Some("alice"), &[], ""),
            )
            .await,
        ),
        (
            "POST /payments/{id}/refunds",
            payonce_refund::handler::handle(
                &refunds,
                &operations,
                scoped_api_event(
                    "POST",
                    "/payments/pay_1/refunds",
                    Some("staff"),
                    &staff,
                    &key,
                    r#"{"amount":100}"#,
                ),
            )
            .await,
        ),
        (
            "POST /payments/{id}/capture",
            payonce_refund::handler::handle(
                &refunds,
                &operations,
                scoped_api_event(
                    "POST",
                    "/payments/pay_1/capture",
                    Some("staff"),
                    &capture,
                    &key,
                    r#"{"amount":100}"#,
                ),
            )
            .await,
        ),
        (
            "POST /payments/{id}/cancel",
            payonce_refund::handler::handle(
                &refunds,
                &operations,
                api_event("POST", "/payments/pay_1/cancel", Some("alice"), &key, ""),
            )
            .await,
        ),
    ];

    // THEN each is 503 service-unavailable with Retry-After, and the PSP saw nothing
    for (route, response) in answers {
        let reply = Reply::from(response);
        assert_eq!(
            (reply.status, reply.problem_type()),
            (503, "/problems/service-unavailable"),
            "{route}: {}",
            reply.body
        );
        assert!(reply.header("retry-after").is_some(), "{route}");
    }
    assert!(psp.charges().is_empty());
    assert!(psp.refunds().is_empty());
}
