//! Refunds racing each other: one key refunds once; many keys never refund past the capture.

use super::{item_statuses, psp_key};
use payonce::domain::Currency;
use payonce_tests::stack::{string_attribute, PaymentStack, Reply, STAFF};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Sends `body` 30 times at once under one key to refund a new 3000 JPY payment, and checks
/// that it was refunded once, of `amount`: every answer is the one fresh 201, a replay of it or
/// 409 key-in-use; one PSP refund under the refund's key; the amounts moved once; one refund
/// item; the record completed; a later retry replays.
async fn thirty_identical(stack: &Arc<PaymentStack>, key: &str, body: Value, amount: i64) {
    let payment_id = stack
        .paid_payment("alice", &format!("pay-{key}"), "pm_card_visa")
        .await;

    // WHEN staff sends the same refund 30 times at once, under one key
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (stack, payment_id, key, body) = (
                stack.clone(),
                payment_id.clone(),
                key.to_owned(),
                body.clone(),
            );
            tokio::spawn(async move { stack.refund(&payment_id, &key, body).await })
        })
        .collect();
    let mut replies: Vec<Reply> = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }

    // THEN each answer is the one fresh 201, a replay of it, or 409 key-in-use
    let fresh: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(fresh.len(), 1, "{key}: {replies:#?}");
    let refund = fresh[0].json.clone();
    assert_eq!(
        (
            refund["status"].as_str(),
            refund["amount"].as_i64(),
            refund["payment_id"].as_str()
        ),
        (Some("succeeded"), Some(amount), Some(payment_id.as_str()))
    );
    for reply in &replies {
        match (reply.status, reply.header("idempotent-replayed")) {
            (201, None) => {}
            (201, Some("true")) => assert_eq!(reply.json, refund, "a replay of the same refund"),
            (409, None) => {
                assert_eq!(
                    reply.problem_type(),
                    "/problems/idempotency-key-in-use",
                    "{key}: {}",
                    reply.body
                );
                assert!(reply.header("retry-after").is_some(), "{reply:?}");
            }
            _ => panic!("{key}: unexpected answer: {reply:?}"),
        }
    }

    // AND the PSP made exactly one refund of the payment, under the refund's key
    let psp_refunds: Vec<_> = stack
        .psp
        .refunds()
        .into_iter()
        .filter(|r| r.payment_id.as_deref() == Some(payment_id.as_str()))
        .collect();
    assert_eq!(psp_refunds.len(), 1, "{key}: {psp_refunds:#?}");
    assert_eq!(
        (
            psp_refunds[0].idempotency_key.clone(),
            psp_refunds[0].amount,
            psp_refunds[0].status.as_str(),
            psp_refunds[0].refund_id.as_deref()
        ),
        (
            Some(psp_key(&payment_id, "1")),
            amount,
            "succeeded",
            refund["refund_id"].as_str()
        )
    );
    // AND one refund is stored, the payment's amounts moved once, one record completed
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(amount), Some(0), Some(1))
    );
    let items = stack.refund_items(&payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(
            format!("refund#{}", refund["refund_id"].as_str().unwrap()),
            "succeeded".to_owned()
        )]
    );
    let record = stack
        .refund_record(STAFF, key)
        .await
        .expect("the key's record");
    assert_eq!(record.lease(), None, "completed");
    assert_eq!(record.attempt_id, refund["refund_id"].as_str().unwrap());
    // AND a later retry replays the same refund
    let later = stack.refund(&payment_id, key, body).await;
    assert_eq!(
        (later.status, later.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(later.json, refund);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_identical_refunds_at_once_make_one_psp_refund() {
    let stack = Arc::new(PaymentStack::start().await);
    thirty_identical(
        &stack,
        "refund-once",
        json!({"amount": 1000, "reason": "requested_by_customer"}),
        1000,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_identical_full_refunds_at_once_are_answered_as_duplicates_never_as_no_room_left() {
    // A full refund leaves no room: a duplicate whose read of the key missed the first claim
    // must still be answered as a duplicate (in use, or a replay), never 409
    // refund-exceeds-remaining. The window is narrow; twenty rounds make it show.
    let stack = Arc::new(PaymentStack::start().await);
    for round in 0..20 {
        thirty_identical(&stack, &format!("full-{round}"), json!({}), 3000).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_partial_refunds_at_once_never_refund_past_the_captured_amount() {
    let stack = Arc::new(PaymentStack::start().await);
    // GIVEN a succeeded payment of 1000 JPY
    let order = stack.store_order("alice", Currency::Jpy, 1000).await;
    let payment_id = stack
        .pay_order("alice", "pay", &order, "pm_card_visa")
        .await;
    // AND twenty refunds of 100 to 150 each under their own keys: about 2500 in all
    let amounts: BTreeMap<String, i64> = (0..20)
        .map(|i| (format!("part-{i:02}"), 100 + (i * 37) % 51))
        .collect();
    assert!(amounts.values().all(|a| (100..=150).contains(a)));

    // WHEN they all arrive at once
    let tasks: Vec<_> = amounts
        .iter()
        .map(|(key, amount)| {
            let (stack, payment_id, key, amount) =
                (stack.clone(), payment_id.clone(), key.clone(), *amount);
            tokio::spawn(async move {
                let reply = stack
                    .refund(&payment_id, &key, json!({"amount": amount}))
                    .await;
                (key, amount, reply)
            })
        })
        .collect();
    let mut granted: BTreeMap<String, (i64, String)> = BTreeMap::new();
    let mut refused: BTreeMap<String, i64> = BTreeMap::new();
    for task in tasks {
        let (key, amount, reply) = task.await.unwrap();
        match (reply.status, reply.problem_type()) {
            (201, _) => {
                assert_eq!(reply.header("idempotent-replayed"), None);
                assert_eq!(
                    (reply.json["status"].as_str(), reply.json["amount"].as_i64()),
                    (Some("succeeded"), Some(amount))
                );
                let refund_id = reply.json["refund_id"].as_str().unwrap().to_owned();
                granted.insert(key, (amount, refund_id));
            }
            (409, "/problems/refund-exceeds-remaining") => {
                let remaining = reply.json["remaining_amount"].as_i64().unwrap();
                assert!(remaining < amount, "refused though it fit: {}", reply.body);
                refused.insert(key, amount);
            }
            _ => panic!("{key}: unexpected answer {reply:?}"),
        }
    }

    // THEN what was granted fits the capture, and some did not fit
    let granted_sum: i64 = granted.values().map(|(a, _)| a).sum();
    assert!(granted_sum <= 1000, "{granted:?}");
    assert!(!refused.is_empty(), "2500 cannot all fit into 1000");
    assert_eq!(granted.len() + refused.len(), 20);
    // AND no refund was turned away that would still fit at the end
    let remaining = 1000 - granted_sum;
    assert!(
        refused.values().all(|amount| *amount > remaining),
        "remaining {remaining}, refused {refused:?}"
    );
    // AND the PSP refunded exactly the granted refunds, never past the capture
    let psp_refunds = stack.psp.refunds();
    assert_eq!(psp_refunds.len(), granted.len());
    assert_eq!(
        psp_refunds.iter().map(|r| r.amount).sum::<i64>(),
        granted_sum
    );
    assert!(psp_refunds.iter().all(|r| r.status == "succeeded"));
    let psp_refund_ids: BTreeSet<_> = psp_refunds
        .iter()
        .map(|r| r.refund_id.clone().unwrap())
        .collect();
    let granted_ids: BTreeSet<_> = granted.values().map(|(_, id)| id.clone()).collect();
    assert_eq!(psp_refund_ids, granted_ids);
    // AND the payment's stored amounts say the same
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (
            Some(granted_sum),
            Some(0),
            Some(i64::try_from(granted.len()).unwrap())
        )
    );
    // AND one refund item per 201, numbered 1..n, all succeeded
    let items = stack.refund_items(&payment_id).await;
    assert_eq!(items.len(), granted.len());
    let numbers: BTreeSet<String> = items
        .values()
        .map(|item| string_attribute(item, "number").unwrap())
        .collect();
    let expected: BTreeSet<String> = (1..=granted.len()).map(|n| n.to_string()).collect();
    assert_eq!(numbers, expected);
    let item_ids: BTreeSet<String> = items
        .keys()
        .map(|pk| pk.trim_start_matches("refund#").to_owned())
        .collect();
    assert_eq!(item_ids, granted_ids);
    // AND nothing was kept for a refused key: it can be used afresh
    for key in refused.keys() {
        assert_eq!(stack.refund_record(STAFF, key).await, None, "{key}");
    }
    for key in granted.keys() {
        assert!(stack.refund_record(STAFF, key).await.is_some(), "{key}");
    }
}
