//! Stripe's idempotency semantics: replay, mismatch, in-use, and exactly one PaymentIntent per
//! key under concurrency.

use std::collections::HashSet;

use crate::support::{charge_form, client, create, read, start};

#[tokio::test]
async fn same_key_same_params_replays_and_creates_one_charge() {
    let psp = start().await;
    let client = client();
    let form = charge_form("pm_card_visa", "pay_1");

    let first = create(&client, &psp, &form, Some("key-1"))
        .await
        .expect("answered");
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.bytes().await.expect("body");

    // Same parameter set in another order and encoding is still "the same parameters".
    let mut reordered = form.clone();
    reordered.reverse();
    let second = create(&client, &psp, &reordered, Some("key-1"))
        .await
        .expect("answered");
    assert_eq!(second.status().as_u16(), 200);
    assert_eq!(
        second
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let second_body = second.bytes().await.expect("body");
    assert_eq!(first_body, second_body, "the replay is the stored response");

    let charges = psp.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].idempotency_key.as_deref(), Some("key-1"));
    assert_eq!(psp.succeeded_charges_for("pay_1"), 1);
    assert_eq!(psp.requests_seen(), 2);
}

#[tokio::test]
async fn same_key_other_params_is_an_idempotency_error() {
    let psp = start().await;
    let client = client();
    create(
        &client,
        &psp,
        &charge_form("pm_card_visa", "pay_1"),
        Some("key-1"),
    )
    .await
    .expect("answered");
    let (status, replayed, body) = read(
        create(
            &client,
            &psp,
            &charge_form("pm_card_visa", "pay_2"),
            Some("key-1"),
        )
        .await
        .expect("answered"),
    )
    .await;
    assert_eq!(status, 400);
    assert!(!replayed);
    assert_eq!(body["error"]["type"], "idempotency_error");
    assert!(body["error"]["message"].as_str().is_some_and(
        |m| m.starts_with("Keys for idempotent requests can only be used with the same parameters")
    ));
    assert_eq!(psp.charges().len(), 1);
}

#[tokio::test]
async fn declines_and_unknown_tokens_are_stored_and_replayed() {
    let psp = start().await;
    let client = client();
    for (token, key, expected) in [
        ("pm_card_visa_chargeDeclined", "key-decline", 402),
        ("pm_card_unknown", "key-unknown", 400),
    ] {
        let form = charge_form(token, "pay_1");
        let (status, replayed, first) = read(
            create(&client, &psp, &form, Some(key))
                .await
                .expect("answered"),
        )
        .await;
        assert_eq!((status, replayed), (expected, false));
        let (status, replayed, second) = read(
            create(&client, &psp, &form, Some(key))
                .await
                .expect("answered"),
        )
        .await;
        assert_eq!((status, replayed), (expected, true));
        assert_eq!(first, second);
    }
    // One declined intent; the unknown token never created one.
    assert_eq!(psp.charges().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_concurrent_identical_requests_make_exactly_one_charge() {
    let psp = start().await;
    let client = client();
    let form = charge_form("pm_card_visa", "pay_race");
    let requests = (0..30).map(|_| {
        let client = client.clone();
        let form = form.clone();
        let url = psp.base_url();
        tokio::spawn(async move {
            let response = client
                .post(format!("{url}/v1/payment_intents"))
                .bearer_auth(payonce_fake_psp::DEFAULT_API_KEY)
                .header("Idempotency-Key", "key-race")
                .form(&form)
                .send()
                .await
                .expect("answered");
            read(response).await
        })
    });
    let mut ids = HashSet::new();
    let mut in_use = 0;
    for request in requests.collect::<Vec<_>>() {
        let (status, _, body) = request.await.expect("task");
        match status {
            200 => {
                ids.insert(body["id"].as_str().expect("id").to_owned());
            }
            409 => {
                assert_eq!(body["error"]["code"], "idempotency_key_in_use");
                assert_eq!(body["error"]["type"], "invalid_request_error");
                in_use += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(ids.len(), 1, "every 200 carries the one PaymentIntent");
    assert!(in_use < 30);
    assert_eq!(psp.charges().len(), 1);
    assert_eq!(psp.succeeded_charges_for("pay_race"), 1);
    assert!(ids.contains(&psp.charges()[0].id));
}

#[tokio::test]
async fn a_key_held_in_flight_is_409_until_released() {
    let psp = start().await;
    let client = client();
    let form = charge_form("pm_card_visa", "pay_busy");
    // GIVEN the key is held by a request the PSP is still running
    assert!(psp.model().begin_in_flight("key-busy"));
    // WHEN a request with it arrives
    let (status, replayed, body) = read(
        create(&client, &psp, &form, Some("key-busy"))
            .await
            .expect("answered"),
    )
    .await;
    // THEN 409 idempotency_key_in_use, nothing charged
    assert_eq!((status, replayed), (409, false));
    assert_eq!(body["error"]["code"], "idempotency_key_in_use");
    assert!(psp.charges().is_empty());
    // AND once released, the retry charges once
    assert!(psp.model().end_in_flight("key-busy"));
    let (status, _, _) = read(
        create(&client, &psp, &form, Some("key-busy"))
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(psp.succeeded_charges_for("pay_busy"), 1);
}
