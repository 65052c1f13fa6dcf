//! The cleanup sweep over the shared records: expired idempotency records (the generic
//! layer's and the charge path's) and webhook dedup marks go, a live lease never does, and an
//! interrupted sweep resumes where it stopped.

use super::*;
use payonce::domain::transition;
use payonce::idempotency::ClaimOutcome;
use payonce::ports::ExpiredSweep;
use payonce::service::cleanup::{sweep, CleanupConfig, CleanupReport};

/// Claims `key` through the idempotency port with this lease and expiry; returns the claim.
async fn claimed<H: PaymentStoreHarness>(
    h: &H,
    key: &RecordKey,
    lease_until_ms: i64,
    expires_at_s: i64,
) -> Claim {
    let claim = Claim {
        key: key.clone(),
        fingerprint: Fingerprint::of_value(&json!({"key": key.as_str()})),
        attempt_id: uuid::Uuid::new_v4().to_string(),
        lease_token: LeaseToken::generate(),
        lease_until_ms,
        expires_at_s,
        request_id: None,
    };
    let outcome = h.records().claim(&claim).await.unwrap();
    assert!(matches!(outcome, ClaimOutcome::Claimed(_)), "{outcome:?}");
    claim
}

/// Claims and completes `key`, kept until `expires_at_s`.
async fn completed<H: PaymentStoreHarness>(h: &H, key: &RecordKey, expires_at_s: i64) {
    let claim = claimed(h, key, h.clock().now_ms() + LEASE_MS, expires_at_s).await;
    h.records()
        .complete(key, &claim.lease_token, "{}", expires_at_s)
        .await
        .unwrap();
}

pub async fn cleanup_sweeps_what_expired_never_a_live_lease_and_resumes<H: PaymentStoreHarness>(
    h: H,
) {
    let now_ms = h.clock().now_ms();
    let soon_s = h.clock().now_s() + 60;
    let later_s = h.clock().now_s() + 86_400;
    let key = |raw: String| RecordKey::from_stored(raw);
    // GIVEN records that will have expired: completed ones and in-progress ones whose lease
    // lapsed, from the generic layer
    let mut gone = Vec::new();
    for i in 0..3 {
        let k = key(format!("orders.create#u{i}#done"));
        completed(&h, &k, soon_s).await;
        gone.push(k);
    }
    for i in 0..2 {
        let k = key(format!("orders.create#u{i}#crashed"));
        claimed(&h, &k, now_ms + 1_000, soon_s).await;
        gone.push(k);
    }
    // AND one from the charge path (a declined attempt), which lives on its payment and is
    // never swept
    let attempt = begun(&h, "kept").await;
    h.payments()
        .finish_attempt(
            &attempt.payment,
            &transition(&attempt.payment, &declined("pi_swept")),
            &attempt.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .unwrap();
    // AND one that will have expired but whose invocation still holds a live lease (the trap)
    let leased = key("orders.create#slow#k".into());
    claimed(&h, &leased, now_ms + 10 * 3_600_000, soon_s).await;
    // AND webhook marks that will have expired
    let old_marks: Vec<EventMark> = (0..3)
        .map(|i| event_mark(&h, &format!("evt_old_{i}"), Duration::from_secs(60)))
        .collect();
    for mark in &old_marks {
        assert!(h.payments().record_event(mark).await.unwrap());
    }
    // AND live items: a completed record, a leased one, a recent webhook mark
    let live_done = key("orders.create#live#done".into());
    completed(&h, &live_done, later_s).await;
    let live_leased = key("orders.create#live#working".into());
    claimed(&h, &live_leased, now_ms + 10 * 3_600_000, later_s).await;
    let live_mark = event_mark(&h, "evt_live", Duration::from_secs(30 * 86_400));
    assert!(h.payments().record_event(&live_mark).await.unwrap());
    h.clock().advance(Duration::from_secs(300));

    // WHEN a bounded run stops part-way (6 of 14 items)
    let config = CleanupConfig {
        page_size: 3,
        max_pages: 2,
    };
    let first = sweep(h.records(), &config).await.unwrap();
    assert!(!first.finished, "{}: {first:?}", H::NAME);
    assert!(
        h.records().load_checkpoint().await.unwrap().is_some(),
        "{}: an unfinished sweep leaves its cursor",
        H::NAME
    );
    // AND the next runs resume from its checkpoint until the sweep is done
    let mut total = first;
    for _ in 0..20 {
        if total.finished {
            break;
        }
        let run = sweep(h.records(), &config).await.unwrap();
        total = CleanupReport {
            pages: total.pages + run.pages,
            deleted_records: total.deleted_records + run.deleted_records,
            deleted_events: total.deleted_events + run.deleted_events,
            skipped: total.skipped + run.skipped,
            finished: run.finished,
        };
    }

    // THEN every expired record and mark was deleted once, the leased one skipped
    assert!(total.finished, "{}: {total:?}", H::NAME);
    assert_eq!(
        (total.deleted_records, total.deleted_events, total.skipped),
        (5, 3, 1),
        "{}: {total:?}",
        H::NAME
    );
    assert_eq!(h.records().load_checkpoint().await.unwrap(), None);
    for k in &gone {
        assert_eq!(h.raw_record(k).await, None, "{}: {k} was kept", H::NAME);
    }
    // AND the live lease is still there (expired, so only the raw read shows it)
    let kept = h
        .raw_record(&leased)
        .await
        .expect("the leased record stays");
    assert!(kept.lease().is_some());
    // AND the charge's record is still its payment's, completed
    let charge = h
        .raw_record(&attempt.claim.key)
        .await
        .expect("the charge's record");
    assert_eq!(charge.attempt_id, attempt.payment.payment_id, "{}", H::NAME);
    assert!(charge.lease().is_none());
    // AND live records and marks are untouched
    assert!(h.records().get(&live_done).await.unwrap().is_some());
    assert!(h.records().get(&live_leased).await.unwrap().is_some());
    assert!(!h.payments().record_event(&live_mark).await.unwrap());
    // AND a fresh scan finds nothing expired but the leased record
    let (expired, next) = h.records().scan_expired(1_000, None).await.unwrap();
    assert_eq!(
        (expired, next),
        (vec![leased.as_str().to_owned()], None),
        "{}",
        H::NAME
    );
}

store_suite!(cleanup_sweeps_what_expired_never_a_live_lease_and_resumes);
