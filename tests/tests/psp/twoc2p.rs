//! The 2C2P adapter over HTTP against the fake PSP's 2C2P face: the outcome classes of a charge
//! (approved and named by the invoice number, declined with 2C2P's issuer code, refused for a method the PSP
//! does not know), a lost Do Payment answer read by the inquiry and the lookup, a re-sent create
//! that gets `9015` and only reads the first attempt (never pays twice), the invoice-number fence
//! on an unused and on a used invoice, refunds that are never sent, and the face's backend
//! notification, verified and read by payonce's 2C2P scheme.

use payonce::adapters::psp::twoc2p::REFUNDS_UNSUPPORTED;
use payonce::adapters::psp::twoc2p_ids::invoice_no_for;
use payonce::adapters::psp::TwoC2pNotifications;
use payonce::domain::{refund_key, Currency, Settlement};
use payonce::ports::{
    charge_key, ChargeRequest, Fence, Psp, PspLookup, PspOutcome, RefundOutcome, RefundRequest,
    WebhookScheme,
};
use payonce_fake_psp::{FakeCharge, FakePspConfig, RunningFakePsp, DEFAULT_TWOC2P_MERCHANT_ID};
use payonce_tests::stack::{start_fake_psp, twoc2p_for, FAKE_API_KEY};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

fn request(payment_method: &str) -> ChargeRequest {
    let payment_id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    ChargeRequest {
        idempotency_key: charge_key(&payment_id),
        payment_id,
        amount: 3000,
        currency: Currency::Sgd,
        payment_method: payment_method.into(),
        return_url: None,
        capture: payonce::domain::CaptureMethod::Automatic,
    }
}

async fn twoc2p_psp() -> RunningFakePsp {
    start_fake_psp(FakePspConfig::twoc2p()).await
}

/// The charges the fake holds for `request`, by its invoice number.
fn charges_for(psp: &RunningFakePsp, request: &ChargeRequest) -> Vec<FakeCharge> {
    let invoice_no = invoice_no_for(&request.payment_id);
    psp.charges()
        .into_iter()
        .filter(|c| c.invoice_no.is_some() && c.invoice_no == invoice_no)
        .collect()
}

/// The one charge the fake holds for `request`.
fn the_charge(psp: &RunningFakePsp, request: &ChargeRequest) -> FakeCharge {
    let mut charges = charges_for(psp, request);
    assert_eq!(charges.len(), 1, "{charges:#?}");
    charges.remove(0)
}

/// The PSP's id payonce stores for a 2C2P charge: its invoice number (the `tranRef` is
/// in 2C2P's ledger, not in every answer).
fn invoice(charge: &FakeCharge) -> String {
    charge.idempotency_key.clone().expect("an invoice number")
}

#[tokio::test]
async fn an_approved_card_is_approved_and_named_by_its_invoice() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_card_visa");

    let outcome = twoc2p.create_charge(&request, TIMEOUT).await;

    let charge = the_charge(&psp, &request);
    assert_eq!(
        (
            charge.provider.as_str(),
            charge.outcome.as_str(),
            charge.amount,
            charge.currency.as_str(),
            charge.payment_id.as_deref(),
            charge.idempotency_key.clone(),
        ),
        (
            "2c2p",
            "succeeded",
            3000,
            "sgd",
            Some(request.payment_id.as_str()),
            invoice_no_for(&request.payment_id),
        )
    );
    assert!(
        charge.id.len() == 7 && charge.id.bytes().all(|b| b.is_ascii_digit()),
        "{}",
        charge.id
    );
    assert_eq!(
        outcome,
        PspOutcome::Approved {
            provider_payment_id: invoice(&charge)
        }
    );
    assert_eq!(psp.succeeded_charges_for(&request.payment_id), 1);
    // Payment Token, Do Payment, Payment Inquiry.
    assert_eq!(psp.requests_seen(), 3);
    // The lookup reads it the same way.
    assert_eq!(
        twoc2p.lookup(&request.payment_id).await.expect("lookup"),
        PspLookup::Succeeded {
            amount: Some(super::charged(&request)),
            provider_payment_id: invoice(&charge)
        }
    );
}

#[tokio::test]
async fn a_declined_card_is_declined_with_2c2ps_issuer_code() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    for (token, code) in [
        ("pm_card_chargeDeclinedInsufficientFunds", "4051"),
        ("pm_card_visa_chargeDeclined", "4005"),
    ] {
        let request = request(token);
        let outcome = twoc2p.create_charge(&request, TIMEOUT).await;
        let charge = the_charge(&psp, &request);
        assert_eq!(charge.outcome, "failed");
        assert_eq!(
            outcome,
            PspOutcome::Declined {
                provider_payment_id: Some(invoice(&charge)),
                decline_code: code.into()
            },
            "{token}"
        );
        assert_eq!(
            twoc2p.lookup(&request.payment_id).await.expect("lookup"),
            PspLookup::Declined {
                amount: Some(super::charged(&request)),
                provider_payment_id: invoice(&charge),
                decline_code: code.into()
            }
        );
    }
}

#[tokio::test]
async fn an_unknown_payment_method_is_rejected_and_pays_nothing() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_card_nonexistent");

    let outcome = twoc2p.create_charge(&request, TIMEOUT).await;

    // Do Payment answered 9004 and the inquiry (signed) found no transaction.
    assert_eq!(
        outcome,
        PspOutcome::Rejected {
            message: "2C2P refused the payment data (9004)".into()
        }
    );
    assert!(psp.charges().is_empty());
    assert_eq!(
        twoc2p.lookup(&request.payment_id).await.expect("lookup"),
        PspLookup::NotFound
    );
}

#[tokio::test]
async fn a_lost_do_payment_answer_is_read_by_the_inquiry_and_the_lookup() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_fake_lost_response");

    // The Do Payment answer is cut after the charge; the adapter inquires.
    let outcome = twoc2p.create_charge(&request, TIMEOUT).await;

    let charge = the_charge(&psp, &request);
    assert_eq!(charge.outcome, "succeeded");
    assert_eq!(
        outcome,
        PspOutcome::Approved {
            provider_payment_id: invoice(&charge)
        }
    );
    assert_eq!(
        twoc2p.lookup(&request.payment_id).await.expect("lookup"),
        PspLookup::Succeeded {
            amount: Some(super::charged(&request)),
            provider_payment_id: invoice(&charge)
        }
    );
}

#[tokio::test]
async fn a_create_sent_again_gets_9015_and_reads_the_first_attempt_never_paying_twice() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_fake_lost_response");
    let first = twoc2p.create_charge(&request, TIMEOUT).await;
    let seen = psp.requests_seen();

    // WHEN the same create is sent again (a retry after the lost answer)
    let again = twoc2p.create_charge(&request, TIMEOUT).await;

    // THEN the Payment Token is refused 9015 and only the inquiry follows: no Do Payment
    assert_eq!(psp.requests_seen(), seen + 2);
    assert_eq!(again, first);
    let charge = the_charge(&psp, &request);
    assert_eq!(
        again,
        PspOutcome::Approved {
            provider_payment_id: invoice(&charge)
        }
    );
    assert_eq!(psp.charges().len(), 1);
    assert_eq!(psp.succeeded_charges_for(&request.payment_id), 1);
}

#[tokio::test]
async fn a_fence_on_an_unused_invoice_never_ran_and_nothing_can_pay_under_it_afterwards() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_card_visa");

    let fence = twoc2p.fence(&request).await.expect("fence");

    assert_eq!(
        fence,
        Fence::NeverRan {
            provider_payment_id: invoice_no_for(&request.payment_id).expect("an invoice")
        }
    );
    twoc2p.cancel("unused").await.expect("nothing to cancel");
    // A late create of the original attempt gets 9015, pays nothing, and stays unknown.
    let late = twoc2p.create_charge(&request, TIMEOUT).await;
    assert!(matches!(late, PspOutcome::Unknown { .. }), "{late:?}");
    assert!(psp.charges().is_empty());
    assert_eq!(
        twoc2p.lookup(&request.payment_id).await.expect("lookup"),
        PspLookup::NotFound
    );
    // And a second fence sees the invoice used, with no transaction under it.
    assert_eq!(
        twoc2p.fence(&request).await.expect("fence"),
        Fence::UsedWithoutCharge
    );
}

#[tokio::test]
async fn a_fence_on_a_used_invoice_is_key_used() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_card_visa");
    twoc2p.create_charge(&request, TIMEOUT).await;

    assert_eq!(twoc2p.fence(&request).await.expect("fence"), Fence::KeyUsed);
    assert_eq!(charges_for(&psp, &request).len(), 1);
}

#[tokio::test]
async fn refunds_are_not_supported_and_never_sent() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_card_visa");
    let PspOutcome::Approved {
        provider_payment_id,
    } = twoc2p.create_charge(&request, TIMEOUT).await
    else {
        panic!("the charge was not approved")
    };
    let seen = psp.requests_seen();

    assert!(!twoc2p.supports_refunds());
    let refund = RefundRequest {
        refund_id: format!("rf_{}_1", request.payment_id),
        payment_id: request.payment_id.clone(),
        provider_payment_id: provider_payment_id.clone(),
        amount: 1000,
        currency: request.currency,
        reason: None,
        idempotency_key: refund_key(&request.payment_id, "1"),
        resend: false,
        provider_refund_id: None,
        siblings: Default::default(),
    };
    assert_eq!(
        twoc2p.create_refund(&refund, TIMEOUT).await,
        RefundOutcome::NotSent {
            reason: REFUNDS_UNSUPPORTED.into()
        }
    );
    assert!(twoc2p
        .lookup_refund(&provider_payment_id, &refund.refund_id)
        .await
        .is_err());
    assert_eq!(psp.requests_seen(), seen);
    assert!(psp.refunds().is_empty());
}

/// What a receiver verifying with payonce's 2C2P scheme got: per delivery, whether it verified,
/// and the body.
type Received = Arc<Mutex<Vec<(bool, String)>>>;

/// A notification endpoint verifying every delivery with payonce's 2C2P scheme.
async fn twoc2p_receiver(
    scheme: Arc<TwoC2pNotifications>,
) -> (String, Received, tokio::task::JoinHandle<()>) {
    let received: Received = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/webhooks/2c2p",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let (scheme, kept) = (scheme.clone(), kept.clone());
                async move {
                    let verified = scheme.verify(&headers, &body, 0).is_ok();
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
        "http://{}/webhooks/2c2p",
        listener.local_addr().expect("local address")
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, received, server)
}

#[tokio::test]
async fn the_faces_notifications_verify_and_read_in_payonces_2c2p_scheme() {
    // GIVEN an endpoint verifying with payonce's 2C2P scheme, the merchant id and secret key
    let scheme = Arc::new(
        TwoC2pNotifications::new(DEFAULT_TWOC2P_MERCHANT_ID, FAKE_API_KEY).expect("scheme"),
    );
    let (url, received, server) = twoc2p_receiver(scheme.clone()).await;
    let psp = start_fake_psp(FakePspConfig {
        webhook_url: Some(url),
        ..FakePspConfig::twoc2p()
    })
    .await;
    let twoc2p = twoc2p_for(&psp);

    // WHEN a card is declined and another approved
    let declined = request("pm_card_chargeDeclinedInsufficientFunds");
    twoc2p.create_charge(&declined, TIMEOUT).await;
    let approved = request("pm_card_visa");
    let PspOutcome::Approved {
        provider_payment_id,
    } = twoc2p.create_charge(&approved, TIMEOUT).await
    else {
        panic!("the charge was not approved")
    };

    // THEN two notifications arrive, each verified by payonce's scheme
    let mut deliveries = Vec::new();
    for _ in 0..200 {
        deliveries = received.lock().expect("lock").clone();
        if deliveries.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.abort();
    assert_eq!(deliveries.len(), 2, "{deliveries:#?}");
    assert!(
        deliveries.iter().all(|(verified, _)| *verified),
        "{deliveries:#?}"
    );
    // AND payonce reads each as the settlement the adapter saw
    let events: Vec<_> = deliveries
        .iter()
        .map(|(_, body)| scheme.parse(body.as_bytes()).expect("a notification"))
        .collect();
    assert_eq!(
        events[0].payment_id.as_deref(),
        Some(declined.payment_id.as_str())
    );
    assert!(
        matches!(
            &events[0].settlement,
            Some(Settlement::Declined { decline_code, .. }) if decline_code == "4051"
        ),
        "{:?}",
        events[0].settlement
    );
    assert_eq!(
        events[1].payment_id.as_deref(),
        Some(approved.payment_id.as_str())
    );
    assert_eq!(
        events[1].settlement,
        Some(Settlement::Succeeded {
            provider_payment_id
        })
    );
    assert_eq!(
        events[1]
            .amount
            .as_ref()
            .map(|a| (a.minor, a.currency.as_str())),
        Some((3000, "sgd"))
    );
    assert_ne!(events[0].event_id, events[1].event_id);
}
