//! Refunds over HTTP: `POST /v1/refunds` under an idempotency key, the list and retrieve
//! endpoints, the `GET /_fake/refunds` inspection endpoint, and refund webhooks driven by the
//! ticker.

use std::time::Duration;

use payonce_fake_psp::{FakePspConfig, FakeRefund, RunningFakePsp, DEFAULT_API_KEY};
use serde_json::{json, Value};

use crate::support::{charge_form, client, create, get, read, start, start_with, Receiver};

const SECRET: &str = "whsec_test_refunds";

/// Charges 3000 jpy with `token` for `payment_id`; returns the PaymentIntent id.
async fn paid(
    client: &reqwest::Client,
    psp: &RunningFakePsp,
    token: &str,
    payment_id: &str,
) -> String {
    let (status, _, pi) = read(
        create(client, psp, &charge_form(token, payment_id), None)
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 200, "{pi}");
    pi["id"].as_str().expect("id").to_owned()
}

/// `POST /v1/refunds` with the form payonce sends, under `key`.
async fn refund(
    client: &reqwest::Client,
    psp: &RunningFakePsp,
    form: &[(&str, &str)],
    key: &str,
) -> (u16, bool, Value) {
    let response = client
        .post(format!("{}/v1/refunds", psp.base_url()))
        .bearer_auth(DEFAULT_API_KEY)
        .header("Idempotency-Key", key)
        .form(form)
        .send()
        .await
        .expect("answered");
    read(response).await
}

#[tokio::test]
async fn refunds_are_created_once_per_key_and_listed_for_inspection() {
    // GIVEN a succeeded charge
    let psp = start().await;
    let client = client();
    let pi = paid(&client, &psp, "pm_card_visa", "pay_r").await;
    let form = [
        ("payment_intent", pi.as_str()),
        ("amount", "1200"),
        ("reason", "requested_by_customer"),
        ("metadata[payment_id]", "pay_r"),
        ("metadata[refund_id]", "ref_1"),
    ];
    // WHEN it is refunded in part, twice under the same key
    let (status, replayed, first) = refund(&client, &psp, &form, "payonce-refund-pay_r-1").await;
    let (again_status, again_replayed, again) =
        refund(&client, &psp, &form, "payonce-refund-pay_r-1").await;
    // THEN one refund exists; the second answer is the first, replayed
    assert_eq!((status, replayed), (200, false), "{first}");
    assert_eq!((again_status, again_replayed), (200, true));
    assert_eq!(again, first);
    assert_eq!(first["object"], "refund");
    assert_eq!(first["status"], "succeeded");
    assert_eq!(first["amount"], 1200);
    assert_eq!(first["payment_intent"], pi.as_str());
    let refund_id = first["id"].as_str().expect("id").to_owned();
    assert!(refund_id.starts_with("re_"));

    // AND more than is left is refused, storing nothing
    let (status, _, refused) = refund(
        &client,
        &psp,
        &[("payment_intent", pi.as_str()), ("amount", "1801")],
        "payonce-refund-pay_r-2",
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["type"], "invalid_request_error");
    assert_eq!(refused["error"]["param"], "amount");

    // AND the inspection endpoint lists it, without auth and without counting as a PSP request
    let seen = psp.requests_seen();
    let listed: Vec<FakeRefund> = client
        .get(format!("{}/_fake/refunds", psp.base_url()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(psp.requests_seen(), seen);
    assert_eq!(listed, psp.refunds());
    assert_eq!(listed.len(), 1);
    let entry = &listed[0];
    assert_eq!(entry.provider, "stripe");
    assert_eq!(entry.id, refund_id);
    assert_eq!(
        (entry.outcome.as_str(), entry.status.as_str()),
        ("succeeded", "succeeded")
    );
    assert_eq!((entry.amount, entry.currency.as_str()), (1200, "jpy"));
    assert_eq!(entry.payment_id.as_deref(), Some("pay_r"));
    assert_eq!(entry.refund_id.as_deref(), Some("ref_1"));
    assert_eq!(
        entry.idempotency_key.as_deref(),
        Some("payonce-refund-pay_r-1")
    );
    assert_eq!(entry.payment_intent, pi);
    // AND the charge entry names its provider and payment
    let charges = psp.charges();
    assert_eq!(
        (
            charges[0].provider.as_str(),
            charges[0].payment_id.as_deref()
        ),
        ("stripe", Some("pay_r"))
    );

    // AND the wire list and retrieve see it at once
    let (status, _, list) = read(
        get(
            &client,
            &psp,
            &format!("/v1/refunds?payment_intent={pi}&limit=10"),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["object"], "list");
    assert_eq!(list["url"], "/v1/refunds");
    assert_eq!(list["has_more"], false);
    assert_eq!(list["data"], json!([first]));
    let (status, _, one) =
        read(get(&client, &psp, &format!("/v1/refunds/{refund_id}")).await).await;
    assert_eq!((status, one), (200, first));
}

#[tokio::test]
async fn a_refund_fail_charge_sends_created_then_failed_webhooks() {
    // GIVEN a PSP whose pm_card_refundFail refunds fail after 300 ms
    let mut receiver = Receiver::start(SECRET, 0).await;
    let psp = start_with(FakePspConfig {
        webhook_url: Some(receiver.url.clone()),
        webhook_secret: SECRET.to_owned(),
        refund_fail_after: Duration::from_millis(300),
        ..FakePspConfig::default()
    })
    .await;
    let client = client();
    let pi = paid(&client, &psp, "pm_card_refundFail", "pay_f").await;
    assert_eq!(receiver.next().await.kind(), "payment_intent.succeeded");
    // WHEN it is refunded in full
    let (status, _, created) = refund(&client, &psp, &[("payment_intent", pi.as_str())], "k").await;
    assert_eq!((status, &created["status"]), (200, &json!("succeeded")));
    // THEN the receiver gets refund.created and charge.refunded, then, by the ticker alone,
    // refund.updated and refund.failed, all signed
    let mut kinds = Vec::new();
    for _ in 0..4 {
        let delivery = receiver.next().await;
        assert!(delivery.signature_valid);
        assert_eq!(delivery.event["api_version"], "2024-10-28.acacia");
        kinds.push(delivery.kind().to_owned());
        if delivery.kind() == "refund.failed" {
            let object = &delivery.event["data"]["object"];
            assert_eq!(object["id"], created["id"]);
            assert_eq!(object["failure_reason"], "expired_or_canceled_card");
        }
    }
    assert_eq!(
        kinds,
        [
            "refund.created",
            "charge.refunded",
            "refund.updated",
            "refund.failed"
        ]
    );
    // AND the refund reads failed, and the amount can be refunded again
    assert_eq!(psp.refunds()[0].outcome, "failed");
    let (status, _, again) = refund(&client, &psp, &[("payment_intent", pi.as_str())], "k2").await;
    assert_eq!((status, &again["amount"]), (200, &json!(3000)));
}
