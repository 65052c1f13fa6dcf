//! The whole system in one process: the same handlers as the Lambdas behind a local API
//! Gateway, the webhook pipeline (receiver → queue → processor), and the scheduled jobs on timers.

use crate::gateway::{gateway_answer, http_response, insufficient_scope, lambda_request};
use crate::jwt;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use payonce::adapters::psp::ConfiguredPsp;
use payonce::clock::{Clock, SystemClock};
use payonce::http::{match_route, Access, Operation, RouteMatch, Server};
use payonce::idempotency::IdempotencyStore;
use payonce::ports::{
    ChargeStore, ExpiredSweep, InflightScan, OperationStore, OrderStore, QueueReceive, QueueSend,
    RefundStore,
};
use payonce::service::cleanup::{sweep, CleanupConfig};
use payonce::service::reconcile::Reconciler;
use payonce::service::webhooks::{
    QueuedEvent, WebhookProcessor, WebhookReceiver, PROVIDER_ATTRIBUTE,
};
use payonce::service::{ChargeService, OperationService, OrderService, RefundService};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long API Gateway waits for an integration before it gives up.
pub const GATEWAY_TIMEOUT: Duration = Duration::from_secs(30);
/// The charge function's timeout (as in the template), which sets its deadline.
pub const CHARGE_TIMEOUT_MS: i64 = 25_000;
/// The refund function's timeout (as in the template).
pub const REFUND_TIMEOUT_MS: i64 = 25_000;
/// The other API functions' timeout.
pub const API_TIMEOUT_MS: i64 = 10_000;

/// Everything the sandbox serves, over stores `S` (orders, payments), `I` (idempotency
/// records) and queue `Q`.
pub struct Sandbox<S, I, Q> {
    /// The orders function's service.
    pub orders: OrderService<S, I>,
    /// The charge function's service.
    pub charge: ChargeService<S, ConfiguredPsp>,
    /// The refund function's service.
    pub refund: RefundService<S, ConfiguredPsp>,
    /// The refund function's captures and cancels.
    pub operations: OperationService<S, ConfiguredPsp>,
    /// The webhook receiver.
    pub receiver: WebhookReceiver<Q>,
    /// The webhook processor.
    pub processor: WebhookProcessor<S>,
    /// The reconcile job.
    pub reconciler: Reconciler<S, ConfiguredPsp>,
    /// The store the cleanup job sweeps.
    pub records: I,
    /// The queue the processor polls.
    pub queue: Q,
    /// The processor's requests to reconcile one payment now (a PSP's approval), which
    /// [`Sandbox::reconcile_on_request_forever`] polls as the reconcile function's SQS trigger.
    pub reconcile_requests: payonce::adapters::memory::MemoryQueue,
    /// The HS256 secret tokens are verified with.
    pub jwt_secret: String,
    /// The demo checkout page.
    pub page: &'static str,
    /// Its Content-Security-Policy.
    pub page_csp: String,
    /// The origins a browser checkout may call the API from.
    pub cors: crate::exposure::Cors,
    /// Whether requests naming any `Host` are answered (`--allow-remote`).
    pub allow_remote: bool,
    /// The fake PSP's base URL (shown to the demo page).
    pub psp_url: String,
    /// The PSP the sandbox runs (`stripe`, `omise`, `2c2p`, `square`, `paypal`), shown to the
    /// demo page.
    pub psp_name: &'static str,
    /// DynamoDB requests and capacity, when counted (`--count-dynamodb`).
    pub dynamodb_usage: Option<payonce::adapters::dynamodb::CapacityMeter>,
}

impl<S, I, Q> Sandbox<S, I, Q>
where
    S: ChargeStore + RefundStore + OperationStore + OrderStore + InflightScan + Clone + 'static,
    I: IdempotencyStore + ExpiredSweep + Clone + 'static,
    Q: QueueSend + QueueReceive + Clone + 'static,
{
    /// The HTTP router: the API, the webhooks and the demo page.
    pub fn router(self: Arc<Self>) -> axum::Router {
        axum::Router::new()
            .fallback(route::<S, I, Q>)
            .with_state(self)
    }

    /// Polls the queue as Lambda's SQS event source mapping would: batches of up to 10, each
    /// message deleted once processed, failures left to reappear after the visibility timeout.
    pub async fn process_queue_forever(self: Arc<Self>) {
        loop {
            match self.queue.receive(10, Duration::from_secs(30)).await {
                Ok(messages) if !messages.is_empty() => {
                    let events: Vec<QueuedEvent<'_>> = messages
                        .iter()
                        .map(|m| QueuedEvent {
                            message_id: &m.message_id,
                            provider: m.attributes.get(PROVIDER_ATTRIBUTE).map(String::as_str),
                            body: &m.body,
                        })
                        .collect();
                    let failed = self.processor.process_batch(&events).await;
                    for message in &messages {
                        if !failed.contains(&message.message_id) {
                            if let Err(error) = self.queue.delete(&message.receipt_handle).await {
                                tracing::warn!(error = %error, "could not delete a processed message");
                            }
                        }
                    }
                    continue;
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(error = %error, "the webhook queue is unavailable"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls the reconcile requests as the reconcile function's SQS trigger would: one at a
    /// time, each deleted once reconciled, a failed one left to reappear.
    pub async fn reconcile_on_request_forever(self: Arc<Self>) {
        loop {
            match self
                .reconcile_requests
                .receive(1, Duration::from_secs(60))
                .await
            {
                Ok(messages) if !messages.is_empty() => {
                    for message in messages {
                        let report = self
                            .reconciler
                            .reconcile_requested([message.body.as_str()])
                            .await;
                        if report.errors == 0 {
                            let _ = self
                                .reconcile_requests
                                .delete(&message.receipt_handle)
                                .await;
                        }
                    }
                    continue;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error, "the reconcile requests are unavailable")
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs reconcile every `every`.
    pub async fn reconcile_forever(self: Arc<Self>, every: Duration) {
        let mut timer = tokio::time::interval(every);
        timer.tick().await;
        loop {
            timer.tick().await;
            match self.reconciler.run().await {
                Ok(report) if report.examined > 0 => tracing::info!(?report, "reconcile"),
                Ok(_) => {}
                Err(error) => tracing::warn!(error = %error, "reconcile failed"),
            }
        }
    }

    /// Runs cleanup every `every`.
    pub async fn cleanup_forever(self: Arc<Self>, every: Duration) {
        let mut timer = tokio::time::interval(every);
        timer.tick().await;
        loop {
            timer.tick().await;
            if let Err(error) = sweep(&self.records, &CleanupConfig::default()).await {
                tracing::warn!(error = %error, "cleanup failed");
            }
        }
    }
}

/// The sandbox's own routes ([`Server::Sandbox`] in the route table): the demo checkout page
/// and the key manager it loads, and its development endpoints: `/_sandbox/health`,
/// `/_sandbox/config` (the PSP, the fake PSP's URL and test tokens, the same on every PSP but
/// for the 3-D Secure card and PayPal's `paypal`, for the demo page), `/_sandbox/token?user=<id>`
/// (a development token — only the sandbox hands out tokens; in AWS they come from your
/// identity provider) and, with `--count-dynamodb`, `/_sandbox/dynamodb-usage` (DynamoDB
/// requests and capacity so far). All are read-only and public.
fn sandbox_endpoint<S, I, Q>(
    sandbox: &Sandbox<S, I, Q>,
    operation: Operation,
    parts: &axum::http::request::Parts,
    request_id: &str,
) -> Response {
    match operation {
        Operation::GetCheckoutPage | Operation::GetCheckoutIndex => (
            [
                ("content-type", "text/html; charset=utf-8"),
                ("content-security-policy", sandbox.page_csp.as_str()),
                ("x-content-type-options", "nosniff"),
            ],
            sandbox.page,
        )
            .into_response(),
        Operation::GetKeyManager => (
            [("content-type", "text/javascript; charset=utf-8")],
            crate::KEY_MANAGER_SCRIPT,
        )
            .into_response(),
        Operation::GetSandboxHealth => {
            axum::Json(serde_json::json!({"status": "ok"})).into_response()
        }
        Operation::GetSandboxConfig => {
            let mut methods = vec![
                "pm_card_visa",
                "pm_card_mastercard",
                "pm_card_visa_chargeDeclined",
                "pm_card_chargeDeclinedInsufficientFunds",
                "pm_fake_lost_response",
                "pm_fake_slow",
            ];
            // The fake's Stripe, Omise and PayPal faces ask for 3-D Secure on this card (their
            // page on the fake).
            if matches!(sandbox.psp_name, "stripe" | "omise" | "paypal") {
                methods.push("pm_card_threeDSecure2Required");
            }
            // PayPal's buyer approval: the buyer approves at PayPal (the fake's page), then
            // payonce captures.
            if sandbox.psp_name == "paypal" {
                methods.push("paypal");
            }
            // Whether `capture: "manual"` can be offered (authorize now, capture later).
            let manual_capture =
                matches!(sandbox.psp_name, "stripe" | "omise" | "square" | "paypal");
            axum::Json(serde_json::json!({
                "psp": sandbox.psp_name,
                "psp_url": sandbox.psp_url,
                "payment_methods": methods,
                "manual_capture": manual_capture,
            }))
            .into_response()
        }
        Operation::GetSandboxDynamodbUsage => match &sandbox.dynamodb_usage {
            Some(usage) => axum::Json(usage.to_json()).into_response(),
            None => gateway_answer(404, "Not Found", request_id),
        },
        Operation::GetSandboxToken => {
            let asked = parts
                .uri
                .query()
                .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("user=")));
            let valid = |u: &str| {
                !u.is_empty()
                    && u.len() <= 64
                    && u.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            };
            let user = match asked {
                None => "demo-user",
                Some(user) if valid(user) => user,
                Some(_) => {
                    let problem = payonce::http::Problem::new(
                        payonce::http::ProblemType::InvalidRequest,
                        "user must be 1 to 64 characters of A-Z a-z 0-9 - _",
                    );
                    return http_response(problem.into_response(request_id));
                }
            };
            let token = jwt::sign(&sandbox.jwt_secret, user, SystemClock.now_s(), 3600, &[]);
            axum::Json(serde_json::json!({"user": user, "token": token})).into_response()
        }
        // An API route: a function answers it, never the sandbox itself.
        _ => gateway_answer(404, "Not Found", request_id),
    }
}

/// The function behind an API route, as the template wires them.
#[derive(Clone, Copy)]
enum Function {
    Orders,
    Charge,
    Refund,
    Webhooks,
}

impl Function {
    fn of(operation: Operation) -> Option<Self> {
        match operation {
            Operation::CreateOrder
            | Operation::GetOrder
            | Operation::ReviseOrder
            | Operation::GetOpenApi
            | Operation::GetProblem => Some(Self::Orders),
            Operation::CreatePayment | Operation::GetPayment => Some(Self::Charge),
            Operation::CreateRefund | Operation::CapturePayment | Operation::CancelPayment => {
                Some(Self::Refund)
            }
            Operation::ReceiveWebhook => Some(Self::Webhooks),
            _ => None,
        }
    }

    /// Its timeout (as in the template), which sets the invocation's deadline.
    fn timeout_ms(self) -> i64 {
        match self {
            Self::Charge => CHARGE_TIMEOUT_MS,
            Self::Refund => REFUND_TIMEOUT_MS,
            Self::Orders | Self::Webhooks => API_TIMEOUT_MS,
        }
    }
}

async fn route<S, I, Q>(State(sandbox): State<Arc<Sandbox<S, I, Q>>>, request: Request) -> Response
where
    S: ChargeStore + RefundStore + OperationStore + OrderStore + InflightScan + Clone + 'static,
    I: IdempotencyStore + ExpiredSweep + Clone + 'static,
    Q: QueueSend + QueueReceive + Clone + 'static,
{
    let started = Instant::now();
    let request_id = uuid::Uuid::new_v4().to_string();
    let (parts, body) = request.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let response = if !crate::exposure::host_allowed(&parts.headers, sandbox.allow_remote) {
        // A page elsewhere reaching loopback through DNS rebinding names its own host.
        gateway_answer(403, "Forbidden", &request_id)
    } else if let Some(preflight) = sandbox.cors.preflight(&parts.method, &parts.headers) {
        preflight
    } else {
        let mut response = match axum::body::to_bytes(body, 2 * 1024 * 1024).await {
            // API Gateway refuses payloads over its own limit before any function runs.
            Err(_) => gateway_answer(413, "Request Entity Too Large", &request_id),
            Ok(bytes) => dispatch(&sandbox, &parts, bytes, &request_id).await,
        };
        sandbox.cors.decorate(&parts.headers, &mut response);
        response
    };
    tracing::info!(
        target: "access",
        "{method} {path} -> {} in {} ms (request {request_id})",
        response.status().as_u16(),
        started.elapsed().as_millis()
    );
    response
}

async fn dispatch<S, I, Q>(
    sandbox: &Sandbox<S, I, Q>,
    parts: &axum::http::request::Parts,
    body: Bytes,
    request_id: &str,
) -> Response
where
    S: ChargeStore + RefundStore + OperationStore + OrderStore + InflightScan + Clone + 'static,
    I: IdempotencyStore + ExpiredSweep + Clone + 'static,
    Q: QueueSend + QueueReceive + Clone + 'static,
{
    let now = SystemClock;
    // Routed as API Gateway routes, by the one route table; what no route matches is
    // API Gateway's own 404.
    let route = match match_route(parts.method.as_str(), parts.uri.path()) {
        RouteMatch::Found { route, .. } => route,
        RouteMatch::OtherMethods { .. } | RouteMatch::None => {
            return gateway_answer(404, "Not Found", request_id)
        }
    };
    let function = match (route.server, Function::of(route.operation)) {
        (Server::Api, Some(function)) => function,
        _ => return sandbox_endpoint(sandbox, route.operation, parts, request_id),
    };
    let claims = match route.access {
        Access::Bearer | Access::BearerWithScope(_) => {
            let token = parts
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let claims = match token.map(|t| jwt::verify(&sandbox.jwt_secret, t, now.now_s())) {
                Some(Ok(claims)) => claims,
                _ => return gateway_answer(401, "Unauthorized", request_id),
            };
            // The route's AuthorizationScopes: API Gateway refuses a token without them.
            if let Access::BearerWithScope(scope) = route.access {
                if !jwt::scopes(&claims).iter().any(|s| s == scope) {
                    return insufficient_scope(scope, request_id);
                }
            }
            Some(claims)
        }
        Access::Signed | Access::Public => None,
    };
    let timeout_ms = function.timeout_ms();
    let event = match lambda_request(
        parts,
        &body,
        claims.as_ref(),
        request_id,
        now.now_ms() + timeout_ms,
    ) {
        Ok(event) => event,
        Err(error) => {
            tracing::warn!(%error, "could not build the API Gateway event");
            return gateway_answer(400, "Bad Request", request_id);
        }
    };
    let handled = async {
        match function {
            Function::Orders => payonce_orders::handler::handle(&sandbox.orders, event).await,
            Function::Charge => payonce_charge::handler::handle(&sandbox.charge, event).await,
            Function::Refund => {
                payonce_refund::handler::handle(&sandbox.refund, &sandbox.operations, event).await
            }
            Function::Webhooks => payonce_webhook::receiver::handle(&sandbox.receiver, event).await,
        }
    };
    // Like Lambda, kill the invocation at its deadline (leases count on it); API Gateway then
    // answers for it, as it does for a timed-out function.
    let deadline = Duration::from_millis(timeout_ms.unsigned_abs()).min(GATEWAY_TIMEOUT);
    match tokio::time::timeout(deadline, handled).await {
        Ok(response) => http_response(response),
        Err(_) => {
            tracing::warn!(
                request_id,
                "the handler ran past its deadline and was stopped"
            );
            gateway_answer(500, "Internal Server Error", request_id)
        }
    }
}
