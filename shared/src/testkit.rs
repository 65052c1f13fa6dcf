//! The idempotency store conformance suite, for anyone writing another [`IdempotencyStore`]
//! backend (feature `testkit`): the cases our DynamoDB and embedded stores pass, each checking
//! what is persisted, not only what is answered.
//!
//! Implement [`StoreHarness`] for your backend (a fresh store per case, on a [`ManualClock`]
//! the store reads its time from), then instantiate the suite in a test file:
//!
//! ```ignore
//! payonce::store_conformance_suite!(my_backend, my_crate::fresh_harness().await);
//! ```
//!
//! which expands to one `#[tokio::test]` per case in a module `my_backend` (the test crate needs
//! `tokio` with the `macros` and `rt` features), or call [`run_store_conformance`] to run them
//! all in one test. The transaction-conflict case arms [`Faults`]: the store must answer
//! [`StoreError::Conflict`] while [`Faults::take_conflict`] says so (this feature turns the
//! `faults` hooks on).

use crate::adapters::faults::Faults;
use crate::clock::{Clock, ManualClock};
use crate::idempotency::{
    Claim, ClaimOutcome, Fingerprint, Idempotency, IdempotencyConfig, IdempotencyKey,
    IdempotencyRecord, IdempotencyStore, Lease, LeaseToken, Outcome, RecordKey, RecordState,
    RunError, RunRequest, StoreError, TakeoverOutcome, MAX_ITEM_BYTES,
};
use async_trait::async_trait;
use serde_json::json;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// What the conformance suite needs from a backend besides the port itself: a clock it can
/// move, the fault hook, and a look at the raw stored record (expired or not).
#[async_trait]
pub trait StoreHarness: Send + Sync + 'static {
    /// The store under test.
    type Store: IdempotencyStore + Clone + 'static;
    /// Backend name, for messages.
    const NAME: &'static str;
    /// The store under test.
    fn store(&self) -> &Self::Store;
    /// The clock the store reads.
    fn clock(&self) -> &ManualClock;
    /// The store's fault hook.
    fn faults(&self) -> &Faults;
    /// The record exactly as stored, even if expired.
    async fn raw(&self, key: &RecordKey) -> Option<IdempotencyRecord>;
    /// Requests sent to the backend so far (always 0 for the embedded store).
    fn requests(&self) -> u64;
}

const SCOPE: &str = "conformance.op";
/// The invocation's remaining time in these tests (a Lambda timeout).
const INVOCATION_MS: i64 = 10_000;
const MARGIN_MS: i64 = 5_000;
const RETENTION_S: i64 = 24 * 3600;

fn key(raw: &str) -> IdempotencyKey {
    IdempotencyKey::parse(raw).expect("valid key")
}

fn fingerprint(body: serde_json::Value) -> Fingerprint {
    Fingerprint::of_value(&body)
}

fn layer<H: StoreHarness>(h: &H) -> Idempotency<H::Store> {
    Idempotency::new(h.store().clone(), IdempotencyConfig::default())
}

fn request<'a, H: StoreHarness>(
    h: &H,
    user: &'a str,
    key: &'a IdempotencyKey,
    fp: &Fingerprint,
) -> RunRequest<'a> {
    RunRequest {
        scope: SCOPE,
        user,
        key,
        fingerprint: fp.clone(),
        deadline_ms: h.clock().now_ms() + INVOCATION_MS,
    }
}

/// A claim as `Idempotency::run` would make it, for driving the port directly.
fn claim_for<H: StoreHarness>(h: &H, record: &RecordKey, fp: &Fingerprint) -> Claim {
    let now_ms = h.clock().now_ms();
    Claim {
        key: record.clone(),
        fingerprint: fp.clone(),
        attempt_id: crate::ids::new_uuid().to_string(),
        lease_token: LeaseToken::generate(),
        lease_until_ms: now_ms + INVOCATION_MS + MARGIN_MS,
        expires_at_s: now_ms.div_euclid(1000) + RETENTION_S,
        request_id: Some("req-claimer".into()),
    }
}

/// Runs `Idempotency::run` with work that returns `value` and counts how often it ran.
async fn run_counted<H: StoreHarness>(
    h: &H,
    user: &str,
    k: &IdempotencyKey,
    fp: &Fingerprint,
    value: serde_json::Value,
    calls: &AtomicU32,
) -> Outcome<serde_json::Value> {
    layer(h)
        .run(request(h, user, k, fp), |_attempt| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(value)
        })
        .await
        .expect("run succeeds")
}

/// Case: A first claim stores an in-progress record with its lease, attempt id and expiry.
pub async fn new_claim_is_in_progress_with_lease_and_expiry<H: StoreHarness>(h: H) {
    // GIVEN an empty store
    let k = key("new-claim-1");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let now_ms = h.clock().now_ms();
    let deadline_ms = now_ms + INVOCATION_MS;

    // WHEN the work runs
    let seen_while_working = std::sync::Mutex::new(None);
    let outcome = layer(&h)
        .run(
            RunRequest {
                scope: SCOPE,
                user: "alice",
                key: &k,
                fingerprint: fp.clone(),
                deadline_ms,
            },
            |attempt| async {
                let raw = h.raw(&record_key).await;
                let result = json!({"ran": attempt.attempt_id});
                *seen_while_working.lock().unwrap() = Some((attempt, raw));
                Ok::<_, std::convert::Infallible>(result)
            },
        )
        .await
        .expect("run succeeds");

    // THEN while it ran the record was IN_PROGRESS under a lease of deadline + margin (ms)
    // and an expiry of now + retention (epoch seconds)
    let (attempt, raw) = seen_while_working
        .into_inner()
        .unwrap()
        .expect("the work ran");
    let raw = raw.expect("the record exists while the work runs");
    assert!(!attempt.taken_over);
    assert_eq!(raw.attempt_id, attempt.attempt_id);
    assert_eq!(raw.fingerprint, fp);
    assert_eq!(raw.created_at_ms, now_ms);
    assert_eq!(raw.expires_at_s, now_ms.div_euclid(1000) + RETENTION_S);
    let RecordState::InProgress { lease } = raw.state else {
        panic!("expected IN_PROGRESS, got {:?}", raw.state)
    };
    assert_eq!(lease.until_ms, deadline_ms + MARGIN_MS);

    // AND afterwards it is COMPLETED with the result, the lease cleared
    assert_eq!(outcome, Outcome::Fresh(json!({"ran": attempt.attempt_id})));
    let stored = h.raw(&record_key).await.expect("record stored");
    assert_eq!(
        stored.state,
        RecordState::Completed {
            result: json!({"ran": attempt.attempt_id}).to_string()
        }
    );
    assert_eq!(stored.lease(), None);
    assert_eq!(stored.attempt_id, attempt.attempt_id);
}

/// Case: A duplicate while the lease is live is answered in progress and changes nothing stored.
pub async fn duplicate_while_leased_is_in_progress_and_writes_nothing<H: StoreHarness>(h: H) {
    // GIVEN a key claimed by an invocation that is still working
    let k = key("dup-leased");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let first = claim_for(&h, &record_key, &fp);
    assert!(matches!(
        h.store().claim(&first).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    let before = h.raw(&record_key).await.unwrap();

    // WHEN the same request arrives again
    h.clock().advance(Duration::from_millis(2_500));
    let calls = AtomicU32::new(0);
    let requests_before = h.requests();
    let outcome = run_counted(&h, "alice", &k, &fp, json!(1), &calls).await;

    // THEN it is told to come back when the lease lapses (or sooner: the wait is capped), no
    // work ran, nothing changed
    let remaining_ms = first.lease_until_ms - h.clock().now_ms();
    assert_eq!(
        outcome,
        Outcome::InProgress {
            retry_after: Duration::from_secs(((remaining_ms + 999) / 1000) as u64)
                .min(IdempotencyConfig::default().max_retry_after)
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(h.raw(&record_key).await.unwrap(), before);
    if H::NAME == "dynamodb" {
        assert_eq!(
            h.requests() - requests_before,
            1,
            "a duplicate costs exactly one request"
        );
    }

    // AND the port itself returns the existing record on a duplicate claim
    let again = claim_for(&h, &record_key, &fp);
    assert_eq!(
        h.store().claim(&again).await.unwrap(),
        ClaimOutcome::Existing(before.clone())
    );
    assert_eq!(h.raw(&record_key).await.unwrap(), before);
}

/// Case: A duplicate after completion replays the stored result without running the work.
pub async fn duplicate_after_complete_replays_the_stored_result<H: StoreHarness>(h: H) {
    let k = key("dup-done");
    let fp = fingerprint(json!({"amount": 100}));
    let calls = AtomicU32::new(0);

    let first = run_counted(
        &h,
        "alice",
        &k,
        &fp,
        json!({"payment": "p1", "n": 1}),
        &calls,
    )
    .await;
    h.clock().advance(Duration::from_secs(3600));
    let second = run_counted(&h, "alice", &k, &fp, json!({"payment": "other"}), &calls).await;

    assert_eq!(first, Outcome::Fresh(json!({"payment": "p1", "n": 1})));
    assert_eq!(second, Outcome::Replayed(json!({"payment": "p1", "n": 1})));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the work ran once");
}

/// Case: The same key with another fingerprint is a mismatch, even in progress, and changes nothing.
pub async fn other_fingerprint_is_a_mismatch_and_changes_nothing<H: StoreHarness>(h: H) {
    let k = key("mismatch");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let other = fingerprint(json!({"amount": 101}));
    let calls = AtomicU32::new(0);

    // WHILE in progress: mismatch wins over "in progress"
    let claim = claim_for(&h, &record_key, &fp);
    h.store().claim(&claim).await.unwrap();
    let leased = h.raw(&record_key).await.unwrap();
    assert_eq!(
        run_counted(&h, "alice", &k, &other, json!(1), &calls).await,
        Outcome::Mismatch
    );
    assert_eq!(h.raw(&record_key).await.unwrap(), leased);

    // AFTER completion, too
    h.store()
        .complete(
            &record_key,
            &claim.lease_token,
            "\"done\"",
            claim.expires_at_s,
        )
        .await
        .unwrap();
    let completed = h.raw(&record_key).await.unwrap();
    assert_eq!(
        run_counted(&h, "alice", &k, &other, json!(1), &calls).await,
        Outcome::Mismatch
    );
    assert_eq!(h.raw(&record_key).await.unwrap(), completed);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// Case: A record past its expiry that the TTL has not deleted yet reads as absent and can be claimed.
pub async fn expired_record_still_present_is_claimable<H: StoreHarness>(h: H) {
    // GIVEN a completed record whose retention has passed but which TTL has not deleted yet
    let k = key("expired");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let calls = AtomicU32::new(0);
    run_counted(&h, "alice", &k, &fp, json!("first"), &calls).await;
    let old = h.raw(&record_key).await.unwrap();
    h.clock()
        .advance(Duration::from_secs(RETENTION_S as u64 + 2));

    // THEN it reads as absent but is still stored
    assert_eq!(h.store().get(&record_key).await.unwrap(), None);
    assert_eq!(h.raw(&record_key).await.unwrap(), old);

    // WHEN the key is used again (even for another request), THEN it is a fresh attempt
    let other = fingerprint(json!({"amount": 5}));
    let outcome = run_counted(&h, "alice", &k, &other, json!("second"), &calls).await;
    assert_eq!(outcome, Outcome::Fresh(json!("second")));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let new = h.raw(&record_key).await.unwrap();
    assert_ne!(new.attempt_id, old.attempt_id);
    assert_eq!(new.fingerprint, other);
    assert_eq!(h.store().get(&record_key).await.unwrap(), Some(new));
}

/// Case: A lapsed lease is taken over, keeping the attempt id and creation time.
pub async fn lapsed_lease_is_taken_over_keeping_the_attempt_identity<H: StoreHarness>(h: H) {
    // GIVEN an invocation that claimed the key and died before completing
    let k = key("takeover");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let crashed = claim_for(&h, &record_key, &fp);
    h.store().claim(&crashed).await.unwrap();
    let created = h.raw(&record_key).await.unwrap();

    // WHEN its lease lapses and the client retries
    h.clock().advance(Duration::from_millis(
        (INVOCATION_MS + MARGIN_MS + 1) as u64,
    ));
    let retry = layer(&h)
        .run(request(&h, "alice", &k, &fp), |attempt| async move {
            Ok::<_, std::convert::Infallible>(attempt)
        })
        .await
        .unwrap();

    // THEN the retry runs the same attempt (same id, so downstream keys repeat) as a takeover
    let Outcome::Fresh(attempt) = retry else {
        panic!("expected Fresh, got {retry:?}")
    };
    assert!(attempt.taken_over);
    assert_eq!(attempt.attempt_id, crashed.attempt_id);
    assert_eq!(attempt.created_at_ms, created.created_at_ms);
    let done = h.raw(&record_key).await.unwrap();
    assert_eq!(done.attempt_id, crashed.attempt_id);
    assert_eq!(done.created_at_ms, created.created_at_ms);
    assert!(matches!(done.state, RecordState::Completed { .. }));
}

/// Case: A takeover replaces the lease and the expiry (so the record outlives the new lease) and
/// nothing else; a second takeover from the same seen token loses.
pub async fn takeover_changes_only_the_lease<H: StoreHarness>(h: H) {
    let k = key("takeover-port");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"x": 1}));
    let crashed = claim_for(&h, &record_key, &fp);
    h.store().claim(&crashed).await.unwrap();
    let before = h.raw(&record_key).await.unwrap();

    let lease = Lease {
        token: LeaseToken::generate(),
        until_ms: h.clock().now_ms() + 99_000,
    };
    let TakeoverOutcome::TakenOver(after) = h
        .store()
        .take_over(
            &record_key,
            &crashed.lease_token,
            &lease,
            before.expires_at_s + 3600,
        )
        .await
        .unwrap()
    else {
        panic!("takeover with the current token succeeds")
    };
    assert_eq!(after, h.raw(&record_key).await.unwrap());
    assert_eq!(
        after.state,
        RecordState::InProgress {
            lease: lease.clone()
        }
    );
    assert_eq!(
        (
            after.attempt_id,
            after.fingerprint,
            after.created_at_ms,
            after.expires_at_s
        ),
        (
            before.attempt_id,
            before.fingerprint,
            before.created_at_ms,
            before.expires_at_s + 3600
        )
    );

    // A second taker that saw the old token loses, and learns the current record.
    let late = Lease {
        token: LeaseToken::generate(),
        until_ms: 1,
    };
    let lost = h
        .store()
        .take_over(&record_key, &crashed.lease_token, &late, 1)
        .await
        .unwrap();
    assert_eq!(lost, TakeoverOutcome::Lost(h.raw(&record_key).await));
    let absent = RecordKey::new(SCOPE, "alice", &key("never-claimed"));
    assert_eq!(
        h.store()
            .take_over(&absent, &crashed.lease_token, &late, 1)
            .await
            .unwrap(),
        TakeoverOutcome::Lost(None)
    );
    assert_eq!(h.raw(&absent).await, None);
    // Nor does handing back a lease on it create it.
    h.store()
        .release(&absent, &crashed.lease_token)
        .await
        .expect("nothing to hand back");
    assert_eq!(h.raw(&absent).await, None);
}

/// Case: A superseded lease token can neither complete nor release the record.
pub async fn stale_lease_token_cannot_complete_or_release<H: StoreHarness>(h: H) {
    // GIVEN a zombie whose lease lapsed and was taken over
    let k = key("fencing");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let zombie = claim_for(&h, &record_key, &fp);
    h.store().claim(&zombie).await.unwrap();
    let new_lease = Lease {
        token: LeaseToken::generate(),
        until_ms: h.clock().now_ms() + 60_000,
    };
    h.store()
        .take_over(
            &record_key,
            &zombie.lease_token,
            &new_lease,
            zombie.expires_at_s,
        )
        .await
        .unwrap();
    let owned = h.raw(&record_key).await.unwrap();

    // WHEN the zombie tries to complete or release, THEN it is refused and nothing changes
    let completed = h
        .store()
        .complete(
            &record_key,
            &zombie.lease_token,
            "\"zombie\"",
            zombie.expires_at_s,
        )
        .await;
    assert!(
        matches!(completed, Err(StoreError::LeaseLost { .. })),
        "{completed:?}"
    );
    assert_eq!(h.raw(&record_key).await.unwrap(), owned);
    let released = h.store().release(&record_key, &zombie.lease_token).await;
    assert!(
        matches!(released, Err(StoreError::LeaseLost { .. })),
        "{released:?}"
    );
    assert_eq!(h.raw(&record_key).await.unwrap(), owned);

    // AND after the owner completes, a stale token still cannot delete the result
    h.store()
        .complete(
            &record_key,
            &new_lease.token,
            "\"owner\"",
            zombie.expires_at_s,
        )
        .await
        .unwrap();
    let done = h.raw(&record_key).await.unwrap();
    assert!(matches!(
        h.store().release(&record_key, &new_lease.token).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        h.store()
            .complete(&record_key, &new_lease.token, "\"again\"", 1)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(h.raw(&record_key).await.unwrap(), done);
}

/// Case: A write whose answer was lost and that the SDK sends again meets its own earlier try,
/// which counts as written: a claim, a takeover, a completion (with the same result) and a
/// release. Another request's token, or another result, is still refused.
pub async fn a_write_sent_again_after_its_answer_was_lost_counts_as_written<H: StoreHarness>(h: H) {
    let k = key("sent-again-1");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let now_ms = h.clock().now_ms();
    let claim = Claim {
        key: record_key.clone(),
        fingerprint: fingerprint(json!({"amount": 100})),
        attempt_id: "attempt-1".into(),
        lease_token: LeaseToken::generate(),
        lease_until_ms: now_ms + INVOCATION_MS,
        expires_at_s: now_ms.div_euclid(1000) + RETENTION_S,
        request_id: None,
    };
    // GIVEN a claim that applied, and its retry
    let first = h.store().claim(&claim).await.unwrap();
    let again = h.store().claim(&claim).await.unwrap();
    // THEN the retry is the claim, not someone else's request in progress
    assert!(matches!(first, ClaimOutcome::Claimed(_)), "{first:?}");
    assert!(
        matches!(&again, ClaimOutcome::Claimed(r) if r.lease().map(|l| &l.token) == Some(&claim.lease_token)),
        "{again:?}"
    );
    // AND another request with the same key is still answered with the existing record
    let other = Claim {
        lease_token: LeaseToken::generate(),
        ..claim.clone()
    };
    assert!(matches!(
        h.store().claim(&other).await.unwrap(),
        ClaimOutcome::Existing(_)
    ));

    // GIVEN the lease lapsed and a takeover that applied, and its retry
    h.clock().advance(Duration::from_millis(
        u64::try_from(INVOCATION_MS).unwrap() + 1,
    ));
    let lease = Lease {
        token: LeaseToken::generate(),
        until_ms: h.clock().now_ms() + INVOCATION_MS,
    };
    let taken = h
        .store()
        .take_over(&record_key, &claim.lease_token, &lease, claim.expires_at_s)
        .await
        .unwrap();
    let retaken = h
        .store()
        .take_over(&record_key, &claim.lease_token, &lease, claim.expires_at_s)
        .await
        .unwrap();
    assert!(matches!(taken, TakeoverOutcome::TakenOver(_)), "{taken:?}");
    assert_eq!(retaken, taken, "the retry is the takeover");
    // AND a takeover by someone else from the same stale token still loses
    let lost = h
        .store()
        .take_over(
            &record_key,
            &claim.lease_token,
            &Lease {
                token: LeaseToken::generate(),
                until_ms: lease.until_ms,
            },
            claim.expires_at_s,
        )
        .await
        .unwrap();
    assert!(matches!(lost, TakeoverOutcome::Lost(Some(_))), "{lost:?}");

    // GIVEN a completion that applied, and its retry
    h.store()
        .complete(&record_key, &lease.token, "\"done\"", claim.expires_at_s)
        .await
        .unwrap();
    let done = h.raw(&record_key).await.unwrap();
    h.store()
        .complete(&record_key, &lease.token, "\"done\"", claim.expires_at_s)
        .await
        .expect("the retry of a completion is that completion");
    assert_eq!(h.raw(&record_key).await.unwrap(), done);
    // AND a completion with another result under that token is still refused
    assert!(matches!(
        h.store()
            .complete(&record_key, &lease.token, "\"other\"", claim.expires_at_s)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));

    // GIVEN a release that applied, and its retry
    let k2 = key("sent-again-2");
    let released_key = RecordKey::new(SCOPE, "alice", &k2);
    let claim2 = Claim {
        key: released_key.clone(),
        lease_token: LeaseToken::generate(),
        ..claim.clone()
    };
    h.store().claim(&claim2).await.unwrap();
    h.store()
        .release(&released_key, &claim2.lease_token)
        .await
        .unwrap();
    let handed_back = h.raw(&released_key).await.unwrap();
    h.store()
        .release(&released_key, &claim2.lease_token)
        .await
        .expect("the retry of a release meets its own hand-back");
    assert_eq!(h.raw(&released_key).await.unwrap(), handed_back);
}

/// Case: The same key under two users is two independent records.
pub async fn same_key_under_two_users_is_two_records<H: StoreHarness>(h: H) {
    let k = key("shared-key");
    let fp = fingerprint(json!({"amount": 100}));
    let calls = AtomicU32::new(0);

    let alice = run_counted(&h, "alice", &k, &fp, json!("alice's"), &calls).await;
    let bob = run_counted(&h, "bob", &k, &fp, json!("bob's"), &calls).await;

    assert_eq!(alice, Outcome::Fresh(json!("alice's")));
    assert_eq!(bob, Outcome::Fresh(json!("bob's")));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let a = h.raw(&RecordKey::new(SCOPE, "alice", &k)).await.unwrap();
    let b = h.raw(&RecordKey::new(SCOPE, "bob", &k)).await.unwrap();
    assert_ne!(a.attempt_id, b.attempt_id);
    assert_eq!(
        a.state,
        RecordState::Completed {
            result: "\"alice's\"".into()
        }
    );
    assert_eq!(
        b.state,
        RecordState::Completed {
            result: "\"bob's\"".into()
        }
    );
}

/// Case: Failed work hands the lease back and keeps the record: the retry takes the attempt over
/// at once, under the same attempt id (so downstream keys derived from it repeat), and a retry
/// with another request is a mismatch.
pub async fn failed_work_hands_the_attempt_back_keeping_its_id<H: StoreHarness>(h: H) {
    let k = key("work-fails");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let first_id = std::sync::Mutex::new(String::new());

    let failed = layer(&h)
        .run(request(&h, "alice", &k, &fp), |attempt| async {
            *first_id.lock().unwrap() = attempt.attempt_id;
            Err::<serde_json::Value, _>("downstream timed out")
        })
        .await;

    assert!(
        matches!(failed, Err(RunError::Work("downstream timed out"))),
        "{failed:?}"
    );
    let first_id = first_id.into_inner().unwrap();
    let stored = h.raw(&record_key).await.expect("the record stays");
    assert_eq!(stored.attempt_id, first_id);
    assert_eq!(stored.fingerprint, fp);
    assert!(
        matches!(&stored.state, RecordState::InProgress { lease } if lease.was_released()),
        "{stored:?}"
    );

    // Another request under the key is refused, and runs nothing.
    let other = fingerprint(json!({"amount": 999}));
    let calls = AtomicU32::new(0);
    assert_eq!(
        run_counted(&h, "alice", &k, &other, json!(0), &calls).await,
        Outcome::Mismatch
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // The retry, at once: the same attempt, taken over, and it completes.
    let retried = layer(&h)
        .run(request(&h, "alice", &k, &fp), |attempt| async move {
            Ok::<_, std::convert::Infallible>(json!({
                "attempt_id": attempt.attempt_id,
                "taken_over": attempt.taken_over,
            }))
        })
        .await
        .expect("the retry runs");
    assert_eq!(
        retried,
        Outcome::Fresh(json!({"attempt_id": first_id, "taken_over": true}))
    );
    let done = h.raw(&record_key).await.unwrap();
    assert_eq!(done.attempt_id, first_id);
    assert!(matches!(done.state, RecordState::Completed { .. }));
}

/// Case: Store conflicts are retried with backoff, then answered in progress.
pub async fn transaction_conflicts_are_retried_then_answered_in_progress<H: StoreHarness>(h: H) {
    let fp = fingerprint(json!({"amount": 100}));
    let calls = AtomicU32::new(0);

    // A conflict or two is absorbed by the retries.
    let k = key("conflict-brief");
    h.faults().inject_conflicts(2);
    assert_eq!(
        run_counted(&h, "alice", &k, &fp, json!(1), &calls).await,
        Outcome::Fresh(json!(1))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A conflict that persists past the retries is answered InProgress, with nothing written.
    let k = key("conflict-persistent");
    h.faults().inject_conflicts(1_000);
    let outcome = run_counted(&h, "alice", &k, &fp, json!(1), &calls).await;
    h.faults().inject_conflicts(0);
    assert_eq!(
        outcome,
        Outcome::InProgress {
            retry_after: Duration::from_secs(1)
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the work did not run");
    assert_eq!(h.raw(&RecordKey::new(SCOPE, "alice", &k)).await, None);
}

/// Case: A result over the item size limit completes the record without it: the first run
/// answers its result, a duplicate is told the result was too large and never runs the work;
/// one just under the limit is stored and replayed.
pub async fn result_over_the_item_limit_completes_without_it_and_never_runs_again<
    H: StoreHarness,
>(
    h: H,
) {
    let k = key("too-big");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let big = "x".repeat(MAX_ITEM_BYTES);
    let calls = AtomicU32::new(0);

    let first = run_counted(&h, "alice", &k, &fp, json!(big), &calls).await;
    assert_eq!(
        first,
        Outcome::Fresh(json!(big)),
        "the first run answers its result"
    );
    let stored = h.raw(&record_key).await.expect("the record is kept");
    let RecordState::Completed { result } = &stored.state else {
        panic!("the record is completed, not left leased or released: {stored:?}")
    };
    assert!(result.len() < 100, "only the fact is stored: {result}");
    for _ in 0..3 {
        let again = run_counted(&h, "alice", &k, &fp, json!("again"), &calls).await;
        assert!(
            matches!(again, Outcome::TooLargeToReplay { size_bytes } if size_bytes > MAX_ITEM_BYTES),
            "{again:?}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the work ran once");

    // Just under the limit is stored and replayed intact.
    let k = key("big-but-fits");
    let fits = "y".repeat(MAX_ITEM_BYTES - 2_048);
    let first = run_counted(&h, "alice", &k, &fp, json!(fits), &calls).await;
    let replay = run_counted(&h, "alice", &k, &fp, json!("other"), &calls).await;
    assert_eq!(first, Outcome::Fresh(json!(fits)));
    assert_eq!(replay, Outcome::Replayed(json!(fits)));
}

/// Case: However short the retention, a record is kept until its lease ends, a takeover's lease
/// included: a duplicate while the work runs is in progress, never a fresh claim.
pub async fn a_record_outlives_its_lease_whatever_the_retention<H: StoreHarness>(h: H) {
    let k = key("short-retention");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let short = Idempotency::new(
        h.store().clone(),
        IdempotencyConfig::default().expires_after(Duration::from_secs(1)),
    );
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let calls = AtomicU32::new(0);
    let first = short.run(request(&h, "alice", &k, &fp), |_| async {
        calls.fetch_add(1, Ordering::SeqCst);
        started_tx.send(()).unwrap();
        finish_rx.await.unwrap();
        Ok::<_, std::convert::Infallible>(json!("first"))
    });
    let duplicate = async {
        started_rx.await.unwrap();
        let claimed = h.raw(&record_key).await.unwrap();
        let lease = claimed.lease().cloned().unwrap();
        assert!(
            claimed.expires_at_s * 1000 > lease.until_ms,
            "the record expires after its lease: {claimed:?}"
        );
        // Past the retention, inside the lease: the work is still running.
        h.clock().advance(Duration::from_secs(5));
        let again = short
            .run(request(&h, "alice", &k, &fp), |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(json!("second"))
            })
            .await
            .unwrap();
        assert!(matches!(again, Outcome::InProgress { .. }), "{again:?}");
        finish_tx.send(()).unwrap();
    };
    let (first, ()) = tokio::join!(first, duplicate);
    assert_eq!(first.unwrap(), Outcome::Fresh(json!("first")));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the work ran once");

    // A takeover's lease is covered too.
    let k = key("short-retention-takeover");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    // Claimed as a 1-second retention claims: kept until just after its lease.
    let crashed = claim_for(&h, &record_key, &fp);
    let crashed = Claim {
        expires_at_s: crashed.lease_until_ms.div_euclid(1000) + 1,
        ..crashed
    };
    h.store().claim(&crashed).await.unwrap();
    h.clock().advance(Duration::from_millis(
        u64::try_from(INVOCATION_MS + MARGIN_MS).unwrap() + 1,
    ));
    let (harness, record_key) = (&h, &record_key);
    let taker = short.run(request(&h, "alice", &k, &fp), |attempt| async move {
        assert!(attempt.taken_over);
        let record = harness.raw(record_key).await.unwrap();
        let lease = record.lease().cloned().unwrap();
        assert!(
            record.expires_at_s * 1000 > lease.until_ms,
            "the takeover moved the expiry past its lease: {record:?}"
        );
        Ok::<_, std::convert::Infallible>(json!("taken over"))
    });
    assert_eq!(taker.await.unwrap(), Outcome::Fresh(json!("taken over")));
}

/// Case: A completion write that fails on the way is sent again: the result is stored, and a
/// duplicate replays it instead of running the work again.
pub async fn a_failed_completion_write_is_sent_again<H: StoreHarness>(h: H) {
    let k = key("completion-retried");
    let record_key = RecordKey::new(SCOPE, "alice", &k);
    let fp = fingerprint(json!({"amount": 100}));
    let calls = AtomicU32::new(0);
    let outcome = layer(&h)
        .run(request(&h, "alice", &k, &fp), |_| async {
            calls.fetch_add(1, Ordering::SeqCst);
            // The claim has been sent; the next two requests (the completion) fail on the way.
            h.faults().inject_backend_failures(2);
            Ok::<_, std::convert::Infallible>(json!("done"))
        })
        .await
        .expect("the completion succeeds on its third try");
    assert_eq!(outcome, Outcome::Fresh(json!("done")));
    assert_eq!(
        h.raw(&record_key).await.unwrap().state,
        RecordState::Completed {
            result: "\"done\"".into()
        }
    );
    assert_eq!(
        run_counted(&h, "alice", &k, &fp, json!("again"), &calls).await,
        Outcome::Replayed(json!("done"))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Case: A duplicate of a long invocation is told to come back within seconds, not at the end
/// of a 15-minute lease.
pub async fn in_progress_retry_after_is_capped<H: StoreHarness>(h: H) {
    let k = key("long-lease");
    let fp = fingerprint(json!({"amount": 100}));
    let long = Claim {
        lease_until_ms: h.clock().now_ms() + 15 * 60 * 1000,
        ..claim_for(&h, &RecordKey::new(SCOPE, "alice", &k), &fp)
    };
    h.store().claim(&long).await.unwrap();
    let calls = AtomicU32::new(0);
    let outcome = run_counted(&h, "alice", &k, &fp, json!(1), &calls).await;
    assert_eq!(
        outcome,
        Outcome::InProgress {
            retry_after: IdempotencyConfig::default().max_retry_after
        }
    );
    // Below the cap, the lease's remainder, rounded up to whole seconds: 2.5 s → 3 s.
    let k = key("short-lease");
    let short = Claim {
        lease_until_ms: h.clock().now_ms() + 2_500,
        ..claim_for(&h, &RecordKey::new(SCOPE, "alice", &k), &fp)
    };
    h.store().claim(&short).await.unwrap();
    assert_eq!(
        run_counted(&h, "alice", &k, &fp, json!(1), &calls).await,
        Outcome::InProgress {
            retry_after: Duration::from_secs(3)
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// Runs every case in turn, each on a fresh harness from `harness`.
pub async fn run_store_conformance<H, F, Fut>(harness: F)
where
    H: StoreHarness,
    F: Fn() -> Fut,
    Fut: Future<Output = H>,
{
    new_claim_is_in_progress_with_lease_and_expiry(harness().await).await;
    duplicate_while_leased_is_in_progress_and_writes_nothing(harness().await).await;
    duplicate_after_complete_replays_the_stored_result(harness().await).await;
    other_fingerprint_is_a_mismatch_and_changes_nothing(harness().await).await;
    expired_record_still_present_is_claimable(harness().await).await;
    lapsed_lease_is_taken_over_keeping_the_attempt_identity(harness().await).await;
    takeover_changes_only_the_lease(harness().await).await;
    stale_lease_token_cannot_complete_or_release(harness().await).await;
    a_write_sent_again_after_its_answer_was_lost_counts_as_written(harness().await).await;
    same_key_under_two_users_is_two_records(harness().await).await;
    failed_work_hands_the_attempt_back_keeping_its_id(harness().await).await;
    transaction_conflicts_are_retried_then_answered_in_progress(harness().await).await;
    result_over_the_item_limit_completes_without_it_and_never_runs_again(harness().await).await;
    a_record_outlives_its_lease_whatever_the_retention(harness().await).await;
    a_failed_completion_write_is_sent_again(harness().await).await;
    in_progress_retry_after_is_capped(harness().await).await;
}

/// One `#[tokio::test]` per conformance case, in a module `$name`, each on a fresh harness
/// from `$harness` (an expression, which may `.await`).
#[macro_export]
macro_rules! store_conformance_suite {
    ($name:ident, $harness:expr) => {
        $crate::store_conformance_suite!(@cases $name, $harness,
            new_claim_is_in_progress_with_lease_and_expiry,
            duplicate_while_leased_is_in_progress_and_writes_nothing,
            duplicate_after_complete_replays_the_stored_result,
            other_fingerprint_is_a_mismatch_and_changes_nothing,
            expired_record_still_present_is_claimable,
            lapsed_lease_is_taken_over_keeping_the_attempt_identity,
            takeover_changes_only_the_lease,
            stale_lease_token_cannot_complete_or_release,
            a_write_sent_again_after_its_answer_was_lost_counts_as_written,
            same_key_under_two_users_is_two_records,
            failed_work_hands_the_attempt_back_keeping_its_id,
            transaction_conflicts_are_retried_then_answered_in_progress,
            result_over_the_item_limit_completes_without_it_and_never_runs_again,
            a_record_outlives_its_lease_whatever_the_retention,
            a_failed_completion_write_is_sent_again,
            in_progress_retry_after_is_capped
        );
    };
    (@cases $name:ident, $harness:expr, $($case:ident),* $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    $crate::testkit::$case($harness).await;
                }
            )*
        }
    };
}
