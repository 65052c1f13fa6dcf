//! Orders: created once, revised only as read and only while no attempt holds them.

use super::*;
use payonce::domain::OrderPaymentState;
use payonce::idempotency::StoreError;
use payonce::ports::ReviseOutcome;

pub async fn an_order_is_stored_once_and_read_back_as_written<H: PaymentStoreHarness>(h: H) {
    // GIVEN a stored order
    let order = stored_order(&h, USER).await;

    // WHEN it is read back
    let read = h.payments().get_order(&order.order_id).await.unwrap();

    // THEN it is exactly what was written
    assert_eq!(read, Some(order.clone()), "{}", H::NAME);
    // AND creating it again is refused without changing it
    let again = Order {
        amount: 1,
        ..order.clone()
    };
    let refused = h.payments().create_order(&again).await;
    assert!(
        matches!(refused, Err(StoreError::Backend { .. })),
        "{}: {refused:?}",
        H::NAME
    );
    assert_eq!(order_now(&h, &order.order_id).await, order);
    // AND an unknown order reads as absent
    assert_eq!(h.payments().get_order("ord_unknown").await.unwrap(), None);
}

pub async fn revise_order_bumps_the_version_and_is_refused_while_processing<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an unpaid order at version 1
    let read = stored_order(&h, USER).await;
    h.clock().advance(Duration::from_secs(5));

    // WHEN its items are replaced
    let next = Order {
        version: 2,
        items: vec![LineItem {
            sku: "B2".into(),
            quantity: 3,
            unit_amount: 700,
        }],
        amount: 2100,
        updated_at_ms: h.clock().now_ms(),
        ..read.clone()
    };
    let outcome = h.payments().revise_order(&read, &next).await.unwrap();

    // THEN the order is at version 2 with the new items and total
    assert_eq!(outcome, ReviseOutcome::Revised, "{}", H::NAME);
    assert_eq!(order_now(&h, &read.order_id).await, next, "{}", H::NAME);

    // AND WHEN that very edit is sent again by the SDK after its answer was lost
    let again = h.payments().revise_order(&read, &next).await.unwrap();
    // THEN it meets its own earlier try: revised, nothing more written
    assert_eq!(again, ReviseOutcome::Revised, "{}", H::NAME);
    assert_eq!(order_now(&h, &read.order_id).await, next, "{}", H::NAME);
    // AND so is an order create sent again (the order exactly as it wrote it)
    let created = stored_order(&h, USER).await;
    h.payments()
        .create_order(&created)
        .await
        .expect("a create that meets its own order is that create");
    // while another order under that id is still refused
    let clash = Order {
        amount: created.amount + 1,
        ..created.clone()
    };
    assert!(
        h.payments().create_order(&clash).await.is_err(),
        "{}",
        H::NAME
    );
    assert_eq!(
        order_now(&h, &created.order_id).await,
        created,
        "{}",
        H::NAME
    );

    // AND WHEN an edit made on the version 1 read arrives late
    let late = Order {
        version: 2,
        amount: 99,
        ..read.clone()
    };
    let outcome = h.payments().revise_order(&read, &late).await.unwrap();
    // THEN it is refused with the order as it is
    assert_eq!(
        outcome,
        ReviseOutcome::Changed(Some(next.clone())),
        "{}",
        H::NAME
    );

    // AND WHEN an attempt starts on version 2 and an edit follows
    let attempt = begun_on(&h, next.clone(), "revise").await;
    let third = Order {
        version: 3,
        amount: 50,
        ..next.clone()
    };
    let outcome = h.payments().revise_order(&next, &third).await.unwrap();
    // THEN it is refused while the attempt is processing, and the order keeps version 2
    let ReviseOutcome::Changed(Some(now)) = outcome else {
        panic!("{}: expected Changed(Some), got {outcome:?}", H::NAME)
    };
    assert_eq!(now.payment_state, OrderPaymentState::Processing);
    assert_eq!(now.payment_id, Some(attempt.payment.payment_id.clone()));
    assert_eq!(order_now(&h, &read.order_id).await.version, 2);

    // AND an edit of an unknown order finds nothing
    let ghost = Order {
        order_id: "ord_ghost".into(),
        ..next
    };
    assert_eq!(
        h.payments().revise_order(&ghost, &third).await.unwrap(),
        ReviseOutcome::Changed(None),
        "{}",
        H::NAME
    );
}

store_suite!(
    an_order_is_stored_once_and_read_back_as_written,
    revise_order_bumps_the_version_and_is_refused_while_processing,
);
