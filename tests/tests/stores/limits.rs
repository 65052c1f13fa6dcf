//! The attempt-limit counters: both stores count each attempt once and to the limit and no
//! further, a decline closes a counter, and the cleanup sweep forgets a counter once it expired.

use payonce::clock::Clock;
use payonce::ports::{AttemptCounter, ExpiredSweep};
use payonce::service::cleanup::{sweep, CleanupConfig};
use payonce_tests::stores::PaymentStoreHarness;
use std::time::Duration;

store_suite!(
    an_attempt_counts_once_however_many_requests_carry_it,
    an_attempt_counter_stops_at_its_limit,
    declines_close_a_counter_and_an_expired_one_is_swept
);

async fn an_attempt_counts_once_however_many_requests_carry_it<H: PaymentStoreHarness>(h: H) {
    let expires_at_s = h.clock().now_s() + 7200;
    let counter = "limit#user#bob#1";
    // GIVEN a counter of two, and one attempt counted twice (a double click, or a retry of a
    // request cut after it was counted)
    for _ in 0..2 {
        assert!(h
            .records()
            .count_attempt(counter, "k1", 2, 2, expires_at_s)
            .await
            .unwrap());
    }
    // THEN a second attempt still fits, and fills it
    assert!(
        h.records()
            .count_attempt(counter, "k2", 2, 2, expires_at_s)
            .await
            .unwrap(),
        "{}: the repeated attempt counted once",
        H::NAME
    );
    // AND a third is refused, while the two counted are admitted again
    assert!(!h
        .records()
        .count_attempt(counter, "k3", 2, 2, expires_at_s)
        .await
        .unwrap());
    for counted in ["k1", "k2"] {
        assert!(
            h.records()
                .count_attempt(counter, counted, 2, 2, expires_at_s)
                .await
                .unwrap(),
            "{}: {counted} is admitted again",
            H::NAME
        );
    }
    assert!(!h
        .records()
        .count_attempt(counter, "k3", 2, 2, expires_at_s)
        .await
        .unwrap());
}

async fn an_attempt_counter_stops_at_its_limit<H: PaymentStoreHarness>(h: H) {
    let expires_at_s = h.clock().now_s() + 7200;
    let counter = "limit#user#alice#1";
    for n in 1..=3 {
        assert!(
            h.records()
                .count_attempt(counter, &format!("a{n}"), 3, 2, expires_at_s)
                .await
                .unwrap(),
            "{}: attempt {n}",
            H::NAME
        );
    }
    for n in 4..6 {
        assert!(
            !h.records()
                .count_attempt(counter, &format!("a{n}"), 3, 2, expires_at_s)
                .await
                .unwrap(),
            "{}: over the limit",
            H::NAME
        );
    }
    // Another counter (another window, user or order) is its own.
    assert!(h
        .records()
        .count_attempt("limit#user#alice#2", "a4", 3, 2, expires_at_s)
        .await
        .unwrap());
    assert!(h
        .records()
        .count_attempt("limit#order#ord_1#1", "a4", 3, 2, expires_at_s)
        .await
        .unwrap());
}

async fn declines_close_a_counter_and_an_expired_one_is_swept<H: PaymentStoreHarness>(h: H) {
    let expires_at_s = h.clock().now_s() + 60;
    let counter = "limit#order#ord_9#1";
    assert!(h
        .records()
        .count_attempt(counter, "b1", 10, 2, expires_at_s)
        .await
        .unwrap());
    h.records()
        .count_decline(counter, expires_at_s)
        .await
        .unwrap();
    assert!(
        h.records()
            .count_attempt(counter, "b2", 10, 2, expires_at_s)
            .await
            .unwrap(),
        "{}: one decline of two",
        H::NAME
    );
    h.records()
        .count_decline(counter, expires_at_s)
        .await
        .unwrap();
    assert!(
        !h.records()
            .count_attempt(counter, "b3", 10, 2, expires_at_s)
            .await
            .unwrap(),
        "{}: two declines close it",
        H::NAME
    );
    // Once expired, the sweep deletes it like any expired item.
    h.clock().advance(Duration::from_secs(61));
    let report = sweep(h.records(), &CleanupConfig::default()).await.unwrap();
    assert_eq!(report.deleted_records, 1, "{}: {report:?}", H::NAME);
    let (left, _) = h.records().scan_expired(100, None).await.unwrap();
    assert!(left.is_empty(), "{}: {left:?}", H::NAME);
}
