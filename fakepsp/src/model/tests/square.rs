//! The Square face's rules, each tested through the model as the server and the simulation
//! call it.

use std::time::Duration;

use serde_json::{json, Value};

use super::{json, kinds, model_with, HOUR_MS, T0};
use crate::model::{Delivery, FakeModel, ModelConfig, WireAnswer, WireRequest};
use crate::provider::Provider;

const PAYMENTS: &str = "/v2/payments";
const REFUNDS: &str = "/v2/refunds";
const DAY_MS: i64 = 24 * HOUR_MS;

fn config() -> ModelConfig {
    ModelConfig {
        provider: Provider::Square,
        ..ModelConfig::default()
    }
}

fn model() -> FakeModel {
    model_with(config())
}

fn bearer() -> String {
    format!("Bearer {}", crate::provider::DEFAULT_API_KEY)
}

fn call(
    model: &FakeModel,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &str,
    now_ms: i64,
) -> WireAnswer {
    model.handle(
        &WireRequest {
            method,
            path,
            query: None,
            authorization,
            idempotency_key: None,
            prefer: None,
            body: body.as_bytes(),
        },
        now_ms,
    )
}

fn post(model: &FakeModel, path: &str, body: &Value, now_ms: i64) -> WireAnswer {
    call(
        model,
        "POST",
        path,
        Some(&bearer()),
        &body.to_string(),
        now_ms,
    )
}

fn post_raw(model: &FakeModel, path: &str, body: &str, now_ms: i64) -> WireAnswer {
    call(model, "POST", path, Some(&bearer()), body, now_ms)
}

fn get(model: &FakeModel, path: &str, now_ms: i64) -> WireAnswer {
    call(model, "GET", path, Some(&bearer()), "", now_ms)
}

/// A CreatePayment body as payonce's adapter would send it: USD 30.00 for payonce payment
/// `reference_id`.
fn create_body(key: &str, source_id: &str, reference_id: &str, autocomplete: bool) -> Value {
    json!({
        "idempotency_key": key,
        "source_id": source_id,
        "amount_money": {"amount": 3000, "currency": "USD"},
        "autocomplete": autocomplete,
        "reference_id": reference_id,
        "note": format!("payonce {reference_id}"),
    })
}

/// Creates a payment; returns the answer and the payment's id.
fn create(
    model: &FakeModel,
    key: &str,
    source_id: &str,
    autocomplete: bool,
    now_ms: i64,
) -> (WireAnswer, String) {
    let answer = post(
        model,
        PAYMENTS,
        &create_body(key, source_id, &format!("pay_{key}"), autocomplete),
        now_ms,
    );
    let id = payment(&answer)["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (answer, id)
}

/// An `APPROVED` payment's id (`autocomplete: false`, `pm_card_visa`).
fn approved(model: &FakeModel, key: &str, now_ms: i64) -> String {
    let (answer, id) = create(model, key, "pm_card_visa", false, now_ms);
    assert_eq!(payment(&answer)["status"], "APPROVED", "{}", answer.body);
    id
}

/// A `COMPLETED` payment's id.
fn completed(model: &FakeModel, key: &str, token: &str, now_ms: i64) -> String {
    let (answer, id) = create(model, key, token, true, now_ms);
    assert_eq!(payment(&answer)["status"], "COMPLETED", "{}", answer.body);
    id
}

fn payment(answer: &WireAnswer) -> Value {
    json(answer)["payment"].clone()
}

fn refund(answer: &WireAnswer) -> Value {
    json(answer)["refund"].clone()
}

/// The single error of an error answer.
fn the_error(answer: &WireAnswer) -> Value {
    let errors = json(answer)["errors"].clone();
    assert_eq!(errors.as_array().map(Vec::len), Some(1), "{}", answer.body);
    errors[0].clone()
}

/// `(status, category, code, field)` of an error answer.
fn refusal(answer: &WireAnswer) -> (u16, String, String, Value) {
    let error = the_error(answer);
    (
        answer.status,
        error["category"].as_str().unwrap_or_default().to_owned(),
        error["code"].as_str().unwrap_or_default().to_owned(),
        error["field"].clone(),
    )
}

fn refund_body(key: &str, payment_id: &str, amount: i64) -> Value {
    json!({
        "idempotency_key": key,
        "payment_id": payment_id,
        "amount_money": {"amount": amount, "currency": "USD"},
        "reason": "requested by the customer",
    })
}

fn status_of(model: &FakeModel, id: &str, now_ms: i64) -> Value {
    payment(&get(model, &format!("{PAYMENTS}/{id}"), now_ms))["status"].clone()
}

/// Whether `id` looks like a Square Payment id: 29 alphanumerics ending in `ZY`.
fn is_square_payment_id(id: &str) -> bool {
    id.len() == 29 && id.ends_with("ZY") && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `text` is RFC 3339 UTC with milliseconds, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn is_rfc3339_ms(text: &Value) -> bool {
    text.as_str().is_some_and(|text| {
        text.len() == 24
            && text.ends_with('Z')
            && text.as_bytes()[10] == b'T'
            && text.as_bytes()[19] == b'.'
    })
}

// Authentication.

#[test]
fn bearer_access_token_or_401_before_anything_else() {
    let model = model();
    let basic = format!("Basic {}", crate::provider::DEFAULT_API_KEY);
    // WHEN the token is missing, wrong or sent under another scheme — on a create that would
    // be refused anyway, and on a route that does not exist
    for authorization in [None, Some("Bearer EAAAwrong"), Some(basic.as_str())] {
        for (method, path, body) in [("POST", PAYMENTS, "{}"), ("GET", "/v2/nowhere", "")] {
            let answer = call(&model, method, path, authorization, body, T0);
            // THEN 401 AUTHENTICATION_ERROR UNAUTHORIZED, in Square's error body
            assert_eq!(answer.status, 401, "{authorization:?} {path}");
            assert_eq!(
                json(&answer),
                json!({"errors": [{
                    "category": "AUTHENTICATION_ERROR",
                    "code": "UNAUTHORIZED",
                    "detail": "This request could not be authorized.",
                }]})
            );
        }
    }
    // AND nothing was created, every request was counted
    assert!(model.charges().is_empty());
    assert_eq!(model.requests_seen(), 6);
    // AND the right token is accepted, the scheme in any case
    let lower = bearer().replacen("Bearer", "bearer", 1);
    let body = create_body("k1", "pm_card_visa", "pay_1", true).to_string();
    let ok = call(&model, "POST", PAYMENTS, Some(&lower), &body, T0);
    assert_eq!(ok.status, 200, "{}", ok.body);
}

// Create: the Payment object.

#[test]
fn a_completed_payment_has_squares_shape_and_sends_payment_created() {
    let model = model();
    // WHEN payonce creates a payment with an approving card and autocomplete
    let (answer, id) = create(&model, "key-1", "pm_card_visa", true, T0 + 577);
    // THEN 200 {"payment"} COMPLETED / CAPTURED, with Square's fields
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.delivery, Delivery::Now);
    let payment = payment(&answer);
    assert!(is_square_payment_id(&id), "{id}");
    assert_eq!(payment["status"], "COMPLETED");
    assert_eq!(payment["source_type"], "CARD");
    for money in ["amount_money", "approved_money", "total_money"] {
        assert_eq!(
            payment[money],
            json!({"amount": 3000, "currency": "USD"}),
            "{money}"
        );
    }
    let card_details = &payment["card_details"];
    assert_eq!(card_details["status"], "CAPTURED");
    assert_eq!(
        card_details["card"],
        json!({"card_brand": "VISA", "last_4": "4242"})
    );
    assert_eq!(card_details["entry_method"], "KEYED");
    assert!(card_details.get("errors").is_none());
    let timeline = &card_details["card_payment_timeline"];
    assert_eq!(timeline["authorized_at"], payment["created_at"]);
    assert_eq!(timeline["captured_at"], payment["created_at"]);
    assert!(timeline.get("voided_at").is_none());
    assert!(is_rfc3339_ms(&payment["created_at"]), "{payment}");
    assert_eq!(payment["created_at"], "2027-01-15T08:00:00.577Z");
    assert_eq!(payment["updated_at"], payment["created_at"]);
    assert_eq!(payment["reference_id"], "pay_key-1");
    assert_eq!(payment["note"], "payonce pay_key-1");
    assert_eq!(payment["location_id"], "LPAYONCEFAKE1");
    assert_eq!(payment["delay_action"], "CANCEL");
    assert_eq!(payment["delay_duration"], "PT168H");
    assert_eq!(payment["delayed_until"], "2027-01-22T08:00:00.577Z");
    assert_eq!(payment["version_token"].as_str().map(str::len), Some(45));
    assert!(payment.get("refund_ids").is_none());
    assert!(payment.get("refunded_money").is_none());
    // AND payment.created carries the same payment
    assert_eq!(kinds(&answer.events), ["payment.created"]);
    let event: Value = serde_json::from_str(&answer.events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["payment"], payment);
    // AND GET /v2/payments/{id} answers it as it is
    let retrieved = get(&model, &format!("{PAYMENTS}/{id}"), T0 + 1_000);
    assert_eq!(retrieved.status, 200);
    assert_eq!(json(&retrieved), json!({"payment": payment}));
}

#[test]
fn autocomplete_false_approves_and_autocomplete_true_completes() {
    let model = model();
    // WHEN one payment is created with autocomplete false and one with true
    let (approved, approved_id) = create(&model, "k-approve", "pm_card_visa", false, T0);
    let (completed, completed_id) = create(&model, "k-complete", "pm_card_mastercard", true, T0);
    // THEN the first is APPROVED / AUTHORIZED, held, not captured
    assert_eq!(approved.status, 200);
    let held = payment(&approved);
    assert_eq!(held["status"], "APPROVED");
    assert_eq!(held["card_details"]["status"], "AUTHORIZED");
    assert!(held["card_details"]["card_payment_timeline"]
        .get("captured_at")
        .is_none());
    assert_eq!(held["approved_money"]["amount"], 3000);
    // AND the second COMPLETED / CAPTURED, on its own card
    let paid = payment(&completed);
    assert_eq!(paid["status"], "COMPLETED");
    assert_eq!(paid["card_details"]["card"]["card_brand"], "MASTERCARD");
    // AND the ledger reads them authorized (manual) and succeeded (automatic)
    let charges = model.charges();
    let row = |id: &str| charges.iter().find(|c| c.id == id).cloned();
    let held_row = row(&approved_id).expect("the approved payment");
    assert_eq!(
        (held_row.outcome.as_str(), held_row.capture_method.as_str()),
        ("authorized", "manual")
    );
    assert_eq!(held_row.status, "APPROVED");
    let paid_row = row(&completed_id).expect("the completed payment");
    assert_eq!(
        (paid_row.outcome.as_str(), paid_row.capture_method.as_str()),
        ("succeeded", "automatic")
    );
    assert_eq!(paid_row.amount_captured, Some(3000));
}

// Validation, before the key.

#[test]
fn validation_errors_are_answered_before_the_key_and_store_nothing() {
    let model_config = ModelConfig {
        minimum_overrides: [("usd".to_owned(), 100)].into_iter().collect(),
        ..config()
    };
    let model = model_with(model_config);
    let base = create_body("k", "pm_card_visa", "pay_1", false);
    let with = |name: &str, value: Value| {
        let mut body = base.clone();
        body[name] = value;
        body
    };
    let without = |name: &str| {
        let mut body = base.clone();
        body.as_object_mut().map(|object| object.remove(name));
        body
    };
    let autocomplete = |name: &str, value: Value| {
        let mut body = with(name, value);
        body["autocomplete"] = json!(true);
        body
    };
    let long = |n: usize| json!("x".repeat(n));
    let cases: Vec<(Value, &str, Value)> = vec![
        (
            with("tip_money", json!({"amount": 1, "currency": "USD"})),
            "UNKNOWN_BODY_PARAMETER",
            json!("tip_money"),
        ),
        (
            without("idempotency_key"),
            "MISSING_REQUIRED_PARAMETER",
            json!("idempotency_key"),
        ),
        (
            without("source_id"),
            "MISSING_REQUIRED_PARAMETER",
            json!("source_id"),
        ),
        (
            with("source_id", json!("")),
            "VALUE_TOO_SHORT",
            json!("source_id"),
        ),
        (
            with("source_id", json!(7)),
            "INCORRECT_TYPE",
            json!("source_id"),
        ),
        (
            without("amount_money"),
            "MISSING_REQUIRED_PARAMETER",
            json!("amount_money"),
        ),
        (
            with("amount_money", json!({"currency": "USD"})),
            "MISSING_REQUIRED_PARAMETER",
            json!("amount_money.amount"),
        ),
        (
            with("amount_money", json!({"amount": 3000})),
            "MISSING_REQUIRED_PARAMETER",
            json!("amount_money.currency"),
        ),
        (
            with("amount_money", json!({"amount": 0, "currency": "USD"})),
            "VALUE_TOO_LOW",
            json!("amount_money.amount"),
        ),
        // The raised minimum for USD.
        (
            with("amount_money", json!({"amount": 99, "currency": "USD"})),
            "VALUE_TOO_LOW",
            json!("amount_money.amount"),
        ),
        (
            with("amount_money", json!({"amount": "3000", "currency": "USD"})),
            "INCORRECT_TYPE",
            json!("amount_money.amount"),
        ),
        (
            with("amount_money", json!({"amount": 30.5, "currency": "USD"})),
            "INCORRECT_TYPE",
            json!("amount_money.amount"),
        ),
        (
            with("amount_money", json!({"amount": 3000, "currency": "THB"})),
            "UNSUPPORTED_CURRENCY",
            json!("amount_money.currency"),
        ),
        (
            with("amount_money", json!({"amount": 3000, "currency": "usd"})),
            "UNSUPPORTED_CURRENCY",
            json!("amount_money.currency"),
        ),
        (
            with(
                "amount_money",
                json!({"amount": 3000, "currency": "USD", "x": 1}),
            ),
            "UNKNOWN_BODY_PARAMETER",
            json!("amount_money.x"),
        ),
        (
            with("autocomplete", json!("false")),
            "INCORRECT_TYPE",
            json!("autocomplete"),
        ),
        (
            autocomplete("accept_partial_authorization", json!(true)),
            "BAD_REQUEST",
            json!("accept_partial_authorization"),
        ),
        (
            autocomplete("delay_action", json!("CANCEL")),
            "BAD_REQUEST",
            json!("delay_action"),
        ),
        (
            autocomplete("delay_duration", json!("PT1H")),
            "BAD_REQUEST",
            json!("delay_duration"),
        ),
        (
            with("delay_action", json!("LATER")),
            "INVALID_ENUM_VALUE",
            json!("delay_action"),
        ),
        (
            with("delay_duration", json!("soon")),
            "INVALID_VALUE",
            json!("delay_duration"),
        ),
        (
            with("delay_duration", json!("PT59S")),
            "VALUE_TOO_LOW",
            json!("delay_duration"),
        ),
        (
            with("delay_duration", json!("P8D")),
            "VALUE_TOO_HIGH",
            json!("delay_duration"),
        ),
        (
            with("reference_id", long(41)),
            "VALUE_TOO_LONG",
            json!("reference_id"),
        ),
        (with("note", long(501)), "VALUE_TOO_LONG", json!("note")),
        (
            with("buyer_email_address", long(256)),
            "VALUE_TOO_LONG",
            json!("buyer_email_address"),
        ),
    ];
    for (body, code, field) in cases {
        // WHEN a create under key "k" is refused
        let answer = post(&model, PAYMENTS, &body, T0);
        // THEN 400 INVALID_REQUEST_ERROR with the code and the field
        assert_eq!(
            refusal(&answer),
            (
                400,
                "INVALID_REQUEST_ERROR".to_owned(),
                code.to_owned(),
                field
            ),
            "{body}"
        );
        assert!(answer.events.is_empty());
    }
    // AND a body that is not a JSON object is EXPECTED_JSON_BODY
    for raw in ["", "not json", "[1]"] {
        let answer = post_raw(&model, PAYMENTS, raw, T0);
        assert_eq!(refusal(&answer).2, "EXPECTED_JSON_BODY", "{raw:?}");
    }
    // AND nothing was created and nothing stored under "k": the valid create runs fresh
    assert!(model.charges().is_empty());
    let ok = post(&model, PAYMENTS, &base, T0);
    assert_eq!((ok.status, ok.replayed), (200, false), "{}", ok.body);
    // AND the limits themselves are accepted
    let at_limits = json!({
        "idempotency_key": "k2",
        "source_id": "pm_card_visa",
        "amount_money": {"amount": 100, "currency": "JPY"},
        "autocomplete": false,
        "accept_partial_authorization": true,
        "delay_duration": "P7D",
        "delay_action": "COMPLETE",
        "reference_id": "x".repeat(40),
        "note": "x".repeat(500),
        "buyer_email_address": "x".repeat(255),
        "location_id": "L88917AVBK2S5",
        "verification_token": null,
    });
    let ok = post(&model, PAYMENTS, &at_limits, T0);
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(payment(&ok)["location_id"], "L88917AVBK2S5");
    assert_eq!(payment(&ok)["delay_action"], "COMPLETE");
}

#[test]
fn the_idempotency_key_is_1_to_45_bytes() {
    let model = model();
    let body = |key: &str| create_body(key, "pm_card_visa", "pay_1", true);
    // WHEN the key is 46 bytes — 46 ASCII characters, or 23 two-byte ones
    for key in ["k".repeat(46), "é".repeat(23)] {
        let answer = post(&model, PAYMENTS, &body(&key), T0);
        // THEN 400 VALUE_TOO_LONG on idempotency_key, nothing created
        assert_eq!(
            refusal(&answer),
            (
                400,
                "INVALID_REQUEST_ERROR".to_owned(),
                "VALUE_TOO_LONG".to_owned(),
                json!("idempotency_key")
            ),
            "{key}"
        );
    }
    // AND an empty key is VALUE_TOO_SHORT
    assert_eq!(
        refusal(&post(&model, PAYMENTS, &body(""), T0)).2,
        "VALUE_TOO_SHORT"
    );
    assert!(model.charges().is_empty());
    // AND 45 bytes are accepted, ASCII or not
    for key in ["k".repeat(45), format!("{}a", "é".repeat(22))] {
        let answer = post(&model, PAYMENTS, &body(&key), T0);
        assert_eq!(answer.status, 200, "{key}: {}", answer.body);
    }
    assert_eq!(model.charges().len(), 2);
}

// Idempotency.

#[test]
fn the_same_key_and_body_replay_the_first_answer_and_charge_once() {
    let model = model();
    // GIVEN a completed payment and a declined one, each under its key
    let first = post(
        &model,
        PAYMENTS,
        &create_body("k-ok", "pm_card_visa", "pay_1", true),
        T0,
    );
    let declined = post(
        &model,
        PAYMENTS,
        &create_body("k-no", "pm_card_visa_chargeDeclined", "pay_2", true),
        T0,
    );
    // WHEN each is sent again later, the same JSON with its keys in another order and spacing
    let again = post_raw(
        &model,
        PAYMENTS,
        r#"{ "note": "payonce pay_1", "reference_id": "pay_1", "autocomplete": true,
            "amount_money": {"currency": "USD", "amount": 3000},
            "source_id": "pm_card_visa", "idempotency_key": "k-ok" }"#,
        T0 + HOUR_MS,
    );
    let declined_again = post(
        &model,
        PAYMENTS,
        &create_body("k-no", "pm_card_visa_chargeDeclined", "pay_2", true),
        T0 + HOUR_MS,
    );
    // THEN each answer is the first one, byte for byte, marked replayed, with no new event
    for (original, replay) in [(&first, &again), (&declined, &declined_again)] {
        assert_eq!(
            (replay.status, replay.body.as_str(), replay.replayed),
            (original.status, original.body.as_str(), true)
        );
        assert!(replay.events.is_empty());
    }
    // AND only the two payments exist
    assert_eq!(model.charges().len(), 2);
}

#[test]
fn a_key_reused_with_another_body_or_endpoint_is_idempotency_key_reused() {
    let model = model();
    // GIVEN a payment made under "k"
    let id = completed(&model, "k", "pm_card_visa", T0);
    // WHEN "k" comes again with another amount, and on the refunds endpoint
    let mut other = create_body("k", "pm_card_visa", "pay_k", true);
    other["amount_money"]["amount"] = json!(3001);
    let reused = post(&model, PAYMENTS, &other, T0 + 1);
    let on_refunds = post(&model, REFUNDS, &refund_body("k", &id, 100), T0 + 2);
    // THEN both are 400 INVALID_REQUEST_ERROR IDEMPOTENCY_KEY_REUSED on idempotency_key
    for answer in [&reused, &on_refunds] {
        assert_eq!(
            refusal(answer),
            (
                400,
                "INVALID_REQUEST_ERROR".to_owned(),
                "IDEMPOTENCY_KEY_REUSED".to_owned(),
                json!("idempotency_key")
            ),
            "{}",
            answer.body
        );
        assert!(answer.events.is_empty());
    }
    // AND nothing changed: one payment, no refund
    assert_eq!(model.charges().len(), 1);
    assert!(model.refunds().is_empty());
}

#[test]
fn a_key_in_flight_is_409_conflict_on_create_and_on_cancel_by_key() {
    let model = model();
    // GIVEN a create holding "k" is still running
    assert!(model.begin_in_flight("k"));
    // WHEN the create is sent again, and a cancel by that key is sent
    let create = post(
        &model,
        PAYMENTS,
        &create_body("k", "pm_card_visa", "pay_1", true),
        T0,
    );
    let cancel = post(
        &model,
        &format!("{PAYMENTS}/cancel"),
        &json!({"idempotency_key": "k"}),
        T0,
    );
    // THEN both are 409 INVALID_REQUEST_ERROR CONFLICT, and nothing was made
    for answer in [&create, &cancel] {
        assert_eq!(
            refusal(answer),
            (
                409,
                "INVALID_REQUEST_ERROR".to_owned(),
                "CONFLICT".to_owned(),
                json!("idempotency_key")
            )
        );
    }
    assert!(model.charges().is_empty());
    // AND once the running request ends without an answer, the key is free
    assert!(model.end_in_flight("k"));
    let ok = post(
        &model,
        PAYMENTS,
        &create_body("k", "pm_card_visa", "pay_1", true),
        T0,
    );
    assert_eq!((ok.status, ok.replayed), (200, false));
}

// Declines and test tokens.

#[test]
fn a_decline_is_400_with_errors_and_a_failed_payment_stored_under_the_key() {
    let model = model();
    for (card, (source_id, code, last_4)) in [
        ("pm_card_visa_chargeDeclined", "GENERIC_DECLINE", "0002"),
        ("cnon:card-nonce-declined", "GENERIC_DECLINE", "0002"),
        (
            "pm_card_chargeDeclinedInsufficientFunds",
            "INSUFFICIENT_FUNDS",
            "9995",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        // WHEN a declined card is charged, with or without autocomplete
        for autocomplete in [true, false] {
            let key = format!("{card}-{autocomplete}");
            let (answer, id) = create(&model, &key, source_id, autocomplete, T0);
            // THEN HTTP 400 with both the error and the FAILED payment
            assert_eq!(answer.status, 400, "{}", answer.body);
            let error = json!({
                "category": "PAYMENT_METHOD_ERROR",
                "code": code,
                "detail": format!("Authorization error: '{code}'"),
            });
            assert_eq!(json(&answer)["errors"], json!([error]));
            let failed = payment(&answer);
            assert!(is_square_payment_id(&id), "{id}");
            assert_eq!(failed["status"], "FAILED");
            assert_eq!(failed["card_details"]["status"], "FAILED");
            assert_eq!(failed["card_details"]["errors"], json!([error]));
            assert_eq!(failed["card_details"]["card"]["last_4"], last_4);
            assert_eq!(
                failed["approved_money"],
                json!({"amount": 0, "currency": "USD"})
            );
            assert_eq!(failed["amount_money"]["amount"], 3000);
            // AND payment.created is sent, and the ledger reads it failed
            assert_eq!(kinds(&answer.events), ["payment.created"]);
            let row = model.charges().into_iter().find(|c| c.id == id);
            assert_eq!(row.map(|c| c.outcome), Some("failed".to_owned()));
            // AND the answer is stored under the key
            let again = create(&model, &key, source_id, autocomplete, T0 + 1).0;
            assert_eq!(
                (again.status, again.body, again.replayed),
                (400, answer.body, true)
            );
        }
    }
}

#[test]
fn three_d_secure_cards_without_a_verification_token_are_declined_verification_required() {
    let model = model();
    for source_id in [
        "pm_card_threeDSecure2Required",
        "pm_card_authenticationRequired",
    ] {
        for autocomplete in [true, false] {
            // WHEN a card that needs SCA is charged without a verification_token
            let (answer, _) = create(
                &model,
                &format!("{source_id}{autocomplete}"),
                source_id,
                autocomplete,
                T0,
            );
            // THEN 400 PAYMENT_METHOD_ERROR CARD_DECLINED_VERIFICATION_REQUIRED, FAILED payment
            assert_eq!(answer.status, 400, "{}", answer.body);
            assert_eq!(
                refusal(&answer),
                (
                    400,
                    "PAYMENT_METHOD_ERROR".to_owned(),
                    "CARD_DECLINED_VERIFICATION_REQUIRED".to_owned(),
                    Value::Null
                )
            );
            assert_eq!(payment(&answer)["status"], "FAILED");
            assert_eq!(
                payment(&answer)["card_details"]["errors"][0]["code"],
                "CARD_DECLINED_VERIFICATION_REQUIRED"
            );
        }
        // AND with the buyer's verification_token it charges like any approving card
        let mut body = create_body(&format!("{source_id}-verified"), source_id, "pay_v", true);
        body["verification_token"] = json!("verf:CBASEDuXGrmZrTqmwRRsWT5sRPN");
        let verified = post(&model, PAYMENTS, &body, T0);
        assert_eq!(verified.status, 200, "{}", verified.body);
        assert_eq!(payment(&verified)["status"], "COMPLETED");
    }
}

#[test]
fn sandbox_nonces_charge_like_their_test_tokens_and_show_as_sent() {
    let model = model();
    // WHEN Square's sandbox nonce for a good card is charged
    let id = completed(&model, "k", "cnon:card-nonce-ok", T0);
    // THEN the payment is COMPLETED on Square's sandbox Visa
    let retrieved = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0));
    assert_eq!(retrieved["card_details"]["card"]["last_4"], "1111");
    // AND the inspection view shows the nonce as sent
    assert_eq!(model.charges()[0].payment_method, "cnon:card-nonce-ok");
}

#[test]
fn unknown_tokens_are_404_and_errors_before_the_charge_are_500_and_not_stored() {
    let model = model();
    // WHEN the source names nothing the fake knows
    let unknown = post(
        &model,
        PAYMENTS,
        &create_body("k1", "cnon:nobody", "pay_1", true),
        T0,
    );
    // THEN 404 INVALID_REQUEST_ERROR NOT_FOUND on source_id, nothing created
    assert_eq!(
        refusal(&unknown),
        (
            404,
            "INVALID_REQUEST_ERROR".to_owned(),
            "NOT_FOUND".to_owned(),
            json!("source_id")
        )
    );
    assert!(the_error(&unknown)["detail"]
        .as_str()
        .is_some_and(|detail| detail.starts_with("Card nonce not found")));
    assert!(unknown.events.is_empty());
    // WHEN the PSP fails before charging
    let body = create_body("k2", "pm_fake_error_before_charge", "pay_2", true);
    let failed = post(&model, PAYMENTS, &body, T0);
    // THEN 500 API_ERROR INTERNAL_SERVER_ERROR, nothing created
    assert_eq!(
        refusal(&failed),
        (
            500,
            "API_ERROR".to_owned(),
            "INTERNAL_SERVER_ERROR".to_owned(),
            Value::Null
        )
    );
    assert!(model.charges().is_empty());
    // AND nothing stored: the retry under the same key runs again (and fails again)
    let retry = post(&model, PAYMENTS, &body, T0 + 1);
    assert_eq!((retry.status, retry.replayed), (500, false));
}

#[test]
fn lost_and_slow_answers_are_made_and_stored_first() {
    let model = model();
    // WHEN the answer is lost, or slow
    let (lost, lost_id) = create(&model, "k-lost", "pm_fake_lost_response", true, T0);
    let (slow, _) = create(&model, "k-slow", "pm_fake_slow", true, T0);
    // THEN the payment was made either way, and the server is told how to misdeliver
    assert_eq!(lost.delivery, Delivery::Sever);
    assert_eq!(slow.delivery, Delivery::After(Duration::from_secs(30)));
    assert_eq!(payment(&lost)["status"], "COMPLETED");
    // AND the retry of the lost one replays the payment at once
    let retry = create(&model, "k-lost", "pm_fake_lost_response", true, T0 + 1).0;
    assert_eq!((retry.replayed, retry.delivery), (true, Delivery::Now));
    assert_eq!(payment(&retry)["id"], lost_id.as_str());
    assert_eq!(model.charges().len(), 2);
}

#[test]
fn processing_and_requires_action_payments_are_pending_then_move_on_with_payment_updated() {
    let model = model();
    // GIVEN a processing payment with and without autocomplete, and one needing an action
    let (completes, completes_id) = create(&model, "k1", "pm_fake_processing", true, T0);
    let (approves, approves_id) = create(&model, "k2", "pm_fake_processing", false, T0);
    let (fails, fails_id) = create(&model, "k3", "pm_fake_requires_action", true, T0);
    // THEN each is answered 200 PENDING / AUTHORIZED
    for answer in [&completes, &approves, &fails] {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(payment(answer)["status"], "PENDING");
        assert_eq!(payment(answer)["card_details"]["status"], "AUTHORIZED");
    }
    // WHEN processing_for (5 minutes) has passed
    let events = model.tick(T0 + 5 * 60 * 1000);
    // THEN the processing payments are COMPLETED and APPROVED, each with payment.updated
    assert_eq!(kinds(&events), ["payment.updated", "payment.updated"]);
    assert_eq!(
        status_of(&model, &completes_id, T0 + 5 * 60 * 1000),
        "COMPLETED"
    );
    assert_eq!(
        status_of(&model, &approves_id, T0 + 5 * 60 * 1000),
        "APPROVED"
    );
    let event: Value = serde_json::from_str(&events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["payment"]["status"], "COMPLETED");
    // WHEN requires_action_for (1 hour) has passed
    let events = model.tick(T0 + HOUR_MS);
    // THEN the one waiting for an action FAILED, CARD_DECLINED_VERIFICATION_REQUIRED
    assert_eq!(kinds(&events), ["payment.updated"]);
    let failed = payment(&get(
        &model,
        &format!("{PAYMENTS}/{fails_id}"),
        T0 + HOUR_MS,
    ));
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(
        failed["card_details"]["errors"][0]["code"],
        "CARD_DECLINED_VERIFICATION_REQUIRED"
    );
    assert_ne!(failed["updated_at"], failed["created_at"]);
}

// Complete and cancel.

#[test]
fn complete_captures_an_approved_payment_and_refuses_any_other() {
    let model = model();
    let id = approved(&model, "k", T0);
    let path = format!("{PAYMENTS}/{id}/complete");
    let version = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0))["version_token"].clone();
    // WHEN complete comes without a body, with an unknown field, or with a stale version
    let no_body = post_raw(&model, &path, "", T0 + 1);
    let unknown = post(&model, &path, &json!({"amount_money": 1}), T0 + 1);
    let stale = post(&model, &path, &json!({"version_token": "stale"}), T0 + 1);
    // THEN each is refused and the payment is still APPROVED
    assert_eq!(refusal(&no_body).2, "EXPECTED_JSON_BODY");
    assert_eq!(refusal(&unknown).2, "UNKNOWN_BODY_PARAMETER");
    assert_eq!(
        refusal(&stale),
        (
            400,
            "INVALID_REQUEST_ERROR".to_owned(),
            "VERSION_MISMATCH".to_owned(),
            Value::Null
        )
    );
    assert_eq!(status_of(&model, &id, T0 + 1), "APPROVED");
    // WHEN it is completed with its current version
    let done = post(
        &model,
        &path,
        &json!({"version_token": version}),
        T0 + 2_000,
    );
    // THEN 200 COMPLETED / CAPTURED with captured_at, a new version, and payment.updated
    assert_eq!(done.status, 200, "{}", done.body);
    let paid = payment(&done);
    assert_eq!(paid["status"], "COMPLETED");
    assert_eq!(paid["card_details"]["status"], "CAPTURED");
    assert_eq!(
        paid["card_details"]["card_payment_timeline"]["captured_at"],
        paid["updated_at"]
    );
    assert_ne!(paid["version_token"], version);
    assert_eq!(kinds(&done.events), ["payment.updated"]);
    let event: Value = serde_json::from_str(&done.events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["payment"], paid);
    let row = &model.charges()[0];
    assert_eq!(
        (row.outcome.as_str(), row.amount_captured),
        ("succeeded", Some(3000))
    );
    assert_eq!(row.captures.len(), 1);
    assert_eq!(row.captures[0].idempotency_key, None);
    // AND completing again is 400 BAD_REQUEST naming the status
    let again = post(&model, &path, &json!({}), T0 + 3_000);
    assert_eq!(refusal(&again).2, "BAD_REQUEST");
    assert!(the_error(&again)["detail"]
        .as_str()
        .is_some_and(|detail| detail.contains("COMPLETED")));
    // AND a FAILED or CANCELED payment cannot be completed either; an unknown one is 404
    let (_, failed) = create(&model, "k-failed", "pm_card_visa_chargeDeclined", false, T0);
    let canceled = approved(&model, "k-canceled", T0);
    post(
        &model,
        &format!("{PAYMENTS}/{canceled}/cancel"),
        &json!({}),
        T0,
    );
    for (other, status) in [(failed, "FAILED"), (canceled, "CANCELED")] {
        let refused = post(
            &model,
            &format!("{PAYMENTS}/{other}/complete"),
            &json!({}),
            T0 + 1,
        );
        assert_eq!(refusal(&refused).2, "BAD_REQUEST");
        assert_eq!(status_of(&model, &other, T0 + 1), status);
    }
    let unknown = post(
        &model,
        &format!("{PAYMENTS}/nopeZY/complete"),
        &json!({}),
        T0,
    );
    assert_eq!(
        refusal(&unknown),
        (
            404,
            "INVALID_REQUEST_ERROR".to_owned(),
            "NOT_FOUND".to_owned(),
            Value::Null
        )
    );
}

#[test]
fn cancel_voids_an_approved_payment_and_refuses_any_other() {
    let model = model();
    let id = approved(&model, "k", T0);
    let path = format!("{PAYMENTS}/{id}/cancel");
    // WHEN an approved payment is canceled (no body)
    let canceled = post_raw(&model, &path, "", T0 + 1_000);
    // THEN 200 CANCELED / VOIDED with voided_at, payment.updated
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    let voided = payment(&canceled);
    assert_eq!(voided["status"], "CANCELED");
    assert_eq!(voided["card_details"]["status"], "VOIDED");
    assert_eq!(
        voided["card_details"]["card_payment_timeline"]["voided_at"],
        voided["updated_at"]
    );
    assert_eq!(kinds(&canceled.events), ["payment.updated"]);
    // AND the ledger recorded a cancel under no key
    let row = &model.charges()[0];
    assert_eq!(row.outcome, "canceled");
    assert_eq!(row.cancels.len(), 1);
    assert_eq!(row.cancels[0].idempotency_key, None);
    // WHEN it is canceled again, or a COMPLETED payment is canceled ({} body)
    let again = post(&model, &path, &json!({}), T0 + 2_000);
    let paid = completed(&model, "k-paid", "pm_card_visa", T0);
    let refused = post(
        &model,
        &format!("{PAYMENTS}/{paid}/cancel"),
        &json!({}),
        T0 + 2_000,
    );
    // THEN 400 BAD_REQUEST, nothing changes
    for answer in [&again, &refused] {
        assert_eq!(refusal(answer).2, "BAD_REQUEST", "{}", answer.body);
        assert!(answer.events.is_empty());
    }
    assert_eq!(status_of(&model, &paid, T0 + 2_000), "COMPLETED");
    // AND a body with fields is refused, an unknown payment is 404
    let fields = post(&model, &path, &json!({"reason": "x"}), T0);
    assert_eq!(refusal(&fields).2, "UNKNOWN_BODY_PARAMETER");
    let unknown = post_raw(&model, &format!("{PAYMENTS}/nopeZY/cancel"), "", T0);
    assert_eq!(unknown.status, 404);
}

// Cancel by idempotency key.

#[test]
fn cancel_by_key_voids_the_approved_payment_made_under_it() {
    let model = model();
    let cancel = |key: &str, now_ms| {
        post(
            &model,
            &format!("{PAYMENTS}/cancel"),
            &json!({"idempotency_key": key}),
            now_ms,
        )
    };
    // GIVEN an approved payment made under "k"
    let id = approved(&model, "k", T0);
    // WHEN it is canceled by that key
    let answer = cancel("k", T0 + 1_000);
    // THEN 200 {} and the payment is CANCELED / VOIDED, with payment.updated
    assert_eq!((answer.status, json(&answer)), (200, json!({})));
    assert_eq!(kinds(&answer.events), ["payment.updated"]);
    let voided = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0 + 1_000));
    assert_eq!(voided["status"], "CANCELED");
    assert_eq!(voided["card_details"]["status"], "VOIDED");
    // AND the ledger recorded the cancel with the key
    let row = &model.charges()[0];
    assert_eq!(row.cancels.len(), 1);
    assert_eq!(row.cancels[0].idempotency_key.as_deref(), Some("k"));
    // AND canceling by the key again is {} and changes nothing
    let again = cancel("k", T0 + 2_000);
    assert_eq!((again.status, json(&again)), (200, json!({})));
    assert!(again.events.is_empty());
    assert_eq!(model.charges()[0].cancels.len(), 1);
}

#[test]
fn cancel_by_key_answers_nothing_found_and_refuses_a_completed_payment() {
    let model = model();
    let cancel = |key: &str, now_ms| {
        post(
            &model,
            &format!("{PAYMENTS}/cancel"),
            &json!({"idempotency_key": key}),
            now_ms,
        )
    };
    // GIVEN a completed, a failed, a pending payment, and a create that made nothing
    let paid = completed(&model, "k-paid", "pm_card_visa", T0);
    let (_, failed) = create(&model, "k-failed", "pm_card_visa_chargeDeclined", false, T0);
    let (_, pending) = create(&model, "k-pending", "pm_fake_processing", false, T0);
    post(
        &model,
        PAYMENTS,
        &create_body("k-none", "cnon:nobody", "pay_n", false),
        T0,
    );
    // WHEN each is canceled by its key, and a key never used
    // THEN the COMPLETED and PENDING ones are 400 BAD_REQUEST, and stay as they were
    for (key, id, status) in [
        ("k-paid", &paid, "COMPLETED"),
        ("k-pending", &pending, "PENDING"),
    ] {
        let refused = cancel(key, T0 + 1);
        assert_eq!(refusal(&refused).2, "BAD_REQUEST", "{key}");
        assert!(the_error(&refused)["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains("cannot be canceled")));
        assert_eq!(status_of(&model, id, T0 + 1), status);
    }
    // AND the FAILED one, the create that made nothing and the unknown key are 200 {}
    for key in ["k-failed", "k-none", "k-never"] {
        let answer = cancel(key, T0 + 1);
        assert_eq!((answer.status, json(&answer)), (200, json!({})), "{key}");
        assert!(answer.events.is_empty());
    }
    assert_eq!(status_of(&model, &failed, T0 + 1), "FAILED");
    assert!(model
        .charges()
        .iter()
        .all(|charge| charge.cancels.is_empty()));
    // AND the key is validated as on a create
    assert_eq!(
        refusal(&post(&model, &format!("{PAYMENTS}/cancel"), &json!({}), T0)).2,
        "MISSING_REQUIRED_PARAMETER"
    );
    assert_eq!(refusal(&cancel(&"k".repeat(46), T0)).2, "VALUE_TOO_LONG");
}

#[test]
fn cancel_by_a_forgotten_key_finds_nothing_though_the_payment_exists() {
    let model = model();
    // GIVEN an approved payment whose key the PSP has forgotten (keys live 24–48 h; the
    // authorization 7 days)
    let id = approved(&model, "k", T0);
    let later = T0 + 49 * HOUR_MS;
    // WHEN it is canceled by that key
    let answer = post(
        &model,
        &format!("{PAYMENTS}/cancel"),
        &json!({"idempotency_key": "k"}),
        later,
    );
    // THEN 200 {}: no payment is known under the key, and the payment stays APPROVED
    assert_eq!((answer.status, json(&answer)), (200, json!({})));
    assert!(answer.events.is_empty());
    assert_eq!(status_of(&model, &id, later), "APPROVED");
    assert!(model.charges()[0].cancels.is_empty());
}

// The delay action.

#[test]
fn an_approved_payment_lapses_into_canceled_after_its_delay() {
    let model = model();
    // GIVEN an approved payment with the default delay (7 days, CANCEL)
    let id = approved(&model, "k", T0);
    // WHEN just under 7 days have passed, nothing happens
    assert!(model.tick(T0 + 7 * DAY_MS - 1).is_empty());
    assert_eq!(status_of(&model, &id, T0 + 7 * DAY_MS - 1), "APPROVED");
    // WHEN 7 days have passed
    let events = model.tick(T0 + 7 * DAY_MS);
    // THEN it is CANCELED / VOIDED with payment.updated
    assert_eq!(kinds(&events), ["payment.updated"]);
    let voided = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0 + 7 * DAY_MS));
    assert_eq!(voided["status"], "CANCELED");
    assert_eq!(voided["card_details"]["status"], "VOIDED");
    assert_eq!(
        voided["card_details"]["card_payment_timeline"]["voided_at"],
        voided["delayed_until"]
    );
    // AND the ledger reads it as the PSP's own cancel, under no key
    let row = &model.charges()[0];
    assert_eq!(row.outcome, "canceled");
    assert_eq!(row.cancels[0].idempotency_key, None);
    assert_eq!(
        row.cancels[0].cancellation_reason.as_deref(),
        Some("automatic")
    );
    // AND completing it now is refused
    let late = post(
        &model,
        &format!("{PAYMENTS}/{id}/complete"),
        &json!({}),
        T0 + 7 * DAY_MS,
    );
    assert_eq!(refusal(&late).2, "BAD_REQUEST");
}

#[test]
fn a_custom_delay_and_the_complete_action_are_honoured() {
    let model = model();
    // GIVEN approved payments with a one-hour delay: one CANCEL, one COMPLETE
    let body = |key: &str, action: &str| {
        let mut body = create_body(key, "pm_card_visa", "pay_1", false);
        body["delay_duration"] = json!("PT1H");
        body["delay_action"] = json!(action);
        body
    };
    let cancels = post(&model, PAYMENTS, &body("k1", "CANCEL"), T0);
    let completes = post(&model, PAYMENTS, &body("k2", "COMPLETE"), T0);
    assert_eq!(payment(&cancels)["delay_duration"], "PT1H");
    assert_eq!(
        payment(&completes)["delayed_until"],
        "2027-01-15T09:00:00.000Z"
    );
    // WHEN the hour has passed
    let events = model.tick(T0 + HOUR_MS);
    // THEN the first is CANCELED and the second COMPLETED, each with payment.updated
    assert_eq!(kinds(&events), ["payment.updated", "payment.updated"]);
    let charges = model.charges();
    assert_eq!(charges[0].status, "CANCELED");
    assert_eq!(charges[1].status, "COMPLETED");
    // AND the completion is the PSP's own capture of the whole amount, under no key
    assert_eq!(charges[1].amount_captured, Some(3000));
    assert_eq!(charges[1].captures.len(), 1);
    assert_eq!(charges[1].captures[0].idempotency_key, None);
}

// Refunds.

#[test]
fn refunds_need_a_completed_payment_with_that_much_left() {
    let model = model();
    let (_, failed) = create(&model, "k-failed", "pm_card_visa_chargeDeclined", true, T0);
    let held = approved(&model, "k-held", T0);
    let canceled = approved(&model, "k-canceled", T0);
    post(
        &model,
        &format!("{PAYMENTS}/{canceled}/cancel"),
        &json!({}),
        T0,
    );
    let paid = completed(&model, "k-paid", "pm_card_visa", T0);
    let cases = [
        (
            refund_body("r1", &held, 100),
            400,
            "REFUND_ERROR",
            "REFUND_ERROR_PAYMENT_NEEDS_COMPLETION",
        ),
        (
            refund_body("r2", &failed, 100),
            400,
            "REFUND_ERROR",
            "PAYMENT_NOT_REFUNDABLE",
        ),
        (
            refund_body("r3", &canceled, 100),
            400,
            "REFUND_ERROR",
            "PAYMENT_NOT_REFUNDABLE",
        ),
        (
            refund_body("r4", &paid, 3001),
            400,
            "REFUND_ERROR",
            "REFUND_AMOUNT_INVALID",
        ),
        (
            refund_body("r5", "nopeZY", 100),
            404,
            "INVALID_REQUEST_ERROR",
            "NOT_FOUND",
        ),
        (
            json!({"idempotency_key": "r6", "payment_id": paid, "amount_money": {"amount": 100, "currency": "EUR"}}),
            400,
            "INVALID_REQUEST_ERROR",
            "CURRENCY_MISMATCH",
        ),
    ];
    for (body, status, category, code) in cases {
        // WHEN a refund is asked of a payment that cannot give it
        let answer = post(&model, REFUNDS, &body, T0 + 1);
        // THEN it is refused in Square's words, and no refund is made
        let (got_status, got_category, got_code, _) = refusal(&answer);
        assert_eq!(
            (got_status, got_category.as_str(), got_code.as_str()),
            (status, category, code),
            "{body}"
        );
        assert!(answer.events.is_empty());
    }
    assert!(model.refunds().is_empty());
    // AND the approved payment is still APPROVED (a refund does not complete it)
    assert_eq!(status_of(&model, &held, T0 + 1), "APPROVED");
}

#[test]
fn a_refund_starts_pending_completes_next_and_accumulates_on_the_payment() {
    let model = model();
    let id = completed(&model, "k", "pm_card_visa", T0);
    // WHEN 1000 of the 3000 are refunded
    let first = post(&model, REFUNDS, &refund_body("r1", &id, 1000), T0 + 1_000);
    // THEN 200 {"refund"} PENDING, named after the payment, with refund.created
    assert_eq!(first.status, 200, "{}", first.body);
    let created = refund(&first);
    let refund_id = created["id"].as_str().unwrap_or_default().to_owned();
    assert!(refund_id.starts_with(&format!("{id}_")), "{refund_id}");
    assert_eq!(refund_id.len(), 29 + 1 + 43);
    assert_eq!(created["status"], "PENDING");
    assert_eq!(
        created["amount_money"],
        json!({"amount": 1000, "currency": "USD"})
    );
    assert_eq!(created["payment_id"], id.as_str());
    assert_eq!(created["reason"], "requested by the customer");
    assert_eq!(created["location_id"], "LPAYONCEFAKE1");
    assert!(is_rfc3339_ms(&created["created_at"]));
    assert_eq!(kinds(&first.events), ["refund.created"]);
    // WHEN it is read back the next moment
    let read = get(&model, &format!("{REFUNDS}/{refund_id}"), T0 + 1_000);
    // THEN it is COMPLETED, and refund.updated went out with that answer
    assert_eq!(refund(&read)["status"], "COMPLETED");
    assert_eq!(kinds(&read.events), ["refund.updated"]);
    let event: Value = serde_json::from_str(&read.events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["refund"], refund(&read));
    // AND the payment lists it and counts it
    let paid = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0 + 1_000));
    assert_eq!(paid["status"], "COMPLETED");
    assert_eq!(paid["refund_ids"], json!([refund_id]));
    assert_eq!(
        paid["refunded_money"],
        json!({"amount": 1000, "currency": "USD"})
    );
    // WHEN the rest is refunded, then one more unit
    let second = post(&model, REFUNDS, &refund_body("r2", &id, 2000), T0 + 2_000);
    let third = post(&model, REFUNDS, &refund_body("r3", &id, 1), T0 + 3_000);
    // THEN the second is made and the third is REFUND_AMOUNT_INVALID
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(refusal(&third).2, "REFUND_AMOUNT_INVALID");
    let paid = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0 + 3_000));
    assert_eq!(paid["refunded_money"]["amount"], 3000);
    assert_eq!(paid["refund_ids"].as_array().map(Vec::len), Some(2));
    // AND a replay of the first refund is its first answer; nothing new is made
    let replay = post(&model, REFUNDS, &refund_body("r1", &id, 1000), T0 + 4_000);
    assert_eq!(
        (replay.body.as_str(), replay.replayed),
        (first.body.as_str(), true)
    );
    // AND the inspection view shows both, completed, for the payonce payment
    let refunds = model.refunds();
    assert_eq!(refunds.len(), 2);
    assert!(refunds
        .iter()
        .all(|r| r.provider == "square" && r.status == "COMPLETED"));
    assert_eq!(refunds[0].payment_id.as_deref(), Some("pay_k"));
    assert_eq!(refunds[0].idempotency_key.as_deref(), Some("r1"));
    assert_eq!(refunds[0].payment_intent, id);
}

#[test]
fn refund_validation_comes_before_the_key() {
    let model = model();
    let id = completed(&model, "k", "pm_card_visa", T0);
    let base = refund_body("r", &id, 100);
    let with = |name: &str, value: Value| {
        let mut body = base.clone();
        body[name] = value;
        body
    };
    for (body, code) in [
        (with("unlinked", json!(true)), "UNKNOWN_BODY_PARAMETER"),
        (
            with("payment_id", Value::Null),
            "MISSING_REQUIRED_PARAMETER",
        ),
        (
            with("amount_money", json!({"amount": 0, "currency": "USD"})),
            "VALUE_TOO_LOW",
        ),
        (with("reason", json!("x".repeat(193))), "VALUE_TOO_LONG"),
        (
            with("idempotency_key", json!("r".repeat(46))),
            "VALUE_TOO_LONG",
        ),
    ] {
        // WHEN a refund under "r" is malformed
        let answer = post(&model, REFUNDS, &body, T0);
        // THEN it is refused with its code
        assert_eq!(refusal(&answer).2, code, "{body}");
    }
    // AND nothing was stored under "r": the valid refund runs fresh
    let ok = post(&model, REFUNDS, &base, T0);
    assert_eq!((ok.status, ok.replayed), (200, false), "{}", ok.body);
}

#[test]
fn refund_tokens_stay_pending_or_fail_later_with_refund_updated() {
    let model = model();
    let pending = completed(&model, "k1", "pm_fake_refund_pending", T0);
    let failing = completed(&model, "k2", "pm_card_refundFail", T0);
    // WHEN each is refunded in part
    let slow = post(&model, REFUNDS, &refund_body("r1", &pending, 1000), T0);
    let fails = post(&model, REFUNDS, &refund_body("r2", &failing, 1000), T0);
    // THEN the first answers PENDING and the second COMPLETED
    assert_eq!(refund(&slow)["status"], "PENDING");
    assert_eq!(refund(&fails)["status"], "COMPLETED");
    let slow_id = refund(&slow)["id"].as_str().unwrap_or_default().to_owned();
    let fails_id = refund(&fails)["id"].as_str().unwrap_or_default().to_owned();
    // WHEN refund_fail_after (1 minute) has passed
    let events = model.tick(T0 + 60 * 1000);
    // THEN the second is FAILED (refund.updated), its amount no longer counted
    assert_eq!(kinds(&events), ["refund.updated"]);
    let failed = refund(&get(
        &model,
        &format!("{REFUNDS}/{fails_id}"),
        T0 + 60 * 1000,
    ));
    assert_eq!(failed["status"], "FAILED");
    let payment_now = payment(&get(
        &model,
        &format!("{PAYMENTS}/{failing}"),
        T0 + 60 * 1000,
    ));
    assert_eq!(payment_now["refunded_money"]["amount"], 0);
    // AND that payment takes no further refund
    let refused = post(
        &model,
        REFUNDS,
        &refund_body("r3", &failing, 1000),
        T0 + 60 * 1000,
    );
    assert_eq!(refusal(&refused).2, "PAYMENT_NOT_REFUNDABLE");
    // AND the first is still PENDING until refund_pending_for (10 minutes), then COMPLETED
    assert_eq!(
        refund(&get(
            &model,
            &format!("{REFUNDS}/{slow_id}"),
            T0 + 60 * 1000
        ))["status"],
        "PENDING"
    );
    let events = model.tick(T0 + 10 * 60 * 1000);
    assert_eq!(kinds(&events), ["refund.updated"]);
    assert_eq!(
        refund(&get(
            &model,
            &format!("{REFUNDS}/{slow_id}"),
            T0 + 10 * 60 * 1000
        ))["status"],
        "COMPLETED"
    );
    // AND GET of an unknown refund is 404 NOT_FOUND
    let unknown = get(&model, &format!("{REFUNDS}/nope"), T0);
    assert_eq!(
        (unknown.status, refusal(&unknown).2.as_str()),
        (404, "NOT_FOUND")
    );
}

// Webhooks and inspection.

#[test]
fn events_carry_squares_envelope() {
    let model = model();
    // WHEN a payment is made and refunded
    let (created, id) = create(&model, "k", "pm_card_visa", true, T0);
    let refunded = post(&model, REFUNDS, &refund_body("r", &id, 100), T0 + 1_000);
    // THEN each event is {merchant_id, type, event_id, created_at, data: {type, id, object}}
    for (answer, kind, object_type, object) in [
        (&created, "payment.created", "payment", payment(&created)),
        (&refunded, "refund.created", "refund", refund(&refunded)),
    ] {
        let event = &answer.events[0];
        let body: Value = serde_json::from_str(&event.body).unwrap_or(Value::Null);
        assert_eq!(event.kind, kind);
        assert_eq!(body["event_id"], event.id.as_str());
        assert_eq!(body["merchant_id"], "PAYONCEFAKESQ");
        assert_eq!(body["type"], kind);
        assert!(is_rfc3339_ms(&body["created_at"]));
        assert_eq!(body["data"]["type"], object_type);
        assert_eq!(body["data"]["id"], object["id"]);
        assert_eq!(body["data"]["object"], json!({ object_type: object }));
        // A UUID: 8-4-4-4-12 lowercase hex, version 4.
        let parts: Vec<&str> = event.id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(event
            .id
            .bytes()
            .all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(parts[2].starts_with('4'));
    }
    assert_ne!(created.events[0].id, refunded.events[0].id);
}

#[test]
fn the_inspection_view_reads_squares_payment() {
    let model = model();
    // GIVEN an approved payment, canceled by its key
    let id = approved(&model, "k", T0);
    post(
        &model,
        &format!("{PAYMENTS}/cancel"),
        &json!({"idempotency_key": "k"}),
        T0 + 1,
    );
    // WHEN the test looks at _fake/charges
    let charges = model.charges();
    let row = &charges[0];
    // THEN the neutral fields read Square's payment
    assert_eq!(row.provider, "square");
    assert_eq!(row.id, id);
    assert_eq!(row.status, "CANCELED");
    assert_eq!(row.outcome, "canceled");
    assert_eq!((row.amount, row.currency.as_str()), (3000, "usd"));
    assert_eq!(row.payment_id.as_deref(), Some("pay_k"));
    assert_eq!(row.idempotency_key.as_deref(), Some("k"));
    assert_eq!(row.payment_method, "pm_card_visa");
    assert_eq!(row.capture_method, "manual");
    assert_eq!(row.cancels.len(), 1);
    assert_eq!(row.cancels[0].idempotency_key.as_deref(), Some("k"));
    // AND `object` is the Payment as GET answers it
    let retrieved = payment(&get(&model, &format!("{PAYMENTS}/{id}"), T0 + 1));
    assert_eq!(row.object.as_ref(), Some(&retrieved));
    // AND it serialises with the object, which the other faces leave out
    let serialised = serde_json::to_value(row).unwrap_or(Value::Null);
    assert_eq!(serialised["object"]["status"], "CANCELED");
    assert_eq!(serialised["provider"], "square");
}

#[test]
fn one_seed_gives_the_same_answers() {
    // GIVEN two models with the same seed
    let run = || {
        let model = model();
        let (answer, id) = create(&model, "k", "pm_card_visa", true, T0);
        let refund = post(&model, REFUNDS, &refund_body("r", &id, 100), T0 + 1);
        (answer.body, answer.events[0].body.clone(), refund.body)
    };
    // WHEN the same calls are made on each
    // THEN the answers and events are the same, byte for byte
    assert_eq!(run(), run());
}
