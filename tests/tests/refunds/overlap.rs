//! Refunds and attempts when invocations truly overlap: a staff request mid-call while reconcile
//! looks at its refund, two reconcile runs on one refund, a re-send refused while a webhook
//! settles the refund, and reconcile finishing an attempt whose handler died. Each runs on the
//! embedded store and on DynamoDB Local, against a PSP that does not deduplicate refunds by key
//! (as Omise may not), with each call held at the moment the interleaving needs.

use crate::stores::{payment_now, refund_now};
use async_trait::async_trait;
use payonce::clock::Clock;
use payonce::domain::{
    Currency, LineItem, Order, OrderPaymentState, PaymentStatus, PspKind, RefundSettlement,
    RefundStatus,
};
use payonce::idempotency::IdempotencyKey;
use payonce::ports::{
    ChargeRequest, EventMark, Fence, OrderStore, Psp, PspError, PspLookup, PspOutcome,
    RefundOutcome, RefundRecordWrite, RefundRequest, RefundStore,
};
use payonce::service::reconcile::{ReconcileConfig, Reconciled, Reconciler};
use payonce::service::refund::apply_refund_settlement;
use payonce::service::{
    ChargeConfig, ChargeService, PayAnswer, PayRequest, RefundAnswer, RefundCommand, RefundConfig,
    RefundService,
};
use payonce_tests::stores::PaymentStoreHarness;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// What the PSP does with one refund create, in order of arrival.
enum Step {
    /// Says it entered the call (`entered`), waits until the test lets it go (`go`), then
    /// answers as the inner step says.
    Held(Box<Step>),
    /// Never reached the PSP.
    NotSent,
    /// Refunds (a new PSP refund each time: no deduplication by key).
    Refund,
    /// Refuses: the charge has nothing left to refund.
    Refused,
    /// Reached the PSP, which did nothing; the answer is lost.
    Unknown,
}

#[derive(Default)]
struct Inner {
    steps: Mutex<VecDeque<Step>>,
    /// Refunds made: (our refund id, amount, PSP id).
    made: Mutex<Vec<(String, i64, String)>>,
    creates: Mutex<u32>,
    entered: Notify,
    go: Notify,
    /// What a lookup of the charge says (default: not found).
    charge: Mutex<Option<PspLookup>>,
}

/// A PSP whose refund creates follow a script, and whose refund list is its ledger.
#[derive(Clone, Default)]
struct ScriptedPsp(Arc<Inner>);

impl ScriptedPsp {
    fn script(steps: impl IntoIterator<Item = Step>) -> Self {
        let psp = Self::default();
        psp.0.steps.lock().unwrap().extend(steps);
        psp
    }

    fn refunded(&self) -> i64 {
        self.0.made.lock().unwrap().iter().map(|(_, a, _)| a).sum()
    }

    fn refunds_of(&self, refund_id: &str) -> usize {
        self.0
            .made
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _, _)| id == refund_id)
            .count()
    }

    fn creates(&self) -> u32 {
        *self.0.creates.lock().unwrap()
    }

    async fn answer(&self, step: Step, request: &RefundRequest) -> RefundOutcome {
        match step {
            Step::Held(then) => {
                self.0.entered.notify_one();
                self.0.go.notified().await;
                Box::pin(self.answer(*then, request)).await
            }
            Step::NotSent => RefundOutcome::NotSent {
                reason: "connect refused (scripted)".into(),
            },
            Step::Refund => {
                let mut made = self.0.made.lock().unwrap();
                let id = format!("re_{}", made.len() + 1);
                made.push((request.refund_id.clone(), request.amount, id.clone()));
                RefundOutcome::Answered(RefundSettlement::Succeeded {
                    provider_refund_id: id,
                })
            }
            Step::Refused => RefundOutcome::Answered(RefundSettlement::Failed {
                provider_refund_id: None,
                code: "charge_already_refunded".into(),
            }),
            Step::Unknown => RefundOutcome::Unknown {
                reason: "answer lost (scripted)".into(),
            },
        }
    }
}

#[async_trait]
impl Psp for ScriptedPsp {
    fn name(&self) -> &str {
        "stripe"
    }
    fn kind(&self) -> PspKind {
        PspKind::Stripe
    }
    async fn create_charge(&self, _request: &ChargeRequest, _timeout: Duration) -> PspOutcome {
        PspOutcome::Approved {
            provider_payment_id: "pi_1".into(),
        }
    }
    async fn lookup(&self, _payment_id: &str) -> Result<PspLookup, PspError> {
        Ok(self
            .0
            .charge
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(PspLookup::NotFound))
    }
    async fn fence(&self, _request: &ChargeRequest) -> Result<Fence, PspError> {
        Ok(Fence::InFlight)
    }
    async fn cancel(&self, _provider_payment_id: &str) -> Result<(), PspError> {
        Ok(())
    }
    async fn create_refund(&self, request: &RefundRequest, _timeout: Duration) -> RefundOutcome {
        *self.0.creates.lock().unwrap() += 1;
        let step = self.0.steps.lock().unwrap().pop_front();
        let step = step.unwrap_or_else(|| panic!("an unexpected refund create: {request:?}"));
        self.answer(step, request).await
    }
    async fn lookup_refund(
        &self,
        _provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        Ok(self
            .0
            .made
            .lock()
            .unwrap()
            .iter()
            .find(|(id, _, _)| id == refund_id)
            .map(|(_, _, psp_id)| RefundSettlement::Succeeded {
                provider_refund_id: psp_id.clone(),
            }))
    }
}

const STAFF: &str = "staff";

/// A paid payment of 1000 JPY (the charge answered at once); its id.
async fn paid<H: PaymentStoreHarness>(h: &H, psp: &ScriptedPsp) -> String {
    let now = h.clock().now_ms();
    let order = Order {
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        owner: "alice".into(),
        version: 1,
        currency: Currency::Jpy,
        items: vec![LineItem {
            sku: "a".into(),
            quantity: 1,
            unit_amount: 1000,
        }],
        amount: 1000,
        payment_state: OrderPaymentState::Unpaid,
        payment_id: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    h.payments().create_order(&order).await.unwrap();
    let charge = ChargeService::new(h.payments().clone(), psp.clone(), ChargeConfig::default());
    let answer = charge
        .pay(
            "alice",
            &IdempotencyKey::parse("k1").unwrap(),
            &PayRequest {
                order_id: order.order_id,
                order_version: 1,
                payment_method: "pm_card_visa".into(),
                return_url: None,
                capture: payonce::domain::CaptureMethod::Automatic,
            },
            now + 25_000,
            "req-pay",
        )
        .await
        .unwrap();
    let PayAnswer::Fresh(view) = answer else {
        panic!("{answer:?}")
    };
    view.payment_id
}

fn refunds<H: PaymentStoreHarness>(
    h: &H,
    psp: &ScriptedPsp,
) -> RefundService<H::Payments, ScriptedPsp> {
    RefundService::new(h.payments().clone(), psp.clone(), RefundConfig::default())
}

fn reconciler<H: PaymentStoreHarness>(
    h: &H,
    psp: &ScriptedPsp,
) -> Reconciler<H::Payments, ScriptedPsp> {
    Reconciler::new(
        h.payments().clone(),
        psp.clone(),
        ReconcileConfig::default(),
    )
}

async fn refund<H: PaymentStoreHarness>(
    h: &H,
    psp: &ScriptedPsp,
    payment_id: &str,
    key: &str,
    amount: i64,
) -> RefundAnswer {
    refunds(h, psp)
        .refund(
            STAFF,
            &IdempotencyKey::parse(key).unwrap(),
            &RefundCommand {
                payment_id: payment_id.to_owned(),
                amount: Some(amount),
                reason: None,
            },
            h.clock().now_ms() + 25_000,
            "req-refund",
        )
        .await
        .unwrap()
}

/// The refund `number` of `payment_id`.
fn refund_id(payment_id: &str, number: &str) -> String {
    payonce::domain::refund_id_for(payment_id, number)
}

/// A refund of 300 answered 202 (its call reached the PSP, which did nothing, and the answer
/// was lost): pending, and — once its sender's lease (kept while its call might still be running
/// at the PSP) has lapsed — sent by nobody. Its id.
async fn pending_refund<H: PaymentStoreHarness>(
    h: &H,
    psp: &ScriptedPsp,
    payment_id: &str,
) -> String {
    let answer = refund(h, psp, payment_id, "r1", 300).await;
    let RefundAnswer::Fresh(view) = &answer else {
        panic!("{answer:?}")
    };
    assert_eq!(view.status, RefundStatus::Pending, "{answer:?}");
    let stored = h
        .payments()
        .get_refund(&view.refund_id)
        .await
        .unwrap()
        .unwrap();
    let lease = stored
        .lease
        .expect("a sender whose call may still be running keeps its lease");
    h.clock().advance(Duration::from_millis(
        u64::try_from(lease.until_ms - h.clock().now_ms()).unwrap() + 1,
    ));
    view.refund_id.clone()
}

/// The review's double refund (reconcile ignored a live refund lease): staff ask for one refund
/// of 300; while their request is mid-call, reconcile looks at that refund. It must leave it
/// alone; the staff request's call never connected, so it cancels the refund and answers 503,
/// and the retry refunds 300 once. The PSP refunds 300 in all, and the books say 300.
pub async fn reconcile_leaves_a_refund_alone_while_its_staff_request_is_mid_call<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    let psp = ScriptedPsp::script([]);
    let payment_id = paid(&h, &psp).await;
    psp.0
        .steps
        .lock()
        .unwrap()
        .extend([Step::Held(Box::new(Step::NotSent)), Step::Refund]);
    let staff = refunds(&h, &psp);
    let recon = reconciler(&h, &psp);
    let key = IdempotencyKey::parse("r1").unwrap();
    let command = RefundCommand {
        payment_id: payment_id.clone(),
        amount: Some(300),
        reason: None,
    };
    let deadline_ms = h.clock().now_ms() + 25_000;
    let first = refund_id(&payment_id, "1");

    // GIVEN the staff request mid-call, WHEN reconcile looks at its refund
    let handler = staff.refund(STAFF, &key, &command, deadline_ms, "reqA");
    let meanwhile = async {
        psp.0.entered.notified().await;
        let reconciled = recon.reconcile_refund(&first).await;
        psp.0.go.notify_one();
        reconciled
    };
    let (answer, reconciled) = tokio::join!(handler, meanwhile);

    // THEN reconcile left it alone and sent nothing; the staff were told nothing was refunded
    assert_eq!(reconciled.unwrap(), Reconciled::Skipped, "{}", H::NAME);
    assert_eq!(
        psp.creates(),
        1,
        "{}: only the staff request called",
        H::NAME
    );
    assert!(
        matches!(answer, Ok(RefundAnswer::PspUnavailable { .. })),
        "{}: {answer:?}",
        H::NAME
    );
    assert_eq!(psp.refunded(), 0, "{}", H::NAME);

    // WHEN the staff retry with the same key
    let retry = staff
        .refund(STAFF, &key, &command, h.clock().now_ms() + 25_000, "reqB")
        .await
        .unwrap();
    // THEN one refund of 300 at the PSP, and the books match it
    assert!(
        matches!(&retry, RefundAnswer::Fresh(v) if v.status == RefundStatus::Succeeded),
        "{}: {retry:?}",
        H::NAME
    );
    assert_eq!(psp.refunded(), 300, "{}", H::NAME);
    let payment = payment_now(&h, &payment_id).await;
    assert_eq!(
        (payment.amount_refunded, payment.refund_pending),
        (300, 0),
        "{}",
        H::NAME
    );
    let canceled = refund_now(&h, &first).await;
    assert_eq!(canceled.status, RefundStatus::Canceled, "{}", H::NAME);
    assert_eq!(
        psp.refunds_of(&first),
        0,
        "{}: nothing under the canceled one",
        H::NAME
    );
}

/// Two reconcile runs at once (the schedule delivered twice) on a pending refund nobody sends:
/// only one takes its lease and sends it; the other leaves it alone. One PSP refund.
pub async fn two_reconcile_runs_at_once_send_a_pending_refund_once<H: PaymentStoreHarness>(h: H) {
    let psp = ScriptedPsp::script([]);
    let payment_id = paid(&h, &psp).await;
    psp.0.steps.lock().unwrap().push_back(Step::Unknown);
    let refund_id = pending_refund(&h, &psp, &payment_id).await;
    psp.0
        .steps
        .lock()
        .unwrap()
        .push_back(Step::Held(Box::new(Step::Refund)));
    let (one, two) = (reconciler(&h, &psp), reconciler(&h, &psp));

    // WHEN the first run is mid-call and the second looks at the same refund
    let first = one.reconcile_refund(&refund_id);
    let second = async {
        psp.0.entered.notified().await;
        let reconciled = two.reconcile_refund(&refund_id).await;
        psp.0.go.notify_one();
        reconciled
    };
    let (first, second) = tokio::join!(first, second);

    // THEN the first refunded it, the second left it alone, and the PSP refunded once
    assert_eq!(first.unwrap(), Reconciled::RefundSucceeded, "{}", H::NAME);
    assert_eq!(second.unwrap(), Reconciled::Skipped, "{}", H::NAME);
    assert_eq!(psp.refunds_of(&refund_id), 1, "{}", H::NAME);
    assert_eq!(
        psp.creates(),
        2,
        "{}: the staff call and one re-send",
        H::NAME
    );
    let stored = refund_now(&h, &refund_id).await;
    assert_eq!(
        (stored.status, stored.lease),
        (RefundStatus::Succeeded, None),
        "{}",
        H::NAME
    );
    let payment = payment_now(&h, &payment_id).await;
    assert_eq!(
        (payment.amount_refunded, payment.refund_pending),
        (300, 0),
        "{}",
        H::NAME
    );
}

/// A re-send the PSP refuses (it names no refund) while a webhook settles the refund as
/// succeeded: the refusal moves nothing, and the refund stays succeeded with its amount.
pub async fn a_refused_resend_never_fails_a_refund_a_webhook_settled<H: PaymentStoreHarness>(h: H) {
    let psp = ScriptedPsp::script([]);
    let payment_id = paid(&h, &psp).await;
    psp.0.steps.lock().unwrap().push_back(Step::Unknown);
    let refund_id = pending_refund(&h, &psp, &payment_id).await;
    psp.0
        .steps
        .lock()
        .unwrap()
        .push_back(Step::Held(Box::new(Step::Refused)));
    let recon = reconciler(&h, &psp);

    // WHEN reconcile re-sends it, and while its call is out the PSP's webhook says it succeeded
    let resend = recon.reconcile_refund(&refund_id);
    let webhook = async {
        psp.0.entered.notified().await;
        let event = EventMark {
            provider: "stripe".into(),
            event_id: "evt_refund_succeeded".into(),
            expires_at_s: h.clock().now_s() + 86_400,
        };
        let applied = apply_refund_settlement(
            h.payments(),
            &refund_id,
            &RefundSettlement::Succeeded {
                provider_refund_id: "re_first".into(),
            },
            RefundRecordWrite::Mirror {
                expires_at_s: h.clock().now_s() + 86_400,
            },
            None,
            Some(&event),
            None,
        )
        .await;
        psp.0.go.notify_one();
        applied
    };
    let (resend, webhook) = tokio::join!(resend, webhook);
    webhook.unwrap();

    // THEN the refused re-send changed nothing: succeeded, 300 refunded
    assert_eq!(resend.unwrap(), Reconciled::AlreadySettled, "{}", H::NAME);
    let stored = refund_now(&h, &refund_id).await;
    assert_eq!(
        (stored.status, stored.provider_refund_id.as_deref()),
        (RefundStatus::Succeeded, Some("re_first")),
        "{}",
        H::NAME
    );
    let payment = payment_now(&h, &payment_id).await;
    assert_eq!(
        (payment.amount_refunded, payment.refund_pending),
        (300, 0),
        "{}",
        H::NAME
    );
}

/// An attempt whose handler died after the PSP charged: reconcile takes its lapsed lease over
/// and records the success, and the order is stored paid by it (reconcile's lease never
/// reserved the order, so nothing may leave it `processing` under that lease).
pub async fn reconcile_finishing_a_dead_handlers_success_stores_the_order_paid<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    let psp = ScriptedPsp::script([]);
    let now = h.clock().now_ms();
    let order = Order {
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        owner: "alice".into(),
        version: 1,
        currency: Currency::Jpy,
        items: vec![LineItem {
            sku: "a".into(),
            quantity: 1,
            unit_amount: 1000,
        }],
        amount: 1000,
        payment_state: OrderPaymentState::Unpaid,
        payment_id: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    h.payments().create_order(&order).await.unwrap();
    let charge = ChargeService::new(h.payments().clone(), psp.clone(), ChargeConfig::default());
    charge.inject_crash(payonce::service::charge::CrashPoint::AfterPspCall);
    let died = charge
        .pay(
            "alice",
            &IdempotencyKey::parse("k1").unwrap(),
            &PayRequest {
                order_id: order.order_id.clone(),
                order_version: 1,
                payment_method: "pm_card_visa".into(),
                return_url: None,
                capture: payonce::domain::CaptureMethod::Automatic,
            },
            now + 25_000,
            "req-pay",
        )
        .await;
    assert!(died.is_err(), "{died:?}");
    let record = payonce::idempotency::RecordKey::new(
        payonce::service::charge::PAY_SCOPE,
        "alice",
        &IdempotencyKey::parse("k1").unwrap(),
    );
    let payment_id = payonce::domain::payment_id_for(record.as_str());
    *psp.0.charge.lock().unwrap() = Some(PspLookup::Succeeded {
        provider_payment_id: "pi_1".into(),
        amount: None,
    });

    // WHEN the lease has lapsed and reconcile runs
    h.clock().advance(Duration::from_secs(180));
    let reconciled = reconciler(&h, &psp)
        .reconcile_one(&payment_id)
        .await
        .unwrap();

    // THEN the payment succeeded, and the order is stored paid by it
    assert_eq!(reconciled, Reconciled::Succeeded, "{}", H::NAME);
    let payment = payment_now(&h, &payment_id).await;
    assert_eq!(payment.status, PaymentStatus::Succeeded, "{}", H::NAME);
    let stored = h
        .payments()
        .get_order(&order.order_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.payment_state, stored.payment_id),
        (OrderPaymentState::Paid, Some(payment_id)),
        "{}",
        H::NAME
    );
}

/// A refund the PSP never settles stays pending past its key's day of retention: reconcile
/// keeps the key's record alive while it looks, so the staff's retry a day later replays it
/// (202) instead of claiming a second refund that does not fit (409).
pub async fn a_refund_pending_past_a_day_still_replays_its_key<H: PaymentStoreHarness>(h: H) {
    let psp = ScriptedPsp::script([]);
    let payment_id = paid(&h, &psp).await;
    psp.0
        .steps
        .lock()
        .unwrap()
        .extend((0..40).map(|_| Step::Unknown));
    let refund_id = pending_refund(&h, &psp, &payment_id).await;
    let recon = reconciler(&h, &psp);

    // WHEN reconcile looks at it every hour for 25 hours, and it stays pending
    for _ in 0..25 {
        h.clock().advance(Duration::from_secs(3600));
        assert_eq!(
            recon.reconcile_refund(&refund_id).await.unwrap(),
            Reconciled::Pending,
            "{}",
            H::NAME
        );
    }
    // THEN the key's record is still there, kept by reconcile
    let record = h
        .raw_record(&payonce::idempotency::RecordKey::new(
            payonce::service::refund::REFUND_SCOPE,
            STAFF,
            &IdempotencyKey::parse("r1").unwrap(),
        ))
        .await
        .expect("the key's record");
    assert!(
        record.expires_at_s > h.clock().now_s() + 20 * 3600,
        "{}: expires at {} (now {})",
        H::NAME,
        record.expires_at_s,
        h.clock().now_s()
    );
    // AND the staff's retry with the key replays the pending refund
    let retry = refunds(&h, &psp)
        .refund(
            STAFF,
            &IdempotencyKey::parse("r1").unwrap(),
            &RefundCommand {
                payment_id: payment_id.clone(),
                amount: Some(300),
                reason: None,
            },
            h.clock().now_ms() + 25_000,
            "req-late",
        )
        .await
        .unwrap();
    assert!(
        matches!(&retry, RefundAnswer::Replayed { view, .. } if view.refund_id == refund_id && view.status == RefundStatus::Pending),
        "{}: {retry:?}",
        H::NAME
    );
    let payment = payment_now(&h, &payment_id).await;
    assert_eq!(
        (payment.refund_count, payment.refund_pending),
        (1, 300),
        "{}",
        H::NAME
    );
}

/// The review's second double refund (Omise ignores refund keys): a sender whose create timed
/// out may still have its request running at the PSP, so it keeps its lease until the lease
/// lapses. Reconcile's re-send times out; a staff retry that takes the refund over right then is
/// told to wait, and sends nothing, until the lease has lapsed.
pub async fn a_sender_whose_call_may_still_be_running_keeps_its_lease<H: PaymentStoreHarness>(
    h: H,
) {
    let psp = ScriptedPsp::script([]);
    let payment_id = paid(&h, &psp).await;
    // GIVEN a staff refund whose invocation died mid-call (its record left in progress)
    psp.0
        .steps
        .lock()
        .unwrap()
        .push_back(Step::Held(Box::new(Step::Unknown)));
    let staff = refunds(&h, &psp);
    let key = IdempotencyKey::parse("r1").unwrap();
    let command = RefundCommand {
        payment_id: payment_id.clone(),
        amount: Some(300),
        reason: None,
    };
    let deadline_ms = h.clock().now_ms() + 25_000;
    {
        let dying = staff.refund(STAFF, &key, &command, deadline_ms, "reqA");
        tokio::pin!(dying);
        tokio::select! {
            _ = &mut dying => panic!("the staff request was to die mid-call"),
            () = psp.0.entered.notified() => {}
        }
        // The invocation is killed here: its future is dropped mid-call.
    }
    let refund_id = refund_id(&payment_id, "1");
    h.clock().advance(Duration::from_secs(60));

    // WHEN reconcile takes the lapsed lease over and its re-send times out (it may still run)
    psp.0.steps.lock().unwrap().push_back(Step::Unknown);
    let reconciled = reconciler(&h, &psp)
        .reconcile_refund(&refund_id)
        .await
        .unwrap();
    assert_eq!(reconciled, Reconciled::Pending, "{}", H::NAME);
    let held = refund_now(&h, &refund_id).await;
    let lease = held.lease.clone().expect("reconcile keeps its lease");
    assert!(lease.until_ms > h.clock().now_ms(), "{}", H::NAME);

    // THEN a staff retry right then is told to wait, and sends nothing
    let creates = psp.creates();
    let retry = staff
        .refund(STAFF, &key, &command, h.clock().now_ms() + 25_000, "reqB")
        .await;
    assert!(
        matches!(retry, Err(payonce::service::RefundError::KeyInUse { .. })),
        "{}: {retry:?}",
        H::NAME
    );
    assert_eq!(psp.creates(), creates, "{}: nothing sent", H::NAME);

    // AND once the lease has lapsed, the retry takes the refund over and sends it
    h.clock().advance(Duration::from_millis(
        u64::try_from(lease.until_ms - h.clock().now_ms()).unwrap() + 1,
    ));
    psp.0.steps.lock().unwrap().push_back(Step::Refund);
    let retry = staff
        .refund(STAFF, &key, &command, h.clock().now_ms() + 25_000, "reqC")
        .await
        .unwrap();
    assert!(
        matches!(&retry, RefundAnswer::Fresh(v) if v.status == RefundStatus::Succeeded),
        "{}: {retry:?}",
        H::NAME
    );
    assert_eq!(psp.refunds_of(&refund_id), 1, "{}", H::NAME);
}

macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(payonce_tests::stores::memory_stores()).await;
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(payonce_tests::stores::dynamo_stores().await).await;
                }
            )*
        }
    };
}

on_both_stores!(
    reconcile_leaves_a_refund_alone_while_its_staff_request_is_mid_call,
    two_reconcile_runs_at_once_send_a_pending_refund_once,
    a_refused_resend_never_fails_a_refund_a_webhook_settled,
    reconcile_finishing_a_dead_handlers_success_stores_the_order_paid,
    a_refund_pending_past_a_day_still_replays_its_key,
    a_sender_whose_call_may_still_be_running_keeps_its_lease,
);
