//! POST /payments and the orders API through the real handlers, fed API Gateway v2 events,
//! against DynamoDB Local and the fake PSP over HTTP.

mod bad_input;
mod charge;
mod checkout;
mod checkout_2c2p;
mod checkout_2c2p_settle;
mod checkout_paypal;
mod checkout_square;
mod concurrency;
mod limits;
mod operations;
mod orders;
mod stale_reads;
mod store_down;

use std::time::Duration;

use payonce::domain::{Payment, PspKind, RefundSettlement};
use payonce::ports::{
    ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspError, PspLookup, PspOutcome,
    RefundOutcome, RefundRequest,
};
use payonce_tests::stack::PaymentStack;

/// Posts `result` (`complete` or `fail`) on the fake PSP's authentication page at `url`, as the
/// customer's browser would; its status and `Location`.
async fn authenticate(url: &str, result: &str) -> (u16, Option<String>) {
    let reply = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(url)
        .form(&[("result", result)])
        .send()
        .await
        .expect("the authentication page answers");
    let location = reply
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (reply.status().as_u16(), location)
}

/// The payment state of alice's order `order`, as the API shows it.
async fn order_state(stack: &PaymentStack, order: &str) -> String {
    let reply = stack.get_order("alice", order).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json["payment_state"].as_str().unwrap().to_owned()
}

/// A PSP whose answers to captures and cancels (completions, settles, voids) are lost after the
/// PSP acted on them; every other call goes through as it is (lookups included).
struct LosesOperationAnswers<P>(P);

#[async_trait::async_trait]
impl<P: Psp> Psp for LosesOperationAnswers<P> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn kind(&self) -> PspKind {
        self.0.kind()
    }
    fn supports_refunds(&self) -> bool {
        self.0.supports_refunds()
    }
    fn captures_later(&self) -> bool {
        self.0.captures_later()
    }
    fn captures_partially(&self) -> bool {
        self.0.captures_partially()
    }
    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        self.0.create_charge(request, timeout).await
    }
    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.0.lookup(payment_id).await
    }
    async fn lookup_payment(&self, payment: &Payment) -> Result<PspLookup, PspError> {
        self.0.lookup_payment(payment).await
    }
    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.0.fence(request).await
    }
    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.0.cancel(provider_payment_id).await
    }
    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        let answered = self.0.operate(request, timeout).await;
        OperationOutcome::Unknown {
            reason: format!("the answer was lost: {answered:?}"),
        }
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
