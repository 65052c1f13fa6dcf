//! The 2C2P face's rules, each tested through the model as the server and the simulation
//! call it.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::Mac as _;
use serde_json::{json, Value};

use super::{json, model_with, T0};
use crate::faces::twoc2p::{
    mac, notification_id, sign, verified, TwoC2pFace, ALG, DO_PAYMENT_PATH, INQUIRY_PATH,
    NOTIFICATION_KIND, PAYMENT_TOKEN_PATH, TOKEN_LIFETIME_MS,
};
use crate::model::{FakeModel, ModelConfig, WireAnswer, WireRequest};
use crate::provider::Provider;

const MERCHANT: &str = crate::provider::DEFAULT_TWOC2P_MERCHANT_ID;
const KEY: &str = crate::provider::DEFAULT_TWOC2P_SECRET_KEY;
const INVOICE: &str = "0123456789abcdef0123456789abcdef";

fn config() -> ModelConfig {
    ModelConfig {
        provider: Provider::TwoC2p,
        api_key: KEY.to_owned(),
        ..ModelConfig::default()
    }
}

fn model() -> FakeModel {
    model_with(config())
}

fn post(model: &FakeModel, path: &str, body: &str, now_ms: i64) -> WireAnswer {
    model.handle(
        &WireRequest {
            method: "POST",
            path,
            query: None,
            authorization: None,
            idempotency_key: None,
            prefer: None,
            body: body.as_bytes(),
        },
        now_ms,
    )
}

fn envelope(key: &str, claims: &Value) -> String {
    json!({ "payload": sign(key, claims) }).to_string()
}

/// The claims of a signed answer, verified with the default key (Null if it does not verify).
fn claims(answer: &WireAnswer) -> Value {
    answer_claims(KEY, &answer.body)
}

/// The claims of a `{"payload":"<JWT>"}` body if it is HS256 under `key` (Null otherwise):
/// what payonce's adapter checks of an answer.
fn answer_claims(key: &str, body: &str) -> Value {
    let body: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let token = body["payload"].as_str().unwrap_or_default();
    let segments: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = segments.as_slice() else {
        return Value::Null;
    };
    let decode = |segment: &str| URL_SAFE_NO_PAD.decode(segment).unwrap_or_default();
    let header: Value = serde_json::from_slice(&decode(header)).unwrap_or(Value::Null);
    let good = header["alg"] == ALG
        && mac(key, segments[0], claims)
            .verify_slice(&decode(signature))
            .is_ok();
    if good {
        serde_json::from_slice(&decode(claims)).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}

/// A plain answer's `respCode`, or a signed one's.
fn resp(answer: &WireAnswer) -> String {
    let plain = json(answer)["respCode"].clone();
    let code = if plain.is_null() {
        claims(answer)["respCode"].clone()
    } else {
        plain
    };
    code.as_str().unwrap_or_default().to_owned()
}

/// The Payment Token claims payonce's adapter sends (`token_claims`), SGD 30.00.
fn token_claims(invoice: &str) -> Value {
    json!({
        "merchantID": MERCHANT, "invoiceNo": invoice, "description": "payonce order",
        "amount": 30.00, "currencyCode": "SGD", "paymentChannel": ["CC"], "request3DS": "N",
    })
}

fn token(model: &FakeModel, invoice: &str, now_ms: i64) -> WireAnswer {
    post(
        model,
        PAYMENT_TOKEN_PATH,
        &envelope(KEY, &token_claims(invoice)),
        now_ms,
    )
}

fn payment_token(model: &FakeModel, invoice: &str, now_ms: i64) -> String {
    let answer = token(model, invoice, now_ms);
    let claims = claims(&answer);
    assert_eq!(claims["respCode"], "0000", "{}", answer.body);
    claims["paymentToken"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn pay(model: &FakeModel, token: &str, method: &str, now_ms: i64) -> WireAnswer {
    let body = json!({
        "paymentToken": token,
        "payment": {"code": {"channelCode": "CC"}, "data": {"securePayToken": method}},
    });
    post(model, DO_PAYMENT_PATH, &body.to_string(), now_ms)
}

fn inquire(model: &FakeModel, invoice: &str, now_ms: i64) -> WireAnswer {
    let claims = json!({"merchantID": MERCHANT, "invoiceNo": invoice, "locale": "en"});
    post(model, INQUIRY_PATH, &envelope(KEY, &claims), now_ms)
}

/// Token, Do Payment with `method`, inquiry: the three answers.
fn charge(model: &FakeModel, invoice: &str, method: &str) -> (WireAnswer, WireAnswer) {
    let token = payment_token(model, invoice, T0);
    let paid = pay(model, &token, method, T0 + 1);
    (paid, inquire(model, invoice, T0 + 2))
}

// Envelope, merchant and signature ("JSON Web Tokens (JWT)", "API response code").

#[test]
fn jwts_verify_only_hs256_with_the_merchant_key_and_answers_are_signed_with_it() {
    let model = model();
    let answer = token(&model, INVOICE, T0);
    // The answer verifies with the merchant key, and claims webPaymentUrl, paymentToken,
    // respCode, respDesc ("Payment Token API" response parameters).
    let claims = claims(&answer);
    assert_eq!(
        (claims["respCode"].clone(), claims["respDesc"].clone()),
        (json!("0000"), json!("Success"))
    );
    let issued = claims["paymentToken"].as_str().unwrap_or_default();
    assert!(issued.len() >= 32, "{issued}");
    assert!(claims["webPaymentUrl"]
        .as_str()
        .is_some_and(|url| url.ends_with(issued)));
    // Another key, another merchant, another alg, no payload: plain errors, nothing stored.
    let wrong_key = envelope("another key", &token_claims("a1"));
    let mut other = token_claims("a2");
    other["merchantID"] = json!("JT01");
    let hs512 = {
        let jwt = sign(KEY, &token_claims("a3"));
        let (_, rest) = jwt.split_once('.').unwrap_or_default();
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS512","typ":"JWT"}"#);
        json!({ "payload": format!("{header}.{rest}") }).to_string()
    };
    for (body, code) in [
        (wrong_key, "9042"),
        (envelope(KEY, &other), "9007"),
        (hs512, "9042"),
        (json!({"payload": "a.b"}).to_string(), "9042"),
        ("{}".to_owned(), "9005"),
        ("not json".to_owned(), "9005"),
    ] {
        let refused = post(&model, PAYMENT_TOKEN_PATH, &body, T0);
        assert_eq!(
            (refused.status, json(&refused)["respCode"].clone()),
            (200, json!(code)),
            "{body}"
        );
        assert!(json(&refused).get("payload").is_none(), "plain: {body}");
    }
    // None of them stored its invoice.
    for invoice in ["a1", "a2", "a3"] {
        assert_eq!(resp(&token(&model, invoice, T0)), "0000", "{invoice}");
    }
}

#[test]
fn the_vectors_verify_as_2c2p_signs_them() {
    // shared/testdata/2c2p-notification-jwts.json: the face verifies as payonce does.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/testdata/2c2p-notification-jwts.json"
    );
    let text = std::fs::read_to_string(path).expect("the shared test vectors");
    let vectors: Value = serde_json::from_str(&text).expect("JSON");
    let config = ModelConfig {
        api_key: vectors["secret_key"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        twoc2p_merchant_id: "JT01".to_owned(),
        ..config()
    };
    let cases = vectors["cases"].as_array().cloned().unwrap_or_default();
    assert!(cases.len() >= 9);
    for case in cases {
        let body = json!({"payload": case["payload"]}).to_string();
        let face = TwoC2pFace::new(
            config.api_key.clone(),
            config.twoc2p_merchant_id.clone(),
            config.minimum_overrides.clone(),
            "http://127.0.0.1:1".to_owned(),
        );
        let result = verified(&face, body.as_bytes());
        assert_eq!(result.is_ok(), case["valid"] == true, "{}", case["name"]);
        if let Ok(claims) = result {
            assert_eq!(Value::Object(claims), case["claims"], "{}", case["name"]);
        }
    }
}

// Payment Token ("Payment Token API" request parameters, "API response code").

#[test]
fn an_existing_invoice_is_9015_whatever_became_of_its_token() {
    let model = model();
    // Never used.
    payment_token(&model, "unused1", T0);
    assert_eq!(resp(&token(&model, "unused1", T0 + 1)), "9015");
    // Paid, and declined.
    charge(&model, "paid1", "pm_card_visa");
    charge(&model, "declined1", "pm_card_visa_chargeDeclined");
    for invoice in ["paid1", "declined1"] {
        let again = token(&model, invoice, T0 + 3);
        assert_eq!(resp(&again), "9015", "{invoice}");
        assert!(json(&again).get("payload").is_none(), "plain");
    }
    assert_eq!(model.charges().len(), 2);
}

#[test]
fn token_validation_refuses_with_the_documented_codes_and_stores_nothing() {
    let model = FakeModel::new(
        ModelConfig {
            minimum_overrides: [("sgd".to_owned(), 2_000)].into_iter().collect(),
            ..config()
        },
        7,
    );
    let with = |field: &str, value: Value| {
        let mut claims = token_claims("v1");
        if value.is_null() {
            claims.as_object_mut().map(|c| c.remove(field));
        } else {
            claims[field] = value;
        }
        claims
    };
    for (claims, code) in [
        (with("invoiceNo", Value::Null), "9005"),
        (with("description", json!("")), "9005"),
        (with("amount", Value::Null), "9005"),
        (with("currencyCode", Value::Null), "9005"),
        (with("invoiceNo", json!("inv-1")), "9004"),
        (with("invoiceNo", json!("x".repeat(51))), "9006"),
        (with("description", json!("d".repeat(251))), "9006"),
        (with("amount", json!(0)), "9009"),
        (with("amount", json!(-5)), "9009"),
        (with("amount", json!("30.001")), "9009"),
        (with("amount", json!("1e3")), "9009"),
        (with("amount", json!("30.")), "9009"),
        (with("amount", json!("1000000.00")), "9009"),
        (with("amount", json!(19.99)), "9009"),
        (with("currencyCode", json!("sgd")), "9010"),
        (with("currencyCode", json!("XYZ")), "9010"),
        (with("paymentChannel", json!(["QR"])), "9057"),
        (with("request3DS", json!("X")), "9004"),
        (with("idempotencyID", json!("k1")), "9004"),
    ] {
        let refused = post(&model, PAYMENT_TOKEN_PATH, &envelope(KEY, &claims), T0);
        assert_eq!(resp(&refused), code, "{claims}");
    }
    // Nothing was stored under v1; the five-decimal D(12,5) form and a string are accepted.
    for (invoice, amount) in [("v1", json!("000000000030.00000")), ("v2", json!("20"))] {
        let mut claims = token_claims(invoice);
        claims["amount"] = amount;
        let answer = post(&model, PAYMENT_TOKEN_PATH, &envelope(KEY, &claims), T0);
        assert_eq!(resp(&answer), "0000", "{invoice}");
    }
}

// Do Payment ("Do Payment API", "Payment flow response code", "API response code").

#[test]
fn do_payment_answers_2000_and_the_inquiry_tells_approval_and_declines() {
    let model = model();
    for (invoice, method, code, outcome) in [
        ("i1", "pm_card_visa", "0000", "succeeded"),
        ("i2", "pm_card_visa_chargeDeclined", "4005", "failed"),
        (
            "i3",
            "pm_card_chargeDeclinedInsufficientFunds",
            "4051",
            "failed",
        ),
    ] {
        let (paid, inquiry) = charge(&model, invoice, method);
        assert_eq!(
            (paid.status, json(&paid)["respCode"].clone()),
            (200, json!("2000")),
            "{method}"
        );
        assert_eq!(json(&paid)["invoiceNo"], invoice);
        // One notification, when the charge is final.
        assert_eq!(paid.events.len(), 1, "{method}");
        assert_eq!(paid.events[0].kind, NOTIFICATION_KIND);
        let claims = claims(&inquiry);
        let tran_ref = claims["tranRef"].as_str().unwrap_or_default().to_owned();
        assert_eq!(tran_ref.len(), 7, "{claims}");
        assert_eq!(
            claims,
            json!({
                "merchantID": MERCHANT, "invoiceNo": invoice, "amount": "30.00",
                "currencyCode": "SGD", "tranRef": tran_ref, "channelCode": "CC",
                "transactionDateTime": "20270115080000", "respCode": code,
                "respDesc": claims["respDesc"],
            }),
            "{method}"
        );
        let charge = model.charges().pop().expect("a charge");
        assert_eq!(
            (
                charge.provider.as_str(),
                charge.id.as_str(),
                charge.status.as_str(),
                charge.outcome.as_str(),
                charge.amount,
                charge.currency.as_str(),
                charge.idempotency_key.as_deref(),
                charge.invoice_no.as_deref(),
            ),
            (
                "2c2p",
                tran_ref.as_str(),
                code,
                outcome,
                3000,
                "sgd",
                Some(invoice),
                Some(invoice)
            )
        );
    }
}

#[test]
fn a_payment_token_is_single_use_and_unknown_or_expired_ones_are_invalid() {
    let model = model();
    let token = payment_token(&model, "t1", T0);
    assert_eq!(resp(&pay(&model, &token, "pm_card_visa", T0)), "2000");
    // "Payment token already used".
    let again = pay(&model, &token, "pm_card_visa", T0 + 1);
    assert_eq!(resp(&again), "9041");
    assert!(again.events.is_empty());
    assert_eq!(
        resp(&pay(&model, "nosuchtoken", "pm_card_visa", T0)),
        "9040"
    );
    // "Valid for 30 minutes".
    let old = payment_token(&model, "t2", T0);
    let late = pay(&model, &old, "pm_card_visa", T0 + TOKEN_LIFETIME_MS + 10);
    assert_eq!(resp(&late), "9040");
    assert_eq!(model.charges().len(), 1);
}

#[test]
fn an_unknown_method_or_an_error_before_the_charge_leaves_the_token_unused() {
    let model = model();
    let token = payment_token(&model, "u1", T0);
    assert_eq!(resp(&pay(&model, &token, "pm_card_nope", T0)), "9004");
    assert_eq!(resp(&inquire(&model, "u1", T0)), "2002");
    assert_eq!(
        resp(&pay(&model, &token, "pm_fake_error_before_charge", T0)),
        "9993"
    );
    assert_eq!(resp(&inquire(&model, "u1", T0)), "2002");
    assert!(model.charges().is_empty());
    // The token still pays once.
    assert_eq!(resp(&pay(&model, &token, "pm_card_visa", T0)), "2000");
    assert_eq!(resp(&inquire(&model, "u1", T0)), "0000");
}

#[test]
fn do_payment_validation() {
    let model = model();
    let token = payment_token(&model, "d1", T0);
    for (body, code) in [
        ("nope".to_owned(), "9004"),
        (json!({"paymentToken": token}).to_string(), "9005"),
        (
            json!({"paymentToken": token, "payment": {"code": {"channelCode": "QR"},
                "data": {"securePayToken": "pm_card_visa"}}})
            .to_string(),
            "9057",
        ),
    ] {
        assert_eq!(
            resp(&post(&model, DO_PAYMENT_PATH, &body, T0)),
            code,
            "{body}"
        );
    }
    assert!(model.charges().is_empty());
}

#[test]
fn lost_and_slow_answers_are_delivered_as_on_the_other_faces() {
    let model = model();
    let (lost, inquiry) = charge(&model, "l1", "pm_fake_lost_response");
    assert_eq!(lost.delivery, crate::model::Delivery::Sever);
    assert_eq!(resp(&inquiry), "0000");
    let (slow, _) = charge(&model, "s1", "pm_fake_slow");
    assert!(matches!(slow.delivery, crate::model::Delivery::After(_)));
}

#[test]
fn waiting_charges_are_pending_then_final_with_a_notification() {
    let model = FakeModel::new(
        ModelConfig {
            processing_for: Duration::from_secs(60),
            requires_action_for: Duration::from_secs(120),
            ..config()
        },
        7,
    );
    let (processing, inquiry) = charge(&model, "p1", "pm_fake_processing");
    assert_eq!(resp(&processing), "2001");
    assert!(processing.events.is_empty());
    assert_eq!(resp(&inquiry), "0001");
    let (action, inquiry) = charge(&model, "r1", "pm_fake_requires_action");
    assert_eq!(resp(&action), "1001");
    assert!(json(&action)["data"].as_str().is_some());
    assert_eq!(resp(&inquiry), "0001");
    assert_eq!(model.charges()[0].outcome, "pending");
    // When their time comes: notifications, then 0000 and 0004.
    let events = model.tick(T0 + 200_000);
    assert_eq!(events.len(), 2);
    let notified: Vec<String> = events
        .iter()
        .map(|event| {
            let claims = answer_claims(KEY, &event.body);
            format!("{}:{}", claims["invoiceNo"], claims["respCode"])
        })
        .collect();
    assert_eq!(notified, [r#""p1":"0000""#, r#""r1":"0004""#]);
    assert_eq!(resp(&inquire(&model, "p1", T0 + 200_001)), "0000");
    assert_eq!(resp(&inquire(&model, "r1", T0 + 200_001)), "0004");
}

// Payment Inquiry ("Payment Inquiry API", "Payment response code").

#[test]
fn an_inquiry_for_an_unknown_or_unpaid_invoice_is_a_signed_2002() {
    let model = model();
    for invoice in ["never1", INVOICE] {
        if invoice == INVOICE {
            payment_token(&model, invoice, T0);
        }
        let answer = inquire(&model, invoice, T0);
        let claims = claims(&answer);
        assert_eq!(
            (claims["respCode"].clone(), claims["invoiceNo"].clone()),
            (json!("2002"), json!(invoice))
        );
    }
    // By payment token too; neither → 9005; unmodelled claims → 9004; bad key → 9042.
    let token = payment_token(&model, "k1", T0);
    pay(&model, &token, "pm_card_visa", T0);
    let by_token = json!({"merchantID": MERCHANT, "paymentToken": token});
    let answer = post(&model, INQUIRY_PATH, &envelope(KEY, &by_token), T0);
    assert_eq!(claims(&answer)["respCode"], "0000");
    for (claims, key, code) in [
        (json!({"merchantID": MERCHANT}), KEY, "9005"),
        (
            json!({"merchantID": MERCHANT, "invoiceNo": "k1", "x": 1}),
            KEY,
            "9004",
        ),
        (
            json!({"merchantID": MERCHANT, "invoiceNo": "k1"}),
            "bad",
            "9042",
        ),
    ] {
        let answer = post(&model, INQUIRY_PATH, &envelope(key, &claims), T0);
        assert_eq!(json(&answer)["respCode"], code, "{claims}");
    }
}

// Notifications ("Payment response – backend", the vectors' shape).

#[test]
fn the_notification_is_the_signed_inquiry_with_payonces_dedup_id() {
    let model = model();
    let (paid, inquiry) = charge(&model, INVOICE, "pm_card_visa");
    let event = &paid.events[0];
    let notified = answer_claims(KEY, &event.body);
    assert_eq!(notified, claims(&inquiry));
    let tran_ref = notified["tranRef"].as_str().unwrap_or_default();
    assert_eq!(event.id, notification_id(INVOICE, "0000", tran_ref));
    // payonce's payment id is read back from its invoice number.
    let charge = &model.charges()[0];
    assert_eq!(
        charge.payment_id.as_deref(),
        Some(format!("pay_{INVOICE}").as_str())
    );
}

// No refunds (Payment Maintenance API, notes §12).

#[test]
fn refunds_go_only_through_the_maintenance_api_at_its_sandbox_path() {
    let model = model();
    for (method, path) in [
        ("POST", "/v1/refunds"),
        ("POST", "/charges/1234567/refunds"),
        // The production path; the fake serves the sandbox's, under /2C2PFrontend.
        ("POST", "/PaymentAction/2.0/action"),
        ("GET", "/2C2PFrontend/PaymentAction/2.0/action"),
        ("GET", "/payment/4.3/paymentInquiry"),
    ] {
        let answer = model.handle(
            &WireRequest {
                method,
                path,
                query: None,
                authorization: None,
                idempotency_key: None,
                prefer: None,
                body: b"",
            },
            T0,
        );
        assert_eq!(answer.status, 404, "{method} {path}");
    }
    assert_eq!(model.requests_seen(), 5);
}

#[test]
fn one_seed_and_one_call_sequence_give_byte_identical_answers() {
    let script = |seed: u64| -> Vec<String> {
        let model = FakeModel::new(config(), seed);
        let mut trace = Vec::new();
        for (invoice, method) in [
            ("a1", "pm_card_visa"),
            ("a2", "pm_card_visa_chargeDeclined"),
        ] {
            let (paid, inquiry) = charge(&model, invoice, method);
            trace.push(paid.body);
            trace.extend(paid.events.into_iter().map(|e| e.body));
            trace.push(inquiry.body);
        }
        trace
    };
    assert_eq!(script(42), script(42));
    assert_ne!(
        script(42),
        script(43),
        "the seed decides tokens and tranRefs"
    );
}

const RETURN: &str = "https://shop.example/checkout/return?from=psp";

/// A Payment Token for `invoice` asking for 3-D Secure (`request3DS`, `frontendReturnUrl`).
fn three_ds_token(model: &FakeModel, invoice: &str, three_ds: &str, url: Option<&str>) -> String {
    let mut claims = token_claims(invoice);
    claims["request3DS"] = json!(three_ds);
    if let Some(url) = url {
        claims["frontendReturnUrl"] = json!(url);
    }
    let answer = post(model, PAYMENT_TOKEN_PATH, &envelope(KEY, &claims), T0);
    let claims = self::claims(&answer);
    assert_eq!(claims["respCode"], "0000", "{}", answer.body);
    claims["paymentToken"].as_str().unwrap().to_owned()
}

/// Posts `result` on the page of `charge_id`.
fn answer(
    model: &FakeModel,
    charge_id: &str,
    result: &str,
    now_ms: i64,
) -> crate::ledger::PageAnswer {
    let form = format!("result={result}");
    model.action_page(charge_id, Some(form.as_bytes()), now_ms)
}

#[test]
fn a_3ds_card_with_a_return_url_waits_on_the_fakes_page_then_completes_once() {
    for method in [
        "pm_card_threeDSecure2Required",
        "pm_card_authenticationRequired",
    ] {
        let model = model();
        let token = three_ds_token(&model, INVOICE, "Y", Some(RETURN));
        let paid = pay(&model, &token, method, T0 + 1);
        assert_eq!(resp(&paid), "1001", "{method}: {}", paid.body);
        assert!(paid.events.is_empty());
        let charge = model.charges()[0].clone();
        let data = json(&paid)["data"].as_str().unwrap().to_owned();
        assert!(
            data.ends_with(&format!("/_fake/authenticate/{}", charge.id)),
            "{data}"
        );
        assert_eq!(charge.outcome, "pending");
        assert_eq!(resp(&inquire(&model, INVOICE, T0 + 2)), "0001");
        // The page: the form, then Complete → 303 to the frontendReturnUrl, 0000, notified.
        assert_eq!(model.action_page(&charge.id, None, T0 + 3).status, 200);
        let done = answer(&model, &charge.id, "complete", T0 + 4);
        assert_eq!((done.status, done.location.as_deref()), (303, Some(RETURN)));
        assert_eq!(done.events.len(), 1);
        assert_eq!(answer_claims(KEY, &done.events[0].body)["respCode"], "0000");
        assert_eq!(resp(&inquire(&model, INVOICE, T0 + 5)), "0000");
        assert_eq!(model.charges()[0].outcome, "succeeded");
        // Answered once: the page refuses a second answer, nothing moves.
        let again = answer(&model, &charge.id, "fail", T0 + 6);
        assert_eq!((again.status, again.events.len()), (409, 0));
        assert_eq!(resp(&inquire(&model, INVOICE, T0 + 7)), "0000");
        assert_eq!(model.action_page("9999999", None, T0).status, 404);
    }
}

#[test]
fn with_the_challenge_unregistered_a_waiting_payment_is_2002_until_it_ends() {
    let model = FakeModel::new(
        ModelConfig {
            twoc2p_challenge_unregistered: true,
            ..config()
        },
        7,
    );
    let token = three_ds_token(&model, "u1", "Y", Some(RETURN));
    assert_eq!(
        resp(&pay(&model, &token, "pm_card_threeDSecure2Required", T0)),
        "1001"
    );
    // While the customer is at the page: a signed 2002, with no tranRef.
    let waiting = inquire(&model, "u1", T0 + 1);
    assert_eq!(resp(&waiting), "2002");
    assert!(claims(&waiting).get("tranRef").is_none());
    // Once they complete it: 0000 with the tranRef, as the notification says.
    let charge = model.charges().remove(0);
    let done = answer(&model, &charge.id, "complete", T0 + 2);
    assert_eq!(
        answer_claims(KEY, &done.events[0].body)["tranRef"],
        charge.id.as_str()
    );
    let paid = inquire(&model, "u1", T0 + 3);
    assert_eq!(
        (resp(&paid), claims(&paid)["tranRef"].as_str()),
        ("0000".to_owned(), Some(charge.id.as_str()))
    );
}

#[test]
fn a_failed_or_abandoned_challenge_is_a_soft_decline_with_its_notification() {
    let model = FakeModel::new(
        ModelConfig {
            requires_action_for: Duration::from_secs(120),
            ..config()
        },
        7,
    );
    let failed = three_ds_token(&model, "f1", "F", Some(RETURN));
    assert_eq!(
        resp(&pay(&model, &failed, "pm_card_threeDSecure2Required", T0)),
        "1001"
    );
    let left = three_ds_token(&model, "a1", "Y", Some(RETURN));
    assert_eq!(
        resp(&pay(&model, &left, "pm_card_threeDSecure2Required", T0)),
        "1001"
    );
    let charges = model.charges();
    let done = answer(&model, &charges[0].id, "fail", T0 + 10);
    assert_eq!((done.status, done.location.as_deref()), (303, Some(RETURN)));
    assert_eq!(answer_claims(KEY, &done.events[0].body)["respCode"], "0004");
    assert_eq!(resp(&inquire(&model, "f1", T0 + 11)), "0004");
    // The one never answered lapses after requires_action_for: 0004, notified.
    assert_eq!(resp(&inquire(&model, "a1", T0 + 60_000)), "0001");
    let events = model.tick(T0 + 121_000);
    assert_eq!(events.len(), 1);
    let claims = answer_claims(KEY, &events[0].body);
    assert_eq!(
        (claims["invoiceNo"].as_str(), claims["respCode"].as_str()),
        (Some("a1"), Some("0004"))
    );
    assert_eq!(
        answer(&model, &charges[1].id, "complete", T0 + 122_000).status,
        409
    );
    assert_eq!(resp(&inquire(&model, "a1", T0 + 123_000)), "0004");
}

#[test]
fn without_3ds_or_a_return_url_a_card_that_needs_it_is_soft_declined_at_once() {
    let model = model();
    for (invoice, three_ds, url) in [("n1", "N", Some(RETURN)), ("n2", "Y", None)] {
        let token = three_ds_token(&model, invoice, three_ds, url);
        let paid = pay(&model, &token, "pm_card_threeDSecure2Required", T0);
        assert_eq!(resp(&paid), "2000", "{invoice}");
        assert!(json(&paid)["data"].is_null());
        assert_eq!(paid.events.len(), 1, "{invoice}: notified");
        assert_eq!(resp(&inquire(&model, invoice, T0 + 1)), "0004", "{invoice}");
    }
    assert!(model.charges().iter().all(|c| c.outcome == "failed"));
}

#[test]
fn a_bad_frontend_return_url_or_request3ds_is_9004_and_stores_nothing() {
    let model = model();
    for (name, value) in [
        ("frontendReturnUrl", json!("javascript:alert(1)")),
        ("frontendReturnUrl", json!("https://shop.example/a b")),
        ("frontendReturnUrl", json!(42)),
        ("request3DS", json!("X")),
    ] {
        let mut claims = token_claims("bad1");
        claims[name] = value;
        let answer = post(&model, PAYMENT_TOKEN_PATH, &envelope(KEY, &claims), T0);
        assert_eq!(resp(&answer), "9004", "{name}");
    }
    // Nothing was stored: the invoice is still new.
    assert_eq!(claims(&token(&model, "bad1", T0 + 1))["respCode"], "0000");
}

// The Payment Maintenance API ("Payment Action 2.0", notes §12), through a client-side
// envelope of the test's own: encrypted to 2C2P's public key, signed with the merchant's key.
mod maintenance {
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    use aws_lc_rs::rand::{fill, SystemRandom};
    use aws_lc_rs::rsa::{
        KeyPair, KeySize, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey,
        PublicEncryptingKey, OAEP_SHA1_MGF1SHA1,
    };
    use aws_lc_rs::signature::{UnparsedPublicKey, RSA_PSS_2048_8192_SHA256, RSA_PSS_SHA256};

    use super::*;
    use crate::faces::twoc2p::maintenance::ACTION_PATH;
    use crate::model::{FakeCancel, FakeCapture};
    use crate::twoc2p_keys::TwoC2pMaintenanceKeys;

    const HOUR_MS: i64 = 60 * 60 * 1000;

    /// One pair of key pairs for every test (RSA key generation is slow).
    fn keys() -> &'static TwoC2pMaintenanceKeys {
        static KEYS: OnceLock<TwoC2pMaintenanceKeys> = OnceLock::new();
        KEYS.get_or_init(|| TwoC2pMaintenanceKeys::generate().expect("RSA keys"))
    }

    /// The merchant: its key pair, and 2C2P's public key as the fake serves it.
    struct Merchant {
        signing: KeyPair,
        decrypting: OaepPrivateDecryptingKey,
        twoc2p_spki: Vec<u8>,
        twoc2p_encrypting: OaepPublicEncryptingKey,
    }

    impl Merchant {
        fn of(model: &FakeModel) -> Self {
            let served = model.twoc2p_keys().expect("the 2C2P face serves its keys");
            let private = served
                .merchant_private_key_pkcs8
                .expect("the merchant's key");
            Self {
                signing: KeyPair::from_pkcs8(&private).expect("PKCS#8"),
                decrypting: OaepPrivateDecryptingKey::new(
                    PrivateDecryptingKey::from_pkcs8(&private).expect("PKCS#8"),
                )
                .expect("OAEP"),
                twoc2p_encrypting: OaepPublicEncryptingKey::new(
                    PublicEncryptingKey::from_der(&served.twoc2p_public_key_spki).expect("SPKI"),
                )
                .expect("OAEP"),
                twoc2p_spki: served.twoc2p_public_key_spki,
            }
        }

        /// A compact JWE of `plaintext` to 2C2P's key.
        fn encrypt(&self, plaintext: &str) -> String {
            let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"RSA-OAEP","enc":"A256GCM"}"#);
            let (mut cek, mut iv) = ([0_u8; 32], [0_u8; 12]);
            fill(&mut cek).expect("random");
            fill(&mut iv).expect("random");
            let mut wrapped = vec![0; self.twoc2p_encrypting.ciphertext_size()];
            let wrapped = self
                .twoc2p_encrypting
                .encrypt(&OAEP_SHA1_MGF1SHA1, &cek, &mut wrapped, None)
                .expect("OAEP");
            let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &cek).expect("key"));
            let mut sealed = plaintext.as_bytes().to_vec();
            let tag = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(iv),
                    Aad::from(header.as_bytes()),
                    &mut sealed,
                )
                .expect("seal");
            [
                header,
                URL_SAFE_NO_PAD.encode(wrapped),
                URL_SAFE_NO_PAD.encode(iv),
                URL_SAFE_NO_PAD.encode(sealed),
                URL_SAFE_NO_PAD.encode(tag.as_ref()),
            ]
            .join(".")
        }

        /// A compact JWS of `payload` with `header`, PS256 with `key`.
        fn sign_with(key: &KeyPair, header: &str, payload: &str) -> String {
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header),
                URL_SAFE_NO_PAD.encode(payload)
            );
            let mut signature = vec![0; key.public_modulus_len()];
            key.sign(
                &RSA_PSS_SHA256,
                &SystemRandom::new(),
                input.as_bytes(),
                &mut signature,
            )
            .expect("PS256");
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
        }

        /// The request body for `xml`.
        fn request(&self, xml: &str) -> String {
            Self::sign_with(
                &self.signing,
                r#"{"alg":"PS256","typ":"JWT"}"#,
                &self.encrypt(xml),
            )
        }

        /// The XML of an answer: verified with 2C2P's public key, then decrypted with the
        /// merchant's key; `None` if either fails.
        fn open(&self, body: &str) -> Option<String> {
            let segments: Vec<&str> = body.split('.').collect();
            let [header, payload, signature] = segments.as_slice() else {
                return None;
            };
            let header = URL_SAFE_NO_PAD.decode(header).ok()?;
            assert_eq!(header, br#"{"alg":"PS256","typ":"JWT"}"#);
            UnparsedPublicKey::new(&RSA_PSS_2048_8192_SHA256, &self.twoc2p_spki)
                .verify(
                    format!("{}.{payload}", segments[0]).as_bytes(),
                    &URL_SAFE_NO_PAD.decode(signature).ok()?,
                )
                .ok()?;
            let jwe = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
            let parts: Vec<&str> = jwe.split('.').collect();
            let [header, wrapped, iv, sealed, tag] = parts.as_slice() else {
                return None;
            };
            assert_eq!(
                URL_SAFE_NO_PAD.decode(header).ok()?,
                br#"{"alg":"RSA-OAEP","enc":"A256GCM"}"#
            );
            let mut cek = vec![0; self.decrypting.min_output_size()];
            let cek = self
                .decrypting
                .decrypt(
                    &OAEP_SHA1_MGF1SHA1,
                    &URL_SAFE_NO_PAD.decode(wrapped).ok()?,
                    &mut cek,
                    None,
                )
                .ok()?;
            let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, cek).ok()?);
            let iv = URL_SAFE_NO_PAD.decode(iv).ok()?;
            let mut sealed = URL_SAFE_NO_PAD.decode(sealed).ok()?;
            sealed.extend(URL_SAFE_NO_PAD.decode(tag).ok()?);
            let plaintext = key
                .open_in_place(
                    Nonce::try_assume_unique_for_key(&iv).ok()?,
                    Aad::from(header.as_bytes()),
                    &mut sealed,
                )
                .ok()?;
            String::from_utf8(plaintext.to_vec()).ok()
        }
    }

    /// The text of `<name>` in `xml`, if there is one.
    fn element(xml: &str, name: &str) -> Option<String> {
        let (_, after) = xml.split_once(&format!("<{name}>"))?;
        let (text, _) = after.split_once(&format!("</{name}>"))?;
        Some(text.to_owned())
    }

    /// The `<refund .../>` entries of a `refundList`: (amount, status, referenceNo, dateTime).
    fn refund_list(xml: &str) -> Vec<[String; 4]> {
        let list = element(xml, "refundList").unwrap_or_default();
        list.split("<refund ")
            .skip(1)
            .map(|entry| {
                let attribute = |name: &str| {
                    entry
                        .split_once(&format!("{name}=\""))
                        .and_then(|(_, rest)| rest.split_once('"'))
                        .map(|(value, _)| value.to_owned())
                        .unwrap_or_default()
                };
                [
                    attribute("amount"),
                    attribute("status"),
                    attribute("referenceNo"),
                    attribute("dateTime"),
                ]
            })
            .collect()
    }

    /// A request's XML.
    fn xml(merchant: &str, invoice: &str, process_type: &str, amount: Option<&str>) -> String {
        let amount = amount.map_or(String::new(), |amount| {
            format!("<actionAmount>{amount}</actionAmount>")
        });
        format!(
            "<PaymentProcessRequest><version>3.8</version><merchantID>{merchant}</merchantID>\
             <invoiceNo>{invoice}</invoiceNo>{amount}<processType>{process_type}</processType>\
             </PaymentProcessRequest>"
        )
    }

    fn maintenance_model(settle_after: Duration) -> FakeModel {
        model_with(ModelConfig {
            twoc2p_maintenance_keys: Some(keys().clone()),
            twoc2p_settle_after: settle_after,
            ..config()
        })
    }

    /// Posts `body` to the action endpoint.
    fn act_raw(model: &FakeModel, body: &str, now_ms: i64) -> WireAnswer {
        post(model, ACTION_PATH, body, now_ms)
    }

    /// Sends `xml` in a good envelope and opens the answer.
    fn act(model: &FakeModel, xml: &str, now_ms: i64) -> String {
        let merchant = Merchant::of(model);
        let answer = act_raw(model, &merchant.request(xml), now_ms);
        assert_eq!(answer.status, 200, "{}", answer.body);
        merchant
            .open(&answer.body)
            .expect("a signed, encrypted answer")
    }

    /// `processType` on `invoice` (of the default merchant) and its answer.
    fn action(
        model: &FakeModel,
        invoice: &str,
        process_type: &str,
        amount: Option<&str>,
        now_ms: i64,
    ) -> String {
        act(model, &xml(MERCHANT, invoice, process_type, amount), now_ms)
    }

    fn code(answer: &str) -> String {
        element(answer, "respCode").unwrap_or_default()
    }

    #[test]
    fn a_refund_of_a_settled_payment_is_00_rf_listed_by_rs_and_in_fake_refunds() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, INVOICE, "pm_card_visa");
        let tran_ref = model.charges()[0].id.clone();
        let inquiry = action(&model, INVOICE, "I", None, T0 + 10);
        assert_eq!(
            [
                code(&inquiry),
                element(&inquiry, "status").unwrap_or_default(),
                element(&inquiry, "amount").unwrap_or_default(),
                element(&inquiry, "referenceNo").unwrap_or_default(),
            ],
            [
                "00".to_owned(),
                "S".to_owned(),
                "30.00".to_owned(),
                tran_ref.clone()
            ],
            "{inquiry}"
        );
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<PaymentProcessRequest>\n  \
             <processType>R</processType><invoiceNo>{INVOICE}</invoiceNo>\
             <actionAmount>25.00</actionAmount><idempotencyID>idem-1</idempotencyID>\
             <merchantID>{MERCHANT}</merchantID><version>3.8</version>\n</PaymentProcessRequest>"
        );
        let refund = act(&model, &body, T0 + 20);
        assert_eq!(code(&refund), "00", "{refund}");
        assert_eq!(element(&refund, "respDesc").as_deref(), Some("Success"));
        assert_eq!(element(&refund, "processType").as_deref(), Some("R"));
        assert_eq!(element(&refund, "invoiceNo").as_deref(), Some(INVOICE));
        assert_eq!(element(&refund, "status").as_deref(), Some("RF"));
        assert_eq!(element(&refund, "amount").as_deref(), Some("25.00"));
        assert_eq!(element(&refund, "referenceNo"), Some(tran_ref.clone()));
        assert_eq!(element(&refund, "version").as_deref(), Some("3.8"));
        // ddMMyyHHmmss of T0 + 20 ms (2027-01-15 08:00:00 UTC).
        assert_eq!(
            element(&refund, "timeStamp").as_deref(),
            Some("150127080000")
        );
        assert!(element(&refund, "refundList").is_none());
        let reference = element(&refund, "refundReferenceNo").unwrap_or_default();
        assert!(
            reference.len() == 10 && reference.bytes().all(|b| b.is_ascii_digit()),
            "{reference}"
        );
        let status = action(&model, INVOICE, "RS", None, T0 + 30);
        assert_eq!(code(&status), "00");
        assert_eq!(element(&status, "status").as_deref(), Some("S"));
        assert_eq!(element(&status, "amount").as_deref(), Some("30.00"));
        assert!(element(&status, "refundReferenceNo").is_none());
        assert_eq!(
            refund_list(&status),
            vec![[
                "25.00".to_owned(),
                "RF".to_owned(),
                reference.clone(),
                "20270115080000".to_owned()
            ]]
        );
        let refunds = model.refunds();
        assert_eq!(refunds.len(), 1);
        let listed = &refunds[0];
        assert_eq!(
            (
                listed.provider.as_str(),
                listed.id.as_str(),
                listed.outcome.as_str(),
                listed.status.as_str(),
                listed.amount,
                listed.currency.as_str(),
                listed.payment_intent.as_str(),
            ),
            (
                "2c2p",
                reference.as_str(),
                "succeeded",
                "RF",
                2500,
                "sgd",
                tran_ref.as_str()
            )
        );
        assert_eq!(listed.invoice_no.as_deref(), Some(INVOICE));
        assert_eq!(listed.payment_id, Some(format!("pay_{INVOICE}")));
        assert_eq!(listed.refund_id, None);
        assert_eq!(listed.idempotency_key.as_deref(), Some("idem-1"));
        let view = serde_json::to_value(listed).unwrap_or_default();
        assert_eq!(view["invoice_no"], INVOICE);
        assert_eq!(view["refund_id"], Value::Null);
        // The charge itself is still captured.
        assert_eq!(model.charges()[0].outcome, "succeeded");
    }

    #[test]
    fn before_settlement_a_refund_is_12_and_a_void_cancels_the_charge() {
        let model = maintenance_model(Duration::from_secs(24 * 60 * 60));
        charge(&model, INVOICE, "pm_card_visa");
        let inquiry = action(&model, INVOICE, "I", None, T0 + 10);
        assert_eq!(element(&inquiry, "status").as_deref(), Some("A"));
        let refund = action(&model, INVOICE, "R", Some("25.00"), T0 + 20);
        assert_eq!(code(&refund), "12", "{refund}");
        assert_eq!(element(&refund, "status").as_deref(), Some("A"));
        assert!(model.refunds().is_empty());
        let void = action(&model, INVOICE, "V", None, T0 + 30);
        assert_eq!(code(&void), "00", "{void}");
        assert_eq!(element(&void, "status").as_deref(), Some("V"));
        assert_eq!(element(&void, "amount").as_deref(), Some("30.00"));
        let charge = &model.charges()[0];
        assert_eq!(
            (charge.outcome.as_str(), charge.amount_captured),
            ("canceled", None)
        );
        assert_eq!(charge.cancels.len(), 1);
        // Voided for good: inquiry V, a second void 29, a refund even once it would have
        // settled 12.
        let inquiry = action(&model, INVOICE, "I", None, T0 + 40);
        assert_eq!(element(&inquiry, "status").as_deref(), Some("V"));
        assert_eq!(code(&action(&model, INVOICE, "V", None, T0 + 50)), "29");
        let later = T0 + 48 * HOUR_MS;
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("1.00"), later)),
            "12"
        );
        assert!(model.refunds().is_empty());
    }

    #[test]
    fn a_payment_settles_after_the_delay_on_the_model_clock_and_then_refuses_a_void() {
        let model = maintenance_model(Duration::from_secs(60 * 60));
        charge(&model, INVOICE, "pm_card_visa");
        // Paid at T0 + 1: approved until an hour later, settled from then on.
        let status = |now_ms| {
            element(&action(&model, INVOICE, "I", None, now_ms), "status").unwrap_or_default()
        };
        assert_eq!(status(T0 + HOUR_MS), "A");
        assert_eq!(status(T0 + 1 + HOUR_MS), "S");
        let void = action(&model, INVOICE, "V", None, T0 + 2 * HOUR_MS);
        assert_eq!(code(&void), "21", "{void}");
        assert_eq!(element(&void, "status").as_deref(), Some("S"));
        assert_eq!(model.charges()[0].outcome, "succeeded");
        // And with the default (zero), at once.
        let at_once = maintenance_model(Duration::ZERO);
        charge(&at_once, INVOICE, "pm_card_visa");
        assert_eq!(code(&action(&at_once, INVOICE, "V", None, T0 + 2)), "21");
    }

    #[test]
    fn partial_refunds_are_listed_in_order_and_never_exceed_the_amount() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, INVOICE, "pm_card_visa");
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("30.01"), T0 + 10)),
            "30"
        );
        let first = action(&model, INVOICE, "R", Some("10.00"), T0 + 20);
        let second = action(&model, INVOICE, "R", Some("5.5"), T0 + 1_000);
        assert_eq!(
            (code(&first), code(&second)),
            ("00".to_owned(), "00".to_owned())
        );
        assert_eq!(element(&second, "amount").as_deref(), Some("5.50"));
        let references = [&first, &second]
            .map(|answer| element(answer, "refundReferenceNo").unwrap_or_default());
        assert_ne!(references[0], references[1]);
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("14.51"), T0 + 2_000)),
            "30"
        );
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("14.50"), T0 + 3_000)),
            "00"
        );
        // Fully refunded: any further refund is 30 (the fake's choice over 49).
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("0.01"), T0 + 4_000)),
            "30"
        );
        let listed = refund_list(&action(&model, INVOICE, "RS", None, T0 + 5_000));
        let amounts: Vec<&str> = listed.iter().map(|entry| entry[0].as_str()).collect();
        assert_eq!(amounts, ["10.00", "5.50", "14.50"]);
        assert_eq!(listed[0][2], references[0]);
        assert_eq!(listed[1][2], references[1]);
        assert!(listed.iter().all(|entry| entry[1] == "RF"));
        let amounts: Vec<i64> = model.refunds().iter().map(|refund| refund.amount).collect();
        assert_eq!(amounts, [1000, 550, 1450]);
    }

    #[test]
    fn a_repeated_refund_is_a_second_refund_idempotency_id_or_not() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, INVOICE, "pm_card_visa");
        let body = format!(
            "<PaymentProcessRequest><version>3.8</version><merchantID>{MERCHANT}</merchantID>\
             <invoiceNo>{INVOICE}</invoiceNo><actionAmount>10.00</actionAmount>\
             <processType>R</processType><idempotencyID>same</idempotencyID>\
             </PaymentProcessRequest>"
        );
        let first = act(&model, &body, T0 + 10);
        let again = act(&model, &body, T0 + 20);
        assert_eq!(
            (code(&first), code(&again)),
            ("00".to_owned(), "00".to_owned())
        );
        assert_ne!(
            element(&first, "refundReferenceNo"),
            element(&again, "refundReferenceNo")
        );
        let refunds = model.refunds();
        assert_eq!(refunds.len(), 2);
        assert!(refunds.iter().all(
            |refund| refund.amount == 1000 && refund.idempotency_key.as_deref() == Some("same")
        ));
        assert_eq!(
            refund_list(&action(&model, INVOICE, "RS", None, T0 + 30)).len(),
            2
        );
    }

    #[test]
    fn envelopes_that_do_not_verify_or_decrypt_are_401_in_plain_text_and_change_nothing() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, INVOICE, "pm_card_visa");
        let merchant = Merchant::of(&model);
        let refund = xml(MERCHANT, INVOICE, "R", Some("25.00"));
        let jwe = merchant.encrypt(&refund);
        let stranger = KeyPair::generate(KeySize::Rsa2048).expect("RSA key");
        let ps256 = r#"{"alg":"PS256","typ":"JWT"}"#;
        let hs256 = {
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
                URL_SAFE_NO_PAD.encode(&jwe)
            );
            let signature = mac(KEY, &input, "").finalize().into_bytes();
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
        };
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(&jwe)
        );
        let good = merchant.request(&refund);
        let tampered = {
            let (input, signature) = good.rsplit_once('.').unwrap_or_default();
            let mut signature = URL_SAFE_NO_PAD.decode(signature).unwrap_or_default();
            signature[0] ^= 1;
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
        };
        let with_crit = Merchant::sign_with(
            &merchant.signing,
            r#"{"alg":"PS256","typ":"JWT","crit":["exp"]}"#,
            &jwe,
        );
        // The JWE encrypted to the merchant's own key: signed right, undecryptable.
        let to_wrong_key = {
            let wrong = Merchant {
                twoc2p_encrypting: OaepPublicEncryptingKey::new(
                    PublicEncryptingKey::from_der(&keys().merchant_public_key_spki).expect("SPKI"),
                )
                .expect("OAEP"),
                ..Merchant::of(&model)
            };
            Merchant::sign_with(&merchant.signing, ps256, &wrong.encrypt(&refund))
        };
        let zipped = {
            let (_, rest) = jwe.split_once('.').unwrap_or_default();
            let header =
                URL_SAFE_NO_PAD.encode(r#"{"alg":"RSA-OAEP","enc":"A256GCM","zip":"DEF"}"#);
            Merchant::sign_with(&merchant.signing, ps256, &format!("{header}.{rest}"))
        };
        let not_a_jwe = Merchant::sign_with(&merchant.signing, ps256, &refund);
        for (name, body) in [
            (
                "signed by a stranger",
                Merchant::sign_with(&stranger, ps256, &jwe),
            ),
            ("HS256", hs256),
            ("alg none", none),
            ("tampered signature", tampered),
            ("crit", with_crit),
            ("encrypted to the wrong key", to_wrong_key),
            ("zip", zipped),
            ("not a JWE", not_a_jwe),
            ("padded", format!("{good}=")),
            ("not a JWS", "hello".to_owned()),
            ("empty", String::new()),
        ] {
            let refused = act_raw(&model, &body, T0 + 10);
            assert_eq!(refused.status, 401, "{name}");
            assert_eq!(refused.body, "Unauthorized", "{name}");
        }
        assert!(model.refunds().is_empty());
        assert_eq!(model.charges()[0].outcome, "succeeded");
        let actions = model.twoc2p_actions().unwrap_or_default();
        assert_eq!(actions.len(), 11);
        assert!(actions
            .iter()
            .all(|action| action.http_status == 401 && action.resp_code.is_none()));
        // The good one still works.
        let answer = act_raw(&model, &good, T0 + 20);
        assert_eq!(code(&merchant.open(&answer.body).unwrap_or_default()), "00");
    }

    #[test]
    fn merchant_invoice_process_type_and_amount_are_checked_with_their_codes() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, INVOICE, "pm_card_visa");
        // A token never paid is no transaction.
        payment_token(&model, "tokenonly", T0);
        for (request, expected) in [
            (xml("JT02", INVOICE, "R", Some("1.00")), "03"),
            (xml(MERCHANT, "nosuchinvoice", "I", None), "16"),
            (xml(MERCHANT, "nosuchinvoice", "R", Some("1.00")), "16"),
            (xml(MERCHANT, "tokenonly", "V", None), "16"),
            (xml("JT02", INVOICE, "S", Some("30.00")), "03"),
            (xml(MERCHANT, INVOICE, "X", None), "17"),
            (xml("JT02", INVOICE, "X", None), "03"),
            (
                xml(MERCHANT, INVOICE, "S", Some("30.00"))
                    .replace(&format!("<invoiceNo>{INVOICE}</invoiceNo>"), ""),
                "15",
            ),
            (xml(MERCHANT, "nosuchinvoice", "S", Some("30.00")), "16"),
            (xml(MERCHANT, "tokenonly", "S", Some("30.00")), "16"),
            // Not a manual-settlement account (the default): settling is not required.
            (xml(MERCHANT, INVOICE, "S", Some("30.00")), "32"),
            (xml(MERCHANT, INVOICE, "S", None), "32"),
            (xml(MERCHANT, INVOICE, "R", None), "18"),
            (xml(MERCHANT, INVOICE, "R", Some("0.00")), "18"),
            (xml(MERCHANT, INVOICE, "R", Some("-1.00")), "18"),
            (xml(MERCHANT, INVOICE, "R", Some("1.001")), "18"),
            (xml(MERCHANT, INVOICE, "R", Some("1e2")), "18"),
            ("<PaymentProcessRequest><version>3.8".to_owned(), "99"),
            ("not xml".to_owned(), "99"),
            (
                xml(MERCHANT, INVOICE, "I", None).replace("<version>3.8</version>", ""),
                "99",
            ),
            (
                xml(MERCHANT, INVOICE, "I", None)
                    .replace("<version>", "<version>3.8</version><version>"),
                "99",
            ),
            (
                xml(MERCHANT, INVOICE, "I", None).replace("<version>", "<other>x</other><version>"),
                "99",
            ),
            (
                xml(MERCHANT, INVOICE, "I", None).replace("<version>3.8", "<version a=\"1\">3.8"),
                "99",
            ),
            (format!("{}<x/>", xml(MERCHANT, INVOICE, "I", None)), "99"),
        ] {
            let answer = act(&model, &request, T0 + 10);
            assert_eq!(code(&answer), expected, "{request}: {answer}");
        }
        assert!(model.refunds().is_empty());
        assert_eq!(model.charges()[0].outcome, "succeeded");
        let wrong = act(&model, &xml("JT02", INVOICE, "R", Some("1.00")), T0 + 20);
        assert_eq!(element(&wrong, "invoiceNo").as_deref(), Some(INVOICE));
        assert_eq!(element(&wrong, "processType").as_deref(), Some("R"));
    }

    #[test]
    fn waiting_and_failed_payments_read_ap_and_pf_and_refuse_refunds_and_voids() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, "processing1", "pm_fake_processing");
        charge(&model, "declined1", "pm_card_visa_chargeDeclined");
        for (invoice, status) in [("processing1", "AP"), ("declined1", "PF")] {
            let inquiry = action(&model, invoice, "I", None, T0 + 10);
            assert_eq!(
                element(&inquiry, "status").as_deref(),
                Some(status),
                "{invoice}"
            );
            assert_eq!(
                code(&action(&model, invoice, "R", Some("1.00"), T0 + 10)),
                "12"
            );
            assert_eq!(code(&action(&model, invoice, "V", None, T0 + 10)), "12");
        }
        // Once the processing charge succeeds (after five minutes), it settles from then.
        let later = T0 + 6 * 60 * 1000;
        let inquiry = action(&model, "processing1", "I", None, later);
        assert_eq!(element(&inquiry, "status").as_deref(), Some("S"));
    }

    #[test]
    fn refund_fates_follow_the_charge_token_rp_then_rf_and_rf_then_rff() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, "pending1", "pm_fake_refund_pending");
        charge(&model, "failing1", "pm_card_refundFail");
        let pending = action(&model, "pending1", "R", Some("30.00"), T0 + 10);
        assert_eq!(
            (
                code(&pending),
                element(&pending, "status").unwrap_or_default()
            ),
            ("00".to_owned(), "RP".to_owned())
        );
        assert_eq!(
            code(&action(&model, "failing1", "R", Some("30.00"), T0 + 10)),
            "00"
        );
        let statuses = |now_ms| {
            ["pending1", "failing1"].map(|invoice| {
                refund_list(&action(&model, invoice, "RS", None, now_ms))
                    .first()
                    .map(|entry| entry[1].clone())
                    .unwrap_or_default()
            })
        };
        assert_eq!(statuses(T0 + 20), ["RP", "RF"]);
        assert_eq!(statuses(T0 + HOUR_MS), ["RF", "RFF"]);
        let outcomes: Vec<(String, String)> = model
            .refunds()
            .into_iter()
            .map(|refund| (refund.status, refund.outcome))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("RF".to_owned(), "succeeded".to_owned()),
                ("RFF".to_owned(), "failed".to_owned())
            ]
        );
        // The failed refund gave its amount back.
        assert_eq!(
            code(&action(
                &model,
                "failing1",
                "R",
                Some("30.00"),
                T0 + HOUR_MS
            )),
            "00"
        );
    }

    #[test]
    fn answers_verify_with_2c2p_s_public_key_and_decrypt_with_the_merchant_s_key_only() {
        let model = maintenance_model(Duration::ZERO);
        charge(&model, INVOICE, "pm_card_visa");
        let merchant = Merchant::of(&model);
        let answer = act_raw(
            &model,
            &merchant.request(&xml(MERCHANT, INVOICE, "I", None)),
            T0 + 10,
        );
        assert_eq!(answer.status, 200);
        let xml = merchant.open(&answer.body).unwrap_or_default();
        assert!(xml.starts_with("<PaymentProcessResponse><version>3.8</version><timeStamp>"));
        assert!(xml.ends_with("</PaymentProcessResponse>"), "{xml}");
        // Three unpadded base64url segments whose payload is a five-segment JWE.
        let segments: Vec<&str> = answer.body.split('.').collect();
        assert_eq!(segments.len(), 3);
        assert!(!answer.body.contains('=') && !answer.body.contains('+'));
        let jwe = URL_SAFE_NO_PAD.decode(segments[1]).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&jwe).split('.').count(), 5);
        // Not signed by the merchant's key: verifying with it fails.
        let by_merchant = UnparsedPublicKey::new(
            &RSA_PSS_2048_8192_SHA256,
            keys().merchant_public_key_spki.clone(),
        )
        .verify(
            format!("{}.{}", segments[0], segments[1]).as_bytes(),
            &URL_SAFE_NO_PAD.decode(segments[2]).unwrap_or_default(),
        );
        assert!(by_merchant.is_err());
        // A fresh key and IV each time: the same answer twice is two different envelopes.
        let again = act_raw(
            &model,
            &merchant.request(&super::maintenance::xml(MERCHANT, INVOICE, "I", None)),
            T0 + 10,
        );
        assert_ne!(again.body, answer.body);
        assert_eq!(merchant.open(&again.body), Some(xml));
    }

    #[test]
    fn keys_are_made_on_first_use_and_every_call_is_recorded() {
        // No keys given: made when first asked for, the same ever after.
        let model = model();
        let keys = model.twoc2p_keys().expect("2C2P keys");
        assert!(keys.merchant_private_key_pkcs8.is_some());
        assert_eq!(model.twoc2p_keys(), Some(keys.clone()));
        assert_eq!(
            keys.action_url,
            format!("{}{ACTION_PATH}", crate::model::UNSERVED_BASE_URL)
        );
        charge(&model, INVOICE, "pm_card_visa");
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("1.00"), T0 + 10)),
            "00"
        );
        assert_eq!(code(&action(&model, "nosuch", "V", None, T0 + 20)), "16");
        assert_eq!(act_raw(&model, "junk", T0 + 30).status, 401);
        let actions: Vec<BTreeMap<String, Value>> = model
            .twoc2p_actions()
            .unwrap_or_default()
            .iter()
            .map(|action| serde_json::from_value(json!(action)).unwrap_or_default())
            .collect();
        assert_eq!(
            json!(actions),
            json!([
                {"processType": "R", "invoiceNo": INVOICE, "actionAmount": "1.00",
                 "respCode": "00", "httpStatus": 200},
                {"processType": "V", "invoiceNo": "nosuch", "actionAmount": null,
                 "respCode": "16", "httpStatus": 200},
                {"processType": null, "invoiceNo": null, "actionAmount": null,
                 "respCode": null, "httpStatus": 401},
            ])
        );
        // Other faces have neither.
        let stripe = model_with(ModelConfig::default());
        assert!(stripe.twoc2p_keys().is_none() && stripe.twoc2p_actions().is_none());
    }

    // Manual settlement: a setting of the merchant account; `S` settles an authorization.

    /// A manual-settlement account's model, settling `settle_after` after the settle and
    /// letting authorizations lapse after `expires_after`.
    fn manual_model(settle_after: Duration, expires_after: Duration) -> FakeModel {
        model_with(ModelConfig {
            twoc2p_maintenance_keys: Some(keys().clone()),
            twoc2p_settle_after: settle_after,
            twoc2p_manual_settlement: true,
            authorization_expires_after: expires_after,
            ..config()
        })
    }

    const WEEK: Duration = Duration::from_secs(7 * 24 * 60 * 60);

    /// The status element of `answer`.
    fn status_of(answer: &str) -> String {
        element(answer, "status").unwrap_or_default()
    }

    /// The maintenance status of `invoice` now (an `I`).
    fn status_now(model: &FakeModel, invoice: &str, now_ms: i64) -> String {
        status_of(&action(model, invoice, "I", None, now_ms))
    }

    /// What the ledger holds of the charge: (outcome, amount_captured, captures, cancels).
    fn ledger_state(model: &FakeModel) -> (String, Option<i64>, Vec<FakeCapture>, usize) {
        let charge = model.charges().pop().expect("a charge");
        (
            charge.outcome,
            charge.amount_captured,
            charge.captures,
            charge.cancels.len(),
        )
    }

    fn captured(amount: i64, key: Option<&str>) -> Vec<FakeCapture> {
        vec![FakeCapture {
            amount,
            idempotency_key: key.map(str::to_owned),
        }]
    }

    #[test]
    fn a_manual_settlement_account_authorizes_and_the_pgw_face_reads_it_as_approved() {
        let manual = manual_model(Duration::ZERO, WEEK);
        let automatic = maintenance_model(Duration::ZERO);
        let (paid, inquiry) = charge(&manual, INVOICE, "pm_card_visa");
        let (auto_paid, auto_inquiry) = charge(&automatic, INVOICE, "pm_card_visa");
        // Do Payment, its notification and the inquiry: byte for byte an approval's.
        assert_eq!(resp(&paid), "2000");
        assert_eq!(resp(&inquiry), "0000");
        assert_eq!(paid.body, auto_paid.body);
        assert_eq!(inquiry.body, auto_inquiry.body);
        let events = |answer: &WireAnswer| -> Vec<(String, String, String)> {
            answer
                .events
                .iter()
                .map(|event| (event.id.clone(), event.kind.clone(), event.body.clone()))
                .collect()
        };
        assert_eq!(paid.events.len(), 1);
        assert_eq!(events(&paid), events(&auto_paid));
        let tran_ref = claims(&inquiry)["tranRef"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            paid.events[0].id,
            notification_id(INVOICE, "0000", &tran_ref)
        );
        assert_eq!(answer_claims(KEY, &paid.events[0].body), claims(&inquiry));
        // Only the maintenance API tells: A (an automatic charge with no delay reads S).
        let inquiry = action(&manual, INVOICE, "I", None, T0 + 10);
        assert_eq!(
            (
                code(&inquiry),
                status_of(&inquiry),
                element(&inquiry, "amount").unwrap_or_default(),
                element(&inquiry, "referenceNo").unwrap_or_default(),
            ),
            (
                "00".to_owned(),
                "A".to_owned(),
                "30.00".to_owned(),
                tran_ref.clone()
            )
        );
        assert_eq!(status_now(&automatic, INVOICE, T0 + 10), "S");
        // The ledger: authorized, nothing captured; `_fake/charges` says so.
        let charge = manual.charges().pop().expect("a charge");
        assert_eq!(
            (
                charge.id.as_str(),
                charge.status.as_str(),
                charge.outcome.as_str(),
                charge.capture_method.as_str(),
                charge.amount,
                charge.amount_captured,
                charge.captures.len(),
                charge.cancels.len(),
            ),
            (
                tran_ref.as_str(),
                "0000",
                "authorized",
                "manual",
                3000,
                None,
                0,
                0
            )
        );
        // Not settled, so not refundable; the inquiry still reads approved.
        assert_eq!(
            code(&action(&manual, INVOICE, "R", Some("1.00"), T0 + 20)),
            "12"
        );
        assert!(manual.refunds().is_empty());
        assert_eq!(resp(&inquire(&manual, INVOICE, T0 + 30)), "0000");
        assert_eq!(ledger_state(&manual).0, "authorized");
    }

    #[test]
    fn a_whole_settle_captures_once_and_a_second_settle_is_39() {
        let model = manual_model(Duration::from_secs(60 * 60), WEEK);
        charge(&model, INVOICE, "pm_card_visa");
        let tran_ref = model.charges()[0].id.clone();
        let merchant = Merchant::of(&model);
        let body = format!(
            "<PaymentProcessRequest><version>3.8</version><merchantID>{MERCHANT}</merchantID>\
             <invoiceNo>{INVOICE}</invoiceNo><actionAmount>30.00</actionAmount>\
             <processType>S</processType><idempotencyID>settle-1</idempotencyID>\
             </PaymentProcessRequest>"
        );
        let answer = act_raw(&model, &merchant.request(&body), T0 + 10);
        assert_eq!(answer.status, 200, "{}", answer.body);
        // A settle notifies nothing.
        assert!(answer.events.is_empty());
        let settle = merchant.open(&answer.body).expect("an answer");
        assert_eq!(
            (
                code(&settle),
                element(&settle, "respDesc").unwrap_or_default(),
                element(&settle, "processType").unwrap_or_default(),
                status_of(&settle),
                element(&settle, "amount").unwrap_or_default(),
                element(&settle, "referenceNo").unwrap_or_default(),
            ),
            (
                "00".to_owned(),
                "Success".to_owned(),
                "S".to_owned(),
                "S".to_owned(),
                "30.00".to_owned(),
                tran_ref
            ),
            "{settle}"
        );
        // Captured, once, the whole, under the idempotencyID.
        assert_eq!(
            ledger_state(&model),
            (
                "succeeded".to_owned(),
                Some(3000),
                captured(3000, Some("settle-1")),
                0
            )
        );
        assert_eq!(model.charges()[0].status, "0000");
        // Settled by the rules: A until the delay after the settle, S from then on.
        assert_eq!(status_now(&model, INVOICE, T0 + 9 + HOUR_MS), "A");
        assert_eq!(status_now(&model, INVOICE, T0 + 10 + HOUR_MS), "S");
        // Again, before and after it settled: 39 with the status as it reads, no second
        // capture.
        let model = manual_model(Duration::from_secs(60 * 60), WEEK);
        charge(&model, INVOICE, "pm_card_visa");
        assert_eq!(
            code(&action(&model, INVOICE, "S", Some("30.00"), T0 + 10)),
            "00"
        );
        let again = action(&model, INVOICE, "S", Some("30.00"), T0 + 20);
        assert_eq!(
            (code(&again), status_of(&again)),
            ("39".to_owned(), "A".to_owned())
        );
        assert_eq!(
            element(&again, "respDesc").as_deref(),
            Some("Transaction already settled.")
        );
        let later = action(&model, INVOICE, "S", Some("30.00"), T0 + 2 * HOUR_MS);
        assert_eq!(
            (code(&later), status_of(&later)),
            ("39".to_owned(), "S".to_owned())
        );
        assert_eq!(
            ledger_state(&model),
            ("succeeded".to_owned(), Some(3000), captured(3000, None), 0)
        );
        assert_eq!(resp(&inquire(&model, INVOICE, T0 + 2 * HOUR_MS)), "0000");
        // Every settle is recorded.
        let settles: Vec<(Option<String>, Option<String>)> = model
            .twoc2p_actions()
            .unwrap_or_default()
            .into_iter()
            .filter(|action| action.process_type.as_deref() == Some("S"))
            .map(|action| (action.action_amount, action.resp_code))
            .collect();
        let entry = |code: &str| (Some("30.00".to_owned()), Some(code.to_owned()));
        assert_eq!(settles, [entry("00"), entry("39"), entry("39")]);
    }

    #[test]
    fn a_partial_or_bad_settle_amount_is_refused_and_captures_nothing() {
        let model = manual_model(Duration::ZERO, WEEK);
        charge(&model, INVOICE, "pm_card_visa");
        for (amount, expected) in [
            (Some("29.99"), "33"),
            (Some("30.01"), "33"),
            (Some("1.00"), "33"),
            (None, "18"),
            (Some("0.00"), "18"),
            (Some("-30.00"), "18"),
            (Some("30.001"), "18"),
            (Some("abc"), "18"),
        ] {
            let answer = action(&model, INVOICE, "S", amount, T0 + 10);
            assert_eq!(
                (code(&answer), status_of(&answer)),
                (expected.to_owned(), "A".to_owned()),
                "{amount:?}: {answer}"
            );
            if expected == "33" {
                assert_eq!(
                    element(&answer, "respDesc").as_deref(),
                    Some("Partial settlement is not allowed.")
                );
            }
        }
        assert_eq!(
            ledger_state(&model),
            ("authorized".to_owned(), None, Vec::new(), 0)
        );
        assert_eq!(status_now(&model, INVOICE, T0 + 20), "A");
        // The whole still settles.
        assert_eq!(
            code(&action(&model, INVOICE, "S", Some("30.00"), T0 + 30)),
            "00"
        );
        assert_eq!(
            ledger_state(&model),
            ("succeeded".to_owned(), Some(3000), captured(3000, None), 0)
        );
    }

    #[test]
    fn a_void_releases_an_authorization_and_a_settle_then_is_31() {
        let model = manual_model(Duration::ZERO, WEEK);
        charge(&model, INVOICE, "pm_card_visa");
        let merchant = Merchant::of(&model);
        let answer = act_raw(
            &model,
            &merchant.request(&xml(MERCHANT, INVOICE, "V", None)),
            T0 + 10,
        );
        assert!(answer.events.is_empty());
        let void = merchant.open(&answer.body).expect("an answer");
        assert_eq!(
            (
                code(&void),
                status_of(&void),
                element(&void, "amount").unwrap_or_default()
            ),
            ("00".to_owned(), "V".to_owned(), "30.00".to_owned()),
            "{void}"
        );
        // Released: cancelled, never captured.
        assert_eq!(
            ledger_state(&model),
            ("canceled".to_owned(), None, Vec::new(), 1)
        );
        assert_eq!(
            model.charges()[0].cancels[0].cancellation_reason.as_deref(),
            Some("void")
        );
        assert_eq!(status_now(&model, INVOICE, T0 + 20), "V");
        let settle = action(&model, INVOICE, "S", Some("30.00"), T0 + 30);
        assert_eq!(
            (code(&settle), status_of(&settle)),
            ("31".to_owned(), "V".to_owned()),
            "{settle}"
        );
        assert_eq!(
            element(&settle, "respDesc").as_deref(),
            Some("Settlement is not allowed.")
        );
        assert_eq!(code(&action(&model, INVOICE, "V", None, T0 + 40)), "29");
        assert_eq!(
            ledger_state(&model),
            ("canceled".to_owned(), None, Vec::new(), 1)
        );
        // The PGW face reads it as a voided payment.
        assert_eq!(resp(&inquire(&model, INVOICE, T0 + 50)), "0003");
    }

    #[test]
    fn an_authorization_never_settled_lapses_to_v_without_a_notification_and_a_settle_is_31() {
        let model = manual_model(Duration::ZERO, Duration::from_secs(60 * 60));
        // Authorized at T0 + 1: capturable for an hour.
        charge(&model, INVOICE, "pm_card_visa");
        assert_eq!(status_now(&model, INVOICE, T0 + HOUR_MS), "A");
        assert!(model.tick(T0 + 1 + HOUR_MS).is_empty());
        assert_eq!(status_now(&model, INVOICE, T0 + 1 + HOUR_MS), "V");
        let charge = model.charges().pop().expect("a charge");
        assert_eq!(
            (
                charge.outcome.as_str(),
                charge.amount_captured,
                charge.captures.len()
            ),
            ("canceled", None, 0)
        );
        assert_eq!(
            charge.cancels,
            [FakeCancel {
                idempotency_key: None,
                cancellation_reason: Some("automatic".to_owned()),
            }]
        );
        let settle = action(&model, INVOICE, "S", Some("30.00"), T0 + 2 * HOUR_MS);
        assert_eq!(
            (code(&settle), status_of(&settle)),
            ("31".to_owned(), "V".to_owned())
        );
        assert_eq!(
            code(&action(&model, INVOICE, "V", None, T0 + 2 * HOUR_MS)),
            "29"
        );
        assert_eq!(ledger_state(&model).2, Vec::new());
        assert_eq!(resp(&inquire(&model, INVOICE, T0 + 2 * HOUR_MS)), "0003");
    }

    #[test]
    fn without_manual_settlement_a_settle_is_32_whatever_the_status_and_changes_nothing() {
        let model = maintenance_model(Duration::from_secs(60 * 60));
        charge(&model, INVOICE, "pm_card_visa");
        charge(&model, "declined1", "pm_card_visa_chargeDeclined");
        for (invoice, now_ms, status) in [
            (INVOICE, T0 + 10, "A"),
            (INVOICE, T0 + 2 * HOUR_MS, "S"),
            ("declined1", T0 + 10, "PF"),
        ] {
            let settle = action(&model, invoice, "S", Some("30.00"), now_ms);
            assert_eq!(
                (
                    code(&settle),
                    element(&settle, "respDesc").unwrap_or_default(),
                    status_of(&settle),
                    element(&settle, "amount").unwrap_or_default(),
                ),
                (
                    "32".to_owned(),
                    "Settlement is not required.".to_owned(),
                    status.to_owned(),
                    "30.00".to_owned()
                ),
                "{invoice}"
            );
        }
        let charge = &model.charges()[0];
        assert_eq!(
            (
                charge.outcome.as_str(),
                charge.capture_method.as_str(),
                charge.amount_captured,
                charge.captures.len(),
                charge.cancels.len()
            ),
            ("succeeded", "automatic", Some(3000), 0, 0)
        );
        let codes: Vec<Option<String>> = model
            .twoc2p_actions()
            .unwrap_or_default()
            .into_iter()
            .map(|action| action.resp_code)
            .collect();
        assert_eq!(codes, vec![Some("32".to_owned()); 3]);
    }

    #[test]
    fn once_settled_an_authorization_refunds_and_before_it_settles_it_voids() {
        // Settling at once: refundable straight after the settle, no longer voidable.
        let model = manual_model(Duration::ZERO, WEEK);
        charge(&model, INVOICE, "pm_card_visa");
        let tran_ref = model.charges()[0].id.clone();
        assert_eq!(
            code(&action(&model, INVOICE, "S", Some("30.00"), T0 + 10)),
            "00"
        );
        assert_eq!(status_now(&model, INVOICE, T0 + 20), "S");
        let refund = action(&model, INVOICE, "R", Some("10.00"), T0 + 30);
        assert_eq!(
            (code(&refund), status_of(&refund)),
            ("00".to_owned(), "RF".to_owned()),
            "{refund}"
        );
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("20.01"), T0 + 40)),
            "30"
        );
        assert_eq!(code(&action(&model, INVOICE, "V", None, T0 + 50)), "21");
        let refunds = model.refunds();
        assert_eq!(refunds.len(), 1);
        assert_eq!(
            (
                refunds[0].amount,
                refunds[0].status.as_str(),
                refunds[0].payment_intent.as_str()
            ),
            (1000, "RF", tran_ref.as_str())
        );
        assert_eq!(
            ledger_state(&model),
            ("succeeded".to_owned(), Some(3000), captured(3000, None), 0)
        );
        // Settling after a delay: not refundable before, and a void then undoes the capture.
        let model = manual_model(Duration::from_secs(60 * 60), WEEK);
        charge(&model, INVOICE, "pm_card_visa");
        assert_eq!(
            code(&action(&model, INVOICE, "S", Some("30.00"), T0 + 10)),
            "00"
        );
        assert_eq!(
            code(&action(&model, INVOICE, "R", Some("10.00"), T0 + 20)),
            "12"
        );
        let void = action(&model, INVOICE, "V", None, T0 + 30);
        assert_eq!(
            (code(&void), status_of(&void)),
            ("00".to_owned(), "V".to_owned())
        );
        let charge = model.charges().pop().expect("a charge");
        assert_eq!(
            (
                charge.outcome.as_str(),
                charge.amount_captured,
                charge.cancels.len()
            ),
            ("canceled", None, 1)
        );
        assert!(model.refunds().is_empty());
    }

    #[test]
    fn on_a_manual_account_late_approvals_are_authorizations_notified_as_0000() {
        let model = model_with(ModelConfig {
            processing_for: Duration::from_secs(60),
            ..manual_model_config()
        });
        // Processing: AP (a settle 12) until it is approved, then an authorization, notified.
        let (processing, _) = charge(&model, "processing1", "pm_fake_processing");
        assert_eq!(resp(&processing), "2001");
        let settle = action(&model, "processing1", "S", Some("30.00"), T0 + 10);
        assert_eq!(
            (code(&settle), status_of(&settle)),
            ("12".to_owned(), "AP".to_owned())
        );
        let events = model.tick(T0 + 120_000);
        assert_eq!(events.len(), 1);
        assert_eq!(answer_claims(KEY, &events[0].body)["respCode"], "0000");
        assert_eq!(resp(&inquire(&model, "processing1", T0 + 120_001)), "0000");
        assert_eq!(status_now(&model, "processing1", T0 + 120_002), "A");
        assert_eq!(model.charges()[0].outcome, "authorized");
        // A decline: PF, a settle 12.
        charge(&model, "declined1", "pm_card_visa_chargeDeclined");
        let settle = action(&model, "declined1", "S", Some("30.00"), T0 + 120_003);
        assert_eq!(
            (code(&settle), status_of(&settle)),
            ("12".to_owned(), "PF".to_owned())
        );
        // 3-D Secure: the page's completion authorizes, notified and read as 0000.
        let token = three_ds_token(&model, "threeds1", "Y", Some(RETURN));
        let paid = pay(&model, &token, "pm_card_threeDSecure2Required", T0 + 1);
        assert_eq!(resp(&paid), "1001");
        let charge_id = model.charges()[2].id.clone();
        let done = answer(&model, &charge_id, "complete", T0 + 120_004);
        assert_eq!((done.status, done.location.as_deref()), (303, Some(RETURN)));
        assert_eq!(done.events.len(), 1);
        assert_eq!(answer_claims(KEY, &done.events[0].body)["respCode"], "0000");
        assert_eq!(resp(&inquire(&model, "threeds1", T0 + 120_005)), "0000");
        assert_eq!(model.charges()[2].outcome, "authorized");
        assert_eq!(
            code(&action(
                &model,
                "threeds1",
                "S",
                Some("30.00"),
                T0 + 120_006
            )),
            "00"
        );
        assert_eq!(model.charges()[2].captures, captured(3000, None));
        // None of the settles or refusals captured anything else.
        assert_eq!(model.charges()[0].captures, Vec::new());
        assert_eq!(model.charges()[1].outcome, "failed");
    }

    fn manual_model_config() -> ModelConfig {
        ModelConfig {
            twoc2p_maintenance_keys: Some(keys().clone()),
            twoc2p_manual_settlement: true,
            ..config()
        }
    }
}
