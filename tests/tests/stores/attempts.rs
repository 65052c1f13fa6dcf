//! Starting, resuming and releasing attempts: the key, the order guard and the payment are
//! written together or not at all.

use super::*;
use payonce::domain::{transition, OrderPaymentState, PaymentStatus};
use payonce::idempotency::{RecordState, RecordStatus, StoreError};
use payonce::ports::{BeginOutcome, Read, ResumeOutcome, ReviseOutcome, SettleOutcome};

pub async fn begin_attempt_writes_the_record_the_order_and_the_payment<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN an unpaid order, read at version 1 a moment ago
    let order = stored_order(&h, USER).await;
    h.clock().advance(Duration::from_secs(1));
    let now_ms = h.clock().now_ms();
    let (payment, claim) = new_attempt(&h, &order, "begin");

    // WHEN an attempt begins
    let outcome = h
        .payments()
        .begin_attempt(&claim, &order, &payment, &[])
        .await
        .unwrap();

    // THEN the key is claimed IN_PROGRESS under the claimer's lease, for this attempt
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
    let record = live_record(&h, &claim.key).await;
    assert_eq!(
        record,
        IdempotencyRecord {
            key: claim.key.clone(),
            state: RecordState::InProgress {
                lease: Lease {
                    token: claim.lease_token.clone(),
                    until_ms: claim.lease_until_ms,
                },
            },
            fingerprint: claim.fingerprint.clone(),
            attempt_id: payment.payment_id.clone(),
            created_at_ms: now_ms,
            expires_at_s: claim.expires_at_s,
            request_id: Some("req-claimer".into()),
        },
        "{}",
        H::NAME
    );
    // AND the order is reserved for it (nothing else about the order changed)
    let reserved = Order {
        payment_state: OrderPaymentState::Processing,
        payment_id: Some(payment.payment_id.clone()),
        updated_at_ms: now_ms,
        ..order.clone()
    };
    assert_eq!(
        order_now(&h, &order.order_id).await,
        reserved,
        "{}",
        H::NAME
    );
    // AND the payment is stored as given, processing
    assert_eq!(payment_now(&h, &payment.payment_id).await, payment);
    // AND the charge path's one read sees the record and the order together, consistent or
    // recent (with nothing lagging, both see the last write)
    for read in [Read::Latest, Read::Recent] {
        let loaded = h
            .payments()
            .load_for_charge(&claim.key, &order.order_id, read)
            .await
            .unwrap();
        let expected = (Some(record.clone()), Some(reserved.clone()));
        assert_eq!(loaded, expected, "{} {read:?}", H::NAME);
    }
}

pub async fn a_second_begin_with_the_same_key_is_key_taken_and_changes_nothing<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt begun under a key
    let first = begun(&h, "same-key").await;
    let before = persisted(&h, &first).await;

    // WHEN a racing request with the same key begins another attempt on the order as it read it
    let (payment, claim) = new_attempt(&h, &first.order, "same-key");
    let outcome = h
        .payments()
        .begin_attempt(&claim, &first.order, &payment, &[])
        .await
        .unwrap();

    // THEN it is told the key is taken, with the record as the first attempt wrote it
    assert_eq!(
        outcome,
        BeginOutcome::KeyTaken(before.record.clone().expect("the first record")),
        "{}",
        H::NAME
    );
    // AND nothing was written: the key's one payment, its record and the order are as the
    // first attempt wrote them
    assert_eq!(
        payment.payment_id, first.payment.payment_id,
        "one payment per key"
    );
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
}

pub async fn another_key_on_a_reserved_order_is_order_changed<H: PaymentStoreHarness>(h: H) {
    // GIVEN an attempt holds the order
    let first = begun(&h, "first-key").await;
    let before = persisted(&h, &first).await;

    // WHEN a new tab starts another attempt on the order (read before it was reserved) with
    // another key
    let (payment, claim) = new_attempt(&h, &first.order, "second-key");
    let outcome = h
        .payments()
        .begin_attempt(&claim, &first.order, &payment, &[])
        .await
        .unwrap();

    // THEN the order is reported as it is now: processing for the first attempt
    let BeginOutcome::OrderChanged(Some(now)) = outcome else {
        panic!("{}: expected OrderChanged(Some), got {outcome:?}", H::NAME)
    };
    assert_eq!(now.payment_state, OrderPaymentState::Processing);
    assert_eq!(
        now.payment_id.as_deref(),
        Some(first.payment.payment_id.as_str())
    );
    // AND nothing was written: no record for the second key, no second payment
    assert_eq!(h.raw_record(&claim.key).await, None, "{}", H::NAME);
    assert_eq!(
        h.payments().get_payment(&payment.payment_id).await.unwrap(),
        None
    );
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
}

pub async fn an_order_not_as_read_is_order_changed_and_nothing_is_written<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an order revised to version 2 after it was read at version 1
    let read = stored_order(&h, USER).await;
    let revised = Order {
        version: 2,
        amount: 1500,
        items: vec![LineItem {
            sku: "A1".into(),
            quantity: 1,
            unit_amount: 1500,
        }],
        ..read.clone()
    };
    assert_eq!(
        h.payments().revise_order(&read, &revised).await.unwrap(),
        ReviseOutcome::Revised
    );

    // WHEN an attempt begins on the stale version 1
    let (payment, claim) = new_attempt(&h, &read, "stale");
    let outcome = h
        .payments()
        .begin_attempt(&claim, &read, &payment, &[])
        .await
        .unwrap();

    // THEN the order is reported at version 2, and nothing was written
    assert_eq!(
        outcome,
        BeginOutcome::OrderChanged(Some(revised.clone())),
        "{}",
        H::NAME
    );
    assert_eq!(h.raw_record(&claim.key).await, None, "{}", H::NAME);
    assert_eq!(
        h.payments().get_payment(&payment.payment_id).await.unwrap(),
        None
    );
    assert_eq!(order_now(&h, &read.order_id).await, revised);

    // AND WHEN someone else's attempt names the order as if it were theirs
    let theirs = Order {
        owner: "mallory".into(),
        ..revised.clone()
    };
    let (payment, claim) = new_attempt(&h, &theirs, "not-mine");
    let outcome = h
        .payments()
        .begin_attempt(&claim, &theirs, &payment, &[])
        .await
        .unwrap();
    // THEN it is refused with the order as it is, and nothing was written
    assert_eq!(outcome, BeginOutcome::OrderChanged(Some(revised.clone())));
    assert_eq!(h.raw_record(&claim.key).await, None, "{}", H::NAME);

    // AND WHEN an attempt names an order that does not exist
    let ghost = Order {
        order_id: "ord_ghost".into(),
        ..revised
    };
    let (payment, claim) = new_attempt(&h, &ghost, "ghost");
    let outcome = h
        .payments()
        .begin_attempt(&claim, &ghost, &payment, &[])
        .await
        .unwrap();
    // THEN there is no order to report, and nothing was written
    assert_eq!(outcome, BeginOutcome::OrderChanged(None), "{}", H::NAME);
    assert_eq!(h.raw_record(&claim.key).await, None, "{}", H::NAME);
    assert_eq!(
        h.payments().get_payment(&payment.payment_id).await.unwrap(),
        None
    );
}

pub async fn a_charge_key_is_kept_with_its_payment_and_never_expires<H: PaymentStoreHarness>(h: H) {
    // GIVEN a declined attempt (the order is free again)
    let first = begun(&h, "kept").await;
    let step = transition(&first.payment, &declined("pi_declined"));
    h.payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    // AND its key's record lives on the payment: the generic idempotency store has none
    assert_eq!(
        h.records().get(&first.claim.key).await.unwrap(),
        None,
        "{}",
        H::NAME
    );

    // WHEN a month has passed (far beyond any other record's retention)
    h.clock().advance(Duration::from_secs(31 * 86_400));
    let (record, order) = h
        .payments()
        .load_for_charge(&first.claim.key, &first.order.order_id, Read::Latest)
        .await
        .unwrap();
    // THEN the key still reads as the completed record of its payment, as the payment is now
    let record = record.expect("the key's record");
    assert_eq!(record.attempt_id, first.payment.payment_id, "{}", H::NAME);
    assert_eq!(record.status(), RecordStatus::Completed, "{}", H::NAME);
    let stored = h
        .payments()
        .get_payment(&first.payment.payment_id)
        .await
        .unwrap()
        .expect("the payment");
    assert_eq!(
        stored_result(&record),
        serde_json::to_value(stored.view()).unwrap(),
        "{}",
        H::NAME
    );
    let order = order.expect("the order");
    assert_eq!(order.payment_state, OrderPaymentState::Unpaid);

    // AND a new attempt under the same key is refused as the key taken, writing nothing
    let (payment, claim) = new_attempt(&h, &order, "kept");
    assert_eq!(
        payment.payment_id, first.payment.payment_id,
        "one payment per key"
    );
    let outcome = h
        .payments()
        .begin_attempt(&claim, &order, &payment, &[])
        .await
        .unwrap();
    assert_eq!(
        outcome,
        BeginOutcome::KeyTaken(record.clone()),
        "{}",
        H::NAME
    );
    assert_eq!(live_record(&h, &first.claim.key).await, record);
    assert_eq!(order_now(&h, &first.order.order_id).await, order);
}

pub async fn a_lapsed_attempt_is_resumed_under_a_new_lease_keeping_its_identity<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt whose invocation died: its lease has lapsed
    let first = begun(&h, "lapsed").await;
    let before = live_record(&h, &first.claim.key).await;
    h.clock()
        .advance(Duration::from_millis(LEASE_MS as u64 + 1_000));
    let now_ms = h.clock().now_ms();

    // WHEN a retry takes it over, fenced on the token it saw
    let lease = fresh_lease(&h);
    let outcome = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &lease,
            &first.payment,
        )
        .await
        .unwrap();

    // THEN only the lease moved: same attempt id (so the same PSP key), fingerprint, expiry
    assert_eq!(outcome, ResumeOutcome::Resumed, "{}", H::NAME);
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(
        record,
        IdempotencyRecord {
            state: RecordState::InProgress {
                lease: lease.clone()
            },
            ..before
        },
        "{}",
        H::NAME
    );
    // AND the order is (still) reserved for the attempt, and the payment is untouched
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(order.payment_state, OrderPaymentState::Processing);
    assert_eq!(order.payment_id, Some(first.payment.payment_id.clone()));
    assert_eq!(order.updated_at_ms, now_ms);
    assert_eq!(
        payment_now(&h, &first.payment.payment_id).await,
        first.payment
    );

    // AND WHEN a second retry that saw the old token tries the same
    let stale = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &fresh_lease(&h),
            &first.payment,
        )
        .await
        .unwrap();
    // THEN it is told the key moved, with the record as it is now, which it did not change
    assert_eq!(
        stale,
        ResumeOutcome::KeyMoved(Some(record.clone())),
        "{}",
        H::NAME
    );
    assert_eq!(live_record(&h, &first.claim.key).await, record);
}

pub async fn resume_of_a_finished_or_another_attempt_is_key_moved<H: PaymentStoreHarness>(h: H) {
    // GIVEN an attempt that finished (its record is COMPLETED)
    let first = begun(&h, "finished").await;
    let step = transition(&first.payment, &succeeded("pi_ok"));
    h.payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    let completed = live_record(&h, &first.claim.key).await;
    let before = persisted(&h, &first).await;

    // WHEN something resumes it with the token it saw while it ran
    let outcome = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &fresh_lease(&h),
            &first.payment,
        )
        .await
        .unwrap();

    // THEN the key moved (to COMPLETED) and nothing changed
    assert_eq!(
        outcome,
        ResumeOutcome::KeyMoved(Some(completed)),
        "{}",
        H::NAME
    );
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);

    // AND WHEN a key that was never claimed is resumed
    let outcome = h
        .payments()
        .resume_attempt(
            &record_key("never-claimed"),
            &first.claim.lease_token,
            &fresh_lease(&h),
            &first.payment,
        )
        .await
        .unwrap();
    // THEN there is no record to report
    assert_eq!(outcome, ResumeOutcome::KeyMoved(None), "{}", H::NAME);

    // AND WHEN an in-progress record is resumed for another attempt than its own
    let other = begun(&h, "other").await;
    let intruder = Payment {
        payment_id: "pay_intruder".into(),
        ..other.payment.clone()
    };
    let before = persisted(&h, &other).await;
    let outcome = h
        .payments()
        .resume_attempt(
            &other.claim.key,
            &other.claim.lease_token,
            &fresh_lease(&h),
            &intruder,
        )
        .await
        .unwrap();
    // THEN the attempt identity fences it off
    assert_eq!(
        outcome,
        ResumeOutcome::KeyMoved(before.record.clone()),
        "{}",
        H::NAME
    );
    assert_eq!(persisted(&h, &other).await, before, "{}", H::NAME);
}

pub async fn release_unsent_frees_the_order_and_keeps_the_attempt_for_a_retry<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt whose PSP call never left (connection refused)
    let first = begun(&h, "unsent").await;
    let before = live_record(&h, &first.claim.key).await;
    h.clock().advance(Duration::from_secs(1));
    let now_ms = h.clock().now_ms();

    // WHEN it is released
    h.payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await
        .unwrap();

    // THEN the order is unpaid again and no longer names the attempt
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        order,
        Order {
            payment_state: OrderPaymentState::Unpaid,
            payment_id: None,
            updated_at_ms: now_ms,
            ..first.order.clone()
        },
        "{}",
        H::NAME
    );
    // AND the record is kept, same attempt and token, with its lease lapsed (0)
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(
        record,
        IdempotencyRecord {
            state: RecordState::InProgress {
                lease: Lease {
                    token: first.claim.lease_token.clone(),
                    until_ms: 0,
                },
            },
            ..before
        },
        "{}",
        H::NAME
    );
    // AND the payment is still processing (it may be retried under the same PSP key)
    assert_eq!(
        payment_now(&h, &first.payment.payment_id).await,
        first.payment
    );

    // AND WHEN a released attempt is released again with a token that is not the record's
    let refused = h
        .payments()
        .release_unsent(&first.payment, &LeaseToken::generate())
        .await;
    // THEN the lease is lost, and nothing changed
    assert!(
        matches!(refused, Err(StoreError::LeaseLost { .. })),
        "{}: {refused:?}",
        H::NAME
    );
    assert_eq!(live_record(&h, &first.claim.key).await, record);

    // AND WHEN a retry with the same key takes the attempt over
    let lease = fresh_lease(&h);
    let outcome = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &lease,
            &first.payment,
        )
        .await
        .unwrap();
    // THEN the unpaid order is reserved for the same attempt again
    assert_eq!(outcome, ResumeOutcome::Resumed, "{}", H::NAME);
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(order.payment_state, OrderPaymentState::Processing);
    assert_eq!(order.payment_id, Some(first.payment.payment_id.clone()));
    assert_eq!(
        payment_now(&h, &first.payment.payment_id).await.status,
        PaymentStatus::Processing
    );
}

pub async fn resume_cannot_reserve_an_order_taken_by_another_attempt<H: PaymentStoreHarness>(h: H) {
    // GIVEN an attempt released unsent, after which another key's attempt took the order
    let first = begun(&h, "released").await;
    h.payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await
        .unwrap();
    let order = order_now(&h, &first.order.order_id).await;
    let second = begun_on(&h, order, "taker").await;
    let record_before = live_record(&h, &first.claim.key).await;

    // WHEN the first key is retried and resumes its attempt
    let outcome = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &fresh_lease(&h),
            &first.payment,
        )
        .await
        .unwrap();

    // THEN the order is reported as the second attempt holds it, and the lease did not move
    let ResumeOutcome::OrderChanged(Some(now)) = outcome else {
        panic!("{}: expected OrderChanged(Some), got {outcome:?}", H::NAME)
    };
    assert_eq!(now.payment_id, Some(second.payment.payment_id.clone()));
    assert_eq!(live_record(&h, &first.claim.key).await, record_before);
}

pub async fn injected_conflicts_surface_as_conflict_and_write_nothing<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN an attempt under way and an order nobody pays yet
    let first = begun(&h, "conflicted").await;
    let before = persisted(&h, &first).await;
    let free = stored_order(&h, USER).await;
    let (payment, claim) = new_attempt(&h, &free, "conflicted-new");

    // WHEN DynamoDB reports a transaction conflict on every try of each transaction (the
    // DynamoDB adapter sends a conflicted transaction again a few times before giving up)
    let tries = H::TRIES_PER_TRANSACTION;
    h.faults().inject_conflicts(tries);
    let begin = h
        .payments()
        .begin_attempt(&claim, &free, &payment, &[])
        .await;
    h.faults().inject_conflicts(tries);
    let resume = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &fresh_lease(&h),
            &first.payment,
        )
        .await;
    h.faults().inject_conflicts(tries);
    let finish = h
        .payments()
        .finish_attempt(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_c")),
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await;
    h.faults().inject_conflicts(tries);
    let release = h
        .payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await;
    h.faults().inject_conflicts(tries);
    let settle = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_c")),
            None,
        )
        .await;

    // THEN each surfaces as the retryable Conflict
    for (operation, result) in [
        ("begin_attempt", begin.map(|_| ())),
        ("resume_attempt", resume.map(|_| ())),
        ("finish_attempt", finish.map(|_| ())),
        ("release_unsent", release),
        ("settle", settle.map(|_| ())),
    ] {
        assert!(
            matches!(result, Err(StoreError::Conflict { .. })),
            "{} {operation}: {result:?}",
            H::NAME
        );
    }
    // AND nothing was written
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
    assert_eq!(h.raw_record(&claim.key).await, None);
    assert_eq!(order_now(&h, &free.order_id).await, free);

    // AND once the conflicts are spent the same transaction goes through
    assert!(
        !h.faults().take_conflict(),
        "{}: every armed conflict was spent",
        H::NAME
    );
    let outcome = h
        .payments()
        .begin_attempt(&claim, &free, &payment, &[])
        .await
        .unwrap();
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
}

pub async fn conflicts_within_the_adapters_retries_are_absorbed_and_write_once<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt under way and an order nobody pays yet
    let first = begun(&h, "absorbed").await;
    let free = stored_order(&h, USER).await;
    let (payment, claim) = new_attempt(&h, &free, "absorbed-new");

    // WHEN every transaction meets one conflict fewer than the adapter tries it
    let absorbed = H::TRIES_PER_TRANSACTION - 1;
    h.faults().inject_conflicts(absorbed);
    let begin = h
        .payments()
        .begin_attempt(&claim, &free, &payment, &[])
        .await
        .unwrap();
    h.clock().advance(Duration::from_secs(1));
    h.faults().inject_conflicts(absorbed);
    let step = transition(&first.payment, &succeeded("pi_absorbed"));
    let finish = h
        .payments()
        .finish_attempt(
            &first.payment,
            &step,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();

    // THEN both went through, each written once, and no armed conflict is left over
    assert_eq!(begin, BeginOutcome::Begun, "{}", H::NAME);
    assert!(!h.faults().take_conflict(), "{}", H::NAME);
    assert_eq!(payment_now(&h, &payment.payment_id).await, payment);
    let reserved = order_now(&h, &free.order_id).await;
    assert_eq!(
        (reserved.payment_state, reserved.payment_id),
        (
            OrderPaymentState::Processing,
            Some(payment.payment_id.clone())
        ),
        "{}",
        H::NAME
    );
    let SettleOutcome::Settled(after) = finish else {
        panic!("{}: expected Settled, got {finish:?}", H::NAME)
    };
    assert_eq!(after.status, PaymentStatus::Succeeded);
    assert_eq!(payment_now(&h, &first.payment.payment_id).await, *after);
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(stored_result(&record), view_json(&after), "{}", H::NAME);
    // (the order left stored as the attempt holds it, which reads as paid)
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        payonce::service::orders::settled(h.payments(), order)
            .await
            .unwrap()
            .payment_state,
        OrderPaymentState::Paid
    );
}

pub async fn resume_of_an_attempt_settled_since_it_was_read_reserves_nothing<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt released unsent, read by a retry while still processing ...
    let first = begun(&h, "settled-meanwhile").await;
    h.payments()
        .release_unsent(&first.payment, &first.claim.lease_token)
        .await
        .unwrap();
    let read = payment_now(&h, &first.payment.payment_id).await;
    assert_eq!(read.status, PaymentStatus::Processing);
    // ... and then settled by a webhook (found by the simulation, seed 30965: the retry
    // reserved the order again for a failed attempt, and the order stayed processing for ever)
    h.payments()
        .settle(&read, &transition(&read, &declined("pi_late")), None)
        .await
        .unwrap();
    let record_before = live_record(&h, &first.claim.key).await;
    let order_before = order_now(&h, &first.order.order_id).await;
    assert_eq!(order_before.payment_state, OrderPaymentState::Unpaid);

    // WHEN the retry resumes the attempt as it read it
    let outcome = h
        .payments()
        .resume_attempt(
            &first.claim.key,
            &first.claim.lease_token,
            &fresh_lease(&h),
            &read,
        )
        .await
        .unwrap();

    // THEN it is told to decide again, and nothing was written: the order stays free
    assert_eq!(outcome, ResumeOutcome::KeyMoved(None), "{}", H::NAME);
    assert_eq!(order_now(&h, &first.order.order_id).await, order_before);
    assert_eq!(live_record(&h, &first.claim.key).await, record_before);
    assert_eq!(
        payment_now(&h, &first.payment.payment_id).await.status,
        PaymentStatus::Failed
    );
}

store_suite!(
    resume_of_an_attempt_settled_since_it_was_read_reserves_nothing,
    begin_attempt_writes_the_record_the_order_and_the_payment,
    a_second_begin_with_the_same_key_is_key_taken_and_changes_nothing,
    another_key_on_a_reserved_order_is_order_changed,
    an_order_not_as_read_is_order_changed_and_nothing_is_written,
    a_charge_key_is_kept_with_its_payment_and_never_expires,
    a_lapsed_attempt_is_resumed_under_a_new_lease_keeping_its_identity,
    resume_of_a_finished_or_another_attempt_is_key_moved,
    release_unsent_frees_the_order_and_keeps_the_attempt_for_a_retry,
    resume_cannot_reserve_an_order_taken_by_another_attempt,
    injected_conflicts_surface_as_conflict_and_write_nothing,
    conflicts_within_the_adapters_retries_are_absorbed_and_write_once,
);

/// DynamoDB only: the recent reads are sent eventually consistent (half the units DynamoDB
/// reports for a consistent read of the same items), the latest ones consistent.
#[tokio::test]
async fn dynamodb_recent_reads_cost_half_the_units_of_latest_ones() {
    let meter = payonce::adapters::dynamodb::CapacityMeter::default();
    let h = payonce_tests::stores::metered_dynamo_stores(&meter).await;
    // GIVEN an order and the key's payment, both stored
    let attempt = begun(&h, "k-units").await;

    for (read, units) in [(Read::Recent, 1.0), (Read::Latest, 2.0)] {
        // WHEN the charge path loads them
        meter.reset();
        let (record, order) = h
            .payments()
            .load_for_charge(&attempt.claim.key, &attempt.order.order_id, read)
            .await
            .unwrap();
        assert!(record.is_some() && order.is_some(), "{read:?}");
        // THEN one BatchGetItem, half a unit per item when recent, one when latest
        assert_eq!(
            meter.counts().by_operation,
            [("BatchGetItem".to_owned(), (1, units))].into(),
            "{read:?}"
        );
    }
    for (read, units) in [(Read::Recent, 0.5), (Read::Latest, 1.0)] {
        meter.reset();
        let payment = h
            .payments()
            .read_payment(&attempt.payment.payment_id, read)
            .await
            .unwrap();
        assert_eq!(payment.as_ref(), Some(&attempt.payment), "{read:?}");
        assert_eq!(
            meter.counts().by_operation,
            [("GetItem".to_owned(), (1, units))].into(),
            "{read:?}"
        );
    }
}
