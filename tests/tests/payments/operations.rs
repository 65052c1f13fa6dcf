//! POST /payments/{id}/capture and /cancel through the refund function's handler, against
//! DynamoDB Local and the fake PSP over HTTP: every answer, what the PSP was asked (under which
//! key), and what the tables hold after.

use async_trait::async_trait;
use payonce::domain::{PaymentStatus, RefundSettlement};
use payonce::ports::{
    ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspError, PspLookup, PspOutcome,
    RefundOutcome, RefundRequest,
};
use payonce_fake_psp::{FakeCharge, FakePspConfig};
use payonce_tests::stack::{PaymentStack, CHECKOUT_ORIGIN, STAFF};
use serde_json::json;
use std::time::Duration;

use super::authenticate;

/// The fake's one charge for `payment_id`.
fn charge_of(stack: &PaymentStack, payment_id: &str) -> FakeCharge {
    let mut charges: Vec<FakeCharge> = stack
        .psp
        .charges()
        .into_iter()
        .filter(|c| c.payment_id.as_deref() == Some(payment_id))
        .collect();
    assert_eq!(charges.len(), 1, "{charges:?}");
    charges.remove(0)
}

/// The order of `payment_id` as the API shows it.
async fn order_state(stack: &PaymentStack, payment_id: &str) -> String {
    let payment = stack.payment(payment_id).await;
    let reply = stack.get_order(&payment.owner, &payment.order_id).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json["payment_state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_capture_pays_the_order_once_in_three_requests_and_replays_from_one() {
    // GIVEN an authorized payment
    let stack = PaymentStack::start().await;
    let id = stack.authorized_payment("alice", "auth-1").await;
    assert_eq!(order_state(&stack, &id).await, "authorized");

    // WHEN staff capture all of it
    stack.counter.reset();
    let captured = stack.capture(&id, "cap-1", json!({})).await;

    // THEN 201: succeeded with what was captured, in three DynamoDB requests
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(captured.json["status"], "succeeded");
    assert_eq!(captured.json["amount_captured"], 3000);
    assert!(
        stack.counter.total() <= 3,
        "{:?}",
        stack.counter.by_operation()
    );
    // AND the PSP captured once, under the key derived from the payment
    let charge = charge_of(&stack, &id);
    assert_eq!(charge.amount_captured, Some(3000));
    assert_eq!(charge.captures.len(), 1);
    assert_eq!(
        charge.captures[0].idempotency_key.as_deref(),
        Some(format!("payonce-capture-{id}").as_str())
    );
    // AND the order is paid, the payment stored succeeded
    assert_eq!(order_state(&stack, &id).await, "paid");
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.amount_captured()),
        (PaymentStatus::Succeeded, 3000)
    );

    // WHEN the same key comes again
    let seen = stack.psp.requests_seen();
    stack.counter.reset();
    let replay = stack.capture(&id, "cap-1", json!({})).await;
    // THEN it replays from one request, and the PSP is not called
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json, captured.json);
    assert_eq!(
        stack.counter.total(),
        1,
        "{:?}",
        stack.counter.by_operation()
    );
    assert_eq!(stack.psp.requests_seen(), seen);
}

#[tokio::test]
async fn a_partial_capture_bounds_the_refunds_and_a_second_key_captures_nothing() {
    let stack = PaymentStack::start().await;
    let id = stack.authorized_payment("alice", "auth-2").await;

    // WHEN staff capture 1800 of the 3000
    let captured = stack.capture(&id, "cap-a", json!({"amount": 1800})).await;
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(captured.json["amount_captured"], 1800);

    // AND another staff key asks for a capture
    let before = stack.snapshot().await;
    let second = stack.capture(&id, "cap-b", json!({"amount": 1200})).await;
    // THEN 409 payment-not-capturable, nothing written, one capture at the PSP
    assert_eq!(
        (second.status, second.problem_type()),
        (409, "/problems/payment-not-capturable"),
        "{}",
        second.body
    );
    assert_eq!(second.json["payment_status"], "succeeded");
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(charge_of(&stack, &id).captures.len(), 1);

    // AND refunds are bounded by the capture, not the amount
    let over = stack.refund(&id, "rf-1", json!({"amount": 2000})).await;
    assert_eq!(
        (over.status, over.problem_type()),
        (409, "/problems/refund-exceeds-remaining"),
        "{}",
        over.body
    );
    assert_eq!(over.json["remaining_amount"], 1800);
    let all = stack.refund(&id, "rf-2", json!({})).await;
    assert_eq!(all.status, 201, "{}", all.body);
    assert_eq!(all.json["amount"], 1800);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_captures_under_different_keys_captures_once() {
    // GIVEN an authorized payment
    let stack = std::sync::Arc::new(PaymentStack::start().await);
    let id = stack.authorized_payment("alice", "auth-3").await;

    // WHEN eight staff requests, each with its own key, capture it at once
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (stack, id) = (stack.clone(), id.clone());
            tokio::spawn(async move { stack.capture(&id, &format!("storm-{i}"), json!({})).await })
        })
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }

    // THEN exactly one captured, every other got 409 (not capturable, or the key in use)
    let captured = replies.iter().filter(|r| r.status == 201).count();
    assert_eq!(
        captured,
        1,
        "{:?}",
        replies.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    for reply in replies.iter().filter(|r| r.status != 201) {
        assert_eq!(
            (reply.status, reply.problem_type()),
            (409, "/problems/payment-not-capturable"),
            "{}",
            reply.body
        );
    }
    // AND the PSP captured once, the payment and order agree
    let charge = charge_of(&stack, &id);
    assert_eq!(charge.captures.len(), 1, "{charge:?}");
    assert_eq!(charge.amount_captured, Some(3000));
    assert_eq!(order_state(&stack, &id).await, "paid");
}

#[tokio::test]
async fn captures_that_cannot_be_made_are_refused_before_anything_is_written_or_sent() {
    let stack = PaymentStack::start().await;
    let authorized = stack.authorized_payment("alice", "auth-4").await;
    let paid = stack.paid_payment("bob", "paid-4", "pm_card_visa").await;
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();

    // more than the authorization holds
    let over = stack
        .capture(&authorized, "cap-over", json!({"amount": 3001}))
        .await;
    assert_eq!(
        (over.status, over.problem_type()),
        (409, "/problems/capture-exceeds-authorized"),
        "{}",
        over.body
    );
    assert_eq!(over.json["amount_capturable"], 3000);
    // a payment captured at once
    let captured = stack.capture(&paid, "cap-paid", json!({})).await;
    assert_eq!(
        (captured.status, captured.problem_type()),
        (409, "/problems/payment-not-capturable"),
        "{}",
        captured.body
    );
    assert_eq!(captured.json["payment_status"], "succeeded");
    // no such payment
    let missing = stack.capture("pay_missing", "cap-missing", json!({})).await;
    assert_eq!(
        (missing.status, missing.problem_type()),
        (404, "/problems/not-found")
    );
    // an amount that is no amount, and a field the body does not have
    for (key, body) in [
        ("cap-zero", json!({"amount": 0})),
        ("cap-field", json!({"amount": 5, "currency": "jpy"})),
    ] {
        let bad = stack.capture(&authorized, key, body).await;
        assert_eq!(
            (bad.status, bad.problem_type()),
            (400, "/problems/invalid-request"),
            "{}",
            bad.body
        );
    }
    // a token without the staff scope, even the owner's
    let owner = stack
        .operate("alice", &[], &authorized, "capture", "cap-owner", "{}")
        .await;
    assert_eq!(
        (owner.status, owner.problem_type()),
        (403, "/problems/insufficient-scope"),
        "{}",
        owner.body
    );
    // no key
    let keyless = stack
        .refund_request(payonce_tests::stack::scoped_api_event(
            "POST",
            &format!("/payments/{authorized}/capture"),
            Some(STAFF),
            payonce_tests::stack::STAFF_SCOPES,
            &[],
            "{}",
        ))
        .await;
    assert_eq!(
        (keyless.status, keyless.problem_type()),
        (400, "/problems/idempotency-key-missing")
    );
    // THEN nothing was written and the PSP saw nothing
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
}

#[tokio::test]
async fn a_capture_the_psp_refuses_is_402_and_the_lapsed_authorization_frees_the_order() {
    // GIVEN an authorization the fake PSP lets lapse after a moment
    let stack = PaymentStack::start_with(
        FakePspConfig {
            authorization_expires_after: Duration::from_millis(300),
            ..Default::default()
        },
        Default::default(),
    )
    .await;
    let id = stack.authorized_payment("alice", "auth-5").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // WHEN staff capture it
    let refused = stack.capture(&id, "cap-late", json!({})).await;

    // THEN 402 capture-failed; the payment is canceled (expired) and the order free again
    assert_eq!(
        (refused.status, refused.problem_type()),
        (402, "/problems/capture-failed"),
        "{}",
        refused.body
    );
    let stored = stack.payment(&id).await;
    assert_eq!(stored.status, PaymentStatus::Canceled);
    assert_eq!(
        stored.progress.cancellation_reason,
        Some(payonce::domain::CancellationReason::Expired)
    );
    assert_eq!(order_state(&stack, &id).await, "unpaid");
    assert!(charge_of(&stack, &id).captures.is_empty());
    // AND the key replays the refusal
    let replay = stack.capture(&id, "cap-late", json!({})).await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/capture-failed")
    );
}

#[tokio::test]
async fn staff_cancel_an_authorization_and_its_order_is_free_again() {
    let stack = PaymentStack::start().await;
    let id = stack.authorized_payment("alice", "auth-6").await;
    let before = stack.snapshot().await;

    // WHEN the owner, without the staff scope, asks to cancel it THEN 403, nothing written
    let owner = stack.cancel("alice", &[], &id, "cancel-owner").await;
    assert_eq!(
        (owner.status, owner.problem_type()),
        (403, "/problems/insufficient-scope"),
        "{}",
        owner.body
    );
    // AND another user does not see it
    let stranger = stack.cancel("mallory", &[], &id, "cancel-x").await;
    assert_eq!(stranger.status, 404, "{}", stranger.body);
    assert_eq!(stack.snapshot().await, before);

    // WHEN staff cancel it
    let canceled = stack
        .cancel(STAFF, payonce_tests::stack::STAFF_SCOPES, &id, "cancel-1")
        .await;
    // THEN 200 canceled (requested); the PSP canceled once under the derived key
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    assert_eq!(canceled.json["status"], "canceled");
    assert_eq!(canceled.json["cancellation_reason"], "requested");
    let charge = charge_of(&stack, &id);
    assert_eq!(charge.outcome, "canceled");
    assert_eq!(charge.cancels.len(), 1);
    assert_eq!(
        charge.cancels[0].idempotency_key.as_deref(),
        Some(format!("payonce-cancel-{id}").as_str())
    );
    assert_eq!(order_state(&stack, &id).await, "unpaid");
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.progress.cancellation_reason),
        (
            PaymentStatus::Canceled,
            Some(payonce::domain::CancellationReason::Requested)
        )
    );
    // AND it can no longer be captured or canceled by another key, nothing written or sent
    let seen = stack.psp.requests_seen();
    let capture = stack.capture(&id, "cap-after", json!({})).await;
    assert_eq!(
        (capture.status, capture.problem_type()),
        (409, "/problems/payment-not-capturable")
    );
    let again = stack
        .cancel(STAFF, payonce_tests::stack::STAFF_SCOPES, &id, "cancel-2")
        .await;
    assert_eq!(
        (again.status, again.problem_type()),
        (409, "/problems/payment-not-cancelable"),
        "{}",
        again.body
    );
    assert_eq!(again.json["payment_status"], "canceled");
    assert_eq!(stack.psp.requests_seen(), seen);
    assert_eq!(stack.payment(&id).await, stored);
    // AND the first key replays, sending nothing
    let replay = stack
        .cancel(STAFF, payonce_tests::stack::STAFF_SCOPES, &id, "cancel-1")
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (200, Some("true"))
    );
    assert_eq!(stack.psp.requests_seen(), seen);
}

#[tokio::test]
async fn a_cancel_of_a_failed_payment_is_refused_and_changes_nothing() {
    // GIVEN a declined payment
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let declined = stack
        .pay(
            "alice",
            "declined-1",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa_chargeDeclined"}),
        )
        .await;
    assert_eq!(declined.status, 402, "{}", declined.body);
    let id = declined.json["payment_id"].as_str().unwrap().to_owned();
    let seen = stack.psp.requests_seen();
    let before = stack.payment(&id).await;

    // WHEN staff ask to cancel it
    let cancel = stack
        .cancel(
            STAFF,
            payonce_tests::stack::STAFF_SCOPES,
            &id,
            "cancel-failed",
        )
        .await;

    // THEN 409 payment-not-cancelable naming its status; nothing sent, the payment unchanged
    assert_eq!(
        (
            cancel.status,
            cancel.problem_type(),
            cancel.json["payment_status"].as_str()
        ),
        (409, "/problems/payment-not-cancelable", Some("failed")),
        "{}",
        cancel.body
    );
    assert_eq!(stack.psp.requests_seen(), seen);
    assert_eq!(stack.payment(&id).await, before);
}

#[tokio::test]
async fn the_owner_cancels_an_abandoned_3ds_payment_and_pays_with_another_card() {
    // GIVEN a payment waiting for 3-D Secure that the customer left
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let waiting = stack
        .pay(
            "alice",
            "3ds-1",
            json!({"order_id": order, "order_version": 1,
                   "payment_method": "pm_card_threeDSecure2Required",
                   "return_url": format!("{CHECKOUT_ORIGIN}/checkout/return")}),
        )
        .await;
    assert_eq!(waiting.status, 202, "{}", waiting.body);
    let id = waiting.json["payment_id"].as_str().unwrap().to_owned();
    // AND another attempt on the order is refused while it waits
    let blocked = stack
        .pay(
            "alice",
            "visa-1",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(blocked.status, 409, "{}", blocked.body);

    // WHEN the owner cancels it
    let canceled = stack.cancel("alice", &[], &id, "cancel-3ds").await;

    // THEN 200 canceled, the PSP's intent canceled, the order free again
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    assert_eq!(canceled.json["status"], "canceled");
    assert_eq!(charge_of(&stack, &id).outcome, "canceled");
    assert_eq!(order_state(&stack, &id).await, "unpaid");
    // AND the first key's replay answers that it ended without a charge
    let replay = stack
        .pay(
            "alice",
            "3ds-1",
            json!({"order_id": order, "order_version": 1,
                   "payment_method": "pm_card_threeDSecure2Required",
                   "return_url": format!("{CHECKOUT_ORIGIN}/checkout/return")}),
        )
        .await;
    assert_eq!(
        (replay.status, replay.problem_type()),
        (402, "/problems/payment-failed"),
        "{}",
        replay.body
    );
    // AND another card pays the order, once
    let paid = stack
        .pay(
            "alice",
            "visa-2",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(paid.status, 201, "{}", paid.body);
    let succeeded = stack
        .psp
        .charges()
        .into_iter()
        .filter(|c| c.outcome == "succeeded")
        .count();
    assert_eq!(succeeded, 1);
}

#[tokio::test]
async fn a_cancel_of_a_captured_payment_is_refused_and_changes_nothing() {
    let stack = PaymentStack::start().await;
    let id = stack.paid_payment("alice", "paid-7", "pm_card_visa").await;
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();
    let refused = stack
        .cancel(
            STAFF,
            payonce_tests::stack::STAFF_SCOPES,
            &id,
            "cancel-paid",
        )
        .await;
    assert_eq!(
        (refused.status, refused.problem_type()),
        (409, "/problems/payment-not-cancelable"),
        "{}",
        refused.body
    );
    assert_eq!(refused.json["payment_status"], "succeeded");
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);
}

/// A PSP whose capture and cancel answers go wrong: lost after the PSP acted (`Lose`), lost
/// before it was reached (`Drop`: nothing sent), or refused once without reaching it
/// (`RefuseOnce`).
struct FaultyOperations<P> {
    inner: P,
    fault: OperationFault,
    sent: std::sync::atomic::AtomicU32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OperationFault {
    Lose,
    Drop,
    RefuseOnce,
}

impl<P> FaultyOperations<P> {
    fn new(inner: P, fault: OperationFault) -> Self {
        Self {
            inner,
            fault,
            sent: std::sync::atomic::AtomicU32::new(0),
        }
    }
}

#[async_trait]
impl<P: Psp> Psp for FaultyOperations<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> payonce::domain::PspKind {
        self.inner.kind()
    }
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        self.inner.create_charge(request, timeout).await
    }
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.inner.lookup(payment_id).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.inner.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.inner.cancel(provider_payment_id).await
    }
    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        let n = self.sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.fault {
            OperationFault::Lose => {
                let _ = self.inner.operate(request, timeout).await;
                OperationOutcome::Unknown {
                    reason: "the answer was lost".into(),
                }
            }
            OperationFault::Drop => OperationOutcome::Unknown {
                reason: "timed out before the PSP (simulated)".into(),
            },
            OperationFault::RefuseOnce if n == 0 => OperationOutcome::Refused {
                code: "processing_error".into(),
            },
            OperationFault::RefuseOnce => self.inner.operate(request, timeout).await,
        }
    }
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        self.inner.create_refund(request, timeout).await
    }
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.inner
            .lookup_refund(provider_payment_id, refund_id)
            .await
    }
}

#[tokio::test]
async fn a_capture_whose_answer_was_lost_is_202_and_its_retry_captures_nothing_more() {
    // GIVEN an authorized payment, and a capture whose answer is lost after the PSP captured
    let stack = PaymentStack::start().await;
    let id = stack.authorized_payment("alice", "auth-8").await;
    let losing = stack.operations_with(FaultyOperations::new(
        payonce_tests::stack::psp_for(&stack.psp),
        OperationFault::Lose,
    ));
    let pending = stack
        .capture_through(&losing, &id, "cap-lost", json!({"amount": 2000}))
        .await;

    // THEN 202 with Retry-After: the payment still authorized, the order held
    assert_eq!(pending.status, 202, "{}", pending.body);
    assert_eq!(pending.json["status"], "authorized");
    assert!(pending.header("retry-after").is_some());
    assert_eq!(order_state(&stack, &id).await, "authorized");
    // AND another key is refused while the capture is claimed
    let other = stack.capture(&id, "cap-other", json!({})).await;
    assert_eq!(
        (other.status, other.problem_type()),
        (409, "/problems/payment-not-capturable"),
        "{}",
        other.body
    );
    // AND the same key, before the lease lapses, is told to wait
    let early = stack
        .capture(&id, "cap-lost", json!({"amount": 2000}))
        .await;
    assert_eq!(
        (early.status, early.problem_type()),
        (409, "/problems/idempotency-key-in-use"),
        "{}",
        early.body
    );

    // WHEN the same key comes back once the lease lapsed
    stack.clock.advance(Duration::from_secs(60));
    let retried = stack
        .capture(&id, "cap-lost", json!({"amount": 2000}))
        .await;

    // THEN the re-sent capture is the same one at the PSP: 201, one capture of 2000
    assert_eq!(retried.status, 201, "{}", retried.body);
    assert_eq!(retried.json["amount_captured"], 2000);
    let charge = charge_of(&stack, &id);
    assert_eq!(charge.captures.len(), 1, "{charge:?}");
    assert_eq!(charge.amount_captured, Some(2000));
    assert_eq!(order_state(&stack, &id).await, "paid");
}

#[tokio::test]
async fn a_capture_left_unknown_by_a_client_that_never_returns_is_finished_by_reconcile() {
    // GIVEN a capture the PSP never received (the call timed out before it), whose client
    // never comes back
    let stack = PaymentStack::start().await;
    let id = stack.authorized_payment("alice", "auth-9").await;
    let dropping = stack.operations_with(FaultyOperations::new(
        payonce_tests::stack::psp_for(&stack.psp),
        OperationFault::Drop,
    ));
    let pending = stack
        .capture_through(&dropping, &id, "cap-gone", json!({"amount": 1000}))
        .await;
    assert_eq!(pending.status, 202, "{}", pending.body);
    assert!(charge_of(&stack, &id).captures.is_empty());

    // WHEN reconcile runs once the request's lease has lapsed (a day later: the record of a
    // claim in progress never expires)
    stack.clock.advance(Duration::from_secs(25 * 3600));
    let report = stack.reconcile().await;

    // THEN it sends the claim again, as claimed: one capture of 1000 under the payment's key,
    // the payment succeeded and its order paid
    assert_eq!(report.succeeded, 1, "{report:?}");
    let charge = charge_of(&stack, &id);
    assert_eq!(charge.captures.len(), 1, "{charge:?}");
    assert_eq!(charge.captures[0].amount, 1000);
    assert_eq!(
        charge.captures[0].idempotency_key.as_deref(),
        Some(format!("payonce-capture-{id}").as_str())
    );
    assert_eq!(order_state(&stack, &id).await, "paid");
    // AND the client's key, if it ever comes back, replays the capture
    let replay = stack
        .capture(&id, "cap-gone", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json["amount_captured"], 1000);
}

#[tokio::test]
async fn after_a_refused_capture_the_next_claim_has_a_psp_key_of_its_own() {
    // GIVEN a capture the PSP refused (its refusal stored under the first claim's key)
    let stack = PaymentStack::start().await;
    let id = stack.authorized_payment("alice", "auth-10").await;
    let refusing = stack.operations_with(FaultyOperations::new(
        payonce_tests::stack::psp_for(&stack.psp),
        OperationFault::RefuseOnce,
    ));
    let refused = stack
        .capture_through(&refusing, &id, "cap-first", json!({"amount": 500}))
        .await;
    assert_eq!(
        (refused.status, refused.problem_type()),
        (402, "/problems/capture-failed"),
        "{}",
        refused.body
    );
    // THEN the claim is released: the payment authorized, nothing claimed, once counted
    let stored = stack.payment(&id).await;
    assert_eq!(
        (
            stored.status,
            stored.operation.is_none(),
            stored.operation_count
        ),
        (PaymentStatus::Authorized, true, 1)
    );

    // WHEN another key captures
    let captured = stack
        .capture_through(&refusing, &id, "cap-second", json!({}))
        .await;

    // THEN it is sent under the second claim's key, and captures
    assert_eq!(captured.status, 201, "{}", captured.body);
    let charge = charge_of(&stack, &id);
    assert_eq!(
        charge.captures[0].idempotency_key.as_deref(),
        Some(format!("payonce-capture-{id}-2").as_str())
    );
    assert_eq!(charge.amount_captured, Some(3000));
}

#[tokio::test]
async fn an_owners_cancel_resent_after_the_payment_was_authorized_is_not_sent() {
    // GIVEN a manual 3-D Secure payment waiting for the customer, whose owner's cancel never
    // reached the PSP
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let waiting = stack
        .pay(
            "alice",
            "3ds-manual",
            json!({"order_id": order, "order_version": 1,
                   "payment_method": "pm_card_threeDSecure2Required", "capture": "manual",
                   "return_url": format!("{CHECKOUT_ORIGIN}/checkout/return")}),
        )
        .await;
    assert_eq!(waiting.status, 202, "{}", waiting.body);
    let id = waiting.json["payment_id"].as_str().unwrap().to_owned();
    let dropping = stack.operations_with(FaultyOperations::new(
        payonce_tests::stack::psp_for(&stack.psp),
        OperationFault::Drop,
    ));
    let event = payonce_tests::stack::api_event(
        "POST",
        &format!("/payments/{id}/cancel"),
        Some("alice"),
        &[("idempotency-key", "cancel-owner")],
        "",
    );
    let pending = payonce_tests::stack::Reply::from(
        payonce_refund::handler::handle(&stack.refunds, &dropping, event).await,
    );
    assert_eq!(pending.status, 202, "{}", pending.body);
    // AND the customer then completed 3-D Secure: the payment is authorized
    let page = waiting.json["next_action"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let completed = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(&page)
        .form(&[("result", "complete")])
        .send()
        .await
        .unwrap();
    assert_eq!(completed.status().as_u16(), 303);
    let intent = charge_of(&stack, &id).id;
    let authorized = payonce::service::apply_settlement(
        stack.charge.store(),
        &id,
        &payonce::domain::Settlement::Authorized {
            provider_payment_id: intent,
            amount_capturable: 3000,
            capture_before_ms: None,
        },
    )
    .await
    .unwrap();
    assert!(matches!(authorized, payonce::service::Applied::Moved(_)));
    let seen = stack.psp.requests_seen();

    // WHEN the owner retries the cancel once its lease lapsed
    stack.clock.advance(Duration::from_secs(60));
    let retried = stack.cancel("alice", &[], &id, "cancel-owner").await;

    // THEN it is refused as a fresh owner's cancel of an authorization would be, nothing is
    // sent, and the claim is released for staff
    assert_eq!(
        (retried.status, retried.problem_type()),
        (403, "/problems/insufficient-scope"),
        "{}",
        retried.body
    );
    assert_eq!(stack.psp.requests_seen(), seen);
    let stored = stack.payment(&id).await;
    assert_eq!(
        (stored.status, stored.operation.is_none()),
        (PaymentStatus::Authorized, true)
    );
    let captured = stack.capture(&id, "cap-after-owner", json!({})).await;
    assert_eq!(captured.status, 201, "{}", captured.body);
}

#[tokio::test]
async fn omise_authorizes_captures_whole_and_reverses() {
    // GIVEN an Omise deployment and two authorizations of 5000 THB
    let stack = PaymentStack::start_with(FakePspConfig::omise(), Default::default()).await;
    let mut authorized = Vec::new();
    for key in ["omise-auth-1", "omise-auth-2"] {
        let order = stack
            .create_order_of("alice", payonce::domain::Currency::Thb, 1, 5000)
            .await;
        let reply = stack
            .pay(
                "alice",
                key,
                json!({"order_id": order, "order_version": 1,
                       "payment_method": "pm_card_visa", "capture": "manual"}),
            )
            .await;
        assert_eq!(
            (reply.status, reply.json["status"].as_str()),
            (201, Some("authorized")),
            "{}",
            reply.body
        );
        assert_eq!(reply.json["amount_capturable"], 5000);
        assert!(reply.json["capture_before"].is_i64(), "{}", reply.body);
        authorized.push(reply.json["payment_id"].as_str().unwrap().to_owned());
    }
    let (first, second) = (&authorized[0], &authorized[1]);
    assert_eq!(charge_of(&stack, first).outcome, "authorized");

    // WHEN staff capture part of one THEN 400: Omise captures authorizations whole; nothing
    // written, nothing sent
    let before = stack.snapshot().await;
    let seen = stack.psp.requests_seen();
    let part = stack
        .capture(first, "omise-cap-part", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (part.status, part.problem_type()),
        (400, "/problems/invalid-request"),
        "{}",
        part.body
    );
    assert_eq!(stack.snapshot().await, before);
    assert_eq!(stack.psp.requests_seen(), seen);

    // WHEN they capture all of it THEN 201, one capture under the payment's key, order paid
    let captured = stack.capture(first, "omise-cap", json!({})).await;
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(captured.json["amount_captured"], 5000);
    let charge = charge_of(&stack, first);
    assert_eq!(
        (charge.outcome.as_str(), charge.amount_captured),
        ("succeeded", Some(5000))
    );
    assert_eq!(
        charge.captures[0].idempotency_key.as_deref(),
        Some(format!("payonce-capture-{first}").as_str())
    );
    assert_eq!(order_state(&stack, first).await, "paid");
    // AND the replay answers from the store
    let seen = stack.psp.requests_seen();
    let replay = stack.capture(first, "omise-cap", json!({})).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(stack.psp.requests_seen(), seen);

    // WHEN staff cancel the other THEN Omise reverses it and its order is free again
    let canceled = stack
        .cancel(
            STAFF,
            payonce_tests::stack::STAFF_SCOPES,
            second,
            "omise-cancel",
        )
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    assert_eq!(canceled.json["status"], "canceled");
    let charge = charge_of(&stack, second);
    assert_eq!(charge.outcome, "canceled");
    assert_eq!(
        charge.cancels[0].idempotency_key.as_deref(),
        Some(format!("payonce-cancel-{second}").as_str())
    );
    assert_eq!(order_state(&stack, second).await, "unpaid");
}

#[tokio::test]
async fn omise_3ds_waits_for_the_customer_then_pays_once() {
    // GIVEN an Omise deployment and a card that asks for 3-D Secure
    let stack = PaymentStack::start_with(FakePspConfig::omise(), Default::default()).await;
    let order = stack
        .create_order_of("alice", payonce::domain::Currency::Thb, 1, 5000)
        .await;
    let request = json!({"order_id": order, "order_version": 1,
        "payment_method": "pm_card_threeDSecure2Required",
        "return_url": format!("{CHECKOUT_ORIGIN}/checkout/return")});

    // WHEN it is paid THEN 202 requires_action, the redirect the fake's page
    let first = stack.pay("alice", "omise-3ds", request.clone()).await;
    assert_eq!(first.status, 202, "{}", first.body);
    assert_eq!(first.json["status"], "requires_action");
    let url = first.json["next_action"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(url.contains("/_fake/authenticate/chrg_"), "{url}");
    let id = first.json["payment_id"].as_str().unwrap().to_owned();
    assert_eq!(charge_of(&stack, &id).outcome, "pending");

    // WHEN the customer completes it and reconcile looks (the webhook may be lost)
    assert_eq!(authenticate(&url, "complete").await.0, 303);
    stack.clock.advance(Duration::from_secs(10 * 60));
    let report = stack.reconcile().await;

    // THEN the payment succeeded, once, and the return page's replay shows it
    assert_eq!(report.succeeded, 1, "{report:?}");
    let paid = stack.pay("alice", "omise-3ds", request).await;
    assert_eq!(
        (paid.status, paid.json["status"].as_str()),
        (201, Some("succeeded")),
        "{}",
        paid.body
    );
    assert_eq!(stack.psp.succeeded_charges_for(&id), 1);
    assert_eq!(order_state(&stack, &id).await, "paid");
}
