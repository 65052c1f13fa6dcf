//! API Gateway event → charge service → response. Every answer is JSON or problem+json and
//! carries `x-request-id`.

use lambda_http::{Body, Request, Response};
use payonce::domain::{CaptureMethod, PspKind};
use payonce::http::{
    authenticated_user, deadline_ms, has_scope, idempotency_key, json_response, not_this_function,
    operation_of, parse_json_body, payment_response, request_id, with_request_id, Operation,
    Problem, ProblemType,
};
use payonce::ports::{ChargeStore, Psp, RefundStore};
use payonce::service::{ChargeError, ChargeService, PayAnswer, PayRequest, REFUND_OAUTH_SCOPE};
use serde::Deserialize;

/// The function's time budget when the event carries no Lambda context (sandbox, tests):
/// the template's 25 s timeout.
pub const FALLBACK_TIMEOUT_MS: i64 = 25_000;

/// Handles one request.
pub async fn handle<S: ChargeStore + RefundStore, P: Psp>(
    service: &ChargeService<S, P>,
    request: Request,
) -> Response<Body> {
    let id = request_id(&request);
    let answer = match operation_of(&request) {
        Ok((Operation::CreatePayment, _)) => pay(service, &request, &id).await,
        Ok((Operation::GetPayment, Some(payment_id))) => get(service, &request, payment_id).await,
        Ok(_) => Err(not_this_function()),
        Err(problem) => Err(problem),
    };
    let response = answer.unwrap_or_else(|problem| {
        tracing::info!(request_id = %id, problem = %problem.kind.uri(), "request refused");
        problem.into_response(&id)
    });
    with_request_id(response, &id)
}

/// The POST /payments body, exactly: unknown fields (such as `amount`) are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PayBody {
    order_id: String,
    #[serde(deserialize_with = "payonce::domain::integer")]
    order_version: i64,
    payment_method: String,
    /// Where the PSP sends the customer back after an action (3-D Secure).
    #[serde(default)]
    return_url: Option<String>,
    /// `automatic` (the default) or `manual`.
    #[serde(default)]
    capture: Option<String>,
}

impl PayBody {
    fn validate(self, psp: PspKind, checkout_origins: &[String]) -> Result<PayRequest, Problem> {
        let invalid = |detail: &str| Problem::new(ProblemType::InvalidRequest, detail);
        if !payonce::http::is_id(&self.order_id) {
            return Err(invalid(
                "order_id must be 1 to 64 characters of A-Z a-z 0-9 _ -",
            ));
        }
        if self.order_version < 1 {
            return Err(invalid("order_version must be a positive integer"));
        }
        if looks_like_card_data(&self.payment_method) {
            // Never echo the value: it may be a card number.
            return Err(invalid(
                "payment_method must be a PSP token (pm_...), never card data",
            ));
        }
        if !psp.accepts_payment_method(&self.payment_method) {
            return Err(invalid(&format!(
                "payment_method must be {}",
                psp.payment_method_shape()
            )));
        }
        let capture = match self.capture.as_deref() {
            None => CaptureMethod::Automatic,
            Some(raw) => CaptureMethod::parse(raw)
                .ok_or_else(|| invalid("capture must be \"automatic\" or \"manual\""))?,
        };
        if capture == CaptureMethod::Manual && !psp.authorizes_alone(&self.payment_method) {
            return Err(invalid(
                "capture \"manual\" needs a vaulted payment method on this PSP (paypal_vault:<id> or card_vault:<id>): the buyer's approval at PayPal cannot be held",
            ));
        }
        if let Some(url) = &self.return_url {
            if !payonce::http::return_url_allowed(url, checkout_origins) {
                // Never echo the value back.
                return Err(Problem::new(
                    ProblemType::ReturnUrlNotAllowed,
                    "return_url must be an https URL (at most 2048 characters, no fragment) on one of this deployment's checkout origins",
                ));
            }
        }
        Ok(PayRequest {
            order_id: self.order_id,
            order_version: self.order_version,
            payment_method: self.payment_method,
            return_url: self.return_url,
            capture,
        })
    }
}

/// 12 to 19 digits, once spaces and dashes are dropped: a card number, whatever else it is.
fn looks_like_card_data(value: &str) -> bool {
    let digits = value.chars().filter(char::is_ascii_digit).count();
    let only_digits = value
        .chars()
        .all(|c| c.is_ascii_digit() || c == ' ' || c == '-');
    only_digits && (12..=19).contains(&digits)
}

async fn pay<S: ChargeStore, P: Psp>(
    service: &ChargeService<S, P>,
    request: &Request,
    id: &str,
) -> Result<Response<Body>, Problem> {
    let user = authenticated_user(request).ok_or_else(|| {
        Problem::new(
            ProblemType::Unauthorized,
            "a valid bearer token is required",
        )
    })?;
    let key = idempotency_key(request)?.ok_or_else(|| {
        Problem::new(
            ProblemType::IdempotencyKeyMissing,
            "send an Idempotency-Key header (1 to 255 printable ASCII characters)",
        )
    })?;
    let body: PayBody = parse_json_body(request)?;
    let pay = body.validate(service.psp().kind(), &service.config().checkout_origins)?;
    let now_ms = service.store().now_ms();
    let deadline = deadline_ms(request, now_ms, FALLBACK_TIMEOUT_MS);
    tracing::debug!(deadline_ms = deadline, now_ms, "payment request");
    let retry_after = service.config().processing_retry_after;
    match service.pay(&user, &key, &pay, deadline, id).await? {
        PayAnswer::Fresh(view) => payment_response(&view, false, retry_after, id),
        // A stored problem names the request that claimed the key.
        PayAnswer::Replayed { view, request_id } => payment_response(
            &view,
            true,
            retry_after,
            request_id.as_deref().unwrap_or(id),
        ),
        PayAnswer::PspUnavailable { retry_after } => Err(Problem::new(
            ProblemType::PspUnavailable,
            "the payment provider could not be reached; nothing was charged; retry with the same Idempotency-Key",
        )
        .retry_after(retry_after)),
    }
}

async fn get<S: ChargeStore + RefundStore, P: Psp>(
    service: &ChargeService<S, P>,
    request: &Request,
    payment_id: &str,
) -> Result<Response<Body>, Problem> {
    let user = authenticated_user(request).ok_or_else(|| {
        Problem::new(
            ProblemType::Unauthorized,
            "a valid bearer token is required",
        )
    })?;
    // Staff who may refund may read any user's payment; anyone else only their own.
    let staff = has_scope(request, REFUND_OAUTH_SCOPE);
    let payment = service
        .store()
        .get_payment(payment_id)
        .await
        .map_err(ChargeError::from)?
        .filter(|p| staff || p.owner == user)
        .ok_or_else(|| Problem::new(ProblemType::NotFound, "no such payment"))?;
    let refunds = if payment.refund_count > 0 || payment.duplicate_refund {
        service
            .store()
            .refunds_of(&payment)
            .await
            .map_err(ChargeError::from)?
    } else {
        Vec::new()
    };
    json_response(
        lambda_http::http::StatusCode::OK,
        &payonce::domain::payment_details(&payment, &refunds),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_numbers_are_recognised_without_being_tokens() {
        assert!(looks_like_card_data("4242424242424242"));
        assert!(looks_like_card_data("4242 4242 4242 4242"));
        assert!(looks_like_card_data("4242-4242-4242-4242"));
        assert!(!looks_like_card_data("pm_card_visa"));
        assert!(!looks_like_card_data("12345"));
    }
}
