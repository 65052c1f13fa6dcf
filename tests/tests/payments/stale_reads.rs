//! Eventually consistent reads. The charge path's first read and a webhook's read of its
//! payment are recent ones, at half the cost of consistent ones; what they can miss (the last
//! moment's writes) is read again, consistently, before anything is answered from it.
//!
//! DynamoDB Local's reads are always consistent, so a stale read can only be shown on the
//! embedded store, with its lag turned on: while `stale` is set, a recent read of an order or
//! payment written within the window returns it as it was before those writes.

use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore};
use payonce::adapters::psp::ConfiguredPsp;
use payonce::clock::{Clock, ManualClock};
use payonce::domain::RefundSettlement;
use payonce::domain::{
    Currency, LineItem, Order, OrderPaymentState, PaymentStatus, PaymentView, Settlement,
};
use payonce::idempotency::IdempotencyKey;
use payonce::ports::{
    ChargeRequest, ChargeStore, EventMark, Fence, OrderStore, Psp, PspError, PspLookup, PspOutcome,
    Read, RefundOutcome, RefundRequest, ReviseOutcome,
};
use payonce::service::{
    apply_event, ChargeConfig, ChargeError, ChargeService, EventApplied, PayAnswer, PayRequest,
};
use payonce_fake_psp::{FakePspConfig, RunningFakePsp};
use payonce_tests::stack::{psp_for, start_fake_psp};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const USER: &str = "alice";

/// The checkout origin a 3-D Secure payment comes back to.
const RETURN_ORIGIN: &str = "https://shop.example";

/// The embedded store with lagging reads, the charge service on it and the fake PSP.
struct Lagged {
    store: MemoryPaymentStore,
    clock: Arc<ManualClock>,
    stale: Arc<AtomicBool>,
    psp: RunningFakePsp,
    charge: ChargeService<MemoryPaymentStore, ConfiguredPsp>,
}

impl Lagged {
    /// Recent reads see nothing written in the last `window` (while `stale` is set).
    async fn start(window: Duration) -> Self {
        let clock = ManualClock::at_system_time();
        let store =
            MemoryPaymentStore::new(MemoryIdempotencyStore::new(clock.clone()), clock.clone());
        let stale = Arc::new(AtomicBool::new(true));
        let flag = stale.clone();
        store.lag_reads(window, move || flag.load(Ordering::SeqCst));
        let psp = start_fake_psp(FakePspConfig::default()).await;
        let charge = ChargeService::new(
            store.clone(),
            psp_for(&psp),
            ChargeConfig {
                checkout_origins: vec![RETURN_ORIGIN.to_owned()],
                ..ChargeConfig::default()
            },
        );
        Self {
            store,
            clock,
            stale,
            psp,
            charge,
        }
    }

    async fn create_order(&self) -> Order {
        let now_ms = self.clock.now_ms();
        let order = Order {
            order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
            owner: USER.into(),
            version: 1,
            currency: Currency::Jpy,
            items: vec![LineItem {
                sku: "A1".into(),
                quantity: 2,
                unit_amount: 1500,
            }],
            amount: 3000,
            payment_state: OrderPaymentState::Unpaid,
            payment_id: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        };
        self.store.create_order(&order).await.unwrap();
        order
    }

    async fn pay(
        &self,
        key: &str,
        order: &Order,
        payment_method: &str,
    ) -> Result<PayAnswer, ChargeError> {
        self.pay_as(
            key,
            order,
            payment_method,
            payonce::domain::CaptureMethod::Automatic,
        )
        .await
    }

    async fn pay_as(
        &self,
        key: &str,
        order: &Order,
        payment_method: &str,
        capture: payonce::domain::CaptureMethod,
    ) -> Result<PayAnswer, ChargeError> {
        let request = PayRequest {
            order_id: order.order_id.clone(),
            order_version: order.version,
            payment_method: payment_method.into(),
            return_url: None,
            capture,
        };
        let deadline_ms = self.clock.now_ms() + 20_000;
        self.charge
            .pay(
                USER,
                &IdempotencyKey::parse(key).unwrap(),
                &request,
                deadline_ms,
                "req-1",
            )
            .await
    }

    /// A webhook's late success (`pi_late`) for `payment_id`, applied under `event_id`.
    async fn late_success(&self, payment_id: &str, event_id: &str) -> EventApplied {
        // The PSP's word about the payment's own intent (one that failed, then succeeded).
        let stored = self.store.get_payment(payment_id).await.unwrap();
        let settlement = Settlement::Succeeded {
            provider_payment_id: stored
                .and_then(|p| p.provider_payment_id)
                .unwrap_or_else(|| "pi_late".into()),
        };
        apply_event(&self.store, payment_id, &settlement, &mark(event_id), None)
            .await
            .unwrap()
    }

    /// The order as its readers see it (stored `processing` reads as paid once its attempt
    /// succeeded).
    async fn order_now(&self, order_id: &str) -> Order {
        let stored = self.store.get_order(order_id).await.unwrap().unwrap();
        payonce::service::orders::settled(&self.store, stored)
            .await
            .unwrap()
    }
}

fn view(answer: &Result<PayAnswer, ChargeError>) -> &PaymentView {
    match answer {
        Ok(PayAnswer::Fresh(view) | PayAnswer::Replayed { view, .. }) => view,
        other => panic!("not a payment: {other:?}"),
    }
}

fn mark(event_id: &str) -> EventMark {
    EventMark {
        provider: "stripe".into(),
        event_id: event_id.into(),
        expires_at_s: i64::MAX / 1000,
    }
}

#[tokio::test]
async fn a_recent_read_returns_what_was_there_before_the_window_and_a_consistent_one_what_is() {
    let h = Lagged::start(Duration::from_secs(2)).await;
    // GIVEN an order created a moment ago
    let order = h.create_order().await;
    let key = payonce::idempotency::RecordKey::new(
        "payments.create",
        USER,
        &IdempotencyKey::parse("k").unwrap(),
    );

    // THEN a recent read misses it, a consistent one sees it
    let recent = h
        .store
        .load_for_charge(&key, &order.order_id, Read::Recent)
        .await
        .unwrap();
    assert_eq!(recent, (None, None));
    let latest = h
        .store
        .load_for_charge(&key, &order.order_id, Read::Latest)
        .await
        .unwrap();
    assert_eq!(latest, (None, Some(order.clone())));

    // AND once the replicas caught up (stale off, or the window past), a recent read sees it
    h.stale.store(false, Ordering::SeqCst);
    assert_eq!(
        h.store
            .load_for_charge(&key, &order.order_id, Read::Recent)
            .await
            .unwrap()
            .1,
        Some(order.clone())
    );
    h.stale.store(true, Ordering::SeqCst);
    h.clock.advance(Duration::from_secs(3));
    assert_eq!(
        h.store
            .load_for_charge(&key, &order.order_id, Read::Recent)
            .await
            .unwrap()
            .1,
        Some(order.clone())
    );

    // AND an edit a moment ago reads, recently, as the order before it
    let mut next = order.clone();
    next.version = 2;
    next.amount = 4500;
    next.items[0].quantity = 3;
    assert_eq!(
        h.store.revise_order(&order, &next).await.unwrap(),
        ReviseOutcome::Revised
    );
    let recent = h
        .store
        .load_for_charge(&key, &order.order_id, Read::Recent)
        .await
        .unwrap();
    assert_eq!(recent.1.map(|o| o.version), Some(1));
    assert_eq!(h.order_now(&order.order_id).await.version, 2);
}

#[tokio::test]
async fn a_payment_of_an_order_created_or_edited_a_moment_ago_is_charged_not_refused() {
    let h = Lagged::start(Duration::from_secs(60)).await;
    // GIVEN an order created a moment ago, which every recent read still misses
    let created = h.create_order().await;

    // WHEN alice pays it
    let first = h.pay("key-new-order", &created, "pm_card_visa").await;

    // THEN it is charged once and the order is paid: the 404 the recent read implied was read
    // again before it was answered
    assert_eq!(view(&first).status, PaymentStatus::Succeeded, "{first:?}");
    assert_eq!(h.psp.charges().len(), 1);
    assert_eq!(
        h.order_now(&created.order_id).await.payment_state,
        OrderPaymentState::Paid
    );

    // GIVEN another order, edited to version 2 a moment ago (recent reads see version 1)
    let order = h.create_order().await;
    let mut edited = order.clone();
    edited.version = 2;
    edited.amount = 4500;
    edited.items[0].quantity = 3;
    h.store.revise_order(&order, &edited).await.unwrap();

    // WHEN alice pays version 2
    let second = h.pay("key-edited-order", &edited, "pm_card_visa").await;

    // THEN it is charged at version 2's amount, not refused as a version mismatch
    assert_eq!(view(&second).status, PaymentStatus::Succeeded, "{second:?}");
    assert_eq!(view(&second).amount, 4500);
    assert_eq!(h.psp.charges().len(), 2);
    let paid = h.order_now(&edited.order_id).await;
    assert_eq!(
        (paid.payment_state, paid.version),
        (OrderPaymentState::Paid, 2)
    );
}

#[tokio::test]
async fn a_replay_of_an_answer_that_moved_a_moment_ago_answers_as_it_is_now() {
    let h = Lagged::start(Duration::from_secs(10)).await;
    // GIVEN a payment declined a minute ago (long past the window)
    let order = h.create_order().await;
    let declined = h
        .pay("key-late", &order, "pm_card_visa_chargeDeclined")
        .await;
    assert!(
        matches!(&declined, Ok(PayAnswer::Fresh(v)) if v.status == PaymentStatus::Failed),
        "{declined:?}"
    );
    let payment_id = view(&declined).payment_id.clone();
    h.clock.advance(Duration::from_secs(60));
    // AND a late success applied a moment ago, which recent reads still miss
    let applied = h.late_success(&payment_id, "evt_late").await;
    assert!(
        matches!(&applied, EventApplied::Moved(p) if p.status == PaymentStatus::Succeeded),
        "{applied:?}"
    );
    let recent = h
        .store
        .read_payment(&payment_id, Read::Recent)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        recent.status,
        PaymentStatus::Failed,
        "the recent read is stale"
    );

    // WHEN the same request is repeated
    let replay = h
        .pay("key-late", &order, "pm_card_visa_chargeDeclined")
        .await;

    // THEN it answers with the payment as it is now (succeeded), not the decline the recent
    // read still shows, and nothing more reached the PSP
    assert!(
        matches!(&replay, Ok(PayAnswer::Replayed { view, .. }) if view.status == PaymentStatus::Succeeded),
        "{replay:?}"
    );
    assert_eq!(h.psp.charges().len(), 1);
}

#[tokio::test]
async fn a_replay_of_an_authorization_captured_a_moment_ago_is_not_answered_authorized() {
    let h = Lagged::start(Duration::from_secs(10)).await;
    // GIVEN a payment authorized a minute ago
    let order = h.create_order().await;
    let manual = payonce::domain::CaptureMethod::Manual;
    let authorized = h.pay_as("key-auth", &order, "pm_card_visa", manual).await;
    assert!(
        matches!(&authorized, Ok(PayAnswer::Fresh(v)) if v.status == PaymentStatus::Authorized),
        "{authorized:?}"
    );
    let payment_id = view(&authorized).payment_id.clone();
    h.clock.advance(Duration::from_secs(60));
    // AND captured a moment ago (the capture's webhook), which recent reads still miss
    let stored = h.store.get_payment(&payment_id).await.unwrap().unwrap();
    let captured = Settlement::Captured {
        provider_payment_id: stored.provider_payment_id.clone().unwrap(),
        amount_captured: 3000,
    };
    let applied = apply_event(&h.store, &payment_id, &captured, &mark("evt_cap"), None)
        .await
        .unwrap();
    assert!(matches!(&applied, EventApplied::Moved(_)), "{applied:?}");
    let recent = h
        .store
        .read_payment(&payment_id, Read::Recent)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        recent.status,
        PaymentStatus::Authorized,
        "the recent read is stale"
    );

    // WHEN the key comes again
    let replay = h.pay_as("key-auth", &order, "pm_card_visa", manual).await;

    // THEN it answers succeeded, read consistently: `authorized` is final to the key manager,
    // and a final answer is never taken from a recent read
    assert!(
        matches!(&replay, Ok(PayAnswer::Replayed { view, .. }) if view.status == PaymentStatus::Succeeded),
        "{replay:?}"
    );
}

/// A PSP whose create answers are lost after the PSP acted on them.
struct LosesCreateAnswers(ConfiguredPsp);

#[async_trait::async_trait]
impl Psp for LosesCreateAnswers {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn kind(&self) -> payonce::domain::PspKind {
        self.0.kind()
    }
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        let _ = self.0.create_charge(request, timeout).await;
        PspOutcome::Unknown {
            reason: "the answer was lost".into(),
        }
    }
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.0.lookup(payment_id).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.0.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.0.cancel(provider_payment_id).await
    }
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        self.0.create_refund(request, timeout).await
    }
    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.0.lookup_refund(provider_payment_id, refund_id).await
    }
}

#[tokio::test]
async fn word_that_an_action_was_completed_meets_the_action_written_a_moment_ago() {
    let h = Lagged::start(Duration::from_secs(10)).await;
    // GIVEN a 3-D Secure payment whose create answer was lost a minute ago (processing)
    let order = h.create_order().await;
    let losing = ChargeService::new(
        h.store.clone(),
        LosesCreateAnswers(psp_for(&h.psp)),
        ChargeConfig {
            checkout_origins: vec![RETURN_ORIGIN.to_owned()],
            ..ChargeConfig::default()
        },
    );
    let request = PayRequest {
        order_id: order.order_id.clone(),
        order_version: 1,
        payment_method: "pm_card_threeDSecure2Required".into(),
        return_url: Some(format!("{RETURN_ORIGIN}/return")),
        capture: payonce::domain::CaptureMethod::Automatic,
    };
    let lost = losing
        .pay(
            USER,
            &IdempotencyKey::parse("key-3ds").unwrap(),
            &request,
            h.clock.now_ms() + 20_000,
            "req-1",
        )
        .await;
    assert!(
        matches!(&lost, Ok(PayAnswer::Fresh(v)) if v.status == PaymentStatus::Processing),
        "{lost:?}"
    );
    let payment_id = view(&lost).payment_id.clone();
    h.clock.advance(Duration::from_secs(60));
    // AND its webhook, a moment ago: waiting for the customer (which recent reads still miss)
    let intent = h.psp.charges()[0].id.clone();
    let action = Settlement::ActionRequired {
        provider_payment_id: intent.clone(),
        next_action: payonce::domain::NextAction {
            url: format!("{}/_fake/authenticate/{intent}", h.psp.base_url()),
            expires_at_ms: h.clock.now_ms() + 3_600_000,
        },
    };
    let applied = apply_event(&h.store, &payment_id, &action, &mark("evt_action"), None)
        .await
        .unwrap();
    assert!(matches!(&applied, EventApplied::Moved(_)), "{applied:?}");
    let recent = h
        .store
        .read_payment(&payment_id, Read::Recent)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        recent.status,
        PaymentStatus::Processing,
        "the recent read is stale"
    );

    // WHEN the PSP's word comes that the customer acted and it is processing
    let completed = Settlement::ActionCompleted {
        provider_payment_id: intent,
    };
    let applied = apply_event(
        &h.store,
        &payment_id,
        &completed,
        &mark("evt_processing"),
        None,
    )
    .await
    .unwrap();

    // THEN it is applied to the payment as it is (the action completed), not let go as a
    // change to nothing on the stale read
    assert!(matches!(&applied, EventApplied::Moved(_)), "{applied:?}");
    let now = h.store.get_payment(&payment_id).await.unwrap().unwrap();
    assert_eq!(now.status, PaymentStatus::RequiresAction);
    assert!(now.progress.action_completed);
}

#[tokio::test]
async fn a_second_request_with_a_key_in_flight_a_moment_ago_is_not_told_to_wait_when_it_finished() {
    let h = Lagged::start(Duration::from_secs(60)).await;
    // GIVEN a payment that succeeded a moment ago (recent reads see no payment and the order
    // unpaid)
    let order = h.create_order().await;
    let first = h.pay("key-double", &order, "pm_card_visa").await;
    assert_eq!(view(&first).status, PaymentStatus::Succeeded);

    // WHEN the double click's second request arrives
    let second = h.pay("key-double", &order, "pm_card_visa").await;

    // THEN it replays the success: the claim finds the key taken and answers from what it read
    assert!(
        matches!(&second, Ok(PayAnswer::Replayed { view, .. }) if view.status == PaymentStatus::Succeeded),
        "{second:?}"
    );
    assert_eq!(h.psp.charges().len(), 1);

    // AND a new tab's key on the same order is told it is paid (not "in progress", as the
    // recent read of the order would say, and not charged again)
    let other_tab = h.pay("key-other-tab", &order, "pm_card_visa").await;
    assert!(
        matches!(other_tab, Err(ChargeError::OrderAlreadyPaid)),
        "{other_tab:?}"
    );
    assert_eq!(h.psp.charges().len(), 1);
}

#[tokio::test]
async fn a_webhook_for_a_payment_created_a_moment_ago_is_applied_not_left_to_wait() {
    let h = Lagged::start(Duration::from_secs(60)).await;
    // GIVEN a payment declined a moment ago, which recent reads still miss
    let order = h.create_order().await;
    let declined = h
        .pay("key-webhook", &order, "pm_card_visa_chargeDeclined")
        .await;
    let payment_id = view(&declined).payment_id.clone();
    assert_eq!(
        h.store
            .read_payment(&payment_id, Read::Recent)
            .await
            .unwrap(),
        None
    );

    // WHEN a late success arrives by webhook
    let applied = h.late_success(&payment_id, "evt_1").await;

    // THEN it is applied (the payment was read again, consistently), and the order is paid
    assert!(
        matches!(&applied, EventApplied::Moved(p) if p.status == PaymentStatus::Succeeded),
        "{applied:?}"
    );
    assert_eq!(
        h.order_now(&order.order_id).await.payment_state,
        OrderPaymentState::Paid
    );

    // AND its redelivery, whose recent read still misses the payment, changes nothing
    let again = h.late_success(&payment_id, "evt_1").await;
    assert!(
        matches!(&again, EventApplied::Unchanged(p) if p.status == PaymentStatus::Succeeded),
        "{again:?}"
    );
    let payment = h.store.get_payment(&payment_id).await.unwrap().unwrap();
    assert_eq!(payment.status, PaymentStatus::Succeeded);
}
