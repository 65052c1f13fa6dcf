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

/// Counts `attempt` on a counter of 2 attempts and 2 declines: whether it was admitted.
async fn admit<H: PaymentStoreHarness>(h: &H, counter: &str, attempt: &str) -> bool {
    let expires_at_s = h.clock().now_s() + 7200;
    h.records()
        .count_attempt(counter, attempt, 2, 2, expires_at_s)
        .await
        .unwrap()
}

async fn an_attempt_counts_once_however_many_requests_carry_it<H: PaymentStoreHarness>(h: H) {
    let counter = "limit#user#bob#1";
    // GIVEN a counter of two, and one attempt counted twice (a double click, or a retry of a
    // request cut after it was counted)
    assert!(admit(&h, counter, "k1").await && admit(&h, counter, "k1").await);
    // THEN a second attempt still fits, and fills it
    assert!(
        admit(&h, counter, "k2").await,
        "{}: the repeated attempt counted once",
        H::NAME
    );
    // AND a third is refused, while the two counted are admitted again, and the third still not
    assert!(!admit(&h, counter, "k3").await, "{}", H::NAME);
    for counted in ["k1", "k2"] {
        assert!(
            admit(&h, counter, counted).await,
            "{}: {counted} is admitted again",
            H::NAME
        );
    }
    assert!(!admit(&h, counter, "k3").await, "{}", H::NAME);
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
