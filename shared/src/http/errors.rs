//! Service errors and answers as HTTP: the one place that decides status codes and problem types.

use super::problem::{Problem, ProblemType};
use super::request::json_response;
use crate::domain::{CancelRefusal, CaptureRefusal};
use crate::domain::{FailureKind, PaymentStatus, PaymentView, RefundStatus, RefundView};
use crate::idempotency::StoreError;
use crate::service::{ChargeError, OperationAnswer, OperationError, OrdersError, RefundError};
use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Response};
use std::time::Duration;

impl From<ChargeError> for Problem {
    fn from(error: ChargeError) -> Self {
        match error {
            ChargeError::Mismatch => Problem::new(
                ProblemType::IdempotencyKeyMismatch,
                "this Idempotency-Key was used with a different order_id, order_version or payment_method; use a new key for a new request",
            ),
            ChargeError::KeyInUse { retry_after } => Problem::new(
                ProblemType::IdempotencyKeyInUse,
                "a request with this Idempotency-Key is still being processed; retry after the indicated delay",
            )
            .retry_after(retry_after),
            ChargeError::TooManyAttempts { retry_after, scope } => Problem::new(
                ProblemType::TooManyAttempts,
                format!("too many payment attempts for this {scope}; try again after the indicated delay"),
            )
            .retry_after(retry_after),
            ChargeError::OrderNotFound => Problem::new(ProblemType::NotFound, "no such order"),
            ChargeError::OrderVersionMismatch { current } => {
                Problem::new(ProblemType::OrderVersionMismatch, format!("the order is at version {current}; review it and pay that version"))
                    .with("current_version", current)
            }
            ChargeError::OrderAlreadyPaid => Problem::new(ProblemType::OrderAlreadyPaid, "this order has already been paid"),
            ChargeError::PaymentInProgress => Problem::new(
                ProblemType::PaymentInProgress,
                "another payment attempt for this order is being processed; wait for its outcome",
            ),
            ChargeError::OrderAlreadyAuthorized => Problem::new(
                ProblemType::OrderAlreadyAuthorized,
                "an authorized payment holds this order until it is captured or canceled",
            ),
            ChargeError::CaptureNotSupported => Problem::new(
                ProblemType::CaptureNotSupported,
                "this deployment's payment provider cannot capture later; send capture \"automatic\" or leave it out",
            ),
            ChargeError::Store(error) => store_problem(error),
            #[cfg(feature = "faults")]
            crash @ ChargeError::InjectedCrash(_) => Problem::internal(&crash),
        }
    }
}

impl From<RefundError> for Problem {
    fn from(error: RefundError) -> Self {
        match error {
            RefundError::Mismatch => Problem::new(
                ProblemType::IdempotencyKeyMismatch,
                "this Idempotency-Key was used with a different payment, amount or reason; use a new key for a new refund",
            ),
            RefundError::KeyInUse { retry_after } => Problem::new(
                ProblemType::IdempotencyKeyInUse,
                "a request with this Idempotency-Key is still being processed; retry after the indicated delay",
            )
            .retry_after(retry_after),
            RefundError::PaymentNotFound => Problem::new(ProblemType::NotFound, "no such payment"),
            RefundError::NotRefundable(status) => Problem::new(
                ProblemType::PaymentNotRefundable,
                format!("the payment is {status}; only a succeeded payment can be refunded"),
            )
            .with("payment_status", status),
            RefundError::ExceedsRemaining { remaining } => Problem::new(
                ProblemType::RefundExceedsRemaining,
                format!("at most {remaining} remains refundable (captured, less refunded and pending refunds)"),
            )
            .with("remaining_amount", remaining),
            RefundError::NotSupported(provider) => Problem::new(
                ProblemType::RefundNotSupported,
                format!("refunds through {provider} need its refund API, which this deployment cannot call; refund from the provider's portal"),
            ),
            RefundError::Store(error) => store_problem(error),
        }
    }
}

impl From<OperationError> for Problem {
    fn from(error: OperationError) -> Self {
        match error {
            OperationError::Mismatch => Problem::new(
                ProblemType::IdempotencyKeyMismatch,
                "this Idempotency-Key was used with a different payment or amount; use a new key for a new request",
            ),
            OperationError::KeyInUse { retry_after } => Problem::new(
                ProblemType::IdempotencyKeyInUse,
                "a request with this Idempotency-Key is still being processed; retry after the indicated delay",
            )
            .retry_after(retry_after),
            OperationError::PaymentNotFound => Problem::new(ProblemType::NotFound, "no such payment"),
            OperationError::NotCapturable(refusal @ CaptureRefusal::ExceedsAuthorized { capturable }) => {
                Problem::new(ProblemType::CaptureExceedsAuthorized, refusal.to_string())
                    .with("amount_capturable", capturable)
            }
            OperationError::NotCapturable(refusal @ CaptureRefusal::WholeOnly { capturable }) => {
                Problem::new(ProblemType::InvalidRequest, refusal.to_string())
                    .with("amount_capturable", capturable)
            }
            OperationError::NotCapturable(refusal @ CaptureRefusal::NotAuthorized(status)) => {
                Problem::new(ProblemType::PaymentNotCapturable, refusal.to_string())
                    .with("payment_status", status)
            }
            OperationError::NotCapturable(refusal @ CaptureRefusal::Busy(_)) => Problem::new(
                ProblemType::PaymentNotCapturable,
                refusal.to_string(),
            )
            .with("payment_status", PaymentStatus::Authorized.as_str()),
            OperationError::NotCancelable(refusal @ CancelRefusal::StaffOnly) => Problem::new(
                ProblemType::InsufficientScope,
                format!("{refusal} (payments:capture)"),
            ),
            OperationError::NotCancelable(refusal @ CancelRefusal::NotCancelable(status)) => {
                Problem::new(ProblemType::PaymentNotCancelable, refusal.to_string())
                    .with("payment_status", status)
            }
            OperationError::NotCancelable(refusal @ CancelRefusal::Busy(_)) => {
                Problem::new(ProblemType::PaymentNotCancelable, refusal.to_string())
            }
            OperationError::CaptureFailed { code } => Problem::new(
                ProblemType::CaptureFailed,
                "the payment provider refused the capture; nothing was captured",
            )
            .with("failure_code", code),
            OperationError::Store(error) => store_problem(error),
        }
    }
}

/// A capture's or cancel's answer: 201 (a capture) or 200 (a cancel) with the payment; 202
/// with `Retry-After` while the PSP's answer is unknown; 503 `psp-unavailable` when nothing
/// was sent. `replayed` adds `Idempotent-Replayed: true`.
pub fn operation_response(
    answer: OperationAnswer,
    done: StatusCode,
) -> Result<Response<Body>, Problem> {
    match answer {
        OperationAnswer::Done { payment, replayed } => {
            let mut response = json_response(done, &payment)?;
            if replayed {
                response
                    .headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
            }
            Ok(response)
        }
        OperationAnswer::Pending {
            payment,
            retry_after,
        } => {
            let mut response = json_response(StatusCode::ACCEPTED, &payment)?;
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after.as_secs().max(1)),
            );
            Ok(response)
        }
        OperationAnswer::PspUnavailable { retry_after } => Err(Problem::new(
            ProblemType::PspUnavailable,
            "the payment provider could not be reached; nothing was done; retry with the same Idempotency-Key",
        )
        .retry_after(retry_after)),
    }
}

/// A refund as the API answers it: 201 succeeded, 202 pending (with `Retry-After`), 402
/// `refund-failed` once the PSP failed it, whose `instance` is `instance` (the request id: this
/// request's, or for a replay the original request's). `replayed` adds `Idempotent-Replayed: true`.
pub fn refund_response(
    view: &RefundView,
    replayed: bool,
    pending_retry_after: Duration,
    instance: &str,
) -> Result<Response<Body>, Problem> {
    let mut response = match view.status {
        RefundStatus::Succeeded => json_response(StatusCode::CREATED, view)?,
        RefundStatus::Pending => {
            let mut response = json_response(StatusCode::ACCEPTED, view)?;
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(pending_retry_after.as_secs().max(1)),
            );
            response
        }
        RefundStatus::Failed | RefundStatus::Canceled => Problem::new(
            ProblemType::RefundFailed,
            "the payment provider did not refund; nothing was refunded by this request",
        )
        .with("refund_id", view.refund_id.clone())
        .with("payment_id", view.payment_id.clone())
        .with(
            "failure_code",
            view.failure_code.clone().unwrap_or_default(),
        )
        .into_response(instance),
    };
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

impl From<OrdersError> for Problem {
    fn from(error: OrdersError) -> Self {
        match error {
            OrdersError::Invalid(e @ crate::domain::OrderError::TotalTooSmall { minimum, .. }) => {
                Problem::new(ProblemType::AmountTooSmall, e.to_string())
                    .with("minimum_amount", minimum)
            }
            OrdersError::Invalid(e) => Problem::new(ProblemType::InvalidRequest, e.to_string()),
            OrdersError::NotFound => Problem::new(ProblemType::NotFound, "no such order"),
            OrdersError::VersionMismatch { current } => Problem::new(
                ProblemType::OrderVersionMismatch,
                format!("the order is at version {current}"),
            )
            .with("current_version", current),
            OrdersError::PaymentInProgress => Problem::new(
                ProblemType::PaymentInProgress,
                "the order cannot change while a payment for it is being processed",
            ),
            OrdersError::AlreadyPaid => {
                Problem::new(ProblemType::OrderAlreadyPaid, "a paid order cannot change")
            }
            OrdersError::AlreadyAuthorized => Problem::new(
                ProblemType::OrderAlreadyAuthorized,
                "the order cannot change while an authorized payment holds it",
            ),
            OrdersError::KeyMismatch => Problem::new(
                ProblemType::IdempotencyKeyMismatch,
                "this Idempotency-Key was used with a different order",
            ),
            OrdersError::KeyInUse { retry_after } => Problem::new(
                ProblemType::IdempotencyKeyInUse,
                "a request with this Idempotency-Key is still being processed",
            )
            .retry_after(retry_after),
            OrdersError::Store(error) => store_problem(error),
        }
    }
}

/// A store failure as an answer. Contention asks for a retry shortly (409
/// `idempotency-key-in-use`); a failed or refusing backend (unreachable, throttled, denied) for a
/// retry with the same key once it is back or fixed (503 `service-unavailable`): what was written, if anything, is held under
/// that key, so the retry finds it. Anything else (a corrupt item, a lost lease) is a 500.
fn store_problem(error: StoreError) -> Problem {
    match error {
        StoreError::Conflict { .. } => Problem::new(
            ProblemType::IdempotencyKeyInUse,
            "the request is contended; retry shortly",
        )
        .retry_after(Duration::from_secs(1)),
        StoreError::Backend { .. } | StoreError::Refused { .. } => {
            tracing::warn!(error = %crate::error_chain(&error), "the store failed; asking the client to retry");
            Problem::new(
                ProblemType::ServiceUnavailable,
                "the request could not be completed now; retry with the same Idempotency-Key",
            )
            .retry_after(Duration::from_secs(1))
        }
        other => Problem::internal(&other),
    }
}

/// A payment as the API answers it: 201 succeeded or authorized, 202 processing or requires
/// action (with `Retry-After`), 402 failed or canceled, with the failure's problem type, whose `instance` is `instance` (the request id: this
/// request's, or for a replay the original request's). `replayed` adds `Idempotent-Replayed: true`.
pub fn payment_response(
    view: &PaymentView,
    replayed: bool,
    processing_retry_after: Duration,
    instance: &str,
) -> Result<Response<Body>, Problem> {
    let mut response = match (view.status, view.failure.as_ref().map(|f| f.kind)) {
        (PaymentStatus::Succeeded | PaymentStatus::Authorized, _) => {
            json_response(StatusCode::CREATED, view)?
        }
        // Not final: the client asks again (after the customer's action, for `requires_action`).
        (PaymentStatus::Processing | PaymentStatus::RequiresAction, _) => {
            let mut response = json_response(StatusCode::ACCEPTED, view)?;
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(processing_retry_after.as_secs().max(1)),
            );
            response
        }
        (PaymentStatus::Failed | PaymentStatus::Canceled, kind) => {
            let problem = match kind {
                Some(FailureKind::Declined) => Problem::new(
                    ProblemType::CardDeclined,
                    "the card was declined; try another payment method",
                )
                .with(
                    "decline_code",
                    view.failure
                        .as_ref()
                        .and_then(|f| f.decline_code.clone())
                        .unwrap_or_default(),
                ),
                Some(FailureKind::Rejected) => Problem::new(
                    ProblemType::PaymentMethodRejected,
                    "the payment provider rejected this payment method",
                ),
                Some(FailureKind::AuthenticationRequired) => Problem::new(
                    ProblemType::AuthenticationRequired,
                    "the card needs the customer to authenticate and the request gave no return_url; nothing was charged",
                ),
                Some(FailureKind::AuthenticationFailed) => Problem::new(
                    ProblemType::AuthenticationFailed,
                    "the customer did not complete the authentication; nothing was charged",
                ),
                _ if view.status == PaymentStatus::Canceled => Problem::new(
                    ProblemType::PaymentFailed,
                    "the payment was canceled; nothing was captured",
                ),
                Some(FailureKind::Refused | FailureKind::Abandoned) | None => Problem::new(
                    ProblemType::PaymentFailed,
                    "the payment attempt failed without a charge",
                ),
            };
            problem
                .with("payment_id", view.payment_id.clone())
                .into_response(instance)
        }
    };
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outage() -> StoreError {
        StoreError::Backend {
            operation: "load",
            source: "connection refused".into(),
        }
    }

    fn conflict() -> StoreError {
        StoreError::Conflict {
            item: "order#o1".into(),
        }
    }

    #[test]
    fn a_failed_store_asks_every_api_for_a_retry_and_a_corrupt_one_is_internal() {
        let cases = [
            Problem::from(ChargeError::Store(outage())),
            Problem::from(RefundError::Store(outage())),
            Problem::from(OrdersError::Store(outage())),
        ];
        for problem in cases {
            assert_eq!(problem.kind, ProblemType::ServiceUnavailable);
            assert_eq!(problem.retry_after, Some(Duration::from_secs(1)));
        }
        let contended = [
            Problem::from(ChargeError::Store(conflict())),
            Problem::from(RefundError::Store(conflict())),
            Problem::from(OrdersError::Store(conflict())),
        ];
        for problem in contended {
            assert_eq!(problem.kind, ProblemType::IdempotencyKeyInUse);
            assert_eq!(problem.retry_after, Some(Duration::from_secs(1)));
        }
        let corrupt = Problem::from(OrdersError::Store(StoreError::Corrupt {
            key: "order#o1".into(),
            reason: "no version".into(),
        }));
        assert_eq!(corrupt.kind, ProblemType::Internal);
        assert_eq!(corrupt.retry_after, None);
    }
}
