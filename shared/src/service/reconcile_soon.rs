//! Asking reconcile for one payment now ([`ReconcileSoon`]): the request message, sending it on
//! a queue, and reconciling what the requests name where reconcile receives them.
//!
//! The webhook processor never calls the PSP. When a webhook says a payment waits for payonce's
//! second step — a buyer approved a PayPal order, which payonce must capture; a Square payment
//! approved whose completion had no answer — the processor stores what it learned and asks
//! reconcile to finish the payment at once rather than at its next scheduled run. In AWS the
//! request is a message on its own SQS queue, which triggers the reconcile function; the sandbox,
//! the tests and the simulation use a queue of their own. A request is only a hint: reconcile
//! reads the payment again and decides as on its schedule (a payment another invocation holds is
//! left alone), and a request that is lost leaves the payment to the scheduled run.

use super::reconcile::{ReconcileReport, Reconciler};
use crate::ports::{
    ChargeStore, InflightScan, OperationStore, OrderStore, OutgoingMessage, Psp, QueueError,
    QueueSend, ReconcileSoon, RefundStore,
};
use async_trait::async_trait;

/// The request's one field: `{"reconcile": "<payment id>"}`.
const FIELD: &str = "reconcile";

/// The message asking reconcile for `payment_id`.
pub fn request_message(payment_id: &str) -> OutgoingMessage {
    let mut body = serde_json::Map::new();
    body.insert(FIELD.to_owned(), payment_id.into());
    OutgoingMessage {
        body: serde_json::Value::Object(body).to_string(),
        attributes: Default::default(),
    }
}

/// The payment a request message names, if it is one (a payment id, never a refund's).
pub fn requested_payment(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let id = value.get(FIELD)?.as_str()?;
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    (id.starts_with("pay_") && id.len() <= 64 && id.bytes().all(word)).then(|| id.to_owned())
}

/// Requests sent as messages on a queue.
#[derive(Debug, Clone)]
pub struct QueuedRequests<Q>(pub Q);

#[async_trait]
impl<Q: QueueSend> ReconcileSoon for QueuedRequests<Q> {
    async fn reconcile_soon(&self, payment_id: &str) -> Result<(), QueueError> {
        self.0.send(&request_message(payment_id)).await.map(|_| ())
    }
}

impl<S: ChargeStore + OrderStore + RefundStore + OperationStore + InflightScan, P: Psp>
    Reconciler<S, P>
{
    /// Reconciles each payment the request `bodies` name, once, in order: what they did. A body
    /// that names no payment is logged and counted as skipped.
    pub async fn reconcile_requested<'a>(
        &self,
        bodies: impl IntoIterator<Item = &'a str>,
    ) -> ReconcileReport {
        let mut report = ReconcileReport::default();
        for body in bodies {
            report.examined += 1;
            let Some(payment_id) = requested_payment(body) else {
                tracing::warn!(body, "a reconcile request that names no payment; skipped");
                report.skipped += 1;
                continue;
            };
            let reconciled = self.reconcile_one(&payment_id).await;
            match &reconciled {
                Ok(outcome) => {
                    tracing::info!(payment_id, ?outcome, "reconciled on request")
                }
                Err(error) => {
                    tracing::warn!(payment_id, error = %error, "reconcile on request failed; the request is retried, and the scheduled run looks too")
                }
            }
            report.tally(&reconciled);
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_one_payment_and_nothing_else_reads_as_one() {
        let id = "pay_00112233445566778899aabbccddeeff";
        let message = request_message(id);
        assert_eq!(message.body, format!(r#"{{"reconcile":"{id}"}}"#));
        assert!(message.attributes.is_empty());
        assert_eq!(requested_payment(&message.body).as_deref(), Some(id));
        for body in [
            "",
            "{}",
            "[]",
            r#"{"reconcile": 5}"#,
            r#"{"reconcile": "rfd_0011_1"}"#,
            r#"{"reconcile": "pay_a b"}"#,
            r#"{"reconcile": "ord_1"}"#,
            r#"{"payment_id": "pay_1"}"#,
        ] {
            assert_eq!(requested_payment(body), None, "{body}");
        }
    }
}
