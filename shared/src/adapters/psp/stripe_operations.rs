//! Stripe's capture and cancel of a PaymentIntent ("Capture a PaymentIntent", "Cancel a
//! PaymentIntent"), each under the payment's derived key, and what their answers say.
//!
//! A capture asks for `amount_to_capture`; Stripe captures once (a partial capture releases
//! the rest). A cancel is allowed while the intent is `requires_action` or `requires_capture`
//! (and the other open states). Either refused with `payment_intent_unexpected_state` carries
//! the intent as it is: what it moved to is the answer (a cancel that meets a success learns
//! the success).

use super::keyed::{credentials_refused, NoAnswer, Sent};
use super::stripe::{ErrorBody, PaymentIntent, StripePsp};
use super::transport::{PspTransport, WireBody};
use crate::domain::{CancellationReason, OperationKind, Settlement};
use crate::ports::{OperationOutcome, OperationRequest};
use std::time::Duration;

impl<T: PspTransport> StripePsp<T> {
    /// Captures or cancels under `request.idempotency_key`.
    pub(super) async fn operate_intent(
        &self,
        request: &OperationRequest,
        timeout: Duration,
    ) -> OperationOutcome {
        let form = match (request.kind, request.amount) {
            (OperationKind::Capture, Some(amount)) => {
                vec![("amount_to_capture".to_owned(), amount.to_string())]
            }
            (OperationKind::Capture, None) => Vec::new(),
            (OperationKind::Cancel, _) => vec![(
                "cancellation_reason".to_owned(),
                "requested_by_customer".to_owned(),
            )],
        };
        let call = self.call(
            "POST",
            format!(
                "/v1/payment_intents/{}/{}",
                request.provider_payment_id,
                request.kind.as_str()
            ),
            Vec::new(),
            WireBody::Form(form),
            Some(&request.idempotency_key),
        );
        match self.send_keyed(&call, timeout).await {
            Ok(sent) => classify_operation(sent),
            Err(NoAnswer::NotSent(reason)) => OperationOutcome::NotSent { reason },
            Err(NoAnswer::Unknown(reason)) => OperationOutcome::Unknown { reason },
        }
    }
}

impl PaymentIntent {
    /// What the intent's state says of the payment, where it is one payonce acts on.
    pub(super) fn state_settlement(&self) -> Option<Settlement> {
        let provider_payment_id = self.id.clone();
        Some(match self.status.as_str() {
            "succeeded" => match self.amount_received {
                Some(amount_captured) => Settlement::Captured {
                    provider_payment_id,
                    amount_captured,
                },
                None => Settlement::Succeeded {
                    provider_payment_id,
                },
            },
            "canceled" => Settlement::Canceled {
                provider_payment_id: Some(provider_payment_id),
                reason: cancellation_reason(self.cancellation_reason.as_deref()),
            },
            "requires_capture" => Settlement::Authorized {
                amount_capturable: self.amount_capturable.or(self.amount)?,
                capture_before_ms: self.capture_before_ms(),
                provider_payment_id,
            },
            _ => return None,
        })
    }
}

/// Stripe's `cancellation_reason` as ours: a lapsed authorization (`automatic`, `expired`)
/// expired; `abandoned` (the fence's own cancel and reconcile's of an action never taken)
/// abandoned; anything else requested.
pub(super) fn cancellation_reason(stripe: Option<&str>) -> CancellationReason {
    match stripe {
        Some("automatic" | "expired") => CancellationReason::Expired,
        Some("abandoned") => CancellationReason::Abandoned,
        _ => CancellationReason::Requested,
    }
}

fn classify_operation(Sent { reply, retried, .. }: Sent) -> OperationOutcome {
    let unknown = |reason: String| OperationOutcome::Unknown { reason };
    if reply.status == 200 {
        return match serde_json::from_slice::<PaymentIntent>(&reply.body) {
            Ok(intent) => match intent.state_settlement() {
                Some(settlement) => OperationOutcome::Answered(settlement),
                None => unknown(format!("the intent is {}", intent.status)),
            },
            Err(error) => unknown(format!("unreadable PSP answer: {error}")),
        };
    }
    let detail = serde_json::from_slice::<ErrorBody>(&reply.body)
        .map(|b| b.error)
        .unwrap_or_default();
    match (reply.status, detail.kind.as_str()) {
        // The intent moved: what it is now answers, unless it is still as it was (then the
        // refusal is for good: a re-send under the key replays it).
        (400, "invalid_request_error") => {
            let code = detail
                .code
                .clone()
                .unwrap_or_else(|| "invalid_request_error".into());
            match detail
                .payment_intent
                .as_deref()
                .and_then(PaymentIntent::state_settlement)
            {
                Some(
                    settlement @ (Settlement::Captured { .. }
                    | Settlement::Succeeded { .. }
                    | Settlement::Canceled { .. }),
                ) => OperationOutcome::Answered(settlement),
                _ => OperationOutcome::Refused { code },
            }
        }
        // The key was used with other parameters (an earlier claim's, whose refusal Stripe
        // stored): this request was not run, and nothing moved.
        (400, "idempotency_error") => OperationOutcome::Refused {
            code: "idempotency_error".into(),
        },
        // A capture the card network refused (`card_error`): for good.
        (402, _) => OperationOutcome::Refused {
            code: detail.code.unwrap_or_else(|| "card_error".into()),
        },
        (404, _) => OperationOutcome::Refused {
            code: detail.code.unwrap_or_else(|| "resource_missing".into()),
        },
        (401 | 403, _) => {
            let reason = credentials_refused(reply.status);
            if retried {
                unknown(reason)
            } else {
                OperationOutcome::NotSent { reason }
            }
        }
        // 400 idempotency_error, 409, 429 and 5xx: the outcome is unknown.
        (status, kind) => unknown(format!(
            "PSP answered {status} {kind} {}",
            detail.code.unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::psp::transport::WireReply;
    use serde_json::json;

    fn answer(status: u16, body: serde_json::Value) -> OperationOutcome {
        classify_operation(Sent {
            reply: WireReply {
                status,
                body: body.to_string().into_bytes(),
            },
            retried: false,
            in_progress: false,
        })
    }

    #[test]
    fn a_capture_or_cancel_answer_is_the_intent_it_leaves() {
        assert_eq!(
            answer(
                200,
                json!({"id": "pi_1", "status": "succeeded", "amount": 3000, "amount_received": 1800})
            ),
            OperationOutcome::Answered(Settlement::Captured {
                provider_payment_id: "pi_1".into(),
                amount_captured: 1800,
            })
        );
        assert_eq!(
            answer(
                200,
                json!({"id": "pi_1", "status": "canceled", "cancellation_reason": "requested_by_customer"})
            ),
            OperationOutcome::Answered(Settlement::Canceled {
                provider_payment_id: Some("pi_1".into()),
                reason: CancellationReason::Requested,
            })
        );
        // Refused because the intent moved: what it moved to is the answer
        assert_eq!(
            answer(
                400,
                json!({"error": {"type": "invalid_request_error", "code": "payment_intent_unexpected_state",
                    "payment_intent": {"id": "pi_1", "status": "canceled", "cancellation_reason": "automatic"}}})
            ),
            OperationOutcome::Answered(Settlement::Canceled {
                provider_payment_id: Some("pi_1".into()),
                reason: CancellationReason::Expired,
            })
        );
        // Refused with the intent as it was: for good
        assert_eq!(
            answer(
                400,
                json!({"error": {"type": "invalid_request_error", "code": "payment_intent_unexpected_state",
                    "payment_intent": {"id": "pi_1", "status": "processing"}}})
            ),
            OperationOutcome::Refused {
                code: "payment_intent_unexpected_state".into()
            }
        );
        // The key used with other parameters: not run, nothing moved
        assert_eq!(
            answer(
                400,
                json!({"error": {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used with the same parameters"}})
            ),
            OperationOutcome::Refused {
                code: "idempotency_error".into()
            }
        );
        assert!(matches!(
            answer(500, json!({"error": {"type": "api_error"}})),
            OperationOutcome::Unknown { .. }
        ));
        assert!(matches!(
            answer(401, json!({"error": {"type": "invalid_request_error"}})),
            OperationOutcome::NotSent { .. }
        ));
    }
}
