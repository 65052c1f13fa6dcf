//! Card testing: new payment attempts per user and per order are limited; over a limit the
//! answer is 429 `too-many-attempts` with `Retry-After`, nothing is written and nothing reaches
//! the PSP, while replays of earlier keys are never limited.

use payonce::clock::Clock;
use payonce::service::charge::CrashPoint;
use payonce::service::limits::{AttemptLimiter, AttemptLimits, Limit};
use payonce_tests::stack::{stripe_for, PaymentStack};
use serde_json::json;
use std::time::Duration;

fn limits(per_user: Limit, per_order: Limit) -> AttemptLimits {
    AttemptLimits {
        window: Duration::from_secs(3600),
        per_user,
        per_order,
    }
}

/// Moves the stack's clock (which starts at the system time) to the start of the next limit
/// window, so a test's own `advance` stays inside one window: counters are per window, and a
/// test started in an hour's last minute once saw its third attempt admitted by the next hour.
fn at_the_start_of_a_window(stack: &PaymentStack) {
    let width_ms = 3_600_000;
    let into = stack.clock.now_ms().rem_euclid(width_ms);
    stack.clock.advance(Duration::from_millis(
        u64::try_from(width_ms - into).expect("positive"),
    ));
}

fn pay_body(order: &str, payment_method: &str) -> serde_json::Value {
    json!({"order_id": order, "order_version": 1, "payment_method": payment_method})
}

#[tokio::test]
async fn a_user_over_the_attempt_limit_gets_429_and_the_psp_sees_nothing() {
    let stack = PaymentStack::start().await;
    let service = stack
        .charge_with(stripe_for(&stack.psp))
        .with_attempt_limits(AttemptLimiter::new(limits(
            Limit {
                attempts: 3,
                declines: 100,
            },
            Limit {
                attempts: 100,
                declines: 100,
            },
        )));
    // GIVEN three paid orders
    let mut orders = Vec::new();
    for i in 0..3 {
        let order = stack.create_order("carol").await;
        let reply = stack
            .pay_through(
                &service,
                "carol",
                &format!("k{i}"),
                pay_body(&order, "pm_card_visa"),
            )
            .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        orders.push(order);
    }
    let fourth = stack.create_order("carol").await;
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();

    // WHEN a fourth attempt starts within the hour
    let refused = stack
        .pay_through(&service, "carol", "k3", pay_body(&fourth, "pm_card_visa"))
        .await;

    // THEN 429 too-many-attempts with Retry-After up to the end of the window
    assert_eq!(
        (refused.status, refused.problem_type()),
        (429, "/problems/too-many-attempts"),
        "{}",
        refused.body
    );
    let retry_after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=3600).contains(&retry_after), "{retry_after}");
    assert!(refused.json["detail"].as_str().unwrap().contains("user"));
    // AND nothing was written (no key, no claim on the order, no counter moved) or sent
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
    // AND a replay of an earlier key is not an attempt: still answered
    let replay = stack
        .pay_through(
            &service,
            "carol",
            "k0",
            pay_body(&orders[0], "pm_card_visa"),
        )
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    // AND another user is not limited by carol's attempts
    let other = stack.create_order("dave").await;
    let reply = stack
        .pay_through(&service, "dave", "k0", pay_body(&other, "pm_card_visa"))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    // AND once the window has passed, carol may pay the fourth order
    stack.clock.advance(Duration::from_secs(retry_after + 1));
    let later = stack
        .pay_through(&service, "carol", "k3", pay_body(&fourth, "pm_card_visa"))
        .await;
    assert_eq!(later.status, 201, "{}", later.body);
    assert_eq!(
        stack
            .psp
            .succeeded_charges_for(later.json["payment_id"].as_str().unwrap()),
        1
    );
}

#[tokio::test]
async fn declines_on_one_order_close_it_for_the_window() {
    let stack = PaymentStack::start().await;
    let service = stack
        .charge_with(stripe_for(&stack.psp))
        .with_attempt_limits(AttemptLimiter::new(limits(
            Limit {
                attempts: 100,
                declines: 100,
            },
            Limit {
                attempts: 100,
                declines: 2,
            },
        )));
    let order = stack.create_order("erin").await;
    // GIVEN two declined attempts on the order (a card tester's first two cards)
    for i in 0..2 {
        let reply = stack
            .pay_through(
                &service,
                "erin",
                &format!("d{i}"),
                pay_body(&order, "pm_card_visa_chargeDeclined"),
            )
            .await;
        assert_eq!(reply.status, 402, "{}", reply.body);
    }
    let charges = stack.psp.charges().len();
    let before = stack.snapshot().await;

    // WHEN a third card is tried on it
    let refused = stack
        .pay_through(&service, "erin", "d2", pay_body(&order, "pm_card_visa"))
        .await;

    // THEN 429, nothing sent, nothing written, and the order is still payable later
    assert_eq!(
        (refused.status, refused.problem_type()),
        (429, "/problems/too-many-attempts"),
        "{}",
        refused.body
    );
    assert!(refused.header("retry-after").is_some());
    assert!(refused.json["detail"].as_str().unwrap().contains("order"));
    assert_eq!(stack.psp.charges().len(), charges);
    // (the counters included: a refused attempt counts against neither)
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(
        stack.get_order("erin", &order).await.json["payment_state"],
        "unpaid"
    );
    // AND another order of the same user is not closed by it
    let other = stack.create_order("erin").await;
    let reply = stack
        .pay_through(&service, "erin", "o1", pay_body(&other, "pm_card_visa"))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[tokio::test]
async fn a_request_cut_after_its_claim_and_retried_counts_one_attempt() {
    let stack = PaymentStack::start().await;
    at_the_start_of_a_window(&stack);
    let limiter = AttemptLimiter::new(limits(
        Limit {
            attempts: 2,
            declines: 100,
        },
        Limit {
            attempts: 100,
            declines: 100,
        },
    ));
    let service = stack
        .charge_with(stripe_for(&stack.psp))
        .with_attempt_limits(limiter);
    // GIVEN dave, allowed two attempts, whose first request claimed its key (and so counted)
    // and then died before calling the PSP
    let first = stack.create_order("dave").await;
    service.inject_crash(CrashPoint::AfterClaim);
    let cut = stack
        .pay_through(&service, "dave", "cut", pay_body(&first, "pm_card_visa"))
        .await;
    assert_eq!(cut.status, 500, "{}", cut.body);
    assert_eq!(stack.psp.charges().len(), 0);
    stack.clock.advance(Duration::from_secs(60));

    // WHEN his client retries the same key, then pays a second order with a new key
    let retried = stack
        .pay_through(&service, "dave", "cut", pay_body(&first, "pm_card_visa"))
        .await;
    assert_eq!(retried.status, 201, "{}", retried.body);
    let second = stack.create_order("dave").await;
    let next = stack
        .pay_through(&service, "dave", "next", pay_body(&second, "pm_card_visa"))
        .await;

    // THEN the retry took the same attempt over, so the new key is his second: admitted and
    // charged
    assert_eq!(next.status, 201, "{}", next.body);
    assert_eq!(stack.psp.charges().len(), 2);
    // AND a third attempt is refused, nothing reaching the PSP
    let third = stack.create_order("dave").await;
    let refused = stack
        .pay_through(&service, "dave", "third", pay_body(&third, "pm_card_visa"))
        .await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.problem_type(), "/problems/too-many-attempts");
    assert_eq!(stack.psp.charges().len(), 2);
}
