//! The Stripe face's rules, each tested through the model as the server and the simulation
//! call it.
//!
//! Customer actions (3-D Secure), manual capture and cancellation of authorizations are in
//! `actions`.

mod actions;

use std::time::Duration;

use serde_json::{json, Value};

use super::{json, kinds, model_with, HOUR_MS, T0};
use crate::ledger::millis;
use crate::model::{Delivery, FakeModel, ModelConfig, ModelEvent, WireAnswer, WireRequest};

const HOUR_S: u64 = 60 * 60;
const INTENTS: &str = "/v1/payment_intents";

fn model() -> FakeModel {
    model_with(ModelConfig::default())
}

fn bearer() -> String {
    format!("Bearer {}", crate::provider::DEFAULT_API_KEY)
}

fn post(model: &FakeModel, path: &str, body: &str, key: Option<&str>, now_ms: i64) -> WireAnswer {
    let authorization = bearer();
    model.handle(
        &WireRequest {
            method: "POST",
            path,
            query: None,
            authorization: Some(&authorization),
            idempotency_key: key,
            prefer: None,
            body: body.as_bytes(),
        },
        now_ms,
    )
}

fn get(model: &FakeModel, path: &str, query: Option<&str>, now_ms: i64) -> WireAnswer {
    let authorization = bearer();
    model.handle(
        &WireRequest {
            method: "GET",
            path,
            query,
            authorization: Some(&authorization),
            idempotency_key: None,
            prefer: None,
            body: b"",
        },
        now_ms,
    )
}

/// The confirmed create request payonce sends.
fn charge(token: &str, payment_id: &str) -> String {
    format!(
        "amount=3000&currency=jpy&payment_method={token}&confirm=true\
         &error_on_requires_action=true&automatic_payment_methods[enabled]=true\
         &automatic_payment_methods[allow_redirects]=never&metadata[payment_id]={payment_id}"
    )
}

/// A create request that only fences (no confirm-only parameters, which Stripe refuses).
fn fence(token: &str, payment_id: &str) -> String {
    format!(
        "amount=3000&currency=jpy&payment_method={token}&confirm=false\
         &metadata[payment_id]={payment_id}"
    )
}

fn error_code(answer: &WireAnswer) -> Value {
    json(answer)["error"]["code"].clone()
}

fn search_query(payment_id: &str) -> String {
    format!("query=metadata%5B%27payment_id%27%5D%3A%27{payment_id}%27")
}

fn search_ids(model: &FakeModel, payment_id: &str, now_ms: i64) -> Vec<String> {
    let query = format!("{}&limit=100", search_query(payment_id));
    let answer = get(model, "/v1/payment_intents/search", Some(&query), now_ms);
    assert_eq!(answer.status, 200, "{}", answer.body);
    json(&answer)["data"]
        .as_array()
        .map(|data| {
            data.iter()
                .filter_map(|pi| pi["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

// Rule 1: idempotency ("Idempotent requests").

#[test]
fn idempotency_replays_the_stored_answer_for_the_same_endpoint_and_parameters() {
    // GIVEN an approval, a decline and an unknown token, each made under its own key
    let model = model();
    for (token, key, status) in [
        ("pm_card_visa", "k-ok", 200),
        ("pm_card_visa_chargeDeclined", "k-declined", 402),
        ("pm_card_nope", "k-unknown", 400),
    ] {
        let first = post(&model, INTENTS, &charge(token, "pay_1"), Some(key), T0);
        assert_eq!((first.status, first.replayed), (status, false), "{token}");
        // WHEN the same parameters come again, in another order and encoding
        let body = charge(token, "pay_1");
        let reordered: Vec<&str> = body.split('&').rev().collect();
        let reordered = reordered.join("&").replace("metadata[", "metadata%5B");
        let again = post(&model, INTENTS, &reordered, Some(key), T0 + HOUR_MS);
        // THEN the stored answer comes back byte for byte, flagged, at once, with no events
        assert_eq!(again.status, first.status, "{token}");
        assert_eq!(again.body, first.body, "{token}");
        assert!(again.replayed);
        assert_eq!(again.delivery, Delivery::Now);
        assert!(again.events.is_empty());
    }
    // AND only the approval and the decline created a PaymentIntent, once each
    let charges = model.charges();
    assert_eq!(charges.len(), 2);
    assert_eq!(charges[0].idempotency_key.as_deref(), Some("k-ok"));
}

#[test]
fn idempotency_key_reused_with_other_parameters_or_on_another_endpoint_is_an_idempotency_error() {
    // GIVEN a charge made under key k
    let model = model();
    let first = post(
        &model,
        INTENTS,
        &charge("pm_card_visa", "pay_1"),
        Some("k"),
        T0,
    );
    let id = json(&first)["id"].as_str().unwrap_or_default().to_owned();
    // WHEN k comes back with other parameters, or on the cancel endpoint
    let other_params = post(
        &model,
        INTENTS,
        &charge("pm_card_visa", "pay_2"),
        Some("k"),
        T0,
    );
    let other_endpoint = post(
        &model,
        &format!("/v1/payment_intents/{id}/cancel"),
        "",
        Some("k"),
        T0,
    );
    // THEN both are 400 idempotency_error, not replays, and nothing changed
    for answer in [&other_params, &other_endpoint] {
        assert_eq!(answer.status, 400);
        assert!(!answer.replayed);
        assert_eq!(json(answer)["error"]["type"], "idempotency_error");
        assert!(answer.events.is_empty());
    }
    let charges = model.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].status, "succeeded");
}

#[test]
fn idempotency_key_in_flight_is_409_until_released() {
    // GIVEN a key held by a request that is still running
    let model = model();
    assert!(model.begin_in_flight("k"));
    assert!(!model.begin_in_flight("k"), "one holder at a time");
    // WHEN requests with that key arrive
    for _ in 0..2 {
        let busy = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        );
        // THEN each gets 409 idempotency_key_in_use and the key stays in flight
        assert_eq!(busy.status, 409);
        assert_eq!(json(&busy)["error"]["type"], "invalid_request_error");
        assert_eq!(error_code(&busy), "idempotency_key_in_use");
        assert!(!busy.replayed);
    }
    assert!(model.charges().is_empty());
    // AND once released, the key runs normally
    assert!(model.end_in_flight("k"));
    assert!(!model.end_in_flight("k"));
    let ok = post(
        &model,
        INTENTS,
        &charge("pm_card_visa", "pay_1"),
        Some("k"),
        T0,
    );
    assert_eq!((ok.status, ok.replayed), (200, false));
    // AND a key with a stored answer cannot be taken in flight
    assert!(!model.begin_in_flight("k"));
}

#[test]
fn idempotency_keys_are_kept_at_least_24h_and_forgotten_at_random_by_48h() {
    // GIVEN 100 keys stored at T0 (two models with one seed: each check below retries, and
    // a retry of a forgotten key stores it anew)
    let keys: Vec<String> = (0..100).map(|i| format!("k-{i}")).collect();
    let stored = || {
        let model = model();
        for (i, key) in keys.iter().enumerate() {
            let body = charge("pm_card_visa", &format!("pay_{i}"));
            assert_eq!(post(&model, INTENTS, &body, Some(key), T0).status, 200);
        }
        model
    };
    let replayed_at = |model: &FakeModel, now_ms: i64| -> usize {
        keys.iter()
            .enumerate()
            .filter(|(i, key)| {
                let body = charge("pm_card_visa", &format!("pay_{i}"));
                post(model, INTENTS, &body, Some(key), now_ms).replayed
            })
            .count()
    };
    let (first, second) = (stored(), stored());
    // THEN every key is remembered until just before 24 h
    assert_eq!(replayed_at(&first, T0 + 24 * HOUR_MS - 1), 100);
    // AND none is remembered at 48 h
    assert_eq!(replayed_at(&first, T0 + 48 * HOUR_MS), 0);
    assert_eq!(first.charges().len(), 200, "each forgotten key ran again");
    // AND at 36 h some are forgotten and some are not: nobody can count on either
    let at_36h = replayed_at(&second, T0 + 36 * HOUR_MS);
    assert!(
        0 < at_36h && at_36h < 100,
        "{at_36h} of 100 remembered at 36 h"
    );
}

#[test]
fn idempotency_a_500_before_the_charge_stores_nothing_under_the_key() {
    // GIVEN a request that fails with 500 before charging
    let model = model();
    let body = charge("pm_fake_error_before_charge", "pay_1");
    for _ in 0..2 {
        let failed = post(&model, INTENTS, &body, Some("k"), T0);
        // THEN it is never replayed and creates nothing
        assert_eq!((failed.status, failed.replayed), (500, false));
        assert_eq!(json(&failed)["error"]["type"], "api_error");
        assert!(failed.events.is_empty());
    }
    assert!(model.charges().is_empty());
    // AND the key is free even for other parameters
    let ok = post(
        &model,
        INTENTS,
        &charge("pm_card_visa", "pay_1"),
        Some("k"),
        T0,
    );
    assert_eq!((ok.status, ok.replayed), (200, false));
}

// Rule 2: validation errors come before the key and store nothing.

#[test]
fn validation_errors_are_answered_before_the_key_and_store_nothing() {
    let model = model();
    let base = "currency=jpy&payment_method=pm_card_visa";
    let cases = [
        (format!("{base}&confirm=true"), json!("parameter_missing")),
        (
            format!("amount=abc&{base}"),
            json!("parameter_invalid_integer"),
        ),
        (
            "amount=3000&currency=xyz&payment_method=pm_card_visa".to_owned(),
            json!("parameter_invalid"),
        ),
        (format!("amount=49&{base}"), json!("amount_too_small")),
        (
            format!("amount=100000000&{base}"),
            json!("amount_too_large"),
        ),
        (
            format!("amount=3000&{base}&colour=red"),
            json!("parameter_unknown"),
        ),
        // Confirm-only parameter without confirm: Stripe documents no code for it.
        (format!("amount=3000&{base}&off_session=true"), Value::Null),
    ];
    for (body, code) in &cases {
        // GIVEN the key is held by a running request
        assert!(model.begin_in_flight("held"));
        // WHEN an invalid request comes with it
        let refused = post(&model, INTENTS, body, Some("held"), T0);
        // THEN the idempotency layer, in front of the endpoint, answers 409 first
        assert_eq!(refused.status, 409, "{body}");
        assert!(refused.events.is_empty());
        assert!(model.end_in_flight("held"), "still held, untouched");
        // AND under a free key it is refused for its parameters and stores nothing: a later
        // valid request with the key runs
        let key = format!("k-{body}");
        let fresh = post(&model, INTENTS, body, Some(&key), T0);
        assert_eq!(fresh.status, 400, "{body}");
        assert_eq!(json(&fresh)["error"]["type"], "invalid_request_error");
        assert_eq!(&error_code(&fresh), code, "{body}");
        let ok = post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "p"),
            Some(&key),
            T0,
        );
        assert_eq!((ok.status, ok.replayed), (200, false), "{body}");
    }
    assert_eq!(model.charges().len(), cases.len());
}

// Rule 3: confirm-only parameters.

#[test]
fn confirm_only_parameters_without_confirm_are_refused_naming_the_parameter() {
    let model = model();
    let cases = [
        ("error_on_requires_action=true", "error_on_requires_action"),
        ("error_on_requires_action=false", "error_on_requires_action"),
        ("off_session=true", "off_session"),
        ("return_url=https%3A%2F%2Fshop.example%2Fdone", "return_url"),
        ("mandate=mandate_1", "mandate"),
        (
            "mandate_data[customer_acceptance][type]=online",
            "mandate_data",
        ),
    ];
    let base = "amount=3000&currency=jpy&payment_method=pm_card_visa";
    for (extra, param) in cases {
        // WHEN the parameter comes with confirm=false, or with no confirm at all
        for confirm in ["&confirm=false", ""] {
            let refused = post(
                &model,
                INTENTS,
                &format!("{base}{confirm}&{extra}"),
                None,
                T0,
            );
            // THEN 400 invalid_request_error naming it
            assert_eq!(refused.status, 400, "{extra}{confirm}");
            assert_eq!(json(&refused)["error"]["type"], "invalid_request_error");
            assert_eq!(json(&refused)["error"]["param"], param);
        }
        // AND with confirm=true it is accepted
        let ok = post(
            &model,
            INTENTS,
            &format!("{base}&confirm=true&{extra}"),
            None,
            T0,
        );
        assert_eq!(ok.status, 200, "{extra}: {}", ok.body);
    }
    assert_eq!(model.charges().len(), cases.len());
}

// Rule 4: charge limits per currency.

#[test]
fn a_raised_minimum_refuses_what_the_table_accepts_and_stores_nothing() {
    // Stripe, "Minimum and maximum charge amounts": a charge must convert to at least the
    // settlement currency's minimum, so the effective minimum moves with exchange rates.
    let model = FakeModel::new(
        ModelConfig {
            minimum_overrides: [("thb".to_owned(), 2_000)].into(),
            ..ModelConfig::default()
        },
        7,
    );
    let body = "amount=1500&currency=thb&payment_method=pm_card_visa&confirm=true";
    let request = WireRequest {
        method: "POST",
        path: "/v1/payment_intents",
        query: None,
        authorization: Some("Bearer sk_test_payonce_fake"),
        idempotency_key: Some("k-raised"),
        prefer: None,
        body: body.as_bytes(),
    };
    let refused = model.handle(&request, 1_000);
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains("amount_too_small"),
        "{}",
        refused.body
    );
    assert!(model.charges().is_empty());
    let ok = "amount=2000&currency=thb&payment_method=pm_card_visa&confirm=true";
    let accepted = model.handle(
        &WireRequest {
            body: ok.as_bytes(),
            ..request
        },
        2_000,
    );
    assert_eq!(
        accepted.status, 200,
        "nothing was stored under the key: {}",
        accepted.body
    );
}

#[test]
fn amounts_below_the_currency_minimum_are_amount_too_small() {
    let model = model();
    for (currency, minimum) in [
        ("usd", 50),
        ("eur", 50),
        ("gbp", 30),
        ("sgd", 50),
        ("thb", 1000),
        ("jpy", 50),
        ("hkd", 400),
    ] {
        let body = |amount: i64| {
            format!("amount={amount}&currency={currency}&payment_method=pm_card_visa&confirm=true")
        };
        let small = post(&model, INTENTS, &body(minimum - 1), None, T0);
        assert_eq!(small.status, 400, "{currency}");
        assert_eq!(error_code(&small), "amount_too_small");
        assert_eq!(json(&small)["error"]["param"], "amount");
        assert_eq!(post(&model, INTENTS, &body(minimum), None, T0).status, 200);
    }
    assert_eq!(model.charges().len(), 7);
}

#[test]
fn amounts_above_eight_digits_are_amount_too_large() {
    let model = model();
    let body = |amount: i64| {
        format!("amount={amount}&currency=usd&payment_method=pm_card_visa&confirm=true")
    };
    let large = post(&model, INTENTS, &body(100_000_000), None, T0);
    assert_eq!(large.status, 400);
    assert_eq!(error_code(&large), "amount_too_large");
    assert_eq!(json(&large)["error"]["param"], "amount");
    assert_eq!(
        post(&model, INTENTS, &body(99_999_999), None, T0).status,
        200
    );
    assert_eq!(model.charges().len(), 1);
}

#[test]
fn currencies_without_a_documented_minimum_are_refused() {
    let model = model();
    for currency in ["xyz", "krw", "us"] {
        let body = format!("amount=5000&currency={currency}&payment_method=pm_card_visa");
        let refused = post(&model, INTENTS, &body, None, T0);
        assert_eq!(refused.status, 400, "{currency}");
        assert_eq!(json(&refused)["error"]["param"], "currency");
    }
    // Case does not matter; the answer is lowercase.
    let upper = post(
        &model,
        INTENTS,
        "amount=5000&currency=USD&payment_method=pm_card_visa",
        None,
        T0,
    );
    assert_eq!(json(&upper)["currency"], "usd");
}

// Rule 5: behaviour by token.

#[test]
fn test_card_tokens_approve_or_decline_like_stripes() {
    let model = model();
    for token in ["pm_card_visa", "pm_card_mastercard", "pm_card_refundFail"] {
        let ok = post(&model, INTENTS, &charge(token, "pay_ok"), None, T0);
        assert_eq!(ok.status, 200, "{token}");
        assert_eq!(json(&ok)["status"], "succeeded");
        assert_eq!(json(&ok)["amount_received"], 3000);
        assert!(json(&ok)["latest_charge"]
            .as_str()
            .is_some_and(|c| c.starts_with("ch_")));
        assert_eq!(kinds(&ok.events), ["payment_intent.succeeded"]);
    }
    for (token, decline_code) in [
        ("pm_card_visa_chargeDeclined", "generic_decline"),
        (
            "pm_card_chargeDeclinedInsufficientFunds",
            "insufficient_funds",
        ),
    ] {
        let declined = post(&model, INTENTS, &charge(token, "pay_no"), None, T0);
        assert_eq!(declined.status, 402);
        let error = &json(&declined)["error"];
        assert_eq!(error["type"], "card_error");
        assert_eq!(error["decline_code"], decline_code);
        assert_eq!(error["payment_intent"]["status"], "requires_payment_method");
        assert_eq!(kinds(&declined.events), ["payment_intent.payment_failed"]);
    }
    let outcomes: Vec<String> = model.charges().into_iter().map(|c| c.outcome).collect();
    assert_eq!(
        outcomes,
        ["succeeded", "succeeded", "succeeded", "failed", "failed"]
    );
}

#[test]
fn fault_tokens_tell_the_server_how_to_misdeliver() {
    let config = ModelConfig {
        slow_delay: Duration::from_millis(1234),
        ..ModelConfig::default()
    };
    let model = model_with(config);
    let lost = post(
        &model,
        INTENTS,
        &charge("pm_fake_lost_response", "p"),
        Some("k1"),
        T0,
    );
    assert_eq!((lost.status, lost.delivery), (200, Delivery::Sever));
    assert_eq!(kinds(&lost.events), ["payment_intent.succeeded"]);
    let slow = post(
        &model,
        INTENTS,
        &charge("pm_fake_slow", "p"),
        Some("k2"),
        T0,
    );
    assert_eq!(slow.status, 200);
    assert_eq!(slow.delivery, Delivery::After(Duration::from_millis(1234)));
    // Both charged and stored before the answer went (or did not go) out.
    for key in ["k1", "k2"] {
        let token = if key == "k1" {
            "pm_fake_lost_response"
        } else {
            "pm_fake_slow"
        };
        let retry = post(&model, INTENTS, &charge(token, "p"), Some(key), T0 + 1);
        assert_eq!((retry.replayed, retry.delivery), (true, Delivery::Now));
    }
    assert_eq!(model.charges().len(), 2);
}

#[test]
fn processing_token_succeeds_once_processing_for_has_passed() {
    // GIVEN a pm_fake_processing charge
    let model = model();
    let created = post(
        &model,
        INTENTS,
        &charge("pm_fake_processing", "pay_p"),
        Some("k"),
        T0,
    );
    assert_eq!(created.status, 200);
    assert_eq!(json(&created)["status"], "processing");
    assert_eq!(kinds(&created.events), ["payment_intent.processing"]);
    assert_eq!(model.charges()[0].outcome, "pending");
    let due = T0 + millis(ModelConfig::default().processing_for);
    assert_eq!(model.next_transition_ms(), Some(due));
    // WHEN time reaches processing_for
    assert!(model.tick(due - 1).is_empty());
    let events = model.tick(due);
    // THEN it has succeeded, with one payment_intent.succeeded event dated then
    assert_eq!(kinds(&events), ["payment_intent.succeeded"]);
    let event: Value = serde_json::from_str(&events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["status"], "succeeded");
    assert_eq!(event["created"], due / 1000);
    assert_eq!(event["request"]["idempotency_key"], Value::Null);
    assert_eq!(model.charges()[0].status, "succeeded");
    assert_eq!(model.charges()[0].outcome, "succeeded");
    assert_eq!(model.next_transition_ms(), None);
    assert!(model.tick(due + HOUR_MS).is_empty());
}

#[test]
fn requires_action_token_fails_with_authentication_required_after_requires_action_for() {
    // GIVEN a pm_fake_requires_action charge
    let model = model();
    let created = post(
        &model,
        INTENTS,
        &charge("pm_fake_requires_action", "pay_a"),
        None,
        T0,
    );
    assert_eq!(created.status, 200);
    assert_eq!(json(&created)["status"], "requires_action");
    assert_eq!(json(&created)["next_action"]["type"], "use_stripe_sdk");
    assert_eq!(kinds(&created.events), ["payment_intent.requires_action"]);
    let id = json(&created)["id"].as_str().unwrap_or_default().to_owned();
    // WHEN requires_action_for has passed and someone retrieves it (no tick in between)
    let due = T0 + millis(ModelConfig::default().requires_action_for);
    let retrieved = get(&model, &format!("{INTENTS}/{id}"), None, due);
    // THEN it is back in requires_payment_method with authentication_required
    let pi = json(&retrieved);
    assert_eq!(pi["status"], "requires_payment_method");
    assert_eq!(pi["last_payment_error"]["code"], "authentication_required");
    assert_eq!(pi["next_action"], Value::Null);
    // AND the failure's event came with the first answer given after it happened, once
    assert_eq!(kinds(&retrieved.events), ["payment_intent.payment_failed"]);
    assert!(model.tick(due).is_empty());
    assert_eq!(model.charges()[0].outcome, "failed");
}

#[test]
fn unknown_token_is_resource_missing_confirmed_or_not() {
    let model = model();
    for body in [charge("pm_card_nope", "p"), fence("pm_card_nope", "p")] {
        let refused = post(&model, INTENTS, &body, None, T0);
        assert_eq!(refused.status, 400);
        assert_eq!(
            json(&refused),
            json!({"error": {
                "type": "invalid_request_error",
                "code": "resource_missing",
                "param": "payment_method",
                "message": "No such PaymentMethod: 'pm_card_nope'",
            }})
        );
    }
    assert!(model.charges().is_empty());
}

// Rule 6: confirm=false fences.

#[test]
fn unconfirmed_create_waits_in_requires_confirmation_without_events() {
    let model = model();
    // Even a token that would fail is fine: nothing is attempted.
    let fenced = post(
        &model,
        INTENTS,
        &fence("pm_fake_error_before_charge", "pay_f"),
        Some("k"),
        T0,
    );
    assert_eq!(fenced.status, 200, "{}", fenced.body);
    assert_eq!(json(&fenced)["status"], "requires_confirmation");
    assert_eq!(json(&fenced)["latest_charge"], Value::Null);
    assert!(fenced.events.is_empty());
    assert_eq!(model.charges()[0].outcome, "pending");
    assert_eq!(model.next_transition_ms(), None);
}

// Rule 7: cancel.

#[test]
fn cancel_works_from_every_non_final_status_and_emits_canceled() {
    let model = model();
    let ids: Vec<String> = [
        fence("pm_card_visa", "p1"),
        charge("pm_card_visa_chargeDeclined", "p2"),
        charge("pm_fake_requires_action", "p3"),
        charge("pm_fake_processing", "p4"),
    ]
    .iter()
    .map(|body| {
        let answer = post(&model, INTENTS, body, None, T0);
        let pi = json(&answer);
        let pi = if pi["error"].is_object() {
            pi["error"]["payment_intent"].clone()
        } else {
            pi
        };
        pi["id"].as_str().unwrap_or_default().to_owned()
    })
    .collect();
    for id in &ids {
        let canceled = post(
            &model,
            &format!("{INTENTS}/{id}/cancel"),
            "cancellation_reason=abandoned",
            Some(&format!("cancel-{id}")),
            T0 + 1000,
        );
        assert_eq!(canceled.status, 200, "{}", canceled.body);
        assert_eq!(json(&canceled)["status"], "canceled");
        assert_eq!(json(&canceled)["cancellation_reason"], "abandoned");
        assert_eq!(kinds(&canceled.events), ["payment_intent.canceled"]);
        let event: Value = serde_json::from_str(&canceled.events[0].body).unwrap_or(Value::Null);
        assert_eq!(event["request"]["idempotency_key"], format!("cancel-{id}"));
    }
    // A cancelled processing or requires_action intent no longer moves by itself.
    assert!(model.tick(T0 + 10 * HOUR_MS).is_empty());
    assert!(model.charges().iter().all(|c| c.outcome == "canceled"));
}

#[test]
fn cancel_of_a_succeeded_or_canceled_intent_is_unexpected_state() {
    let model = model();
    let ok = post(&model, INTENTS, &charge("pm_card_visa", "p"), None, T0);
    let succeeded = json(&ok)["id"].as_str().unwrap_or_default().to_owned();
    let fenced = post(&model, INTENTS, &fence("pm_card_visa", "q"), None, T0);
    let canceled = json(&fenced)["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        post(
            &model,
            &format!("{INTENTS}/{canceled}/cancel"),
            "",
            None,
            T0
        )
        .status,
        200
    );
    for id in [&succeeded, &canceled] {
        let refused = post(&model, &format!("{INTENTS}/{id}/cancel"), "", None, T0);
        assert_eq!(refused.status, 400);
        assert_eq!(error_code(&refused), "payment_intent_unexpected_state");
        assert_eq!(json(&refused)["error"]["payment_intent"]["id"], id.as_str());
        assert!(refused.events.is_empty());
    }
    let missing = post(
        &model,
        &format!("{INTENTS}/pi_missing/cancel"),
        "",
        None,
        T0,
    );
    assert_eq!(missing.status, 404);
    assert_eq!(model.charges()[0].status, "succeeded");
}

// Rule 8: search is not read-after-write.

#[test]
fn search_sees_an_intent_only_after_its_lag_but_retrieve_sees_it_at_once() {
    // GIVEN a search lag of up to an hour
    let model = model_with(ModelConfig {
        search_lag_max: Duration::from_secs(60 * 60),
        ..ModelConfig::default()
    });
    let created: Vec<String> = (0..20)
        .map(|_| {
            let answer = post(&model, INTENTS, &charge("pm_card_visa", "pay_s"), None, T0);
            json(&answer)["id"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    // THEN retrieve is read-after-write
    for id in &created {
        assert_eq!(
            get(&model, &format!("{INTENTS}/{id}"), None, T0).status,
            200
        );
    }
    // AND search shows them gradually, all of them by the maximum lag, in creation order
    let mid = search_ids(&model, "pay_s", T0 + 30 * 60 * 1000).len();
    assert!(0 < mid && mid < 20, "{mid} of 20 visible half-way");
    let query = format!("{}&limit=100", search_query("pay_s"));
    let all = get(
        &model,
        "/v1/payment_intents/search",
        Some(&query),
        T0 + HOUR_MS,
    );
    let ids: Vec<String> = json(&all)["data"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|pi| pi["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(ids, created);
}

#[test]
fn search_lags_behind_updates_too() {
    // GIVEN 20 intents that search shows as processing, up to a minute behind
    let model = model_with(ModelConfig {
        search_lag_max: Duration::from_secs(60),
        processing_for: Duration::from_secs(120),
        ..ModelConfig::default()
    });
    for _ in 0..20 {
        post(
            &model,
            INTENTS,
            &charge("pm_fake_processing", "pay_u"),
            None,
            T0,
        );
    }
    let statuses_in_search = |now_ms: i64| -> Vec<Value> {
        let query = format!("{}&limit=100", search_query("pay_u"));
        let answer = get(&model, "/v1/payment_intents/search", Some(&query), now_ms);
        json(&answer)["data"]
            .as_array()
            .map(|data| data.iter().map(|pi| pi["status"].clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        statuses_in_search(T0 + 60_000),
        vec![json!("processing"); 20]
    );
    // WHEN they all succeed at T0 + 120 s
    let settled = T0 + 120_000;
    assert!(model.charges().iter().all(|c| c.status == "processing"));
    let half_way = statuses_in_search(settled + 30_000);
    assert!(model.charges().iter().all(|c| c.status == "succeeded"));
    // THEN half a minute later search still shows some of them processing
    let stale = half_way.iter().filter(|s| *s == "processing").count();
    assert!(
        0 < stale && stale < 20,
        "{stale} of 20 still processing in search"
    );
    // AND once the maximum lag has passed, all of them succeeded, and never flip back
    assert_eq!(
        statuses_in_search(settled + 60_000),
        vec![json!("succeeded"); 20]
    );
    assert_eq!(
        statuses_in_search(settled + HOUR_MS),
        vec![json!("succeeded"); 20]
    );
}

#[test]
fn search_pages_with_limit_and_cursor() {
    let model = model();
    for _ in 0..3 {
        post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_page"),
            None,
            T0,
        );
    }
    let query = format!("{}&limit=2", search_query("pay_page"));
    let first = json(&get(&model, "/v1/payment_intents/search", Some(&query), T0));
    assert_eq!(first["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(first["has_more"], true);
    let cursor = first["next_page"].as_str().unwrap_or_default();
    let query = format!("{query}&page={cursor}");
    let second = json(&get(&model, "/v1/payment_intents/search", Some(&query), T0));
    assert_eq!(second["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        (&second["has_more"], &second["next_page"]),
        (&json!(false), &Value::Null)
    );
    let bad = get(
        &model,
        "/v1/payment_intents/search",
        Some("query=status%3A%27succeeded%27"),
        T0,
    );
    assert_eq!(bad.status, 400);
    let missing = get(&model, "/v1/payment_intents/search", None, T0);
    assert_eq!(error_code(&missing), "parameter_missing");
}

// Rule 9: authentication first.

#[test]
fn wrong_or_missing_api_key_is_401_before_anything_else_and_counted() {
    let model = model();
    assert!(model.begin_in_flight("k"));
    for authorization in [
        None,
        Some("Bearer sk_test_wrong"),
        Some("sk_test_payonce_fake"),
    ] {
        for (method, path, body) in [
            ("POST", INTENTS, "amount=1"),
            ("GET", "/v1/payment_intents/pi_x", ""),
            ("POST", "/v1/nowhere", ""),
        ] {
            let answer = model.handle(
                &WireRequest {
                    method,
                    path,
                    query: None,
                    authorization,
                    idempotency_key: Some("k"),
                    prefer: None,
                    body: body.as_bytes(),
                },
                T0,
            );
            // THEN 401 wins over 409 in flight, 400 validation and 404 unknown route
            assert_eq!(answer.status, 401, "{authorization:?} {path}");
            assert_eq!(
                json(&answer),
                json!({"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}})
            );
        }
    }
    assert_eq!(model.requests_seen(), 9);
    assert!(model.charges().is_empty());
    // Outside /v1 nothing is counted or authenticated.
    let answer = model.handle(
        &WireRequest {
            method: "GET",
            path: "/elsewhere",
            query: None,
            authorization: None,
            idempotency_key: None,
            prefer: None,
            body: b"",
        },
        T0,
    );
    assert_eq!(answer.status, 404);
    assert_eq!(model.requests_seen(), 9);
}

// Rule 10: refunds.

const REFUNDS: &str = "/v1/refunds";

/// A succeeded PaymentIntent of 3000 jpy charged with `token`; returns its id.
fn paid(model: &FakeModel, token: &str, payment_id: &str) -> String {
    let answer = post(model, INTENTS, &charge(token, payment_id), None, T0);
    assert_eq!(answer.status, 200, "{}", answer.body);
    json(&answer)["id"].as_str().unwrap_or_default().to_owned()
}

/// The refund request payonce sends, plus `extra` (e.g. `&amount=500`).
fn refund_body(payment_intent: &str, extra: &str) -> String {
    format!(
        "payment_intent={payment_intent}&reason=requested_by_customer\
         &metadata[payment_id]=pay_1&metadata[refund_id]=ref_1{extra}"
    )
}

fn event_json(event: &ModelEvent) -> Value {
    serde_json::from_str(&event.body).unwrap_or(Value::Null)
}

#[test]
fn refunds_honour_idempotency_keys_like_creates() {
    // Stripe, "Idempotent requests" and "Create a refund": the first answer under a key is
    // replayed; other parameters or another endpoint → 400 idempotency_error; a key in
    // flight → 409.
    // GIVEN a refund made under key k
    let model = model();
    let pi = paid(&model, "pm_card_visa", "pay_1");
    let body = refund_body(&pi, "&amount=1000");
    let first = post(&model, REFUNDS, &body, Some("k"), T0 + 1000);
    assert_eq!(
        (first.status, first.replayed),
        (200, false),
        "{}",
        first.body
    );
    assert_eq!(kinds(&first.events), ["refund.created", "charge.refunded"]);
    let created = event_json(&first.events[0]);
    assert_eq!(created["api_version"], "2024-10-28.acacia");
    assert_eq!(created["request"]["idempotency_key"], "k");
    assert_eq!(created["data"]["object"], json(&first));
    // WHEN the same parameters come again, in another order
    let reordered: Vec<&str> = body.split('&').rev().collect();
    let again = post(
        &model,
        REFUNDS,
        &reordered.join("&"),
        Some("k"),
        T0 + HOUR_MS,
    );
    // THEN the stored answer comes back byte for byte, with no events, and one refund exists
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body);
    assert!(again.events.is_empty());
    assert_eq!(model.refunds().len(), 1);
    // AND k with another amount, or on the PaymentIntents endpoint, is idempotency_error
    for answer in [
        post(
            &model,
            REFUNDS,
            &refund_body(&pi, "&amount=999"),
            Some("k"),
            T0,
        ),
        post(
            &model,
            INTENTS,
            &charge("pm_card_visa", "pay_1"),
            Some("k"),
            T0,
        ),
    ] {
        assert_eq!(answer.status, 400);
        assert_eq!(json(&answer)["error"]["type"], "idempotency_error");
        assert!(answer.events.is_empty());
    }
    // AND a key held by a running request is 409 idempotency_key_in_use
    assert!(model.begin_in_flight("busy"));
    let busy = post(&model, REFUNDS, &body, Some("busy"), T0);
    assert_eq!(
        (busy.status, error_code(&busy)),
        (409, json!("idempotency_key_in_use"))
    );
    assert!(!model.begin_in_flight("k"), "k has a stored answer");
    assert_eq!(model.refunds().len(), 1);
    assert_eq!(model.refunds()[0].idempotency_key.as_deref(), Some("k"));
}

#[test]
fn refund_validation_errors_are_answered_before_the_key_and_store_nothing() {
    // Stripe, "Idempotent requests": no result is saved when the parameters fail validation;
    // "Create a refund": `reason` is one of three values, `amount` a positive integer.
    let model = model();
    let pi = paid(&model, "pm_card_visa", "pay_1");
    let cases = [
        ("amount=500".to_owned(), "parameter_missing"),
        (refund_body(&pi, "&amount=0"), "parameter_invalid_integer"),
        (refund_body(&pi, "&amount=-5"), "parameter_invalid_integer"),
        (refund_body(&pi, "&amount=ten"), "parameter_invalid_integer"),
        (
            format!("payment_intent={pi}&reason=changed_mind"),
            "parameter_invalid",
        ),
        (
            format!("payment_intent={pi}&charge=ch_1"),
            "parameter_unknown",
        ),
    ];
    for (body, code) in &cases {
        // GIVEN the key is held by a running request
        assert!(model.begin_in_flight("held"));
        // WHEN an invalid refund comes with it
        let refused = post(&model, REFUNDS, body, Some("held"), T0);
        // THEN the idempotency layer, in front of the endpoint, answers 409 first
        assert_eq!(refused.status, 409, "{body}");
        assert!(refused.events.is_empty());
        // AND under a fresh key it is refused for its parameters
        let fresh = post(&model, REFUNDS, body, Some(&format!("fresh-{body}")), T0);
        assert_eq!(fresh.status, 400, "{body}");
        assert_eq!(json(&fresh)["error"]["type"], "invalid_request_error");
        assert_eq!(error_code(&fresh), json!(code), "{body}");
        assert!(model.end_in_flight("held"), "still held, untouched");
        // AND under a free key nothing is stored: a valid refund with the key then runs
        let key = format!("k-{body}");
        assert_eq!(post(&model, REFUNDS, body, Some(&key), T0).status, 400);
        let ok = post(
            &model,
            REFUNDS,
            &refund_body(&pi, "&amount=1"),
            Some(&key),
            T0,
        );
        assert_eq!(
            (ok.status, ok.replayed),
            (200, false),
            "{body}: {}",
            ok.body
        );
    }
    assert_eq!(model.refunds().len(), cases.len());
}

#[test]
fn refunds_of_missing_or_unsucceeded_intents_are_refused_and_create_nothing() {
    // Stripe, "Create a refund" and "Error codes": an unknown PaymentIntent is
    // `resource_missing`; one without a succeeded charge `charge_not_refundable`. Such an
    // answer comes after the endpoint began, so it is stored under the key like any other
    // ("Idempotent requests").
    let model = model_with(ModelConfig {
        processing_for: Duration::from_secs(HOUR_S),
        ..ModelConfig::default()
    });
    let declined = post(
        &model,
        INTENTS,
        &charge("pm_card_visa_chargeDeclined", "p1"),
        None,
        T0,
    );
    let declined = json(&declined)["error"]["payment_intent"]["id"].clone();
    let fenced = post(&model, INTENTS, &fence("pm_card_visa", "p2"), None, T0);
    let processing = post(
        &model,
        INTENTS,
        &charge("pm_fake_processing", "p3"),
        None,
        T0,
    );
    let mut cases = vec![("pi_missing".to_owned(), "resource_missing")];
    for intent in [
        declined,
        json(&fenced)["id"].clone(),
        json(&processing)["id"].clone(),
    ] {
        cases.push((
            intent.as_str().unwrap_or_default().to_owned(),
            "charge_not_refundable",
        ));
    }
    for (pi, code) in &cases {
        let key = format!("k-{pi}");
        let refused = post(&model, REFUNDS, &refund_body(pi, ""), Some(&key), T0);
        assert_eq!(refused.status, 400, "{pi}: {}", refused.body);
        assert_eq!(json(&refused)["error"]["type"], "invalid_request_error");
        assert_eq!(error_code(&refused), json!(code), "{pi}");
        assert!(refused.events.is_empty());
        let replayed = post(&model, REFUNDS, &refund_body(pi, ""), Some(&key), T0 + 1);
        assert_eq!((replayed.replayed, replayed.body), (true, refused.body));
    }
    let missing = post(&model, REFUNDS, &refund_body("pi_missing", ""), None, T0);
    assert_eq!(json(&missing)["error"]["param"], "payment_intent");
    assert!(model.refunds().is_empty());
}

#[test]
fn partial_refunds_add_up_to_the_charge_then_charge_already_refunded() {
    // Stripe, "Create a refund": a charge may be refunded in parts until all of it is; an
    // already refunded charge, or more than is left, is refused. The message of the latter
    // is Stripe's, with `param: amount` and no code ("Error codes" has none for it).
    let model = model();
    let pi = paid(&model, "pm_card_visa", "pay_1");
    let mut refunded = 0;
    for (amount, key) in [(1000, "r1"), (1500, "r2")] {
        let ok = post(
            &model,
            REFUNDS,
            &refund_body(&pi, &format!("&amount={amount}")),
            Some(key),
            T0,
        );
        assert_eq!(ok.status, 200, "{}", ok.body);
        refunded += amount;
        let charge = &event_json(&ok.events[1])["data"]["object"];
        assert_eq!(charge["amount_refunded"], refunded);
        assert_eq!(charge["refunded"], false);
        assert_eq!(charge["payment_intent"], pi.as_str());
    }
    // WHEN more than the 500 left is asked for
    let too_much = post(
        &model,
        REFUNDS,
        &refund_body(&pi, "&amount=600"),
        Some("r3"),
        T0,
    );
    // THEN it is refused in Stripe's words and nothing is refunded
    assert_eq!(
        json(&too_much),
        json!({"error": {
            "type": "invalid_request_error",
            "param": "amount",
            "message": "Refund amount (¥600) is greater than unrefunded amount on charge (¥500)",
        }})
    );
    assert!(too_much.events.is_empty());
    // AND without an amount, the rest is refunded
    let rest = post(&model, REFUNDS, &refund_body(&pi, ""), Some("r4"), T0);
    assert_eq!(json(&rest)["amount"], 500);
    let refund = json(&rest);
    assert_eq!(refund["object"], "refund");
    assert!(refund["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("re_")));
    assert_eq!(refund["status"], "succeeded");
    assert_eq!(refund["currency"], "jpy");
    assert_eq!(refund["payment_intent"], pi.as_str());
    let intent = json(&get(&model, &format!("{INTENTS}/{pi}"), None, T0));
    assert_eq!(refund["charge"], intent["latest_charge"]);
    assert_eq!(refund["reason"], "requested_by_customer");
    assert_eq!(refund["metadata"]["refund_id"], "ref_1");
    assert!(refund.get("failure_reason").is_none());
    let charge = &event_json(&rest.events[1])["data"]["object"];
    assert_eq!(
        (&charge["amount_refunded"], &charge["refunded"]),
        (&json!(3000), &json!(true))
    );
    assert_eq!(charge["refunds"]["data"][0]["id"], refund["id"]);
    assert_eq!(charge["refunds"]["total_count"], 3);
    // AND any further refund, with or without an amount, is charge_already_refunded
    for extra in ["", "&amount=1"] {
        let refused = post(&model, REFUNDS, &refund_body(&pi, extra), None, T0);
        assert_eq!(refused.status, 400);
        assert_eq!(error_code(&refused), "charge_already_refunded");
    }
    let refunds = model.refunds();
    let amounts: Vec<i64> = refunds.iter().map(|r| r.amount).collect();
    assert_eq!(amounts, [1000, 1500, 500]);
    assert!(refunds
        .iter()
        .all(|r| r.outcome == "succeeded" && r.provider == "stripe"));
    assert_eq!(refunds[2].payment_id.as_deref(), Some("pay_1"));
    assert_eq!(refunds[2].refund_id.as_deref(), Some("ref_1"));
    assert_eq!(refunds[2].idempotency_key.as_deref(), Some("r4"));
    let charges = model.charges();
    assert_eq!(
        (
            charges[0].provider.as_str(),
            charges[0].payment_id.as_deref()
        ),
        ("stripe", Some("pay_1"))
    );
}

#[test]
fn pending_refunds_count_against_what_is_left() {
    // Stripe, "The Refund object": `pending` is a refund not final yet; the amount it holds
    // is no longer refundable (Stripe deducts a refund when it is created).
    // GIVEN a pm_fake_refund_pending charge with a pending refund of 2000
    let model = model();
    let pi = paid(&model, "pm_fake_refund_pending", "pay_1");
    let pending = post(&model, REFUNDS, &refund_body(&pi, "&amount=2000"), None, T0);
    assert_eq!(json(&pending)["status"], "pending");
    assert_eq!(kinds(&pending.events), ["refund.created"]);
    assert_eq!(model.refunds()[0].outcome, "pending");
    // WHEN 1001 more is asked for
    let too_much = post(&model, REFUNDS, &refund_body(&pi, "&amount=1001"), None, T0);
    // THEN only the 1000 not held by the pending refund is left
    assert_eq!(too_much.status, 400);
    assert_eq!(
        json(&too_much)["error"]["message"],
        "Refund amount (¥1001) is greater than unrefunded amount on charge (¥1000)"
    );
    let rest = post(&model, REFUNDS, &refund_body(&pi, ""), None, T0);
    assert_eq!(
        (json(&rest)["amount"].clone(), json(&rest)["status"].clone()),
        (json!(1000), json!("pending"))
    );
    let none_left = post(&model, REFUNDS, &refund_body(&pi, "&amount=1"), None, T0);
    assert_eq!(error_code(&none_left), "charge_already_refunded");
    assert_eq!(model.refunds().len(), 2);
}

#[test]
fn pending_refund_token_succeeds_once_refund_pending_for_has_passed() {
    // Stripe, "The Refund object" (statuses) and "Types of events" (`refund.updated`): a
    // pending refund becomes succeeded later; `charge.refunded` follows the success.
    let model = model();
    let pi = paid(&model, "pm_fake_refund_pending", "pay_1");
    let created = post(&model, REFUNDS, &refund_body(&pi, ""), Some("k"), T0);
    let id = json(&created)["id"].as_str().unwrap_or_default().to_owned();
    let due = T0 + millis(ModelConfig::default().refund_pending_for);
    assert_eq!(model.next_transition_ms(), Some(due));
    assert!(model.tick(due - 1).is_empty());
    // WHEN refund_pending_for has passed
    let events = model.tick(due);
    // THEN it succeeded, with refund.updated naming the old status, then charge.refunded
    assert_eq!(kinds(&events), ["refund.updated", "charge.refunded"]);
    let updated = event_json(&events[0]);
    assert_eq!(updated["data"]["object"]["status"], "succeeded");
    assert_eq!(
        updated["data"]["previous_attributes"],
        json!({"status": "pending"})
    );
    assert_eq!(updated["created"], due / 1000);
    assert_eq!(updated["request"]["idempotency_key"], Value::Null);
    assert_eq!(
        event_json(&events[1])["data"]["object"]["amount_refunded"],
        3000
    );
    let retrieved = get(&model, &format!("{REFUNDS}/{id}"), None, due);
    assert_eq!(json(&retrieved)["status"], "succeeded");
    assert_eq!(model.refunds()[0].outcome, "succeeded");
    assert_eq!(model.next_transition_ms(), None);
}

#[test]
fn refund_fail_card_refunds_read_succeeded_then_fail_and_give_the_amount_back() {
    // Stripe, "Testing" → "Refunds" (asynchronous failure: the refund begins `succeeded`,
    // later turns `failed`) and "Refunds" → "Failed refunds" (`failure_reason`, the funds
    // return to the balance).
    // GIVEN a pm_card_refundFail charge refunded in full
    let model = model();
    let pi = paid(&model, "pm_card_refundFail", "pay_1");
    let created = post(&model, REFUNDS, &refund_body(&pi, ""), Some("k1"), T0);
    let refund = json(&created);
    assert_eq!(
        (refund["status"].clone(), refund["amount"].clone()),
        (json!("succeeded"), json!(3000))
    );
    assert_eq!(
        kinds(&created.events),
        ["refund.created", "charge.refunded"]
    );
    let again = post(&model, REFUNDS, &refund_body(&pi, ""), None, T0 + 1);
    assert_eq!(error_code(&again), "charge_already_refunded");
    // WHEN refund_fail_after has passed
    let due = T0 + millis(ModelConfig::default().refund_fail_after);
    assert_eq!(model.next_transition_ms(), Some(due));
    assert!(model.tick(due - 1).is_empty());
    let events = model.tick(due);
    // THEN it failed with expired_or_canceled_card: refund.updated, then refund.failed
    assert_eq!(kinds(&events), ["refund.updated", "refund.failed"]);
    let updated = event_json(&events[0]);
    assert_eq!(
        updated["data"]["previous_attributes"],
        json!({"status": "succeeded", "failure_reason": null})
    );
    let failed = &event_json(&events[1])["data"]["object"];
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_reason"], "expired_or_canceled_card");
    assert_eq!(failed["id"], refund["id"]);
    let id = refund["id"].as_str().unwrap_or_default();
    let retrieved = json(&get(&model, &format!("{REFUNDS}/{id}"), None, due));
    assert_eq!(retrieved["failure_reason"], "expired_or_canceled_card");
    let fake = &model.refunds()[0];
    assert_eq!(
        (fake.outcome.as_str(), fake.failure_reason.as_deref()),
        ("failed", Some("expired_or_canceled_card"))
    );
    // AND the amount is refundable again (and that refund fails later too)
    let retry = post(&model, REFUNDS, &refund_body(&pi, ""), Some("k2"), due + 1);
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(json(&retry)["amount"], 3000);
    assert_eq!(json(&retry)["status"], "succeeded");
    assert_eq!(
        model.next_transition_ms(),
        Some(due + 1 + millis(ModelConfig::default().refund_fail_after))
    );
}

#[test]
fn refund_lists_are_newest_first_read_after_write_and_page() {
    // Stripe, "List all refunds": newest first, `limit` 1 to 100, `has_more`,
    // `starting_after`; "Retrieve a refund" by id.
    let model = model();
    let (pi1, pi2) = (
        paid(&model, "pm_card_visa", "pay_1"),
        paid(&model, "pm_card_visa", "pay_2"),
    );
    let ids: Vec<String> = [(&pi1, 1), (&pi2, 2), (&pi1, 3)]
        .iter()
        .map(|(pi, n)| {
            let answer = post(
                &model,
                REFUNDS,
                &refund_body(pi, &format!("&amount={n}")),
                None,
                T0,
            );
            json(&answer)["id"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    let list = |query: &str| json(&get(&model, REFUNDS, Some(query), T0));
    let listed_ids = |list: &Value| -> Vec<String> {
        list["data"]
            .as_array()
            .map(|data| {
                data.iter()
                    .filter_map(|r| r["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // THEN the same instant's list shows them, newest first
    let of_pi1 = list(&format!("payment_intent={pi1}"));
    assert_eq!(listed_ids(&of_pi1), [ids[2].clone(), ids[0].clone()]);
    assert_eq!(
        (&of_pi1["object"], &of_pi1["has_more"], &of_pi1["url"]),
        (&json!("list"), &json!(false), &json!("/v1/refunds"))
    );
    let all = list("");
    assert_eq!(
        listed_ids(&all),
        [ids[2].clone(), ids[1].clone(), ids[0].clone()]
    );
    // AND pages with limit and starting_after
    let first = list(&format!("payment_intent={pi1}&limit=1"));
    assert_eq!(
        (listed_ids(&first), &first["has_more"]),
        (vec![ids[2].clone()], &json!(true))
    );
    let second = list(&format!(
        "payment_intent={pi1}&limit=1&starting_after={}",
        ids[2]
    ));
    assert_eq!(
        (listed_ids(&second), &second["has_more"]),
        (vec![ids[0].clone()], &json!(false))
    );
    // AND refuses what it does not know
    for (query, param) in [
        ("payment_intent=pi_missing", "payment_intent"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("starting_after=re_missing", "starting_after"),
        ("created=1", "created"),
    ] {
        let refused = get(&model, REFUNDS, Some(query), T0);
        assert_eq!(refused.status, 400, "{query}");
        assert_eq!(json(&refused)["error"]["param"], param);
    }
    // AND retrieves one by id, 404 for an unknown one
    let one = get(&model, &format!("{REFUNDS}/{}", ids[1]), None, T0);
    assert_eq!(
        (one.status, json(&one)["payment_intent"].clone()),
        (200, json!(pi2))
    );
    let missing = get(&model, &format!("{REFUNDS}/re_missing"), None, T0);
    assert_eq!(
        (missing.status, error_code(&missing)),
        (404, json!("resource_missing"))
    );
}

/// A call sequence touching every refund path.
fn run_refund_script(model: &FakeModel) -> Vec<String> {
    let mut trace = Vec::new();
    let mut record = |answer: WireAnswer| {
        trace.push(format!(
            "{} {} {}",
            answer.status, answer.replayed, answer.body
        ));
        trace.extend(
            answer
                .events
                .into_iter()
                .map(|e| format!("{} {}", e.id, e.body)),
        );
    };
    let mut intents = Vec::new();
    for token in [
        "pm_card_visa",
        "pm_card_refundFail",
        "pm_fake_refund_pending",
    ] {
        let answer = post(model, INTENTS, &charge(token, "a"), None, T0);
        intents.push(json(&answer)["id"].as_str().unwrap_or_default().to_owned());
        record(answer);
    }
    for (i, pi) in intents.iter().enumerate() {
        let key = format!("r{i}");
        record(post(
            model,
            REFUNDS,
            &refund_body(pi, "&amount=1000"),
            Some(&key),
            T0 + 5,
        ));
        record(post(
            model,
            REFUNDS,
            &refund_body(pi, "&amount=1000"),
            Some(&key),
            T0 + 6,
        ));
        record(post(
            model,
            REFUNDS,
            &refund_body(pi, "&amount=5000"),
            None,
            T0 + 7,
        ));
    }
    record(get(model, REFUNDS, Some("limit=2"), T0 + 8));
    trace.extend(model.tick(T0 + HOUR_MS).into_iter().map(|e| e.body));
    trace.push(serde_json::to_string(&model.refunds()).unwrap_or_default());
    trace
}

#[test]
fn refunds_are_byte_identical_for_one_seed_and_call_sequence() {
    // The model's own rule (no Stripe page): one seed and one call sequence give the same
    // refund ids, answers and events, so a simulation seed replays exactly.
    let first = run_refund_script(&FakeModel::new(ModelConfig::default(), 42));
    let second = run_refund_script(&FakeModel::new(ModelConfig::default(), 42));
    assert_eq!(first, second);
    let other = run_refund_script(&FakeModel::new(ModelConfig::default(), 43));
    assert_ne!(first, other, "the seed decides ids");
}

// Determinism and bookkeeping.

/// A call sequence touching every source of randomness.
fn run_script(model: &FakeModel) -> Vec<String> {
    let mut trace = Vec::new();
    let mut record = |answer: WireAnswer| {
        trace.push(format!(
            "{} {} {}",
            answer.status, answer.replayed, answer.body
        ));
        trace.extend(
            answer
                .events
                .into_iter()
                .map(|e| format!("{} {}", e.id, e.body)),
        );
    };
    record(post(
        model,
        INTENTS,
        &charge("pm_card_visa", "a"),
        Some("k1"),
        T0,
    ));
    record(post(
        model,
        INTENTS,
        &charge("pm_card_visa_chargeDeclined", "a"),
        Some("k2"),
        T0 + 5,
    ));
    record(post(
        model,
        INTENTS,
        &charge("pm_fake_processing", "b"),
        None,
        T0 + 9,
    ));
    record(post(
        model,
        INTENTS,
        &charge("pm_card_visa", "a"),
        Some("k1"),
        T0 + 30 * HOUR_MS,
    ));
    record(get(
        model,
        "/v1/payment_intents/search",
        Some(&search_query("a")),
        T0 + 31 * HOUR_MS,
    ));
    trace.extend(model.tick(T0 + 40 * HOUR_MS).into_iter().map(|e| e.body));
    trace.push(serde_json::to_string(&model.charges()).unwrap_or_default());
    trace
}

#[test]
fn same_seed_and_calls_give_byte_identical_answers() {
    let config = || ModelConfig {
        search_lag_max: Duration::from_secs(600),
        ..ModelConfig::default()
    };
    let first = run_script(&FakeModel::new(config(), 42));
    let second = run_script(&FakeModel::new(config(), 42));
    assert_eq!(first, second);
    let other = run_script(&FakeModel::new(config(), 43));
    assert_ne!(first, other, "the seed decides ids");
}

#[test]
fn time_never_runs_backwards() {
    let model = model_with(ModelConfig {
        processing_for: Duration::from_secs(1),
        ..ModelConfig::default()
    });
    post(
        &model,
        INTENTS,
        &charge("pm_fake_processing", "p"),
        None,
        T0,
    );
    assert_eq!(kinds(&model.tick(T0 + 1000)), ["payment_intent.succeeded"]);
    // An earlier time afterwards is taken as the latest one seen.
    let late = post(
        &model,
        INTENTS,
        &charge("pm_card_visa", "p"),
        None,
        T0 - HOUR_MS,
    );
    assert_eq!(json(&late)["created"], (T0 + 1000) / 1000);
}

#[test]
fn unknown_routes_are_404_in_stripes_shape() {
    let model = model();
    for (method, path) in [
        ("GET", "/v1/payment_intents"),
        ("POST", "/v1/payment_intents/pi_1"),
        ("GET", "/v1/payment_intents/"),
        ("DELETE", "/v1/payment_intents/pi_1"),
        ("GET", "/v1"),
    ] {
        let authorization = bearer();
        let answer = model.handle(
            &WireRequest {
                method,
                path,
                query: None,
                authorization: Some(&authorization),
                idempotency_key: None,
                prefer: None,
                body: b"",
            },
            T0,
        );
        assert_eq!(answer.status, 404, "{method} {path}");
        assert_eq!(json(&answer)["error"]["param"], "url");
    }
}

#[test]
fn idempotency_keys_must_be_1_to_255_visible_characters() {
    let model = model();
    let long = "k".repeat(256);
    for key in ["", long.as_str(), "tab\there"] {
        let refused = post(&model, INTENTS, &charge("pm_card_visa", "p"), Some(key), T0);
        assert_eq!(refused.status, 400);
    }
    assert!(model.charges().is_empty());
    let ok = post(
        &model,
        INTENTS,
        &charge("pm_card_visa", "p"),
        Some(&"k".repeat(255)),
        T0,
    );
    assert_eq!(ok.status, 200);
}
