//! A PSP that cannot refund from payonce (2C2P without its key exchange): the refund API answers
//! 409 `refund-not-supported` before claiming anything or calling the PSP.

use async_trait::async_trait;
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore};
use payonce::adapters::psp::transport::{CallFailure, PspTransport, WireCall, WireReply};
use payonce::adapters::psp::TwoC2pPsp;
use payonce::clock::system_clock;
use payonce::idempotency::IdempotencyKey;
use payonce::ports::RefundStore;
use payonce::service::{RefundCommand, RefundConfig, RefundError, RefundService};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts calls; any call is a failure of the test.
#[derive(Default, Clone)]
struct Counting(Arc<AtomicUsize>);

#[async_trait]
impl PspTransport for Counting {
    async fn send(&self, _call: &WireCall, _timeout: Duration) -> Result<WireReply, CallFailure> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(CallFailure::NotConnected("the test allows no call".into()))
    }
}

#[tokio::test]
async fn a_psp_without_refunds_is_answered_409_before_anything_is_claimed() {
    let records = MemoryIdempotencyStore::new(system_clock());
    let store = MemoryPaymentStore::new(records, system_clock());
    let calls = Counting::default();
    let psp = TwoC2pPsp::with_transport(
        calls.clone(),
        "2c2p",
        "JT01",
        "secret-key-for-the-test",
        Duration::from_secs(5),
    )
    .expect("a 2C2P adapter");
    let service = RefundService::new(store.clone(), psp, RefundConfig::default());
    let answer = service
        .refund(
            "staff",
            &IdempotencyKey::parse("r-1").unwrap(),
            &RefundCommand {
                payment_id: "pay_00000000000000000000000000000001".into(),
                amount: Some(100),
                reason: None,
            },
            store.refund_now_ms() + 10_000,
            "req-1",
        )
        .await;
    assert!(
        matches!(&answer, Err(RefundError::NotSupported(p)) if p == "2c2p"),
        "{answer:?}"
    );
    let problem = payonce::http::Problem::from(answer.unwrap_err());
    assert_eq!(problem.kind.uri(), "/problems/refund-not-supported");
    assert_eq!(problem.kind.describe().0.as_u16(), 409);
    assert_eq!(calls.0.load(Ordering::SeqCst), 0, "the PSP saw nothing");
    assert!(store.records().is_empty(), "nothing claimed");
}
