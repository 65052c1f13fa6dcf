//! The Omise adapter over HTTP against the fake PSP's Omise face: the outcome classes of a charge
//! (approved, declined with Omise's failure code, rejected method, refused below the minimum,
//! unknown after a lost answer, not sent with a refused key), the search lookup that finds a
//! charge once the search lag has passed, and refunds (created, looked up, refused for more than
//! is left). And the face's webhooks, verified and read by payonce's Omise scheme.

use payonce::adapters::psp::{OmiseConfig, OmisePsp, OmiseWebhooks};
use payonce::domain::{refund_key, Currency, RefundSettlement, Settlement};
use payonce::ports::{
    charge_key, ChargeRequest, Psp, PspLookup, PspOutcome, RefundOutcome, RefundRequest,
    WebhookScheme,
};
use payonce_fake_psp::{FakePspConfig, RunningFakePsp, DEFAULT_OMISE_WEBHOOK_SECRET};
use payonce_tests::stack::{omise_for, start_fake_psp};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TIMEOUT: Duration = Duration::from_secs(10);

fn request(amount: i64, currency: Currency, payment_method: &str) -> ChargeRequest {
    let payment_id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    ChargeRequest {
        idempotency_key: charge_key(&payment_id),
        payment_id,
        amount,
        currency,
        payment_method: payment_method.into(),
        return_url: None,
        capture: payonce::domain::CaptureMethod::Automatic,
        earlier_may_run: false,
    }
}

async fn omise_psp() -> RunningFakePsp {
    start_fake_psp(FakePspConfig::omise()).await
}

/// The charge the fake holds for `request`, by its idempotency key.
fn charge_id(psp: &RunningFakePsp, request: &ChargeRequest) -> String {
    psp.charges()
        .into_iter()
        .find(|c| c.idempotency_key.as_ref() == Some(&request.idempotency_key))
        .map(|c| c.id)
        .unwrap_or_else(|| panic!("no charge for {}", request.payment_id))
}

#[tokio::test]
async fn an_approved_card_is_approved_with_the_charge_id() {
    let psp = omise_psp().await;
    let omise = omise_for(&psp);
    let request = request(3000, Currency::Jpy, "pm_card_visa");

    let outcome = omise.create_charge(&request, TIMEOUT).await;

    let id = charge_id(&psp, &request);
    assert!(id.starts_with("chrg_test_"), "{id}");
    assert_eq!(
        outcome,
        PspOutcome::Approved {
            provider_payment_id: id.clone()
        }
    );
    assert_eq!(psp.succeeded_charges_for(&request.payment_id), 1);
    // The lookup reads it the same way.
    assert_eq!(
        omise.lookup(&request.payment_id).await.unwrap(),
        PspLookup::Succeeded {
            amount: Some(super::charged(&request)),
            provider_payment_id: id
        }
    );
}

#[tokio::test]
async fn a_declined_card_is_declined_with_omises_failure_code() {
    let psp = omise_psp().await;
    let omise = omise_for(&psp);
    for (token, failure_code) in [
        (
            "pm_card_chargeDeclinedInsufficientFunds",
            "insufficient_fund",
        ),
        ("pm_card_visa_chargeDeclined", "payment_rejected"),
    ] {
        let request = request(3000, Currency::Jpy, token);
        let outcome = omise.create_charge(&request, TIMEOUT).await;
        // A declined card is a failed charge, answered 200: declined, with the charge's id.
        assert_eq!(
            outcome,
            PspOutcome::Declined {
                provider_payment_id: Some(charge_id(&psp, &request)),
                decline_code: failure_code.into(),
            },
            "{token}"
        );
    }
    assert!(psp.charges().iter().all(|c| c.outcome == "failed"));
}

#[tokio::test]
async fn an_unknown_payment_method_is_rejected_and_creates_nothing() {
    let psp = omise_psp().await;
    let omise = omise_for(&psp);
    let outcome = omise
        .create_charge(
            &request(3000, Currency::Jpy, "pm_card_nonexistent"),
            TIMEOUT,
        )
        .await;
    assert_eq!(
        outcome,
        PspOutcome::Rejected {
            message: "token pm_card_nonexistent was not found".into()
        }
    );
    assert!(psp.charges().is_empty());
}

#[tokio::test]
async fn an_amount_below_omises_minimum_is_refused_and_creates_nothing() {
    let psp = omise_psp().await;
    let omise = omise_for(&psp);
    // Omise's minimum in yen is ¥100 (Stripe's is ¥50); in baht ฿20.00 (Stripe's ฿10.00).
    for (amount, currency) in [(99, Currency::Jpy), (1_999, Currency::Thb)] {
        let outcome = omise
            .create_charge(&request(amount, currency, "pm_card_visa"), TIMEOUT)
            .await;
        assert_eq!(
            outcome,
            PspOutcome::Refused {
                code: "invalid_charge".into()
            },
            "{amount} {currency:?}"
        );
    }
    assert!(psp.charges().is_empty());
    assert_eq!(psp.requests_seen(), 2);
}

#[tokio::test]
async fn a_lost_answer_is_unknown_and_search_finds_the_charge_once_its_lag_has_passed() {
    // GIVEN search lags up to a second behind writes
    let lag = Duration::from_secs(1);
    let psp = start_fake_psp(FakePspConfig {
        search_lag_max: lag,
        ..FakePspConfig::omise()
    })
    .await;
    let omise = omise_for(&psp);
    let request = request(3000, Currency::Jpy, "pm_fake_lost_response");

    // WHEN the charge is made and its answer lost
    let outcome = omise.create_charge(&request, TIMEOUT).await;

    // THEN the outcome is unknown, while the PSP charged
    assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
    assert_eq!(psp.succeeded_charges_for(&request.payment_id), 1);
    let id = charge_id(&psp, &request);
    // AND a lookup within the lag may not see it yet — but never sees anything else
    let early = omise.lookup(&request.payment_id).await.unwrap();
    assert!(
        early == PspLookup::NotFound
            || early
                == PspLookup::Succeeded {
                    amount: Some(super::charged(&request)),
                    provider_payment_id: id.clone()
                },
        "{early:?}"
    );
    // AND once the lag has passed, search finds it
    tokio::time::sleep(lag + Duration::from_millis(100)).await;
    assert_eq!(
        omise.lookup(&request.payment_id).await.unwrap(),
        PspLookup::Succeeded {
            amount: Some(super::charged(&request)),
            provider_payment_id: id
        }
    );
}

#[tokio::test]
async fn a_pending_charge_is_unknown_on_create_and_pending_on_lookup() {
    let psp = start_fake_psp(FakePspConfig {
        processing_for: Duration::from_secs(3600),
        ..FakePspConfig::omise()
    })
    .await;
    let omise = omise_for(&psp);
    let request = request(3000, Currency::Jpy, "pm_fake_processing");
    let created = omise.create_charge(&request, TIMEOUT).await;
    assert!(matches!(created, PspOutcome::Unknown { .. }), "{created:?}");
    assert_eq!(
        omise.lookup(&request.payment_id).await.unwrap(),
        PspLookup::Pending {
            provider_payment_id: charge_id(&psp, &request)
        }
    );
}

fn refund_request(
    charge: &ChargeRequest,
    provider_payment_id: &str,
    n: u32,
    amount: i64,
) -> RefundRequest {
    RefundRequest {
        refund_id: format!("rf_{}_{n}", charge.payment_id),
        payment_id: charge.payment_id.clone(),
        provider_payment_id: provider_payment_id.to_owned(),
        amount,
        currency: charge.currency,
        reason: None,
        idempotency_key: refund_key(&charge.payment_id, &n.to_string()),
        resend: false,
        provider_refund_id: None,
        captured: 0,
    }
}

#[tokio::test]
async fn a_refund_is_created_once_and_looked_up() {
    let psp = omise_psp().await;
    let omise = omise_for(&psp);
    let charge = request(3000, Currency::Jpy, "pm_card_visa");
    let PspOutcome::Approved {
        provider_payment_id,
    } = omise.create_charge(&charge, TIMEOUT).await
    else {
        panic!("the charge was not approved")
    };
    let refund = refund_request(&charge, &provider_payment_id, 1, 1000);

    // WHEN the refund is created
    let created = omise.create_refund(&refund, TIMEOUT).await;

    // THEN it succeeded (an Omise refund is final once created), with the fake's refund id
    let refunds = psp.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(
        (
            refunds[0].refund_id.as_deref(),
            refunds[0].payment_id.as_deref(),
            refunds[0].amount,
            refunds[0].provider.as_str(),
        ),
        (
            Some(refund.refund_id.as_str()),
            Some(charge.payment_id.as_str()),
            1000,
            "omise"
        )
    );
    let settlement = RefundSettlement::Succeeded {
        provider_refund_id: refunds[0].id.clone(),
    };
    assert_eq!(created, RefundOutcome::Answered(settlement.clone()));
    // AND the lookup lists the charge's refunds and finds it
    assert_eq!(
        omise
            .lookup_refund(&provider_payment_id, &refund.refund_id)
            .await
            .unwrap(),
        Some(settlement.clone())
    );
    // AND a re-send finds it instead of refunding again
    assert_eq!(
        omise.create_refund(&refund, TIMEOUT).await,
        RefundOutcome::Answered(settlement)
    );
    assert_eq!(psp.refunds().len(), 1);
    // AND a refund nobody made is not there
    assert_eq!(
        omise
            .lookup_refund(&provider_payment_id, "rf_nobody")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_refund_of_more_than_is_left_is_failed_and_creates_nothing() {
    let psp = omise_psp().await;
    let omise = omise_for(&psp);
    let charge = request(3000, Currency::Jpy, "pm_card_visa");
    let PspOutcome::Approved {
        provider_payment_id,
    } = omise.create_charge(&charge, TIMEOUT).await
    else {
        panic!("the charge was not approved")
    };
    let first = refund_request(&charge, &provider_payment_id, 1, 2000);
    assert!(matches!(
        omise.create_refund(&first, TIMEOUT).await,
        RefundOutcome::Answered(RefundSettlement::Succeeded { .. })
    ));

    // WHEN 1001 more is asked for, with 1000 left
    let over = refund_request(&charge, &provider_payment_id, 2, 1001);
    let outcome = omise.create_refund(&over, TIMEOUT).await;

    // THEN the PSP's refusal is a failed refund, and nothing was created
    assert_eq!(
        outcome,
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: "failed_refund".into()
        })
    );
    assert_eq!(psp.refunds().len(), 1);
}

#[tokio::test]
async fn a_wrong_secret_key_is_not_sent_and_the_psp_created_nothing() {
    let psp = omise_psp().await;
    let mut config = OmiseConfig::new("skey_test_not_the_fakes").with_base_url(psp.base_url());
    config.connect_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(5);
    let omise = OmisePsp::new(config).expect("HTTP client");

    let outcome = omise
        .create_charge(&request(3000, Currency::Jpy, "pm_card_visa"), TIMEOUT)
        .await;

    assert_eq!(
        outcome,
        PspOutcome::NotSent {
            reason: "the PSP refused our credentials (401)".into()
        }
    );
    assert!(psp.charges().is_empty());
    assert_eq!(psp.requests_seen(), 1);
}

/// What a receiver verifying with payonce's Omise scheme got: per delivery, whether it verified,
/// and the body.
type Received = Arc<Mutex<Vec<(bool, String)>>>;

/// A webhook endpoint verifying every delivery with payonce's Omise scheme and the fake's secret.
async fn omise_receiver(
    scheme: Arc<OmiseWebhooks>,
) -> (String, Received, tokio::task::JoinHandle<()>) {
    let received: Received = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/webhooks/omise",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let (scheme, kept) = (scheme.clone(), kept.clone());
                async move {
                    let now_s = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                    let verified = scheme.verify(&headers, &body, now_s).is_ok();
                    let body = String::from_utf8_lossy(&body).into_owned();
                    kept.lock().expect("lock").push((verified, body));
                    axum::http::StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!(
        "http://{}/webhooks/omise",
        listener.local_addr().expect("local address")
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, received, server)
}

#[tokio::test]
async fn the_faces_webhooks_verify_and_read_in_payonces_omise_scheme() {
    // GIVEN an endpoint verifying with payonce's Omise scheme and the fake's (base64) secret
    let scheme = Arc::new(OmiseWebhooks::new(&[DEFAULT_OMISE_WEBHOOK_SECRET]).expect("base64"));
    let (url, received, server) = omise_receiver(scheme.clone()).await;
    let psp = start_fake_psp(FakePspConfig {
        webhook_url: Some(url),
        ..FakePspConfig::omise()
    })
    .await;
    let omise = omise_for(&psp);

    // WHEN a card is declined, another approved and then partly refunded
    let declined = request(
        3000,
        Currency::Jpy,
        "pm_card_chargeDeclinedInsufficientFunds",
    );
    omise.create_charge(&declined, TIMEOUT).await;
    let approved = request(3000, Currency::Jpy, "pm_card_visa");
    let PspOutcome::Approved {
        provider_payment_id,
    } = omise.create_charge(&approved, TIMEOUT).await
    else {
        panic!("the charge was not approved")
    };
    let refund = refund_request(&approved, &provider_payment_id, 1, 1000);
    let RefundOutcome::Answered(refunded) = omise.create_refund(&refund, TIMEOUT).await else {
        panic!("the refund was not answered")
    };

    // THEN three deliveries arrive, each verified by payonce's scheme
    let mut deliveries = Vec::new();
    for _ in 0..200 {
        deliveries = received.lock().expect("lock").clone();
        if deliveries.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.abort();
    assert_eq!(deliveries.len(), 3, "{deliveries:#?}");
    assert!(
        deliveries.iter().all(|(verified, _)| *verified),
        "{deliveries:#?}"
    );
    // AND payonce reads each as the settlement the adapter saw
    let events: Vec<_> = deliveries
        .iter()
        .map(|(_, body)| scheme.parse(body.as_bytes()).expect("an Omise event"))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["charge.create", "charge.create", "refund.create"]);
    assert_eq!(
        events[0].payment_id.as_deref(),
        Some(declined.payment_id.as_str())
    );
    assert!(
        matches!(
            &events[0].settlement,
            Some(Settlement::Declined { decline_code, .. }) if decline_code == "insufficient_fund"
        ),
        "{:?}",
        events[0].settlement
    );
    assert_eq!(
        events[1].settlement,
        Some(Settlement::Succeeded {
            provider_payment_id: provider_payment_id.clone()
        })
    );
    assert_eq!(events[1].livemode, Some(false));
    assert_eq!(
        events[1]
            .amount
            .as_ref()
            .map(|a| (a.minor, a.currency.as_str())),
        Some((3000, "jpy"))
    );
    let refund_event = events[2].refund.as_ref().expect("a refund event");
    assert_eq!(
        (refund_event.refund_id.as_str(), &refund_event.settlement),
        (refund.refund_id.as_str(), &refunded)
    );
}
