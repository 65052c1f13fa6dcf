//! The in-flight scan reconcile reads: payments still processing whose next check is due, most
//! overdue first, paged; and the per-attempt deferral of that check.

use super::*;
use payonce::domain::transition;
use payonce::ports::InflightScan;

/// Pages through the scan from `cursor` with `limit` per page; every page, as returned.
async fn pages<H: PaymentStoreHarness>(
    h: &H,
    due_at_ms: i64,
    limit: u32,
    mut cursor: Option<String>,
) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    // Far more pages than the cases hold: a cursor that never ends fails instead of hanging.
    for _ in 0..50 {
        let (ids, next) = h
            .payments()
            .list_inflight(due_at_ms, limit, cursor)
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
                payonce::ports::FinishedBy::Charge,
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

    // WHEN reconcile lists the attempts due just before the bound (a new attempt's first check
    // is due at its creation), one per page
    let listed = pages(&h, bound_ms - 1, 1, None).await;

    // THEN it gets the processing ones only, oldest first, never more than one per page
    assert!(
        listed.iter().all(|page| page.len() <= 1),
        "{}: {listed:?}",
        H::NAME
    );
    let ids: Vec<String> = listed.into_iter().flatten().collect();
    assert_eq!(ids, vec![id(0), id(2), id(4)], "{}", H::NAME);

    // AND due at the bound itself, with larger pages, the young one follows, last
    let ids: Vec<String> = pages(&h, bound_ms, 2, None)
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

pub async fn a_deferred_check_moves_the_attempt_behind_the_others_until_it_falls_due<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN three attempts begun a second apart, all due
    let mut attempts = Vec::new();
    for i in 0..3 {
        attempts.push(begun(&h, &format!("defer-{i}")).await);
        h.clock().advance(Duration::from_secs(1));
    }
    let now_ms = h.clock().now_ms();
    let id = |i: usize| attempts[i].payment.payment_id.clone();

    // WHEN reconcile found the oldest still pending and deferred its next check by a minute
    h.payments()
        .defer_check(&id(0), now_ms + 60_000)
        .await
        .unwrap();

    // THEN it is no longer due now: the scan starts with the next one
    let due_now: Vec<String> = pages(&h, now_ms, 1, None)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(due_now, vec![id(1), id(2)], "{}", H::NAME);
    // AND its next check is stored, the rest of the payment unchanged
    assert_eq!(
        payment_now(&h, &id(0)).await,
        Payment {
            check_at_ms: now_ms + 60_000,
            ..attempts[0].payment.clone()
        },
        "{}",
        H::NAME
    );
    // AND once that time comes it is listed again, after the ones that were due before it
    let later: Vec<String> = pages(&h, now_ms + 60_000, 2, None)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(later, vec![id(1), id(2), id(0)], "{}", H::NAME);
}

pub async fn deferring_a_settled_payment_does_not_bring_it_back_into_the_scan<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN an attempt listed as due, then settled before reconcile deferred it
    let a = begun(&h, "defer-settled").await;
    let now_ms = h.clock().now_ms();
    assert_eq!(
        pages(&h, now_ms, 5, None).await.concat(),
        vec![a.payment.payment_id.clone()],
        "{}",
        H::NAME
    );
    h.payments()
        .settle(
            &a.payment,
            &transition(&a.payment, &succeeded("pi_settled")),
            None,
        )
        .await
        .unwrap();
    let settled = payment_now(&h, &a.payment.payment_id).await;

    // WHEN the late deferral arrives
    h.payments()
        .defer_check(&a.payment.payment_id, now_ms + 60_000)
        .await
        .unwrap();

    // THEN the payment is unchanged and never listed again
    assert_eq!(payment_now(&h, &a.payment.payment_id).await, settled);
    assert!(
        pages(&h, now_ms + 3_600_000, 5, None)
            .await
            .concat()
            .is_empty(),
        "{}",
        H::NAME
    );
}

pub async fn the_scan_merges_every_partition_of_the_index_most_overdue_first<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    // GIVEN twenty attempts begun a second apart (spread over the index's partitions on DynamoDB)
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(begun(&h, &format!("spread-{i}")).await.payment.payment_id);
        h.clock().advance(Duration::from_secs(1));
    }
    let bound_ms = h.clock().now_ms();

    // WHEN reconcile pages through them three at a time
    let listed = pages(&h, bound_ms, 3, None).await;

    // THEN every page holds at most three, and together they are every attempt once, oldest first
    assert!(
        listed.iter().all(|page| page.len() <= 3),
        "{}: {listed:?}",
        H::NAME
    );
    assert_eq!(listed.concat(), ids, "{}", H::NAME);
    // AND a page of all of them at once is the same list
    assert_eq!(
        pages(&h, bound_ms, 50, None).await.concat(),
        ids,
        "{}",
        H::NAME
    );
}

store_suite!(
    the_scan_merges_every_partition_of_the_index_most_overdue_first,
    list_inflight_pages_through_processing_payments_oldest_first,
    an_inflight_cursor_survives_the_listed_payment_settling,
    a_deferred_check_moves_the_attempt_behind_the_others_until_it_falls_due,
    deferring_a_settled_payment_does_not_bring_it_back_into_the_scan,
);

/// The DynamoDB layout of the index: sharded partition values, and entries written before the
/// shards still read.
mod sharded_index {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use payonce::adapters::dynamodb::{inflight_shard, RequestCounter, INFLIGHT_SHARDS};

    #[tokio::test]
    async fn attempts_spread_over_the_shards_and_unsharded_entries_are_still_listed() {
        let h = payonce_tests::stores::dynamo_stores().await;
        let client = payonce_tests::dynamodb_client(&RequestCounter::new());
        let table = h.payments().tables().payments.clone();
        let item = |pk: String| {
            let (client, table) = (client.clone(), table.clone());
            async move {
                client
                    .get_item()
                    .table_name(table)
                    .key("pk", AttributeValue::S(pk))
                    .consistent_read(true)
                    .send()
                    .await
                    .unwrap()
                    .item
                    .unwrap()
            }
        };

        // GIVEN forty attempts in flight
        let mut ids = Vec::new();
        for i in 0..40 {
            ids.push(begun(&h, &format!("shard-{i}")).await.payment.payment_id);
            h.clock().advance(Duration::from_millis(10));
        }

        // THEN each carries its id's shard, and together they use every shard
        let mut shards = std::collections::BTreeSet::new();
        for id in &ids {
            let stored = item(format!("payment#{id}")).await;
            let shard = stored["inflight"].as_s().unwrap().clone();
            assert_eq!(shard, inflight_shard(id));
            shards.insert(shard);
        }
        assert_eq!(shards.len(), INFLIGHT_SHARDS as usize, "{shards:?}");

        // WHEN an entry written before the index was sharded (partition `processing`) is there too
        let mut legacy = item(format!("payment#{}", ids[0])).await;
        let legacy_id = "pay_0000000000000000000000000000000a".to_owned();
        legacy.insert(
            "pk".into(),
            AttributeValue::S(format!("payment#{legacy_id}")),
        );
        legacy.insert("inflight".into(), AttributeValue::S("processing".into()));
        client
            .put_item()
            .table_name(&table)
            .set_item(Some(legacy))
            .send()
            .await
            .unwrap();

        // THEN the scan lists it with the others, in check-time order (it is as old as the first)
        let listed = pages(&h, h.clock().now_ms(), 7, None).await.concat();
        assert_eq!(listed.len(), 41, "{listed:?}");
        let mut first_two = listed[..2].to_vec();
        first_two.sort();
        let mut oldest = vec![legacy_id, ids[0].clone()];
        oldest.sort();
        assert_eq!(first_two, oldest, "{listed:?}");
        assert_eq!(listed[2..], ids[1..], "{listed:?}");
    }
}
