//! The HTTP surface, a thin layer over the [model](crate::model): every request except
//! the test controls and customer pages under `/_fake/` (the latter go to
//! [`FakeModel::action_page`]) is handed to [`FakeModel::handle`] as it came off the wire, and the
//! model's answer is written back — at once, after the slow delay, or not at all — while its
//! events go to webhook delivery.
//!
//! The model call is synchronous and comes before the handler's first `.await`, so a client that
//! disconnects mid-request can never leave a charge made but not stored under its key.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use tokio::sync::{watch, Notify};

use crate::conn::ConnHandle;
use crate::faces::TWOC2P_ACTION_PATH;
use crate::model::{Delivery, FakeModel, PageAnswer, WireAnswer, WireRequest};
use crate::paypal_signing::{PayPalSigner, PAYPAL_CERT_PATH};
use crate::provider::Provider;
use crate::webhooks::Webhooks;

/// The header Stripe sets on a response that was replayed from the idempotency cache.
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// `GET`: the 2C2P face's maintenance keys, the merchant's side.
const TWOC2P_KEYS_PATH: &str = "/_fake/2c2p/keys";

/// `GET`: the 2C2P face's maintenance calls.
const TWOC2P_ACTIONS_PATH: &str = "/_fake/2c2p/actions";

/// What every handler shares.
#[derive(Clone, Debug)]
pub(crate) struct App {
    pub(crate) model: Arc<FakeModel>,
    pub(crate) webhooks: Arc<Webhooks>,
    /// Wakes the ticker after each request, which may have scheduled a time-driven transition.
    pub(crate) ticker: Arc<Notify>,
    /// Turns `true` when the server is stopping, so a held-back `pm_fake_slow` answer does not
    /// keep a graceful shutdown waiting.
    pub(crate) stopping: watch::Receiver<bool>,
    /// PayPal face only: the key webhooks are signed with, whose certificate is served.
    pub(crate) paypal_signer: Option<Arc<PayPalSigner>>,
}

/// The router: the test-inspection endpoints, and the model for everything else.
pub(crate) fn router(app: App) -> Router {
    Router::new()
        .route("/_fake/charges", get(fake_charges))
        .route("/_fake/refunds", get(fake_refunds))
        .route("/_fake/webhooks/hold", post(hold_webhooks))
        .route("/_fake/webhooks/release", post(release_webhooks))
        .route(
            "/_fake/authenticate/{id}",
            get(show_action_page).post(answer_action_page),
        )
        .route(PAYPAL_CERT_PATH, get(paypal_certificate))
        .route(TWOC2P_KEYS_PATH, get(twoc2p_keys))
        .route(TWOC2P_ACTIONS_PATH, get(twoc2p_actions))
        .fallback(wire)
        .method_not_allowed_fallback(wire)
        .with_state(app)
}

/// Now, in epoch ms: the model's time when it runs behind the HTTP server.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Any request for the model: parse HTTP → model → write the answer, deliver the webhooks.
async fn wire(
    State(app): State<App>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header_text = |name: &str| headers.get(name).map(|value| value.to_str().unwrap_or(""));
    // PayPal names its idempotency key `PayPal-Request-Id`; the model takes it as the key.
    let key_header = match app.model.provider() {
        Provider::PayPal => "paypal-request-id",
        _ => "idempotency-key",
    };
    // 2C2P's Payment Maintenance API answers a bare JWS (or a 401's text), not JSON.
    let content_type =
        if app.model.provider() == Provider::TwoC2p && uri.path() == TWOC2P_ACTION_PATH {
            "text/plain"
        } else {
            "application/json"
        };
    let request = WireRequest {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query(),
        authorization: header_text(header::AUTHORIZATION.as_str()),
        // A key that is not visible ASCII arrives empty, which the model refuses as invalid.
        idempotency_key: header_text(key_header),
        prefer: header_text("prefer"),
        body: &body,
    };
    let WireAnswer {
        status,
        body,
        replayed,
        delivery,
        events,
    } = app.model.handle(&request, now_ms());
    app.ticker.notify_one();
    app.webhooks.send(events);
    if replayed {
        tracing::debug!(status, "idempotent replay");
    }
    let response = respond(status, body, replayed, content_type);
    match delivery {
        Delivery::Now => response,
        Delivery::Sever => {
            tracing::info!(remote = %conn.remote, "dropping the response on purpose");
            conn.sever();
            // Returned only because a handler must return something; it is never written.
            response
        }
        Delivery::After(delay) => {
            let mut stopping = app.stopping.clone();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = stopping.wait_for(|stopping| *stopping) => {}
            }
            response
        }
    }
}

/// The HTTP response for a model answer, of `content_type`; `replayed` adds
/// `Idempotent-Replayed: true`.
fn respond(status: u16, body: String, replayed: bool, content_type: &'static str) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// `GET /_fake/authenticate/{id}`: the page where the customer completes or fails the
/// authentication a PaymentIntent waits for. No auth, not counted: the customer's browser, not
/// the merchant, comes here.
async fn show_action_page(State(app): State<App>, Path(id): Path<String>) -> Response {
    let page = app.model.action_page(&id, None, now_ms());
    deliver_page(&app, page)
}

/// `POST /_fake/authenticate/{id}` (`result=complete|fail`, form-encoded): the customer's
/// answer, which moves the PaymentIntent on once and redirects to its `return_url`.
async fn answer_action_page(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let page = app.model.action_page(&id, Some(&body), now_ms());
    deliver_page(&app, page)
}

/// Sends a page's events and writes it: HTML, with `Location` on a redirect.
fn deliver_page(app: &App, page: PageAnswer) -> Response {
    let PageAnswer {
        status,
        location,
        html,
        events,
    } = page;
    app.ticker.notify_one();
    app.webhooks.send(events);
    let mut response = Response::new(Body::from(html));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Some(location) = location.and_then(|url| HeaderValue::from_str(&url).ok()) {
        headers.insert(header::LOCATION, location);
    }
    response
}

/// `GET /_fake/paypal/cert.pem`: the PayPal face's certificate (`PAYPAL-CERT-URL`), PEM. No
/// auth, not counted; 404 on the other faces.
async fn paypal_certificate(State(app): State<App>) -> Response {
    match &app.paypal_signer {
        Some(signer) => {
            let mut response = Response::new(Body::from(signer.certificate_pem().to_owned()));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-pem-file"),
            );
            response
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /_fake/2c2p/keys`: the 2C2P face's maintenance keys, the merchant's side, as
/// `{"merchant_private_key", "twoc2p_public_key", "action_url"}` (standard base64 of PKCS#8 and
/// SPKI DER; the private key `null` if the fake was not given it). Test keys only. No auth, not
/// counted; 404 on the other faces.
async fn twoc2p_keys(State(app): State<App>) -> Response {
    match app.model.twoc2p_keys() {
        Some(keys) => Json(serde_json::json!({
            "merchant_private_key": keys
                .merchant_private_key_pkcs8
                .map(|der| STANDARD.encode(der)),
            "twoc2p_public_key": STANDARD.encode(&keys.twoc2p_public_key_spki),
            "action_url": keys.action_url,
        }))
        .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /_fake/2c2p/actions`: every 2C2P maintenance call in order,
/// `[{processType, invoiceNo, actionAmount, respCode, httpStatus}]`. No auth, not counted; 404
/// on the other faces.
async fn twoc2p_actions(State(app): State<App>) -> Response {
    match app.model.twoc2p_actions() {
        Some(actions) => Json(actions).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /_fake/charges`: every PaymentIntent in creation order. No auth, and not counted as a
/// PSP request: it is the test's window into the PSP, not part of the wire protocol.
async fn fake_charges(State(app): State<App>) -> Response {
    Json(app.model.charges()).into_response()
}

/// `GET /_fake/refunds`: every Refund in creation order, as it is now. No auth, not counted.
async fn fake_refunds(State(app): State<App>) -> Response {
    Json(app.model.refunds()).into_response()
}

/// `POST /_fake/webhooks/hold`: no webhook is sent until the release. No auth, not counted.
async fn hold_webhooks(State(app): State<App>) -> StatusCode {
    app.webhooks.hold(true);
    StatusCode::NO_CONTENT
}

/// `POST /_fake/webhooks/release`: what was held goes out, in order. No auth, not counted.
async fn release_webhooks(State(app): State<App>) -> StatusCode {
    app.webhooks.hold(false);
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replayed_responses_carry_the_header() {
        let response = respond(400, "{}".to_owned(), true, "application/json");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers().get(IDEMPOTENT_REPLAYED),
            Some(&HeaderValue::from_static("true"))
        );
        let fresh = respond(200, "{}".to_owned(), false, "application/json");
        assert!(fresh.headers().get(IDEMPOTENT_REPLAYED).is_none());
        assert_eq!(
            fresh.headers().get(header::CONTENT_TYPE),
            Some(&HeaderValue::from_static("application/json"))
        );
    }

    #[tokio::test]
    async fn the_2c2p_face_serves_its_keys_and_answers_the_action_endpoint_in_plain_text() {
        use crate::{FakePsp, FakePspConfig, TwoC2pMaintenanceKeys};
        let keys = TwoC2pMaintenanceKeys::generate().expect("RSA keys");
        let config = FakePspConfig {
            twoc2p_maintenance_keys: Some(keys.clone()),
            ..FakePspConfig::twoc2p()
        };
        let psp = FakePsp::start(config, ([127, 0, 0, 1], 0).into())
            .await
            .expect("started");
        let client = reqwest::Client::new();
        let served: serde_json::Value = client
            .get(format!("{}{TWOC2P_KEYS_PATH}", psp.base_url()))
            .send()
            .await
            .expect("keys")
            .json()
            .await
            .expect("JSON");
        let action_url = format!("{}{TWOC2P_ACTION_PATH}", psp.base_url());
        let merchant_private = keys
            .merchant_private_key_pkcs8
            .as_ref()
            .map(|der| STANDARD.encode(der));
        assert_eq!(
            served["merchant_private_key"].as_str(),
            merchant_private.as_deref()
        );
        assert_eq!(served["action_url"], action_url.as_str());
        let accessor = psp.twoc2p_keys().expect("2C2P keys");
        assert_eq!(accessor.action_url, action_url);
        assert_eq!(
            served["twoc2p_public_key"],
            STANDARD.encode(&accessor.twoc2p_public_key_spki).as_str()
        );
        assert_eq!(
            accessor.merchant_private_key_pkcs8,
            keys.merchant_private_key_pkcs8
        );
        // An envelope that does not verify: 401, plain text.
        let refused = client
            .post(&action_url)
            .header(header::CONTENT_TYPE, "text/plain")
            .body("a.b.c")
            .send()
            .await
            .expect("answered");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            refused.headers().get(header::CONTENT_TYPE),
            Some(&HeaderValue::from_static("text/plain"))
        );
        assert_eq!(refused.text().await.unwrap_or_default(), "Unauthorized");
        let actions: serde_json::Value = client
            .get(format!("{}{TWOC2P_ACTIONS_PATH}", psp.base_url()))
            .send()
            .await
            .expect("actions")
            .json()
            .await
            .expect("JSON");
        assert_eq!(
            actions,
            serde_json::json!([{"processType": null, "invoiceNo": null, "actionAmount": null,
                                "respCode": null, "httpStatus": 401}])
        );
        assert_eq!(psp.twoc2p_actions().map(|actions| actions.len()), Some(1));
        psp.shutdown().await;

        // Other faces serve neither; bad keys fail the start.
        let stripe = FakePsp::start(FakePspConfig::default(), ([127, 0, 0, 1], 0).into())
            .await
            .expect("started");
        for path in [TWOC2P_KEYS_PATH, TWOC2P_ACTIONS_PATH] {
            let answer = client
                .get(format!("{}{path}", stripe.base_url()))
                .send()
                .await
                .expect("answered");
            assert_eq!(answer.status(), StatusCode::NOT_FOUND, "{path}");
        }
        assert!(stripe.twoc2p_keys().is_none());
        stripe.shutdown().await;
        let bad = FakePspConfig {
            twoc2p_maintenance_keys: Some(TwoC2pMaintenanceKeys {
                twoc2p_private_key_pkcs8: b"not a key".to_vec(),
                ..keys
            }),
            ..FakePspConfig::twoc2p()
        };
        let failed = FakePsp::start(bad, ([127, 0, 0, 1], 0).into()).await;
        assert_eq!(
            failed.map(|_| ()).map_err(|error| error.kind()),
            Err(std::io::ErrorKind::InvalidInput)
        );
    }
}
