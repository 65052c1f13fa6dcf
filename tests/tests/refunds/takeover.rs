//! A refund whose invocation died or could not reach the PSP: the key is given up only when no
//! call under the refund's PSP key can have reached the PSP; otherwise a retry takes the same
//! refund over and re-sends it under the same PSP key, so the PSP refunds once.

use super::{item_statuses, psp_key, FaultyRefunds, RefundFault};
use async_trait::async_trait;
use payonce::clock::Clock;
use payonce::domain::{Payment, Refund, RefundSettlement, RefundStatus, RefundTransition};
use payonce::idempotency::{
    Claim, IdempotencyKey, IdempotencyRecord, Lease, LeaseToken, RecordKey, StoreError,
};
use payonce::ports::{
    BeginRefundOutcome, EventMark, RefundLeaseOutcome, RefundRecordWrite, RefundSettleOutcome,
    RefundStore, ResumeOutcome, SenderFence,
};
use payonce::service::refund::apply_refund_settlement;
use payonce::service::{RefundAnswer, RefundCommand, RefundService};
use payonce_tests::stack::{cut_off_psp, stripe_for, PaymentStack, STAFF};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A refund of 1000 whose invocation died after the PSP refunded, before recording it: the
/// record is left in progress under its lease. Returns the payment's id.
async fn refund_dead_after_the_psp(stack: &Arc<PaymentStack>) -> String {
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;
    let dying = {
        let (stack, payment_id) = (stack.clone(), payment_id.clone());
        tokio::spawn(async move {
            let service = stack.refunds_with(FaultyRefunds {
                inner: stripe_for(&stack.psp),
                fault: RefundFault::HangAfterAnswer,
            });
            stack
                .refund_through(&service, &payment_id, "k", json!({"amount": 1000}))
                .await
        })
    };
    for _ in 0..200 {
        if !stack.psp.refunds().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    dying.abort();
    assert!(dying.await.unwrap_err().is_cancelled());
    assert_eq!(stack.psp.refunds().len(), 1, "the PSP refunded");
    let record = stack.refund_record(STAFF, "k").await.expect("the record");
    assert!(record.lease().is_some(), "left in progress: {record:?}");
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (None, Some(1000), Some(1))
    );
    payment_id
}

#[tokio::test]
async fn a_retry_after_a_refund_died_past_the_psp_takes_it_over_and_the_psp_refunds_once() {
    let stack = Arc::new(PaymentStack::start().await);
    // GIVEN a refund whose invocation died after the PSP refunded
    let payment_id = refund_dead_after_the_psp(&stack).await;
    let seen = stack.psp.requests_seen();

    // WHEN the client retries while the dead invocation's lease runs
    stack.clock.advance(Duration::from_secs(10));
    let early = stack
        .refund(&payment_id, "k", json!({"amount": 1000}))
        .await;
    // THEN 409 in use, and the PSP sees nothing
    assert_eq!(
        (early.status, early.problem_type()),
        (409, "/problems/idempotency-key-in-use"),
        "{}",
        early.body
    );
    assert!(early.header("retry-after").is_some());
    assert_eq!(stack.psp.requests_seen(), seen);

    // WHEN it retries once the lease has lapsed
    stack.clock.advance(Duration::from_secs(25));
    let retry = stack
        .refund(&payment_id, "k", json!({"amount": 1000}))
        .await;

    // THEN the same refund is re-sent under the same PSP key, the PSP answers from its store,
    // and there is still one PSP refund
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.json["status"], "succeeded");
    let refund_id = retry.json["refund_id"].as_str().unwrap().to_owned();
    assert!(refund_id.ends_with("_1"), "{refund_id}");
    let refunds = stack.psp.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:#?}");
    assert_eq!(
        (
            refunds[0].idempotency_key.clone(),
            refunds[0].refund_id.as_deref()
        ),
        (Some(psp_key(&payment_id, "1")), Some(refund_id.as_str()))
    );
    assert_eq!(
        retry.json["provider_refund_id"].as_str(),
        Some(refunds[0].id.as_str())
    );
    // AND the amount moved once, the refund remembers the PSP may have been reached
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(1))
    );
    let items = stack.refund_items(&payment_id).await;
    assert_eq!(
        item_statuses(&items),
        vec![(format!("refund#{refund_id}"), "succeeded".to_owned())]
    );
    assert_eq!(
        items[&format!("refund#{refund_id}")]
            .get("psp_maybe_reached")
            .map(String::as_str),
        Some("Bool(true)")
    );
    // AND a later retry replays it
    let replay = stack
        .refund(&payment_id, "k", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true"))
    );
    assert_eq!(replay.json, retry.json);
}

#[tokio::test]
async fn a_takeover_that_cannot_reach_the_psp_keeps_the_refund_pending_for_reconcile() {
    let stack = Arc::new(PaymentStack::start().await);
    // GIVEN a refund whose invocation died after the PSP refunded
    let payment_id = refund_dead_after_the_psp(&stack).await;

    // WHEN the client's retry takes it over but cannot connect to the PSP
    stack.clock.advance(Duration::from_secs(35));
    let cut_off = stack.refunds_with(cut_off_psp());
    let retry = stack
        .refund_through(&cut_off, &payment_id, "k", json!({"amount": 1000}))
        .await;

    // THEN the refund is not given up (the dead call reached the PSP): 202 pending, amount held
    assert_eq!(retry.status, 202, "{}", retry.body);
    assert_eq!(retry.json["status"], "pending");
    let refund_id = retry.json["refund_id"].as_str().unwrap().to_owned();
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (None, Some(1000), Some(1))
    );
    assert_eq!(
        item_statuses(&stack.refund_items(&payment_id).await),
        vec![(format!("refund#{refund_id}"), "pending".to_owned())]
    );

    // WHEN reconcile runs past the refund's minimum age
    stack.clock.advance(Duration::from_secs(180));
    let report = stack.reconcile().await;

    // THEN it finds the PSP's refund: succeeded, once
    assert_eq!(
        (report.examined, report.refunds_succeeded, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(stack.psp.refunds().len(), 1);
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(1))
    );
    let replay = stack
        .refund(&payment_id, "k", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (
            replay.status,
            replay.header("idempotent-replayed"),
            replay.json["status"].as_str()
        ),
        (201, Some("true"), Some("succeeded")),
        "{}",
        replay.body
    );
}

#[tokio::test]
async fn a_refund_that_never_reached_the_psp_is_canceled_and_its_key_refunds_afresh() {
    let stack = PaymentStack::start().await;
    let payment_id = stack.paid_payment("alice", "pay", "pm_card_visa").await;

    // WHEN staff refunds while the PSP cannot be reached at all
    let cut_off = stack.refunds_with(cut_off_psp());
    let unsent = stack
        .refund_through(&cut_off, &payment_id, "k", json!({"amount": 1000}))
        .await;

    // THEN 503 psp-unavailable: nothing refunded, the refund canceled, its amount and key free
    assert_eq!(
        (unsent.status, unsent.problem_type()),
        (503, "/problems/psp-unavailable"),
        "{}",
        unsent.body
    );
    assert!(unsent.header("retry-after").is_some());
    assert!(stack.psp.refunds().is_empty());
    let stem = payment_id.trim_start_matches("pay_");
    assert_eq!(
        item_statuses(&stack.refund_items(&payment_id).await),
        vec![(format!("refund#rfd_{stem}_1"), "canceled".to_owned())]
    );
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(0), Some(0), Some(1))
    );
    assert_eq!(stack.refund_record(STAFF, "k").await, None);

    // WHEN the client retries with the same key once the PSP is reachable
    let retry = stack
        .refund(&payment_id, "k", json!({"amount": 1000}))
        .await;

    // THEN it is refunded, once, as a new refund under its own PSP key
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(
        retry.json["refund_id"].as_str(),
        Some(format!("rfd_{stem}_2").as_str())
    );
    let refunds = stack.psp.refunds();
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        refunds[0].idempotency_key.as_deref(),
        Some(psp_key(&payment_id, "2").as_str())
    );
    assert_eq!(
        stack.refund_attributes(&payment_id).await,
        (Some(1000), Some(0), Some(2))
    );
}

/// The refund store, but a webhook settles the refund just after a takeover took its record
/// (between the takeover and its second read of the refund).
struct SettledOnResume {
    inner: payonce::adapters::dynamodb::DynamoPaymentStore,
    settlement: std::sync::Mutex<Option<RefundSettlement>>,
}

#[async_trait]
impl RefundStore for SettledOnResume {
    fn refund_now_ms(&self) -> i64 {
        self.inner.refund_now_ms()
    }
    async fn load_for_refund(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        self.inner.load_for_refund(record, payment_id).await
    }
    async fn begin_refund(
        &self,
        claim: &Claim,
        payment: &Payment,
        refund: &Refund,
    ) -> Result<BeginRefundOutcome, StoreError> {
        self.inner.begin_refund(claim, payment, refund).await
    }
    async fn resume_refund(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        refund: &Refund,
    ) -> Result<ResumeOutcome, StoreError> {
        let outcome = self
            .inner
            .resume_refund(record, seen, lease, refund)
            .await?;
        let settlement = self.settlement.lock().unwrap().take();
        if let (ResumeOutcome::Resumed, Some(settlement)) = (&outcome, settlement) {
            apply_refund_settlement(
                &self.inner,
                &refund.refund_id,
                &settlement,
                RefundRecordWrite::Keep,
                None,
                None,
                None,
            )
            .await?;
        }
        Ok(outcome)
    }
    async fn get_refund(&self, refund_id: &str) -> Result<Option<Refund>, StoreError> {
        self.inner.get_refund(refund_id).await
    }
    async fn refunds_of(&self, payment: &Payment) -> Result<Vec<Refund>, StoreError> {
        self.inner.refunds_of(payment).await
    }
    async fn refunded_payment(&self, payment_id: &str) -> Result<Option<Payment>, StoreError> {
        self.inner.refunded_payment(payment_id).await
    }
    async fn write_refund(
        &self,
        refund: &Refund,
        step: &RefundTransition,
        record: RefundRecordWrite<'_>,
        fence: Option<SenderFence<'_>>,
        event: Option<&EventMark>,
    ) -> Result<RefundSettleOutcome, StoreError> {
        self.inner
            .write_refund(refund, step, record, fence, event)
            .await
    }
    async fn take_refund_lease(
        &self,
        refund: &Refund,
        lease: &Lease,
    ) -> Result<RefundLeaseOutcome, StoreError> {
        self.inner.take_refund_lease(refund, lease).await
    }
    async fn stop_watching(&self, refund: &Refund) -> Result<(), StoreError> {
        self.inner.stop_watching(refund).await
    }
    async fn cancel_unsent_refund(
        &self,
        refund: &Refund,
        lease: &LeaseToken,
    ) -> Result<(), StoreError> {
        self.inner.cancel_unsent_refund(refund, lease).await
    }
}

#[tokio::test]
async fn a_takeover_that_finds_the_refund_settled_after_taking_it_answers_at_once() {
    let stack = Arc::new(PaymentStack::start().await);
    // GIVEN a refund whose invocation died after the PSP refunded
    let payment_id = refund_dead_after_the_psp(&stack).await;
    let provider_refund_id = stack.psp.refunds()[0].id.clone();
    let seen = stack.psp.requests_seen();

    // WHEN the client retries once the lease lapsed, and the PSP's webhook settles the refund
    // just after the retry took it over
    stack.clock.advance(Duration::from_secs(35));
    let service = RefundService::new(
        SettledOnResume {
            inner: stack.charge.store().clone(),
            settlement: std::sync::Mutex::new(Some(RefundSettlement::Succeeded {
                provider_refund_id: provider_refund_id.clone(),
            })),
        },
        stripe_for(&stack.psp),
        stack.refunds.config().clone(),
    );
    let answer = service
        .refund(
            STAFF,
            &IdempotencyKey::parse("k").unwrap(),
            &RefundCommand {
                payment_id: payment_id.clone(),
                amount: Some(1000),
                reason: None,
            },
            stack.clock.now_ms() + 20_000,
            "req-retry",
        )
        .await;

    // THEN the retry answers the settled refund at once (not 409 until its own lease lapses),
    // sends nothing, and the key replays it
    let view = match answer {
        Ok(RefundAnswer::Replayed { view, .. }) => view,
        other => panic!("expected the settled refund, got {other:?}"),
    };
    assert_eq!(
        (view.status, view.provider_refund_id.as_deref()),
        (RefundStatus::Succeeded, Some(provider_refund_id.as_str()))
    );
    assert_eq!(stack.psp.requests_seen(), seen, "nothing sent again");
    assert_eq!(stack.psp.refunds().len(), 1);
    let record = stack.refund_record(STAFF, "k").await.expect("the record");
    assert!(record.lease().is_none(), "completed: {record:?}");
    let replay = stack
        .refund(&payment_id, "k", json!({"amount": 1000}))
        .await;
    assert_eq!(
        (replay.status, replay.header("idempotent-replayed")),
        (201, Some("true")),
        "{}",
        replay.body
    );
    assert_eq!(replay.json["status"], "succeeded");
}
