//! Which attempts a reconcile run takes: those whose next check is due, most overdue first; one
//! found still pending is checked again later, so a head of attempts that never settle cannot
//! starve newer ones; and a run stops at its deadline.

use async_trait::async_trait;
use payonce::clock::{Clock, ManualClock};
use payonce::domain::{PaymentStatus, RefundSettlement};
use payonce::ports::{
    ChargeRequest, ChargeStore, Fence, Psp, PspError, PspLookup, PspOutcome, RefundOutcome,
    RefundRequest,
};
use payonce::service::reconcile::{ReconcileConfig, Reconciler};
use payonce_fake_psp::FakePspConfig;
use payonce_tests::stack::{stripe_for, PaymentStack};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn pay_body(order: &str, payment_method: &str) -> serde_json::Value {
    json!({"order_id": order, "order_version": 1, "payment_method": payment_method})
}

/// A stack whose PSP keeps `pm_fake_processing` intents processing for a day.
async fn stack_with_slow_settlement() -> PaymentStack {
    PaymentStack::start_with(
        FakePspConfig {
            processing_for: Duration::from_secs(24 * 3600),
            ..FakePspConfig::default()
        },
        Default::default(),
    )
    .await
}

/// Pays `n` new orders with `pm_fake_processing`; returns the payment ids (each answered 202).
async fn processing_attempts(stack: &PaymentStack, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let order = stack.create_order("alice").await;
        let reply = stack
            .pay(
                "alice",
                &format!("processing-{i}"),
                pay_body(&order, "pm_fake_processing"),
            )
            .await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        ids.push(reply.json["payment_id"].as_str().unwrap().to_owned());
    }
    ids
}

async fn status(stack: &PaymentStack, payment_id: &str) -> PaymentStatus {
    stack
        .charge
        .store()
        .get_payment(payment_id)
        .await
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test]
async fn attempts_that_stay_pending_do_not_starve_a_newer_one_the_psp_charged() {
    let stack = stack_with_slow_settlement().await;
    // GIVEN 120 attempts the PSP keeps processing, first in the in-flight index
    let stuck = processing_attempts(&stack, 120).await;
    stack.clock.advance(Duration::from_secs(1));
    // AND a newer attempt the PSP charged, whose answer and webhook were lost
    let order = stack.create_order("alice").await;
    let lost = stack
        .pay("alice", "lost", pay_body(&order, "pm_fake_lost_response"))
        .await;
    assert_eq!(lost.status, 202, "{}", lost.body);
    let newer = lost.json["payment_id"].as_str().unwrap().to_owned();
    stack.clock.advance(Duration::from_secs(600));

    // WHEN reconcile runs again and again, 20 attempts a run, with no time passing in between
    let config = ReconcileConfig {
        page_size: 10,
        max_pages: 2,
        ..Default::default()
    };
    let mut reports = Vec::new();
    for _ in 0..7 {
        reports.push(stack.reconciler(config.clone()).run().await.unwrap());
        if status(&stack, &newer).await != PaymentStatus::Processing {
            break;
        }
    }

    // THEN each run takes the next 20 (the pending ones wait for their next check), and the
    // seventh reaches the newer attempt and settles it
    let examined: Vec<u32> = reports.iter().map(|r| r.examined).collect();
    assert_eq!(examined, [20, 20, 20, 20, 20, 20, 1], "{reports:?}");
    assert_eq!(reports.iter().map(|r| r.pending).sum::<u32>(), 120);
    assert_eq!(reports.iter().map(|r| r.succeeded).sum::<u32>(), 1);
    assert!(reports
        .iter()
        .all(|r| r.errors == 0 && r.abandoned == 0 && !r.out_of_time));
    assert_eq!(status(&stack, &newer).await, PaymentStatus::Succeeded);
    let order_item = stack.item(&format!("order#{order}")).await.unwrap();
    assert_eq!(order_item["payment_state"], "S(\"paid\")");
    // AND the 120 stay processing, none fenced or failed
    for payment_id in &stuck {
        assert_eq!(status(&stack, payment_id).await, PaymentStatus::Processing);
    }
    let charges = stack.psp.charges();
    assert_eq!(charges.len(), 121);
    assert_eq!(
        charges.iter().filter(|c| c.outcome == "pending").count(),
        120
    );
    assert_eq!(stack.psp.succeeded_charges_for(&newer), 1);
    assert!(charges.iter().all(|c| c.outcome != "canceled"));
}

/// The PSP, with every lookup taking a second of the manual clock.
struct SlowLookups<P> {
    inner: P,
    clock: Arc<ManualClock>,
}

#[async_trait]
impl<P: Psp> Psp for SlowLookups<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> payonce::domain::PspKind {
        self.inner.kind()
    }
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        self.inner.create_charge(request, timeout).await
    }
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.clock.advance(Duration::from_secs(1));
        self.inner.lookup(payment_id).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.inner.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.inner.cancel(provider_payment_id).await
    }
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        self.inner.create_refund(request, timeout).await
    }
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.inner
            .lookup_refund(provider_payment_id, refund_id)
            .await
    }
}

#[tokio::test]
async fn a_run_stops_at_its_deadline_and_the_next_run_takes_what_it_left() {
    let stack = stack_with_slow_settlement().await;
    // GIVEN ten attempts the PSP keeps processing, all due, and lookups that take a second each
    let attempts = processing_attempts(&stack, 10).await;
    stack.clock.advance(Duration::from_secs(600));
    let reconciler = Reconciler::new(
        stack.charge.store().clone(),
        SlowLookups {
            inner: stripe_for(&stack.psp),
            clock: stack.clock.clone(),
        },
        ReconcileConfig::default(),
    );
    let created_ms = stack.clock.now_ms() - 600_000;

    // WHEN a run is given five and a half seconds
    let seen = stack.psp.requests_seen();
    let report = reconciler
        .run_until(stack.clock.now_ms() + 5_500)
        .await
        .unwrap();

    // THEN it took the six attempts it reached before its deadline, and says it ran out of time
    assert_eq!(
        (
            report.examined,
            report.pending,
            report.errors,
            report.out_of_time
        ),
        (6, 6, 0, true),
        "{report:?}"
    );
    assert_eq!(stack.psp.requests_seen() - seen, 6);
    // AND the four it did not reach are untouched: still due at their first check
    let mut untouched = 0;
    for payment_id in &attempts {
        let payment = stack
            .charge
            .store()
            .get_payment(payment_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(payment.status, PaymentStatus::Processing);
        if payment.check_at_ms == created_ms {
            untouched += 1;
        } else {
            assert!(payment.check_at_ms > stack.clock.now_ms(), "{payment:?}");
        }
    }
    assert_eq!(untouched, 4);

    // WHEN the next run has time enough
    let next = reconciler.run().await.unwrap();

    // THEN it takes exactly those four
    assert_eq!(
        (next.examined, next.pending, next.errors, next.out_of_time),
        (4, 4, 0, false),
        "{next:?}"
    );
}
