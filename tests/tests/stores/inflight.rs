//! The in-flight scan reconcile reads: payments still processing, oldest first, paged.

use super::*;
use payonce::domain::transition;
use payonce::ports::InflightScan;

/// Pages through the scan from `cursor` with `limit` per page; every page, as returned.
async fn pages<H: PaymentStoreHarness>(
    h: &H,
    created_before_ms: i64,
    limit: u32,
    mut cursor: Option<String>,
) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    // Far more pages than the cases hold: a cursor that never ends fails instead of hanging.
    for _ in 0..50 {
        let (ids, next) = h
            .payments()
            .list_inflight(created_before_ms, limit, cursor)
            .await
            .unwrap();
        pages.push(ids);
        match next {
            Some(next) => cursor = Some(next),
            None => return pages,
        }
    }
    panic!("{}: the in-flight scan did not end", H::NAME)
}

pub async fn list_inflight_pages_through_processing_payments_oldest_first<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN five attempts begun a second apart; the second succeeded, the fourth was declined,
    // the fifth released unsent (still processing)
    let mut attempts = Vec::new();
    for i in 0..5 {
        attempts.push(begun(&h, &format!("inflight-{i}")).await);
        h.clock().advance(Duration::from_secs(1));
    }
    for (i, settlement) in [(1, succeeded("pi_1")), (3, declined("pi_3"))] {
        let a = &attempts[i];
        h.payments()
            .finish_attempt(
                &a.payment,
                &transition(&a.payment, &settlement),
                &a.claim.lease_token,
                a.claim.expires_at_s,
            )
            .await
            .unwrap();
    }
    h.payments()
        .release_unsent(&attempts[4].payment, &attempts[4].claim.lease_token)
        .await
        .unwrap();
    // AND one attempt younger than the bound
    let bound_ms = h.clock().now_ms();
    let young = begun(&h, "inflight-young").await;
    let id = |i: usize| attempts[i].payment.payment_id.clone();

    // WHEN reconcile lists attempts created before the bound, one per page
    let listed = pages(&h, bound_ms, 1, None).await;

    // THEN it gets the processing ones only, oldest first, never more than one per page
    assert!(
        listed.iter().all(|page| page.len() <= 1),
        "{}: {listed:?}",
        H::NAME
    );
    let ids: Vec<String> = listed.into_iter().flatten().collect();
    assert_eq!(ids, vec![id(0), id(2), id(4)], "{}", H::NAME);

    // AND with a later bound and larger pages the young one follows, last
    let ids: Vec<String> = pages(&h, bound_ms + 1, 2, None)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(
        ids,
        vec![id(0), id(2), id(4), young.payment.payment_id.clone()],
        "{}",
        H::NAME
    );
}

pub async fn an_inflight_cursor_survives_the_listed_payment_settling<H: PaymentStoreHarness>(h: H) {
    // GIVEN three attempts in processing, and a first page of one
    let mut attempts = Vec::new();
    for i in 0..3 {
        attempts.push(begun(&h, &format!("cursor-{i}")).await);
        h.clock().advance(Duration::from_secs(1));
    }
    let bound_ms = h.clock().now_ms();
    let (first_page, cursor) = h.payments().list_inflight(bound_ms, 1, None).await.unwrap();
    assert_eq!(first_page, vec![attempts[0].payment.payment_id.clone()]);

    // WHEN the listed payment settles before the next page is read
    let a = &attempts[0];
    h.payments()
        .settle(
            &a.payment,
            &transition(&a.payment, &succeeded("pi_0")),
            RETENTION,
            None,
        )
        .await
        .unwrap();
    let cursor = cursor.unwrap_or_else(|| panic!("{}: one page of three is not the last", H::NAME));
    let rest: Vec<String> = pages(&h, bound_ms, 1, Some(cursor))
        .await
        .into_iter()
        .flatten()
        .collect();

    // THEN the scan continues after it with the others, in order
    assert_eq!(
        rest,
        vec![
            attempts[1].payment.payment_id.clone(),
            attempts[2].payment.payment_id.clone()
        ],
        "{}",
        H::NAME
    );
}

store_suite!(
    list_inflight_pages_through_processing_payments_oldest_first,
    an_inflight_cursor_survives_the_listed_payment_settling,
);
