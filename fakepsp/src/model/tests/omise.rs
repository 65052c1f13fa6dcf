//! The Omise face's rules, each tested through the model as the server and the simulation
//! call it.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use super::{json, kinds, model_with, HOUR_MS, T0};
use crate::model::{Delivery, FakeModel, ModelConfig, WireAnswer, WireRequest};
use crate::provider::Provider;

fn config() -> ModelConfig {
    ModelConfig {
        provider: Provider::Omise,
        ..ModelConfig::default()
    }
}

fn model() -> FakeModel {
    model_with(config())
}

/// `Basic base64("<key>:<password>")`.
fn basic(key: &str, password: &str) -> String {
    let credentials = format!("{key}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

fn request<'a>(
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    authorization: Option<&'a str>,
    key: Option<&'a str>,
    body: &'a str,
) -> WireRequest<'a> {
    WireRequest {
        method,
        path,
        query,
        authorization,
        idempotency_key: key,
        prefer: None,
        body: body.as_bytes(),
    }
}

fn post(model: &FakeModel, path: &str, body: &str, key: Option<&str>, now_ms: i64) -> WireAnswer {
    let authorization = basic(crate::provider::DEFAULT_API_KEY, "");
    model.handle(
        &request("POST", path, None, Some(&authorization), key, body),
        now_ms,
    )
}

fn get(model: &FakeModel, path: &str, query: Option<&str>, now_ms: i64) -> WireAnswer {
    let authorization = basic(crate::provider::DEFAULT_API_KEY, "");
    model.handle(
        &request("GET", path, query, Some(&authorization), None, ""),
        now_ms,
    )
}

/// The charge create payonce's Omise adapter sends (`charge_call`), in yen.
fn charge(token: &str, payment_id: &str) -> String {
    format!(
        "amount=3000&currency=jpy&card={token}&capture=true&description={payment_id}\
         &metadata[payment_id]={payment_id}"
    )
}

fn code(answer: &WireAnswer) -> Value {
    json(answer)["code"].clone()
}

/// A successful charge's id.
fn paid(model: &FakeModel, token: &str, payment_id: &str, now_ms: i64) -> String {
    let answer = post(model, "/charges", &charge(token, payment_id), None, now_ms);
    assert_eq!(json(&answer)["status"], "successful", "{}", answer.body);
    json(&answer)["id"].as_str().unwrap_or_default().to_owned()
}

/// Whether an id is `<prefix>_test_` and 19 lowercase alphanumerics, like Omise's.
fn is_omise_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix("_test_"))
        .is_some_and(|rest| {
            rest.len() == 19
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        })
}

// Authentication ("Errors" → "Authentication failure").

#[test]
fn basic_auth_with_the_secret_key_as_user_name_or_401_before_anything_else() {
    let model = model();
    let wrong = basic("skey_test_other", "");
    let bearer = format!("Bearer {}", crate::provider::DEFAULT_API_KEY);
    let no_colon = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(crate::provider::DEFAULT_API_KEY)
    );
    // WHEN the key is missing, wrong, sent as a bearer token or unreadable — on a create
    // that would otherwise be refused, and on a route that does not exist
    for authorization in [
        None,
        Some(wrong.as_str()),
        Some(bearer.as_str()),
        Some(no_colon.as_str()),
        Some("Basic !!!"),
    ] {
        for (method, path, body) in [("POST", "/charges", "amount=1"), ("GET", "/nowhere", "")] {
            let answer = model.handle(
                &request(method, path, None, authorization, Some("k"), body),
                T0,
            );
            // THEN 401 authentication_failure, in Omise's error object
            assert_eq!(answer.status, 401, "{authorization:?} {path}");
            assert_eq!(
                json(&answer),
                json!({
                    "object": "error",
                    "location": "https://www.omise.co/api-errors#authentication-failure",
                    "code": "authentication_failure",
                    "message": "authentication failed",
                })
            );
        }
    }
    // AND nothing was created, every request was counted, the key stored nothing
    assert!(model.charges().is_empty());
    assert_eq!(model.requests_seen(), 10);
    // AND the right key is accepted with any password, the scheme in any case
    let lower = basic(crate::provider::DEFAULT_API_KEY, "ignored").replacen("Basic", "basic", 1);
    let ok = model.handle(
        &request(
            "POST",
            "/charges",
            None,
            Some(&lower),
            Some("k"),
            &charge("pm_card_visa", "p"),
        ),
        T0,
    );
    assert_eq!((ok.status, ok.replayed), (200, false), "{}", ok.body);
}

// Charge create and statuses ("Charges API"; test cards, "Testing").

#[test]
fn tokens_make_omise_charges_a_decline_is_a_failed_charge_answered_200() {
    let model = model();
    for (token, status, failure_code) in [
        ("pm_card_visa", "successful", None),
        ("pm_card_mastercard", "successful", None),
        ("pm_card_refundFail", "successful", None),
        ("pm_fake_refund_pending", "successful", None),
        (
            "pm_card_visa_chargeDeclined",
            "failed",
            Some("payment_rejected"),
        ),
        (
            "pm_card_chargeDeclinedInsufficientFunds",
            "failed",
            Some("insufficient_fund"),
        ),
        ("pm_fake_processing", "pending", None),
        ("pm_fake_requires_action", "pending", None),
    ] {
        let answer = post(&model, "/charges", &charge(token, "pay_1"), None, T0);
        assert_eq!(answer.status, 200, "{token}: {}", answer.body);
        let object = json(&answer);
        let successful = status == "successful";
        assert_eq!(object["object"], "charge");
        assert!(
            is_omise_id(object["id"].as_str().unwrap_or_default(), "chrg"),
            "{object}"
        );
        assert_eq!(object["status"], status, "{token}");
        assert_eq!(object["paid"], successful);
        assert_eq!(object["authorized"], successful);
        assert_eq!(object["captured"], successful);
        assert_eq!(object["failure_code"], json!(failure_code), "{token}");
        assert_eq!(
            object["failure_message"].is_string(),
            failure_code.is_some()
        );
        assert_eq!(object["livemode"], false);
        assert_eq!(
            (object["amount"].clone(), object["currency"].clone()),
            (json!(3000), json!("jpy"))
        );
        assert_eq!(object["description"], "pay_1");
        assert_eq!(object["metadata"], json!({"payment_id": "pay_1"}));
        assert_eq!(object["refunded_amount"], 0);
        assert_eq!(object["refunds"]["total"], 0);
        assert_eq!(object["created_at"], "2027-01-15T08:00:00Z");
        // A 3-D Secure charge waits at its authorize URI.
        assert_eq!(
            object["authorize_uri"].is_string(),
            token == "pm_fake_requires_action"
        );
        // AND one charge.create event carries the charge as answered
        assert_eq!(kinds(&answer.events), ["charge.create"], "{token}");
        let event: Value = serde_json::from_str(&answer.events[0].body).unwrap_or(Value::Null);
        assert_eq!(event["object"], "event");
        assert_eq!(event["key"], "charge.create");
        assert_eq!(event["livemode"], false);
        assert!(is_omise_id(&answer.events[0].id, "evnt"), "{event}");
        assert_eq!(event["id"], answer.events[0].id.as_str());
        assert_eq!(event["data"], object);
    }
    assert_eq!(model.charges().len(), 8);
}

#[test]
fn an_unknown_token_is_404_not_found_and_creates_nothing() {
    // omise-go's live test: 404 not_found "token … was not found".
    let model = model();
    let answer = post(
        &model,
        "/charges",
        &charge("pm_card_nonexistent", "p"),
        Some("k"),
        T0,
    );
    assert_eq!(answer.status, 404);
    assert_eq!(code(&answer), "not_found");
    assert_eq!(
        json(&answer)["message"],
        "token pm_card_nonexistent was not found"
    );
    assert!(answer.events.is_empty());
    assert!(model.charges().is_empty());
    // Stored like any answer: the retry is replayed.
    let again = post(
        &model,
        "/charges",
        &charge("pm_card_nonexistent", "p"),
        Some("k"),
        T0,
    );
    assert_eq!((again.status, again.replayed), (404, true));
}

#[test]
fn the_fault_tokens_tell_the_server_how_to_misdeliver_as_on_the_stripe_face() {
    let model = model();
    let lost = post(
        &model,
        "/charges",
        &charge("pm_fake_lost_response", "a"),
        Some("k1"),
        T0,
    );
    assert_eq!((lost.status, lost.delivery), (200, Delivery::Sever));
    assert_eq!(json(&lost)["status"], "successful");
    let slow = post(
        &model,
        "/charges",
        &charge("pm_fake_slow", "b"),
        Some("k2"),
        T0,
    );
    assert_eq!(
        (slow.status, slow.delivery),
        (200, Delivery::After(config().slow_delay))
    );
    // The retry of the lost one is answered at once from the key.
    let retry = post(
        &model,
        "/charges",
        &charge("pm_fake_lost_response", "a"),
        Some("k1"),
        T0 + 1,
    );
    assert_eq!((retry.replayed, retry.delivery), (true, Delivery::Now));
    assert_eq!(retry.body, lost.body);
    // A 500 before charging stores nothing and creates nothing.
    for _ in 0..2 {
        let failed = post(
            &model,
            "/charges",
            &charge("pm_fake_error_before_charge", "c"),
            Some("k3"),
            T0,
        );
        assert_eq!((failed.status, failed.replayed), (500, false));
        assert_eq!(code(&failed), "internal_error");
        assert_eq!(json(&failed)["object"], "error");
    }
    assert_eq!(model.charges().len(), 2);
    let ok = post(
        &model,
        "/charges",
        &charge("pm_card_visa", "c"),
        Some("k3"),
        T0,
    );
    assert_eq!((ok.status, ok.replayed), (200, false));
}

#[test]
fn pending_charges_complete_later_with_charge_complete() {
    // Omise's statuses; 3-D Secure never done ends `expired` with `timeout`.
    let model = FakeModel::new(
        ModelConfig {
            processing_for: Duration::from_secs(60),
            requires_action_for: Duration::from_secs(120),
            ..config()
        },
        7,
    );
    let processing = post(
        &model,
        "/charges",
        &charge("pm_fake_processing", "a"),
        None,
        T0,
    );
    let three_ds = post(
        &model,
        "/charges",
        &charge("pm_fake_requires_action", "b"),
        None,
        T0,
    );
    assert!(model.tick(T0 + 59_999).is_empty());
    let first = model.tick(T0 + 60_000);
    assert_eq!(kinds(&first), ["charge.complete"]);
    let completed: Value = serde_json::from_str(&first[0].body).unwrap_or(Value::Null);
    assert_eq!(completed["data"]["id"], json(&processing)["id"]);
    assert_eq!(completed["data"]["status"], "successful");
    assert_eq!(completed["data"]["paid"], true);
    let second = model.tick(T0 + 120_000);
    assert_eq!(kinds(&second), ["charge.complete"]);
    let expired: Value = serde_json::from_str(&second[0].body).unwrap_or(Value::Null);
    assert_eq!(expired["data"]["id"], json(&three_ds)["id"]);
    assert_eq!(expired["data"]["status"], "expired");
    assert_eq!(expired["data"]["expired"], true);
    assert_eq!(expired["data"]["failure_code"], "timeout");
    assert_eq!(expired["data"]["authorize_uri"], Value::Null);
    // The inspection view: expired → failed, as the crate's docs say.
    let charges = model.charges();
    assert_eq!(
        charges
            .iter()
            .map(|c| (c.status.as_str(), c.outcome.as_str()))
            .collect::<Vec<_>>(),
        [("successful", "succeeded"), ("expired", "failed")]
    );
    // Retrieve reads the same.
    let id = json(&three_ds)["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        json(&get(&model, &format!("/charges/{id}"), None, T0 + 120_001))["status"],
        "expired"
    );
}

// Charge limits ("Currency and amount") and validation before the key.

#[test]
fn amounts_outside_the_account_country_limits_are_invalid_charge() {
    let model = model();
    for (currency, minimum, maximum) in [
        ("thb", 2_000, 15_000_000),
        ("jpy", 100, 6_000_000),
        ("sgd", 100, 2_000_000),
        ("myr", 100, 10_000_000),
    ] {
        let body = |amount: i64| format!("amount={amount}&currency={currency}&card=pm_card_visa");
        for amount in [minimum - 1, maximum + 1] {
            let refused = post(&model, "/charges", &body(amount), None, T0);
            assert_eq!(refused.status, 400, "{currency} {amount}");
            assert_eq!(code(&refused), "invalid_charge");
        }
        for amount in [minimum, maximum] {
            assert_eq!(
                post(&model, "/charges", &body(amount), None, T0).status,
                200
            );
        }
    }
    // Any other currency, in any case, is not supported.
    for currency in ["usd", "eur", "xyz", ""] {
        let refused = post(
            &model,
            "/charges",
            &format!("amount=5000&currency={currency}&card=pm_card_visa"),
            None,
            T0,
        );
        assert_eq!(code(&refused), "invalid_charge", "{currency}");
        assert_eq!(
            json(&refused)["message"],
            "currency is currently not supported"
        );
    }
    let upper = post(
        &model,
        "/charges",
        "amount=5000&currency=THB&card=pm_card_visa",
        None,
        T0,
    );
    assert_eq!(json(&upper)["currency"], "thb");
    assert_eq!(model.charges().len(), 9);
    // A raised minimum (settlement after conversion) refuses what the table accepts.
    let raised = FakeModel::new(
        ModelConfig {
            minimum_overrides: [("thb".to_owned(), 5_000)].into(),
            ..config()
        },
        7,
    );
    let refused = post(
        &raised,
        "/charges",
        "amount=4999&currency=thb&card=pm_card_visa",
        None,
        T0,
    );
    assert_eq!(code(&refused), "invalid_charge");
}

#[test]
fn validation_errors_are_answered_before_the_key_and_store_nothing() {
    let model = model();
    let base = "currency=jpy&card=pm_card_visa";
    let cases = [
        (format!("amount=3000&{base}&colour=red"), "bad_request"),
        (format!("amount=3000&{base}&customer=cust_1"), "bad_request"),
        (format!("amount=abc&{base}"), "invalid_charge"),
        (format!("amount=0&{base}"), "invalid_charge"),
        (base.to_owned(), "invalid_charge"),
        ("amount=3000&currency=jpy".to_owned(), "missing_card"),
        ("amount=3000&currency=jpy&card=".to_owned(), "missing_card"),
        (
            format!("amount=3000&{base}&authorization_type=final_auth"),
            "bad_request",
        ),
        (
            format!("amount=3000&{base}&capture=false&authorization_type=pre_auth"),
            "bad_request",
        ),
        (
            format!("amount=3000&{base}&capture=false&authorization_type=other"),
            "bad_request",
        ),
        (format!("amount=3000&{base}&capture=yes"), "bad_request"),
        (
            format!("amount=3000&{base}&metadata[a][b]=x"),
            "bad_request",
        ),
        (format!("amount=99&{base}"), "invalid_charge"),
    ];
    for (body, expected) in &cases {
        // GIVEN the key is held by a running request, THEN the key layer answers first
        assert!(model.begin_in_flight("held"));
        let busy = post(&model, "/charges", body, Some("held"), T0);
        assert_eq!(busy.status, 409, "{body}");
        assert_eq!(code(&busy), "conflict");
        assert!(model.end_in_flight("held"));
        // AND under a free key it is refused for its parameters and stores nothing
        let key = format!("k-{body}");
        let refused = post(&model, "/charges", body, Some(&key), T0);
        assert_eq!(refused.status, 400, "{body}");
        assert_eq!(json(&refused)["object"], "error");
        assert_eq!(&code(&refused), expected, "{body}");
        let ok = post(
            &model,
            "/charges",
            &charge("pm_card_visa", "p"),
            Some(&key),
            T0,
        );
        assert_eq!((ok.status, ok.replayed), (200, false), "{body}");
    }
    assert_eq!(model.charges().len(), cases.len());
}

// Idempotency (undocumented at Omise; the Stripe face's rules, and a knob to ignore it).

#[test]
fn idempotency_replays_refuses_other_parameters_and_can_be_switched_off() {
    let model = model();
    let first = post(
        &model,
        "/charges",
        &charge("pm_card_visa", "pay_1"),
        Some("k"),
        T0,
    );
    // The same parameters in another order and encoding: replayed byte for byte, no events.
    let body = charge("pm_card_visa", "pay_1");
    let reordered: Vec<&str> = body.split('&').rev().collect();
    let reordered = reordered.join("&").replace("metadata[", "metadata%5B");
    let again = post(&model, "/charges", &reordered, Some("k"), T0 + HOUR_MS);
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body);
    assert!(again.events.is_empty());
    // Other parameters, or another endpoint: 400 bad_request, nothing changes.
    let other = post(
        &model,
        "/charges",
        &charge("pm_card_visa", "pay_2"),
        Some("k"),
        T0,
    );
    let id = json(&first)["id"].as_str().unwrap_or_default().to_owned();
    let elsewhere = post(
        &model,
        &format!("/charges/{id}/refunds"),
        "amount=100",
        Some("k"),
        T0,
    );
    for answer in [&other, &elsewhere] {
        assert_eq!((answer.status, answer.replayed), (400, false));
        assert_eq!(code(answer), "bad_request");
    }
    assert_eq!(model.charges().len(), 1);
    assert!(model.refunds().is_empty());
    // A malformed key is refused.
    let long = "k".repeat(256);
    let refused = post(
        &model,
        "/charges",
        &charge("pm_card_visa", "pay_3"),
        Some(&long),
        T0,
    );
    assert_eq!(
        (refused.status, code(&refused)),
        (400, json!("bad_request"))
    );

    // WHEN the face ignores keys
    let ignoring = FakeModel::new(
        ModelConfig {
            omise_honours_idempotency_key: false,
            ..config()
        },
        7,
    );
    assert!(ignoring.begin_in_flight("k"));
    let one = post(
        &ignoring,
        "/charges",
        &charge("pm_card_visa", "pay_1"),
        Some("k"),
        T0,
    );
    let two = post(
        &ignoring,
        "/charges",
        &charge("pm_card_visa", "pay_1"),
        Some("k"),
        T0,
    );
    let three = post(
        &ignoring,
        "/charges",
        &charge("pm_card_visa", "pay_9"),
        Some("k"),
        T0,
    );
    // THEN every re-send charges again (the tokens are reusable), never replayed or refused
    for answer in [&one, &two, &three] {
        assert_eq!((answer.status, answer.replayed), (200, false));
    }
    let charges = ignoring.charges();
    assert_eq!(charges.len(), 3);
    assert!(charges
        .iter()
        .all(|c| c.idempotency_key.as_deref() == Some("k")));
    // AND refunds alike
    let id = json(&one)["id"].as_str().unwrap_or_default().to_owned();
    for _ in 0..2 {
        let refund = post(
            &ignoring,
            &format!("/charges/{id}/refunds"),
            "amount=100",
            Some("r"),
            T0,
        );
        assert_eq!((refund.status, refund.replayed), (200, false));
    }
    assert_eq!(ignoring.refunds().len(), 2);
}

// Retrieve and search ("Search").

#[test]
fn retrieve_is_read_after_write_and_search_lags_behind_it() {
    let model = FakeModel::new(
        ModelConfig {
            search_lag_max: Duration::from_secs(600),
            ..config()
        },
        7,
    );
    let ids: Vec<String> = (0..20)
        .map(|i| paid(&model, "pm_card_visa", &format!("pay_{i}"), T0))
        .collect();
    for id in &ids {
        let retrieved = get(&model, &format!("/charges/{id}"), None, T0);
        assert_eq!(
            (retrieved.status, json(&retrieved)["id"].clone()),
            (200, json!(id))
        );
    }
    let found_at = |now_ms: i64| -> usize {
        (0..20)
            .filter(|i| {
                let query = format!("scope=charge&query=pay_{i}");
                let answer = get(&model, "/search", Some(&query), now_ms);
                assert_eq!(answer.status, 200, "{}", answer.body);
                json(&answer)["data"]
                    .as_array()
                    .is_some_and(|data| data.iter().any(|c| c["id"] == ids[*i].as_str()))
            })
            .count()
    };
    // Right after the writes some are not searchable yet; after the longest lag all are.
    assert!(found_at(T0) < 20);
    assert_eq!(found_at(T0 + 600_000), 20);
    assert_eq!(
        get(&model, "/charges/chrg_test_missing", None, T0).status,
        404
    );
}

#[test]
fn search_matches_description_or_metadata_and_pages() {
    let model = model();
    // description only, metadata only, both, neither
    for body in [
        "amount=3000&currency=jpy&card=pm_card_visa&description=Order-ABC",
        "amount=3000&currency=jpy&card=pm_card_visa&metadata[order]=order-abc-2",
        "amount=3000&currency=jpy&card=pm_card_visa&description=x&metadata[payment_id]=ORDER-ABC",
        "amount=3000&currency=jpy&card=pm_card_visa&description=other",
    ] {
        assert_eq!(post(&model, "/charges", body, None, T0).status, 200);
    }
    let search = |query: &str| json(&get(&model, "/search", Some(query), T0));
    let all = search("scope=charge&query=order-abc");
    assert_eq!(all["object"], "search");
    assert_eq!(all["scope"], "charge");
    assert_eq!(
        (all["total"].clone(), all["total_pages"].clone()),
        (json!(3), json!(1))
    );
    assert_eq!(all["per_page"], 30);
    // Newest first by default, oldest first on request.
    let descriptions = |result: &Value| -> Vec<Value> {
        result["data"]
            .as_array()
            .map(|data| data.iter().map(|c| c["description"].clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        descriptions(&all),
        [json!("x"), Value::Null, json!("Order-ABC")]
    );
    let oldest = search("scope=charge&query=order-abc&order=chronological");
    assert_eq!(
        descriptions(&oldest),
        [json!("Order-ABC"), Value::Null, json!("x")]
    );
    // Pages of one.
    let second = search("scope=charge&query=order-abc&per_page=1&page=2");
    assert_eq!(
        (second["total_pages"].clone(), second["page"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(descriptions(&second), [Value::Null]);
    assert_eq!(
        search("scope=charge&query=order-abc&page=4")["data"],
        json!([])
    );
    // No query: everything.
    assert_eq!(search("scope=charge")["total"], 4);
    // Refused: another scope, filters, a bad page, an unknown parameter.
    for (query, expected) in [
        ("scope=customer&query=x", "invalid_scope"),
        ("query=x", "invalid_scope"),
        ("scope=charge&filters[amount]=30", "invalid_filters"),
        ("scope=charge&page=0", "invalid_page"),
        ("scope=charge&page=x", "invalid_page"),
        ("scope=charge&per_page=101", "bad_request"),
        ("scope=charge&order=newest", "bad_request"),
        ("scope=charge&limit=3", "bad_request"),
    ] {
        let answer = get(&model, "/search", Some(query), T0);
        assert_eq!(
            (answer.status, code(&answer)),
            (400, json!(expected)),
            "{query}"
        );
    }
}

// Refunds ("Refunds API").

fn refund(
    model: &FakeModel,
    charge: &str,
    body: &str,
    key: Option<&str>,
    now_ms: i64,
) -> WireAnswer {
    post(
        model,
        &format!("/charges/{charge}/refunds"),
        body,
        key,
        now_ms,
    )
}

#[test]
fn refunds_add_up_to_the_charge_and_more_is_failed_refund() {
    let model = model();
    let id = paid(&model, "pm_card_visa", "pay_1", T0);
    // WHEN 1000 of 3000 is refunded
    let first = refund(
        &model,
        &id,
        "amount=1000&metadata[refund_id]=rf_1&metadata[payment_id]=pay_1",
        Some("r1"),
        T0 + 1,
    );
    // THEN a closed refund object, and one refund.create event
    assert_eq!(first.status, 200, "{}", first.body);
    let object = json(&first);
    assert!(
        is_omise_id(object["id"].as_str().unwrap_or_default(), "rfnd"),
        "{object}"
    );
    assert_eq!(
        (
            object["object"].clone(),
            object["amount"].clone(),
            object["currency"].clone(),
            object["charge"].clone(),
            object["status"].clone(),
            object["voided"].clone(),
        ),
        (
            json!("refund"),
            json!(1000),
            json!("jpy"),
            json!(id),
            json!("closed"),
            json!(false)
        )
    );
    assert_eq!(
        object["metadata"],
        json!({"refund_id": "rf_1", "payment_id": "pay_1"})
    );
    assert_eq!(kinds(&first.events), ["refund.create"]);
    let event: Value = serde_json::from_str(&first.events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"], object);
    // AND the charge shows it
    let shown = json(&get(&model, &format!("/charges/{id}"), None, T0 + 2));
    assert_eq!(shown["refunded_amount"], 1000);
    assert_eq!(shown["refunds"]["total"], 1);
    assert_eq!(shown["refunds"]["data"][0], object);
    assert_eq!(shown["refundable"], true);
    // WHEN more than the 2000 left is asked for, THEN 400 failed_refund, nothing created
    let over = refund(&model, &id, "amount=2001", Some("r2"), T0 + 3);
    assert_eq!((over.status, code(&over)), (400, json!("failed_refund")));
    assert!(over.events.is_empty());
    // AND the rest can be refunded, after which nothing is left
    assert_eq!(
        refund(&model, &id, "amount=2000", Some("r3"), T0 + 4).status,
        200
    );
    let done = refund(&model, &id, "amount=1", None, T0 + 5);
    assert_eq!((done.status, code(&done)), (400, json!("failed_refund")));
    assert_eq!(
        json(&get(&model, &format!("/charges/{id}"), None, T0 + 6))["refundable"],
        false
    );
    assert_eq!(model.refunds().len(), 2);
    // An unknown charge is not_found; a failed one cannot be refunded.
    let missing = refund(&model, "chrg_test_missing", "amount=100", None, T0);
    assert_eq!((missing.status, code(&missing)), (404, json!("not_found")));
    let declined = post(
        &model,
        "/charges",
        &charge("pm_card_visa_chargeDeclined", "pay_2"),
        None,
        T0,
    );
    let declined = json(&declined)["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let refused = refund(&model, &declined, "amount=100", None, T0);
    assert_eq!(
        (refused.status, code(&refused)),
        (400, json!("failed_refund"))
    );
    // A replay of the first refund under its key is the first answer.
    let again = refund(
        &model,
        &id,
        "amount=1000&metadata[refund_id]=rf_1&metadata[payment_id]=pay_1",
        Some("r1"),
        T0 + 7,
    );
    assert_eq!(
        (again.replayed, again.body.as_str()),
        (true, first.body.as_str())
    );
    assert_eq!(model.refunds().len(), 2);
}

#[test]
fn refund_validation_comes_before_the_key_and_stores_nothing() {
    let model = model();
    let id = paid(&model, "pm_card_visa", "pay_1", T0);
    for (body, expected) in [
        ("", "invalid_amount"),
        ("amount=0", "invalid_amount"),
        ("amount=1.5", "invalid_amount"),
        ("amount=100&void=true", "bad_request"),
        ("amount=100&reason=duplicate", "bad_request"),
        ("amount=100&metadata[]=x", "bad_request"),
    ] {
        let key = format!("k-{body}");
        let refused = refund(&model, &id, body, Some(&key), T0);
        assert_eq!(
            (refused.status, code(&refused)),
            (400, json!(expected)),
            "{body}"
        );
        let ok = refund(&model, &id, "amount=100&void=false", Some(&key), T0);
        assert_eq!((ok.status, ok.replayed), (200, false), "{body}");
    }
}

#[test]
fn a_charge_takes_fifteen_refunds_at_most() {
    // "Refunds API": refundable only with fewer than 15 refunds.
    let model = model();
    let id = paid(&model, "pm_card_visa", "pay_1", T0);
    for _ in 0..15 {
        assert_eq!(refund(&model, &id, "amount=100", None, T0).status, 200);
    }
    let sixteenth = refund(&model, &id, "amount=100", None, T0);
    assert_eq!(
        (sixteenth.status, code(&sixteenth)),
        (400, json!("failed_refund"))
    );
    assert_eq!(model.refunds().len(), 15);
}

#[test]
fn refund_fates_follow_the_token_as_on_the_stripe_face_without_events() {
    let model = FakeModel::new(
        ModelConfig {
            refund_fail_after: Duration::from_secs(60),
            refund_pending_for: Duration::from_secs(120),
            ..config()
        },
        7,
    );
    let failing = paid(&model, "pm_card_refundFail", "pay_f", T0);
    let pending = paid(&model, "pm_fake_refund_pending", "pay_p", T0);
    let failed = refund(&model, &failing, "amount=3000", None, T0);
    let waiting = refund(&model, &pending, "amount=3000", None, T0);
    assert_eq!(json(&failed)["status"], "closed");
    assert_eq!(json(&waiting)["status"], "pending");
    // A pending refund holds its amount.
    let held = refund(&model, &pending, "amount=1", None, T0);
    assert_eq!(code(&held), "failed_refund");
    // WHEN their time comes, THEN no event (Omise documents none) and the new statuses
    assert!(model.tick(T0 + 120_000).is_empty());
    let refunds = model.refunds();
    assert_eq!(
        refunds
            .iter()
            .map(|r| (r.status.as_str(), r.outcome.as_str()))
            .collect::<Vec<_>>(),
        [("failed", "failed"), ("closed", "succeeded")]
    );
    let path = format!("/charges/{failing}/refunds/{}", refunds[0].id);
    assert_eq!(
        json(&get(&model, &path, None, T0 + 120_001))["status"],
        "failed"
    );
    // AND the failed refund's amount is refundable again
    assert_eq!(
        refund(&model, &failing, "amount=3000", None, T0 + 120_002).status,
        200
    );
}

#[test]
fn refund_lists_page_with_limit_offset_and_order() {
    let model = model();
    let id = paid(&model, "pm_card_visa", "pay_1", T0);
    let other = paid(&model, "pm_card_visa", "pay_2", T0);
    let mut ids = Vec::new();
    for amount in [100, 200, 300] {
        let answer = refund(&model, &id, &format!("amount={amount}"), None, T0);
        ids.push(json(&answer)["id"].clone());
    }
    refund(&model, &other, "amount=100", None, T0);
    let list = |query: &str| {
        json(&get(
            &model,
            &format!("/charges/{id}/refunds"),
            Some(query),
            T0,
        ))
    };
    let all = list("");
    assert_eq!(all["object"], "list");
    assert_eq!(
        (
            all["total"].clone(),
            all["limit"].clone(),
            all["offset"].clone()
        ),
        (json!(3), json!(20), json!(0))
    );
    let listed = |page: &Value| -> Vec<Value> {
        page["data"]
            .as_array()
            .map(|d| d.iter().map(|r| r["id"].clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(listed(&all), ids);
    assert_eq!(listed(&list("limit=1&offset=1")), ids[1..2]);
    let newest: Vec<Value> = ids.iter().rev().cloned().collect();
    assert_eq!(listed(&list("order=reverse_chronological")), newest);
    assert_eq!(listed(&list("offset=3")), Vec::<Value>::new());
    for query in ["limit=0", "limit=101", "offset=-1", "order=x", "from=2020"] {
        let answer = get(&model, &format!("/charges/{id}/refunds"), Some(query), T0);
        assert_eq!(
            (answer.status, code(&answer)),
            (400, json!("bad_request")),
            "{query}"
        );
    }
    let missing = get(&model, "/charges/chrg_test_missing/refunds", None, T0);
    assert_eq!((missing.status, code(&missing)), (404, json!("not_found")));
    // A refund is retrieved under its own charge only.
    let first = ids[0].as_str().unwrap_or_default();
    assert_eq!(
        get(&model, &format!("/charges/{id}/refunds/{first}"), None, T0).status,
        200
    );
    assert_eq!(
        get(
            &model,
            &format!("/charges/{other}/refunds/{first}"),
            None,
            T0
        )
        .status,
        404
    );
}

// Inspection and determinism.

#[test]
fn inspection_entries_carry_the_spec_fields_for_the_omise_face() {
    let model = model();
    let id = paid(&model, "pm_card_visa", "pay_1", T0);
    post(
        &model,
        "/charges",
        &charge("pm_card_visa_chargeDeclined", "pay_2"),
        Some("k2"),
        T0,
    );
    refund(
        &model,
        &id,
        "amount=500&metadata[refund_id]=rf_1&metadata[payment_id]=pay_1",
        Some("r1"),
        T0,
    );
    let charges = model.charges();
    assert_eq!(charges.len(), 2);
    assert_eq!(
        (
            charges[0].provider.as_str(),
            charges[0].id.as_str(),
            charges[0].status.as_str(),
            charges[0].outcome.as_str(),
            charges[0].amount,
            charges[0].currency.as_str(),
            charges[0].payment_id.as_deref(),
            charges[0].idempotency_key.as_deref(),
        ),
        (
            "omise",
            id.as_str(),
            "successful",
            "succeeded",
            3000,
            "jpy",
            Some("pay_1"),
            None
        )
    );
    assert_eq!(
        (
            charges[1].status.as_str(),
            charges[1].outcome.as_str(),
            charges[1].idempotency_key.as_deref()
        ),
        ("failed", "failed", Some("k2"))
    );
    let refunds = model.refunds();
    assert_eq!(
        (
            refunds[0].provider.as_str(),
            refunds[0].status.as_str(),
            refunds[0].outcome.as_str(),
            refunds[0].amount,
            refunds[0].currency.as_str(),
            refunds[0].payment_intent.as_str(),
            refunds[0].payment_id.as_deref(),
            refunds[0].refund_id.as_deref(),
            refunds[0].idempotency_key.as_deref(),
        ),
        (
            "omise",
            "closed",
            "succeeded",
            500,
            "jpy",
            id.as_str(),
            Some("pay_1"),
            Some("rf_1"),
            Some("r1")
        )
    );
}

#[test]
fn one_seed_and_one_call_sequence_give_byte_identical_answers() {
    let script = |seed: u64| -> Vec<String> {
        let model = FakeModel::new(
            ModelConfig {
                search_lag_max: Duration::from_secs(600),
                ..config()
            },
            seed,
        );
        let mut trace = Vec::new();
        for (i, token) in [
            "pm_card_visa",
            "pm_fake_processing",
            "pm_card_visa_chargeDeclined",
        ]
        .into_iter()
        .enumerate()
        {
            let answer = post(
                &model,
                "/charges",
                &charge(token, "a"),
                Some(&format!("k{i}")),
                T0,
            );
            let id = json(&answer)["id"].as_str().unwrap_or_default().to_owned();
            trace.push(answer.body);
            trace.extend(answer.events.into_iter().map(|e| e.body));
            let refunded = refund(&model, &id, "amount=100", None, T0 + 1);
            trace.push(refunded.body);
        }
        trace.push(
            get(
                &model,
                "/search",
                Some("scope=charge&query=a"),
                T0 + HOUR_MS,
            )
            .body,
        );
        trace.extend(model.tick(T0 + 2 * HOUR_MS).into_iter().map(|e| e.body));
        trace
    };
    assert_eq!(script(42), script(42));
    assert_ne!(script(42), script(43), "the seed decides ids");
}

#[test]
fn unknown_routes_are_404_not_found() {
    let model = model();
    for (method, path) in [
        ("GET", "/charges"),
        ("DELETE", "/charges/chrg_test_1"),
        ("POST", "/v1/payment_intents"),
        ("GET", "/customers/cust_test_1"),
    ] {
        let authorization = basic(crate::provider::DEFAULT_API_KEY, "");
        let answer = model.handle(
            &request(method, path, None, Some(&authorization), None, ""),
            T0,
        );
        assert_eq!(
            (answer.status, code(&answer)),
            (404, json!("not_found")),
            "{method} {path}"
        );
    }
}

// 3-D Secure ("How to implement 3-D Secure": `return_uri`, `authorize_uri`, `charge.complete`).

const RETURN_URI: &str = "https://shop.example/orders/1/complete?x=1";

/// A 3-D Secure charge create with a `return_uri`, `extra` appended.
fn three_ds(token: &str, extra: &str) -> String {
    format!(
        "amount=3000&currency=jpy&card={token}&description=p&metadata[payment_id]=p\
         &return_uri=https%3A%2F%2Fshop.example%2Forders%2F1%2Fcomplete%3Fx%3D1{extra}"
    )
}

/// The charge object carried by the only event of `events`, after checking its key.
fn only_event(events: &[crate::model::ModelEvent], key: &str) -> Value {
    assert_eq!(kinds(events), vec![key]);
    serde_json::from_str::<Value>(&events[0].body).unwrap_or(Value::Null)["data"].clone()
}

/// Creates a pending 3-D Secure charge and returns its id.
fn pending_three_ds(model: &FakeModel, extra: &str) -> String {
    let answer = post(
        model,
        "/charges",
        &three_ds("pm_card_threeDSecure2Required", extra),
        None,
        T0,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    json(&answer)["id"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_three_ds_card_with_a_return_uri_waits_pending_on_the_fakes_page_and_completes() {
    let model = model();
    for token in [
        "pm_card_threeDSecure2Required",
        "pm_card_authenticationRequired",
    ] {
        // WHEN a 3-D Secure card is charged with a return_uri
        let answer = post(&model, "/charges", &three_ds(token, ""), None, T0);
        let object = json(&answer);
        let id = object["id"].as_str().unwrap_or_default().to_owned();
        // THEN the charge waits: pending, not authorized, not paid, at the fake's own page
        assert_eq!(answer.status, 200);
        assert_eq!(object["status"], "pending");
        assert_eq!(object["authorized"], false);
        assert_eq!(object["paid"], false);
        assert_eq!(object["capture"], true);
        assert_eq!(
            object["authorize_uri"],
            format!("http://fake-psp.invalid/_fake/authenticate/{id}")
        );
        assert_eq!(object["return_uri"], RETURN_URI);
        assert_eq!(kinds(&answer.events), vec!["charge.create"]);
        let row = model.charges().pop().expect("a charge");
        assert_eq!(
            (row.outcome.as_str(), row.status.as_str()),
            ("pending", "pending")
        );
        // AND the page shows the two buttons
        let shown = model.action_page(&id, None, T0 + 1_000);
        assert_eq!(shown.status, 200);
        assert!(shown.html.contains("Complete") && shown.html.contains("Fail"));
        // WHEN the customer completes it
        let done = model.action_page(&id, Some(b"result=complete"), T0 + 2_000);
        // THEN 303 to the return_uri as given, and charge.complete with a successful charge
        assert_eq!(done.status, 303);
        assert_eq!(done.location.as_deref(), Some(RETURN_URI));
        let data = only_event(&done.events, "charge.complete");
        assert_eq!(data["status"], "successful");
        assert_eq!(
            (data["authorized"].clone(), data["paid"].clone()),
            (json!(true), json!(true))
        );
        let charge = json(&get(&model, &format!("/charges/{id}"), None, T0 + 3_000));
        assert_eq!(charge, data);
        let row = model.charges().pop().expect("a charge");
        assert_eq!(row.outcome, "succeeded");
        assert_eq!(row.amount_captured, Some(3000));
        // AND a second answer changes nothing
        let again = model.action_page(&id, Some(b"result=fail"), T0 + 4_000);
        assert_eq!(again.status, 409);
        assert!(again.events.is_empty());
        assert_eq!(
            model.charges().pop().map(|c| c.outcome),
            Some("succeeded".into())
        );
    }
}

#[test]
fn a_failed_authentication_fails_the_charge_and_an_abandoned_one_expires() {
    let model = model();
    let failed = pending_three_ds(&model, "");
    let abandoned = pending_three_ds(&model, "");
    // WHEN the customer fails the authentication
    let page = model.action_page(&failed, Some(b"result=fail"), T0 + 1_000);
    // THEN 303 back, charge.complete with a failed charge and Omise's failure code
    assert_eq!(page.status, 303);
    assert_eq!(page.location.as_deref(), Some(RETURN_URI));
    let data = only_event(&page.events, "charge.complete");
    assert_eq!(data["status"], "failed");
    assert_eq!(data["failure_code"], "failed_processing");
    assert_eq!(data["failure_message"], "3-D Secure authentication failed");
    assert_eq!(
        (data["authorized"].clone(), data["paid"].clone()),
        (json!(false), json!(false))
    );
    // AND a page nobody posts leaves its charge pending until `requires_action_for` has passed,
    // then it expires (`timeout`) with charge.complete, and its page is closed
    let lapses_ms = T0 + i64::try_from(config().requires_action_for.as_millis()).unwrap();
    assert!(model.tick(lapses_ms - 1).is_empty());
    let pending = json(&get(
        &model,
        &format!("/charges/{abandoned}"),
        None,
        lapses_ms - 1,
    ));
    assert_eq!(pending["status"], "pending");
    let events = model.tick(lapses_ms);
    let data = only_event(&events, "charge.complete");
    assert_eq!(
        (
            data["id"].as_str(),
            data["status"].as_str(),
            data["failure_code"].as_str()
        ),
        (Some(abandoned.as_str()), Some("expired"), Some("timeout"))
    );
    let rows = model.charges();
    assert_eq!(rows[0].outcome, "failed");
    assert_eq!(
        (rows[1].id.as_str(), rows[1].outcome.as_str()),
        (abandoned.as_str(), "failed")
    );
    assert_eq!(
        model
            .action_page(&abandoned, Some(b"result=complete"), lapses_ms + 1)
            .status,
        409
    );
    // AND the page of an unknown charge is 404, a bad form 400
    assert_eq!(model.action_page("chrg_test_nope", None, T0).status, 404);
    assert_eq!(
        model
            .action_page(&abandoned, Some(b"result=maybe"), T0)
            .status,
        400
    );
}

#[test]
fn a_three_ds_card_without_a_return_uri_is_invalid_charge_and_creates_nothing() {
    let model = model();
    for (key, body) in [
        ("k1", charge("pm_card_threeDSecure2Required", "p")),
        ("k2", charge("pm_card_authenticationRequired", "p")),
        (
            "k3",
            format!(
                "{}&return_uri=",
                charge("pm_card_threeDSecure2Required", "p")
            ),
        ),
    ] {
        let answer = post(&model, "/charges", &body, Some(key), T0);
        assert_eq!(
            (answer.status, code(&answer)),
            (400, json!("invalid_charge")),
            "{body}"
        );
        assert!(answer.events.is_empty());
        // AND a replay under the key answers the same
        let replay = post(&model, "/charges", &body, Some(key), T0 + 1);
        assert!(replay.replayed);
        assert_eq!(replay.body, answer.body);
    }
    assert!(model.charges().is_empty());
    // AND a card that needs no authentication ignores the return_uri, as before
    let answer = post(&model, "/charges", &three_ds("pm_card_visa", ""), None, T0);
    assert_eq!(json(&answer)["status"], "successful");
    assert_eq!(json(&answer)["return_uri"], Value::Null);
    assert_eq!(json(&answer)["authorize_uri"], Value::Null);
}

#[test]
fn a_completed_three_ds_charge_with_capture_false_is_authorized() {
    let model = model();
    let id = pending_three_ds(&model, "&capture=false");
    let created = json(&get(&model, &format!("/charges/{id}"), None, T0));
    assert_eq!(created["capture"], false);
    assert_eq!(created["capturable"], false);
    assert_eq!(created["expires_at"], Value::Null);
    let page = model.action_page(&id, Some(b"result=complete"), T0 + 1_000);
    let data = only_event(&page.events, "charge.complete");
    assert_eq!(data["status"], "pending");
    assert_eq!(data["authorized"], true);
    assert_eq!(data["paid"], false);
    assert_eq!(data["capturable"], true);
    assert_eq!(
        model.charges().pop().map(|c| c.outcome),
        Some("authorized".into())
    );
}

// Manual capture ("Capture", "Does Omise support Authorize and Hold only?", "Errors").

/// An authorization's id (`capture=false`), in yen unless `body` says otherwise.
fn authorized(model: &FakeModel, body: &str, now_ms: i64) -> String {
    let answer = post(model, "/charges", body, None, now_ms);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(json(&answer)["authorized"], true, "{}", answer.body);
    json(&answer)["id"].as_str().unwrap_or_default().to_owned()
}

const MANUAL: &str =
    "amount=3000&currency=jpy&card=pm_card_visa&capture=false&metadata[payment_id]=p";

#[test]
fn capture_false_authorizes_and_a_capture_under_a_key_takes_it_all() {
    let model = model();
    let answer = post(&model, "/charges", MANUAL, None, T0);
    let object = json(&answer);
    let id = object["id"].as_str().unwrap_or_default().to_owned();
    // THEN an authorization: pending, authorized, not captured, capturable and reversible
    assert_eq!(object["status"], "pending");
    assert_eq!(object["capture"], false);
    assert_eq!(object["authorized"], true);
    assert_eq!(
        (object["captured"].clone(), object["paid"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(
        (object["capturable"].clone(), object["reversible"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(object["refundable"], false);
    assert_eq!(object["authorization_type"], "final_auth");
    assert_eq!(object["authorized_amount"], 3000);
    assert_eq!(object["captured_amount"], 0);
    // T0 is 2027-01-15T08:00:00Z; authorizations lapse 7 days later (the default).
    assert_eq!(object["expires_at"], "2027-01-22T08:00:00Z");
    assert_eq!(kinds(&answer.events), vec!["charge.create"]);
    let row = model.charges().pop().expect("a charge");
    assert_eq!(
        (row.outcome.as_str(), row.capture_method.as_str()),
        ("authorized", "manual")
    );
    assert_eq!(row.amount_captured, None);
    // AND it cannot be refunded yet
    let refund_early = post(
        &model,
        &format!("/charges/{id}/refunds"),
        "amount=100",
        None,
        T0,
    );
    assert_eq!(code(&refund_early), "failed_refund");
    // WHEN it is captured under a key
    let path = format!("/charges/{id}/capture");
    let captured = post(&model, &path, "", Some("cap-1"), T0 + HOUR_MS);
    let object = json(&captured);
    // THEN successful, paid, captured in full, with charge.capture
    assert_eq!(captured.status, 200);
    assert_eq!(object["status"], "successful");
    assert_eq!(
        (object["captured"].clone(), object["paid"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(
        (object["capturable"].clone(), object["reversible"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(object["captured_amount"], 3000);
    assert_eq!(object["refundable"], true);
    assert_eq!(only_event(&captured.events, "charge.capture"), object);
    let row = model.charges().pop().expect("a charge");
    assert_eq!(row.outcome, "succeeded");
    assert_eq!(row.amount_captured, Some(3000));
    assert_eq!(
        row.captures,
        vec![crate::model::FakeCapture {
            amount: 3000,
            idempotency_key: Some("cap-1".into())
        }]
    );
    // AND a replay answers the same, changes nothing and sends nothing
    let replay = post(&model, &path, "", Some("cap-1"), T0 + 2 * HOUR_MS);
    assert!(replay.replayed);
    assert_eq!(replay.body, captured.body);
    assert!(replay.events.is_empty());
    // AND the key with other parameters, or on another endpoint, is 400 bad_request
    let other = post(
        &model,
        &path,
        "capture_amount=3000",
        Some("cap-1"),
        T0 + 2 * HOUR_MS,
    );
    assert_eq!((other.status, code(&other)), (400, json!("bad_request")));
    let elsewhere = post(
        &model,
        &format!("/charges/{id}/reverse"),
        "",
        Some("cap-1"),
        T0,
    );
    assert_eq!(
        (elsewhere.status, code(&elsewhere)),
        (400, json!("bad_request"))
    );
    // AND a second capture under another key is failed_capture, as is a reverse failed_reverse
    let twice = post(&model, &path, "", Some("cap-2"), T0 + 3 * HOUR_MS);
    assert_eq!((twice.status, code(&twice)), (400, json!("failed_capture")));
    let reverse = post(
        &model,
        &format!("/charges/{id}/reverse"),
        "",
        Some("rev-1"),
        T0,
    );
    assert_eq!(
        (reverse.status, code(&reverse)),
        (400, json!("failed_reverse"))
    );
    assert_eq!(model.charges().pop().map(|c| c.captures.len()), Some(1));
    // AND the captured charge refunds like any other
    let refund = post(
        &model,
        &format!("/charges/{id}/refunds"),
        "amount=3000",
        None,
        T0,
    );
    assert_eq!(refund.status, 200, "{}", refund.body);
}

#[test]
fn a_partial_capture_needs_pre_auth_which_only_thai_merchants_have() {
    let model = model();
    // GIVEN a final_auth authorization (the default)
    let final_auth = authorized(&model, MANUAL, T0);
    // WHEN a capture_amount is sent, even the whole amount, THEN failed_capture, nothing moves
    for amount in ["1000", "3000"] {
        let refused = post(
            &model,
            &format!("/charges/{final_auth}/capture"),
            &format!("capture_amount={amount}"),
            None,
            T0,
        );
        assert_eq!(
            (refused.status, code(&refused)),
            (400, json!("failed_capture"))
        );
    }
    assert_eq!(model.charges()[0].outcome, "authorized");
    // GIVEN a pre_auth authorization in baht
    let body =
        "amount=5000&currency=thb&card=pm_card_visa&capture=false&authorization_type=pre_auth";
    let pre_auth = authorized(&model, body, T0);
    let path = format!("/charges/{pre_auth}/capture");
    let shown = json(&get(&model, &format!("/charges/{pre_auth}"), None, T0));
    assert_eq!(shown["authorization_type"], "pre_auth");
    // WHEN more than authorized is asked for THEN failed_capture; malformed → invalid_amount
    let more = post(&model, &path, "capture_amount=5001", Some("pa-1"), T0);
    assert_eq!((more.status, code(&more)), (400, json!("failed_capture")));
    for bad in ["capture_amount=0", "capture_amount=abc"] {
        let refused = post(&model, &path, bad, Some("pa-bad"), T0);
        assert_eq!(
            (refused.status, code(&refused)),
            (400, json!("invalid_amount")),
            "{bad}"
        );
    }
    let unknown = post(&model, &path, "amount=10", Some("pa-bad"), T0);
    assert_eq!(code(&unknown), "bad_request");
    // WHEN 3000 of the 5000 is captured
    let captured = post(&model, &path, "capture_amount=3000", Some("pa-2"), T0);
    let object = json(&captured);
    assert_eq!(object["status"], "successful", "{}", captured.body);
    assert_eq!(object["captured_amount"], 3000);
    assert_eq!(object["authorized_amount"], 5000);
    let row = model.charges().pop().expect("a charge");
    assert_eq!(row.amount_captured, Some(3000));
    assert_eq!(row.captures[0].idempotency_key.as_deref(), Some("pa-2"));
    // THEN refunds are bounded by what was captured
    let refunds = format!("/charges/{pre_auth}/refunds");
    let too_much = post(&model, &refunds, "amount=3001", None, T0);
    assert_eq!(code(&too_much), "failed_refund");
    assert_eq!(post(&model, &refunds, "amount=3000", None, T0).status, 200);
}

#[test]
fn a_reverse_voids_an_authorization_under_a_key_and_nothing_else() {
    let model = model();
    let id = authorized(&model, MANUAL, T0);
    let path = format!("/charges/{id}/reverse");
    // WHEN it is reversed under a key
    let reversed = post(&model, &path, "", Some("rev-1"), T0 + HOUR_MS);
    let object = json(&reversed);
    // THEN reversed, with charge.reverse; nothing is capturable any more
    assert_eq!(reversed.status, 200);
    assert_eq!(object["status"], "reversed");
    assert_eq!(object["reversed"], true);
    assert_eq!(object["expired"], false);
    assert_eq!(
        (object["capturable"].clone(), object["paid"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(only_event(&reversed.events, "charge.reverse"), object);
    let row = model.charges().pop().expect("a charge");
    assert_eq!(row.outcome, "canceled");
    assert_eq!(
        row.cancels,
        vec![crate::model::FakeCancel {
            idempotency_key: Some("rev-1".into()),
            cancellation_reason: None
        }]
    );
    // AND a replay is the same answer; other parameters under the key are 400 bad_request
    let replay = post(&model, &path, "", Some("rev-1"), T0 + 2 * HOUR_MS);
    assert!(replay.replayed);
    assert_eq!(replay.body, reversed.body);
    let other = post(&model, &path, "reason=x", Some("rev-1"), T0);
    assert_eq!((other.status, code(&other)), (400, json!("bad_request")));
    // AND reverse has no parameters: one is refused before the key, storing nothing
    let param = post(&model, &path, "reason=x", Some("rev-2"), T0);
    assert_eq!(code(&param), "bad_request");
    // AND a second reverse is failed_reverse, a capture failed_capture
    let again = post(&model, &path, "", Some("rev-2"), T0);
    assert_eq!((again.status, code(&again)), (400, json!("failed_reverse")));
    let capture = post(
        &model,
        &format!("/charges/{id}/capture"),
        "",
        Some("cap"),
        T0,
    );
    assert_eq!(
        (capture.status, code(&capture)),
        (400, json!("failed_capture"))
    );
    // AND an automatic capture, a pending 3-D Secure charge and an unknown charge refuse too
    let paid = paid(&model, "pm_card_visa", "p2", T0);
    let pending = pending_three_ds(&model, "&capture=false");
    for id in [paid.as_str(), pending.as_str()] {
        let answer = post(&model, &format!("/charges/{id}/reverse"), "", None, T0);
        assert_eq!(
            (answer.status, code(&answer)),
            (400, json!("failed_reverse")),
            "{id}"
        );
        let answer = post(&model, &format!("/charges/{id}/capture"), "", None, T0);
        assert_eq!(
            (answer.status, code(&answer)),
            (400, json!("failed_capture")),
            "{id}"
        );
    }
    for route in ["reverse", "capture"] {
        let answer = post(
            &model,
            &format!("/charges/chrg_test_x/{route}"),
            "",
            None,
            T0,
        );
        assert_eq!(
            (answer.status, code(&answer)),
            (404, json!("not_found")),
            "{route}"
        );
    }
}

#[test]
fn an_authorization_not_captured_in_time_expires_reversed_with_charge_expire() {
    let model = model();
    let id = authorized(&model, MANUAL, T0);
    let lapse_ms = T0 + 7 * 24 * HOUR_MS;
    // WHEN just before the lapse nothing has happened
    assert!(model.tick(lapse_ms - 1).is_empty());
    assert_eq!(model.next_transition_ms(), Some(lapse_ms));
    // THEN at the lapse: reversed and expired, with charge.expire
    let data = only_event(&model.tick(lapse_ms), "charge.expire");
    assert_eq!(data["status"], "reversed");
    assert_eq!(
        (data["reversed"].clone(), data["expired"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(data["capturable"], false);
    let row = model.charges().pop().expect("a charge");
    assert_eq!(row.outcome, "canceled");
    assert_eq!(
        row.cancels,
        vec![crate::model::FakeCancel {
            idempotency_key: None,
            cancellation_reason: Some("automatic".into())
        }]
    );
    // AND a late capture is expired_charge, a late reverse failed_reverse
    let capture = post(
        &model,
        &format!("/charges/{id}/capture"),
        "",
        Some("late"),
        lapse_ms,
    );
    assert_eq!(
        (capture.status, code(&capture)),
        (400, json!("expired_charge"))
    );
    let reverse = post(
        &model,
        &format!("/charges/{id}/reverse"),
        "",
        None,
        lapse_ms,
    );
    assert_eq!(code(&reverse), "failed_reverse");
}

#[test]
fn capture_and_reverse_keys_in_flight_are_409_and_can_be_ignored() {
    let model = model();
    let id = authorized(&model, MANUAL, T0);
    for route in ["capture", "reverse"] {
        assert!(model.begin_in_flight("busy"));
        let busy = post(
            &model,
            &format!("/charges/{id}/{route}"),
            "",
            Some("busy"),
            T0,
        );
        assert_eq!(
            (busy.status, code(&busy)),
            (409, json!("conflict")),
            "{route}"
        );
        assert!(model.end_in_flight("busy"));
    }
    assert_eq!(model.charges()[0].outcome, "authorized");
    // GIVEN keys are ignored, a re-sent capture is a second capture: failed_capture, one capture
    let ignoring = model_with(ModelConfig {
        omise_honours_idempotency_key: false,
        ..config()
    });
    let id = authorized(&ignoring, MANUAL, T0);
    let path = format!("/charges/{id}/capture");
    let first = post(&ignoring, &path, "", Some("k"), T0);
    assert_eq!(json(&first)["status"], "successful");
    let again = post(&ignoring, &path, "", Some("k"), T0);
    assert!(!again.replayed);
    assert_eq!(code(&again), "failed_capture");
    let row = ignoring.charges().pop().expect("a charge");
    assert_eq!(row.captures.len(), 1);
    assert_eq!(row.captures[0].idempotency_key.as_deref(), Some("k"));
}

#[test]
fn a_processing_authorization_completes_authorized() {
    let model = model();
    let body = "amount=3000&currency=jpy&card=pm_fake_processing&capture=false";
    let answer = post(&model, "/charges", body, None, T0);
    assert_eq!(json(&answer)["authorized"], false);
    let events = model.tick(T0 + 5 * 60 * 1000);
    let data = only_event(&events, "charge.complete");
    assert_eq!(
        (data["status"].clone(), data["authorized"].clone()),
        (json!("pending"), json!(true))
    );
    assert_eq!(data["capturable"], true);
}
