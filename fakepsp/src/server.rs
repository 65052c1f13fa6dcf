//! The HTTP surface: Stripe's PaymentIntents routes under `/v1`, and `/_fake/*` for tests.
//!
//! Handlers do all their state changes synchronously (claim the idempotency key, create the
//! PaymentIntent, store the answer) before their first `.await`, so a client that disconnects
//! mid-request can never leave a charge made but not stored under its key.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::sync::watch;

use crate::behaviour::{behaviour_for, Behaviour, Decline};
use crate::conn::ConnHandle;
use crate::params::{optional_enum, parse_form, CreateParams};
use crate::reply::{self, Reply};
use crate::state::{
    new_id, now_epoch_s, CancelError, Claim, Fingerprint, Intent, KeyTicket, Status, Store,
};
use crate::webhooks::{Event, Webhooks};

/// Stripe's limit on `Idempotency-Key` length.
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// What every handler shares.
#[derive(Clone, Debug)]
pub(crate) struct App {
    pub(crate) store: Arc<Store>,
    pub(crate) webhooks: Arc<Webhooks>,
    pub(crate) api_key: Arc<str>,
    pub(crate) slow_delay: Duration,
    /// Turns `true` when the server is stopping, so a held-back `pm_fake_slow` answer does not
    /// keep a graceful shutdown waiting.
    pub(crate) stopping: watch::Receiver<bool>,
}

/// The router, with the `/v1` gate (request counting, API key) in front of everything.
pub(crate) fn router(app: App) -> Router {
    Router::new()
        .route("/v1/payment_intents", post(create_intent))
        // A static segment wins over `{id}` in axum's router, so `search` is never taken for an id.
        .route("/v1/payment_intents/search", get(search_intents))
        .route("/v1/payment_intents/{id}", get(get_intent))
        .route("/v1/payment_intents/{id}/cancel", post(cancel_intent))
        .route("/_fake/charges", get(fake_charges))
        .fallback(unknown_route)
        .method_not_allowed_fallback(unknown_route)
        .layer(middleware::from_fn_with_state(app.clone(), v1_gate))
        .with_state(app)
}

/// Counts every request on `/v1/*` and turns away those without the right API key.
async fn v1_gate(State(app): State<App>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path != "/v1" && !path.starts_with("/v1/") {
        return next.run(request).await;
    }
    app.store.count_request();
    let authorised = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .is_some_and(|key| key.trim() == &*app.api_key);
    if !authorised {
        return reply::unauthorized().into_response(false);
    }
    next.run(request).await
}

/// What the create handler does with its answer once everything is stored.
#[derive(Debug)]
enum Delivery {
    /// Send it.
    Now,
    /// Send nothing at all; close the connection.
    Sever,
    /// Send it after this long.
    After(Duration),
}

/// The result of running a create request.
#[derive(Debug)]
struct Outcome {
    reply: Reply,
    events: Vec<Event>,
    delivery: Delivery,
}

impl Outcome {
    /// An answer sent at once that produced no events.
    fn plain(reply: Reply) -> Self {
        Self {
            reply,
            events: Vec::new(),
            delivery: Delivery::Now,
        }
    }
}

/// `POST /v1/payment_intents`.
async fn create_intent(
    State(app): State<App>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = parse_form(&body);
    // Stripe saves nothing for a request that fails validation, so this comes before the key.
    let create = match CreateParams::from_params(&params) {
        Ok(create) => create,
        Err(reply) => return reply.into_response(false),
    };
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(reply) => return reply.into_response(false),
    };
    let fingerprint = Fingerprint {
        route: "POST /v1/payment_intents".to_owned(),
        params,
    };
    let ticket = match claim(&app, key.as_deref(), &fingerprint) {
        Ok(ticket) => ticket,
        Err(preempted) => return preempted.into_response(),
    };

    let outcome = run_create(&app, create, key);
    if let Some(ticket) = ticket {
        ticket.complete(&outcome.reply);
    }
    app.webhooks.send(outcome.events);

    match outcome.delivery {
        Delivery::Now => outcome.reply.into_response(false),
        Delivery::Sever => {
            tracing::info!(remote = %conn.remote, "dropping the response on purpose");
            conn.sever();
            // Returned only because a handler must return something; it is never written.
            outcome.reply.into_response(false)
        }
        Delivery::After(delay) => {
            let mut stopping = app.stopping.clone();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stopping.wait_for(|stopping| *stopping) => {}
            }
            outcome.reply.into_response(false)
        }
    }
}

/// Creates the PaymentIntent a validated request asks for. Synchronous on purpose: see the
/// module docs.
fn run_create(app: &App, create: CreateParams, key: Option<String>) -> Outcome {
    let behaviour = if create.confirm {
        behaviour_for(&create.payment_method)
    } else {
        // Not confirmed: nothing is attempted, so the token does not matter yet.
        Behaviour::Approve
    };
    let mut intent = Intent {
        id: new_id("pi"),
        amount: create.amount,
        currency: create.currency,
        status: Status::RequiresConfirmation,
        payment_method: create.payment_method,
        metadata: create.metadata,
        idempotency_key: key,
        created: now_epoch_s(),
        latest_charge: None,
        last_payment_error: None,
        cancellation_reason: None,
    };
    if !create.confirm {
        app.store.insert(intent.clone());
        tracing::info!(id = %intent.id, "payment intent created unconfirmed");
        return Outcome::plain(Reply::json(StatusCode::OK, &intent.to_json()));
    }

    let delivery = match behaviour {
        Behaviour::Approve => Delivery::Now,
        Behaviour::LostResponse => Delivery::Sever,
        Behaviour::Slow => Delivery::After(app.slow_delay),
        Behaviour::Decline(decline) => return decline_intent(app, intent, decline),
        Behaviour::ErrorBeforeCharge => {
            tracing::info!(token = %intent.payment_method, "failing before the charge on purpose");
            return Outcome::plain(reply::api_error(
                "An unexpected error occurred before the charge was attempted (fake PSP: \
                 pm_fake_error_before_charge). Nothing was charged; the request can be retried.",
            ));
        }
        Behaviour::Unknown => {
            return Outcome::plain(reply::invalid_request(
                Some("resource_missing"),
                Some("payment_method"),
                &format!("No such PaymentMethod: '{}'", intent.payment_method),
            ));
        }
    };
    intent.status = Status::Succeeded;
    intent.latest_charge = Some(new_id("ch"));
    app.store.insert(intent.clone());
    tracing::info!(id = %intent.id, token = %intent.payment_method, amount = intent.amount, "charge succeeded");
    Outcome {
        reply: Reply::json(StatusCode::OK, &intent.to_json()),
        events: vec![Event::new("payment_intent.succeeded", &intent)],
        delivery,
    }
}

/// Records a declined PaymentIntent and answers 402 with it, as Stripe does.
fn decline_intent(app: &App, mut intent: Intent, decline: Decline) -> Outcome {
    let charge = new_id("ch");
    intent.status = Status::RequiresPaymentMethod;
    intent.latest_charge = Some(charge.clone());
    intent.last_payment_error = Some(json!({
        "type": "card_error",
        "code": "card_declined",
        "decline_code": decline.decline_code,
        "message": decline.message,
        "charge": charge,
    }));
    app.store.insert(intent.clone());
    tracing::info!(id = %intent.id, decline_code = decline.decline_code, "charge declined");
    Outcome {
        reply: reply::card_declined(
            decline.decline_code,
            decline.message,
            Some(&charge),
            intent.to_json(),
        ),
        events: vec![Event::new("payment_intent.payment_failed", &intent)],
        delivery: Delivery::Now,
    }
}

/// `GET /v1/payment_intents/{id}`.
async fn get_intent(State(app): State<App>, Path(id): Path<String>) -> Response {
    match app.store.get(&id) {
        Some(intent) => Reply::json(StatusCode::OK, &intent.to_json()),
        None => no_such_intent(&id),
    }
    .into_response(false)
}

/// `GET /v1/payment_intents/search?query=metadata['<k>']:'<v>'`.
async fn search_intents(State(app): State<App>, RawQuery(query): RawQuery) -> Response {
    let params = parse_form(query.unwrap_or_default().as_bytes());
    let Some(query) = params.get("query").filter(|q| !q.is_empty()) else {
        return reply::parameter_missing("query").into_response(false);
    };
    let Some((key, value)) = parse_metadata_query(query) else {
        return reply::invalid_request(
            Some("parameter_invalid"),
            Some("query"),
            &format!(
                "The fake PSP only understands queries of the form metadata['key']:'value'; \
                 got: {query}"
            ),
        )
        .into_response(false);
    };
    let data: Vec<_> = app
        .store
        .search_metadata(&key, &value)
        .iter()
        .map(Intent::to_json)
        .collect();
    let body = json!({
        "object": "search_result",
        "data": data,
        "has_more": false,
        "next_page": null,
        "url": "/v1/payment_intents/search",
    });
    Reply::json(StatusCode::OK, &body).into_response(false)
}

/// `POST /v1/payment_intents/{id}/cancel`.
async fn cancel_intent(
    State(app): State<App>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = parse_form(&body);
    let reason = match optional_enum(
        &params,
        "cancellation_reason",
        &[
            "duplicate",
            "fraudulent",
            "requested_by_customer",
            "abandoned",
        ],
    ) {
        Ok(reason) => reason.map(str::to_owned),
        Err(reply) => return reply.into_response(false),
    };
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(reply) => return reply.into_response(false),
    };
    let fingerprint = Fingerprint {
        route: format!("POST /v1/payment_intents/{id}/cancel"),
        params,
    };
    let ticket = match claim(&app, key.as_deref(), &fingerprint) {
        Ok(ticket) => ticket,
        Err(preempted) => return preempted.into_response(),
    };

    let (reply, events) = match app.store.cancel(&id, reason.as_deref()) {
        Ok(intent) => {
            tracing::info!(id = %intent.id, "payment intent canceled");
            (
                Reply::json(StatusCode::OK, &intent.to_json()),
                vec![Event::new("payment_intent.canceled", &intent)],
            )
        }
        Err(CancelError::NotFound) => (no_such_intent(&id), Vec::new()),
        Err(CancelError::UnexpectedState(intent)) => {
            let message = format!(
                "You cannot cancel this PaymentIntent because it has a status of {}. Only a \
                 PaymentIntent with one of the following statuses may be canceled: \
                 requires_payment_method, requires_capture, requires_confirmation, \
                 requires_action, processing.",
                intent.status.as_str()
            );
            (
                reply::unexpected_state(&message, intent.to_json()),
                Vec::new(),
            )
        }
    };
    if let Some(ticket) = ticket {
        ticket.complete(&reply);
    }
    app.webhooks.send(events);
    reply.into_response(false)
}

/// `GET /_fake/charges`: every PaymentIntent in creation order. No auth, and not counted as a
/// PSP request: it is the test's window into the PSP, not part of the wire protocol.
async fn fake_charges(State(app): State<App>) -> Response {
    Json(app.store.charges()).into_response()
}

/// Anything else, answered in Stripe's error shape.
async fn unknown_route(method: Method, request: Request) -> Response {
    reply::resource_missing(
        "url",
        &format!(
            "Unrecognized request URL ({method}: {}).",
            request.uri().path()
        ),
    )
    .into_response(false)
}

/// The `Idempotency-Key` header, if any.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Reply> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key) if !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LEN => {
            Ok(Some(key.to_owned()))
        }
        _ => Err(reply::invalid_request(
            None,
            None,
            &format!(
                "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters."
            ),
        )),
    }
}

/// An answer given instead of running the request: a replay or an idempotency refusal.
#[derive(Debug)]
struct Preempted {
    reply: Reply,
    replayed: bool,
}

impl IntoResponse for Preempted {
    fn into_response(self) -> Response {
        self.reply.into_response(self.replayed)
    }
}

/// Presents the key, if there is one. `Ok(Some(ticket))`: run the request and settle the
/// ticket; `Ok(None)`: no key, just run it; `Err`: answer with this instead.
fn claim(
    app: &App,
    key: Option<&str>,
    fingerprint: &Fingerprint,
) -> Result<Option<KeyTicket>, Preempted> {
    let Some(key) = key else {
        return Ok(None);
    };
    let (reply, replayed) = match app.store.claim(key, fingerprint) {
        Claim::Fresh(ticket) => return Ok(Some(ticket)),
        Claim::Replay(reply) => {
            tracing::debug!(key, status = %reply.status, "idempotent replay");
            (reply, true)
        }
        Claim::Mismatch => (reply::idempotency_mismatch(key), false),
        Claim::InUse => (reply::idempotency_in_use(key), false),
    };
    Err(Preempted { reply, replayed })
}

/// 404 for an unknown PaymentIntent id.
fn no_such_intent(id: &str) -> Reply {
    reply::resource_missing("id", &format!("No such payment_intent: '{id}'"))
}

/// Parses `metadata['<key>']:'<value>'` (single or double quotes, optional spaces around `:`).
fn parse_metadata_query(query: &str) -> Option<(String, String)> {
    let rest = query.trim().strip_prefix("metadata[")?;
    let (key, rest) = quoted(rest)?;
    let rest = rest.strip_prefix(']')?.trim_start().strip_prefix(':')?;
    let (value, rest) = quoted(rest.trim_start())?;
    (rest.trim().is_empty() && !key.is_empty()).then(|| (key.to_owned(), value.to_owned()))
}

/// Splits `'text'rest` or `"text"rest` into `text` and `rest`.
fn quoted(input: &str) -> Option<(&str, &str)> {
    let quote = input.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = &input[1..];
    let end = inner.find(quote)?;
    Some((&inner[..end], &inner[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_queries_accept_both_quote_styles() {
        let expected = Some(("payment_id".to_owned(), "pay_1".to_owned()));
        assert_eq!(
            parse_metadata_query("metadata['payment_id']:'pay_1'"),
            expected
        );
        assert_eq!(
            parse_metadata_query("metadata[\"payment_id\"]:\"pay_1\""),
            expected
        );
        assert_eq!(
            parse_metadata_query(" metadata['payment_id'] : 'pay_1' "),
            expected
        );
        assert_eq!(
            parse_metadata_query("metadata['k']:''"),
            Some(("k".to_owned(), String::new()))
        );
    }

    #[test]
    fn other_query_forms_are_refused() {
        for query in [
            "status:'succeeded'",
            "metadata['payment_id']:'pay_1' AND status:'succeeded'",
            "metadata[payment_id]:'pay_1'",
            "metadata['payment_id']:pay_1",
            "metadata['payment_id':'pay_1'",
            "metadata['']:'x'",
            "metadata['a\"]:'x'",
        ] {
            assert_eq!(parse_metadata_query(query), None, "{query}");
        }
    }
}
