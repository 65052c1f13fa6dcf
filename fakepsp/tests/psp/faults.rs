//! The injected failures: a lost response, a 500 before charging, a slow answer.

use std::time::{Duration, Instant};

use payonce_fake_psp::FakePspConfig;

use crate::support::{charge_form, client, create, read, start, start_with};

#[tokio::test]
async fn lost_response_charges_then_closes_the_connection_and_replays_on_retry() {
    let psp = start().await;
    let client = client();
    let form = charge_form("pm_fake_lost_response", "pay_lost");

    let lost = create(&client, &psp, &form, Some("key-lost")).await;
    let error = lost.expect_err("no HTTP response at all");
    assert!(error.status().is_none(), "{error:?}");
    assert!(!error.is_timeout(), "{error:?}");
    assert!(error.is_request(), "{error:?}");
    assert!(
        error_chain(&error).contains("connection closed before message completed"),
        "{error:?}"
    );

    // The charge happened.
    let charges = psp.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].status, "succeeded");
    assert_eq!(psp.succeeded_charges_for("pay_lost"), 1);

    // The retry is answered from the idempotency cache.
    let (status, replayed, pi) = read(
        create(&client, &psp, &form, Some("key-lost"))
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 200, "{pi}");
    assert!(replayed);
    assert_eq!(pi["id"], charges[0].id.as_str());
    assert_eq!(pi["status"], "succeeded");
    assert_eq!(psp.charges().len(), 1);
    assert_eq!(psp.requests_seen(), 2);
}

/// The error and all its sources, as text.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn lost_response_without_a_key_still_charges() {
    let psp = start().await;
    let result = create(
        &client(),
        &psp,
        &charge_form("pm_fake_lost_response", "p"),
        None,
    )
    .await;
    assert!(result.is_err());
    assert_eq!(psp.succeeded_charges_for("p"), 1);
}

#[tokio::test]
async fn error_before_charge_stores_nothing_and_retries_run_again() {
    let psp = start().await;
    let client = client();
    let form = charge_form("pm_fake_error_before_charge", "pay_500");
    for _ in 0..2 {
        let (status, replayed, body) = read(
            create(&client, &psp, &form, Some("key-500"))
                .await
                .expect("answered"),
        )
        .await;
        assert_eq!(status, 500);
        assert!(!replayed, "a 500 is never replayed");
        assert_eq!(body["error"]["type"], "api_error");
        assert!(body["error"]["message"].is_string());
    }
    assert!(psp.charges().is_empty());

    // Nothing was stored, so the key is free even for other parameters.
    let (status, replayed, _) = read(
        create(
            &client,
            &psp,
            &charge_form("pm_card_visa", "pay_500"),
            Some("key-500"),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, replayed), (200, false));
    assert_eq!(psp.succeeded_charges_for("pay_500"), 1);
}

#[tokio::test]
async fn slow_charge_is_made_before_the_client_times_out() {
    let psp = start_with(FakePspConfig {
        slow_delay: Duration::from_millis(300),
        ..FakePspConfig::default()
    })
    .await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .expect("client");
    let form = charge_form("pm_fake_slow", "pay_slow");

    let error = create(&impatient, &psp, &form, Some("key-slow"))
        .await
        .expect_err("times out");
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(psp.succeeded_charges_for("pay_slow"), 1);

    // The retry gets the stored answer straight away.
    let (status, replayed, pi) = read(
        create(&impatient, &psp, &form, Some("key-slow"))
            .await
            .expect("replayed in time"),
    )
    .await;
    assert_eq!((status, replayed), (200, true));
    assert_eq!(pi["id"], psp.charges()[0].id.as_str());

    // A patient client gets the answer once the delay is over.
    let started = Instant::now();
    let (status, replayed, _) = read(
        create(
            &client(),
            &psp,
            &charge_form("pm_fake_slow", "pay_slow_2"),
            None,
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!((status, replayed), (200, false));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(psp.charges().len(), 2);
}

#[tokio::test]
async fn shutdown_does_not_wait_for_a_held_back_answer() {
    let psp = start().await; // default slow_delay: 30 s
    let base = psp.base_url();
    let pending = tokio::spawn(async move {
        client()
            .post(format!("{base}/v1/payment_intents"))
            .bearer_auth(payonce_fake_psp::DEFAULT_API_KEY)
            .form(&charge_form("pm_fake_slow", "p"))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    // Wait until the charge exists, i.e. the request is being held back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while psp.charges().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(psp.charges().len(), 1);
    let started = Instant::now();
    psp.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(pending.await.expect("task").ok(), Some(200));
}

#[tokio::test]
async fn lost_response_sends_not_a_single_byte() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let psp = start().await;
    let body = "amount=100&currency=usd&payment_method=pm_fake_lost_response&confirm=true";
    let request = format!(
        "POST /v1/payment_intents HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        payonce_fake_psp::DEFAULT_API_KEY,
        body.len()
    );
    let mut socket = tokio::net::TcpStream::connect(psp.local_addr())
        .await
        .expect("connects");
    socket
        .write_all(request.as_bytes())
        .await
        .expect("request written");
    let mut received = Vec::new();
    // A reset instead of a clean close is just as good: either way, no response.
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut received))
        .await
        .expect("the server closes the connection");
    assert!(
        received.is_empty(),
        "{}",
        String::from_utf8_lossy(&received)
    );
    assert_eq!(psp.charges().len(), 1);
}
