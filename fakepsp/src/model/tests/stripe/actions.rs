//! The Stripe face's customer actions and two-step payments, tested through the model: the 3-D
//! Secure test cards (`error_on_requires_action` or `return_url`), the authentication page,
//! manual capture, the capture endpoint, cancelling an authorization and its lapse.

use std::time::Duration;

use serde_json::{json, Value};

use super::{error_code, get, post, INTENTS};
use crate::model::tests::{json, kinds, model_with, HOUR_MS, T0};
use crate::model::{FakeCancel, FakeCapture, FakeModel, ModelConfig, PageAnswer};

const BASE_URL: &str = "http://127.0.0.1:4242";
const RETURN_URL: &str = "https://shop.example/return";
const DAY_MS: i64 = 24 * HOUR_MS;
const THREE_DS_TOKENS: [&str; 2] = [
    "pm_card_threeDSecure2Required",
    "pm_card_authenticationRequired",
];

fn model() -> FakeModel {
    model_with(ModelConfig {
        base_url: BASE_URL.to_owned(),
        ..ModelConfig::default()
    })
}

/// A confirmed create of 3000 JPY for `pay_1` with `token`, plus `extra` (`&name=value...`).
fn confirmed(token: &str, extra: &str) -> String {
    format!(
        "amount=3000&currency=jpy&payment_method={token}&confirm=true\
         &metadata[payment_id]=pay_1{extra}"
    )
}

/// A confirmed create that sends the customer to authenticate and back to [`RETURN_URL`].
fn redirected(token: &str, extra: &str) -> String {
    confirmed(token, &format!("&return_url={RETURN_URL}{extra}"))
}

fn id_of(body: &Value) -> String {
    body["id"].as_str().unwrap_or_default().to_owned()
}

fn page_post(model: &FakeModel, id: &str, result: &str, now_ms: i64) -> PageAnswer {
    let form = format!("result={result}");
    model.action_page(id, Some(form.as_bytes()), now_ms)
}

fn capture_path(id: &str) -> String {
    format!("{INTENTS}/{id}/capture")
}

fn event_object(answer_events: &[crate::model::ModelEvent], index: usize) -> Value {
    let event: Value = serde_json::from_str(&answer_events[index].body).unwrap_or(Value::Null);
    event["data"]["object"].clone()
}

/// Creates a manual-capture PaymentIntent with `pm_card_visa`, authorized at `T0`.
fn authorized(model: &FakeModel) -> String {
    let answer = post(
        model,
        INTENTS,
        &confirmed("pm_card_visa", "&capture_method=manual"),
        Some("k-create"),
        T0,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    id_of(&json(&answer))
}

// 3-D Secure test cards, confirmed with error_on_requires_action.

#[test]
fn three_ds_card_with_error_on_requires_action_fails_the_confirm_with_402() {
    for token in THREE_DS_TOKENS {
        // GIVEN a card that always asks for authentication
        let model = model();
        // WHEN it is confirmed with error_on_requires_action=true
        let answer = post(
            &model,
            INTENTS,
            &confirmed(token, "&error_on_requires_action=true"),
            Some("k"),
            T0,
        );
        // THEN Stripe's 402 authentication_required, carrying the failed PaymentIntent
        assert_eq!(answer.status, 402, "{token}: {}", answer.body);
        let body = json(&answer);
        assert_eq!(body["error"]["type"], "card_error");
        assert_eq!(body["error"]["code"], "authentication_required");
        assert_eq!(body["error"]["decline_code"], "authentication_required");
        let pi = &body["error"]["payment_intent"];
        assert_eq!(pi["status"], "requires_payment_method");
        assert_eq!(pi["last_payment_error"]["code"], "authentication_required");
        assert_eq!(pi["next_action"], Value::Null);
        assert_eq!(pi["amount_received"], 0);
        // AND the failure is the usual payment_failed event, and a failed charge
        assert_eq!(kinds(&answer.events), ["payment_intent.payment_failed"]);
        assert_eq!(
            event_object(&answer.events, 0)["status"],
            "requires_payment_method"
        );
        let charges = model.charges();
        assert_eq!(charges.len(), 1);
        assert_eq!(charges[0].outcome, "failed");
        assert_eq!(charges[0].status, "requires_payment_method");
        assert_eq!(charges[0].amount_captured, None);
        // AND a retry under the key replays the 402
        let again = post(
            &model,
            INTENTS,
            &confirmed(token, "&error_on_requires_action=true"),
            Some("k"),
            T0,
        );
        assert_eq!((again.status, again.replayed), (402, true));
        assert_eq!(again.body, answer.body);
    }
}

#[test]
fn error_on_requires_action_wins_over_return_url() {
    // GIVEN a confirm that carries both (Stripe accepts both)
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[0], "&error_on_requires_action=true"),
        None,
        T0,
    );
    // THEN it fails instead of asking
    assert_eq!(answer.status, 402, "{}", answer.body);
    assert_eq!(error_code(&answer), "authentication_required");
    assert_eq!(model.charges()[0].outcome, "failed");
}

#[test]
fn an_off_session_confirm_of_a_three_ds_card_fails_with_authentication_required() {
    for off_session in ["true", "one_off", "recurring"] {
        let model = model();
        let answer = post(
            &model,
            INTENTS,
            &redirected(THREE_DS_TOKENS[1], &format!("&off_session={off_session}")),
            None,
            T0,
        );
        assert_eq!(answer.status, 402, "{off_session}: {}", answer.body);
        assert_eq!(error_code(&answer), "authentication_required");
        assert_eq!(kinds(&answer.events), ["payment_intent.payment_failed"]);
    }
    // off_session=false leaves the customer there to act.
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[1], "&off_session=false"),
        None,
        T0,
    );
    assert_eq!(json(&answer)["status"], "requires_action");
}

// 3-D Secure test cards, confirmed with return_url.

#[test]
fn three_ds_card_with_return_url_waits_in_requires_action_with_a_redirect() {
    for token in THREE_DS_TOKENS {
        // GIVEN a card that always asks for authentication
        let model = model();
        // WHEN it is confirmed with a return_url
        let answer = post(&model, INTENTS, &redirected(token, ""), Some("k"), T0);
        // THEN 200 requires_action, sending the customer to the fake's page and back
        assert_eq!(answer.status, 200, "{token}: {}", answer.body);
        let pi = json(&answer);
        let id = id_of(&pi);
        assert_eq!(pi["status"], "requires_action");
        assert_eq!(
            pi["next_action"],
            json!({
                "type": "redirect_to_url",
                "redirect_to_url": {
                    "url": format!("{BASE_URL}/_fake/authenticate/{id}"),
                    "return_url": RETURN_URL,
                },
            })
        );
        assert_eq!(pi["latest_charge"], Value::Null);
        assert_eq!(pi["last_payment_error"], Value::Null);
        // AND payment_intent.requires_action is sent
        assert_eq!(kinds(&answer.events), ["payment_intent.requires_action"]);
        assert_eq!(
            event_object(&answer.events, 0)["next_action"],
            pi["next_action"]
        );
        let charges = model.charges();
        assert_eq!(charges[0].outcome, "pending");
        assert_eq!(charges[0].status, "requires_action");
        // AND an abandoned action never times out: it waits until cancelled
        assert!(model.next_transition_ms().is_none());
        assert!(model.tick(T0 + 365 * DAY_MS).is_empty());
        let later = get(&model, &format!("{INTENTS}/{id}"), None, T0 + 365 * DAY_MS);
        assert_eq!(json(&later)["status"], "requires_action");
        let cancel = post(
            &model,
            &format!("{INTENTS}/{id}/cancel"),
            "cancellation_reason=abandoned",
            Some("k-cancel"),
            T0 + 365 * DAY_MS,
        );
        assert_eq!(cancel.status, 200, "{}", cancel.body);
        assert_eq!(json(&cancel)["status"], "canceled");
        assert_eq!(json(&cancel)["cancellation_reason"], "abandoned");
        assert_eq!(kinds(&cancel.events), ["payment_intent.canceled"]);
        assert_eq!(model.charges()[0].outcome, "canceled");
    }
}

#[test]
fn return_url_must_be_a_url_and_needs_confirm() {
    let model = model();
    // An invalid URL is refused before anything is created.
    let bad = post(
        &model,
        INTENTS,
        &confirmed(THREE_DS_TOKENS[0], "&return_url=not%20a%20url"),
        Some("k"),
        T0,
    );
    assert_eq!(bad.status, 400);
    assert_eq!(error_code(&bad), "url_invalid");
    assert_eq!(json(&bad)["error"]["param"], "return_url");
    // Without confirm=true, return_url is a confirm-only parameter, as before.
    let unconfirmed = post(
        &model,
        INTENTS,
        &format!(
            "amount=3000&currency=jpy&payment_method={}&confirm=false&return_url={RETURN_URL}",
            THREE_DS_TOKENS[0]
        ),
        None,
        T0,
    );
    assert_eq!(unconfirmed.status, 400);
    assert_eq!(json(&unconfirmed)["error"]["param"], "return_url");
    assert!(model.charges().is_empty());
}

#[test]
fn three_ds_card_without_return_url_or_error_waits_for_the_stripe_sdk() {
    // GIVEN neither error_on_requires_action nor return_url
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        &confirmed(THREE_DS_TOKENS[1], ""),
        None,
        T0,
    );
    // THEN the action is left to Stripe.js, and nothing times out
    assert_eq!(answer.status, 200, "{}", answer.body);
    let pi = json(&answer);
    assert_eq!(pi["status"], "requires_action");
    assert_eq!(pi["next_action"]["type"], "use_stripe_sdk");
    assert!(model.next_transition_ms().is_none());
}

// The authentication page.

#[test]
fn the_authentication_page_names_the_amount_and_posts_both_answers_to_itself() {
    // GIVEN a PaymentIntent waiting for authentication
    let model = model();
    let pi = json(&post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[0], ""),
        None,
        T0,
    ));
    let id = id_of(&pi);
    let seen = model.requests_seen();
    // WHEN its page is fetched
    let page = model.action_page(&id, None, T0);
    // THEN an HTML page with the amount, the currency and two forms posting to the page itself
    assert_eq!(page.status, 200);
    assert_eq!(page.location, None);
    assert!(page.events.is_empty());
    assert!(page.html.contains("3000 JPY"), "{}", page.html);
    let action = format!("<form method=\"post\" action=\"/_fake/authenticate/{id}\">");
    assert_eq!(page.html.matches(&action).count(), 2, "{}", page.html);
    assert!(page
        .html
        .contains("<input type=\"hidden\" name=\"result\" value=\"complete\"><button type=\"submit\">Complete</button>"));
    assert!(page
        .html
        .contains("<input type=\"hidden\" name=\"result\" value=\"fail\"><button type=\"submit\">Fail</button>"));
    // AND it is not an API request, and changes nothing
    assert_eq!(model.requests_seen(), seen);
    assert_eq!(model.charges()[0].status, "requires_action");
    // AND an unknown id is a 404 page, a bad answer a 400 page
    assert_eq!(model.action_page("pi_nope", None, T0).status, 404);
    assert_eq!(page_post(&model, "pi_nope", "complete", T0).status, 404);
    assert_eq!(page_post(&model, &id, "maybe", T0).status, 400);
    assert_eq!(model.charges()[0].status, "requires_action");
}

#[test]
fn completing_the_authentication_succeeds_an_automatic_capture_and_redirects_back() {
    // GIVEN a PaymentIntent waiting for authentication
    let model = model();
    let pi = json(&post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[0], ""),
        Some("k"),
        T0,
    ));
    let id = id_of(&pi);
    // WHEN the customer completes it
    let page = page_post(&model, &id, "complete", T0 + 1_000);
    // THEN 303 back to the return_url, as Stripe redirects
    assert_eq!(page.status, 303, "{}", page.html);
    assert_eq!(
        page.location.as_deref(),
        Some(format!("{RETURN_URL}?payment_intent={id}&redirect_status=succeeded").as_str())
    );
    // AND the PaymentIntent succeeded, with its event
    assert_eq!(kinds(&page.events), ["payment_intent.succeeded"]);
    let event: Value = serde_json::from_str(&page.events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["id"], id.as_str());
    assert_eq!(event["request"]["idempotency_key"], Value::Null);
    let now = json(&get(&model, &format!("{INTENTS}/{id}"), None, T0 + 2_000));
    assert_eq!(now["status"], "succeeded");
    assert_eq!(now["amount_received"], 3000);
    assert_eq!(now["next_action"], Value::Null);
    assert!(now["latest_charge"]
        .as_str()
        .is_some_and(|c| c.starts_with("ch_")));
    let charges = model.charges();
    assert_eq!(charges[0].outcome, "succeeded");
    assert_eq!(charges[0].amount_captured, Some(3000));
    assert_eq!(charges[0].capture_method, "automatic");
}

#[test]
fn completing_the_authentication_of_a_manual_capture_authorizes_it() {
    // GIVEN a manual-capture PaymentIntent waiting for authentication, return_url with a query
    let model = model();
    let body = confirmed(
        THREE_DS_TOKENS[1],
        "&capture_method=manual&return_url=https%3A%2F%2Fshop.example%2Freturn%3Forder%3D7",
    );
    let id = id_of(&json(&post(&model, INTENTS, &body, None, T0)));
    // WHEN the customer completes it
    let page = page_post(&model, &id, "complete", T0);
    // THEN the parameters are appended to the return_url's query
    assert_eq!(page.status, 303);
    assert_eq!(
        page.location.as_deref(),
        Some(
            format!(
                "https://shop.example/return?order=7&payment_intent={id}&redirect_status=succeeded"
            )
            .as_str()
        )
    );
    // AND it is authorized, not captured
    assert_eq!(
        kinds(&page.events),
        ["payment_intent.amount_capturable_updated"]
    );
    let now = json(&get(&model, &format!("{INTENTS}/{id}"), None, T0));
    assert_eq!(now["status"], "requires_capture");
    assert_eq!(now["amount_capturable"], 3000);
    assert_eq!(now["amount_received"], 0);
    assert_eq!(model.charges()[0].outcome, "authorized");
    assert_eq!(model.charges()[0].amount_captured, None);
}

#[test]
fn failing_the_authentication_fails_the_payment_and_redirects_back() {
    let model = model();
    let id = id_of(&json(&post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[0], ""),
        None,
        T0,
    )));
    // WHEN the customer fails it
    let page = page_post(&model, &id, "fail", T0);
    // THEN back to the return_url with redirect_status=failed
    assert_eq!(page.status, 303);
    assert_eq!(
        page.location.as_deref(),
        Some(format!("{RETURN_URL}?payment_intent={id}&redirect_status=failed").as_str())
    );
    // AND the PaymentIntent needs another payment method, as after a failed 3-D Secure
    assert_eq!(kinds(&page.events), ["payment_intent.payment_failed"]);
    let now = json(&get(&model, &format!("{INTENTS}/{id}"), None, T0));
    assert_eq!(now["status"], "requires_payment_method");
    assert_eq!(
        now["last_payment_error"]["code"],
        "payment_intent_authentication_failure"
    );
    assert_eq!(now["next_action"], Value::Null);
    assert_eq!(model.charges()[0].outcome, "failed");
}

#[test]
fn a_second_answer_on_the_page_is_409_and_changes_nothing() {
    for first in ["complete", "fail"] {
        let model = model();
        let id = id_of(&json(&post(
            &model,
            INTENTS,
            &redirected(THREE_DS_TOKENS[0], ""),
            None,
            T0,
        )));
        assert_eq!(page_post(&model, &id, first, T0).status, 303);
        let before = model.charges();
        // WHEN the page is reloaded or posted again, either way
        let reload = model.action_page(&id, None, T0 + 1_000);
        let again = page_post(&model, &id, "complete", T0 + 1_000);
        let other = page_post(&model, &id, "fail", T0 + 1_000);
        // THEN 409, no event, and the PaymentIntent is as it was
        for page in [&reload, &again, &other] {
            assert_eq!(page.status, 409, "{first}: {}", page.html);
            assert_eq!(page.location, None);
            assert!(page.events.is_empty());
        }
        assert_eq!(model.charges(), before);
    }
    // AND a cancelled PaymentIntent cannot be authenticated either
    let model = model();
    let id = id_of(&json(&post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[0], ""),
        None,
        T0,
    )));
    assert_eq!(
        post(&model, &format!("{INTENTS}/{id}/cancel"), "", None, T0).status,
        200
    );
    let page = page_post(&model, &id, "complete", T0);
    assert_eq!((page.status, page.events.len()), (409, 0));
    assert_eq!(model.charges()[0].outcome, "canceled");
}

#[test]
fn the_fake_requires_action_token_still_times_out_and_keeps_its_sdk_action() {
    // pm_fake_requires_action is unchanged by return_url: use_stripe_sdk, then a timeout.
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        &redirected("pm_fake_requires_action", ""),
        None,
        T0,
    );
    let pi = json(&answer);
    assert_eq!(pi["status"], "requires_action");
    assert_eq!(pi["next_action"]["type"], "use_stripe_sdk");
    let events = model.tick(T0 + HOUR_MS);
    assert_eq!(kinds(&events), ["payment_intent.payment_failed"]);
    assert_eq!(model.charges()[0].outcome, "failed");
}

// Manual capture.

#[test]
fn a_manual_capture_is_authorized_with_capture_before_on_its_charge() {
    // GIVEN a succeeding card confirmed with capture_method=manual
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        &confirmed(
            "pm_card_visa",
            "&capture_method=manual&expand[]=latest_charge",
        ),
        Some("k"),
        T0,
    );
    // THEN it is authorized, not captured
    assert_eq!(answer.status, 200, "{}", answer.body);
    let pi = json(&answer);
    assert_eq!(pi["status"], "requires_capture");
    assert_eq!(pi["capture_method"], "manual");
    assert_eq!(pi["amount_capturable"], 3000);
    assert_eq!(pi["amount_received"], 0);
    // AND the expanded charge says until when it can be captured (7 days, epoch seconds)
    let charge = &pi["latest_charge"];
    assert!(charge["id"].as_str().is_some_and(|c| c.starts_with("ch_")));
    assert_eq!(charge["object"], "charge");
    assert_eq!(charge["captured"], false);
    assert_eq!(charge["amount_captured"], 0);
    assert_eq!(charge["status"], "succeeded");
    assert_eq!(charge["payment_method_details"]["type"], "card");
    assert_eq!(
        charge["payment_method_details"]["card"]["capture_before"],
        (T0 + 7 * DAY_MS) / 1000
    );
    assert_eq!(
        kinds(&answer.events),
        ["payment_intent.amount_capturable_updated"]
    );
    // The event carries the PaymentIntent unexpanded.
    assert!(event_object(&answer.events, 0)["latest_charge"].is_string());
    let charges = model.charges();
    assert_eq!(charges[0].outcome, "authorized");
    assert_eq!(charges[0].status, "requires_capture");
    assert_eq!(charges[0].capture_method, "manual");
    assert_eq!(charges[0].amount_captured, None);
    // AND retrieve shows the same, the charge as an id unless expanded
    let id = id_of(&pi);
    let plain = json(&get(&model, &format!("{INTENTS}/{id}"), None, T0));
    assert_eq!(plain["latest_charge"], charge["id"]);
    let expanded = json(&get(
        &model,
        &format!("{INTENTS}/{id}"),
        Some("expand%5B%5D=latest_charge"),
        T0,
    ));
    assert_eq!(expanded["latest_charge"], *charge);
    // AND an expansion the fake does not serve is refused
    let refused = get(
        &model,
        &format!("{INTENTS}/{id}"),
        Some("expand[]=customer"),
        T0,
    );
    assert_eq!(refused.status, 400);
}

#[test]
fn a_fence_may_carry_capture_method() {
    // capture_method is not confirm-only: the fence's confirm=false create may carry it.
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        "amount=3000&currency=jpy&payment_method=pm_card_visa&confirm=false&capture_method=manual",
        None,
        T0,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(json(&answer)["status"], "requires_confirmation");
    assert_eq!(json(&answer)["capture_method"], "manual");
    // And only Stripe's values are taken (automatic_async is not modelled).
    for bad in ["automatic_async", "later"] {
        let refused = post(
            &model,
            INTENTS,
            &confirmed("pm_card_visa", &format!("&capture_method={bad}")),
            None,
            T0,
        );
        assert_eq!(refused.status, 400, "{bad}");
        assert_eq!(error_code(&refused), "parameter_invalid");
    }
}

#[test]
fn a_partial_capture_succeeds_releases_the_rest_and_bounds_refunds() {
    // GIVEN an authorization of 3000
    let model = model();
    let id = authorized(&model);
    // WHEN 2000 of it is captured
    let answer = post(
        &model,
        &capture_path(&id),
        "amount_to_capture=2000",
        Some("k-cap"),
        T0 + HOUR_MS,
    );
    // THEN it succeeded with 2000 received and nothing left capturable
    assert_eq!(answer.status, 200, "{}", answer.body);
    let pi = json(&answer);
    assert_eq!(pi["status"], "succeeded");
    assert_eq!(pi["amount_received"], 2000);
    assert_eq!(pi["amount_capturable"], 0);
    assert_eq!(kinds(&answer.events), ["payment_intent.succeeded"]);
    let event: Value = serde_json::from_str(&answer.events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["request"]["idempotency_key"], "k-cap");
    let charges = model.charges();
    assert_eq!(charges[0].outcome, "succeeded");
    assert_eq!(charges[0].amount_captured, Some(2000));
    assert_eq!(
        charges[0].captures,
        [FakeCapture {
            amount: 2000,
            idempotency_key: Some("k-cap".to_owned()),
        }]
    );
    // AND the lapse no longer applies
    assert!(model.tick(T0 + 30 * DAY_MS).is_empty());
    // AND refunds are bounded by the 2000 captured, not the 3000 authorized
    let refunds = "/v1/refunds";
    let too_much = post(
        &model,
        refunds,
        &format!("payment_intent={id}&amount=2001"),
        Some("r1"),
        T0 + 2 * HOUR_MS,
    );
    assert_eq!(too_much.status, 400, "{}", too_much.body);
    assert_eq!(json(&too_much)["error"]["param"], "amount");
    let rest = post(
        &model,
        refunds,
        &format!("payment_intent={id}"),
        Some("r2"),
        T0 + 2 * HOUR_MS,
    );
    assert_eq!(rest.status, 200, "{}", rest.body);
    assert_eq!(json(&rest)["amount"], 2000);
    assert_eq!(kinds(&rest.events), ["refund.created", "charge.refunded"]);
    let charge_event: Value = serde_json::from_str(&rest.events[1].body).unwrap_or(Value::Null);
    let charge = &charge_event["data"]["object"];
    assert_eq!(charge["amount_captured"], 2000);
    assert_eq!(charge["amount_refunded"], 2000);
    assert_eq!(charge["refunded"], true);
    let nothing_left = post(
        &model,
        refunds,
        &format!("payment_intent={id}"),
        Some("r3"),
        T0 + 2 * HOUR_MS,
    );
    assert_eq!(error_code(&nothing_left), "charge_already_refunded");
}

#[test]
fn a_capture_without_an_amount_captures_all_and_replays_under_its_key() {
    let model = model();
    let id = authorized(&model);
    // WHEN captured under a key, then the same request again
    let first = post(
        &model,
        &capture_path(&id),
        "expand[]=latest_charge",
        Some("k-cap"),
        T0,
    );
    let again = post(
        &model,
        &capture_path(&id),
        "expand[]=latest_charge",
        Some("k-cap"),
        T0 + HOUR_MS,
    );
    // THEN the second is the first answer replayed, with no event, and one capture took effect
    assert_eq!(first.status, 200, "{}", first.body);
    let pi = json(&first);
    assert_eq!(pi["amount_received"], 3000);
    assert_eq!(pi["latest_charge"]["captured"], true);
    assert_eq!(pi["latest_charge"]["amount_captured"], 3000);
    assert_eq!(kinds(&first.events), ["payment_intent.succeeded"]);
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body);
    assert!(again.events.is_empty());
    assert_eq!(model.charges()[0].captures.len(), 1);
    // AND the key reused with another amount, or on another endpoint, is an idempotency error
    let other = post(
        &model,
        &capture_path(&id),
        "amount_to_capture=5",
        Some("k-cap"),
        T0,
    );
    assert_eq!(json(&other)["error"]["type"], "idempotency_error");
    let other_route = post(
        &model,
        &format!("{INTENTS}/{id}/cancel"),
        "",
        Some("k-cap"),
        T0,
    );
    assert_eq!(json(&other_route)["error"]["type"], "idempotency_error");
    // AND a fresh key on the succeeded PaymentIntent is an unexpected state
    let late = post(&model, &capture_path(&id), "", Some("k-cap-2"), T0);
    assert_eq!(late.status, 400);
    assert_eq!(error_code(&late), "payment_intent_unexpected_state");
    assert_eq!(model.charges()[0].captures.len(), 1);
}

#[test]
fn capture_from_any_other_status_is_payment_intent_unexpected_state() {
    let model = model();
    let succeeded = id_of(&json(&post(
        &model,
        INTENTS,
        &confirmed("pm_card_visa", ""),
        None,
        T0,
    )));
    let fenced = id_of(&json(&post(
        &model,
        INTENTS,
        "amount=3000&currency=jpy&payment_method=pm_card_visa&capture_method=manual",
        None,
        T0,
    )));
    let waiting = id_of(&json(&post(
        &model,
        INTENTS,
        &redirected(THREE_DS_TOKENS[0], "&capture_method=manual"),
        None,
        T0,
    )));
    for (id, status) in [
        (&succeeded, "succeeded"),
        (&fenced, "requires_confirmation"),
        (&waiting, "requires_action"),
    ] {
        let answer = post(&model, &capture_path(id), "", Some(&format!("k-{id}")), T0);
        assert_eq!(answer.status, 400, "{status}");
        let body = json(&answer);
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "payment_intent_unexpected_state");
        assert_eq!(
            body["error"]["message"],
            format!(
                "This PaymentIntent could not be captured because it has a status of {status}. \
                 Only a PaymentIntent with one of the following statuses may be captured: \
                 requires_capture."
            )
        );
        assert_eq!(body["error"]["payment_intent"]["status"], status);
        assert!(answer.events.is_empty());
        // Stored under the key like any answer after validation.
        let again = post(&model, &capture_path(id), "", Some(&format!("k-{id}")), T0);
        assert!(again.replayed);
    }
    assert!(model
        .charges()
        .iter()
        .all(|charge| charge.captures.is_empty()));
    // An unknown id is 404 resource_missing, as on the other routes.
    let missing = post(&model, &capture_path("pi_nope"), "", None, T0);
    assert_eq!(missing.status, 404);
    assert_eq!(error_code(&missing), "resource_missing");
}

#[test]
fn capturing_more_than_is_capturable_or_a_bad_amount_is_refused() {
    let model = model();
    let id = authorized(&model);
    // More than the authorization: 400 on amount_to_capture, nothing captured.
    let answer = post(
        &model,
        &capture_path(&id),
        "amount_to_capture=3001",
        Some("k-over"),
        T0,
    );
    assert_eq!(answer.status, 400, "{}", answer.body);
    let body = json(&answer);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "amount_too_large");
    assert_eq!(body["error"]["param"], "amount_to_capture");
    assert!(answer.events.is_empty());
    // Not an integer of at least 1, or an unknown parameter: refused before the key.
    for (form, code) in [
        ("amount_to_capture=0", "parameter_invalid_integer"),
        ("amount_to_capture=1.5", "parameter_invalid_integer"),
        ("final_capture=false", "parameter_unknown"),
    ] {
        let refused = post(&model, &capture_path(&id), form, Some("k-bad"), T0);
        assert_eq!(refused.status, 400, "{form}");
        assert_eq!(error_code(&refused), code, "{form}");
        assert!(!refused.replayed);
    }
    let now = json(&get(&model, &format!("{INTENTS}/{id}"), None, T0));
    assert_eq!(now["status"], "requires_capture");
    assert_eq!(now["amount_capturable"], 3000);
    // The whole amount is still capturable.
    let exact = post(
        &model,
        &capture_path(&id),
        "amount_to_capture=3000",
        Some("k-bad"),
        T0,
    );
    assert_eq!(exact.status, 200, "{}", exact.body);
}

// Cancelling an authorization, and its lapse.

#[test]
fn an_authorization_can_be_cancelled_with_a_reason_under_a_key() {
    let model = model();
    let id = authorized(&model);
    let cancel = format!("{INTENTS}/{id}/cancel");
    // Stripe's reasons only.
    let bad = post(
        &model,
        &cancel,
        "cancellation_reason=automatic",
        Some("k-c"),
        T0,
    );
    assert_eq!(bad.status, 400);
    assert_eq!(error_code(&bad), "parameter_invalid");
    // WHEN cancelled from requires_capture
    let answer = post(
        &model,
        &cancel,
        "cancellation_reason=requested_by_customer&expand[]=latest_charge",
        Some("k-c"),
        T0,
    );
    // THEN canceled, the authorization released, payment_intent.canceled sent
    assert_eq!(answer.status, 200, "{}", answer.body);
    let pi = json(&answer);
    assert_eq!(pi["status"], "canceled");
    assert_eq!(pi["cancellation_reason"], "requested_by_customer");
    assert_eq!(pi["amount_capturable"], 0);
    assert_eq!(pi["amount_received"], 0);
    assert_eq!(pi["latest_charge"]["refunded"], true);
    assert_eq!(pi["latest_charge"]["amount_refunded"], 3000);
    assert_eq!(kinds(&answer.events), ["payment_intent.canceled"]);
    let charges = model.charges();
    assert_eq!(charges[0].outcome, "canceled");
    assert_eq!(
        charges[0].cancels,
        [FakeCancel {
            idempotency_key: Some("k-c".to_owned()),
            cancellation_reason: Some("requested_by_customer".to_owned()),
        }]
    );
    // AND the replay is the same answer, cancelling once
    let again = post(
        &model,
        &cancel,
        "cancellation_reason=requested_by_customer&expand[]=latest_charge",
        Some("k-c"),
        T0,
    );
    assert_eq!((again.replayed, again.body), (true, answer.body));
    assert_eq!(model.charges()[0].cancels.len(), 1);
    // AND it no longer lapses, nor can it be captured
    assert!(model.tick(T0 + 30 * DAY_MS).is_empty());
    let capture = post(&model, &capture_path(&id), "", None, T0 + 30 * DAY_MS);
    assert_eq!(error_code(&capture), "payment_intent_unexpected_state");
}

#[test]
fn an_uncaptured_authorization_is_cancelled_automatically_once_it_lapses() {
    // GIVEN an authorization, with authorizations lapsing after 2 days
    let model = model_with(ModelConfig {
        authorization_expires_after: Duration::from_secs(2 * 24 * 60 * 60),
        ..ModelConfig::default()
    });
    let id = authorized(&model);
    assert_eq!(model.next_transition_ms(), Some(T0 + 2 * DAY_MS));
    // WHEN time passes: nothing until the lapse
    assert!(model.tick(T0 + 2 * DAY_MS - 1).is_empty());
    assert_eq!(model.charges()[0].outcome, "authorized");
    let events = model.tick(T0 + 2 * DAY_MS);
    // THEN the PSP cancels it, cancellation_reason automatic, with its event
    assert_eq!(kinds(&events), ["payment_intent.canceled"]);
    let event: Value = serde_json::from_str(&events[0].body).unwrap_or(Value::Null);
    assert_eq!(event["data"]["object"]["id"], id.as_str());
    assert_eq!(event["data"]["object"]["status"], "canceled");
    assert_eq!(event["data"]["object"]["cancellation_reason"], "automatic");
    assert_eq!(event["request"]["idempotency_key"], Value::Null);
    let charges = model.charges();
    assert_eq!(charges[0].outcome, "canceled");
    assert_eq!(charges[0].status, "canceled");
    assert_eq!(
        charges[0].cancels,
        [FakeCancel {
            idempotency_key: None,
            cancellation_reason: Some("automatic".to_owned()),
        }]
    );
    // AND it can no longer be captured
    let capture = post(&model, &capture_path(&id), "", None, T0 + 2 * DAY_MS);
    assert_eq!(error_code(&capture), "payment_intent_unexpected_state");
    // AND the default is Stripe's 7 days
    assert_eq!(
        ModelConfig::default().authorization_expires_after,
        Duration::from_secs(7 * 24 * 60 * 60)
    );
}

#[test]
fn a_manual_capture_of_a_processing_payment_is_authorized_when_it_completes() {
    let model = model();
    let answer = post(
        &model,
        INTENTS,
        &confirmed("pm_fake_processing", "&capture_method=manual"),
        None,
        T0,
    );
    assert_eq!(json(&answer)["status"], "processing");
    let events = model.tick(T0 + 5 * 60 * 1000);
    assert_eq!(kinds(&events), ["payment_intent.amount_capturable_updated"]);
    assert_eq!(model.charges()[0].outcome, "authorized");
    assert_eq!(
        model.next_transition_ms(),
        Some(T0 + 5 * 60 * 1000 + 7 * DAY_MS)
    );
}
