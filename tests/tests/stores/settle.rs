//! Settling outside the charge path (webhooks, reconcile): the payment, its order, the status
//! mirror of a completed record and the event's dedup mark, in one write.

use super::*;
use payonce::domain::{transition, OrderPaymentState, PaymentStatus, Transition};
use payonce::ports::SettleOutcome;

pub async fn a_webhook_settles_once_and_its_redelivery_is_a_duplicate<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN an attempt in processing and a webhook saying it succeeded
    let first = begun(&h, "hook").await;
    let mark = event_mark(&h, "evt_succeeded", Duration::from_secs(30 * 86_400));

    // WHEN the webhook is applied
    let step = transition(&first.payment, &succeeded("pi_hook"));
    let outcome = h
        .payments()
        .settle(&first.payment, &step, Some(&mark))
        .await
        .unwrap();

    // THEN the payment succeeded and the order is paid
    let SettleOutcome::Settled(after) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    assert_eq!(after.status, PaymentStatus::Succeeded);
    assert_eq!(payment_now(&h, &first.payment.payment_id).await, *after);
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(order.payment_state, OrderPaymentState::Paid, "{}", H::NAME);
    let before = persisted(&h, &first).await;

    // AND WHEN the same event is delivered again, decided on the payment as it is now
    let again = h
        .payments()
        .settle(&after, &Transition::Unchanged, Some(&mark))
        .await
        .unwrap();
    // THEN it is a duplicate, and nothing was written
    assert_eq!(again, SettleOutcome::Duplicate, "{}", H::NAME);
    // AND a redelivery that still decides on the stale read is a duplicate too (the mark is
    // checked before the payment)
    let stale = h
        .payments()
        .settle(&first.payment, &step, Some(&mark))
        .await
        .unwrap();
    assert_eq!(stale, SettleOutcome::Duplicate, "{}", H::NAME);
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
    // AND the mark is there: recording the event again is refused
    assert!(!h.payments().record_event(&mark).await.unwrap());
}

pub async fn a_settle_on_a_stale_read_is_moved_and_does_not_mark_the_event<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt that reconcile failed (abandoned) after a webhook's read of it
    let first = begun(&h, "hook-stale").await;
    let abandoned = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &Settlement::Abandoned),
            None,
        )
        .await
        .unwrap();
    assert!(matches!(abandoned, SettleOutcome::Settled(_)));
    let before = persisted(&h, &first).await;

    // WHEN a decline webhook is applied on the processing payment it read
    let mark = event_mark(&h, "evt_declined", Duration::from_secs(30 * 86_400));
    let outcome = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &declined("pi_d")),
            Some(&mark),
        )
        .await
        .unwrap();

    // THEN it is told to read again, nothing is written, and the event is not marked done
    assert_eq!(outcome, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);
    assert!(
        h.payments().record_event(&mark).await.unwrap(),
        "{}",
        H::NAME
    );
}

/// A move decided while no PSP id was stored (a fence's proof that nothing under the key can
/// move money, which holds only while no id is stored) never lands on a payment whose id was
/// filled in meanwhile, and the fill-in never lands on the payment the move failed: whichever
/// comes second is told to read again, and nothing of it is written.
pub async fn a_move_needs_the_psp_id_as_read<H: PaymentStoreHarness>(h: H) {
    // GIVEN a processing attempt read before any PSP id was stored (reconcile's read)
    let first = begun(&h, "id-as-read").await;
    let read = first.payment.clone();
    assert_eq!(read.provider_payment_id, None);
    // AND a webhook that fills in the PSP's id of the payment it approved
    let approved = Settlement::Authorized {
        provider_payment_id: "sq_1".into(),
        amount_capturable: read.amount,
        capture_before_ms: None,
    };
    let filled = h
        .payments()
        .settle(&read, &transition(&read, &approved), None)
        .await
        .unwrap();
    let SettleOutcome::Settled(now) = filled else {
        panic!("{}: the fill-in was not written: {filled:?}", H::NAME)
    };
    assert_eq!(
        (now.status, now.provider_payment_id.as_deref()),
        (PaymentStatus::Processing, Some("sq_1")),
        "{}",
        H::NAME
    );
    let before = persisted(&h, &first).await;

    // WHEN reconcile abandons the attempt on its read without the id
    let abandoned = h
        .payments()
        .settle(&read, &transition(&read, &Settlement::Abandoned), None)
        .await
        .unwrap();

    // THEN it is told to read again, and the payment, its order and record are as they were
    assert_eq!(abandoned, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(persisted(&h, &first).await, before, "{}", H::NAME);

    // AND the other way round: an attempt abandoned first refuses a fill-in read before it
    let second = begun(&h, "id-as-read-2").await;
    let read = second.payment.clone();
    let gave_up = h
        .payments()
        .settle(&read, &transition(&read, &Settlement::Abandoned), None)
        .await
        .unwrap();
    assert!(matches!(gave_up, SettleOutcome::Settled(_)), "{}", H::NAME);
    let before = persisted(&h, &second).await;
    let late = h
        .payments()
        .settle(&read, &transition(&read, &approved), None)
        .await
        .unwrap();
    assert_eq!(late, SettleOutcome::Moved, "{}", H::NAME);
    assert_eq!(persisted(&h, &second).await, before, "{}", H::NAME);
}

pub async fn record_event_is_true_once_then_false_until_the_mark_expires<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN an event that changes nothing, with a mark kept for a minute
    let mark = event_mark(&h, "evt_noop", Duration::from_secs(60));

    // WHEN it is recorded twice
    let first = h.payments().record_event(&mark).await.unwrap();
    let second = h.payments().record_event(&mark).await.unwrap();

    // THEN only the first records it
    assert_eq!((first, second), (true, false), "{}", H::NAME);
    // AND an event of another provider with the same id is another event
    let other = EventMark {
        provider: "omise".into(),
        ..mark.clone()
    };
    assert!(h.payments().record_event(&other).await.unwrap());

    // AND once the mark has expired (TTL not run yet) the event can be recorded again
    h.clock().advance(Duration::from_secs(120));
    let renewed = event_mark(&h, "evt_noop", Duration::from_secs(60));
    assert!(
        h.payments().record_event(&renewed).await.unwrap(),
        "{}",
        H::NAME
    );
    assert!(!h.payments().record_event(&renewed).await.unwrap());
}

pub async fn settle_keeps_the_mirror_of_a_completed_record_current<H: PaymentStoreHarness>(h: H) {
    // GIVEN an attempt answered 202: its record is COMPLETED with the processing view
    let first = begun(&h, "mirror").await;
    h.payments()
        .finish_attempt(
            &first.payment,
            &Transition::Unchanged,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    let before = live_record(&h, &first.claim.key).await;

    // WHEN a webhook settles it an hour later
    h.clock().advance(Duration::from_secs(3600));
    let outcome = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_m")),
            None,
        )
        .await
        .unwrap();

    // THEN the record's result is the settled view, and it is kept as long as the payment
    let SettleOutcome::Settled(after) = outcome else {
        panic!("{}: expected Settled, got {outcome:?}", H::NAME)
    };
    let record = live_record(&h, &first.claim.key).await;
    assert_eq!(stored_result(&record), view_json(&after), "{}", H::NAME);
    assert_eq!(
        record.expires_at_s,
        CHARGE_RECORD_NEVER_EXPIRES_S,
        "{}",
        H::NAME
    );
    // AND nothing else about the record changed
    assert_eq!(
        IdempotencyRecord {
            state: record.state.clone(),
            expires_at_s: record.expires_at_s,
            ..before
        },
        record
    );
}

pub async fn settle_leaves_an_in_progress_record_to_its_holder<H: PaymentStoreHarness>(h: H) {
    // GIVEN an attempt still held by its invocation (record IN_PROGRESS)
    let first = begun(&h, "no-mirror").await;
    let before = live_record(&h, &first.claim.key).await;

    // WHEN a webhook settles it first
    let outcome = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_early")),
            None,
        )
        .await
        .unwrap();

    // THEN the payment and the order moved, but the record is exactly as it was
    assert!(
        matches!(&outcome, SettleOutcome::Settled(p) if p.status == PaymentStatus::Succeeded),
        "{}: {outcome:?}",
        H::NAME
    );
    assert_eq!(
        order_now(&h, &first.order.order_id).await.payment_state,
        OrderPaymentState::Paid
    );
    assert_eq!(
        live_record(&h, &first.claim.key).await,
        before,
        "{}",
        H::NAME
    );
}

pub async fn a_late_success_settles_the_payment_alone_when_another_attempt_holds_the_order<
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
    let order_before = order_now(&h, &first.order.order_id).await;

    // WHEN the PSP reports the first attempt charged after all
    let outcome = h
        .payments()
        .settle(
            &first.payment,
            &transition(&first.payment, &succeeded("pi_late")),
            None,
        )
        .await
        .unwrap();

    // THEN the first payment is succeeded (the money moved; a refund follows elsewhere)
    assert!(
        matches!(&outcome, SettleOutcome::Settled(p) if p.status == PaymentStatus::Succeeded),
        "{}: {outcome:?}",
        H::NAME
    );
    assert_eq!(
        payment_now(&h, &first.payment.payment_id).await.status,
        PaymentStatus::Succeeded
    );
    // AND the order still belongs to the second attempt, untouched
    assert_eq!(
        order_now(&h, &first.order.order_id).await,
        order_before,
        "{}",
        H::NAME
    );
    assert_eq!(
        order_before.payment_id,
        Some(second.payment.payment_id.clone())
    );
}

/// The race the load run found: a webhook settling while the charge's invocation completes the
/// record with what it read before. Whatever the interleaving, the record a replay reads ends up
/// describing the payment as it is (the holder re-reads when its payment moved).
pub async fn settling_while_the_holder_completes_never_leaves_a_stale_mirror<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    for i in 0..25 {
        // GIVEN an attempt whose PSP answer was lost: its invocation completes the record with
        // the processing view, while the PSP's webhook settles the payment
        let first = begun(&h, &format!("race-{i}")).await;
        let step = transition(&first.payment, &succeeded(&format!("pi_race_{i}")));
        let finish = h.payments().finish_attempt(
            &first.payment,
            &Transition::Unchanged,
            &first.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        );
        let settle = h.payments().settle(&first.payment, &step, None);
        let (finished, settled) = tokio::join!(finish, settle);
        assert!(
            matches!(settled, Ok(SettleOutcome::Settled(_))),
            "{}: {settled:?}",
            H::NAME
        );
        if finished.as_ref().is_ok_and(|f| *f == SettleOutcome::Moved) {
            // The holder saw its payment move: it completes with what it reads now.
            let now = payment_now(&h, &first.payment.payment_id).await;
            h.payments()
                .finish_attempt(
                    &now,
                    &Transition::Unchanged,
                    &first.claim.lease_token,
                    payonce::ports::FinishedBy::Charge,
                )
                .await
                .expect("complete with the current view");
        } else {
            finished.expect("the holder completes");
        }
        // THEN the record describes the payment as it is: succeeded
        let payment = payment_now(&h, &first.payment.payment_id).await;
        assert_eq!(payment.status, PaymentStatus::Succeeded, "{}", H::NAME);
        let record = live_record(&h, &first.claim.key).await;
        assert_eq!(
            stored_result(&record),
            view_json(&payment),
            "{} round {i}: the mirror is stale",
            H::NAME
        );
    }
}

store_suite!(
    settling_while_the_holder_completes_never_leaves_a_stale_mirror,
    a_webhook_settles_once_and_its_redelivery_is_a_duplicate,
    a_settle_on_a_stale_read_is_moved_and_does_not_mark_the_event,
    a_move_needs_the_psp_id_as_read,
    record_event_is_true_once_then_false_until_the_mark_expires,
    settle_keeps_the_mirror_of_a_completed_record_current,
    settle_leaves_an_in_progress_record_to_its_holder,
    a_late_success_settles_the_payment_alone_when_another_attempt_holds_the_order,
);
