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
fn there_are_no_refund_routes() {
    let model = model();
    for (method, path) in [
        ("POST", "/v1/refunds"),
        ("POST", "/charges/1234567/refunds"),
        ("POST", "/PaymentAction/2.0/action"),
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
    assert_eq!(model.requests_seen(), 4);
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
