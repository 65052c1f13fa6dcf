//! The refund side of the payment store: claiming a refund (key, number and amount together),
//! moving it and its payment's amounts exactly once, the status mirror, cancelling an unsent
//! refund, the automatic refund of a late duplicate created with the success, and the in-flight
//! index reconcile reads — the same answers and the same persisted state on both backends.

use super::*;
use payonce::domain::{
    refund_id_for, refund_transition, transition, Refund, RefundReason, RefundSettlement,
    RefundStatus, RefundTransition,
};
use payonce::idempotency::StoreError;
use payonce::ports::{
    BeginRefundOutcome, InflightScan, RefundLeaseOutcome, RefundRecordWrite, RefundSettleOutcome,
    RefundStore, ResumeOutcome, SettleOutcome,
};

/// The refund path's idempotency scope, and the staff user refunding.
const REFUND_SCOPE: &str = "payments.refund";
const STAFF: &str = "staff";

fn refund_record_key(key: &str) -> RecordKey {
    RecordKey::from_stored(format!("{REFUND_SCOPE}#{STAFF}#{key}"))
}

/// A payment that succeeded and paid its order (3000 JPY).
async fn succeeded_payment<H: PaymentStoreHarness>(h: &H, key: &str) -> Payment {
    let attempt = begun(h, key).await;
    let outcome = h
        .payments()
        .finish_attempt(
            &attempt.payment,
            &transition(&attempt.payment, &succeeded(&format!("pi_{key}"))),
            &attempt.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    let SettleOutcome::Settled(payment) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    *payment
}

/// A refund the refund path would claim on `payment` (as read) under `key`: its next number,
/// its claim leased for [`LEASE_MS`].
pub(super) struct Claimed {
    pub(super) refund: Refund,
    pub(super) claim: Claim,
}

pub(super) fn refund_claim<H: PaymentStoreHarness>(
    h: &H,
    payment: &Payment,
    key: &str,
    amount: i64,
) -> Claimed {
    let now_ms = h.clock().now_ms();
    let record = refund_record_key(key);
    // The claimer sends the refund: the refund's sender lease is the record's.
    let lease = Lease {
        token: LeaseToken::generate(),
        until_ms: now_ms + LEASE_MS,
    };
    let refund = Refund::new_pending(
        payment,
        &(payment.refund_count + 1).to_string(),
        amount,
        Some(RefundReason::RequestedByCustomer),
        Some(record.as_str().to_owned()),
        Some((&lease).into()),
        now_ms,
    );
    let claim = Claim {
        key: record,
        fingerprint: Fingerprint::of_value(&json!({
            "payment_id": payment.payment_id,
            "amount": amount,
        })),
        attempt_id: refund.refund_id.clone(),
        lease_token: lease.token,
        lease_until_ms: lease.until_ms,
        expires_at_s: (now_ms + duration_ms(RETENTION)).div_euclid(1000),
        request_id: Some("req-claimer".into()),
    };
    Claimed { refund, claim }
}

/// Claims a refund of `amount` on the payment as it is now, under `key`.
async fn begun_refund<H: PaymentStoreHarness>(
    h: &H,
    payment_id: &str,
    key: &str,
    amount: i64,
) -> Claimed {
    let read = payment_now(h, payment_id).await;
    let claimed = refund_claim(h, &read, key, amount);
    let outcome = h
        .payments()
        .begin_refund(&claimed.claim, &read, &claimed.refund)
        .await
        .unwrap();
    assert_eq!(outcome, BeginRefundOutcome::Begun, "{}", H::NAME);
    claimed
}

fn refund_succeeded(id: &str) -> RefundSettlement {
    RefundSettlement::Succeeded {
        provider_refund_id: id.into(),
    }
}

fn refund_failed(id: &str) -> RefundSettlement {
    RefundSettlement::Failed {
        provider_refund_id: Some(id.into()),
        code: "expired_or_canceled_card".into(),
    }
}

fn expires_in_a_day<H: PaymentStoreHarness>(h: &H) -> i64 {
    h.clock().now_s() + 86_400
}

/// Everything persisted about a payment's refunds: the payment, its refunds, and the records of
/// `keys` exactly as stored.
#[derive(Debug, PartialEq)]
struct RefundState {
    payment: Payment,
    refunds: Vec<Refund>,
    records: Vec<Option<IdempotencyRecord>>,
}

async fn refund_state<H: PaymentStoreHarness>(
    h: &H,
    payment_id: &str,
    keys: &[&str],
) -> RefundState {
    let payment = payment_now(h, payment_id).await;
    let refunds = h.payments().refunds_of(&payment).await.unwrap();
    let mut records = Vec::new();
    for key in keys {
        records.push(h.raw_record(&refund_record_key(key)).await);
    }
    RefundState {
        payment,
        refunds,
        records,
    }
}

/// Every id the in-flight scan lists as due at `due_at_ms` (one page of 100).
async fn inflight_ids<H: PaymentStoreHarness>(h: &H, due_at_ms: i64) -> Vec<String> {
    h.payments()
        .list_inflight(due_at_ms, 100, None)
        .await
        .unwrap()
        .0
}

fn view_of(refund: &Refund) -> serde_json::Value {
    serde_json::to_value(refund.view()).unwrap()
}

pub async fn begin_refund_claims_the_key_reserves_the_amount_and_creates_the_refund<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a succeeded payment that paid its own order: nothing refunded, no duplicate refund
    let read = succeeded_payment(&h, "pay").await;
    assert_eq!(
        (
            read.amount_refunded,
            read.refund_pending,
            read.refund_count,
            read.duplicate_refund
        ),
        (0, 0, 0, false),
        "{}",
        H::NAME
    );
    assert!(h.payments().refunds_of(&read).await.unwrap().is_empty());
    h.clock().advance(Duration::from_secs(2));
    let now_ms = h.clock().now_ms();

    // WHEN a refund of 1000 is claimed on it
    let claimed = refund_claim(&h, &read, "r1", 1000);
    let outcome = h
        .payments()
        .begin_refund(&claimed.claim, &read, &claimed.refund)
        .await
        .unwrap();

    // THEN the key, the number and the amount are taken together
    assert_eq!(outcome, BeginRefundOutcome::Begun, "{}", H::NAME);
    assert_eq!(
        payment_now(&h, &read.payment_id).await,
        Payment {
            refund_pending: 1000,
            refund_count: 1,
            updated_at_ms: now_ms,
            ..read.clone()
        },
        "{}",
        H::NAME
    );
    assert_eq!(
        refund_now(&h, &claimed.refund.refund_id).await,
        claimed.refund
    );
    assert_eq!(
        claimed.refund.refund_id,
        refund_id_for(&read.payment_id, "1")
    );
    let record = h.raw_record(&claimed.claim.key).await.expect("the record");
    assert_eq!(
        (
            record.attempt_id.as_str(),
            record.lease().map(|l| l.token.clone()),
            record.fingerprint.clone(),
            record.expires_at_s
        ),
        (
            claimed.refund.refund_id.as_str(),
            Some(claimed.claim.lease_token.clone()),
            claimed.claim.fingerprint.clone(),
            claimed.claim.expires_at_s
        ),
        "{}",
        H::NAME
    );
    // AND the refund path's one read sees the record and the payment together
    let loaded = h
        .payments()
        .load_for_refund(&claimed.claim.key, &read.payment_id)
        .await
        .unwrap();
    assert_eq!(
        loaded,
        (Some(record), Some(payment_now(&h, &read.payment_id).await)),
        "{}",
        H::NAME
    );
    // AND the refund is listed for reconcile once due
    assert_eq!(
        inflight_ids(&h, now_ms).await,
        vec![claimed.refund.refund_id.clone()],
        "{}",
        H::NAME
    );
}

pub async fn begin_refund_refuses_moved_amounts_a_refund_that_does_not_fit_or_a_taken_key<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a succeeded payment of 3000 read before a first refund of 1000 was claimed
    let stale = succeeded_payment(&h, "pay").await;
    let first = begun_refund(&h, &stale.payment_id, "r1", 1000).await;
    let current = payment_now(&h, &stale.payment_id).await;
    // AND a payment still processing
    let processing = begun(&h, "processing").await.payment;
    let keys = ["r1", "r2", "r3", "r4", "r5"];
    let before = refund_state(&h, &stale.payment_id, &keys).await;

    let cases = [
        // a racing refund decided on the stale read (same number, amounts as they were)
        ("stale read", &stale, "r2", 500),
        // a refund past what is left on the current read (1000 held, 2500 asked)
        ("does not fit", &current, "r3", 2500),
        // the whole amount on the stale read, which no longer fits
        ("stale read, no longer fits", &stale, "r4", 3000),
    ];
    for (what, read, key, amount) in cases {
        // WHEN it is claimed
        let claimed = refund_claim(&h, read, key, amount);
        let outcome = h
            .payments()
            .begin_refund(&claimed.claim, read, &claimed.refund)
            .await
            .unwrap();
        // THEN it is told the payment as it is now, and nothing is written
        assert_eq!(
            outcome,
            BeginRefundOutcome::PaymentChanged(Some(Box::new(current.clone()))),
            "{}: {what}",
            H::NAME
        );
        assert_eq!(
            refund_state(&h, &stale.payment_id, &keys).await,
            before,
            "{}: {what}",
            H::NAME
        );
    }

    // WHEN a refund is claimed on a payment that has not succeeded
    let claimed = refund_claim(&h, &processing, "r5", 100);
    let outcome = h
        .payments()
        .begin_refund(&claimed.claim, &processing, &claimed.refund)
        .await
        .unwrap();
    // THEN it is refused with the payment as it is, and nothing is written
    assert_eq!(
        outcome,
        BeginRefundOutcome::PaymentChanged(Some(Box::new(processing.clone()))),
        "{}",
        H::NAME
    );
    assert_eq!(
        h.payments()
            .get_refund(&claimed.refund.refund_id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(payment_now(&h, &processing.payment_id).await, processing);

    // WHEN a racing request with the first key claims on the current read
    let again = refund_claim(&h, &current, "r1", 1000);
    let outcome = h
        .payments()
        .begin_refund(&again.claim, &current, &again.refund)
        .await
        .unwrap();
    // THEN the key is taken, with the record as the first claim wrote it, and nothing is written
    assert_eq!(
        outcome,
        BeginRefundOutcome::KeyTaken(before.records[0].clone().expect("the first record")),
        "{}",
        H::NAME
    );
    assert_eq!(
        refund_state(&h, &stale.payment_id, &keys).await,
        before,
        "{}",
        H::NAME
    );
    assert_eq!(
        h.payments()
            .get_refund(&again.refund.refund_id)
            .await
            .unwrap(),
        None,
        "refund 2 was not created"
    );
    assert_eq!(first.refund.number, "1");
}

pub async fn write_refund_moves_the_amounts_once_and_a_second_write_on_the_same_read_is_moved<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a refund of 1000 claimed on a succeeded payment of 3000
    let payment = succeeded_payment(&h, "pay").await;
    let claimed = begun_refund(&h, &payment.payment_id, "r1", 1000).await;
    h.clock().advance(Duration::from_secs(2));
    let now_ms = h.clock().now_ms();
    let expires_at_s = expires_in_a_day(&h);

    // WHEN the PSP's success is written with the record's completion
    let step = refund_transition(&claimed.refund, &refund_succeeded("re_1"));
    let write = RefundRecordWrite::Complete {
        lease: &claimed.claim.lease_token,
        expires_at_s,
    };
    let outcome = h
        .payments()
        .write_refund(&claimed.refund, &step, write, None, None)
        .await
        .unwrap();

    // THEN the refund succeeded, as answered and as stored
    let expected = claimed.refund.after(&step, now_ms);
    assert_eq!(
        (
            expected.status,
            expected.provider_refund_id.as_deref(),
            expected.updated_at_ms
        ),
        (RefundStatus::Succeeded, Some("re_1"), now_ms)
    );
    assert_eq!(
        outcome,
        RefundSettleOutcome::Settled(Box::new(expected.clone())),
        "{}",
        H::NAME
    );
    assert_eq!(refund_now(&h, &claimed.refund.refund_id).await, expected);
    // AND the amount moved from pending to refunded, once
    let after = payment_now(&h, &payment.payment_id).await;
    assert_eq!(
        (
            after.amount_refunded,
            after.refund_pending,
            after.refund_count,
            after.updated_at_ms
        ),
        (1000, 0, 1, now_ms),
        "{}",
        H::NAME
    );
    // AND the record is completed with the refund's view, its lease cleared
    let record = live_record(&h, &claimed.claim.key).await;
    assert_eq!(record.lease(), None);
    assert_eq!(stored_result(&record), view_of(&expected), "{}", H::NAME);
    assert_eq!(record.expires_at_s, expires_at_s);
    let settled = refund_state(&h, &payment.payment_id, &["r1"]).await;

    // WHEN the same success is written again on the same (pending) read, completing or
    // mirroring
    for write in [
        RefundRecordWrite::Complete {
            lease: &claimed.claim.lease_token,
            expires_at_s,
        },
        RefundRecordWrite::Mirror { expires_at_s },
    ] {
        let again = h
            .payments()
            .write_refund(&claimed.refund, &step, write, None, None)
            .await
            .unwrap();
        // THEN it is told to read again, and nothing moved twice
        assert_eq!(again, RefundSettleOutcome::Moved, "{}: {write:?}", H::NAME);
        assert_eq!(
            refund_state(&h, &payment.payment_id, &["r1"]).await,
            settled,
            "{}",
            H::NAME
        );
    }

    // WHEN the PSP later fails the refund (read succeeded), as a webhook writes it
    h.clock().advance(Duration::from_secs(60));
    let fail = refund_transition(&expected, &refund_failed("re_1"));
    let failed = h
        .payments()
        .write_refund(
            &expected,
            &fail,
            RefundRecordWrite::Mirror { expires_at_s },
            None,
            None,
        )
        .await
        .unwrap();

    // THEN the refunded amount is given back, and the mirror shows the failure
    let failed_refund = expected.after(&fail, h.clock().now_ms());
    assert_eq!(failed_refund.status, RefundStatus::Failed);
    assert_eq!(
        failed,
        RefundSettleOutcome::Settled(Box::new(failed_refund.clone())),
        "{}",
        H::NAME
    );
    let after = payment_now(&h, &payment.payment_id).await;
    assert_eq!(
        (after.amount_refunded, after.refund_pending),
        (0, 0),
        "{}",
        H::NAME
    );
    assert_eq!(
        stored_result(&live_record(&h, &claimed.claim.key).await),
        view_of(&failed_refund),
        "{}",
        H::NAME
    );
    // AND the same failure decided on the succeeded read again moves nothing
    let stale = h
        .payments()
        .write_refund(
            &expected,
            &fail,
            RefundRecordWrite::Mirror { expires_at_s },
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(stale, RefundSettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(
        payment_now(&h, &payment.payment_id).await.amount_refunded,
        0,
        "{}",
        H::NAME
    );
}

pub async fn a_webhook_refund_write_and_its_redelivery_are_applied_once<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN a pending refund of 1000
    let payment = succeeded_payment(&h, "pay").await;
    let claimed = begun_refund(&h, &payment.payment_id, "r1", 1000).await;
    let mark = event_mark(&h, "evt_refund", Duration::from_secs(30 * 86_400));
    let step = refund_transition(&claimed.refund, &refund_succeeded("re_1"));
    let mirror = RefundRecordWrite::Mirror {
        expires_at_s: expires_in_a_day(&h),
    };

    // WHEN the webhook's success is written with its event mark, then redelivered
    let first = h
        .payments()
        .write_refund(&claimed.refund, &step, mirror, None, Some(&mark))
        .await
        .unwrap();
    let settled = refund_state(&h, &payment.payment_id, &["r1"]).await;
    let again = h
        .payments()
        .write_refund(&claimed.refund, &step, mirror, None, Some(&mark))
        .await
        .unwrap();

    // THEN the first applies, the redelivery is a duplicate that writes nothing
    assert!(
        matches!(&first, RefundSettleOutcome::Settled(r) if r.status == RefundStatus::Succeeded),
        "{}: {first:?}",
        H::NAME
    );
    assert_eq!(again, RefundSettleOutcome::Duplicate, "{}", H::NAME);
    assert_eq!(
        refund_state(&h, &payment.payment_id, &["r1"]).await,
        settled,
        "{}",
        H::NAME
    );
    assert_eq!(
        (
            settled.payment.amount_refunded,
            settled.payment.refund_pending
        ),
        (1000, 0)
    );
    // AND the mark is there
    assert!(!h.payments().record_event(&mark).await.unwrap());
}

pub async fn the_mirror_follows_only_a_completed_record_of_that_very_refund<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN refund 1 claimed under key K, its record still in progress
    let payment = succeeded_payment(&h, "pay").await;
    let first = begun_refund(&h, &payment.payment_id, "K", 1000).await;
    let in_progress = h.raw_record(&first.claim.key).await;
    let expires_at_s = expires_in_a_day(&h);
    let mirror = RefundRecordWrite::Mirror { expires_at_s };

    // WHEN the PSP's pending answer arrives by webhook
    let pending = refund_transition(
        &first.refund,
        &RefundSettlement::Pending {
            provider_refund_id: "re_1".into(),
        },
    );
    let outcome = h
        .payments()
        .write_refund(&first.refund, &pending, mirror, None, None)
        .await
        .unwrap();
    // THEN the refund records the PSP's id, and the in-progress record is left to its holder
    let RefundSettleOutcome::Settled(with_id) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    assert_eq!(
        (with_id.status, with_id.provider_refund_id.as_deref()),
        (RefundStatus::Pending, Some("re_1"))
    );
    assert_eq!(
        h.raw_record(&first.claim.key).await,
        in_progress,
        "{}",
        H::NAME
    );

    // WHEN the holder completes with another lease, THEN lease lost and nothing is written
    let before = refund_state(&h, &payment.payment_id, &["K"]).await;
    let stolen = h
        .payments()
        .write_refund(
            &with_id,
            &RefundTransition::Unchanged,
            RefundRecordWrite::Complete {
                lease: &LeaseToken::generate(),
                expires_at_s,
            },
            None,
            None,
        )
        .await;
    assert!(
        matches!(stolen, Err(StoreError::LeaseLost { .. })),
        "{}: {stolen:?}",
        H::NAME
    );
    assert_eq!(
        refund_state(&h, &payment.payment_id, &["K"]).await,
        before,
        "{}",
        H::NAME
    );

    // WHEN the holder completes with its lease, unchanged (a 202)
    let completed = h
        .payments()
        .write_refund(
            &with_id,
            &RefundTransition::Unchanged,
            RefundRecordWrite::Complete {
                lease: &first.claim.lease_token,
                expires_at_s,
            },
            None,
            None,
        )
        .await
        .unwrap();
    // THEN the record is completed with the pending view
    assert_eq!(
        completed,
        RefundSettleOutcome::Settled(with_id.clone()),
        "{}",
        H::NAME
    );
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(stored_result(&record), view_of(&with_id), "{}", H::NAME);

    // WHEN K's record expires and K is claimed afresh for refund 2, which completes
    h.clock().advance(RETENTION + Duration::from_secs(3600));
    let second = begun_refund(&h, &payment.payment_id, "K", 500).await;
    assert_eq!(second.refund.number, "2");
    let second_done = h
        .payments()
        .write_refund(
            &second.refund,
            &refund_transition(&second.refund, &refund_succeeded("re_2")),
            RefundRecordWrite::Complete {
                lease: &second.claim.lease_token,
                expires_at_s: expires_in_a_day(&h),
            },
            None,
            None,
        )
        .await
        .unwrap();
    let RefundSettleOutcome::Settled(second_done) = second_done else {
        panic!("{}: expected Settled", H::NAME)
    };
    let second_record = live_record(&h, &first.claim.key).await;
    assert_eq!(second_record.attempt_id, second.refund.refund_id);

    // AND WHEN refund 1's late success arrives by webhook
    let late = h
        .payments()
        .write_refund(
            &with_id,
            &refund_transition(&with_id, &refund_succeeded("re_1")),
            RefundRecordWrite::Mirror {
                expires_at_s: expires_in_a_day(&h),
            },
            None,
            None,
        )
        .await
        .unwrap();
    // THEN refund 1 succeeded, but K's record, now refund 2's, is untouched
    assert!(
        matches!(&late, RefundSettleOutcome::Settled(r) if r.status == RefundStatus::Succeeded),
        "{}: {late:?}",
        H::NAME
    );
    assert_eq!(
        live_record(&h, &first.claim.key).await,
        second_record,
        "{}",
        H::NAME
    );
    assert_eq!(stored_result(&second_record), view_of(&second_done));
    let now = payment_now(&h, &payment.payment_id).await;
    assert_eq!(
        (now.amount_refunded, now.refund_pending, now.refund_count),
        (1500, 0, 2),
        "{}",
        H::NAME
    );
}

pub async fn cancel_unsent_refund_frees_the_amount_and_deletes_the_record<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a refund of 1000 claimed, never sent
    let payment = succeeded_payment(&h, "pay").await;
    let claimed = begun_refund(&h, &payment.payment_id, "r1", 1000).await;
    let before = refund_state(&h, &payment.payment_id, &["r1"]).await;
    h.clock().advance(Duration::from_secs(2));
    let now_ms = h.clock().now_ms();

    // WHEN it is cancelled under another lease, THEN lease lost and nothing is written
    let stolen = h
        .payments()
        .cancel_unsent_refund(&claimed.refund, &LeaseToken::generate())
        .await;
    assert!(
        matches!(stolen, Err(StoreError::LeaseLost { .. })),
        "{}: {stolen:?}",
        H::NAME
    );
    assert_eq!(
        refund_state(&h, &payment.payment_id, &["r1"]).await,
        before,
        "{}",
        H::NAME
    );

    // WHEN it is cancelled under its lease
    h.payments()
        .cancel_unsent_refund(&claimed.refund, &claimed.claim.lease_token)
        .await
        .unwrap();

    // THEN the amount is free again, the refund canceled, the record gone
    let after = refund_state(&h, &payment.payment_id, &["r1"]).await;
    assert_eq!(
        after.payment,
        Payment {
            amount_refunded: 0,
            refund_pending: 0,
            refund_count: 1,
            updated_at_ms: now_ms,
            ..before.payment.clone()
        },
        "{}",
        H::NAME
    );
    assert_eq!(
        after.refunds,
        vec![Refund {
            status: RefundStatus::Canceled,
            updated_at_ms: now_ms,
            // Nobody sends it any more.
            lease: None,
            ..claimed.refund.clone()
        }],
        "{}",
        H::NAME
    );
    assert_eq!(after.records, vec![None], "{}", H::NAME);
    assert!(inflight_ids(&h, now_ms + 3_600_000).await.is_empty());

    // AND the key can be claimed afresh, for refund 2 of the whole amount
    let again = begun_refund(&h, &payment.payment_id, "r1", 3000).await;
    assert_eq!(again.refund.number, "2", "{}", H::NAME);
}

pub async fn a_late_success_creates_its_duplicate_refund_in_the_same_write_once<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt released as unsent, and another key's attempt that took the order since
    let first = begun(&h, "late").await;
    h.payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await
        .unwrap();
    let second = begun_on(&h, order_now(&h, &first.order.order_id).await, "holder").await;
    h.clock().advance(Duration::from_secs(2));
    let now_ms = h.clock().now_ms();

    // WHEN the PSP reports the first attempt charged after all
    let step = transition(&first.payment, &succeeded("pi_late"));
    let outcome = h
        .payments()
        .settle(&first.payment, &step, None)
        .await
        .unwrap();

    // THEN the payment succeeded carrying its duplicate refund, the whole amount held
    let SettleOutcome::Settled(after) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    assert_eq!(
        (
            after.status,
            after.duplicate_refund,
            after.refund_pending,
            after.amount_refunded,
            after.refund_count
        ),
        (PaymentStatus::Succeeded, true, 3000, 0, 0),
        "{}",
        H::NAME
    );
    assert_eq!(payment_now(&h, &first.payment.payment_id).await, *after);
    // AND the refund was created in the same write: pending, whole amount, reason duplicate
    let dup = refund_now(&h, &refund_id_for(&first.payment.payment_id, "dup")).await;
    assert_eq!(dup, Refund::duplicate_of(&after, now_ms), "{}", H::NAME);
    assert_eq!(
        (dup.reason, dup.amount, dup.idempotency_pk.clone()),
        (Some(RefundReason::Duplicate), 3000, None)
    );
    assert_eq!(
        h.payments().refunds_of(&after).await.unwrap(),
        vec![dup.clone()],
        "{}",
        H::NAME
    );
    // AND reconcile will find it (beside the order's own attempt, still processing)
    assert_eq!(
        inflight_ids(&h, now_ms).await,
        vec![second.payment.payment_id.clone(), dup.refund_id.clone()],
        "{}",
        H::NAME
    );
    let once = refund_state(&h, &first.payment.payment_id, &[]).await;

    // WHEN the success arrives again, decided on the stale read or on the current one
    let stale = h
        .payments()
        .settle(&first.payment, &step, None)
        .await
        .unwrap();
    let unchanged = h
        .payments()
        .settle(&after, &transition(&after, &succeeded("pi_late")), None)
        .await
        .unwrap();

    // THEN no second refund is created and nothing moves
    assert_eq!(stale, SettleOutcome::Moved, "{}", H::NAME);
    assert!(
        matches!(&unchanged, SettleOutcome::Settled(p) if **p == *after),
        "{}: {unchanged:?}",
        H::NAME
    );
    assert_eq!(
        refund_state(&h, &first.payment.payment_id, &[]).await,
        once,
        "{}",
        H::NAME
    );
    // AND the order's own attempt still pays it without any refund
    let paid = h
        .payments()
        .finish_attempt(
            &second.payment,
            &transition(&second.payment, &succeeded("pi_holder")),
            &second.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    assert!(
        matches!(&paid, SettleOutcome::Settled(p) if !p.duplicate_refund && p.refund_pending == 0),
        "{}: {paid:?}",
        H::NAME
    );
    assert_eq!(
        order_now(&h, &first.order.order_id).await.payment_id,
        Some(second.payment.payment_id.clone())
    );
}

pub async fn a_late_success_on_an_edited_order_creates_its_duplicate_refund<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt released as unsent, and its order edited to version 2 since
    let first = begun(&h, "late-edit").await;
    h.payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await
        .unwrap();
    let read = order_now(&h, &first.order.order_id).await;
    let edited = Order {
        version: 2,
        amount: 4500,
        ..read.clone()
    };
    h.payments().revise_order(&read, &edited).await.unwrap();

    // WHEN the PSP reports the attempt charged after all
    let outcome = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_late")),
            None,
        )
        .await
        .unwrap();

    // THEN it is succeeded with its duplicate refund, and the edited order stays unpaid
    assert!(
        matches!(&outcome, SettleOutcome::Settled(p) if p.duplicate_refund && p.refund_pending == 3000),
        "{}: {outcome:?}",
        H::NAME
    );
    assert!(h
        .payments()
        .get_refund(&refund_id_for(&first.payment.payment_id, "dup"))
        .await
        .unwrap()
        .is_some());
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        (order.version, order.payment_state, order.payment_id),
        (2, payonce::domain::OrderPaymentState::Unpaid, None),
        "{}",
        H::NAME
    );
}

pub async fn list_inflight_lists_refunds_until_final_or_no_longer_watched<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a succeeded payment and two refunds claimed on it a second apart
    let payment = succeeded_payment(&h, "pay").await;
    let t0 = h.clock().now_ms();
    let first = begun_refund(&h, &payment.payment_id, "r1", 500).await;
    h.clock().advance(Duration::from_secs(1));
    let second = begun_refund(&h, &payment.payment_id, "r2", 500).await;
    let (id1, id2) = (
        first.refund.refund_id.clone(),
        second.refund.refund_id.clone(),
    );

    // THEN both are listed once due, oldest first, and the succeeded payment is not
    assert_eq!(
        inflight_ids(&h, t0 + 1000).await,
        vec![id1.clone(), id2.clone()],
        "{}",
        H::NAME
    );
    assert_eq!(inflight_ids(&h, t0).await, vec![id1.clone()], "{}", H::NAME);
    assert!(inflight_ids(&h, t0 - 1).await.is_empty(), "{}", H::NAME);

    // WHEN the first one's next check is deferred a minute
    h.payments().defer_check(&id1, t0 + 60_000).await.unwrap();
    // THEN it falls behind the second
    assert_eq!(inflight_ids(&h, t0 + 1000).await, vec![id2.clone()]);
    assert_eq!(
        inflight_ids(&h, t0 + 60_000).await,
        vec![id2.clone(), id1.clone()],
        "{}",
        H::NAME
    );

    // WHEN the second fails and the first is canceled unsent
    let expires_at_s = expires_in_a_day(&h);
    h.payments()
        .write_refund(
            &second.refund,
            &refund_transition(&second.refund, &refund_failed("re_2")),
            RefundRecordWrite::Mirror { expires_at_s },
            None,
            None,
        )
        .await
        .unwrap();
    h.payments()
        .cancel_unsent_refund(&first.refund, &first.claim.lease_token)
        .await
        .unwrap();
    // THEN neither is listed any more, however late, and deferring cannot bring them back
    let far = t0 + 30 * 86_400_000;
    assert!(inflight_ids(&h, far).await.is_empty(), "{}", H::NAME);
    h.payments().defer_check(&id1, t0).await.unwrap();
    h.payments().defer_check(&id2, t0).await.unwrap();
    assert!(inflight_ids(&h, far).await.is_empty(), "{}", H::NAME);

    // WHEN a third refund succeeds
    let third = begun_refund(&h, &payment.payment_id, "r3", 500).await;
    let id3 = third.refund.refund_id.clone();
    let succeeded_write = h
        .payments()
        .write_refund(
            &third.refund,
            &refund_transition(&third.refund, &refund_succeeded("re_3")),
            RefundRecordWrite::Mirror { expires_at_s },
            None,
            None,
        )
        .await
        .unwrap();
    let RefundSettleOutcome::Settled(third_done) = succeeded_write else {
        panic!("{}: expected Settled", H::NAME)
    };
    // THEN it stays listed (it may still fail), at its next check
    assert_eq!(
        inflight_ids(&h, third_done.check_at_ms).await,
        vec![id3.clone()],
        "{}",
        H::NAME
    );
    assert_eq!(
        refund_now(&h, &id3).await.check_at_ms,
        third_done.check_at_ms
    );
    // AND once reconcile stops watching it, it is no longer listed
    h.payments().stop_watching(&third_done).await.unwrap();
    assert!(inflight_ids(&h, far).await.is_empty(), "{}", H::NAME);
    h.payments().defer_check(&id3, t0).await.unwrap();
    assert!(inflight_ids(&h, far).await.is_empty(), "{}", H::NAME);
    // AND stopping the watch on a refund that is not succeeded changes nothing
    let fourth = begun_refund(&h, &payment.payment_id, "r4", 500).await;
    h.payments().stop_watching(&fourth.refund).await.unwrap();
    assert_eq!(
        inflight_ids(&h, far).await,
        vec![fourth.refund.refund_id.clone()],
        "{}",
        H::NAME
    );
}

pub async fn a_lapsed_refund_is_resumed_under_a_new_lease_and_a_settled_one_is_key_moved<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a refund claimed by an invocation that died
    let payment = succeeded_payment(&h, "pay").await;
    let claimed = begun_refund(&h, &payment.payment_id, "r1", 1000).await;
    h.clock().advance(Duration::from_secs(60));

    // WHEN a retry takes it over, saying a call may have reached the PSP
    let lease = fresh_lease(&h);
    let marked = Refund {
        psp_maybe_reached: true,
        ..claimed.refund.clone()
    };
    let outcome = h
        .payments()
        .resume_refund(
            &claimed.claim.key,
            &claimed.claim.lease_token,
            &lease,
            &marked,
        )
        .await
        .unwrap();

    // THEN the lease is the retry's, on the record and as the refund's sender lease, and the
    // refund remembers the PSP may have been reached
    assert_eq!(outcome, ResumeOutcome::Resumed, "{}", H::NAME);
    let record = h.raw_record(&claimed.claim.key).await.unwrap();
    assert_eq!(record.lease(), Some(&lease), "{}", H::NAME);
    let marked = Refund {
        lease: Some((&lease).into()),
        ..marked
    };
    assert_eq!(refund_now(&h, &claimed.refund.refund_id).await, marked);

    // WHEN another retry takes over with the lapsed token it saw
    let late = h
        .payments()
        .resume_refund(
            &claimed.claim.key,
            &claimed.claim.lease_token,
            &fresh_lease(&h),
            &marked,
        )
        .await
        .unwrap();
    // THEN the key moved, with the record as it is now, and nothing is written
    assert_eq!(
        late,
        ResumeOutcome::KeyMoved(Some(record.clone())),
        "{}",
        H::NAME
    );
    assert_eq!(h.raw_record(&claimed.claim.key).await, Some(record));

    // WHEN the refund settles, and a takeover with the live token comes late
    h.payments()
        .write_refund(
            &marked,
            &refund_transition(&marked, &refund_succeeded("re_1")),
            RefundRecordWrite::Complete {
                lease: &lease.token,
                expires_at_s: expires_in_a_day(&h),
            },
            Some(payonce::ports::SenderFence::done(&lease.token)),
            None,
        )
        .await
        .unwrap();
    let completed = h.raw_record(&claimed.claim.key).await;
    let after = h
        .payments()
        .resume_refund(&claimed.claim.key, &lease.token, &fresh_lease(&h), &marked)
        .await
        .unwrap();
    // THEN the key moved, and the completed record stays as it is
    assert_eq!(
        after,
        ResumeOutcome::KeyMoved(completed.clone()),
        "{}",
        H::NAME
    );
    assert_eq!(h.raw_record(&claimed.claim.key).await, completed);
}

pub async fn a_refund_has_one_sender_at_a_time_and_every_sender_write_is_fenced<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a refund whose staff request holds its sender lease, mid-call
    let payment = succeeded_payment(&h, "pay").await;
    let claimed = begun_refund(&h, &payment.payment_id, "r1", 1000).await;
    let staff = claimed.claim.lease_token.clone();
    let read = refund_now(&h, &claimed.refund.refund_id).await;
    assert_eq!(
        read.lease.as_ref().map(|l| l.token.as_str()),
        Some(staff.as_str()),
        "{}",
        H::NAME
    );

    // WHEN reconcile tries to take it while that lease is live
    let reconcile = fresh_lease(&h);
    let taken = h
        .payments()
        .take_refund_lease(&read, &reconcile)
        .await
        .unwrap();
    // THEN it is held, and nothing is written
    assert_eq!(
        taken,
        RefundLeaseOutcome::Held {
            until_ms: claimed.claim.lease_until_ms
        },
        "{}",
        H::NAME
    );
    assert_eq!(refund_now(&h, &read.refund_id).await, read, "{}", H::NAME);

    // WHEN the staff lease lapses (its holder is slow, or died) and reconcile takes it
    h.clock().advance(Duration::from_millis(
        u64::try_from(LEASE_MS).unwrap() + 1_000,
    ));
    let reconcile = fresh_lease(&h);
    let taken = h
        .payments()
        .take_refund_lease(&read, &reconcile)
        .await
        .unwrap();
    // THEN reconcile holds it, and the refund remembers its earlier sender may have called
    let held = Refund {
        lease: Some((&reconcile).into()),
        psp_maybe_reached: true,
        ..read.clone()
    };
    assert_eq!(
        taken,
        RefundLeaseOutcome::Taken(Box::new(held.clone())),
        "{}",
        H::NAME
    );
    assert_eq!(refund_now(&h, &read.refund_id).await, held, "{}", H::NAME);

    // WHEN the slow staff request comes back: its call never connected, so it would cancel
    let cancel = h.payments().cancel_unsent_refund(&read, &staff).await;
    // THEN it is refused: reconcile may be refunding right now; nothing changed
    assert!(
        matches!(cancel, Err(StoreError::LeaseLost { .. })),
        "{}: {cancel:?}",
        H::NAME
    );
    // AND its answer cannot be written either, nor can a retry take the refund over
    let write = h
        .payments()
        .write_refund(
            &held,
            &refund_transition(&held, &refund_succeeded("re_staff")),
            RefundRecordWrite::Complete {
                lease: &staff,
                expires_at_s: expires_in_a_day(&h),
            },
            Some(payonce::ports::SenderFence::done(&staff)),
            None,
        )
        .await;
    assert!(
        matches!(write, Err(StoreError::LeaseLost { .. })),
        "{}: {write:?}",
        H::NAME
    );
    let retry = h
        .payments()
        .resume_refund(
            &claimed.claim.key,
            &staff,
            &fresh_lease(&h),
            &Refund {
                psp_maybe_reached: true,
                ..held.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        retry,
        ResumeOutcome::LeaseHeld {
            until_ms: reconcile.until_ms
        },
        "{}",
        H::NAME
    );
    assert_eq!(refund_now(&h, &read.refund_id).await, held, "{}", H::NAME);
    assert_eq!(
        h.raw_record(&claimed.claim.key)
            .await
            .and_then(|r| r.lease().cloned()),
        Some(Lease {
            token: staff.clone(),
            until_ms: claimed.claim.lease_until_ms
        }),
        "{}: the record is untouched",
        H::NAME
    );

    // WHEN reconcile records what the PSP said under its lease
    let settled = h
        .payments()
        .write_refund(
            &held,
            &refund_transition(&held, &refund_succeeded("re_1")),
            RefundRecordWrite::Mirror {
                expires_at_s: expires_in_a_day(&h),
            },
            Some(payonce::ports::SenderFence::done(&reconcile.token)),
            None,
        )
        .await
        .unwrap();
    // THEN it is written, and the lease is given back
    let RefundSettleOutcome::Settled(after) = settled else {
        panic!("{}: {settled:?}", H::NAME)
    };
    assert_eq!(after.status, RefundStatus::Succeeded, "{}", H::NAME);
    assert_eq!(after.lease, None, "{}", H::NAME);
    assert_eq!(
        refund_now(&h, &read.refund_id).await.lease,
        None,
        "{}",
        H::NAME
    );
    // AND a lease can no longer be taken on a refund that is not pending
    let late = h
        .payments()
        .take_refund_lease(&after, &fresh_lease(&h))
        .await
        .unwrap();
    assert!(
        matches!(late, RefundLeaseOutcome::Moved(Some(_))),
        "{}: {late:?}",
        H::NAME
    );
}

pub async fn a_sender_lease_taken_from_nobody_is_fenced_on_its_absence<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN a pending refund nobody sends (its handler answered 202 and gave its lease back)
    let payment = succeeded_payment(&h, "pay").await;
    let claimed = begun_refund(&h, &payment.payment_id, "r1", 1000).await;
    let pending = h
        .payments()
        .write_refund(
            &claimed.refund,
            &RefundTransition::Unchanged,
            RefundRecordWrite::Complete {
                lease: &claimed.claim.lease_token,
                expires_at_s: expires_in_a_day(&h),
            },
            Some(payonce::ports::SenderFence::done(
                &claimed.claim.lease_token,
            )),
            None,
        )
        .await
        .unwrap();
    let RefundSettleOutcome::Settled(read) = pending else {
        panic!("{}: {pending:?}", H::NAME)
    };
    assert_eq!(read.lease, None, "{}", H::NAME);

    // WHEN two reconcile runs take it, each on the refund as it read it
    let (first, second) = (fresh_lease(&h), fresh_lease(&h));
    let one = h.payments().take_refund_lease(&read, &first).await.unwrap();
    let two = h
        .payments()
        .take_refund_lease(&read, &second)
        .await
        .unwrap();
    // THEN only the first gets it; the second finds it held
    assert!(
        matches!(&one, RefundLeaseOutcome::Taken(r) if r.lease == Some((&first).into()) && !r.psp_maybe_reached),
        "{}: {one:?}",
        H::NAME
    );
    assert_eq!(
        two,
        RefundLeaseOutcome::Held {
            until_ms: first.until_ms
        },
        "{}",
        H::NAME
    );

    // WHEN the first's take is sent again by the SDK after its answer was lost
    let again = h.payments().take_refund_lease(&read, &first).await.unwrap();
    // THEN it is the first's own take, not a refusal
    assert_eq!(again, one, "{}", H::NAME);
}

pub async fn a_late_success_the_psp_cannot_refund_is_marked_refund_required_at_once<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a deployment whose PSP cannot refund (2C2P today), an attempt released as unsent,
    // and another key's attempt that took the order since
    let h = h.with_late_duplicates(payonce::domain::LateDuplicates::MarkRefundRequired);
    let first = begun(&h, "late").await;
    h.payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await
        .unwrap();
    let second = begun_on(&h, order_now(&h, &first.order.order_id).await, "holder").await;
    h.clock().advance(Duration::from_secs(2));
    let now_ms = h.clock().now_ms();

    // WHEN the PSP reports the first attempt charged after all
    let step = transition(&first.payment, &succeeded("pi_late"));
    let outcome = h
        .payments()
        .settle(&first.payment, &step, None)
        .await
        .unwrap();

    // THEN the payment succeeded, marked refund-required for an operator, nothing reserved
    let SettleOutcome::Settled(after) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    assert_eq!(
        (
            after.status,
            after.refund_required,
            after.duplicate_refund,
            after.refund_pending
        ),
        (PaymentStatus::Succeeded, true, false, 0),
        "{}",
        H::NAME
    );
    assert_eq!(payment_now(&h, &first.payment.payment_id).await, *after);
    // AND no refund exists that could never be sent, and reconcile has nothing to chase
    assert_eq!(
        h.payments()
            .get_refund(&refund_id_for(&first.payment.payment_id, "dup"))
            .await
            .unwrap(),
        None,
        "{}",
        H::NAME
    );
    assert_eq!(
        inflight_ids(&h, now_ms).await,
        vec![second.payment.payment_id.clone()],
        "{}",
        H::NAME
    );
    // AND the success arriving again marks nothing twice
    let again = h
        .payments()
        .settle(&after, &transition(&after, &succeeded("pi_late")), None)
        .await
        .unwrap();
    assert!(
        matches!(&again, SettleOutcome::Settled(p) if **p == *after),
        "{}: {again:?}",
        H::NAME
    );
}

store_suite!(
    a_late_success_the_psp_cannot_refund_is_marked_refund_required_at_once,
    a_refund_has_one_sender_at_a_time_and_every_sender_write_is_fenced,
    a_sender_lease_taken_from_nobody_is_fenced_on_its_absence,
    begin_refund_claims_the_key_reserves_the_amount_and_creates_the_refund,
    begin_refund_refuses_moved_amounts_a_refund_that_does_not_fit_or_a_taken_key,
    write_refund_moves_the_amounts_once_and_a_second_write_on_the_same_read_is_moved,
    a_webhook_refund_write_and_its_redelivery_are_applied_once,
    the_mirror_follows_only_a_completed_record_of_that_very_refund,
    cancel_unsent_refund_frees_the_amount_and_deletes_the_record,
    a_late_success_creates_its_duplicate_refund_in_the_same_write_once,
    a_late_success_on_an_edited_order_creates_its_duplicate_refund,
    list_inflight_lists_refunds_until_final_or_no_longer_watched,
    a_lapsed_refund_is_resumed_under_a_new_lease_and_a_settled_one_is_key_moved,
);
