//! The Omise face over real HTTP: Basic authentication and `Omise-Version`, the connection cut of
//! a lost response, Omise-signed webhooks, the inspection endpoints, the binary's `--provider`.
//! The face's rules themselves are tested on the model (`omise` module).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use payonce_fake_psp::{
    sign_omise_webhook, FakePsp, FakePspConfig, Provider, RunningFakePsp, DEFAULT_API_KEY,
    DEFAULT_OMISE_WEBHOOK_SECRET,
};
use serde_json::Value;

use crate::support::{client, loopback, start_with};

/// The form payonce's Omise adapter sends.
fn charge_form(token: &str, payment_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("amount", "3000".to_owned()),
        ("currency", "jpy".to_owned()),
        ("card", token.to_owned()),
        ("capture", "true".to_owned()),
        ("description", payment_id.to_owned()),
        ("metadata[payment_id]", payment_id.to_owned()),
    ]
}

/// An Omise request as payonce's adapter makes it: Basic with the key and an empty password,
/// the pinned version.
fn omise(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    key: &str,
) -> reqwest::RequestBuilder {
    client
        .request(method, url)
        .basic_auth(key, Some(""))
        .header("Omise-Version", "2019-05-29")
}

async fn create(
    client: &reqwest::Client,
    psp: &RunningFakePsp,
    token: &str,
    payment_id: &str,
    key: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let mut request = omise(
        client,
        reqwest::Method::POST,
        format!("{}/charges", psp.base_url()),
        DEFAULT_API_KEY,
    )
    .form(&charge_form(token, payment_id));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await
}

async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_omise_face_speaks_basic_auth_and_accepts_the_version_header() {
    let psp = start_with(FakePspConfig::omise()).await;
    assert_eq!(psp.provider(), Provider::Omise);
    let client = client();

    // The adapter's request: a successful charge object.
    let (status, charge) = status_and_json(
        create(&client, &psp, "pm_card_visa", "pay_1", Some("k1"))
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 200, "{charge}");
    assert_eq!(charge["object"], "charge");
    assert_eq!(charge["status"], "successful");
    assert!(charge["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("chrg_test_")));

    // A wrong key: 401 authentication_failure, nothing created.
    let (status, refused) = status_and_json(
        omise(
            &client,
            reqwest::Method::POST,
            format!("{}/charges", psp.base_url()),
            "skey_test_wrong",
        )
        .form(&charge_form("pm_card_visa", "pay_2"))
        .send()
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(refused["object"], "error");
    assert_eq!(refused["code"], "authentication_failure");

    // Retrieve by id, and Stripe's paths are not served.
    let id = charge["id"].as_str().unwrap_or_default();
    let (status, retrieved) = status_and_json(
        omise(
            &client,
            reqwest::Method::GET,
            format!("{}/charges/{id}", psp.base_url()),
            DEFAULT_API_KEY,
        )
        .send()
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, retrieved["id"].as_str()), (200, Some(id)));
    let (status, missing) = status_and_json(
        omise(
            &client,
            reqwest::Method::POST,
            format!("{}/v1/payment_intents", psp.base_url()),
            DEFAULT_API_KEY,
        )
        .send()
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, missing["code"].as_str()), (404, Some("not_found")));

    // The inspection endpoint carries the crate's documented fields for the Omise face.
    let listed: Value = client
        .get(format!("{}/_fake/charges", psp.base_url()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    let entry = &listed[0];
    for (field, expected) in [
        ("provider", "omise"),
        ("id", id),
        ("status", "successful"),
        ("outcome", "succeeded"),
        ("currency", "jpy"),
        ("payment_id", "pay_1"),
        ("idempotency_key", "k1"),
    ] {
        assert_eq!(entry[field], expected, "{field}: {entry}");
    }
    assert_eq!(entry["amount"], 3000);
    assert_eq!(psp.requests_seen(), 4);
}

#[tokio::test]
async fn a_lost_response_charges_then_cuts_the_connection_and_the_key_replays() {
    let psp = start_with(FakePspConfig::omise()).await;
    let client = client();
    let lost = create(
        &client,
        &psp,
        "pm_fake_lost_response",
        "pay_lost",
        Some("k"),
    )
    .await
    .expect_err("no HTTP response at all");
    assert!(lost.status().is_none(), "{lost:?}");
    assert_eq!(psp.succeeded_charges_for("pay_lost"), 1);
    let response = create(
        &client,
        &psp,
        "pm_fake_lost_response",
        "pay_lost",
        Some("k"),
    )
    .await
    .expect("answered");
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let (status, charge) = status_and_json(response).await;
    assert_eq!(
        (status, charge["status"].as_str()),
        (200, Some("successful"))
    );
    assert_eq!(charge["id"], psp.charges()[0].id.as_str());
    assert_eq!(psp.charges().len(), 1);
}

/// One delivery: the event, and whether its Omise signature verified.
#[derive(Clone, Debug)]
struct Delivery {
    event: Value,
    signature_valid: bool,
}

#[derive(Clone)]
struct Sink {
    key: Vec<u8>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

async fn receive(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let timestamp = header("omise-signature-timestamp");
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let fresh = timestamp
        .parse::<u64>()
        .is_ok_and(|t| t.abs_diff(now_s) <= 300);
    let signature_valid =
        fresh && header("omise-signature") == sign_omise_webhook(&sink.key, &timestamp, &body);
    let event = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Ok(mut deliveries) = sink.deliveries.lock() {
        deliveries.push(Delivery {
            event,
            signature_valid,
        });
    }
    StatusCode::OK
}

#[tokio::test]
async fn webhooks_are_omise_events_signed_with_omise_signature() {
    // GIVEN a receiver verifying with the base64-decoded default secret
    let sink = Sink {
        key: base64::engine::general_purpose::STANDARD
            .decode(DEFAULT_OMISE_WEBHOOK_SECRET)
            .expect("base64"),
        deliveries: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind(loopback())
        .await
        .expect("bind");
    let url = format!("http://{}/webhooks", listener.local_addr().expect("addr"));
    let app = Router::new()
        .route("/webhooks", post(receive))
        .with_state(sink.clone());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let psp = start_with(FakePspConfig {
        webhook_url: Some(url),
        ..FakePspConfig::omise()
    })
    .await;
    let client = client();

    // WHEN a charge is made, a decline happens and a refund is made
    let (_, charge) = status_and_json(
        create(&client, &psp, "pm_card_visa", "pay_1", None)
            .await
            .expect("answered"),
    )
    .await;
    create(&client, &psp, "pm_card_visa_chargeDeclined", "pay_2", None)
        .await
        .expect("answered");
    let id = charge["id"].as_str().unwrap_or_default();
    let (status, refund) = status_and_json(
        omise(
            &client,
            reqwest::Method::POST,
            format!("{}/charges/{id}/refunds", psp.base_url()),
            DEFAULT_API_KEY,
        )
        .form(&[("amount", "1000"), ("metadata[refund_id]", "rf_1")])
        .send()
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(status, 200, "{refund}");

    // THEN three Omise events arrive in order, each signed
    let mut deliveries = Vec::new();
    for _ in 0..100 {
        deliveries = sink
            .deliveries
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default();
        if deliveries.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.abort();
    let keys: Vec<&str> = deliveries
        .iter()
        .map(|d| d.event["key"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["charge.create", "charge.create", "refund.create"]);
    for delivery in &deliveries {
        assert!(delivery.signature_valid, "{:?}", delivery.event);
        assert_eq!(delivery.event["object"], "event");
        assert_eq!(delivery.event["livemode"], false);
        assert!(delivery.event["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("evnt_test_")));
    }
    assert_eq!(deliveries[0].event["data"]["status"], "successful");
    assert_eq!(deliveries[1].event["data"]["status"], "failed");
    assert_eq!(
        deliveries[1].event["data"]["failure_code"],
        "payment_rejected"
    );
    assert_eq!(deliveries[2].event["data"], refund);
}

#[tokio::test]
async fn an_omise_face_with_a_secret_that_is_not_base64_does_not_start() {
    let started = FakePsp::start(
        FakePspConfig {
            webhook_secret: "whsec_payonce_fake".into(),
            ..FakePspConfig::omise()
        },
        loopback(),
    )
    .await;
    let error = started.expect_err("refused");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}

#[tokio::test]
async fn the_binary_serves_the_omise_face_with_provider_omise() {
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_payonce-fake-psp"))
            .args(["--provider", "omise", "--addr", "127.0.0.1:0"])
            .args(["--api-key", "skey_test_from_flag"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("binary starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout piped");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader task")
    .expect("a start-up line");
    let base_url = line
        .trim_end()
        .strip_prefix("fake PSP listening on ")
        .expect("announces its URL")
        .to_owned();
    let (status, missing) = status_and_json(
        omise(
            &client(),
            reqwest::Method::GET,
            format!("{base_url}/charges/chrg_test_missing"),
            "skey_test_from_flag",
        )
        .send()
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, missing["code"].as_str()), (404, Some("not_found")));
}
