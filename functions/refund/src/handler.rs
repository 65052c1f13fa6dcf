//! API Gateway event → refund, capture or cancel service → response. Every answer is JSON or
//! problem+json and carries `x-request-id`.

use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, Response};
use payonce::domain::OperationKind;
use payonce::domain::RefundReason;
use payonce::http::operation_response;
use payonce::http::{
    authenticated_user, deadline_ms, has_scope, idempotency_key, not_this_function, operation_of,
    parse_json_body, refund_response, request_id, with_request_id, Operation, Problem, ProblemType,
};
use payonce::ports::{ChargeStore, OperationStore, Psp, RefundStore};
use payonce::service::{
    Caller, OperationCommand, OperationService, RefundAnswer, RefundCommand, RefundService,
    CAPTURE_OAUTH_SCOPE, REFUND_OAUTH_SCOPE,
};
use serde::Deserialize;

/// The function's time budget when the event carries no Lambda context (sandbox, tests):
/// the template's 25 s timeout.
pub const FALLBACK_TIMEOUT_MS: i64 = 25_000;

/// Handles one request: a refund, or a capture or cancel (`operations`).
pub async fn handle<S: RefundStore + OperationStore + ChargeStore, P: Psp, Q: Psp>(
    service: &RefundService<S, P>,
    operations: &OperationService<S, Q>,
    request: Request,
) -> Response<Body> {
    let id = request_id(&request);
    let answer = match operation_of(&request) {
        Ok((Operation::CreateRefund, Some(payment_id))) => {
            refund(service, &request, payment_id, &id).await
        }
        Ok((Operation::CapturePayment, Some(payment_id))) => {
            operate(
                operations,
                OperationKind::Capture,
                &request,
                payment_id,
                &id,
            )
            .await
        }
        Ok((Operation::CancelPayment, Some(payment_id))) => {
            operate(operations, OperationKind::Cancel, &request, payment_id, &id).await
        }
        Ok(_) => Err(not_this_function()),
        Err(problem) => Err(problem),
    };
    let response = answer.unwrap_or_else(|problem| {
        tracing::info!(request_id = %id, problem = %problem.kind.uri(), "request refused");
        problem.into_response(&id)
    });
    with_request_id(response, &id)
}

/// The refund body, exactly: unknown fields are refused; `amount` must be an integer (`500.0` is one).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundBody {
    #[serde(default, deserialize_with = "payonce::domain::optional_integer")]
    amount: Option<i64>,
    #[serde(default)]
    reason: Option<String>,
}

impl RefundBody {
    fn validate(self, payment_id: &str) -> Result<RefundCommand, Problem> {
        let invalid = |detail: &str| Problem::new(ProblemType::InvalidRequest, detail);
        if let Some(amount) = self.amount {
            if !(1..=payonce::domain::MAX_AMOUNT_MINOR).contains(&amount) {
                return Err(invalid(
                    "amount must be a positive integer number of minor units",
                ));
            }
        }
        let reason = match self.reason.as_deref() {
            None => None,
            Some(raw) => Some(RefundReason::parse(raw).ok_or_else(|| {
                invalid("reason must be one of requested_by_customer, duplicate, fraudulent")
            })?),
        };
        Ok(RefundCommand {
            payment_id: payment_id.to_owned(),
            amount: self.amount,
            reason,
        })
    }
}

async fn refund<S: RefundStore, P: Psp>(
    service: &RefundService<S, P>,
    request: &Request,
    payment_id: &str,
    id: &str,
) -> Result<Response<Body>, Problem> {
    let user = authenticated_user(request).ok_or_else(|| {
        Problem::new(
            ProblemType::Unauthorized,
            "a valid bearer token is required",
        )
    })?;
    if !has_scope(request, REFUND_OAUTH_SCOPE) {
        return Err(Problem::new(
            ProblemType::InsufficientScope,
            format!("refunds need a token with the {REFUND_OAUTH_SCOPE} scope"),
        ));
    }
    let key = idempotency_key(request)?.ok_or_else(|| {
        Problem::new(
            ProblemType::IdempotencyKeyMissing,
            "send an Idempotency-Key header (1 to 255 printable ASCII characters)",
        )
    })?;
    let body: RefundBody = if request.body().is_empty() {
        RefundBody::default()
    } else {
        parse_json_body(request)?
    };
    let command = body.validate(payment_id)?;
    let now_ms = service.store().refund_now_ms();
    let deadline = deadline_ms(request, now_ms, FALLBACK_TIMEOUT_MS);
    let retry_after = service.config().pending_retry_after;
    match service.refund(&user, &key, &command, deadline, id).await? {
        RefundAnswer::Fresh(view) => refund_response(&view, false, retry_after, id),
        // A stored problem names the request that claimed the key.
        RefundAnswer::Replayed { view, request_id } => refund_response(
            &view,
            true,
            retry_after,
            request_id.as_deref().unwrap_or(id),
        ),
        RefundAnswer::PspUnavailable { retry_after } => Err(Problem::new(
            ProblemType::PspUnavailable,
            "the payment provider could not be reached; nothing was refunded; retry with the same Idempotency-Key",
        )
        .retry_after(retry_after)),
    }
}

/// The capture body, exactly: `amount` (an integer) or nothing. A cancel takes no field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureBody {
    #[serde(default, deserialize_with = "payonce::domain::optional_integer")]
    amount: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {}

async fn operate<S: OperationStore + ChargeStore, P: Psp>(
    service: &OperationService<S, P>,
    kind: OperationKind,
    request: &Request,
    payment_id: &str,
    id: &str,
) -> Result<Response<Body>, Problem> {
    let user = authenticated_user(request).ok_or_else(|| {
        Problem::new(
            ProblemType::Unauthorized,
            "a valid bearer token is required",
        )
    })?;
    let staff = has_scope(request, CAPTURE_OAUTH_SCOPE);
    if kind == OperationKind::Capture && !staff {
        return Err(Problem::new(
            ProblemType::InsufficientScope,
            format!("captures need a token with the {CAPTURE_OAUTH_SCOPE} scope"),
        ));
    }
    let key = idempotency_key(request)?.ok_or_else(|| {
        Problem::new(
            ProblemType::IdempotencyKeyMissing,
            "send an Idempotency-Key header (1 to 255 printable ASCII characters)",
        )
    })?;
    let amount = match kind {
        OperationKind::Capture => {
            let body: CaptureBody = if request.body().is_empty() {
                CaptureBody::default()
            } else {
                parse_json_body(request)?
            };
            if let Some(amount) = body.amount {
                if !(1..=payonce::domain::MAX_AMOUNT_MINOR).contains(&amount) {
                    return Err(Problem::new(
                        ProblemType::InvalidRequest,
                        "amount must be a positive integer number of minor units",
                    ));
                }
            }
            body.amount
        }
        OperationKind::Cancel => {
            if !request.body().is_empty() {
                let CancelBody {} = parse_json_body(request)?;
            }
            None
        }
    };
    let command = OperationCommand {
        kind,
        payment_id: payment_id.to_owned(),
        amount,
    };
    let now_ms = service.store().operation_now_ms();
    let deadline = deadline_ms(request, now_ms, FALLBACK_TIMEOUT_MS);
    let caller = Caller { user: &user, staff };
    let answer = service.run(caller, &key, &command, deadline, id).await?;
    let done = match kind {
        OperationKind::Capture => StatusCode::CREATED,
        OperationKind::Cancel => StatusCode::OK,
    };
    operation_response(answer, done)
}
