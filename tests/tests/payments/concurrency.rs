//! Storms of identical payment requests: one charge, whatever the interleaving.

use payonce_tests::stack::PaymentStack;
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_parallel_identical_posts_charge_once() {
    let stack = Arc::new(PaymentStack::start().await);
    let order = stack.create_order("alice").await;
    let body = json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
    let barrier = Arc::new(tokio::sync::Barrier::new(30));

    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (stack, body, barrier) = (stack.clone(), body.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                stack.pay("alice", "double-click", body).await
            })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }

    let mut payment_ids = std::collections::BTreeSet::new();
    let (mut created, mut in_use) = (0, 0);
    for reply in &replies {
        match reply.status {
            201 => {
                created += 1;
                payment_ids.insert(reply.json["payment_id"].as_str().unwrap().to_owned());
            }
            409 => {
                assert_eq!(
                    reply.problem_type(),
                    "/problems/idempotency-key-in-use",
                    "{}",
                    reply.body
                );
                assert!(reply.header("retry-after").is_some());
                in_use += 1;
            }
            other => panic!("unexpected {other}: {}", reply.body),
        }
    }
    assert_eq!(created + in_use, 30);
    assert_eq!(payment_ids.len(), 1, "every 201 is the same payment");
    assert_eq!(
        replies
            .iter()
            .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
            .count(),
        1
    );
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 1, "exactly one PSP charge: {charges:?}");
    assert_eq!(
        stack.get_order("alice", &order).await.json["payment_state"],
        "paid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_new_keys_for_one_order_start_one_attempt() {
    let stack = Arc::new(PaymentStack::start().await);
    let order = stack.create_order("alice").await;
    let body = json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let (stack, body) = (stack.clone(), body.clone());
            tokio::spawn(async move { stack.pay("alice", &format!("tab-{i}"), body).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        if reply.status == 409 {
            assert!(
                [
                    "/problems/payment-in-progress",
                    "/problems/order-already-paid"
                ]
                .contains(&reply.problem_type()),
                "{}",
                reply.body
            );
        }
        statuses.push(reply.status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        9,
        "{statuses:?}"
    );
    assert_eq!(stack.psp.charges().len(), 1);
}
