//! Captures and cancels through the stores: the operation is claimed on the payment with its
//! request's record, one at a time whatever the keys; its finish is fenced on the record's
//! lease; a release frees the payment for another (both backends).

use super::*;
use payonce::domain::{
    transition, CancellationReason, CaptureMethod, OperationKind, OrderPaymentState,
    PaymentOperation, PaymentStatus, Transition,
};
use payonce::ports::{
    BeginOperationOutcome, OperationRecordEnd, OperationStore, ResumeOutcome, SettleOutcome,
};

const OPERATION_SCOPE: &str = "payments.capture";

/// A payment authorized for 3000 (manual capture) on a new order under `key`.
async fn authorized<H: PaymentStoreHarness>(h: &H, key: &str) -> Payment {
    let order = stored_order(h, USER).await;
    let begun = begun_as(h, order, key, |payment| {
        payment.capture = CaptureMethod::Manual;
    })
    .await;
    let read = payment_now(h, &begun.payment.payment_id).await;
    let step = transition(
        &read,
        &Settlement::Authorized {
            provider_payment_id: format!("pi_{key}"),
            amount_capturable: 3000,
            capture_before_ms: None,
        },
    );
    match h.payments().settle(&read, &step, None).await.unwrap() {
        SettleOutcome::Settled(after) => *after,
        other => panic!("{}: not authorized: {other:?}", H::NAME),
    }
}

/// The record key of a staff request under `key`.
fn operation_key(key: &str) -> RecordKey {
    RecordKey::from_stored(format!("{OPERATION_SCOPE}#staff#{key}"))
}

/// The claim of a staff request under `key` on `payment`, leased for [`LEASE_MS`].
fn operation_claim<H: PaymentStoreHarness>(h: &H, payment: &Payment, key: &str) -> Claim {
    let lease = fresh_lease(h);
    Claim {
        key: operation_key(key),
        fingerprint: Fingerprint::of_value(&json!({"payment_id": payment.payment_id, "key": key})),
        attempt_id: payment.payment_id.clone(),
        lease_token: lease.token,
        lease_until_ms: lease.until_ms,
        expires_at_s: h.clock().now_ms() / 1000 + 86_400,
        request_id: None,
    }
}

/// A capture of `amount` claimed under `key`, the payment's first claim.
fn capture_of(key: &str, amount: i64) -> PaymentOperation {
    PaymentOperation {
        kind: OperationKind::Capture,
        amount: Some(amount),
        record: operation_key(key).as_str().to_owned(),
        seq: 1,
        from: PaymentStatus::Authorized,
    }
}

fn done() -> OperationRecordEnd {
    OperationRecordEnd::Complete {
        result: "done".into(),
        expires_at_s: i64::MAX / 2,
    }
}

pub async fn one_operation_at_a_time_and_its_finish_pays_the_order<H: PaymentStoreHarness>(h: H) {
    // GIVEN an authorized payment, and a capture of 1800 claimed on it under key A
    let read = authorized(&h, "op-pay").await;
    let claim_a = operation_claim(&h, &read, "a");
    let outcome = h
        .payments()
        .begin_operation(&claim_a, &read, &capture_of("a", 1800))
        .await
        .unwrap();
    assert_eq!(outcome, BeginOperationOutcome::Begun, "{}", H::NAME);
    // THEN the payment carries the operation and the record is in progress under A's lease
    let claimed = payment_now(&h, &read.payment_id).await;
    assert_eq!(
        claimed.operation,
        Some(capture_of("a", 1800)),
        "{}",
        H::NAME
    );
    assert_eq!(claimed.status, PaymentStatus::Authorized);
    let record = live_record(&h, &claim_a.key).await;
    assert_eq!(
        record.lease().map(|l| &l.token),
        Some(&claim_a.lease_token),
        "{}",
        H::NAME
    );

    // WHEN another key claims a capture on the payment as it read it before
    let claim_b = operation_claim(&h, &read, "b");
    let outcome = h
        .payments()
        .begin_operation(&claim_b, &read, &capture_of("b", 3000))
        .await
        .unwrap();
    // THEN it is refused with the payment as it is now, and B's record is not written
    assert_eq!(
        outcome,
        BeginOperationOutcome::PaymentChanged(Some(Box::new(claimed.clone()))),
        "{}",
        H::NAME
    );
    assert_eq!(h.raw_record(&claim_b.key).await, None, "{}", H::NAME);

    // WHEN the key A comes again with its own claim
    let again = h
        .payments()
        .begin_operation(&claim_a, &read, &capture_of("a", 1800))
        .await
        .unwrap();
    // THEN the key is taken: the record as it is
    assert_eq!(
        again,
        BeginOperationOutcome::KeyTaken(record),
        "{}",
        H::NAME
    );

    // WHEN A's capture finishes with the PSP's word
    let step = transition(
        &claimed,
        &Settlement::Captured {
            provider_payment_id: "pi_op-pay".into(),
            amount_captured: 1800,
        },
    );
    let finished = h
        .payments()
        .finish_operation(
            &claimed,
            &step,
            &claim_a.key,
            &claim_a.lease_token,
            &done(),
            false,
        )
        .await
        .unwrap();
    // THEN the payment succeeded with what was captured, its order is paid, the record is
    // completed, and the operation stays on the payment
    let SettleOutcome::Settled(after) = finished else {
        panic!("{}: {finished:?}", H::NAME);
    };
    let stored = payment_now(&h, &read.payment_id).await;
    assert_eq!(*after, stored, "{}", H::NAME);
    assert_eq!(stored.status, PaymentStatus::Succeeded);
    assert_eq!(stored.amount_captured(), 1800, "{}", H::NAME);
    assert_eq!(stored.operation, Some(capture_of("a", 1800)), "{}", H::NAME);
    let order = order_now(&h, &stored.order_id).await;
    assert_eq!(
        (order.payment_state, order.payment_id.as_deref()),
        (OrderPaymentState::Paid, Some(stored.payment_id.as_str())),
        "{}",
        H::NAME
    );
    let record = live_record(&h, &claim_a.key).await;
    assert_eq!(
        record.state,
        RecordState::Completed {
            result: "done".into()
        },
        "{}",
        H::NAME
    );
}

pub async fn a_finish_is_fenced_on_the_records_lease<H: PaymentStoreHarness>(h: H) {
    // GIVEN a capture claimed under key A whose lease then lapsed and was taken over
    let read = authorized(&h, "op-fence").await;
    let claim = operation_claim(&h, &read, "a");
    h.payments()
        .begin_operation(&claim, &read, &capture_of("a", 3000))
        .await
        .unwrap();
    let claimed = payment_now(&h, &read.payment_id).await;
    h.clock()
        .advance(Duration::from_millis(LEASE_MS as u64 + 1));
    let takeover = fresh_lease(&h);
    let resumed = h
        .payments()
        .resume_operation(&claim.key, &claim.lease_token, &takeover)
        .await
        .unwrap();
    assert_eq!(resumed, ResumeOutcome::Resumed, "{}", H::NAME);
    // AND a second takeover from the same lapsed lease finds the key moved
    let late = h
        .payments()
        .resume_operation(&claim.key, &claim.lease_token, &fresh_lease(&h))
        .await
        .unwrap();
    assert!(
        matches!(late, ResumeOutcome::KeyMoved(Some(_))),
        "{}: {late:?}",
        H::NAME
    );
    let before = persisted_operation(&h, &claim.key, &read).await;

    // WHEN the first holder finishes (a capture) or releases under its lost lease
    let step = transition(
        &claimed,
        &Settlement::Captured {
            provider_payment_id: "pi_op-fence".into(),
            amount_captured: 3000,
        },
    );
    let zombie = h
        .payments()
        .finish_operation(
            &claimed,
            &step,
            &claim.key,
            &claim.lease_token,
            &done(),
            false,
        )
        .await
        .unwrap();
    let zombie_release = h
        .payments()
        .finish_operation(
            &claimed,
            &Transition::Unchanged,
            &claim.key,
            &claim.lease_token,
            &OperationRecordEnd::Delete,
            true,
        )
        .await
        .unwrap();
    // THEN both are refused and nothing is written
    assert_eq!(zombie, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(zombie_release, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(
        persisted_operation(&h, &claim.key, &read).await,
        before,
        "{}",
        H::NAME
    );

    // WHEN the holder of the new lease finishes THEN it is written
    let written = h
        .payments()
        .finish_operation(&claimed, &step, &claim.key, &takeover.token, &done(), false)
        .await
        .unwrap();
    assert!(matches!(written, SettleOutcome::Settled(_)), "{}", H::NAME);
    assert_eq!(
        payment_now(&h, &read.payment_id).await.status,
        PaymentStatus::Succeeded
    );
}

pub async fn a_release_frees_the_payment_for_another_operation<H: PaymentStoreHarness>(h: H) {
    // GIVEN a capture claimed under key A that never reached the PSP
    let read = authorized(&h, "op-release").await;
    let claim = operation_claim(&h, &read, "a");
    h.payments()
        .begin_operation(&claim, &read, &capture_of("a", 3000))
        .await
        .unwrap();
    let claimed = payment_now(&h, &read.payment_id).await;

    // WHEN it is released, its record deleted
    let released = h
        .payments()
        .finish_operation(
            &claimed,
            &Transition::Unchanged,
            &claim.key,
            &claim.lease_token,
            &OperationRecordEnd::Delete,
            true,
        )
        .await
        .unwrap();
    // THEN the payment is as it was before the claim but for the count of claims, and the
    // record is gone
    assert!(matches!(released, SettleOutcome::Settled(_)), "{}", H::NAME);
    let now = payment_now(&h, &read.payment_id).await;
    assert_eq!(
        now,
        Payment {
            operation_count: 1,
            ..read.clone()
        },
        "{}",
        H::NAME
    );
    assert_eq!(h.raw_record(&claim.key).await, None, "{}", H::NAME);

    // WHEN another key claims a cancel on the payment as read before that first claim
    let claim_b = operation_claim(&h, &read, "b");
    let stale = PaymentOperation {
        kind: OperationKind::Cancel,
        amount: None,
        record: claim_b.key.as_str().to_owned(),
        seq: 1,
        from: PaymentStatus::Authorized,
    };
    let refused = h
        .payments()
        .begin_operation(&claim_b, &read, &stale)
        .await
        .unwrap();
    // THEN it is refused: its number (and PSP key) would be the released claim's
    assert!(
        matches!(refused, BeginOperationOutcome::PaymentChanged(_)),
        "{}: {refused:?}",
        H::NAME
    );
    assert_eq!(h.raw_record(&claim_b.key).await, None, "{}", H::NAME);

    // WHEN it claims the next number on the payment as it is, and the PSP confirms the cancel
    let cancel = PaymentOperation { seq: 2, ..stale };
    let begun = h
        .payments()
        .begin_operation(&claim_b, &now, &cancel)
        .await
        .unwrap();
    assert_eq!(begun, BeginOperationOutcome::Begun, "{}", H::NAME);
    let claimed = payment_now(&h, &read.payment_id).await;
    assert_eq!(claimed.operation, Some(cancel), "{}", H::NAME);
    assert_eq!(claimed.operation_count, 2, "{}", H::NAME);
    let step = transition(
        &claimed,
        &Settlement::Canceled {
            provider_payment_id: Some("pi_op-release".into()),
            reason: CancellationReason::Requested,
        },
    );
    h.payments()
        .finish_operation(
            &claimed,
            &step,
            &claim_b.key,
            &claim_b.lease_token,
            &done(),
            false,
        )
        .await
        .unwrap();
    // THEN the payment is canceled, out of the index, and its order free again
    let stored = payment_now(&h, &read.payment_id).await;
    assert_eq!(stored.status, PaymentStatus::Canceled, "{}", H::NAME);
    let order = order_now(&h, &stored.order_id).await;
    assert_eq!(
        (order.payment_state, order.payment_id),
        (OrderPaymentState::Unpaid, None),
        "{}",
        H::NAME
    );
}

/// The record (as stored) and the payment.
async fn persisted_operation<H: PaymentStoreHarness>(
    h: &H,
    key: &RecordKey,
    payment: &Payment,
) -> (Option<IdempotencyRecord>, Payment) {
    (
        h.raw_record(key).await,
        payment_now(h, &payment.payment_id).await,
    )
}

store_suite!(
    one_operation_at_a_time_and_its_finish_pays_the_order,
    a_finish_is_fenced_on_the_records_lease,
    a_release_frees_the_payment_for_another_operation,
);
