//! Customer actions and two-step payments over HTTP: a 3-D Secure card sent to the fake's
//! authentication page and back, the page itself, manual capture and its lapse, as a browser
//! and payonce's PSP client see them, with the webhooks they cause.

use std::time::Duration;

use payonce_fake_psp::{FakePspConfig, RunningFakePsp, DEFAULT_API_KEY};
use serde_json::{json, Value};

use crate::support::{client, get, read, start_with, Receiver};

const SECRET: &str = "whsec_test_actions";
const RETURN_URL: &str = "https://shop.example/return?order=7";

async fn psp_and_receiver(config: FakePspConfig) -> (RunningFakePsp, Receiver) {
    let receiver = Receiver::start(SECRET, 0).await;
    let psp = start_with(FakePspConfig {
        webhook_url: Some(receiver.url.clone()),
        webhook_secret: SECRET.to_owned(),
        ..config
    })
    .await;
    (psp, receiver)
}

/// A browser that does not follow redirects, so the test sees the 303 itself.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client builds")
}

/// An authenticated form POST of a `/v1` path, with an optional idempotency key.
async fn post(
    psp: &RunningFakePsp,
    path: &str,
    form: &[(&str, &str)],
    key: Option<&str>,
) -> (u16, bool, Value) {
    let mut request = client()
        .post(format!("{}{path}", psp.base_url()))
        .bearer_auth(DEFAULT_API_KEY)
        .form(form);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    read(request.send().await.expect("answered")).await
}

/// `GET /_fake/charges` as raw JSON, so the test sees the wire fields themselves.
async fn charge_rows(psp: &RunningFakePsp) -> Vec<Value> {
    client()
        .get(format!("{}/_fake/charges", psp.base_url()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON")
}

fn create_form<'a>(token: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut form = vec![
        ("amount", "3000"),
        ("currency", "jpy"),
        ("payment_method", token),
        ("confirm", "true"),
        ("metadata[payment_id]", "pay_1"),
    ];
    form.extend_from_slice(extra);
    form
}

#[tokio::test]
async fn a_three_ds_card_is_authenticated_on_the_fake_page_and_sent_back() {
    let (psp, mut receiver) = psp_and_receiver(FakePspConfig::default()).await;
    // GIVEN a 3-D Secure card confirmed with a return_url
    let form = create_form(
        "pm_card_threeDSecure2Required",
        &[("return_url", RETURN_URL)],
    );
    let (status, _, pi) = post(&psp, "/v1/payment_intents", &form, Some("k-3ds")).await;
    assert_eq!(status, 200, "{pi}");
    let id = pi["id"].as_str().expect("id").to_owned();
    // THEN it waits, sending the customer to this very server's page and back
    let page_url = format!("{}/_fake/authenticate/{id}", psp.base_url());
    assert_eq!(pi["status"], "requires_action");
    assert_eq!(
        pi["next_action"],
        json!({
            "type": "redirect_to_url",
            "redirect_to_url": {"url": page_url, "return_url": RETURN_URL},
        })
    );
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(delivery.kind(), "payment_intent.requires_action");
    assert_eq!(delivery.event["data"]["object"]["id"], id.as_str());
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "pending");
    assert_eq!(rows[0]["status"], "requires_action");
    let seen = psp.requests_seen();

    // WHEN the customer's browser opens the page
    let page = browser().get(&page_url).send().await.expect("answered");
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(
        page.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"text/html; charset=utf-8"[..])
    );
    let html = page.text().await.expect("HTML");
    // THEN it names the amount and offers both answers, posted to the page itself
    assert!(html.contains("3000 JPY"), "{html}");
    let action = format!("action=\"/_fake/authenticate/{id}\"");
    assert_eq!(html.matches(&action).count(), 2, "{html}");
    assert!(html.contains("value=\"complete\"") && html.contains(">Complete</button>"));
    assert!(html.contains("value=\"fail\"") && html.contains(">Fail</button>"));

    // WHEN the customer completes it
    let answer = browser()
        .post(&page_url)
        .form(&[("result", "complete")])
        .send()
        .await
        .expect("answered");
    // THEN 303 back to the return_url, its query kept
    assert_eq!(answer.status().as_u16(), 303);
    assert_eq!(
        answer
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok()),
        Some(
            format!(
                "https://shop.example/return?order=7&payment_intent={id}&redirect_status=succeeded"
            )
            .as_str()
        )
    );
    // AND the PaymentIntent succeeded, with its signed event
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(delivery.kind(), "payment_intent.succeeded");
    assert_eq!(delivery.event["data"]["object"]["status"], "succeeded");
    let (_, _, now) = read(get(&client(), &psp, &format!("/v1/payment_intents/{id}")).await).await;
    assert_eq!(now["status"], "succeeded");
    assert_eq!(now["amount_received"], 3000);
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "succeeded");
    assert_eq!(rows[0]["amount_captured"], 3000);
    assert_eq!(rows[0]["capture_method"], "automatic");
    assert_eq!(rows[0]["idempotency_key"], "k-3ds");
    // AND the page is not an API request
    assert_eq!(psp.requests_seen(), seen + 1);

    // WHEN the answer is posted again (a second click, a reload)
    let again = browser()
        .post(&page_url)
        .form(&[("result", "fail")])
        .send()
        .await
        .expect("answered");
    // THEN 409, no redirect, no second event, nothing changed
    assert_eq!(again.status().as_u16(), 409);
    assert!(again.headers().get("location").is_none());
    assert!(receiver
        .next_within(Duration::from_millis(300))
        .await
        .is_none());
    assert_eq!(charge_rows(&psp).await, rows);
    // AND an unknown PaymentIntent has no page
    let missing = browser()
        .get(format!("{}/_fake/authenticate/pi_nope", psp.base_url()))
        .send()
        .await
        .expect("answered");
    assert_eq!(missing.status().as_u16(), 404);
}

#[tokio::test]
async fn a_failed_authentication_is_sent_back_failed() {
    let (psp, mut receiver) = psp_and_receiver(FakePspConfig::default()).await;
    let form = create_form(
        "pm_card_authenticationRequired",
        &[("return_url", "https://shop.example/return")],
    );
    let (_, _, pi) = post(&psp, "/v1/payment_intents", &form, None).await;
    let id = pi["id"].as_str().expect("id").to_owned();
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.requires_action"
    );
    let answer = browser()
        .post(format!("{}/_fake/authenticate/{id}", psp.base_url()))
        .form(&[("result", "fail")])
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status().as_u16(), 303);
    assert_eq!(
        answer
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok()),
        Some(
            format!("https://shop.example/return?payment_intent={id}&redirect_status=failed")
                .as_str()
        )
    );
    let delivery = receiver.next().await;
    assert_eq!(delivery.kind(), "payment_intent.payment_failed");
    assert_eq!(
        delivery.event["data"]["object"]["last_payment_error"]["code"],
        "payment_intent_authentication_failure"
    );
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "failed");
    assert_eq!(rows[0]["status"], "requires_payment_method");
}

#[tokio::test]
async fn a_three_ds_card_with_error_on_requires_action_is_a_402() {
    let (psp, mut receiver) = psp_and_receiver(FakePspConfig::default()).await;
    let form = create_form(
        "pm_card_threeDSecure2Required",
        &[("error_on_requires_action", "true")],
    );
    let (status, _, body) = post(&psp, "/v1/payment_intents", &form, Some("k")).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["type"], "card_error");
    assert_eq!(body["error"]["code"], "authentication_required");
    assert_eq!(
        body["error"]["payment_intent"]["status"],
        "requires_payment_method"
    );
    assert_eq!(
        body["error"]["payment_intent"]["last_payment_error"]["code"],
        "authentication_required"
    );
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.payment_failed"
    );
    assert_eq!(charge_rows(&psp).await[0]["outcome"], "failed");
}

#[tokio::test]
async fn a_manual_capture_is_authorized_captured_in_part_and_refunded_within_the_capture() {
    let (psp, mut receiver) = psp_and_receiver(FakePspConfig::default()).await;
    // GIVEN an authorization
    let form = create_form(
        "pm_card_visa",
        &[("capture_method", "manual"), ("expand[]", "latest_charge")],
    );
    let (status, _, pi) = post(&psp, "/v1/payment_intents", &form, Some("k-auth")).await;
    assert_eq!(status, 200, "{pi}");
    let id = pi["id"].as_str().expect("id").to_owned();
    assert_eq!(pi["status"], "requires_capture");
    assert_eq!(pi["amount_capturable"], 3000);
    assert_eq!(pi["amount_received"], 0);
    let capture_before = pi["latest_charge"]["payment_method_details"]["card"]["capture_before"]
        .as_i64()
        .expect("capture_before");
    let created = pi["created"].as_i64().expect("created");
    assert!(
        (created + 7 * 24 * 3600 - capture_before).abs() <= 1,
        "{pi}"
    );
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.amount_capturable_updated"
    );
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "authorized");
    assert_eq!(rows[0]["capture_method"], "manual");
    assert_eq!(rows[0]["amount_captured"], Value::Null);
    assert_eq!(rows[0]["captures"], json!([]));
    assert_eq!(rows[0]["cancels"], json!([]));

    // WHEN 1200 is captured under a key, and the request is sent again
    let path = format!("/v1/payment_intents/{id}/capture");
    let capture = [("amount_to_capture", "1200")];
    let (status, replayed, captured) = post(&psp, &path, &capture, Some("k-cap")).await;
    let (again_status, again_replayed, again) = post(&psp, &path, &capture, Some("k-cap")).await;
    // THEN one capture took effect, answered twice the same
    assert_eq!((status, replayed), (200, false), "{captured}");
    assert_eq!((again_status, again_replayed), (200, true));
    assert_eq!(again, captured);
    assert_eq!(captured["status"], "succeeded");
    assert_eq!(captured["amount_received"], 1200);
    assert_eq!(captured["amount_capturable"], 0);
    let delivery = receiver.next().await;
    assert_eq!(delivery.kind(), "payment_intent.succeeded");
    assert_eq!(delivery.event["request"]["idempotency_key"], "k-cap");
    assert!(receiver
        .next_within(Duration::from_millis(300))
        .await
        .is_none());
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "succeeded");
    assert_eq!(rows[0]["amount_captured"], 1200);
    assert_eq!(
        rows[0]["captures"],
        json!([{"amount": 1200, "idempotency_key": "k-cap"}])
    );

    // AND a capture from succeeded, or too much, is refused
    let (status, _, wrong) = post(&psp, &path, &[], Some("k-cap-2")).await;
    assert_eq!(status, 400);
    assert_eq!(wrong["error"]["code"], "payment_intent_unexpected_state");

    // AND refunds are bounded by the 1200 captured
    let refund = [("payment_intent", id.as_str()), ("amount", "1201")];
    let (status, _, refused) = post(&psp, "/v1/refunds", &refund, Some("r-1")).await;
    assert_eq!(status, 400, "{refused}");
    let (status, _, refunded) = post(
        &psp,
        "/v1/refunds",
        &[("payment_intent", id.as_str())],
        Some("r-2"),
    )
    .await;
    assert_eq!(status, 200, "{refunded}");
    assert_eq!(refunded["amount"], 1200);
}

#[tokio::test]
async fn an_authorization_cancelled_by_the_merchant_is_canceled_with_its_event() {
    let (psp, mut receiver) = psp_and_receiver(FakePspConfig::default()).await;
    let form = create_form("pm_card_visa", &[("capture_method", "manual")]);
    let (_, _, pi) = post(&psp, "/v1/payment_intents", &form, Some("k-1")).await;
    let id = pi["id"].as_str().expect("id").to_owned();
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.amount_capturable_updated"
    );
    // WHEN the merchant cancels it from requires_capture
    let (status, _, canceled) = post(
        &psp,
        &format!("/v1/payment_intents/{id}/cancel"),
        &[("cancellation_reason", "abandoned")],
        Some("k-cancel"),
    )
    .await;
    // THEN canceled, with its event and the cancel recorded under its key
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(canceled["status"], "canceled");
    assert_eq!(canceled["cancellation_reason"], "abandoned");
    assert_eq!(canceled["amount_capturable"], 0);
    assert_eq!(receiver.next().await.kind(), "payment_intent.canceled");
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "canceled");
    assert_eq!(
        rows[0]["cancels"],
        json!([{"idempotency_key": "k-cancel", "cancellation_reason": "abandoned"}])
    );
}

#[tokio::test]
async fn an_authorization_left_uncaptured_is_canceled_automatically_when_it_lapses() {
    // GIVEN authorizations that lapse after 400 ms
    let (psp, mut receiver) = psp_and_receiver(FakePspConfig {
        authorization_expires_after: Duration::from_millis(400),
        ..FakePspConfig::default()
    })
    .await;
    let form = create_form("pm_card_visa", &[("capture_method", "manual")]);
    let (_, _, pi) = post(&psp, "/v1/payment_intents", &form, Some("k-2")).await;
    let id = pi["id"].as_str().expect("id").to_owned();
    assert_eq!(
        receiver.next().await.kind(),
        "payment_intent.amount_capturable_updated"
    );
    // WHEN nobody captures it, THEN the PSP cancels it (automatic) and says so
    let delivery = receiver.next().await;
    assert!(delivery.signature_valid);
    assert_eq!(delivery.kind(), "payment_intent.canceled");
    assert_eq!(delivery.event["data"]["object"]["id"], id.as_str());
    assert_eq!(delivery.event["data"]["object"]["status"], "canceled");
    assert_eq!(
        delivery.event["data"]["object"]["cancellation_reason"],
        "automatic"
    );
    let rows = charge_rows(&psp).await;
    assert_eq!(rows[0]["outcome"], "canceled");
    assert_eq!(
        rows[0]["cancels"],
        json!([{"idempotency_key": null, "cancellation_reason": "automatic"}])
    );
    assert_eq!(rows[0]["captures"], json!([]));
    // AND it can no longer be captured
    let (status, _, late) = post(
        &psp,
        &format!("/v1/payment_intents/{id}/capture"),
        &[],
        Some("k-late"),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(late["error"]["code"], "payment_intent_unexpected_state");
}
