//! The PayPal face's rules, each tested through the model as the server and the simulation
//! call it.

use std::cell::RefCell;
use std::time::Duration;

use serde_json::{json, Value};

use super::{json, kinds, model_with, HOUR_MS, T0};
use crate::model::{Delivery, FakeModel, ModelConfig, WireAnswer, WireRequest};
use crate::provider::{Provider, DEFAULT_API_KEY, DEFAULT_PAYPAL_CLIENT_ID};

const ORDERS: &str = "/v2/checkout/orders";
const TOKEN: &str = "/v1/oauth2/token";
const BASE: &str = "http://fake.test";
const RETURN: &str = "https://shop.example/return?step=paid";
const CANCEL: &str = "https://shop.example/cancel";
const DAY_MS: i64 = 24 * HOUR_MS;
const REPRESENTATION: Option<&str> = Some("return=representation");

fn config() -> ModelConfig {
    ModelConfig {
        provider: Provider::PayPal,
        base_url: BASE.to_owned(),
        ..ModelConfig::default()
    }
}

/// `Basic base64(client_id:secret)`.
fn basic(client_id: &str, secret: &str) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{client_id}:{secret}"));
    format!("Basic {encoded}")
}

/// One raw request to the model.
#[allow(clippy::too_many_arguments)]
fn raw(
    model: &FakeModel,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    key: Option<&str>,
    prefer: Option<&str>,
    body: &str,
    now_ms: i64,
) -> WireAnswer {
    model.handle(
        &WireRequest {
            method,
            path,
            query: None,
            authorization,
            idempotency_key: key,
            prefer,
            body: body.as_bytes(),
        },
        now_ms,
    )
}

/// `POST /v1/oauth2/token` with the default client; the access token.
fn token(model: &FakeModel, now_ms: i64) -> String {
    let answer = raw(
        model,
        "POST",
        TOKEN,
        Some(&basic(DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY)),
        None,
        None,
        "grant_type=client_credentials",
        now_ms,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    json(&answer)["access_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A PayPal face and a merchant holding an access token, fetched again when it is about to
/// expire, as payonce's adapter does.
struct PayPal {
    model: FakeModel,
    token: RefCell<(String, i64)>,
}

impl PayPal {
    fn new() -> Self {
        Self::with(config())
    }

    fn with(config: ModelConfig) -> Self {
        let model = model_with(config);
        let token = token(&model, T0);
        Self {
            model,
            token: RefCell::new((token, T0)),
        }
    }

    fn bearer(&self, now_ms: i64) -> String {
        let mut held = self.token.borrow_mut();
        if now_ms - held.1 > 8 * HOUR_MS {
            *held = (token(&self.model, now_ms), now_ms);
        }
        format!("Bearer {}", held.0)
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        prefer: Option<&str>,
        body: &str,
        now_ms: i64,
    ) -> WireAnswer {
        let bearer = self.bearer(now_ms);
        raw(
            &self.model,
            method,
            path,
            Some(&bearer),
            key,
            prefer,
            body,
            now_ms,
        )
    }

    /// A POST as the adapter sends it: `Prefer: return=representation`, JSON.
    fn post(&self, path: &str, key: Option<&str>, body: &Value, now_ms: i64) -> WireAnswer {
        self.call("POST", path, key, REPRESENTATION, &body.to_string(), now_ms)
    }

    fn get(&self, path: &str, now_ms: i64) -> WireAnswer {
        self.call("GET", path, None, None, "", now_ms)
    }

    /// Creates an order under `key`; its answer and id.
    fn create(&self, key: &str, body: &Value, now_ms: i64) -> (WireAnswer, String) {
        let answer = self.post(ORDERS, Some(key), body, now_ms);
        let id = json(&answer)["id"].as_str().unwrap_or_default().to_owned();
        (answer, id)
    }

    fn order(&self, id: &str, now_ms: i64) -> Value {
        let answer = self.get(&format!("{ORDERS}/{id}"), now_ms);
        assert_eq!(answer.status, 200, "{}", answer.body);
        json(&answer)
    }

    /// `POST /v2/checkout/orders/{id}/<action>` with `{}` under `key`.
    fn act(&self, id: &str, action: &str, key: &str, now_ms: i64) -> WireAnswer {
        self.post(
            &format!("{ORDERS}/{id}/{action}"),
            Some(key),
            &json!({}),
            now_ms,
        )
    }

    /// The payer's answer on the fake's page: `complete` or `fail`.
    fn page(&self, id: &str, result: &str, now_ms: i64) -> crate::model::PageAnswer {
        self.model
            .action_page(id, Some(format!("result={result}").as_bytes()), now_ms)
    }
}

/// A create body as payonce's adapter sends it: USD 30.00 for payonce payment `payment_id`.
fn order_body(intent: &str, payment_id: &str, source: Value) -> Value {
    json!({
        "intent": intent,
        "purchase_units": [{
            "custom_id": payment_id,
            "invoice_id": payment_id,
            "amount": {"currency_code": "USD", "value": "30.00"},
        }],
        "payment_source": source,
    })
}

fn card(token: &str) -> Value {
    json!({"card": {"vault_id": token}})
}

fn card_with_return(token: &str) -> Value {
    json!({"card": {"vault_id": token, "experience_context": {"return_url": RETURN, "cancel_url": CANCEL}}})
}

fn wallet() -> Value {
    json!({"paypal": {"experience_context": {"return_url": RETURN, "cancel_url": CANCEL, "user_action": "PAY_NOW"}}})
}

/// `(status, name, issue)` of an error answer; its details hold exactly one issue.
fn refusal(answer: &WireAnswer) -> (u16, String, String) {
    let body = json(answer);
    assert_eq!(
        body["details"].as_array().map(Vec::len),
        Some(1),
        "{}",
        answer.body
    );
    (
        answer.status,
        body["name"].as_str().unwrap_or_default().to_owned(),
        body["details"][0]["issue"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn issue(answer: &WireAnswer) -> (u16, String) {
    let (status, _, issue) = refusal(answer);
    (status, issue)
}

fn unit(order: &Value) -> &Value {
    &order["purchase_units"][0]
}

fn capture_of(order: &Value) -> &Value {
    &unit(order)["payments"]["captures"][0]
}

fn authorization_of(order: &Value) -> &Value {
    &unit(order)["payments"]["authorizations"][0]
}

fn link<'v>(object: &'v Value, rel: &str) -> Option<&'v str> {
    object["links"]
        .as_array()?
        .iter()
        .find(|link| link["rel"] == rel)
        .and_then(|link| link["href"].as_str())
}

fn rels(object: &Value) -> Vec<String> {
    object["links"]
        .as_array()
        .map(|links| {
            links
                .iter()
                .filter_map(|link| link["rel"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn event_json(answer_events: &[crate::model::ModelEvent], index: usize) -> Value {
    serde_json::from_str(&answer_events[index].body).unwrap_or(Value::Null)
}

/// Whether `id` looks like a PayPal id: 17 upper-case letters and digits.
fn is_paypal_id(id: &str) -> bool {
    id.len() == 17
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
}

// OAuth and authentication.

#[test]
fn the_client_credentials_buy_a_bearer_token_and_wrong_ones_are_401_invalid_client() {
    let model = model_with(config());
    // WHEN the token endpoint is called with the right client id and secret
    let ok = raw(
        &model,
        "POST",
        TOKEN,
        Some(&basic(DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY)),
        None,
        None,
        "grant_type=client_credentials",
        T0,
    );
    // THEN 200 with PayPal's fields, the token living paypal_token_lifetime
    assert_eq!(ok.status, 200, "{}", ok.body);
    let body = json(&ok);
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 32_400);
    assert!(body["access_token"]
        .as_str()
        .is_some_and(|t| t.starts_with("A21AA") && t.len() > 40));
    assert!(body["scope"].is_string() && body["app_id"].is_string() && body["nonce"].is_string());
    // AND wrong credentials, another scheme, or none are 401 invalid_client
    for authorization in [
        Some(basic(DEFAULT_PAYPAL_CLIENT_ID, "wrong")),
        Some(basic("someone-else", DEFAULT_API_KEY)),
        Some(format!("Bearer {DEFAULT_API_KEY}")),
        None,
    ] {
        let refused = raw(
            &model,
            "POST",
            TOKEN,
            authorization.as_deref(),
            None,
            None,
            "grant_type=client_credentials",
            T0,
        );
        assert_eq!(refused.status, 401, "{authorization:?}");
        assert_eq!(
            json(&refused),
            json!({"error": "invalid_client", "error_description": "Client Authentication failed"})
        );
    }
    // AND another grant type is 400 unsupported_grant_type
    let grant = raw(
        &model,
        "POST",
        TOKEN,
        Some(&basic(DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY)),
        None,
        None,
        "grant_type=password",
        T0,
    );
    assert_eq!(
        (grant.status, json(&grant)["error"].as_str()),
        (400, Some("unsupported_grant_type"))
    );
    // AND every token call was counted
    assert_eq!(model.requests_seen(), 6);
}

#[test]
fn rest_calls_need_a_live_bearer_token_else_401_authentication_failure() {
    let config = ModelConfig {
        paypal_token_lifetime: Duration::from_secs(60),
        ..config()
    };
    let model = model_with(config);
    // GIVEN a token that lives 60 s
    let live = format!("Bearer {}", token(&model, T0));
    let body = order_body("CAPTURE", "pay_1", card("pm_card_visa")).to_string();
    // WHEN REST calls come without a token, with an unknown one, with the client secret, with
    // Basic credentials, or with a token past its lifetime
    let basic_auth = basic(DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY);
    let secret = format!("Bearer {DEFAULT_API_KEY}");
    let cases: [(Option<&str>, i64); 5] = [
        (None, T0),
        (Some("Bearer A21AAunknown"), T0),
        (Some(&secret), T0),
        (Some(&basic_auth), T0),
        (Some(&live), T0 + 60_000),
    ];
    for (authorization, now_ms) in cases {
        for (method, path) in [("POST", ORDERS), ("GET", "/v2/nowhere")] {
            let answer = raw(
                &model,
                method,
                path,
                authorization,
                Some("k"),
                REPRESENTATION,
                &body,
                now_ms,
            );
            // THEN 401 AUTHENTICATION_FAILURE before anything else is looked at
            assert_eq!(answer.status, 401, "{authorization:?} {path}");
            let refused = json(&answer);
            assert_eq!(refused["name"], "AUTHENTICATION_FAILURE");
            assert!(refused["debug_id"].as_str().is_some_and(|d| d.len() == 13));
        }
    }
    // AND nothing was created; every request was counted (the token call too)
    assert!(model.charges().is_empty());
    assert_eq!(model.requests_seen(), 11);
    // AND a live token works until its last millisecond, the scheme in any case
    let fresh = format!("bearer {}", token(&model, T0 + 60_000));
    let ok = raw(
        &model,
        "POST",
        ORDERS,
        Some(&fresh),
        Some("k"),
        REPRESENTATION,
        &body,
        T0 + 119_999,
    );
    assert_eq!(ok.status, 201, "{}", ok.body);
}

// Create: a one-step vaulted capture.

#[test]
fn a_one_step_vaulted_capture_completes_the_order_with_a_completed_capture() {
    let pp = PayPal::new();
    // WHEN payonce creates a CAPTURE order with a vaulted card
    let body = order_body("CAPTURE", "pay_1", card("pm_card_visa"));
    let (answer, id) = pp.create("payonce-charge-pay_1", &body, T0 + 577);
    // THEN 201 COMPLETED, its capture COMPLETED, with PayPal's fields
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert!(!answer.replayed);
    assert_eq!(answer.delivery, Delivery::Now);
    let order = json(&answer);
    assert!(is_paypal_id(&id), "{id}");
    assert_eq!(order["status"], "COMPLETED");
    assert_eq!(order["intent"], "CAPTURE");
    assert_eq!(order["create_time"], "2027-01-15T08:00:00Z");
    assert_eq!(rels(&order), ["self"]);
    assert_eq!(
        link(&order, "self"),
        Some(format!("{BASE}/v2/checkout/orders/{id}").as_str())
    );
    let unit = unit(&order);
    assert_eq!(unit["custom_id"], "pay_1");
    assert_eq!(unit["invoice_id"], "pay_1");
    assert_eq!(unit["reference_id"], "default");
    assert_eq!(
        unit["amount"],
        json!({"currency_code": "USD", "value": "30.00"})
    );
    assert_eq!(order["payment_source"]["card"]["brand"], "VISA");
    assert_eq!(order["payment_source"]["card"]["last_digits"], "4242");
    assert_eq!(
        order["payment_source"]["card"]["attributes"]["vault"]["id"],
        "pm_card_visa"
    );
    let capture = capture_of(&order).clone();
    let capture_id = capture["id"].as_str().unwrap_or_default().to_owned();
    assert!(is_paypal_id(&capture_id));
    assert_eq!(capture["status"], "COMPLETED");
    assert_eq!(capture["final_capture"], true);
    assert_eq!(capture["custom_id"], "pay_1");
    assert_eq!(capture["invoice_id"], "pay_1");
    assert_eq!(rels(&capture), ["self", "refund", "up"]);
    assert_eq!(
        link(&capture, "up"),
        Some(format!("{BASE}/v2/checkout/orders/{id}").as_str())
    );
    assert!(capture.get("supplementary_data").is_none());
    // AND PAYMENT.CAPTURE.COMPLETED carries the capture, tied to the order
    assert_eq!(kinds(&answer.events), ["PAYMENT.CAPTURE.COMPLETED"]);
    let event = event_json(&answer.events, 0);
    assert!(answer.events[0].id.starts_with("WH-") && answer.events[0].id.len() == 38);
    assert_eq!(event["id"], answer.events[0].id.as_str());
    assert_eq!(event["event_version"], "1.0");
    assert_eq!(event["resource_version"], "2.0");
    assert_eq!(event["resource_type"], "capture");
    assert_eq!(event["create_time"], "2027-01-15T08:00:00.577Z");
    assert_eq!(event["resource"]["id"], capture_id.as_str());
    assert_eq!(event["resource"]["custom_id"], "pay_1");
    assert_eq!(
        event["resource"]["supplementary_data"]["related_ids"],
        json!({"order_id": id})
    );
    assert!(event["summary"]
        .as_str()
        .is_some_and(|s| s.contains("30.00 USD")));
    assert_eq!(rels(&event), ["self", "resend"]);
    // AND GET answers the order as it is, and the capture as capture-2, without refunds
    assert_eq!(pp.order(&id, T0 + 1_000), order);
    let got = pp.get(&format!("/v2/payments/captures/{capture_id}"), T0 + 1_000);
    assert_eq!(got.status, 200);
    assert_eq!(json(&got), event["resource"]);
    assert!(json(&got).get("refunds").is_none());
}

#[test]
fn prefer_minimal_is_the_default_and_representation_answers_the_whole_order() {
    let pp = PayPal::new();
    let body =
        |payment_id: &str| order_body("CAPTURE", payment_id, card("pm_card_visa")).to_string();
    // WHEN a create comes without Prefer, with return=minimal, and with return=representation
    let none = pp.call("POST", ORDERS, Some("k1"), None, &body("pay_1"), T0);
    let minimal = pp.call(
        "POST",
        ORDERS,
        Some("k2"),
        Some("return=minimal"),
        &body("pay_2"),
        T0,
    );
    let full = pp.call(
        "POST",
        ORDERS,
        Some("k3"),
        Some("return=representation"),
        &body("pay_3"),
        T0,
    );
    // THEN the first two answer id, status and links only (PayPal's default is minimal)
    for answer in [&none, &minimal] {
        assert_eq!(answer.status, 201);
        let order = json(answer);
        let mut fields: Vec<&String> = order
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        fields.sort();
        assert_eq!(fields, ["id", "links", "status"], "{order}");
        assert_eq!(order["status"], "COMPLETED");
    }
    // AND the third the whole order
    assert!(json(&full)["purchase_units"].is_array());
}

// Validation, before the request id.

#[test]
fn validation_errors_are_answered_before_the_request_id_and_store_nothing() {
    let pp = PayPal::new();
    let base = order_body("CAPTURE", "pay_1", card("pm_card_visa"));
    let with = |pointer: &str, value: Value| {
        let mut body = base.clone();
        if let Some(slot) = body.pointer_mut(pointer) {
            *slot = value;
        }
        body
    };
    let without = |parent: &str, name: &str| {
        let mut body = base.clone();
        if let Some(Value::Object(object)) = body.pointer_mut(parent) {
            object.remove(name);
        }
        body
    };
    let amount = |currency: &str, value: &str| {
        with(
            "/purchase_units/0/amount",
            json!({"currency_code": currency, "value": value}),
        )
    };
    let unit = base["purchase_units"][0].clone();
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            {
                let mut body = base.clone();
                body["application_context"] = json!({});
                body
            },
            400,
            "NOT_SUPPORTED",
        ),
        (without("", "intent"), 400, "MISSING_REQUIRED_PARAMETER"),
        (
            with("/intent", json!("SALE")),
            400,
            "INVALID_PARAMETER_VALUE",
        ),
        (
            without("", "purchase_units"),
            400,
            "MISSING_REQUIRED_PARAMETER",
        ),
        (
            with("/purchase_units", json!([])),
            400,
            "INVALID_ARRAY_MIN_ITEMS",
        ),
        (
            with("/purchase_units", json!(vec![unit.clone(); 11])),
            400,
            "INVALID_ARRAY_MAX_ITEMS",
        ),
        (
            with("/purchase_units", json!([unit.clone(), unit.clone()])),
            400,
            "NOT_SUPPORTED",
        ),
        (
            {
                let mut body = with("/purchase_units", json!([unit.clone(), unit.clone()]));
                body["intent"] = json!("AUTHORIZE");
                body
            },
            422,
            "UNSUPPORTED_INTENT",
        ),
        (
            with("/purchase_units/0/custom_id", json!("x".repeat(128))),
            400,
            "INVALID_STRING_LENGTH",
        ),
        (
            with("/purchase_units/0/invoice_id", json!("")),
            400,
            "INVALID_STRING_LENGTH",
        ),
        (
            {
                let mut body = base.clone();
                body["purchase_units"][0]["soft_descriptor"] = json!("x");
                body
            },
            400,
            "NOT_SUPPORTED",
        ),
        (
            {
                let mut body = base.clone();
                body["purchase_units"][0]["items"] = json!([]);
                body
            },
            400,
            "NOT_SUPPORTED",
        ),
        (
            without("/purchase_units/0", "amount"),
            400,
            "MISSING_REQUIRED_PARAMETER",
        ),
        (amount("USD", "30,00"), 400, "INVALID_PARAMETER_SYNTAX"),
        (
            with("/purchase_units/0/amount/value", json!(30)),
            400,
            "INVALID_PARAMETER_SYNTAX",
        ),
        (amount("US", "30.00"), 400, "INVALID_STRING_LENGTH"),
        (amount("usd", "30.00"), 422, "INVALID_CURRENCY_CODE"),
        (amount("CHF", "30.00"), 422, "INVALID_CURRENCY_CODE"),
        (amount("JPY", "3000.0"), 422, "DECIMALS_NOT_SUPPORTED"),
        (amount("USD", "30.001"), 422, "DECIMAL_PRECISION"),
        (amount("USD", "0.00"), 422, "CANNOT_BE_ZERO_OR_NEGATIVE"),
        (amount("USD", "-1.00"), 422, "CANNOT_BE_ZERO_OR_NEGATIVE"),
        (
            amount("USD", "1000000000000000.00"),
            422,
            "MAX_VALUE_EXCEEDED",
        ),
        (
            with("/payment_source", json!({"card": {}})),
            400,
            "MISSING_REQUIRED_PARAMETER",
        ),
        (
            with(
                "/payment_source",
                json!({"card": {"vault_id": "pm_card_visa", "number": "4111111111111111"}}),
            ),
            400,
            "NOT_SUPPORTED",
        ),
        (
            with("/payment_source", json!({"card": {"vault_id": "pm card"}})),
            400,
            "INVALID_PARAMETER_SYNTAX",
        ),
        (
            with(
                "/payment_source",
                json!({"card": {"vault_id": "pm_card_visa"}, "paypal": {}}),
            ),
            400,
            "INVALID_PARAMETER_VALUE",
        ),
        (
            with("/payment_source", json!({"venmo": {}})),
            400,
            "NOT_SUPPORTED",
        ),
        (
            with(
                "/payment_source",
                json!({"card": {"vault_id": "pm_card_visa", "experience_context": {"return_url": "not a url"}}}),
            ),
            400,
            "INVALID_PARAMETER_SYNTAX",
        ),
        (
            with(
                "/payment_source",
                json!({"paypal": {"experience_context": {"user_action": "BUY"}}}),
            ),
            400,
            "INVALID_PARAMETER_VALUE",
        ),
    ];
    for (body, status, expected) in &cases {
        // WHEN a create with this body comes under a fresh request id
        let answer = pp.post(ORDERS, Some("payonce-charge-pay_1"), body, T0);
        // THEN it is refused with PayPal's issue
        assert_eq!(
            (answer.status, issue(&answer).1.as_str()),
            (*status, *expected),
            "{body}: {}",
            answer.body
        );
        let name = json(&answer)["name"].clone();
        assert_eq!(
            name,
            if *status == 400 {
                "INVALID_REQUEST"
            } else {
                "UNPROCESSABLE_ENTITY"
            }
        );
    }
    // AND a body that is not JSON is 400 MALFORMED_REQUEST_JSON
    let garbled = pp.call("POST", ORDERS, Some("payonce-charge-pay_1"), None, "{", T0);
    assert_eq!(issue(&garbled), (400, "MALFORMED_REQUEST_JSON".to_owned()));
    // AND the error body has PayPal's shape: a pointer, the offending value, a link
    let refused = json(&pp.post(
        ORDERS,
        Some("payonce-charge-pay_1"),
        &amount("USD", "30.001"),
        T0,
    ));
    assert_eq!(
        refused["message"]
            .as_str()
            .map(|m| m.starts_with("The requested action")),
        Some(true)
    );
    let detail = &refused["details"][0];
    assert_eq!(
        detail["field"],
        "/purchase_units/@reference_id=='default'/amount/value"
    );
    assert_eq!(detail["value"], "30.001");
    assert_eq!(detail["location"], "body");
    assert!(detail["description"].is_string());
    assert_eq!(refused["links"][0]["rel"], "information_link");
    // AND nothing was stored under the id: the valid body now creates under it, 201
    assert!(pp.model.charges().is_empty());
    let (created, _) = pp.create("payonce-charge-pay_1", &base, T0);
    assert_eq!(created.status, 201, "{}", created.body);
}

#[test]
fn the_request_id_is_1_to_108_characters_and_required_with_a_payment_source() {
    let pp = PayPal::new();
    let body = order_body("CAPTURE", "pay_1", card("pm_card_visa"));
    // WHEN the PayPal-Request-Id is empty or 109 characters
    for key in [String::new(), "k".repeat(109)] {
        let answer = pp.post(ORDERS, Some(&key), &body, T0);
        // THEN 400 INVALID_REQUEST INVALID_STRING_LENGTH on the header
        assert_eq!(
            refusal(&answer),
            (
                400,
                "INVALID_REQUEST".to_owned(),
                "INVALID_STRING_LENGTH".to_owned()
            )
        );
        assert_eq!(json(&answer)["details"][0]["field"], "PayPal-Request-Id");
    }
    // AND 108 characters are fine
    let (ok, _) = pp.create(&"k".repeat(108), &body, T0);
    assert_eq!(ok.status, 201);
    // WHEN a create with a payment_source comes without one
    let missing = pp.post(
        ORDERS,
        None,
        &order_body("CAPTURE", "pay_2", card("pm_card_visa")),
        T0,
    );
    // THEN 400 PAYPAL_REQUEST_ID_REQUIRED, and nothing is made
    assert_eq!(
        issue(&missing),
        (400, "PAYPAL_REQUEST_ID_REQUIRED".to_owned())
    );
    assert_eq!(pp.model.charges().len(), 1);
    // AND without a payment_source the id is optional: an order waiting for its buyer
    let mut bare = order_body("CAPTURE", "pay_3", Value::Null);
    bare.as_object_mut().map(|o| o.remove("payment_source"));
    let created = pp.post(ORDERS, None, &bare, T0);
    assert_eq!(created.status, 201, "{}", created.body);
    let order = json(&created);
    assert_eq!(order["status"], "CREATED");
    assert_eq!(rels(&order), ["self", "approve", "update", "capture"]);
    assert!(order.get("payment_source").is_none());
}

// PayPal-Request-Id: replays, reuse, flight, retention.

#[test]
fn a_replay_answers_200_with_the_latest_state_of_what_the_first_request_made() {
    let pp = PayPal::new();
    let body = order_body("AUTHORIZE", "pay_1", card("pm_card_visa"));
    // GIVEN an AUTHORIZE order made at once, its authorization CREATED
    let (first, id) = pp.create("payonce-charge-pay_1", &body, T0);
    assert_eq!(first.status, 201);
    let authorization = authorization_of(&json(&first))["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(authorization_of(&json(&first))["status"], "CREATED");
    // AND its authorization voided since
    let void = pp.call(
        "POST",
        &format!("/v2/payments/authorizations/{authorization}/void"),
        None,
        None,
        "",
        T0 + 1_000,
    );
    assert_eq!(void.status, 204);
    // WHEN the create is sent again under its id, with the same body in another key order
    let mut reordered = serde_json::Map::new();
    for name in ["payment_source", "purchase_units", "intent"] {
        reordered.insert(name.to_owned(), body[name].clone());
    }
    let replay = pp.post(
        ORDERS,
        Some("payonce-charge-pay_1"),
        &Value::Object(reordered),
        T0 + 2_000,
    );
    // THEN 200 (not 201), the same order as it is now: VOIDED, no event, nothing new
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert!(replay.replayed);
    assert!(replay.events.is_empty());
    let latest = json(&replay);
    assert_eq!(latest["id"], id.as_str());
    assert_eq!(latest["status"], "VOIDED");
    assert_eq!(authorization_of(&latest)["status"], "VOIDED");
    assert_eq!(latest, pp.order(&id, T0 + 2_000));
    assert_eq!(pp.model.charges().len(), 1);
    // AND the replay answers in its own Prefer
    let minimal = pp.call(
        "POST",
        ORDERS,
        Some("payonce-charge-pay_1"),
        None,
        &body.to_string(),
        T0 + 3_000,
    );
    assert_eq!(minimal.status, 200);
    assert_eq!(json(&minimal)["status"], "VOIDED");
    assert!(json(&minimal).get("purchase_units").is_none());
}

#[test]
fn a_request_id_with_another_body_or_endpoint_is_422_and_one_in_flight_is_409() {
    let pp = PayPal::new();
    let (first, id) = pp.create(
        "payonce-charge-pay_1",
        &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
        T0,
    );
    assert_eq!(first.status, 201);
    // WHEN the id comes again with another body, or on another endpoint
    let other_body = pp.post(
        ORDERS,
        Some("payonce-charge-pay_1"),
        &order_body("CAPTURE", "pay_1", card("pm_card_mastercard")),
        T0 + 1,
    );
    let other_route = pp.act(&id, "capture", "payonce-charge-pay_1", T0 + 2);
    // THEN 422 PAYPAL_REQUEST_ID_PREVIOUSLY_USED, nothing made
    for answer in [&other_body, &other_route] {
        assert_eq!(
            issue(answer),
            (422, "PAYPAL_REQUEST_ID_PREVIOUSLY_USED".to_owned()),
            "{}",
            answer.body
        );
    }
    assert_eq!(pp.model.charges().len(), 1);
    // WHEN a request with an id is still running
    assert!(pp.model.begin_in_flight("payonce-charge-pay_2"));
    let busy = pp.post(
        ORDERS,
        Some("payonce-charge-pay_2"),
        &order_body("CAPTURE", "pay_2", card("pm_card_visa")),
        T0 + 3,
    );
    // THEN 409 RESOURCE_CONFLICT PREVIOUS_REQUEST_IN_PROGRESS, and once it ends the id works
    assert_eq!(
        refusal(&busy),
        (
            409,
            "RESOURCE_CONFLICT".to_owned(),
            "PREVIOUS_REQUEST_IN_PROGRESS".to_owned()
        )
    );
    assert!(pp.model.end_in_flight("payonce-charge-pay_2"));
    let (after, _) = pp.create(
        "payonce-charge-pay_2",
        &order_body("CAPTURE", "pay_2", card("pm_card_visa")),
        T0 + 4,
    );
    assert_eq!(after.status, 201);
}

#[test]
fn orders_request_ids_are_forgotten_after_their_ttl_and_a_resend_then_creates_anew() {
    for (ttl, label) in [(6 * HOUR_MS, "default 6 h"), (HOUR_MS, "knob 1 h")] {
        let config = ModelConfig {
            paypal_request_id_ttl: Duration::from_millis(u64::try_from(ttl).unwrap_or(0)),
            // Another order with the same invoice id is what this test makes on purpose.
            paypal_unique_invoice_id: false,
            ..config()
        };
        let pp = PayPal::with(config);
        let body = order_body("CAPTURE", "pay_1", card("pm_card_visa"));
        let (first, id) = pp.create("payonce-charge-pay_1", &body, T0);
        assert_eq!(first.status, 201);
        // WHEN the create is re-sent just before the TTL ends
        let (before, again) = pp.create("payonce-charge-pay_1", &body, T0 + ttl - 1);
        // THEN it replays the one order
        assert_eq!(
            (before.status, again.as_str()),
            (200, id.as_str()),
            "{label}"
        );
        // WHEN it is re-sent once the TTL has passed
        let (after, other) = pp.create("payonce-charge-pay_1", &body, T0 + ttl);
        // THEN the id is forgotten: a second order, charged again
        assert_eq!(after.status, 201, "{label}");
        assert_ne!(other, id, "{label}");
        assert_eq!(pp.model.charges().len(), 2, "{label}");
    }
}

#[test]
fn payments_request_ids_are_kept_45_days() {
    let pp = PayPal::new();
    let (created, _) = pp.create(
        "payonce-charge-pay_1",
        &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
        T0,
    );
    let capture = capture_of(&json(&created))["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let refund_path = format!("/v2/payments/captures/{capture}/refund");
    let refund = json!({"amount": {"currency_code": "USD", "value": "10.00"}, "custom_id": "rf_1", "invoice_id": "rf_1"});
    let first = pp.post(&refund_path, Some("payonce-refund-pay_1-1"), &refund, T0);
    assert_eq!(first.status, 201, "{}", first.body);
    // WHEN the refund is re-sent 44 days later
    let replay = pp.post(
        &refund_path,
        Some("payonce-refund-pay_1-1"),
        &refund,
        T0 + 44 * DAY_MS,
    );
    // THEN it answers the one refund, 200
    assert_eq!(replay.status, 200);
    assert_eq!(json(&replay)["id"], json(&first)["id"]);
    assert_eq!(pp.model.refunds().len(), 1);
    // WHEN it is re-sent 45 days after
    let anew = pp.post(
        &refund_path,
        Some("payonce-refund-pay_1-1"),
        &refund,
        T0 + 45 * DAY_MS,
    );
    // THEN the id is forgotten and a second refund is made
    assert_eq!(anew.status, 201);
    assert_ne!(json(&anew)["id"], json(&first)["id"]);
    assert_eq!(pp.model.refunds().len(), 2);
}

// Unique invoice id.

#[test]
fn an_invoice_id_another_order_used_is_422_duplicate_invoice_id_at_create_and_capture() {
    let pp = PayPal::new();
    // GIVEN an order captured for invoice pay_1
    let (first, _) = pp.create(
        "k1",
        &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
        T0,
    );
    assert_eq!(json(&first)["status"], "COMPLETED");
    // WHEN another create names the same invoice id
    let again = pp.post(
        ORDERS,
        Some("k2"),
        &order_body("CAPTURE", "pay_1", card("pm_card_mastercard")),
        T0 + 1,
    );
    // THEN 422 DUPLICATE_INVOICE_ID, nothing made, stored under the id
    assert_eq!(issue(&again), (422, "DUPLICATE_INVOICE_ID".to_owned()));
    assert_eq!(pp.model.charges().len(), 1);
    let replayed = pp.post(
        ORDERS,
        Some("k2"),
        &order_body("CAPTURE", "pay_1", card("pm_card_mastercard")),
        T0 + 2,
    );
    assert_eq!((replayed.status, replayed.replayed), (422, true));
    // GIVEN a declined capture for invoice pay_2: it used nothing
    let (declined, _) = pp.create(
        "k3",
        &order_body("CAPTURE", "pay_2", card("pm_card_visa_chargeDeclined")),
        T0 + 3,
    );
    assert_eq!(capture_of(&json(&declined))["status"], "DECLINED");
    let (retried, _) = pp.create(
        "k4",
        &order_body("CAPTURE", "pay_2", card("pm_card_visa")),
        T0 + 4,
    );
    assert_eq!(json(&retried)["status"], "COMPLETED", "{}", retried.body);
    // GIVEN two waiting orders for invoice pay_3 (buyer approval), both approved
    let (a, a_id) = pp.create("k5", &order_body("CAPTURE", "pay_3", wallet()), T0 + 5);
    let (b, b_id) = pp.create("k6", &order_body("CAPTURE", "pay_3", wallet()), T0 + 6);
    assert_eq!((a.status, b.status), (201, 201));
    assert_eq!(pp.page(&a_id, "complete", T0 + 7).status, 303);
    assert_eq!(pp.page(&b_id, "complete", T0 + 8).status, 303);
    // WHEN the first is captured, then the second
    assert_eq!(pp.act(&a_id, "capture", "c5", T0 + 9).status, 201);
    let second = pp.act(&b_id, "capture", "c6", T0 + 10);
    // THEN the second capture is refused: the check runs when money would move too
    assert_eq!(issue(&second), (422, "DUPLICATE_INVOICE_ID".to_owned()));
    assert_eq!(pp.order(&b_id, T0 + 11)["status"], "APPROVED");
    // AND with the account setting off, a duplicate invoice id is taken
    let lax = PayPal::with(ModelConfig {
        paypal_unique_invoice_id: false,
        ..config()
    });
    for key in ["x1", "x2"] {
        let (answer, _) = lax.create(
            key,
            &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
            T0,
        );
        assert_eq!(answer.status, 201);
    }
}

#[test]
fn an_authorization_capture_uses_its_own_invoice_id_and_voided_authorizations_use_theirs() {
    let pp = PayPal::new();
    // GIVEN an authorization captured under an invoice id of its own
    let (_, authorization) = authorized(&pp, "pay_1", "pm_card_visa", T0);
    let captured = pp.post(
        &format!("/v2/payments/authorizations/{authorization}/capture"),
        Some("c1"),
        &json!({"invoice_id": "inv_capture", "final_capture": true}),
        T0 + 1,
    );
    assert_eq!(json(&captured)["invoice_id"], "inv_capture");
    // WHEN an order names that invoice id
    let again = pp.post(
        ORDERS,
        Some("k2"),
        &order_body("CAPTURE", "inv_capture", card("pm_card_visa")),
        T0 + 2,
    );
    // THEN 422 DUPLICATE_INVOICE_ID
    assert_eq!(issue(&again), (422, "DUPLICATE_INVOICE_ID".to_owned()));
    // AND a voided authorization keeps its invoice id used
    let (_, voided) = authorized(&pp, "pay_3", "pm_card_visa", T0 + 3);
    let void = pp.call(
        "POST",
        &format!("/v2/payments/authorizations/{voided}/void"),
        None,
        None,
        "",
        T0 + 4,
    );
    assert_eq!(void.status, 204);
    let after_void = pp.post(
        ORDERS,
        Some("k4"),
        &order_body("AUTHORIZE", "pay_3", card("pm_card_visa")),
        T0 + 5,
    );
    assert_eq!(issue(&after_void), (422, "DUPLICATE_INVOICE_ID".to_owned()));
}

// Declines, unknown tokens, injected failures.

#[test]
fn a_declining_card_is_a_201_completed_order_carrying_a_declined_capture() {
    let pp = PayPal::new();
    // WHEN a CAPTURE order is made with the declining card
    let (answer, id) = pp.create(
        "k",
        &order_body("CAPTURE", "pay_1", card("pm_card_visa_chargeDeclined")),
        T0,
    );
    // THEN 201, the order COMPLETED, its capture DECLINED with a reason
    assert_eq!(answer.status, 201);
    let order = json(&answer);
    assert_eq!(order["status"], "COMPLETED");
    let capture = capture_of(&order);
    assert_eq!(capture["status"], "DECLINED");
    assert_eq!(
        capture["status_details"]["reason"],
        "DECLINED_BY_RISK_FRAUD_FILTERS"
    );
    assert_eq!(kinds(&answer.events), ["PAYMENT.CAPTURE.DECLINED"]);
    // AND the ledger reads it failed
    let charge = &pp.model.charges()[0];
    assert_eq!(
        (charge.id.as_str(), charge.outcome.as_str()),
        (id.as_str(), "failed")
    );
    // AND a declining card on an AUTHORIZE order is a DENIED authorization, no event
    let (denied, _) = pp.create(
        "k2",
        &order_body("AUTHORIZE", "pay_2", card("pm_card_visa_chargeDeclined")),
        T0,
    );
    assert_eq!(authorization_of(&json(&denied))["status"], "DENIED");
    assert!(denied.events.is_empty());
}

#[test]
fn insufficient_funds_is_422_instrument_declined_with_no_order_and_the_422_is_stored() {
    let pp = PayPal::new();
    let body = order_body(
        "CAPTURE",
        "pay_1",
        card("pm_card_chargeDeclinedInsufficientFunds"),
    );
    // WHEN the create is made
    let answer = pp.post(ORDERS, Some("k"), &body, T0);
    // THEN 422 INSTRUMENT_DECLINED; no order
    assert_eq!(issue(&answer), (422, "INSTRUMENT_DECLINED".to_owned()));
    assert!(pp.model.charges().is_empty());
    assert!(answer.events.is_empty());
    // AND the 422 is what the id answers again
    let replay = pp.post(ORDERS, Some("k"), &body, T0 + 1);
    assert_eq!((replay.status, replay.replayed), (422, true));
    assert_eq!(replay.body, answer.body);
}

#[test]
fn an_unknown_token_is_422_token_id_not_found_and_nothing_is_made() {
    let pp = PayPal::new();
    for (source, field) in [
        (card("pm_card_amex"), "/payment_source/card/vault_id"),
        (
            json!({"paypal": {"vault_id": "nope"}}),
            "/payment_source/paypal/vault_id",
        ),
    ] {
        let answer = pp.post(
            ORDERS,
            Some(field),
            &order_body("CAPTURE", "pay_1", source),
            T0,
        );
        assert_eq!(issue(&answer), (422, "TOKEN_ID_NOT_FOUND".to_owned()));
        assert_eq!(json(&answer)["details"][0]["field"], field);
    }
    assert!(pp.model.charges().is_empty());
}

#[test]
fn an_error_before_the_charge_is_500_and_not_stored_and_a_lost_or_slow_answer_is_misdelivered() {
    let pp = PayPal::new();
    // WHEN the create fails before the charge
    let body = order_body("CAPTURE", "pay_1", card("pm_fake_error_before_charge"));
    let failed = pp.post(ORDERS, Some("k"), &body, T0);
    // THEN 500 INTERNAL_SERVER_ERROR, nothing made or stored: the retry runs again
    assert_eq!(refusal(&failed).0, 500);
    assert_eq!(json(&failed)["name"], "INTERNAL_SERVER_ERROR");
    let again = pp.post(ORDERS, Some("k"), &body, T0 + 1);
    assert_eq!((again.status, again.replayed), (500, false));
    assert!(pp.model.charges().is_empty());
    // WHEN a create's answer is lost
    let lost_body = order_body("CAPTURE", "pay_2", card("pm_fake_lost_response"));
    let (lost, id) = pp.create("lost", &lost_body, T0);
    // THEN the order was made and stored; the answer is cut; the re-send answers it, 200
    assert_eq!(lost.delivery, Delivery::Sever);
    assert_eq!(json(&lost)["status"], "COMPLETED");
    let (resent, same) = pp.create("lost", &lost_body, T0 + 1);
    assert_eq!((resent.status, resent.delivery), (200, Delivery::Now));
    assert_eq!(same, id);
    // AND a slow one is held back slow_delay
    let (slow, _) = pp.create(
        "slow",
        &order_body("CAPTURE", "pay_3", card("pm_fake_slow")),
        T0,
    );
    assert_eq!(slow.delivery, Delivery::After(Duration::from_secs(30)));
    assert_eq!(pp.model.charges().len(), 2);
}

#[test]
fn a_processing_capture_is_pending_then_completes_with_its_events() {
    let pp = PayPal::new();
    // WHEN a CAPTURE order is made with pm_fake_processing
    let (answer, id) = pp.create(
        "k",
        &order_body("CAPTURE", "pay_1", card("pm_fake_processing")),
        T0,
    );
    // THEN COMPLETED with a PENDING capture (PENDING_REVIEW) and PAYMENT.CAPTURE.PENDING
    assert_eq!(answer.status, 201);
    let capture = capture_of(&json(&answer)).clone();
    assert_eq!(capture["status"], "PENDING");
    assert_eq!(capture["status_details"]["reason"], "PENDING_REVIEW");
    assert_eq!(kinds(&answer.events), ["PAYMENT.CAPTURE.PENDING"]);
    // AND after processing_for it is COMPLETED, with PAYMENT.CAPTURE.COMPLETED
    let events = pp.model.tick(T0 + 5 * 60 * 1000);
    assert_eq!(kinds(&events), ["PAYMENT.CAPTURE.COMPLETED"]);
    assert_eq!(event_json(&events, 0)["resource"]["id"], capture["id"]);
    assert_eq!(
        capture_of(&pp.order(&id, T0 + 5 * 60 * 1000))["status"],
        "COMPLETED"
    );
    // AND an AUTHORIZE order's authorization is PENDING, then CREATED
    let (authorize, _) = pp.create(
        "k2",
        &order_body("AUTHORIZE", "pay_2", card("pm_fake_processing")),
        T0 + 10 * 60 * 1000,
    );
    assert_eq!(authorization_of(&json(&authorize))["status"], "PENDING");
    assert!(authorize.events.is_empty());
    let later = pp.model.tick(T0 + 15 * 60 * 1000);
    assert_eq!(kinds(&later), ["PAYMENT.AUTHORIZATION.CREATED"]);
}

// Two steps: CREATED, then /capture or /authorize.

#[test]
fn without_one_step_vault_the_order_waits_created_for_capture_once() {
    let pp = PayPal::with(ModelConfig {
        paypal_one_step_vault: false,
        ..config()
    });
    // WHEN a CAPTURE order is made with a vaulted card
    let (created, id) = pp.create(
        "payonce-charge-pay_1",
        &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
        T0,
    );
    // THEN it is CREATED, nothing charged, with the capture link
    assert_eq!(created.status, 201);
    let order = json(&created);
    assert_eq!(order["status"], "CREATED");
    assert_eq!(rels(&order), ["self", "update", "capture"]);
    assert!(unit(&order).get("payments").is_none());
    assert!(created.events.is_empty());
    assert_eq!(pp.model.charges()[0].outcome, "pending");
    // AND /authorize is refused: not its intent
    let wrong = pp.act(&id, "authorize", "payonce-authorize-pay_1", T0 + 1);
    assert_eq!(
        issue(&wrong),
        (422, "ACTION_DOES_NOT_MATCH_INTENT".to_owned())
    );
    // WHEN it is captured
    let captured = pp.act(&id, "capture", "payonce-capture-pay_1", T0 + 2);
    // THEN 201 COMPLETED with a COMPLETED capture and its event
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(json(&captured)["status"], "COMPLETED");
    assert_eq!(capture_of(&json(&captured))["status"], "COMPLETED");
    assert_eq!(kinds(&captured.events), ["PAYMENT.CAPTURE.COMPLETED"]);
    // AND the replay of the capture is 200, as is the create's, now COMPLETED
    let replay = pp.act(&id, "capture", "payonce-capture-pay_1", T0 + 3);
    assert_eq!((replay.status, replay.replayed), (200, true));
    let (create_replay, _) = pp.create(
        "payonce-charge-pay_1",
        &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
        T0 + 4,
    );
    assert_eq!(create_replay.status, 200);
    assert_eq!(json(&create_replay)["status"], "COMPLETED");
    // AND a second capture under another id is 422 ORDER_ALREADY_CAPTURED
    let twice = pp.act(&id, "capture", "another", T0 + 5);
    assert_eq!(issue(&twice), (422, "ORDER_ALREADY_CAPTURED".to_owned()));
    // AND the inspection view shows the capture with its request id
    let charge = &pp.model.charges()[0];
    assert_eq!(charge.outcome, "succeeded");
    assert_eq!(charge.captures.len(), 1);
    assert_eq!(
        charge.captures[0].idempotency_key.as_deref(),
        Some("payonce-capture-pay_1")
    );
}

#[test]
fn without_one_step_vault_an_authorize_order_is_authorized_once_then_captured() {
    let pp = PayPal::with(ModelConfig {
        paypal_one_step_vault: false,
        ..config()
    });
    let (created, id) = pp.create(
        "payonce-charge-pay_1",
        &order_body("AUTHORIZE", "pay_1", card("pm_card_visa")),
        T0,
    );
    assert_eq!(json(&created)["status"], "CREATED");
    assert_eq!(rels(&json(&created)), ["self", "update", "authorize"]);
    // WHEN /capture comes first: not its intent
    let wrong = pp.act(&id, "capture", "payonce-capture-pay_1", T0 + 1);
    assert_eq!(
        issue(&wrong),
        (422, "ACTION_DOES_NOT_MATCH_INTENT".to_owned())
    );
    // WHEN it is authorized
    let authorized = pp.act(&id, "authorize", "payonce-authorize-pay_1", T0 + 2);
    // THEN 201 COMPLETED, authorization CREATED with its expiry (the ledger's: 7 days)
    assert_eq!(authorized.status, 201, "{}", authorized.body);
    let authorization = authorization_of(&json(&authorized)).clone();
    assert_eq!(authorization["status"], "CREATED");
    assert_eq!(authorization["expiration_time"], "2027-01-22T08:00:00Z");
    assert_eq!(
        rels(&authorization),
        ["self", "capture", "void", "reauthorize", "up"]
    );
    assert_eq!(kinds(&authorized.events), ["PAYMENT.AUTHORIZATION.CREATED"]);
    // AND a second authorize is 422 ORDER_ALREADY_AUTHORIZED
    let twice = pp.act(&id, "authorize", "again", T0 + 3);
    assert_eq!(issue(&twice), (422, "ORDER_ALREADY_AUTHORIZED".to_owned()));
}

#[test]
fn an_insufficient_funds_capture_is_422_and_leaves_the_order_as_it_was() {
    let pp = PayPal::with(ModelConfig {
        paypal_one_step_vault: false,
        ..config()
    });
    let (_, id) = pp.create(
        "k",
        &order_body(
            "CAPTURE",
            "pay_1",
            card("pm_card_chargeDeclinedInsufficientFunds"),
        ),
        T0,
    );
    // WHEN the order is captured
    let first = pp.act(&id, "capture", "c1", T0 + 1);
    // THEN 422 INSTRUMENT_DECLINED; the order is still CREATED; a new capture says it again
    assert_eq!(issue(&first), (422, "INSTRUMENT_DECLINED".to_owned()));
    assert_eq!(pp.order(&id, T0 + 2)["status"], "CREATED");
    let again = pp.act(&id, "capture", "c2", T0 + 3);
    assert_eq!(issue(&again), (422, "INSTRUMENT_DECLINED".to_owned()));
    assert_eq!(pp.model.charges()[0].outcome, "failed");
    // AND pm_fake_error_before_charge fails the capture with 500, changing nothing
    let (_, flaky) = pp.create(
        "k2",
        &order_body("CAPTURE", "pay_2", card("pm_fake_error_before_charge")),
        T0,
    );
    let failed = pp.act(&flaky, "capture", "c3", T0 + 4);
    assert_eq!((failed.status, failed.replayed), (500, false));
    assert_eq!(pp.order(&flaky, T0 + 5)["status"], "CREATED");
}

// 3-D Secure and payer actions.

#[test]
fn a_three_ds_card_with_a_return_url_waits_for_its_payer_then_is_captured() {
    let pp = PayPal::new();
    // WHEN a CAPTURE order is made with a 3-D Secure card and a return URL
    let (created, id) = pp.create(
        "k",
        &order_body(
            "CAPTURE",
            "pay_1",
            card_with_return("pm_card_threeDSecure2Required"),
        ),
        T0,
    );
    // THEN 201 PAYER_ACTION_REQUIRED, links self and payer-action to the fake's page
    assert_eq!(created.status, 201);
    let order = json(&created);
    assert_eq!(order["status"], "PAYER_ACTION_REQUIRED");
    assert_eq!(rels(&order), ["self", "payer-action"]);
    let page_url = format!("{BASE}/_fake/authenticate/{id}");
    assert_eq!(link(&order, "payer-action"), Some(page_url.as_str()));
    assert!(created.events.is_empty());
    // AND a capture now is 422 PAYER_ACTION_REQUIRED
    let early = pp.act(&id, "capture", "c0", T0 + 1);
    assert_eq!(issue(&early), (422, "PAYER_ACTION_REQUIRED".to_owned()));
    // AND the page shows the form
    let shown = pp.model.action_page(&id, None, T0 + 2);
    assert_eq!(shown.status, 200);
    assert!(shown.html.contains("result\" value=\"complete"));
    // WHEN the payer fails
    let failed = pp.page(&id, "fail", T0 + 3);
    // THEN 303 to the cancel URL with the token; the order is unchanged
    assert_eq!(failed.status, 303);
    assert_eq!(
        failed.location.as_deref(),
        Some(format!("{CANCEL}?token={id}").as_str())
    );
    assert!(failed.events.is_empty());
    assert_eq!(pp.order(&id, T0 + 4)["status"], "PAYER_ACTION_REQUIRED");
    // WHEN the payer completes
    let done = pp.page(&id, "complete", T0 + 5);
    // THEN 303 to the return URL with token and PayerID; the order APPROVED, with its event
    assert_eq!(done.status, 303);
    let location = done.location.clone().unwrap_or_default();
    let payer_id = location
        .split("PayerID=")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        location,
        format!("https://shop.example/return?step=paid&token={id}&PayerID={payer_id}")
    );
    assert_eq!(payer_id.len(), 13);
    assert_eq!(kinds(&done.events), ["CHECKOUT.ORDER.APPROVED"]);
    let approved = event_json(&done.events, 0);
    assert_eq!(approved["resource_type"], "checkout-order");
    assert_eq!(approved["resource"]["status"], "APPROVED");
    assert_eq!(approved["resource"]["payer"]["payer_id"], payer_id.as_str());
    assert_eq!(rels(&approved["resource"]), ["self", "update", "capture"]);
    // AND a second answer on the page is 409 and moves nothing
    assert_eq!(pp.page(&id, "complete", T0 + 6).status, 409);
    // WHEN payonce captures it
    let captured = pp.act(&id, "capture", "c1", T0 + 7);
    // THEN 201 COMPLETED, charged as authenticated
    assert_eq!(captured.status, 201, "{}", captured.body);
    assert_eq!(capture_of(&json(&captured))["status"], "COMPLETED");
    assert_eq!(pp.model.charges()[0].outcome, "succeeded");
}

#[test]
fn a_three_ds_card_without_a_return_url_is_422_payer_action_required_and_nothing_is_made() {
    let pp = PayPal::new();
    for intent in ["CAPTURE", "AUTHORIZE"] {
        let answer = pp.post(
            ORDERS,
            Some(intent),
            &order_body(intent, "pay_1", card("pm_card_authenticationRequired")),
            T0,
        );
        assert_eq!(issue(&answer), (422, "PAYER_ACTION_REQUIRED".to_owned()));
    }
    assert!(pp.model.charges().is_empty());
    // AND in two-step mode too: the card needs its payer before anything
    let two_step = PayPal::with(ModelConfig {
        paypal_one_step_vault: false,
        ..config()
    });
    let answer = two_step.post(
        ORDERS,
        Some("k"),
        &order_body("CAPTURE", "pay_1", card("pm_card_authenticationRequired")),
        T0,
    );
    assert_eq!(issue(&answer), (422, "PAYER_ACTION_REQUIRED".to_owned()));
    let (waiting, _) = two_step.create(
        "k2",
        &order_body(
            "CAPTURE",
            "pay_2",
            card_with_return("pm_card_threeDSecure2Required"),
        ),
        T0,
    );
    assert_eq!(json(&waiting)["status"], "PAYER_ACTION_REQUIRED");
}

#[test]
fn a_buyer_approves_a_paypal_order_on_the_page_then_it_is_captured() {
    let pp = PayPal::new();
    // WHEN an order asks the buyer to approve (paypal source, no vault id)
    let (created, id) = pp.create("k", &order_body("CAPTURE", "pay_1", wallet()), T0);
    // THEN PAYER_ACTION_REQUIRED with the payer-action link, nothing charged
    assert_eq!(created.status, 201);
    assert_eq!(json(&created)["status"], "PAYER_ACTION_REQUIRED");
    assert_eq!(rels(&json(&created)), ["self", "payer-action"]);
    assert!(json(&created).get("payment_source").is_none());
    // AND capturing before the approval is 422 ORDER_NOT_APPROVED
    let early = pp.act(&id, "capture", "c0", T0 + 1);
    assert_eq!(issue(&early), (422, "ORDER_NOT_APPROVED".to_owned()));
    // WHEN the buyer approves
    let approved = pp.page(&id, "complete", T0 + 2);
    assert_eq!(approved.status, 303);
    assert_eq!(kinds(&approved.events), ["CHECKOUT.ORDER.APPROVED"]);
    // THEN the order is APPROVED, paid from the buyer's PayPal account
    let order = pp.order(&id, T0 + 3);
    assert_eq!(order["status"], "APPROVED");
    assert!(order["payment_source"]["paypal"]["account_id"].is_string());
    // AND the capture completes it
    let captured = pp.act(&id, "capture", "c1", T0 + 4);
    assert_eq!(captured.status, 201);
    assert_eq!(capture_of(&json(&captured))["status"], "COMPLETED");
    assert_eq!(pp.model.charges()[0].payment_method, "paypal");
    // AND an AUTHORIZE order approved the same way is authorized by /authorize
    let (_, auth_id) = pp.create("k2", &order_body("AUTHORIZE", "pay_2", wallet()), T0);
    assert_eq!(pp.page(&auth_id, "complete", T0 + 5).status, 303);
    let authorized = pp.act(&auth_id, "authorize", "a1", T0 + 6);
    assert_eq!(authorization_of(&json(&authorized))["status"], "CREATED");
}

#[test]
fn an_order_never_approved_lapses_after_requires_action_for_and_is_gone() {
    let pp = PayPal::new();
    let (_, wallet_id) = pp.create("k1", &order_body("CAPTURE", "pay_1", wallet()), T0);
    let (_, card_id) = pp.create(
        "k2",
        &order_body(
            "CAPTURE",
            "pay_2",
            card_with_return("pm_card_threeDSecure2Required"),
        ),
        T0,
    );
    // WHEN requires_action_for (1 h) passes without the payer
    let events = pp.model.tick(T0 + HOUR_MS);
    // THEN no event; GET answers 404, capture 422 ORDER_EXPIRED, the page 409
    assert!(events.is_empty());
    for id in [&wallet_id, &card_id] {
        let got = pp.get(&format!("{ORDERS}/{id}"), T0 + HOUR_MS);
        assert_eq!(
            refusal(&got),
            (
                404,
                "RESOURCE_NOT_FOUND".to_owned(),
                "INVALID_RESOURCE_ID".to_owned()
            )
        );
        let capture = pp.act(id, "capture", &format!("c-{id}"), T0 + HOUR_MS);
        assert_eq!(issue(&capture), (422, "ORDER_EXPIRED".to_owned()));
        assert_eq!(pp.page(id, "complete", T0 + HOUR_MS).status, 409);
    }
    // AND the inspection view reads them expired, failed
    for charge in pp.model.charges() {
        assert_eq!(
            (charge.status.as_str(), charge.outcome.as_str()),
            ("EXPIRED", "failed")
        );
    }
}

#[test]
fn a_payer_action_nobody_can_take_waits_then_lapses() {
    let pp = PayPal::new();
    // WHEN an order is made with pm_fake_requires_action
    let (created, id) = pp.create(
        "k",
        &order_body("CAPTURE", "pay_1", card("pm_fake_requires_action")),
        T0,
    );
    // THEN PAYER_ACTION_REQUIRED, but its page cannot be answered
    assert_eq!(json(&created)["status"], "PAYER_ACTION_REQUIRED");
    assert_eq!(pp.model.action_page(&id, None, T0 + 1).status, 409);
    assert_eq!(pp.page(&id, "complete", T0 + 1).status, 409);
    // AND it lapses like any order never approved
    pp.model.tick(T0 + HOUR_MS);
    assert_eq!(pp.get(&format!("{ORDERS}/{id}"), T0 + HOUR_MS).status, 404);
}

// Authorizations.

/// An AUTHORIZE order made at once with `token`; its id and its authorization's id.
fn authorized(pp: &PayPal, payment_id: &str, token: &str, now_ms: i64) -> (String, String) {
    let (answer, id) = pp.create(
        &format!("payonce-charge-{payment_id}"),
        &order_body("AUTHORIZE", payment_id, card(token)),
        now_ms,
    );
    assert_eq!(answer.status, 201, "{}", answer.body);
    let authorization = authorization_of(&json(&answer))["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (id, authorization)
}

#[test]
fn an_authorization_is_captured_once_up_to_its_amount() {
    let pp = PayPal::new();
    let (id, authorization) = authorized(&pp, "pay_1", "pm_card_visa", T0);
    let path = format!("/v2/payments/authorizations/{authorization}/capture");
    let amount = |value: &str, currency: &str| json!({"amount": {"currency_code": currency, "value": value}, "final_capture": true});
    // WHEN more than was authorized, or another currency, is captured
    let over = pp.post(&path, Some("c1"), &amount("30.01", "USD"), T0 + 1);
    let currency = pp.post(&path, Some("c2"), &amount("30.00", "EUR"), T0 + 1);
    // THEN 422 MAX_CAPTURE_AMOUNT_EXCEEDED / AUTH_CAPTURE_CURRENCY_MISMATCH
    assert_eq!(
        issue(&over),
        (422, "MAX_CAPTURE_AMOUNT_EXCEEDED".to_owned())
    );
    assert_eq!(
        issue(&currency),
        (422, "AUTH_CAPTURE_CURRENCY_MISMATCH".to_owned())
    );
    // WHEN part of it is captured
    let captured = pp.post(
        &path,
        Some("payonce-capture-pay_1"),
        &amount("20.00", "USD"),
        T0 + 2,
    );
    // THEN 201, the capture COMPLETED for 20.00, tied to the order and the authorization
    assert_eq!(captured.status, 201, "{}", captured.body);
    let capture = json(&captured);
    assert_eq!(capture["status"], "COMPLETED");
    assert_eq!(capture["amount"]["value"], "20.00");
    assert_eq!(
        capture["supplementary_data"]["related_ids"],
        json!({"order_id": id, "authorization_id": authorization})
    );
    assert_eq!(
        link(&capture, "up"),
        Some(format!("{BASE}/v2/payments/authorizations/{authorization}").as_str())
    );
    assert_eq!(kinds(&captured.events), ["PAYMENT.CAPTURE.COMPLETED"]);
    // AND the authorization reads CAPTURED, the order lists both
    let got = pp.get(
        &format!("/v2/payments/authorizations/{authorization}"),
        T0 + 3,
    );
    assert_eq!(json(&got)["status"], "CAPTURED");
    assert_eq!(
        json(&got)["supplementary_data"]["related_ids"]["order_id"],
        id.as_str()
    );
    let order = pp.order(&id, T0 + 3);
    assert_eq!(capture_of(&order)["id"], capture["id"]);
    // AND the replay is 200 with the capture as it is; a second capture is refused
    let replay = pp.post(
        &path,
        Some("payonce-capture-pay_1"),
        &amount("20.00", "USD"),
        T0 + 4,
    );
    assert_eq!(
        (replay.status, json(&replay)["id"].clone()),
        (200, capture["id"].clone())
    );
    let twice = pp.post(&path, Some("c3"), &amount("10.00", "USD"), T0 + 5);
    assert_eq!(
        issue(&twice),
        (422, "AUTHORIZATION_ALREADY_CAPTURED".to_owned())
    );
    // AND the ledger shows the capture under its request id, refunds bounded by 20.00
    let charge = &pp.model.charges()[0];
    assert_eq!(charge.amount_captured, Some(2000));
    assert_eq!(
        charge.captures[0].idempotency_key.as_deref(),
        Some("payonce-capture-pay_1")
    );
    // AND without an amount the whole authorization is captured
    let (_, whole) = authorized(&pp, "pay_2", "pm_card_visa", T0);
    let all = pp.post(
        &format!("/v2/payments/authorizations/{whole}/capture"),
        None,
        &json!({}),
        T0 + 6,
    );
    assert_eq!(json(&all)["amount"]["value"], "30.00");
}

#[test]
fn a_void_is_204_or_the_authorization_and_refuses_what_cannot_be_voided() {
    let pp = PayPal::new();
    let (id, authorization) = authorized(&pp, "pay_1", "pm_card_visa", T0);
    let void_path = format!("/v2/payments/authorizations/{authorization}/void");
    // WHEN it is voided with the default Prefer
    let void = pp.call("POST", &void_path, None, None, "", T0 + 1);
    // THEN 204 with no body, PAYMENT.AUTHORIZATION.VOIDED, the order VOIDED
    assert_eq!((void.status, void.body.as_str()), (204, ""));
    assert_eq!(kinds(&void.events), ["PAYMENT.AUTHORIZATION.VOIDED"]);
    let order = pp.order(&id, T0 + 2);
    assert_eq!(order["status"], "VOIDED");
    assert_eq!(authorization_of(&order)["status"], "VOIDED");
    // AND again is 422 PREVIOUSLY_VOIDED, a capture 422 AUTHORIZATION_VOIDED
    let again = pp.call("POST", &void_path, None, REPRESENTATION, "", T0 + 3);
    assert_eq!(issue(&again), (422, "PREVIOUSLY_VOIDED".to_owned()));
    let capture = pp.post(
        &format!("/v2/payments/authorizations/{authorization}/capture"),
        Some("c"),
        &json!({}),
        T0 + 4,
    );
    assert_eq!(issue(&capture), (422, "AUTHORIZATION_VOIDED".to_owned()));
    // AND the inspection view shows the void, under no key
    let charge = &pp.model.charges()[0];
    assert_eq!(
        (charge.outcome.as_str(), charge.cancels.len()),
        ("canceled", 1)
    );
    // WHEN another is voided with Prefer: return=representation
    let (_, second) = authorized(&pp, "pay_2", "pm_card_visa", T0);
    let shown = pp.call(
        "POST",
        &format!("/v2/payments/authorizations/{second}/void"),
        None,
        REPRESENTATION,
        "{}",
        T0 + 5,
    );
    // THEN 200 with the authorization, VOIDED
    assert_eq!(shown.status, 200);
    assert_eq!(json(&shown)["status"], "VOIDED");
    // AND a captured authorization cannot be voided
    let (_, third) = authorized(&pp, "pay_3", "pm_card_visa", T0);
    let captured = pp.post(
        &format!("/v2/payments/authorizations/{third}/capture"),
        Some("c3"),
        &json!({"final_capture": true}),
        T0 + 6,
    );
    assert_eq!(captured.status, 201);
    let late = pp.call(
        "POST",
        &format!("/v2/payments/authorizations/{third}/void"),
        None,
        None,
        "",
        T0 + 7,
    );
    assert_eq!(issue(&late), (422, "PREVIOUSLY_CAPTURED".to_owned()));
    // AND a denied one neither
    let (_, denied) = authorized(&pp, "pay_4", "pm_card_visa_chargeDeclined", T0);
    let refused = pp.call(
        "POST",
        &format!("/v2/payments/authorizations/{denied}/void"),
        None,
        None,
        "",
        T0 + 8,
    );
    assert_eq!(issue(&refused), (422, "CANNOT_BE_VOIDED".to_owned()));
}

#[test]
fn an_authorization_nobody_captures_lapses_voided_and_cannot_be_captured() {
    let pp = PayPal::new();
    let (id, authorization) = authorized(&pp, "pay_1", "pm_card_visa", T0);
    // WHEN the authorization's time (the ledger's 7 days) passes
    let events = pp.model.tick(T0 + 7 * DAY_MS);
    // THEN it is VOIDED, with PAYMENT.AUTHORIZATION.VOIDED, updated at its expiry
    assert_eq!(kinds(&events), ["PAYMENT.AUTHORIZATION.VOIDED"]);
    let resource = event_json(&events, 0)["resource"].clone();
    assert_eq!(resource["status"], "VOIDED");
    assert_eq!(resource["update_time"], resource["expiration_time"]);
    // AND a capture is 422 AUTHORIZATION_EXPIRED, a void 422 PREVIOUSLY_VOIDED
    let capture = pp.post(
        &format!("/v2/payments/authorizations/{authorization}/capture"),
        Some("c"),
        &json!({}),
        T0 + 7 * DAY_MS + 1,
    );
    assert_eq!(issue(&capture), (422, "AUTHORIZATION_EXPIRED".to_owned()));
    let void = pp.call(
        "POST",
        &format!("/v2/payments/authorizations/{authorization}/void"),
        None,
        None,
        "",
        T0 + 7 * DAY_MS + 2,
    );
    assert_eq!(issue(&void), (422, "PREVIOUSLY_VOIDED".to_owned()));
    assert_eq!(pp.order(&id, T0 + 7 * DAY_MS + 3)["status"], "VOIDED");
    let charge = &pp.model.charges()[0];
    assert_eq!(
        charge.cancels[0].cancellation_reason.as_deref(),
        Some("automatic")
    );
}

// Refunds.

/// A COMPLETED capture of `token` for `payment_id`: the order's id and the capture's.
fn captured(pp: &PayPal, payment_id: &str, token: &str, now_ms: i64) -> (String, String) {
    let (answer, id) = pp.create(
        &format!("payonce-charge-{payment_id}"),
        &order_body("CAPTURE", payment_id, card(token)),
        now_ms,
    );
    let capture = capture_of(&json(&answer))["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (id, capture)
}

fn refund_body(value: Option<&str>, refund_id: &str) -> Value {
    let mut body = json!({"custom_id": refund_id, "invoice_id": refund_id});
    if let Some(value) = value {
        body["amount"] = json!({"currency_code": "USD", "value": value});
    }
    body
}

#[test]
fn refunds_take_what_is_left_of_a_completed_capture_and_are_listed_on_the_order() {
    let pp = PayPal::new();
    let (id, capture) = captured(&pp, "pay_1", "pm_card_visa", T0);
    let path = format!("/v2/payments/captures/{capture}/refund");
    // WHEN 10.00 is refunded
    let first = pp.post(
        &path,
        Some("payonce-refund-pay_1-1"),
        &refund_body(Some("10.00"), "rf_1"),
        T0 + 1,
    );
    // THEN 201 COMPLETED, ids echoed, up → the capture, PAYMENT.CAPTURE.REFUNDED with it
    assert_eq!(first.status, 201, "{}", first.body);
    let refund = json(&first);
    assert!(is_paypal_id(refund["id"].as_str().unwrap_or_default()));
    assert_eq!(refund["status"], "COMPLETED");
    assert_eq!(refund["custom_id"], "rf_1");
    assert_eq!(refund["invoice_id"], "rf_1");
    assert_eq!(
        refund["amount"],
        json!({"currency_code": "USD", "value": "10.00"})
    );
    assert_eq!(
        link(&refund, "up"),
        Some(format!("{BASE}/v2/payments/captures/{capture}").as_str())
    );
    assert_eq!(kinds(&first.events), ["PAYMENT.CAPTURE.REFUNDED"]);
    let event = event_json(&first.events, 0);
    assert_eq!(
        (event["resource_type"].as_str(), event["resource"].clone()),
        (Some("refund"), refund.clone())
    );
    // AND the capture reads PARTIALLY_REFUNDED, without refunds embedded; the order lists it
    let got = json(&pp.get(&format!("/v2/payments/captures/{capture}"), T0 + 2));
    assert_eq!(got["status"], "PARTIALLY_REFUNDED");
    assert!(got.get("refunds").is_none());
    assert_eq!(
        unit(&pp.order(&id, T0 + 2))["payments"]["refunds"],
        json!([refund])
    );
    assert_eq!(
        json(&pp.get(
            &format!(
                "/v2/payments/refunds/{}",
                refund["id"].as_str().unwrap_or_default()
            ),
            T0 + 2
        )),
        refund
    );
    // WHEN more than is left, or another currency, is asked for
    let over = pp.post(
        &path,
        Some("r2"),
        &refund_body(Some("20.01"), "rf_2"),
        T0 + 3,
    );
    let mut eur = refund_body(Some("1.00"), "rf_2");
    eur["amount"]["currency_code"] = json!("EUR");
    let currency = pp.post(&path, Some("r3"), &eur, T0 + 3);
    // THEN 422 REFUND_AMOUNT_EXCEEDED / REFUND_CAPTURE_CURRENCY_MISMATCH
    assert_eq!(issue(&over), (422, "REFUND_AMOUNT_EXCEEDED".to_owned()));
    assert_eq!(
        issue(&currency),
        (422, "REFUND_CAPTURE_CURRENCY_MISMATCH".to_owned())
    );
    // WHEN the rest is refunded (no amount: all that is left)
    let rest = pp.post(&path, Some("r4"), &refund_body(None, "rf_3"), T0 + 4);
    assert_eq!(json(&rest)["amount"]["value"], "20.00");
    // THEN the capture is REFUNDED, and another refund 422 CAPTURE_FULLY_REFUNDED
    assert_eq!(
        json(&pp.get(&format!("/v2/payments/captures/{capture}"), T0 + 5))["status"],
        "REFUNDED"
    );
    let more = pp.post(
        &path,
        Some("r5"),
        &refund_body(Some("1.00"), "rf_4"),
        T0 + 5,
    );
    assert_eq!(issue(&more), (422, "CAPTURE_FULLY_REFUNDED".to_owned()));
    // AND the inspection view names the refunds' payonce ids and the capture
    let refunds = pp.model.refunds();
    assert_eq!(refunds.len(), 2);
    assert_eq!(refunds[0].provider, "paypal");
    assert_eq!(refunds[0].payment_id.as_deref(), Some("pay_1"));
    assert_eq!(refunds[0].refund_id.as_deref(), Some("rf_1"));
    assert_eq!(refunds[0].payment_intent, id);
    assert_eq!(refunds[0].charge.as_deref(), Some(capture.as_str()));
    assert_eq!(refunds[0].status, "COMPLETED");
    assert_eq!(
        refunds[0].idempotency_key.as_deref(),
        Some("payonce-refund-pay_1-1")
    );
}

#[test]
fn only_a_completed_capture_can_be_refunded() {
    let pp = PayPal::new();
    let (_, pending) = captured(&pp, "pay_1", "pm_fake_processing", T0);
    let (_, declined) = captured(&pp, "pay_2", "pm_card_visa_chargeDeclined", T0);
    let refund = |capture: &str| {
        pp.post(
            &format!("/v2/payments/captures/{capture}/refund"),
            Some(&format!("r-{capture}")),
            &refund_body(None, "rf_1"),
            T0 + 1,
        )
    };
    assert_eq!(
        issue(&refund(&pending)),
        (422, "PENDING_CAPTURE".to_owned())
    );
    assert_eq!(
        issue(&refund(&declined)),
        (422, "REFUND_NOT_ALLOWED".to_owned())
    );
    assert_eq!(
        refusal(&refund("NOSUCHCAPTURE0000")),
        (
            404,
            "RESOURCE_NOT_FOUND".to_owned(),
            "INVALID_RESOURCE_ID".to_owned()
        )
    );
    assert!(pp.model.refunds().is_empty());
}

#[test]
fn refund_fates_follow_the_token_pending_then_completed_or_completed_then_failed() {
    let pp = PayPal::new();
    let (id, pending_capture) = captured(&pp, "pay_1", "pm_fake_refund_pending", T0);
    // WHEN a pm_fake_refund_pending capture is refunded
    let pending = pp.post(
        &format!("/v2/payments/captures/{pending_capture}/refund"),
        Some("r1"),
        &refund_body(Some("5.00"), "rf_1"),
        T0,
    );
    // THEN PENDING (ECHECK), no event yet; COMPLETED after refund_pending_for with its event
    assert_eq!(json(&pending)["status"], "PENDING");
    assert_eq!(json(&pending)["status_details"]["reason"], "ECHECK");
    assert!(pending.events.is_empty());
    let completed = pp.model.tick(T0 + 10 * 60 * 1000);
    assert_eq!(kinds(&completed), ["PAYMENT.CAPTURE.REFUNDED"]);
    assert_eq!(event_json(&completed, 0)["resource"]["status"], "COMPLETED");
    assert_eq!(
        unit(&pp.order(&id, T0 + 10 * 60 * 1000))["payments"]["refunds"][0]["status"],
        "COMPLETED"
    );
    // WHEN a pm_card_refundFail capture is refunded in full
    let (_, failing_capture) = captured(&pp, "pay_2", "pm_card_refundFail", T0 + 11 * 60 * 1000);
    let path = format!("/v2/payments/captures/{failing_capture}/refund");
    let failing = pp.post(
        &path,
        Some("r2"),
        &refund_body(None, "rf_2"),
        T0 + 11 * 60 * 1000,
    );
    // THEN COMPLETED, then FAILED after refund_fail_after (no event); its amount is free again
    assert_eq!(json(&failing)["status"], "COMPLETED");
    let failed = pp.model.tick(T0 + 12 * 60 * 1000);
    assert!(failed.is_empty(), "{:?}", kinds(&failed));
    let refund_id = json(&failing)["id"].as_str().unwrap_or_default().to_owned();
    let got = pp.get(
        &format!("/v2/payments/refunds/{refund_id}"),
        T0 + 12 * 60 * 1000,
    );
    assert_eq!(json(&got)["status"], "FAILED");
    assert_eq!(
        json(&pp.get(
            &format!("/v2/payments/captures/{failing_capture}"),
            T0 + 12 * 60 * 1000
        ))["status"],
        "COMPLETED"
    );
    let again = pp.post(
        &path,
        Some("r3"),
        &refund_body(None, "rf_3"),
        T0 + 12 * 60 * 1000,
    );
    assert_eq!(again.status, 201, "{}", again.body);
}

// Lookups, routes, inspection, determinism.

#[test]
fn unknown_ids_and_routes_are_404_resource_not_found() {
    let pp = PayPal::new();
    for (method, path) in [
        ("GET", format!("{ORDERS}/NOSUCHORDER000000")),
        ("POST", format!("{ORDERS}/NOSUCHORDER000000/capture")),
        ("POST", format!("{ORDERS}/NOSUCHORDER000000/authorize")),
        (
            "GET",
            "/v2/payments/authorizations/NOSUCH00000000000".to_owned(),
        ),
        (
            "POST",
            "/v2/payments/authorizations/NOSUCH00000000000/capture".to_owned(),
        ),
        (
            "POST",
            "/v2/payments/authorizations/NOSUCH00000000000/void".to_owned(),
        ),
        ("GET", "/v2/payments/captures/NOSUCH00000000000".to_owned()),
        ("GET", "/v2/payments/refunds/NOSUCH00000000000".to_owned()),
        ("GET", "/v1/payment_intents".to_owned()),
        ("DELETE", format!("{ORDERS}/X")),
    ] {
        let body = if method == "POST" { "{}" } else { "" };
        let answer = pp.call(method, &path, None, None, body, T0);
        assert_eq!(
            refusal(&answer),
            (
                404,
                "RESOURCE_NOT_FOUND".to_owned(),
                "INVALID_RESOURCE_ID".to_owned()
            ),
            "{method} {path}"
        );
    }
}

#[test]
fn the_inspection_view_names_the_order_its_payment_id_key_and_object() {
    let pp = PayPal::new();
    let (_, card_order) = pp.create(
        "payonce-charge-pay_1",
        &order_body("CAPTURE", "pay_1", card("pm_card_mastercard")),
        T0,
    );
    let (_, wallet_order) = pp.create(
        "payonce-charge-pay_2",
        &order_body("AUTHORIZE", "pay_2", wallet()),
        T0,
    );
    let charges = pp.model.charges();
    assert_eq!(charges.len(), 2);
    let paid = &charges[0];
    assert_eq!(paid.provider, "paypal");
    assert_eq!(paid.id, card_order);
    assert_eq!(
        (paid.status.as_str(), paid.outcome.as_str()),
        ("COMPLETED", "succeeded")
    );
    assert_eq!((paid.amount, paid.currency.as_str()), (3000, "usd"));
    assert_eq!(paid.payment_method, "pm_card_mastercard");
    assert_eq!(paid.payment_id.as_deref(), Some("pay_1"));
    assert_eq!(
        paid.idempotency_key.as_deref(),
        Some("payonce-charge-pay_1")
    );
    assert_eq!(paid.capture_method, "automatic");
    assert_eq!(paid.amount_captured, Some(3000));
    assert_eq!(paid.object.as_ref(), Some(&pp.order(&card_order, T0)));
    let waiting = &charges[1];
    assert_eq!(waiting.id, wallet_order);
    assert_eq!(
        (waiting.status.as_str(), waiting.outcome.as_str()),
        ("PAYER_ACTION_REQUIRED", "pending")
    );
    assert_eq!(waiting.payment_method, "paypal");
    assert_eq!(waiting.capture_method, "manual");
}

#[test]
fn one_seed_and_one_call_sequence_give_byte_identical_answers() {
    let run = || {
        let pp = PayPal::new();
        let mut bodies = Vec::new();
        let (created, id) = pp.create("k1", &order_body("CAPTURE", "pay_1", wallet()), T0);
        bodies.push(created.body);
        bodies.push(
            pp.page(&id, "complete", T0 + 1)
                .location
                .unwrap_or_default(),
        );
        let captured = pp.act(&id, "capture", "c1", T0 + 2);
        bodies.extend(captured.events.iter().map(|e| e.body.clone()));
        bodies.push(captured.body);
        let refused = pp.post(
            ORDERS,
            Some("k2"),
            &order_body("CAPTURE", "pay_1", card("pm_card_visa")),
            T0 + 3,
        );
        bodies.push(refused.body);
        bodies
    };
    assert_eq!(run(), run());
}
