//! Finishing an attempt on the charge path: the payment, its order and the completed record in
//! one write, fenced on the lease and on the payment status that was read. A success leaves the
//! order stored `processing` under the attempt, which every reader sees as paid.

use super::*;
use payonce::domain::{transition, Failure, FailureKind, OrderPaymentState, Transition};
use payonce::idempotency::{RecordState, StoreError};
use payonce::ports::{ResumeOutcome, SettleOutcome};

pub async fn a_success_leaves_the_order_to_read_as_paid_and_completes_the_record<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt under way
    let first = begun(&h, "finish-ok").await;
    let before = live_record(&h, &first.claim.key).await;
    h.clock().advance(Duration::from_secs(2));
    let now_ms = h.clock().now_ms();

    // WHEN the PSP approved and the attempt finishes
    let step = transition(&first.payment, &succeeded("pi_ok"));
    let outcome = h
        .payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();

    // THEN the payment succeeded, as answered and as stored
    let expected = Payment {
        status: PaymentStatus::Succeeded,
        provider_payment_id: Some("pi_ok".into()),
        updated_at_ms: now_ms,
        ..first.payment.clone()
    };
    assert_eq!(
        outcome,
        SettleOutcome::Settled(Box::new(expected.clone())),
        "{}",
        H::NAME
    );
    assert_eq!(payment_now(&h, &first.payment.payment_id).await, expected);
    // AND the order is not written: still stored as the attempt reserved it...
    let reserved = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        (reserved.payment_state, reserved.payment_id.clone()),
        (
            OrderPaymentState::Processing,
            Some(first.payment.payment_id.clone())
        ),
        "{}",
        H::NAME
    );
    // ...and read as paid by it, through the attempt that holds it
    let seen = payonce::service::orders::settled(h.payments(), reserved.clone())
        .await
        .unwrap();
    assert_eq!(
        seen,
        Order {
            payment_state: OrderPaymentState::Paid,
            ..reserved
        },
        "{}",
        H::NAME
    );
    // AND the record is COMPLETED with the payment's view as its result, lease cleared, kept
    // as long as the payment
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(stored_result(&record), view_json(&expected), "{}", H::NAME);
    assert_eq!(record.lease(), None);
    assert_eq!(record.expires_at_s, CHARGE_RECORD_NEVER_EXPIRES_S);
    assert_eq!(
        (
            &record.attempt_id,
            &record.fingerprint,
            record.created_at_ms
        ),
        (
            &before.attempt_id,
            &before.fingerprint,
            before.created_at_ms
        )
    );
}

pub async fn a_decline_fails_the_payment_and_releases_the_order<H: PaymentStoreHarness>(h: H) {
    // GIVEN an attempt under way
    let first = begun(&h, "finish-declined").await;

    // WHEN the issuer declined and the attempt finishes
    let step = transition(&first.payment, &declined("pi_no"));
    let outcome = h
        .payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();

    // THEN the payment failed with the decline
    let SettleOutcome::Settled(after) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    assert_eq!(after.status, PaymentStatus::Failed);
    assert_eq!(
        after.failure,
        Some(Failure {
            kind: FailureKind::Declined,
            decline_code: Some("generic_decline".into()),
        })
    );
    assert_eq!(payment_now(&h, &first.payment.payment_id).await, *after);
    // AND the order is released: unpaid, naming no attempt
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        (order.payment_state, order.payment_id),
        (OrderPaymentState::Unpaid, None),
        "{}",
        H::NAME
    );
    // AND the record stores the failed view (the decline is replayed)
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(stored_result(&record), view_json(&after), "{}", H::NAME);
}

pub async fn finishing_a_payment_a_webhook_moved_is_moved_and_writes_nothing<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt whose success a webhook settled while the charge call was out
    let first = begun(&h, "finish-moved").await;
    let webhook = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_hook")),
            None,
        )
        .await
        .unwrap();
    assert!(matches!(webhook, SettleOutcome::Settled(_)), "{webhook:?}");
    let before = persisted(&h, &first).await;

    // WHEN the charge path finishes on the payment it read before (processing), with a decline
    let step = transition(&first.payment, &declined("pi_late"));
    let outcome = h
        .payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();

    // THEN it is told the payment moved, and nothing was written (not even the record)
    assert_eq!(outcome, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);

    // AND WHEN it finishes without a change, still on the stale read
    let outcome = h
        .payments()
        .finish_attempt(
            &first.payment,
            &Transition::Unchanged,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    // THEN that too is Moved: the record must never describe a payment that is not so
    assert_eq!(outcome, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
}

pub async fn finishing_with_a_lost_lease_is_lease_lost_and_writes_nothing<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt taken over by another invocation after its lease lapsed
    let first = begun(&h, "finish-zombie").await;
    h.clock()
        .advance(Duration::from_millis(LEASE_MS as u64 + 1_000));
    let resumed = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &fresh_lease(&h),
            &first.payment,
        )
        .await
        .unwrap();
    assert_eq!(resumed, ResumeOutcome::Resumed);
    let before = persisted(&h, &first).await;

    // WHEN the first (zombie) invocation finishes under its old lease
    let step = transition(&first.payment, &succeeded("pi_zombie"));
    let outcome = h
        .payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await;

    // THEN the lease is lost, and neither the payment, the order nor the record changed
    assert!(
        matches!(&outcome, Err(StoreError::LeaseLost { key }) if *key == first.claim.key),
        "{}: {outcome:?}",
        H::NAME
    );
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
}

pub async fn finishing_unchanged_completes_the_record_with_the_pending_view<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt whose PSP outcome is unknown (timeout)
    let first = begun(&h, "finish-pending").await;
    let before = persisted(&h, &first).await;

    // WHEN it finishes without a transition (answer 202)
    let outcome = h
        .payments()
        .finish_attempt(
            &first.payment,
            &Transition::Unchanged,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();

    // THEN the payment is as read, the order still reserved, and the record completed with the
    // processing view
    assert_eq!(
        outcome,
        SettleOutcome::Settled(Box::new(first.payment.clone())),
        "{}",
        H::NAME
    );
    let after = persisted(&h, &first).await;
    assert_eq!(
        (&after.order, &after.payment),
        (&before.order, &before.payment)
    );
    let record = after.record.expect("the record");
    assert_eq!(stored_result(&record), view_json(&first.payment));
    assert!(matches!(record.state, RecordState::Completed { .. }));
}

pub async fn a_finish_sent_again_after_its_answer_was_lost_is_that_finish<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    use payonce::ports::FinishedBy;
    // GIVEN a success finished (one write of the payment), whose answer was lost
    let first = begun(&h, "finish-again").await;
    let step = transition(&first.payment, &succeeded("pi_again"));
    let lease = &first.claim.lease_token;
    let written = h
        .payments()
        .finish_attempt(&first.payment, &step, lease, FinishedBy::Charge)
        .await
        .unwrap();
    let after = persisted(&h, &first).await;

    // WHEN the SDK sends the same write again, and it meets its own earlier try
    let again = h
        .payments()
        .finish_attempt(&first.payment, &step, lease, FinishedBy::Charge)
        .await
        .unwrap();
    // THEN that is the finish, written (not a lease lost to someone: the shopper was charged),
    // and nothing more is written
    assert_eq!(again, written, "{}", H::NAME);
    assert_eq!(persisted(&h, &first).await, after, "{}", H::NAME);

    // AND a finish under another token on that payment is still refused
    let zombie = h
        .payments()
        .finish_attempt(
            &first.payment,
            &step,
            &LeaseToken::generate(),
            FinishedBy::Charge,
        )
        .await
        .unwrap();
    assert_eq!(zombie, SettleOutcome::Moved, "{}", H::NAME);

    // GIVEN an attempt whose outcome is unknown, its record completed with nothing moved
    let pending = begun(&h, "finish-again-pending").await;
    let lease = &pending.claim.lease_token;
    let written = h
        .payments()
        .finish_attempt(
            &pending.payment,
            &Transition::Unchanged,
            lease,
            FinishedBy::Charge,
        )
        .await
        .unwrap();
    // WHEN that write is sent again
    let again = h
        .payments()
        .finish_attempt(
            &pending.payment,
            &Transition::Unchanged,
            lease,
            FinishedBy::Charge,
        )
        .await
        .unwrap();
    // THEN it is that write
    assert_eq!(again, written, "{}", H::NAME);

    // GIVEN a lapsed attempt that reconcile took over, and the takeover's retry
    let lapsed = begun(&h, "takeover-again").await;
    h.clock()
        .advance(Duration::from_millis(LEASE_MS as u64 + 1_000));
    let ours = fresh_lease(&h);
    let taken = h
        .payments()
        .take_over_charge(&lapsed.claim.key, &lapsed.claim.lease_token, &ours)
        .await
        .unwrap();
    let retaken = h
        .payments()
        .take_over_charge(&lapsed.claim.key, &lapsed.claim.lease_token, &ours)
        .await
        .unwrap();
    // THEN the retry is the takeover; another taker from the same token still loses
    assert!(
        matches!(taken, payonce::idempotency::TakeoverOutcome::TakenOver(_)),
        "{}: {taken:?}",
        H::NAME
    );
    assert_eq!(retaken, taken, "{}", H::NAME);
    let lost = h
        .payments()
        .take_over_charge(
            &lapsed.claim.key,
            &lapsed.claim.lease_token,
            &fresh_lease(&h),
        )
        .await
        .unwrap();
    assert!(
        matches!(lost, payonce::idempotency::TakeoverOutcome::Lost(Some(_))),
        "{}: {lost:?}",
        H::NAME
    );
}

pub async fn reconciles_finish_of_a_success_writes_the_order_paid<H: PaymentStoreHarness>(h: H) {
    use payonce::ports::FinishedBy;
    // GIVEN an attempt whose handler died, and whose lapsed lease reconcile took over
    let first = begun(&h, "reconcile-finish").await;
    h.clock()
        .advance(Duration::from_millis(LEASE_MS as u64 + 1_000));
    let ours = fresh_lease(&h);
    h.payments()
        .take_over_charge(&first.claim.key, &first.claim.lease_token, &ours)
        .await
        .unwrap();

    // WHEN reconcile finishes it: the PSP had charged
    let step = transition(&first.payment, &succeeded("pi_late"));
    let outcome = h
        .payments()
        .finish_attempt(&first.payment, &step, &ours.token, FinishedBy::Reconcile)
        .await
        .unwrap();

    // THEN the payment succeeded and the order is stored paid by it (reconcile's lease never
    // reserved the order, so the order follows rather than stay `processing` under it)
    assert!(
        matches!(&outcome, SettleOutcome::Settled(p) if p.status == PaymentStatus::Succeeded),
        "{}: {outcome:?}",
        H::NAME
    );
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        (order.payment_state, order.payment_id),
        (
            OrderPaymentState::Paid,
            Some(first.payment.payment_id.clone())
        ),
        "{}",
        H::NAME
    );
}

store_suite!(
    a_finish_sent_again_after_its_answer_was_lost_is_that_finish,
    reconciles_finish_of_a_success_writes_the_order_paid,
    a_success_leaves_the_order_to_read_as_paid_and_completes_the_record,
    a_decline_fails_the_payment_and_releases_the_order,
    finishing_a_payment_a_webhook_moved_is_moved_and_writes_nothing,
    finishing_with_a_lost_lease_is_lease_lost_and_writes_nothing,
    finishing_unchanged_completes_the_record_with_the_pending_view,
);
