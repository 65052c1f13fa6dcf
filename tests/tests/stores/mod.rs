//! The payment store conformance suite: every case runs against the embedded store and against
//! DynamoDB Local through the ports only (`OrderStore`, `ChargeStore`, `InflightScan`, and the
//! shared records through `IdempotencyStore` and `ExpiredSweep`), and checks what is persisted
//! afterwards, not only what was answered.

use payonce::clock::{duration_ms, Clock};
use payonce::domain::{
    Currency, LineItem, Order, OrderPaymentState, Payment, PaymentStatus, Refund, Settlement,
    CHARGE_RECORD_NEVER_EXPIRES_S,
};
use payonce::idempotency::{
    Claim, Fingerprint, IdempotencyRecord, IdempotencyStore, Lease, LeaseToken, RecordKey,
    RecordState,
};
use payonce::ports::{BeginOutcome, ChargeStore, EventMark, OrderStore, RefundStore};
use payonce_tests::stores::PaymentStoreHarness;
use serde_json::json;
use std::time::Duration;

/// Runs each named case against both backends: `embedded::<case>` and `dynamodb::<case>`.
macro_rules! store_suite {
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

mod attempts;
mod finish;
mod flows;
mod inflight;
mod limits;
mod operations;
mod orders;
mod refunds;
mod settle;
mod sweep;

/// The charge path's idempotency scope.
const SCOPE: &str = "payments.create";
/// The paying user.
const USER: &str = "alice";
/// How long a lease runs in these tests (a Lambda deadline plus margin).
const LEASE_MS: i64 = 15_000;
/// How long records are kept.
const RETENTION: Duration = Duration::from_secs(24 * 3600);

/// A new unpaid order of `owner` (version 1, 2 × 1500 JPY), stored.
async fn stored_order<H: PaymentStoreHarness>(h: &H, owner: &str) -> Order {
    let now_ms = h.clock().now_ms();
    let order = Order {
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        owner: owner.to_owned(),
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
    h.payments()
        .create_order(&order)
        .await
        .expect("create the order");
    order
}

/// The record key of `key` for [`USER`] on the charge path.
fn record_key(key: &str) -> RecordKey {
    RecordKey::from_stored(format!("{SCOPE}#{USER}#{key}"))
}

/// A new attempt to pay `order` (as read) under `key`: the payment and the claim the charge
/// path would make for it (the key's payment, a record that never expires), leased for
/// [`LEASE_MS`].
fn new_attempt<H: PaymentStoreHarness>(h: &H, order: &Order, key: &str) -> (Payment, Claim) {
    let now_ms = h.clock().now_ms();
    let record = record_key(key);
    let payment_id = payonce::domain::payment_id_for(record.as_str());
    let payment = Payment {
        payment_id: payment_id.clone(),
        order_id: order.order_id.clone(),
        order_version: order.version,
        owner: order.owner.clone(),
        amount: order.amount,
        currency: order.currency,
        payment_method: "pm_card_visa".into(),
        provider: "fake".into(),
        provider_payment_id: None,
        status: PaymentStatus::Processing,
        failure: None,
        capture: payonce::domain::CaptureMethod::Automatic,
        return_url: None,
        progress: payonce::domain::Progress::default(),
        operation: None,
        operation_count: 0,
        idempotency_pk: record.as_str().to_owned(),
        psp_maybe_reached: false,
        amount_refunded: 0,
        refund_pending: 0,
        refund_count: 0,
        duplicate_refund: false,
        refund_required: false,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        check_at_ms: now_ms,
    };
    let claim = Claim {
        key: record,
        fingerprint: Fingerprint::of_value(&json!({
            "order_id": order.order_id,
            "order_version": order.version,
            "payment_method": "pm_card_visa",
        })),
        attempt_id: payment_id,
        lease_token: LeaseToken::generate(),
        lease_until_ms: now_ms + LEASE_MS,
        expires_at_s: payonce::domain::CHARGE_RECORD_NEVER_EXPIRES_S,
        request_id: Some("req-claimer".into()),
    };
    (payment, claim)
}

/// An attempt that began: the order as it was read before, the payment and the claim.
struct Begun {
    order: Order,
    payment: Payment,
    claim: Claim,
}

/// Stores a new order and begins an attempt on it under `key`.
async fn begun<H: PaymentStoreHarness>(h: &H, key: &str) -> Begun {
    let order = stored_order(h, USER).await;
    begun_on(h, order, key).await
}

/// Begins an attempt on `order` (as read) under `key`.
async fn begun_on<H: PaymentStoreHarness>(h: &H, order: Order, key: &str) -> Begun {
    begun_as(h, order, key, |_| {}).await
}

/// Begins an attempt on `order` (as read) under `key`, its payment first changed by `adjust`
/// (what the request fixed: capture, return URL).
async fn begun_as<H: PaymentStoreHarness>(
    h: &H,
    order: Order,
    key: &str,
    adjust: impl FnOnce(&mut Payment),
) -> Begun {
    let (mut payment, claim) = new_attempt(h, &order, key);
    adjust(&mut payment);
    let outcome = h
        .payments()
        .begin_attempt(&claim, &order, &payment, &[])
        .await
        .expect("begin the attempt");
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
    Begun {
        order,
        payment,
        claim,
    }
}

/// What is persisted about an attempt: its record (as stored, even if expired), its order
/// and its payment.
#[derive(Debug, PartialEq)]
struct Persisted {
    record: Option<IdempotencyRecord>,
    order: Option<Order>,
    payment: Option<Payment>,
}

async fn persisted<H: PaymentStoreHarness>(h: &H, attempt: &Begun) -> Persisted {
    Persisted {
        record: h.raw_record(&attempt.claim.key).await,
        order: h
            .payments()
            .get_order(&attempt.order.order_id)
            .await
            .expect("read the order"),
        payment: h
            .payments()
            .get_payment(&attempt.payment.payment_id)
            .await
            .expect("read the payment"),
    }
}

/// The live record under `key`, read through the idempotency port (a refund's) or the
/// charge port (a charge's, on its payment).
async fn live_record<H: PaymentStoreHarness>(h: &H, key: &RecordKey) -> IdempotencyRecord {
    let generic = h.records().get(key).await.expect("read the record");
    let record = match generic {
        Some(record) => Some(record),
        None => h
            .payments()
            .charge_record(key)
            .await
            .expect("read the record"),
    };
    record.unwrap_or_else(|| panic!("{}: no live record {key}", H::NAME))
}

async fn order_now<H: PaymentStoreHarness>(h: &H, order_id: &str) -> Order {
    h.payments()
        .get_order(order_id)
        .await
        .expect("read the order")
        .expect("the order exists")
}

pub(crate) async fn payment_now<H: PaymentStoreHarness>(h: &H, payment_id: &str) -> Payment {
    h.payments()
        .get_payment(payment_id)
        .await
        .expect("read the payment")
        .expect("the payment exists")
}

pub(crate) async fn refund_now<H: PaymentStoreHarness>(h: &H, refund_id: &str) -> Refund {
    h.payments()
        .get_refund(refund_id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{}: no refund {refund_id}", H::NAME))
}

/// A fresh lease for a takeover, running [`LEASE_MS`] from now.
fn fresh_lease<H: PaymentStoreHarness>(h: &H) -> Lease {
    Lease {
        token: LeaseToken::generate(),
        until_ms: h.clock().now_ms() + LEASE_MS,
    }
}

fn succeeded(provider_payment_id: &str) -> Settlement {
    Settlement::Succeeded {
        provider_payment_id: provider_payment_id.into(),
    }
}

fn declined(provider_payment_id: &str) -> Settlement {
    Settlement::Declined {
        provider_payment_id: Some(provider_payment_id.into()),
        decline_code: "generic_decline".into(),
    }
}

/// A webhook event's dedup mark expiring `ttl` from now.
fn event_mark<H: PaymentStoreHarness>(h: &H, event_id: &str, ttl: Duration) -> EventMark {
    EventMark {
        provider: "stripe".into(),
        event_id: event_id.into(),
        expires_at_s: (h.clock().now_ms() + duration_ms(ttl)).div_euclid(1000),
    }
}

/// The status mirror of `payment` as a completed record stores it.
fn view_json(payment: &Payment) -> serde_json::Value {
    serde_json::to_value(payment.view()).expect("encode the view")
}

/// The result of a completed record, parsed.
fn stored_result(record: &IdempotencyRecord) -> serde_json::Value {
    match &record.state {
        RecordState::Completed { result } => {
            serde_json::from_str(result).expect("the stored result is JSON")
        }
        other => panic!("expected a COMPLETED record, got {other:?}"),
    }
}
