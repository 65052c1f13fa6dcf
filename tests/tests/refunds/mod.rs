//! Refunds through the real refund handler, the webhook processor and reconcile, against
//! DynamoDB Local and the fake PSP over HTTP: at most one PSP refund per key, never more than
//! was captured, every outcome stored and replayed, and the automatic refund of a late
//! duplicate charge.

mod access;
mod bad_input;
mod concurrency;
mod declined;
mod late_duplicate;
mod lost_response;
mod overlap;
mod takeover;
mod unsupported;
mod watch;

use async_trait::async_trait;
use payonce::domain::RefundSettlement;
use payonce::ports::{
    ChargeRequest, Fence, Psp, PspError, PspLookup, PspOutcome, RefundOutcome, RefundRequest,
};
use payonce_fake_psp::FakeRefund;
use payonce_tests::stack::{string_attribute, PaymentStack, TableSnapshot};
use std::time::Duration;

/// The PSP key of refund `number` of `payment_id`, as the fake PSP records it.
fn psp_key(payment_id: &str, number: &str) -> String {
    format!("payonce-refund-{payment_id}-{number}")
}

/// The fake PSP's refunds made for our refund `refund_id`.
fn psp_refunds_for(stack: &PaymentStack, refund_id: &str) -> Vec<FakeRefund> {
    stack
        .psp
        .refunds()
        .into_iter()
        .filter(|r| r.refund_id.as_deref() == Some(refund_id))
        .collect()
}

/// `status` of each refund item, by `pk`.
fn item_statuses(items: &TableSnapshot) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(pk, item)| {
            (
                pk.clone(),
                string_attribute(item, "status").unwrap_or_default(),
            )
        })
        .collect()
}

/// What goes wrong with a refund call (charges and lookups go through unchanged).
#[derive(Clone, Copy, Debug)]
enum RefundFault {
    /// The request reaches the PSP, which refunds; the answer is lost on the way back, so the
    /// adapter can only say "unknown".
    AnswerLost,
    /// The request is lost after the connection was made, before the PSP saw it: "unknown"
    /// too, and the PSP has nothing.
    RequestLost,
    /// The PSP refunds and answers, then the invocation hangs until it is killed (the test
    /// aborts its task): a Lambda that died between the PSP and its write.
    HangAfterAnswer,
}

/// The PSP adapter with `fault` on every refund create.
struct FaultyRefunds<P> {
    inner: P,
    fault: RefundFault,
}

#[async_trait]
impl<P: Psp> Psp for FaultyRefunds<P> {
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
        self.inner.lookup(payment_id).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.inner.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.inner.cancel(provider_payment_id).await
    }
    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        if matches!(
            self.fault,
            RefundFault::AnswerLost | RefundFault::HangAfterAnswer
        ) {
            let answered = self.inner.create_refund(request, timeout).await;
            assert!(
                matches!(answered, RefundOutcome::Answered(_)),
                "the PSP answered the refund: {answered:?}"
            );
        }
        if matches!(self.fault, RefundFault::HangAfterAnswer) {
            std::future::pending::<()>().await;
        }
        RefundOutcome::Unknown {
            reason: "the connection dropped before the answer arrived".into(),
        }
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
