//! The 2C2P adapter over HTTP against the fake PSP's 2C2P face: the outcome classes of a charge
//! (approved and named by the invoice number, declined with 2C2P's issuer code, refused for a method the PSP
//! does not know), a lost Do Payment answer read by the inquiry and the lookup, a re-sent create
//! that gets `9015` and only reads the first attempt (never pays twice), the invoice-number fence
//! on an unused and on a used invoice, refunds that are never sent, and the face's backend
//! notification, verified and read by payonce's 2C2P scheme.

use async_trait::async_trait;
use payonce::adapters::psp::transport::{
    CallFailure, HttpTransport, PspTransport, WireCall, WireReply,
};
use payonce::adapters::psp::twoc2p::REFUNDS_UNSUPPORTED;
use payonce::adapters::psp::twoc2p_ids::invoice_no_for;
use payonce::adapters::psp::twoc2p_maintenance::{
    void_reference, Maintenance, MaintenanceKeys, NOT_SETTLED_CODE,
};
use payonce::adapters::psp::TwoC2pNotifications;
use payonce::adapters::psp::TwoC2pPsp;
use payonce::domain::RefundSettlement;
use payonce::domain::{refund_key, Currency, Settlement};
use payonce::ports::SiblingRefunds;
use payonce::ports::{
    charge_key, ChargeRequest, Fence, Psp, PspLookup, PspOutcome, RefundOutcome, RefundRequest,
    WebhookScheme,
};
use payonce_fake_psp::{FakeCharge, FakePspConfig, RunningFakePsp, DEFAULT_TWOC2P_MERCHANT_ID};
use payonce_tests::stack::{
    start_fake_psp, twoc2p_for, twoc2p_maintenance_for, twoc2p_without_refunds_for, FAKE_API_KEY,
};
use std::sync::atomic::{AtomicUsize, Ordering};
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
        earlier_may_run: false,
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
async fn without_the_maintenance_keys_refunds_are_not_supported_and_never_sent() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_without_refunds_for(&psp);
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
        captured: 0,
    };
    assert_eq!(
        twoc2p.create_refund(&refund, TIMEOUT).await,
        RefundOutcome::NotSent {
            reason: REFUNDS_UNSUPPORTED.into()
        }
    );
    assert!(twoc2p
        .lookup_refund_among(&refund, &SiblingRefunds::default())
        .await
        .is_err());
    assert_eq!(psp.requests_seen(), seen);
    assert!(psp.refunds().is_empty());
}

/// A transport that loses, once armed with `n`, the answer of its `n`-th call from then on,
/// after the call was delivered.
#[derive(Debug, Clone)]
struct LosesAnAnswer {
    inner: HttpTransport,
    countdown: Arc<AtomicUsize>,
}

#[async_trait]
impl PspTransport for LosesAnAnswer {
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure> {
        let reply = self.inner.send(call, timeout).await;
        let left = self.countdown.load(Ordering::SeqCst);
        if left > 0 {
            self.countdown.store(left - 1, Ordering::SeqCst);
            if left == 1 {
                return Err(CallFailure::AfterConnect("the test lost the answer".into()));
            }
        }
        reply
    }
}

/// The 2C2P adapter over `psp` whose maintenance calls go through a [`LosesAnAnswer`], and its
/// countdown.
fn twoc2p_losing_answers(psp: &RunningFakePsp) -> (TwoC2pPsp<LosesAnAnswer>, Arc<AtomicUsize>) {
    let countdown = Arc::new(AtomicUsize::new(0));
    let transport = |base: &str, countdown: Arc<AtomicUsize>| LosesAnAnswer {
        inner: HttpTransport::new(base, Duration::from_secs(1), TIMEOUT).expect("client"),
        countdown,
    };
    let config = twoc2p_maintenance_for(psp);
    let (origin, path) = config
        .action_url
        .split_once("/2C2PFrontend")
        .map(|(origin, path)| (origin.to_owned(), format!("/2C2PFrontend{path}")))
        .expect("the fake's action URL");
    let keys = MaintenanceKeys::from_der(&config.merchant_private_key, &config.twoc2p_public_key)
        .expect("keys");
    let adapter = TwoC2pPsp::with_transport(
        transport(&psp.base_url(), Arc::default()),
        "2c2p",
        DEFAULT_TWOC2P_MERCHANT_ID,
        FAKE_API_KEY,
        TIMEOUT,
    )
    .expect("adapter")
    .with_maintenance(Maintenance::new(
        transport(&origin, countdown.clone()),
        path,
        DEFAULT_TWOC2P_MERCHANT_ID,
        keys,
        TIMEOUT,
    ));
    (adapter, countdown)
}

fn refund_of(
    request: &ChargeRequest,
    provider_payment_id: &str,
    n: u32,
    amount: i64,
) -> RefundRequest {
    RefundRequest {
        refund_id: format!("rfd_{}_{n}", request.payment_id),
        payment_id: request.payment_id.clone(),
        provider_payment_id: provider_payment_id.to_owned(),
        amount,
        currency: request.currency,
        reason: None,
        idempotency_key: refund_key(&request.payment_id, &n.to_string()),
        resend: false,
        provider_refund_id: None,
        captured: request.amount,
    }
}

/// The maintenance actions the fake saw: `processType actionAmount -> respCode`.
fn actions(psp: &RunningFakePsp) -> Vec<String> {
    psp.twoc2p_actions()
        .expect("the 2C2P face")
        .iter()
        .map(|a| {
            format!(
                "{} {} -> {}",
                a.process_type.as_deref().unwrap_or("?"),
                a.action_amount.as_deref().unwrap_or("-"),
                a.resp_code.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

async fn approved<T: PspTransport>(twoc2p: &TwoC2pPsp<T>, request: &ChargeRequest) -> String {
    match twoc2p.create_charge(request, TIMEOUT).await {
        PspOutcome::Approved {
            provider_payment_id,
        } => provider_payment_id,
        other => panic!("the charge was not approved: {other:?}"),
    }
}

#[tokio::test]
async fn with_the_keys_a_settled_payment_is_refunded_in_parts_each_read_back_by_its_reference() {
    let psp = twoc2p_psp().await;
    let twoc2p = twoc2p_for(&psp);
    assert!(twoc2p.supports_refunds());
    let request = request("pm_card_visa");
    let charge = approved(&twoc2p, &request).await;

    // WHEN 10.00 of the 30.00 is refunded
    let first = refund_of(&request, &charge, 1, 1000);
    let RefundOutcome::Answered(RefundSettlement::Succeeded {
        provider_refund_id: first_ref,
    }) = twoc2p.create_refund(&first, TIMEOUT).await
    else {
        panic!("the first refund did not succeed")
    };
    // THEN the refund status was read, then one refund sent; the fake holds it for the payment
    assert_eq!(actions(&psp), ["RS 30.00 -> 00", "R 10.00 -> 00"]);
    let refunds = psp.refunds();
    assert_eq!(refunds.len(), 1, "{refunds:#?}");
    assert_eq!(
        (
            refunds[0].amount,
            refunds[0].payment_id.as_deref(),
            refunds[0].id.as_str()
        ),
        (1000, Some(request.payment_id.as_str()), first_ref.as_str())
    );

    // AND a second part, with the first known as the payment's other refund
    let second = refund_of(&request, &charge, 2, 500);
    let siblings = SiblingRefunds {
        known: vec![first_ref.clone()],
        unresolved: vec![],
    };
    let RefundOutcome::Answered(RefundSettlement::Succeeded {
        provider_refund_id: second_ref,
    }) = twoc2p
        .create_refund_among(&second, &siblings, TIMEOUT)
        .await
    else {
        panic!("the second refund did not succeed")
    };
    assert_ne!(first_ref, second_ref);
    assert_eq!(psp.refunds().len(), 2);

    // AND each is read back by its reference
    let mut known = first.clone();
    known.provider_refund_id = Some(first_ref.clone());
    assert_eq!(
        twoc2p
            .lookup_refund_among(&known, &SiblingRefunds::default())
            .await
            .unwrap(),
        Some(RefundSettlement::Succeeded {
            provider_refund_id: first_ref
        })
    );

    // AND more than what is left is refused by 2C2P and fails, with nothing refunded
    let third = refund_of(&request, &charge, 3, 1600);
    assert_eq!(
        twoc2p.create_refund(&third, TIMEOUT).await,
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: "2c2p_30".into()
        })
    );
    assert_eq!(psp.refunds().len(), 2);
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_found_by_the_refund_status_and_never_sent_twice() {
    let psp = twoc2p_psp().await;
    let (twoc2p, lose) = twoc2p_losing_answers(&psp);
    let request = request("pm_card_visa");
    let charge = approved(&twoc2p, &request).await;
    let mut refund = refund_of(&request, &charge, 1, 1000);

    // GIVEN a refund that reached 2C2P, its answer lost (the refund status read first is not)
    lose.store(2, Ordering::SeqCst);
    let outcome = twoc2p.create_refund(&refund, TIMEOUT).await;
    assert!(
        matches!(outcome, RefundOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    assert_eq!(psp.refunds().len(), 1, "the refund ran at 2C2P");

    // WHEN it is sent again (a takeover, or reconcile)
    refund.resend = true;
    let again = twoc2p.create_refund(&refund, TIMEOUT).await;

    // THEN the refund status finds it, and nothing more is sent: one refund at 2C2P
    let RefundOutcome::Answered(RefundSettlement::Succeeded { provider_refund_id }) = again else {
        panic!("not found: {again:?}")
    };
    assert_eq!(provider_refund_id, psp.refunds()[0].id);
    assert_eq!(
        actions(&psp),
        ["RS 30.00 -> 00", "R 10.00 -> 00", "RS 30.00 -> 00"]
    );
    assert_eq!(psp.refunds().len(), 1);
    // AND a lookup finds it the same way
    assert_eq!(
        twoc2p
            .lookup_refund_among(&refund, &SiblingRefunds::default())
            .await
            .unwrap(),
        Some(RefundSettlement::Succeeded { provider_refund_id })
    );
}

#[tokio::test]
async fn before_settlement_the_whole_is_voided_and_a_part_fails_unsent() {
    let psp = start_fake_psp(FakePspConfig {
        twoc2p_settle_after: Duration::from_secs(24 * 3600),
        ..FakePspConfig::twoc2p()
    })
    .await;
    let twoc2p = twoc2p_for(&psp);
    let request = request("pm_card_visa");
    let charge = approved(&twoc2p, &request).await;

    // A part: refused before anything but the status was asked
    assert_eq!(
        twoc2p
            .create_refund(&refund_of(&request, &charge, 1, 1000), TIMEOUT)
            .await,
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: NOT_SETTLED_CODE.into()
        })
    );
    assert_eq!(actions(&psp), ["RS 30.00 -> 00"]);

    // The whole: voided, the charge canceled at 2C2P, no money moved
    let whole = refund_of(&request, &charge, 2, 3000);
    assert_eq!(
        twoc2p.create_refund(&whole, TIMEOUT).await,
        RefundOutcome::Answered(RefundSettlement::Succeeded {
            provider_refund_id: void_reference(&charge)
        })
    );
    assert_eq!(actions(&psp)[1..], ["RS 30.00 -> 00", "V 30.00 -> 00"]);
    assert_eq!(the_charge(&psp, &request).outcome, "canceled");
    assert!(psp.refunds().is_empty());
    // AND a re-send of the void reads it as done
    let mut again = whole;
    again.resend = true;
    assert_eq!(
        twoc2p.create_refund(&again, TIMEOUT).await,
        RefundOutcome::Answered(RefundSettlement::Succeeded {
            provider_refund_id: void_reference(&charge)
        })
    );
    assert_eq!(actions(&psp).len(), 4, "only the status was read again");
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
