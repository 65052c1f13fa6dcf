//! The PayPal face over real HTTP: OAuth client credentials and bearer tokens,
//! `PayPal-Request-Id` and `Prefer` as headers, the connection cut of a lost response, the
//! payer's page and its redirect, webhooks signed SHA256withRSA that verify with the public key
//! of the certificate served at `/_fake/paypal/cert.pem` over the exact signed string, a
//! configured key, and the binary's `--provider paypal`. The face's rules themselves are tested
//! on the model (`paypal` module).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use payonce_fake_psp::{
    paypal_signed_string, sign_paypal_webhook, FakePsp, FakePspConfig, PayPalSigner, Provider,
    RunningFakePsp, DEFAULT_API_KEY, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_PAYPAL_WEBHOOK_ID,
    PAYPAL_CERT_COMMON_NAME,
};
use serde_json::{json, Value};
use x509_cert::der::Decode;

use crate::support::{client, loopback, start_with};

/// One delivery as the receiver saw it: the raw body and the PayPal headers.
#[derive(Clone, Debug)]
struct Delivery {
    body: Vec<u8>,
    headers: HeaderMap,
}

impl Delivery {
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    fn event(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Clone, Default)]
struct Sink {
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl Sink {
    /// The deliveries once `count` have arrived (or what arrived within 5 s).
    async fn wait_for(&self, count: usize) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        for _ in 0..100 {
            deliveries = self
                .deliveries
                .lock()
                .map(|d| d.clone())
                .unwrap_or_default();
            if deliveries.len() >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        deliveries
    }
}

async fn receive(State(sink): State<Sink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if let Ok(mut deliveries) = sink.deliveries.lock() {
        deliveries.push(Delivery {
            body: body.to_vec(),
            headers,
        });
    }
    StatusCode::OK
}

/// A receiver at `/webhooks/paypal` keeping what it gets.
async fn receiver() -> (String, Sink, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(loopback())
        .await
        .expect("bind");
    let url = format!(
        "http://{}/webhooks/paypal",
        listener.local_addr().expect("addr")
    );
    let sink = Sink::default();
    let app = Router::new()
        .route("/webhooks/paypal", post(receive))
        .with_state(sink.clone());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, sink, server)
}

/// `POST /v1/oauth2/token` with these client credentials: status and body.
async fn token_call(base_url: &str, client_id: &str, secret: &str) -> (u16, Value) {
    let response = client()
        .post(format!("{base_url}/v1/oauth2/token"))
        .basic_auth(client_id, Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// An access token for these client credentials.
async fn token(base_url: &str, client_id: &str, secret: &str) -> String {
    let (status, body) = token_call(base_url, client_id, secret).await;
    assert_eq!(status, 200, "{body}");
    body["access_token"].as_str().unwrap_or_default().to_owned()
}

/// `POST /v2/checkout/orders` as payonce's adapter sends it.
async fn create_order(
    base_url: &str,
    token: &str,
    request_id: &str,
    body: &Value,
) -> reqwest::Result<reqwest::Response> {
    client()
        .post(format!("{base_url}/v2/checkout/orders"))
        .bearer_auth(token)
        .header("PayPal-Request-Id", request_id)
        .header("Prefer", "return=representation")
        .json(body)
        .send()
        .await
}

fn order_body(payment_id: &str, source: Value) -> Value {
    json!({
        "intent": "CAPTURE",
        "purchase_units": [{
            "custom_id": payment_id,
            "invoice_id": payment_id,
            "amount": {"currency_code": "USD", "value": "30.00"},
        }],
        "payment_source": source,
    })
}

async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The PKCS#1 RSA public key of a PEM certificate, read with x509-cert, and the certificate.
fn certificate_key(pem: &str) -> (x509_cert::Certificate, Vec<u8>) {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM base64");
    let certificate = x509_cert::Certificate::from_der(&der).expect("X.509");
    let key = certificate
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .as_bytes()
        .expect("whole bytes")
        .to_vec();
    (certificate, key)
}

/// Whether `delivery` verifies as PayPal's receivers verify it: the signature, base64, over
/// `<id>|<time>|<webhook_id>|<crc32 of the raw body>` with the certificate's public key.
fn verifies(delivery: &Delivery, certificate_pem: &str, webhook_id: &str) -> bool {
    let (_, key) = certificate_key(certificate_pem);
    let Ok(signature) = base64::engine::general_purpose::STANDARD
        .decode(delivery.header("paypal-transmission-sig"))
    else {
        return false;
    };
    let signed = paypal_signed_string(
        &delivery.header("paypal-transmission-id"),
        &delivery.header("paypal-transmission-time"),
        webhook_id,
        &delivery.body,
    );
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &key)
        .verify(signed.as_bytes(), &signature)
        .is_ok()
}

#[tokio::test]
async fn the_paypal_face_signs_webhooks_that_verify_with_the_served_certificate() {
    // GIVEN a PayPal face delivering to a receiver
    let (url, sink, server) = receiver().await;
    let psp: RunningFakePsp = start_with(FakePspConfig {
        webhook_url: Some(url),
        ..FakePspConfig::paypal()
    })
    .await;
    assert_eq!(psp.provider(), Provider::PayPal);
    let base_url = psp.base_url();
    // WHEN payonce gets a token and creates an order that is paid at once
    let token = token(&base_url, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY).await;
    let (status, order) = status_and_json(
        create_order(
            &base_url,
            &token,
            "payonce-charge-pay_1",
            &order_body("pay_1", json!({"card": {"vault_id": "pm_card_visa"}})),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, order["status"].as_str()), (201, Some("COMPLETED")));
    // THEN PAYMENT.CAPTURE.COMPLETED arrives with PayPal's headers
    let deliveries = sink.wait_for(1).await;
    server.abort();
    assert_eq!(deliveries.len(), 1);
    let delivery = &deliveries[0];
    assert_eq!(delivery.event()["event_type"], "PAYMENT.CAPTURE.COMPLETED");
    assert_eq!(
        delivery.event()["resource"]["supplementary_data"]["related_ids"]["order_id"],
        order["id"]
    );
    assert_eq!(delivery.header("paypal-auth-algo"), "SHA256withRSA");
    let cert_url = delivery.header("paypal-cert-url");
    assert_eq!(cert_url, format!("{base_url}/_fake/paypal/cert.pem"));
    assert_eq!(psp.paypal_cert_url().as_deref(), Some(cert_url.as_str()));
    let transmission_id = delivery.header("paypal-transmission-id");
    assert!(
        uuid::Uuid::parse_str(&transmission_id).is_ok(),
        "{transmission_id}"
    );
    let time = delivery.header("paypal-transmission-time");
    assert!(
        time.len() == 20 && time.ends_with('Z') && &time[10..11] == "T",
        "{time}"
    );
    // AND the certificate is served at PAYPAL-CERT-URL without credentials, not counted
    let seen = psp.requests_seen();
    let response = client().get(&cert_url).send().await.expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    let certificate_pem = response.text().await.expect("text");
    assert_eq!(psp.requests_seen(), seen);
    assert!(certificate_pem.starts_with("-----BEGIN CERTIFICATE-----\n"));
    let (certificate, _) = certificate_key(&certificate_pem);
    assert_eq!(
        certificate.tbs_certificate.subject.to_string(),
        format!("CN={PAYPAL_CERT_COMMON_NAME}")
    );
    // AND the signature verifies with its public key over the exact signed string, for our
    // webhook id only
    assert!(verifies(
        delivery,
        &certificate_pem,
        DEFAULT_PAYPAL_WEBHOOK_ID
    ));
    assert!(!verifies(delivery, &certificate_pem, "ANOTHERWEBHOOKID0"));
    let mut tampered = delivery.clone();
    tampered.body.push(b' ');
    assert!(!verifies(
        &tampered,
        &certificate_pem,
        DEFAULT_PAYPAL_WEBHOOK_ID
    ));
    // AND the exported signer signs exactly what was sent (PKCS#1 v1.5 is deterministic)
    let signer = psp.paypal_signer().expect("a PayPal signer");
    assert_eq!(signer.certificate_pem(), certificate_pem);
    assert_eq!(
        sign_paypal_webhook(
            &signer,
            &transmission_id,
            &time,
            DEFAULT_PAYPAL_WEBHOOK_ID,
            &delivery.body
        ),
        delivery.header("paypal-transmission-sig")
    );
    // AND the inspection endpoint lists the order with PayPal's object
    let listed: Value = client()
        .get(format!("{base_url}/_fake/charges"))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    let entry = &listed[0];
    for (field, expected) in [
        ("provider", "paypal"),
        ("status", "COMPLETED"),
        ("outcome", "succeeded"),
        ("payment_id", "pay_1"),
        ("idempotency_key", "payonce-charge-pay_1"),
        ("payment_method", "pm_card_visa"),
    ] {
        assert_eq!(entry[field], expected, "{field}: {entry}");
    }
    assert_eq!(entry["object"], order);
    // The token call and the create.
    assert_eq!(psp.requests_seen(), 2);
}

#[tokio::test]
async fn tokens_are_bought_with_the_client_credentials_and_required_on_every_call() {
    let psp = start_with(FakePspConfig::paypal()).await;
    let base_url = psp.base_url();
    // WHEN the client secret is wrong
    let (status, body) = token_call(&base_url, DEFAULT_PAYPAL_CLIENT_ID, "wrong").await;
    // THEN 401 invalid_client
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("invalid_client"))
    );
    // AND a REST call with the secret instead of a token is 401 AUTHENTICATION_FAILURE
    let (status, body) = status_and_json(
        create_order(
            &base_url,
            DEFAULT_API_KEY,
            "k",
            &order_body("pay_1", json!({"card": {"vault_id": "pm_card_visa"}})),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(
        (status, body["name"].as_str()),
        (401, Some("AUTHENTICATION_FAILURE"))
    );
    assert!(psp.charges().is_empty());
    assert_eq!(psp.requests_seen(), 2);
}

#[tokio::test]
async fn a_lost_create_is_cut_and_its_request_id_answers_200_with_the_order() {
    let psp = start_with(FakePspConfig::paypal()).await;
    let base_url = psp.base_url();
    let token = token(&base_url, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY).await;
    let body = order_body(
        "pay_1",
        json!({"card": {"vault_id": "pm_fake_lost_response"}}),
    );
    // WHEN the answer to a create is lost
    let lost = create_order(&base_url, &token, "payonce-charge-pay_1", &body)
        .await
        .expect_err("no HTTP response at all");
    assert!(lost.status().is_none(), "{lost:?}");
    // THEN the order was paid, and the re-send under its PayPal-Request-Id answers it, 200
    assert_eq!(psp.succeeded_charges_for("pay_1"), 1);
    let response = create_order(&base_url, &token, "payonce-charge-pay_1", &body)
        .await
        .expect("answered");
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let (status, order) = status_and_json(response).await;
    assert_eq!((status, order["status"].as_str()), (200, Some("COMPLETED")));
    assert_eq!(order["id"], psp.charges()[0].id.as_str());
    assert_eq!(psp.charges().len(), 1);
}

#[tokio::test]
async fn the_payers_page_approves_and_redirects_with_token_and_payer_id() {
    let psp = start_with(FakePspConfig::paypal()).await;
    let base_url = psp.base_url();
    let token = token(&base_url, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY).await;
    // GIVEN an order waiting for its buyer
    let (status, order) = status_and_json(
        create_order(
            &base_url,
            &token,
            "payonce-charge-pay_1",
            &order_body(
                "pay_1",
                json!({"paypal": {"experience_context": {
                    "return_url": "https://shop.example/back",
                    "cancel_url": "https://shop.example/back",
                    "user_action": "PAY_NOW",
                }}}),
            ),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(
        (status, order["status"].as_str()),
        (201, Some("PAYER_ACTION_REQUIRED"))
    );
    let page = order["links"]
        .as_array()
        .and_then(|links| links.iter().find(|link| link["rel"] == "payer-action"))
        .and_then(|link| link["href"].as_str())
        .unwrap_or_default()
        .to_owned();
    let id = order["id"].as_str().unwrap_or_default();
    assert_eq!(page, format!("{base_url}/_fake/authenticate/{id}"));
    // WHEN the buyer opens the page and approves
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let shown = browser.get(&page).send().await.expect("answered");
    assert_eq!(shown.status().as_u16(), 200);
    let approved = browser
        .post(&page)
        .form(&[("result", "complete")])
        .send()
        .await
        .expect("answered");
    // THEN 303 to the return URL with token and PayerID
    assert_eq!(approved.status().as_u16(), 303);
    let location = approved
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        location.starts_with(&format!("https://shop.example/back?token={id}&PayerID=")),
        "{location}"
    );
    // AND the capture completes the approved order
    let (status, captured) = status_and_json(
        client()
            .post(format!("{base_url}/v2/checkout/orders/{id}/capture"))
            .bearer_auth(&token)
            .header("PayPal-Request-Id", "payonce-capture-pay_1")
            .header("Prefer", "return=representation")
            .json(&json!({}))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(
        (status, captured["status"].as_str()),
        (201, Some("COMPLETED"))
    );
}

#[tokio::test]
async fn a_configured_key_signs_and_a_bad_one_refuses_to_start() {
    // GIVEN a key made elsewhere, handed over as PEM
    let made = PayPalSigner::generate().expect("a key");
    let pem = made.private_key_pem().expect("PEM");
    let (url, sink, server) = receiver().await;
    let psp = start_with(FakePspConfig {
        webhook_url: Some(url),
        paypal_signing_key_pem: Some(pem),
        paypal_webhook_id: "WHCONFIGURED00001".to_owned(),
        ..FakePspConfig::paypal()
    })
    .await;
    let base_url = psp.base_url();
    let token = token(&base_url, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY).await;
    let (status, _) = status_and_json(
        create_order(
            &base_url,
            &token,
            "k",
            &order_body("pay_1", json!({"card": {"vault_id": "pm_card_visa"}})),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(status, 201);
    // THEN deliveries verify with that key's certificate, under the configured webhook id
    let deliveries = sink.wait_for(1).await;
    server.abort();
    assert_eq!(deliveries.len(), 1);
    assert!(verifies(
        &deliveries[0],
        made.certificate_pem(),
        "WHCONFIGURED00001"
    ));
    assert!(!verifies(
        &deliveries[0],
        made.certificate_pem(),
        DEFAULT_PAYPAL_WEBHOOK_ID
    ));
    // AND a PEM that is not an RSA private key fails the start
    let refused = FakePsp::start(
        FakePspConfig {
            paypal_signing_key_pem: Some(
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_owned(),
            ),
            ..FakePspConfig::paypal()
        },
        loopback(),
    )
    .await
    .expect_err("not a key");
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    // AND the other faces serve no certificate
    let stripe = start_with(FakePspConfig::default()).await;
    let none = client()
        .get(format!("{}/_fake/paypal/cert.pem", stripe.base_url()))
        .send()
        .await
        .expect("answered");
    assert_eq!(none.status().as_u16(), 404);
    assert!(stripe.paypal_signer().is_none());
}

#[tokio::test]
async fn the_binary_serves_the_paypal_face_with_the_flags_credentials_and_key() {
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // GIVEN a key file, a receiver, and the binary with --provider paypal
    let made = PayPalSigner::generate().expect("a key");
    let key_path = std::env::temp_dir().join(format!(
        "payonce-fake-psp-paypal-{}.pem",
        std::process::id()
    ));
    std::fs::write(&key_path, made.private_key_pem().expect("PEM")).expect("key file");
    let (url, sink, server) = receiver().await;
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_payonce-fake-psp"))
            .args(["--provider", "paypal", "--addr", "127.0.0.1:0"])
            .args([
                "--client-id",
                "client-from-flag",
                "--api-key",
                "secret-from-flag",
            ])
            .args(["--webhook-url", &url])
            .arg("--paypal-signing-key")
            .arg(&key_path)
            .args(["--paypal-webhook-id", "WHFROMTHEFLAG0001"])
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
    let _ = std::fs::remove_file(&key_path);
    let base_url = line
        .trim_end()
        .strip_prefix("fake PSP listening on ")
        .expect("announces its URL")
        .to_owned();
    // WHEN an order is paid with the flags' credentials
    let token = token(&base_url, "client-from-flag", "secret-from-flag").await;
    let (status, _) = status_and_json(
        create_order(
            &base_url,
            &token,
            "k",
            &order_body("pay_1", json!({"card": {"vault_id": "pm_card_visa"}})),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(status, 201);
    // THEN the binary serves the key's certificate, and its webhook verifies with it under the
    // flag's webhook id
    let served = client()
        .get(format!("{base_url}/_fake/paypal/cert.pem"))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("text");
    let (_, served_key) = certificate_key(&served);
    let (_, made_key) = certificate_key(made.certificate_pem());
    assert_eq!(served_key, made_key);
    let deliveries = sink.wait_for(1).await;
    server.abort();
    assert_eq!(deliveries.len(), 1);
    assert!(verifies(&deliveries[0], &served, "WHFROMTHEFLAG0001"));
}
