//! The plain wire protocol: approvals, declines, validation, auth, retrieval, cancel, search.

use payonce_fake_psp::{FakeCharge, DEFAULT_API_KEY};
use serde_json::{json, Value};

use crate::support::{charge_form, client, create, get, read, start};

#[tokio::test]
async fn approved_card_creates_a_succeeded_payment_intent() {
    let psp = start().await;
    let client = client();
    for token in ["pm_card_visa", "pm_card_mastercard"] {
        let response = create(&client, &psp, &charge_form(token, "pay_ok"), None)
            .await
            .expect("answered");
        let (status, replayed, pi) = read(response).await;
        assert_eq!(status, 200, "{pi}");
        assert!(!replayed);
        let id = pi["id"].as_str().expect("id");
        assert!(id.starts_with("pi_") && id.len() == 27, "{id}");
        assert_eq!(pi["object"], "payment_intent");
        assert_eq!(pi["amount"], 3000);
        assert_eq!(pi["currency"], "jpy");
        assert_eq!(pi["status"], "succeeded");
        assert_eq!(pi["payment_method"], token);
        assert_eq!(pi["metadata"], json!({"payment_id": "pay_ok"}));
        assert!(pi["created"].as_i64().is_some_and(|t| t > 1_700_000_000));
        assert!(pi["latest_charge"]
            .as_str()
            .is_some_and(|c| c.starts_with("ch_")));
        assert_eq!(pi["last_payment_error"], Value::Null);
        assert_eq!(pi["cancellation_reason"], Value::Null);
    }
    assert_eq!(psp.succeeded_charges_for("pay_ok"), 2);
    assert_eq!(psp.succeeded_charges_for("pay_other"), 0);
    let charges = psp.charges();
    assert_eq!(charges.len(), 2);
    assert_eq!(charges[0].payment_method, "pm_card_visa");
    assert_eq!(charges[1].payment_method, "pm_card_mastercard");
    assert_eq!(charges[0].idempotency_key, None);
    assert!(charges.iter().all(|c| c.outcome == "succeeded"));

    // The inspection endpoint serves the same data, without auth.
    let listed: Vec<FakeCharge> = client
        .get(format!("{}/_fake/charges", psp.base_url()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(listed, charges);

    // And the PaymentIntent can be retrieved.
    let (status, _, pi) = read(
        get(
            &client,
            &psp,
            &format!("/v1/payment_intents/{}", charges[0].id),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(pi["id"], charges[0].id.as_str());
    assert_eq!(pi["status"], "succeeded");
}

#[tokio::test]
async fn declines_answer_402_with_the_payment_intent() {
    let psp = start().await;
    let client = client();
    let cases = [
        ("pm_card_visa_chargeDeclined", "generic_decline"),
        (
            "pm_card_chargeDeclinedInsufficientFunds",
            "insufficient_funds",
        ),
    ];
    for (token, decline_code) in cases {
        let response = create(&client, &psp, &charge_form(token, "pay_declined"), None)
            .await
            .expect("answered");
        let (status, _, body) = read(response).await;
        assert_eq!(status, 402, "{body}");
        let error = &body["error"];
        assert_eq!(error["type"], "card_error");
        assert_eq!(error["code"], "card_declined");
        assert_eq!(error["decline_code"], decline_code);
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        let pi = &error["payment_intent"];
        assert_eq!(pi["object"], "payment_intent");
        assert_eq!(pi["status"], "requires_payment_method");
        assert_eq!(pi["last_payment_error"]["type"], "card_error");
        assert_eq!(pi["last_payment_error"]["code"], "card_declined");
        assert_eq!(pi["last_payment_error"]["decline_code"], decline_code);
        assert_eq!(pi["metadata"]["payment_id"], "pay_declined");
    }
    assert_eq!(
        create(
            &client,
            &psp,
            &charge_form("pm_card_visa_chargeDeclined", "p"),
            None
        )
        .await
        .map(|r| r.status().as_u16())
        .ok(),
        Some(402)
    );
    let first_message = psp.charges();
    assert_eq!(first_message.len(), 3);
    assert!(first_message
        .iter()
        .all(|c| c.status == "requires_payment_method"));
    assert_eq!(psp.succeeded_charges_for("pay_declined"), 0);
}

#[tokio::test]
async fn generic_decline_message_is_stripes() {
    let psp = start().await;
    let response = create(
        &client(),
        &psp,
        &charge_form("pm_card_visa_chargeDeclined", "p"),
        None,
    )
    .await
    .expect("answered");
    let (_, _, body) = read(response).await;
    assert_eq!(body["error"]["message"], "Your card was declined.");
}

#[tokio::test]
async fn unknown_token_is_400_resource_missing_and_creates_nothing() {
    let psp = start().await;
    let response = create(&client(), &psp, &charge_form("pm_card_nope", "p"), None)
        .await
        .expect("answered");
    let (status, _, body) = read(response).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"error": {
            "type": "invalid_request_error",
            "code": "resource_missing",
            "param": "payment_method",
            "message": "No such PaymentMethod: 'pm_card_nope'",
        }})
    );
    assert!(psp.charges().is_empty());
}

#[tokio::test]
async fn missing_or_bad_parameters_are_400_and_create_nothing() {
    let psp = start().await;
    let client = client();
    let without = |name: &str| -> Vec<(String, String)> {
        charge_form("pm_card_visa", "p")
            .into_iter()
            .filter(|(k, _)| k != name)
            .collect()
    };
    for (form, code, param) in [
        (without("amount"), "parameter_missing", "amount"),
        (without("currency"), "parameter_missing", "currency"),
        (
            without("payment_method"),
            "parameter_missing",
            "payment_method",
        ),
    ] {
        let (status, _, body) =
            read(create(&client, &psp, &form, None).await.expect("answered")).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], code);
        assert_eq!(body["error"]["param"], param);
    }
    let mut bad_amount = without("amount");
    bad_amount.push(("amount".into(), "12.50".into()));
    let (status, _, body) = read(
        create(&client, &psp, &bad_amount, None)
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "parameter_invalid_integer");
    assert_eq!(body["error"]["param"], "amount");
    assert!(psp.charges().is_empty());
}

#[tokio::test]
async fn wrong_or_missing_api_key_is_401_and_counted() {
    let psp = start().await;
    let client = client();
    let url = format!("{}/v1/payment_intents", psp.base_url());
    let form = charge_form("pm_card_visa", "p");
    let expected =
        json!({"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}});

    let wrong = client
        .post(&url)
        .bearer_auth("sk_test_wrong")
        .form(&form)
        .send()
        .await
        .expect("answered");
    assert_eq!(read(wrong).await, (401, false, expected.clone()));
    let missing = client
        .post(&url)
        .form(&form)
        .send()
        .await
        .expect("answered");
    assert_eq!(read(missing).await, (401, false, expected.clone()));
    let get_missing = client
        .get(format!("{}/v1/payment_intents/pi_x", psp.base_url()))
        .send()
        .await
        .expect("answered");
    assert_eq!(get_missing.status().as_u16(), 401);

    assert!(psp.charges().is_empty());
    assert_eq!(psp.requests_seen(), 3);
    // The inspection endpoint is not part of the PSP's wire protocol and is not counted.
    let inspected = client
        .get(format!("{}/_fake/charges", psp.base_url()))
        .send()
        .await
        .expect("answered");
    assert_eq!(inspected.status().as_u16(), 200);
    assert_eq!(psp.requests_seen(), 3);
    let ok = create(&client, &psp, &form, None).await.expect("answered");
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(psp.requests_seen(), 4);
}

#[tokio::test]
async fn unknown_payment_intent_is_404_resource_missing() {
    let psp = start().await;
    let (status, _, body) =
        read(get(&client(), &psp, "/v1/payment_intents/pi_missing").await).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "resource_missing");
    assert_eq!(body["error"]["param"], "id");
}

async fn cancel(client: &reqwest::Client, base_url: &str, id: &str) -> (u16, bool, Value) {
    let response = client
        .post(format!("{base_url}/v1/payment_intents/{id}/cancel"))
        .bearer_auth(DEFAULT_API_KEY)
        .form(&[("cancellation_reason", "abandoned")])
        .send()
        .await
        .expect("answered");
    read(response).await
}

#[tokio::test]
async fn unconfirmed_intent_fences_then_cancels() {
    let psp = start().await;
    let client = client();
    // Any known token is accepted when nothing is confirmed, even one that would fail. Like
    // Stripe, the fake refuses confirm-only parameters without confirm=true, so the fence
    // leaves `error_on_requires_action` out.
    let mut form = charge_form("pm_fake_error_before_charge", "pay_fenced");
    form.retain(|(k, _)| k != "confirm" && k != "error_on_requires_action");
    form.push(("confirm".into(), "false".into()));
    let (status, _, pi) = read(
        create(&client, &psp, &form, Some("fence-1"))
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 200, "{pi}");
    assert_eq!(pi["status"], "requires_confirmation");
    assert_eq!(pi["latest_charge"], Value::Null);
    let id = pi["id"].as_str().expect("id").to_owned();
    assert_eq!(psp.succeeded_charges_for("pay_fenced"), 0);

    let (status, _, canceled) = cancel(&client, &psp.base_url(), &id).await;
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(canceled["id"], id.as_str());
    assert_eq!(canceled["status"], "canceled");
    assert_eq!(canceled["cancellation_reason"], "abandoned");
    assert_eq!(psp.charges()[0].status, "canceled");
    assert_eq!(psp.charges()[0].outcome, "canceled");

    // A canceled intent cannot be canceled again.
    let (status, _, body) = cancel(&client, &psp.base_url(), &id).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "payment_intent_unexpected_state");

    // Nor can a succeeded one.
    let (_, _, pi) = read(
        create(&client, &psp, &charge_form("pm_card_visa", "pay_x"), None)
            .await
            .expect("answered"),
    )
    .await;
    let succeeded_id = pi["id"].as_str().expect("id");
    let (status, _, body) = cancel(&client, &psp.base_url(), succeeded_id).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(psp.succeeded_charges_for("pay_x"), 1);

    // Unknown ids are 404.
    let (status, _, _) = cancel(&client, &psp.base_url(), "pi_missing").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn declined_intent_can_be_canceled() {
    let psp = start().await;
    let client = client();
    let (_, _, body) = read(
        create(
            &client,
            &psp,
            &charge_form("pm_card_visa_chargeDeclined", "p"),
            None,
        )
        .await
        .expect("answered"),
    )
    .await;
    let id = body["error"]["payment_intent"]["id"].as_str().expect("id");
    let (status, _, pi) = cancel(&client, &psp.base_url(), id).await;
    assert_eq!(status, 200);
    assert_eq!(pi["status"], "canceled");
}

#[tokio::test]
async fn search_by_payment_id_metadata() {
    let psp = start().await;
    let client = client();
    for (token, payment_id) in [
        ("pm_card_visa", "pay_A"),
        ("pm_card_visa_chargeDeclined", "pay_A"),
        ("pm_card_visa", "pay_B"),
    ] {
        create(&client, &psp, &charge_form(token, payment_id), None)
            .await
            .expect("answered");
    }
    let search = |query: &str| {
        let client = client.clone();
        let url = format!("{}/v1/payment_intents/search", psp.base_url());
        let query = query.to_owned();
        async move {
            let response = client
                .get(url)
                .bearer_auth(DEFAULT_API_KEY)
                .query(&[("query", query)])
                .send()
                .await
                .expect("answered");
            read(response).await
        }
    };

    for query in [
        "metadata['payment_id']:'pay_A'",
        "metadata[\"payment_id\"]:\"pay_A\"",
    ] {
        let (status, _, body) = search(query).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["object"], "search_result");
        assert_eq!(body["has_more"], false);
        assert_eq!(body["url"], "/v1/payment_intents/search");
        let data = body["data"].as_array().expect("data");
        assert_eq!(data.len(), 2);
        assert!(data
            .iter()
            .all(|pi| pi["metadata"]["payment_id"] == "pay_A"));
        assert_eq!(data[0]["status"], "succeeded");
        assert_eq!(data[1]["status"], "requires_payment_method");
    }
    let (_, _, body) = search("metadata['payment_id']:'pay_none'").await;
    assert_eq!(body["data"], json!([]));

    let (status, _, body) = search("status:'succeeded'").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn confirm_only_parameter_without_confirm_is_400_and_stores_nothing() {
    let psp = start().await;
    let client = client();
    // GIVEN payonce's charge form turned into a fence, but still carrying error_on_requires_action
    let mut form = charge_form("pm_card_visa", "pay_fence");
    form.retain(|(k, _)| k != "confirm");
    form.push(("confirm".into(), "false".into()));
    // WHEN it is sent under a key
    let (status, replayed, body) = read(
        create(&client, &psp, &form, Some("fence-key"))
            .await
            .expect("answered"),
    )
    .await;
    // THEN 400 naming the parameter, nothing created
    assert_eq!((status, replayed), (400, false));
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["param"], "error_on_requires_action");
    assert!(psp.charges().is_empty());
    // AND nothing was stored under the key: a valid request with it runs normally
    let (status, replayed, pi) = read(
        create(
            &client,
            &psp,
            &charge_form("pm_card_visa", "pay_fence"),
            Some("fence-key"),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, replayed), (200, false), "{pi}");
    assert_eq!(psp.succeeded_charges_for("pay_fence"), 1);
}

#[tokio::test]
async fn amounts_outside_the_currency_limits_are_400_and_create_nothing() {
    let psp = start().await;
    let client = client();
    for (amount, currency, code) in [
        ("49", "jpy", "amount_too_small"),
        ("29", "gbp", "amount_too_small"),
        ("999", "thb", "amount_too_small"),
        ("100000000", "usd", "amount_too_large"),
    ] {
        let mut form = charge_form("pm_card_visa", "p");
        form.retain(|(k, _)| k != "amount" && k != "currency");
        form.push(("amount".into(), amount.into()));
        form.push(("currency".into(), currency.into()));
        let (status, _, body) =
            read(create(&client, &psp, &form, None).await.expect("answered")).await;
        assert_eq!(status, 400, "{amount} {currency}");
        assert_eq!(body["error"]["code"], code);
        assert_eq!(body["error"]["param"], "amount");
    }
    assert!(psp.charges().is_empty());
}
