//! Customer action and authorize-then-capture through the stores: what each new status writes
//! (the payment's progress round-trips, the order stays held until a capture pays it or a
//! cancel releases it, the in-flight index keeps both open statuses) on both backends.

use super::*;
use payonce::domain::{
    transition, CancellationReason, CaptureMethod, NextAction, OrderPaymentState, PaymentStatus,
    Transition,
};
use payonce::ports::{BeginRefundOutcome, InflightScan, SettleOutcome};

/// Begins a manual-capture attempt with a `return_url` on a new order under `key`.
async fn begun_manual<H: PaymentStoreHarness>(h: &H, key: &str) -> Begun {
    let order = stored_order(h, USER).await;
    begun_as(h, order, key, |payment| {
        payment.capture = CaptureMethod::Manual;
        payment.return_url = Some("https://shop.example/checkout/return".into());
    })
    .await
}

/// Applies `settlement` to the payment as stored now (a webhook without a dedup mark); the
/// payment as it is after.
async fn settle_now<H: PaymentStoreHarness>(
    h: &H,
    payment_id: &str,
    settlement: &Settlement,
) -> Payment {
    let read = payment_now(h, payment_id).await;
    let step = transition(&read, settlement);
    assert_ne!(step, Transition::Unchanged, "{}: {settlement:?}", H::NAME);
    match h.payments().settle(&read, &step, None).await.unwrap() {
        SettleOutcome::Settled(after) => {
            assert_eq!(payment_now(h, payment_id).await, *after, "{}", H::NAME);
            *after
        }
        other => panic!("{}: {settlement:?} was not settled: {other:?}", H::NAME),
    }
}

/// The order as its readers see it (stored, then settled by the attempt holding it).
async fn order_read<H: PaymentStoreHarness>(h: &H, order_id: &str) -> Order {
    let stored = order_now(h, order_id).await;
    let holder = match stored.holder_to_read() {
        Some(id) => Some(payment_now(h, id).await),
        None => None,
    };
    stored.settled_by(holder.as_ref())
}

async fn in_flight<H: PaymentStoreHarness>(h: &H, payment_id: &str) -> bool {
    let due = h.clock().now_ms() + 86_400_000;
    let (ids, _) = h.payments().list_inflight(due, 100, None).await.unwrap();
    ids.iter().any(|id| id == payment_id)
}

pub async fn an_action_and_an_authorization_hold_the_order_until_a_partial_capture_pays_it<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a manual-capture attempt with a return URL: both are stored with it
    let first = begun_manual(&h, "flow-capture").await;
    let id = first.payment.payment_id.clone();
    let stored = payment_now(&h, &id).await;
    assert_eq!(stored.capture, CaptureMethod::Manual, "{}", H::NAME);
    assert_eq!(stored.return_url, first.payment.return_url, "{}", H::NAME);

    // WHEN the PSP asks the customer to authenticate
    let action = NextAction {
        url: "https://psp.example/authenticate/pi_flow".into(),
        expires_at_ms: h.clock().now_ms() + 3_600_000,
    };
    let after = settle_now(
        &h,
        &id,
        &Settlement::ActionRequired {
            provider_payment_id: "pi_flow".into(),
            next_action: action.clone(),
        },
    )
    .await;
    // THEN the payment waits with its action, still in flight, and the order stays held
    assert_eq!(after.status, PaymentStatus::RequiresAction, "{}", H::NAME);
    assert_eq!(after.progress.next_action, Some(action), "{}", H::NAME);
    assert_eq!(after.provider_payment_id.as_deref(), Some("pi_flow"));
    assert!(in_flight(&h, &id).await, "{}", H::NAME);
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        (order.payment_state, order.payment_id.as_deref()),
        (OrderPaymentState::Processing, Some(id.as_str())),
        "{}",
        H::NAME
    );

    // WHEN the PSP says it is processing after the customer acted, THEN the flag is stored
    let after = settle_now(
        &h,
        &id,
        &Settlement::ActionCompleted {
            provider_payment_id: "pi_flow".into(),
        },
    )
    .await;
    assert!(after.progress.action_completed, "{}", H::NAME);
    assert_eq!(after.status, PaymentStatus::RequiresAction);

    // WHEN it authorizes
    let capture_before_ms = h.clock().now_ms() + 7 * 86_400_000;
    let after = settle_now(
        &h,
        &id,
        &Settlement::Authorized {
            provider_payment_id: "pi_flow".into(),
            amount_capturable: 3000,
            capture_before_ms: Some(capture_before_ms),
        },
    )
    .await;
    // THEN the authorization is stored, the action gone, the flag kept; the order reads
    // authorized (stored as held) and the payment stays in flight
    assert_eq!(after.status, PaymentStatus::Authorized, "{}", H::NAME);
    assert_eq!(
        (
            after.progress.amount_capturable,
            after.progress.capture_before_ms,
            after.progress.next_action.is_none(),
            after.progress.action_completed
        ),
        (3000, Some(capture_before_ms), true, true),
        "{}",
        H::NAME
    );
    assert_eq!(
        order_read(&h, &first.order.order_id).await.payment_state,
        OrderPaymentState::Authorized,
        "{}",
        H::NAME
    );
    assert_eq!(
        order_now(&h, &first.order.order_id).await.payment_state,
        OrderPaymentState::Processing,
        "{}",
        H::NAME
    );
    assert!(in_flight(&h, &id).await, "{}", H::NAME);

    // WHEN 1,800 of it is captured
    let after = settle_now(
        &h,
        &id,
        &Settlement::Captured {
            provider_payment_id: "pi_flow".into(),
            amount_captured: 1800,
        },
    )
    .await;
    // THEN the payment succeeded with what was captured, the order is paid, and it left the
    // index
    assert_eq!(after.status, PaymentStatus::Succeeded, "{}", H::NAME);
    assert_eq!(after.amount_captured(), 1800, "{}", H::NAME);
    assert_eq!(after.progress.amount_capturable, 0, "{}", H::NAME);
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(order.payment_state, OrderPaymentState::Paid, "{}", H::NAME);
    assert!(!in_flight(&h, &id).await, "{}", H::NAME);
}

pub async fn a_confirmed_cancel_releases_the_order_and_leaves_the_index<H: PaymentStoreHarness>(
    h: H,
) {
    // GIVEN an attempt waiting for the customer
    let first = begun_manual(&h, "flow-cancel").await;
    let id = first.payment.payment_id.clone();
    settle_now(
        &h,
        &id,
        &Settlement::ActionRequired {
            provider_payment_id: "pi_gone".into(),
            next_action: NextAction {
                url: "https://psp.example/authenticate/pi_gone".into(),
                expires_at_ms: h.clock().now_ms() + 3_600_000,
            },
        },
    )
    .await;

    // WHEN the PSP confirms the abandoned action's cancel
    let after = settle_now(
        &h,
        &id,
        &Settlement::Canceled {
            provider_payment_id: Some("pi_gone".into()),
            reason: CancellationReason::Abandoned,
        },
    )
    .await;

    // THEN the payment is canceled with its reason and without its action, the order is
    // released, and reconcile no longer sees the payment
    assert_eq!(after.status, PaymentStatus::Canceled, "{}", H::NAME);
    assert_eq!(
        after.progress.cancellation_reason,
        Some(CancellationReason::Abandoned),
        "{}",
        H::NAME
    );
    assert_eq!(after.progress.next_action, None, "{}", H::NAME);
    let order = order_now(&h, &first.order.order_id).await;
    assert_eq!(
        (order.payment_state, order.payment_id.as_deref()),
        (OrderPaymentState::Unpaid, None),
        "{}",
        H::NAME
    );
    assert!(!in_flight(&h, &id).await, "{}", H::NAME);
    // AND a new attempt may pay the order
    let again = begun_on(&h, order, "flow-cancel-again").await;
    assert_eq!(
        order_now(&h, &again.order.order_id).await.payment_id,
        Some(again.payment.payment_id),
        "{}",
        H::NAME
    );
}

pub async fn refunds_of_a_partial_capture_are_bounded_by_what_was_captured<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN a payment of 3,000 of which 1,800 was captured
    let first = begun_manual(&h, "flow-refund").await;
    let id = first.payment.payment_id.clone();
    settle_now(
        &h,
        &id,
        &Settlement::Authorized {
            provider_payment_id: "pi_part".into(),
            amount_capturable: 3000,
            capture_before_ms: None,
        },
    )
    .await;
    let captured = settle_now(
        &h,
        &id,
        &Settlement::Captured {
            provider_payment_id: "pi_part".into(),
            amount_captured: 1800,
        },
    )
    .await;
    assert_eq!(payonce::domain::refundable(&captured), 1800, "{}", H::NAME);

    // WHEN a refund of 1,801 is claimed
    let over = super::refunds::refund_claim(&h, &captured, "flow-refund-over", 1801);
    let outcome = h
        .payments()
        .begin_refund(&over.claim, &captured, &over.refund)
        .await
        .unwrap();
    // THEN it does not fit, and nothing is written
    assert_eq!(
        outcome,
        BeginRefundOutcome::PaymentChanged(Some(Box::new(captured.clone()))),
        "{}",
        H::NAME
    );
    assert_eq!(payment_now(&h, &id).await, captured, "{}", H::NAME);
    assert_eq!(
        h.payments()
            .get_refund(&over.refund.refund_id)
            .await
            .unwrap(),
        None,
        "{}",
        H::NAME
    );

    // WHEN all 1,800 is claimed, THEN it is, and nothing more is refundable
    let all = super::refunds::refund_claim(&h, &captured, "flow-refund-all", 1800);
    let outcome = h
        .payments()
        .begin_refund(&all.claim, &captured, &all.refund)
        .await
        .unwrap();
    assert_eq!(outcome, BeginRefundOutcome::Begun, "{}", H::NAME);
    let after = payment_now(&h, &id).await;
    assert_eq!(
        (after.refund_pending, payonce::domain::refundable(&after)),
        (1800, 0),
        "{}",
        H::NAME
    );
}

store_suite!(
    an_action_and_an_authorization_hold_the_order_until_a_partial_capture_pays_it,
    refunds_of_a_partial_capture_are_bounded_by_what_was_captured,
    a_confirmed_cancel_releases_the_order_and_leaves_the_index,
);
