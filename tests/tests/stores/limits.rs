//! The attempt-limit counters: both stores count an attempt in the transaction that claims it,
//! exactly when it begins; a full counter refuses the claim with nothing written; a claim
//! refused for any other reason counts nothing; declines close a counter, and the cleanup sweep
//! forgets a counter once it expired.

use super::*;
use payonce::ports::{AttemptCount, AttemptCounter, ExpiredSweep};
use payonce::service::cleanup::{sweep, CleanupConfig};

store_suite!(
    an_attempt_counts_in_its_claim_and_a_full_counter_refuses_the_next,
    a_claim_refused_on_its_key_or_its_order_counts_nothing,
    declines_close_a_counter_and_an_expired_one_is_swept
);

/// A counter admitting `attempts` attempts and `declines` declines, kept an hour.
fn count<H: PaymentStoreHarness>(
    h: &H,
    counter: &str,
    attempts: u32,
    declines: u32,
) -> AttemptCount {
    AttemptCount {
        counter: counter.to_owned(),
        max_attempts: attempts,
        max_declines: declines,
        expires_at_s: h.clock().now_s() + 3600,
    }
}

/// Begins an attempt on a new order under `key`, counted against `counts`.
async fn begin_counted<H: PaymentStoreHarness>(
    h: &H,
    key: &str,
    counts: &[AttemptCount],
) -> (BeginOutcome, Begun) {
    let order = stored_order(h, USER).await;
    let (payment, claim) = new_attempt(h, &order, key);
    let outcome = h
        .payments()
        .begin_attempt(&claim, &order, &payment, counts)
        .await
        .expect("begin the attempt");
    (
        outcome,
        Begun {
            order,
            payment,
            claim,
        },
    )
}

/// Asserts that nothing of `attempt` was written: no record, the order unpaid, no payment.
async fn assert_nothing_written<H: PaymentStoreHarness>(h: &H, attempt: &Begun) {
    assert_eq!(
        persisted(h, attempt).await,
        Persisted {
            record: None,
            order: Some(attempt.order.clone()),
            payment: None,
        },
        "{}",
        H::NAME
    );
}

async fn an_attempt_counts_in_its_claim_and_a_full_counter_refuses_the_next<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    let user = count(&h, "limit#user#alice#1", 2, 5);
    let order = count(&h, "limit#order#ord_1#1", 10, 5);
    // GIVEN two attempts begun, each counted against the user's counter of two
    for key in ["k1", "k2"] {
        let (outcome, _) = begin_counted(&h, key, &[user.clone(), order.clone()]).await;
        assert_eq!(outcome, BeginOutcome::Begun, "{}: {key}", H::NAME);
    }

    // WHEN a third begins
    let (outcome, third) = begin_counted(&h, "k3", &[user.clone(), order.clone()]).await;

    // THEN the user's counter (the first asked for) refuses it, and nothing is written
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
    assert_nothing_written(&h, &third).await;
    // AND the order's counter, refused once the user's admits, is reported as the second
    let full_order = count(&h, "limit#order#ord_1#1", 2, 5);
    let (outcome, fourth) =
        begin_counted(&h, "k4", &[count(&h, "limit#user#bob#1", 9, 5), full_order]).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(1), "{}", H::NAME);
    assert_nothing_written(&h, &fourth).await;
    // AND the refused attempts counted nothing: bob's counter still admits one attempt only
    let bob = count(&h, "limit#user#bob#1", 1, 5);
    let (outcome, _) = begin_counted(&h, "k5", std::slice::from_ref(&bob)).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
    let (outcome, _) = begin_counted(&h, "k6", &[bob]).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
}

async fn a_claim_refused_on_its_key_or_its_order_counts_nothing<H: PaymentStoreHarness>(h: H) {
    let counter = || count(&h, "limit#user#carol#1", 2, 5);
    // GIVEN one attempt begun and counted (one of two)
    let (outcome, first) = begin_counted(&h, "taken", &[counter()]).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);

    // WHEN the same key is claimed again (a double click), and another key claims the order
    // the first holds (a second tab)
    let (payment, claim) = new_attempt(&h, &first.order, "taken");
    let again = h
        .payments()
        .begin_attempt(&claim, &first.order, &payment, &[counter()])
        .await
        .unwrap();
    let (payment, claim) = new_attempt(&h, &first.order, "second-tab");
    let tab = h
        .payments()
        .begin_attempt(&claim, &first.order, &payment, &[counter()])
        .await
        .unwrap();

    // THEN both are refused on what they claim
    assert!(
        matches!(again, BeginOutcome::KeyTaken(_)),
        "{}: {again:?}",
        H::NAME
    );
    assert!(
        matches!(tab, BeginOutcome::OrderChanged(Some(_))),
        "{}: {tab:?}",
        H::NAME
    );
    // AND neither counted: the counter still admits its second attempt, and only that one
    let (outcome, _) = begin_counted(&h, "next", &[counter()]).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
    let (outcome, _) = begin_counted(&h, "over", &[counter()]).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
}

async fn declines_close_a_counter_and_an_expired_one_is_swept<H: PaymentStoreHarness>(h: H) {
    let counter = || AttemptCount {
        expires_at_s: h.clock().now_s() + 60,
        ..count(&h, "limit#order#ord_9#1", 10, 2)
    };
    let expires_at_s = counter().expires_at_s;
    // GIVEN a counter a decline created (an attempt counted in the window before, declined in
    // this one): it holds no attempts, and still admits one
    h.records()
        .count_decline("limit#order#ord_9#1", expires_at_s)
        .await
        .unwrap();
    let (outcome, _) = begin_counted(&h, "b1", &[counter()]).await;
    assert_eq!(
        outcome,
        BeginOutcome::Begun,
        "{}: one decline of two",
        H::NAME
    );
    // WHEN a second decline is counted
    h.records()
        .count_decline("limit#order#ord_9#1", expires_at_s)
        .await
        .unwrap();
    // THEN two declines close it
    let (outcome, refused) = begin_counted(&h, "b2", &[counter()]).await;
    assert_eq!(
        outcome,
        BeginOutcome::OverLimit(0),
        "{}: two declines close it",
        H::NAME
    );
    assert_nothing_written(&h, &refused).await;
    // AND once expired, the sweep deletes it like any expired item (the records of the
    // attempt live on: their leases and expiry are their own)
    h.clock().advance(Duration::from_secs(61));
    let report = sweep(h.records(), &CleanupConfig::default()).await.unwrap();
    assert_eq!(report.deleted_records, 1, "{}: {report:?}", H::NAME);
    let (left, _) = h.records().scan_expired(100, None).await.unwrap();
    assert!(left.is_empty(), "{}: {left:?}", H::NAME);
}
