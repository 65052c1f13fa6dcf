//! The PayPal adapter over HTTP against the fake PSP's PayPal face, every call recorded on its
//! way out: the OAuth token (fetched once, kept, fetched again once after a 401), the create per
//! payment source (a vaulted card, `card_vault:`, a vaulted wallet, the buyer's approval at the
//! payer-action link), declines and refusals, a lost create answered by its re-send under the
//! same `PayPal-Request-Id`, an order left for our capture (the fake's two-step mode) captured
//! exactly once, manual authorizations captured in part or voided, refunds matched by their
//! `custom_id`, amounts in yen (no decimals) and dollars. And PayPal's webhooks: the fake's
//! deliveries verified and read by payonce's scheme, and the vendored independent vectors
//! through the real receiver.

use async_trait::async_trait;
use payonce::adapters::memory::MemoryQueue;
use payonce::adapters::psp::paypal_webhook::CertFetch;
use payonce::adapters::psp::transport::{
    CallFailure, HttpTransport, PspTransport, WireBody, WireCall, WireReply,
};
use payonce::adapters::psp::{HttpCertFetch, PayPalPsp, PayPalWebhooks};
use payonce::clock::ManualClock;
use payonce::domain::{
    refund_key, CancellationReason, CaptureMethod, Currency, OperationKind, Payment, PaymentStatus,
    Progress, RefundSettlement, Settlement,
};
use payonce::ports::{
    charge_key, ChargeRequest, OperationOutcome, OperationRequest, Psp, PspLookup, PspOutcome,
    RefundOutcome, RefundRequest, WebhookScheme,
};
use payonce::service::webhooks::{Providers, WebhookReceiver};
use payonce_fake_psp::{
    FakeCharge, FakePspConfig, RunningFakePsp, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_PAYPAL_WEBHOOK_ID,
};
use payonce_tests::stack::{api_event, start_fake_psp, Reply, CHECKOUT_ORIGIN, FAKE_API_KEY};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const TIMEOUT: Duration = Duration::from_secs(10);

/// One call the adapter sent, as it left: what the fake's recorded requests are checked against.
#[derive(Debug, Clone)]
struct Call {
    method: &'static str,
    path: String,
    /// `PayPal-Request-Id`.
    request_id: Option<String>,
    /// `Basic` (the token call) or `Bearer`.
    auth: String,
    /// The JSON body, if any.
    body: Option<Value>,
    /// The status answered; `None` when no answer came.
    status: Option<u16>,
}

/// HTTP to the fake, recording every call, and able to send the next `revoke` calls with a
/// token PayPal no longer honours (as a token PayPal revoked, or one that expired early).
#[derive(Debug)]
struct Recording {
    http: HttpTransport,
    calls: Mutex<Vec<Call>>,
    revoke: AtomicU32,
}

impl Recording {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("lock").clone()
    }

    /// The calls to `path` (`POST /v2/checkout/orders` is `"/v2/checkout/orders"`).
    fn calls_to(&self, path: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|call| call.path == path)
            .collect()
    }

    /// Sends the next `calls` bearer calls with a revoked token.
    fn revoke_next(&self, calls: u32) {
        self.revoke.store(calls, Ordering::SeqCst);
    }
}

#[async_trait]
impl PspTransport for Recording {
    async fn send(&self, call: &WireCall, timeout: Duration) -> Result<WireReply, CallFailure> {
        let mut call = call.clone();
        let bearer = call
            .header("Authorization")
            .is_some_and(|auth| auth.starts_with("Bearer "));
        if bearer
            && self
                .revoke
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            for (name, value) in &mut call.headers {
                if name.eq_ignore_ascii_case("Authorization") {
                    *value = "Bearer A21AA-revoked-by-the-test".to_owned();
                }
            }
        }
        let answer = self.http.send(&call, timeout).await;
        self.calls.lock().expect("lock").push(Call {
            method: call.method,
            path: call.path.clone(),
            request_id: call.header("PayPal-Request-Id").map(str::to_owned),
            auth: call
                .header("Authorization")
                .and_then(|auth| auth.split(' ').next())
                .unwrap_or_default()
                .to_owned(),
            body: match &call.body {
                WireBody::Json(text) => serde_json::from_str(text).ok(),
                WireBody::Empty | WireBody::Form(_) | WireBody::Text(_) => None,
            },
            status: answer.as_ref().ok().map(|reply| reply.status),
        });
        answer
    }
}

/// The PayPal adapter over a recording transport to `psp`, with the client id and secret the
/// tests share (5 s per request).
fn paypal(psp: &RunningFakePsp) -> PayPalPsp<Recording> {
    paypal_with(psp, DEFAULT_PAYPAL_CLIENT_ID, FAKE_API_KEY)
}

fn paypal_with(psp: &RunningFakePsp, client_id: &str, secret: &str) -> PayPalPsp<Recording> {
    let http = HttpTransport::new(
        psp.base_url(),
        Duration::from_secs(1),
        Duration::from_secs(5),
    )
    .expect("HTTP client");
    let recording = Recording {
        http,
        calls: Mutex::default(),
        revoke: AtomicU32::new(0),
    };
    PayPalPsp::with_transport(
        recording,
        "paypal",
        client_id,
        secret,
        Duration::from_secs(5),
    )
}

async fn paypal_psp() -> RunningFakePsp {
    start_fake_psp(FakePspConfig::paypal()).await
}

/// The fake in its two-step mode: a vaulted source is charged only by our capture (or
/// authorization).
async fn two_step_psp() -> RunningFakePsp {
    start_fake_psp(FakePspConfig {
        paypal_one_step_vault: false,
        ..FakePspConfig::paypal()
    })
    .await
}

fn request(amount: i64, currency: Currency, payment_method: &str) -> ChargeRequest {
    let payment_id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    ChargeRequest {
        idempotency_key: charge_key(&payment_id),
        payment_id,
        amount,
        currency,
        payment_method: payment_method.into(),
        return_url: None,
        capture: CaptureMethod::Automatic,
        earlier_may_run: false,
    }
}

fn manual(amount: i64, currency: Currency, payment_method: &str) -> ChargeRequest {
    ChargeRequest {
        capture: CaptureMethod::Manual,
        ..request(amount, currency, payment_method)
    }
}

/// The one order the fake holds for `request`: made under its `PayPal-Request-Id`.
fn the_order(psp: &RunningFakePsp, request: &ChargeRequest) -> FakeCharge {
    let mut orders: Vec<FakeCharge> = psp
        .charges()
        .into_iter()
        .filter(|c| c.payment_id.as_deref() == Some(request.payment_id.as_str()))
        .collect();
    assert_eq!(orders.len(), 1, "{orders:#?}");
    let order = orders.remove(0);
    assert_eq!(
        (order.provider.as_str(), order.idempotency_key.as_deref()),
        ("paypal", Some(request.idempotency_key.as_str()))
    );
    order
}

/// Whether the fake holds any order for `request`.
fn has_order(psp: &RunningFakePsp, request: &ChargeRequest) -> bool {
    psp.charges()
        .iter()
        .any(|c| c.payment_id.as_deref() == Some(request.payment_id.as_str()))
}

/// `request`'s payment as stored with the order id `order_id`, for a lookup.
fn stored(request: &ChargeRequest, order_id: &str) -> Payment {
    Payment {
        payment_id: request.payment_id.clone(),
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        order_version: 1,
        owner: "alice".into(),
        amount: request.amount,
        currency: request.currency,
        payment_method: request.payment_method.clone(),
        provider: "paypal".into(),
        provider_payment_id: Some(order_id.to_owned()),
        status: PaymentStatus::Processing,
        failure: None,
        capture: request.capture,
        return_url: request.return_url.clone(),
        progress: Progress::default(),
        operation: None,
        operation_count: 0,
        idempotency_pk: "payments.create#alice#k".into(),
        psp_maybe_reached: true,
        amount_refunded: 0,
        refund_pending: 0,
        refund_count: 0,
        duplicate_refund: false,
        refund_required: false,
        created_at_ms: 0,
        updated_at_ms: 0,
        check_at_ms: 0,
    }
}

/// A capture (`amount` `None`: the charge path's completion of the whole order) or void of
/// `request`'s order under `key`.
fn operation(
    kind: OperationKind,
    request: &ChargeRequest,
    order_id: &str,
    amount: Option<i64>,
    key: &str,
) -> OperationRequest {
    OperationRequest {
        kind,
        payment_id: request.payment_id.clone(),
        provider_payment_id: order_id.to_owned(),
        amount,
        payment_amount: request.amount,
        capture: request.capture,
        currency: request.currency,
        idempotency_key: key.to_owned(),
    }
}

/// The order id an approved create answered.
fn approved(outcome: &PspOutcome) -> String {
    match outcome {
        PspOutcome::Approved {
            provider_payment_id,
        } => provider_payment_id.clone(),
        other => panic!("not approved: {other:?}"),
    }
}

#[tokio::test]
async fn a_token_is_fetched_once_kept_and_fetched_again_once_after_a_401() {
    let psp = paypal_psp().await;
    let paypal = paypal(&psp);

    // WHEN two charges are made
    for n in 0..2 {
        let outcome = paypal
            .create_charge(&request(3000, Currency::Jpy, "pm_card_visa"), TIMEOUT)
            .await;
        approved(&outcome);
        assert_eq!(psp.requests_seen(), 2 + n, "one token for both");
    }
    // THEN one token call (Basic, form-encoded), then the creates with its Bearer token
    let calls = paypal.transport().calls();
    let shape: Vec<(&str, &str, &str, Option<u16>)> = calls
        .iter()
        .map(|c| (c.method, c.path.as_str(), c.auth.as_str(), c.status))
        .collect();
    assert_eq!(
        shape,
        [
            ("POST", "/v1/oauth2/token", "Basic", Some(200)),
            ("POST", "/v2/checkout/orders", "Bearer", Some(201)),
            ("POST", "/v2/checkout/orders", "Bearer", Some(201)),
        ]
    );

    // WHEN PayPal no longer honours the token at the next call
    paypal.transport().revoke_next(1);
    let third = request(3000, Currency::Jpy, "pm_card_visa");
    let outcome = paypal.create_charge(&third, TIMEOUT).await;

    // THEN the 401 fetches a new token and the identical request is sent again, once: one order
    let id = approved(&outcome);
    assert_eq!(the_order(&psp, &third).id, id);
    let calls = paypal.transport().calls();
    let last: Vec<(&str, Option<u16>)> = calls[3..]
        .iter()
        .map(|c| (c.path.as_str(), c.status))
        .collect();
    assert_eq!(
        last,
        [
            ("/v2/checkout/orders", Some(401)),
            ("/v1/oauth2/token", Some(200)),
            ("/v2/checkout/orders", Some(201)),
        ]
    );
    assert_eq!(
        (&calls[3].request_id, &calls[3].body),
        (&calls[5].request_id, &calls[5].body),
        "the same request"
    );
    assert_eq!(psp.requests_seen(), 3 + 3);

    // WHEN the new token is refused too
    paypal.transport().revoke_next(2);
    let fourth = request(3000, Currency::Jpy, "pm_card_visa");
    let outcome = paypal.create_charge(&fourth, TIMEOUT).await;

    // THEN it is fetched again only once, and the charge was not sent (a 401 applies nothing)
    assert_eq!(
        outcome,
        PspOutcome::NotSent {
            reason: "the PSP refused our credentials (401)".into()
        }
    );
    assert!(!has_order(&psp, &fourth));
    let calls = paypal.transport().calls();
    let statuses: Vec<(&str, Option<u16>)> = calls[6..]
        .iter()
        .map(|c| (c.path.as_str(), c.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("/v2/checkout/orders", Some(401)),
            ("/v1/oauth2/token", Some(200)),
            ("/v2/checkout/orders", Some(401)),
        ]
    );
}

#[tokio::test]
async fn client_credentials_paypal_refuses_are_not_sent_and_make_nothing() {
    let psp = paypal_psp().await;
    for (client_id, secret) in [
        (DEFAULT_PAYPAL_CLIENT_ID, "not-the-secret"),
        ("not-the-client-id", FAKE_API_KEY),
    ] {
        let paypal = paypal_with(&psp, client_id, secret);
        let seen = psp.requests_seen();

        let outcome = paypal
            .create_charge(&request(3000, Currency::Jpy, "pm_card_visa"), TIMEOUT)
            .await;

        // THEN only the token call was made, refused: the charge was never sent
        assert_eq!(
            outcome,
            PspOutcome::NotSent {
                reason: "the PSP refused our credentials (401)".into()
            },
            "{client_id}"
        );
        assert_eq!(psp.requests_seen(), seen + 1);
        let calls = paypal.transport().calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].path.as_str(), calls[0].status),
            ("/v1/oauth2/token", Some(401))
        );
    }
    assert!(psp.charges().is_empty());
}

#[tokio::test]
async fn each_vaulted_source_is_sent_as_paypal_expects_and_charged_in_the_create() {
    let psp = paypal_psp().await;
    let paypal = paypal(&psp);
    for (payment_method, source, vault_id, amount, currency, value) in [
        (
            "pm_card_visa",
            "card",
            "pm_card_visa",
            3000,
            Currency::Jpy,
            "3000",
        ),
        (
            "card_vault:pm_card_mastercard",
            "card",
            "pm_card_mastercard",
            3005,
            Currency::Usd,
            "30.05",
        ),
        (
            "paypal_vault:pm_card_visa",
            "paypal",
            "pm_card_visa",
            120,
            Currency::Usd,
            "1.20",
        ),
    ] {
        let charge = request(amount, currency, payment_method);

        let outcome = paypal.create_charge(&charge, TIMEOUT).await;

        // THEN one order under the charge's request id, charged (its capture completed)
        let id = approved(&outcome);
        let order = the_order(&psp, &charge);
        assert_eq!(
            (
                order.id.as_str(),
                order.outcome.as_str(),
                order.amount,
                order.currency.as_str(),
                order.payment_method.as_str(),
                order.capture_method.as_str(),
            ),
            (
                id.as_str(),
                "succeeded",
                amount,
                currency.as_str(),
                vault_id,
                "automatic"
            ),
            "{payment_method}"
        );
        // AND the create said it in PayPal's terms: intent CAPTURE, our payment id as the
        // unit's custom and invoice id, the amount as a decimal string by the currency's
        // exponent, the vault id under its source
        let create = paypal.transport().calls_to("/v2/checkout/orders").pop();
        let create = create.expect("the create");
        assert_eq!(
            create.request_id.as_deref(),
            Some(format!("payonce-charge-{}", charge.payment_id).as_str())
        );
        assert_eq!(
            create.body,
            Some(json!({
                "intent": "CAPTURE",
                "purchase_units": [{
                    "custom_id": charge.payment_id,
                    "invoice_id": charge.payment_id,
                    "amount": {"currency_code": currency.as_str().to_ascii_uppercase(), "value": value},
                }],
                "payment_source": {source: {"vault_id": vault_id}},
            })),
            "{payment_method}"
        );
        // AND a lookup by the stored order id reads the capture
        let lookup = paypal
            .lookup_payment(&stored(&charge, &id))
            .await
            .expect("lookup");
        assert_eq!(
            lookup,
            PspLookup::Captured {
                provider_payment_id: id.clone(),
                amount_captured: amount,
                amount: Some(payonce::ports::CheckedAmount {
                    minor: amount,
                    currency: currency.as_str().to_owned()
                }),
            },
            "{payment_method}"
        );
        assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);
    }
    // AND nothing is ever searched by our reference: no call
    let seen = psp.requests_seen();
    assert_eq!(
        paypal.lookup("pay_anything").await.expect("lookup"),
        PspLookup::NotFound
    );
    assert_eq!(psp.requests_seen(), seen);
}

#[tokio::test]
async fn declines_and_refusals_are_told_apart() {
    let psp = paypal_psp().await;
    let paypal = paypal(&psp);

    // A completed order whose capture was declined: declined, naming the order
    let declined = request(3000, Currency::Jpy, "pm_card_visa_chargeDeclined");
    let outcome = paypal.create_charge(&declined, TIMEOUT).await;
    let order = the_order(&psp, &declined);
    assert_eq!(
        outcome,
        PspOutcome::Declined {
            provider_payment_id: Some(order.id.clone()),
            decline_code: "DECLINED_BY_RISK_FRAUD_FILTERS".into()
        }
    );
    assert_eq!(order.outcome, "failed");
    assert_eq!(
        paypal
            .lookup_payment(&stored(&declined, &order.id))
            .await
            .expect("lookup"),
        PspLookup::Declined {
            provider_payment_id: order.id.clone(),
            decline_code: "DECLINED_BY_RISK_FRAUD_FILTERS".into(),
            amount: Some(payonce::ports::CheckedAmount {
                minor: 3000,
                currency: "jpy".into()
            }),
        }
    );

    // 422 INSTRUMENT_DECLINED: declined, and no order was made
    let refused_card = request(
        3000,
        Currency::Jpy,
        "pm_card_chargeDeclinedInsufficientFunds",
    );
    assert_eq!(
        paypal.create_charge(&refused_card, TIMEOUT).await,
        PspOutcome::Declined {
            provider_payment_id: None,
            decline_code: "INSTRUMENT_DECLINED".into()
        }
    );
    assert!(!has_order(&psp, &refused_card));

    // 422 TOKEN_ID_NOT_FOUND: the payment method is rejected, no order
    let unknown = request(3000, Currency::Jpy, "pm_card_nonexistent");
    let outcome = paypal.create_charge(&unknown, TIMEOUT).await;
    assert!(
        matches!(outcome, PspOutcome::Rejected { .. }),
        "{outcome:?}"
    );
    assert!(!has_order(&psp, &unknown));

    // 422 CANNOT_BE_ZERO_OR_NEGATIVE: refused for good, in either currency, no order
    for currency in [Currency::Jpy, Currency::Usd] {
        let nothing = request(0, currency, "pm_card_visa");
        assert_eq!(
            paypal.create_charge(&nothing, TIMEOUT).await,
            PspOutcome::Refused {
                code: "CANNOT_BE_ZERO_OR_NEGATIVE".into()
            },
            "{currency:?}"
        );
        assert!(!has_order(&psp, &nothing));
    }
    // (The token, the declined create and its lookup, then one create each: nothing was sent
    // twice.)
    assert_eq!(psp.requests_seen(), 1 + 2 + 1 + 1 + 2);
    assert_eq!(psp.charges().len(), 1);
    assert_eq!(psp.succeeded_charges_for(&declined.payment_id), 0);
}

/// Answers the fake's payer page at `url` as the buyer: `complete` approves; returns the
/// status and where it sends the buyer.
async fn buyer_answers(url: &str, result: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client");
    let response = client
        .post(url)
        .form(&[("result", result)])
        .send()
        .await
        .expect("the payer page");
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (response.status().as_u16(), location)
}

#[tokio::test]
async fn a_buyer_approves_at_the_payer_action_link_and_the_order_is_captured_exactly_once() {
    let psp = paypal_psp().await;
    let paypal = paypal(&psp);
    let return_url = format!("{CHECKOUT_ORIGIN}/paid");
    let charge = ChargeRequest {
        return_url: Some(return_url.clone()),
        ..request(3005, Currency::Usd, "paypal")
    };

    // WHEN the buyer is to approve at PayPal
    let outcome = paypal.create_charge(&charge, TIMEOUT).await;

    // THEN the order waits at its payer-action link, which is the action; nothing is charged
    let order = the_order(&psp, &charge);
    let PspOutcome::ActionRequired {
        provider_payment_id,
        redirect_url,
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(provider_payment_id, order.id);
    assert_eq!(
        redirect_url,
        format!("{}/_fake/authenticate/{}", psp.base_url(), order.id)
    );
    assert_eq!(
        paypal.transport().calls_to("/v2/checkout/orders")[0]
            .body
            .as_ref()
            .map(|b| b["payment_source"].clone()),
        Some(json!({"paypal": {"experience_context": {
            "return_url": return_url, "cancel_url": return_url, "user_action": "PAY_NOW"}}}))
    );
    assert_eq!(order.outcome, "pending");
    let payment = stored(&charge, &order.id);
    assert!(matches!(
        paypal.lookup_payment(&payment).await.expect("lookup"),
        PspLookup::ActionRequired { .. }
    ));

    // WHEN the buyer approves there
    let (status, location) = buyer_answers(&redirect_url, "complete").await;

    // THEN they are sent back to the return URL with the order as token, and the order waits
    // for our capture: authorized, for the whole amount
    assert_eq!(status, 303);
    assert!(
        location.starts_with(&format!("{return_url}?token={}", order.id)),
        "{location}"
    );
    assert_eq!(
        paypal.lookup_payment(&payment).await.expect("lookup"),
        PspLookup::Authorized {
            provider_payment_id: order.id.clone(),
            amount_capturable: 3005,
            capture_before_ms: None
        }
    );
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 0);

    // WHEN the charge path captures it (under the payment's capture key), and sends the capture
    // again, and another capture under another key arrives
    let key = OperationKind::Capture.psp_key(&charge.payment_id);
    let capture = operation(OperationKind::Capture, &charge, &order.id, None, &key);
    let captured = Settlement::Captured {
        provider_payment_id: order.id.clone(),
        amount_captured: 3005,
    };
    assert_eq!(
        paypal.operate(&capture, TIMEOUT).await,
        OperationOutcome::Answered(captured.clone())
    );
    assert_eq!(
        paypal.operate(&capture, TIMEOUT).await,
        OperationOutcome::Answered(captured.clone())
    );
    let other = operation(
        OperationKind::Capture,
        &charge,
        &order.id,
        None,
        "payonce-other",
    );
    assert_eq!(
        paypal.operate(&other, TIMEOUT).await,
        OperationOutcome::Answered(captured.clone()),
        "ORDER_ALREADY_CAPTURED reads as captured"
    );

    // THEN PayPal captured once: the re-send was replayed, the other refused and the order read
    let path = format!("/v2/checkout/orders/{}/capture", order.id);
    let captures: Vec<(Option<String>, Option<u16>)> = paypal
        .transport()
        .calls_to(&path)
        .into_iter()
        .map(|c| (c.request_id, c.status))
        .collect();
    assert_eq!(
        captures,
        [
            (Some(key.clone()), Some(201)),
            (Some(key.clone()), Some(200)),
            (Some("payonce-other".into()), Some(422)),
        ]
    );
    let order = the_order(&psp, &charge);
    assert_eq!(
        (
            order.outcome.as_str(),
            order.captures.len(),
            order.payment_method.as_str()
        ),
        ("succeeded", 1, "paypal")
    );
    assert_eq!(
        order.captures[0].idempotency_key.as_deref(),
        Some(key.as_str())
    );
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);
}

#[tokio::test]
async fn a_buyers_approval_without_a_return_url_or_for_a_manual_capture_is_never_sent() {
    let psp = paypal_psp().await;
    let paypal = paypal(&psp);
    // A buyer with nowhere to come back to cannot be sent to approve: authentication required
    // (nothing was, or could be, charged)
    let nowhere = request(3000, Currency::Jpy, "paypal");
    assert_eq!(
        paypal.create_charge(&nowhere, TIMEOUT).await,
        PspOutcome::AuthenticationRequired {
            provider_payment_id: None
        }
    );
    // A manual capture needs a vaulted source: refused
    let manual_buyer = ChargeRequest {
        return_url: Some(format!("{CHECKOUT_ORIGIN}/paid")),
        ..manual(3000, Currency::Jpy, "paypal")
    };
    assert_eq!(
        paypal.create_charge(&manual_buyer, TIMEOUT).await,
        PspOutcome::Refused {
            code: "paypal_manual_capture_needs_vault".into()
        }
    );
    // Neither was sent (not even a token was asked for)
    assert_eq!(psp.requests_seen(), 0);
    assert!(psp.charges().is_empty());
}

#[tokio::test]
async fn a_lost_create_is_sent_again_under_its_request_id_and_answered_with_the_one_order() {
    let psp = paypal_psp().await;
    let paypal = paypal(&psp);
    let charge = request(3000, Currency::Jpy, "pm_fake_lost_response");

    // WHEN PayPal makes the order and its answer is lost
    let outcome = paypal.create_charge(&charge, TIMEOUT).await;

    // THEN the create was sent again at once, byte for byte under the same request id, and
    // PayPal's replay (200) named the one order, charged
    let id = approved(&outcome);
    let creates = paypal.transport().calls_to("/v2/checkout/orders");
    assert_eq!(creates.len(), 2);
    assert_eq!(
        (creates[0].status, creates[1].status),
        (None, Some(200)),
        "lost, then replayed"
    );
    assert_eq!(creates[0].request_id, creates[1].request_id);
    assert_eq!(creates[0].body, creates[1].body);
    assert_eq!(psp.requests_seen(), 3, "the token, the create, its re-send");
    let order = the_order(&psp, &charge);
    assert_eq!(
        (order.id.as_str(), order.outcome.as_str()),
        (id.as_str(), "succeeded")
    );

    // AND reconcile's later re-send (another invocation, its own token) is answered alike
    let later = self::paypal(&psp);
    assert_eq!(later.create_charge(&charge, TIMEOUT).await, outcome);
    assert_eq!(psp.charges().len(), 1);
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);
}

#[tokio::test]
async fn a_create_answered_too_late_for_a_resend_is_unknown_until_the_resend() {
    // GIVEN a PayPal that makes the order at once but answers after two seconds
    let psp = start_fake_psp(FakePspConfig {
        slow_delay: Duration::from_secs(2),
        ..FakePspConfig::paypal()
    })
    .await;
    let paypal = paypal(&psp);
    let charge = request(3000, Currency::Jpy, "pm_fake_slow");

    // WHEN the charge path gives it a second
    let outcome = paypal.create_charge(&charge, Duration::from_secs(1)).await;

    // THEN unknown: no time was left to send it again (and nothing was)
    assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
    assert_eq!(paypal.transport().calls_to("/v2/checkout/orders").len(), 1);
    assert_eq!(psp.requests_seen(), 2);

    // AND once the first answer is out, the re-send under the key names the one order
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let resent = paypal.create_charge(&charge, TIMEOUT).await;
    let id = approved(&resent);
    assert_eq!(the_order(&psp, &charge).id, id);
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);
}

#[tokio::test]
async fn an_order_left_for_our_capture_is_authorized_then_captured_exactly_once() {
    let psp = two_step_psp().await;
    let paypal = paypal(&psp);
    let charge = request(3005, Currency::Usd, "pm_card_visa");

    // WHEN the vaulted card's order comes back CREATED, waiting for our capture
    let outcome = paypal.create_charge(&charge, TIMEOUT).await;

    // THEN authorized for the whole amount (its id to store before the capture); nothing moved
    let order = the_order(&psp, &charge);
    assert_eq!(
        outcome,
        PspOutcome::Authorized {
            provider_payment_id: order.id.clone(),
            amount_capturable: 3005,
            capture_before_ms: None
        }
    );
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 0);
    let payment = stored(&charge, &order.id);
    assert!(matches!(
        paypal.lookup_payment(&payment).await.expect("lookup"),
        PspLookup::Authorized {
            amount_capturable: 3005,
            ..
        }
    ));

    // WHEN it is captured, the capture sent again, and captured under another key
    let key = OperationKind::Capture.psp_key(&charge.payment_id);
    let capture = operation(OperationKind::Capture, &charge, &order.id, None, &key);
    let captured = OperationOutcome::Answered(Settlement::Captured {
        provider_payment_id: order.id.clone(),
        amount_captured: 3005,
    });
    assert_eq!(paypal.operate(&capture, TIMEOUT).await, captured);
    assert_eq!(paypal.operate(&capture, TIMEOUT).await, captured);
    let other = operation(
        OperationKind::Capture,
        &charge,
        &order.id,
        None,
        "payonce-again",
    );
    assert_eq!(paypal.operate(&other, TIMEOUT).await, captured);

    // THEN one capture at PayPal, under the payment's capture key
    let order = the_order(&psp, &charge);
    assert_eq!(
        (
            order.outcome.as_str(),
            order.amount_captured,
            order.captures.len()
        ),
        ("succeeded", Some(3005), 1),
        "{order:#?}"
    );
    assert_eq!(
        order.captures[0].idempotency_key.as_deref(),
        Some(key.as_str())
    );
    let statuses: Vec<Option<u16>> = paypal
        .transport()
        .calls_to(&format!("/v2/checkout/orders/{}/capture", order.id))
        .into_iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(statuses, [Some(201), Some(200), Some(422)]);
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);
    assert_eq!(
        paypal.lookup_payment(&payment).await.expect("lookup"),
        PspLookup::Captured {
            provider_payment_id: order.id.clone(),
            amount_captured: 3005,
            amount: Some(payonce::ports::CheckedAmount {
                minor: 3005,
                currency: "usd".into()
            }),
        }
    );
}

#[tokio::test]
async fn a_pending_capture_is_not_a_final_word_and_its_lookup_settles_later() {
    let psp = start_fake_psp(FakePspConfig {
        paypal_one_step_vault: false,
        processing_for: Duration::from_millis(800),
        ..FakePspConfig::paypal()
    })
    .await;
    let paypal = paypal(&psp);
    let charge = request(3000, Currency::Jpy, "pm_fake_processing");
    let outcome = paypal.create_charge(&charge, TIMEOUT).await;
    let order = the_order(&psp, &charge);
    assert!(
        matches!(outcome, PspOutcome::Authorized { .. }),
        "{outcome:?}"
    );

    // WHEN the capture is held for review
    let key = OperationKind::Capture.psp_key(&charge.payment_id);
    let capture = operation(OperationKind::Capture, &charge, &order.id, None, &key);
    let answer = paypal.operate(&capture, TIMEOUT).await;

    // THEN it is not final: unknown, and the lookup says pending; then captured
    assert!(
        matches!(answer, OperationOutcome::Unknown { .. }),
        "{answer:?}"
    );
    let payment = stored(&charge, &order.id);
    assert_eq!(
        paypal.lookup_payment(&payment).await.expect("lookup"),
        PspLookup::Pending {
            provider_payment_id: order.id.clone()
        }
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(matches!(
        paypal.lookup_payment(&payment).await.expect("lookup"),
        PspLookup::Captured {
            amount_captured: 3000,
            ..
        }
    ));
    assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);
}

#[tokio::test]
async fn a_manual_capture_is_authorized_then_captured_in_part_or_voided() {
    for two_step in [false, true] {
        let psp = if two_step {
            two_step_psp().await
        } else {
            paypal_psp().await
        };
        let paypal = paypal(&psp);

        // WHEN a vaulted card is charged for a manual capture
        let charge = manual(3005, Currency::Usd, "pm_card_visa");
        let outcome = paypal.create_charge(&charge, TIMEOUT).await;

        // THEN it is authorized (intent AUTHORIZE; in two steps, authorized at once under the
        // payment's authorize key), until the authorization's expiry
        let order = the_order(&psp, &charge);
        let PspOutcome::Authorized {
            provider_payment_id,
            amount_capturable: 3005,
            capture_before_ms: Some(_),
        } = &outcome
        else {
            panic!("two step {two_step}: {outcome:?}")
        };
        assert_eq!(*provider_payment_id, order.id);
        assert_eq!(order.capture_method, "manual");
        let create = &paypal.transport().calls_to("/v2/checkout/orders")[0];
        assert_eq!(
            create.body.as_ref().map(|b| b["intent"].clone()),
            Some(json!("AUTHORIZE"))
        );
        let authorize = paypal
            .transport()
            .calls_to(&format!("/v2/checkout/orders/{}/authorize", order.id));
        assert_eq!(
            authorize
                .iter()
                .map(|c| c.request_id.clone())
                .collect::<Vec<_>>(),
            if two_step {
                vec![Some(format!("payonce-authorize-{}", charge.payment_id))]
            } else {
                vec![]
            }
        );
        assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 0);

        // WHEN staff capture part of it, and the capture is sent again
        let key = OperationKind::Capture.psp_key(&charge.payment_id);
        let part = operation(OperationKind::Capture, &charge, &order.id, Some(1000), &key);
        let captured = OperationOutcome::Answered(Settlement::Captured {
            provider_payment_id: order.id.clone(),
            amount_captured: 1000,
        });
        assert_eq!(paypal.operate(&part, TIMEOUT).await, captured, "{two_step}");
        assert_eq!(paypal.operate(&part, TIMEOUT).await, captured, "{two_step}");

        // THEN the authorization was captured once, for that part, under the key; the re-send
        // read the order and sent nothing
        let captures: Vec<Call> = paypal
            .transport()
            .calls()
            .into_iter()
            .filter(|c| {
                c.path.starts_with("/v2/payments/authorizations/") && c.path.ends_with("/capture")
            })
            .collect();
        assert_eq!(captures.len(), 1, "{captures:#?}");
        assert_eq!(
            (
                captures[0].request_id.as_deref(),
                captures[0].status,
                captures[0].body.clone()
            ),
            (
                Some(key.as_str()),
                Some(201),
                Some(json!({"amount": {"currency_code": "USD", "value": "10.00"},
                            "final_capture": true}))
            )
        );
        let order = the_order(&psp, &charge);
        assert_eq!(order.amount_captured, Some(1000), "{order:#?}");
        assert_eq!(psp.succeeded_charges_for(&charge.payment_id), 1);

        // WHEN another authorization is voided, then captured
        let voided = manual(3000, Currency::Jpy, "pm_card_visa");
        let PspOutcome::Authorized {
            provider_payment_id: voided_id,
            ..
        } = paypal.create_charge(&voided, TIMEOUT).await
        else {
            panic!("not authorized")
        };
        let cancel = operation(
            OperationKind::Cancel,
            &voided,
            &voided_id,
            None,
            &OperationKind::Cancel.psp_key(&voided.payment_id),
        );
        let canceled = paypal.operate(&cancel, TIMEOUT).await;

        // THEN canceled as asked, and nothing can be captured afterwards
        assert_eq!(
            canceled,
            OperationOutcome::Answered(Settlement::Canceled {
                provider_payment_id: Some(voided_id.clone()),
                reason: CancellationReason::Requested
            })
        );
        let late = operation(
            OperationKind::Capture,
            &voided,
            &voided_id,
            Some(3000),
            &OperationKind::Capture.psp_key(&voided.payment_id),
        );
        assert!(
            matches!(
                paypal.operate(&late, TIMEOUT).await,
                OperationOutcome::Answered(Settlement::Canceled { .. })
            ),
            "{two_step}"
        );
        let lookup = paypal
            .lookup_payment(&stored(&voided, &voided_id))
            .await
            .expect("lookup");
        assert_eq!(
            lookup,
            PspLookup::Canceled {
                provider_payment_id: voided_id.clone(),
                reason: Some(CancellationReason::Requested)
            },
            "{two_step}: voided as asked, not lapsed"
        );
        let void = the_order(&psp, &voided);
        assert_eq!(
            (
                void.outcome.as_str(),
                void.cancels.len(),
                void.amount_captured
            ),
            ("canceled", 1, None),
            "{void:#?}"
        );
        assert_eq!(psp.succeeded_charges_for(&voided.payment_id), 0);
    }
}

fn refund_request(
    charge: &ChargeRequest,
    order_id: &str,
    n: u32,
    amount: i64,
    resend: bool,
) -> RefundRequest {
    RefundRequest {
        refund_id: format!("rfd_{}_{n}", &charge.payment_id[4..]),
        payment_id: charge.payment_id.clone(),
        provider_payment_id: order_id.to_owned(),
        amount,
        currency: charge.currency,
        reason: None,
        idempotency_key: refund_key(&charge.payment_id, &n.to_string()),
        resend,
        provider_refund_id: None,
        captured: 0,
    }
}

#[tokio::test]
async fn refunds_carry_our_refund_id_and_a_resend_makes_no_second_refund() {
    for (currency, amount, part, value) in [
        (Currency::Jpy, 3000, 1000, "1000"),
        (Currency::Usd, 3000, 1050, "10.50"),
    ] {
        let psp = paypal_psp().await;
        let paypal = paypal(&psp);
        let charge = request(amount, currency, "pm_card_visa");
        let order_id = approved(&paypal.create_charge(&charge, TIMEOUT).await);
        let refund = refund_request(&charge, &order_id, 1, part, false);

        // WHEN part of it is refunded
        let created = paypal.create_refund(&refund, TIMEOUT).await;

        // THEN the order was read for its capture, and the capture refunded under the refund's
        // key, our refund id its custom_id
        let refunds = psp.refunds();
        assert_eq!(refunds.len(), 1, "{refunds:#?}");
        let settlement = RefundSettlement::Succeeded {
            provider_refund_id: refunds[0].id.clone(),
        };
        assert_eq!(created, RefundOutcome::Answered(settlement.clone()));
        assert_eq!(
            (
                refunds[0].amount,
                refunds[0].refund_id.as_deref(),
                refunds[0].payment_id.as_deref(),
                refunds[0].idempotency_key.as_deref(),
            ),
            (
                part,
                Some(refund.refund_id.as_str()),
                Some(charge.payment_id.as_str()),
                Some(refund.idempotency_key.as_str())
            )
        );
        let calls = paypal.transport().calls();
        let capture_id = refunds[0].charge.clone().expect("the refunded capture");
        let refund_path = format!("/v2/payments/captures/{capture_id}/refund");
        let tail: Vec<(&str, &str)> = calls[2..]
            .iter()
            .map(|c| (c.method, c.path.as_str()))
            .collect();
        assert_eq!(
            tail,
            [
                ("GET", format!("/v2/checkout/orders/{order_id}").as_str()),
                ("POST", refund_path.as_str())
            ]
        );
        assert_eq!(
            calls[3].body,
            Some(json!({
                "amount": {"currency_code": currency.as_str().to_ascii_uppercase(), "value": value},
                "custom_id": refund.refund_id,
                "invoice_id": refund.refund_id,
            }))
        );
        // AND the lookup finds it among the order's refunds by its custom_id
        assert_eq!(
            paypal
                .lookup_refund(&order_id, &refund.refund_id)
                .await
                .expect("lookup"),
            Some(settlement.clone())
        );
        assert_eq!(
            paypal
                .lookup_refund(&order_id, "rfd_nobody_1")
                .await
                .expect("lookup"),
            None
        );

        // WHEN the refund is sent again (an earlier call may have reached PayPal)
        let before = paypal.transport().calls().len();
        let again = refund_request(&charge, &order_id, 1, part, true);
        let resent = paypal.create_refund(&again, TIMEOUT).await;

        // THEN our refund is found on the order first and nothing is posted: no second refund
        assert_eq!(resent, RefundOutcome::Answered(settlement.clone()));
        assert_eq!(psp.refunds().len(), 1);
        let looked: Vec<(&str, String)> = paypal.transport().calls()[before..]
            .iter()
            .map(|c| (c.method, c.path.clone()))
            .collect();
        assert_eq!(looked, [("GET", format!("/v2/checkout/orders/{order_id}"))]);

        // AND a first send under the same key (the answer of one that was lost) is PayPal's
        // replay of the refund the key made
        let first_again = refund_request(&charge, &order_id, 1, part, false);
        assert_eq!(
            paypal.create_refund(&first_again, TIMEOUT).await,
            RefundOutcome::Answered(settlement)
        );
        assert_eq!(psp.refunds().len(), 1);
        let replay = paypal.transport().calls().pop().expect("the re-send");
        assert_eq!(
            (replay.path.as_str(), replay.status, replay.request_id),
            (
                refund_path.as_str(),
                Some(200),
                Some(refund.idempotency_key.clone())
            )
        );

        // WHEN more is asked for than is left
        let over = refund_request(&charge, &order_id, 2, amount - part + 1, false);
        assert_eq!(
            paypal.create_refund(&over, TIMEOUT).await,
            RefundOutcome::Answered(RefundSettlement::Failed {
                provider_refund_id: None,
                code: "REFUND_AMOUNT_EXCEEDED".into()
            })
        );
        assert_eq!(psp.refunds().len(), 1);
    }
}

#[tokio::test]
async fn a_refund_of_nothing_captured_fails_and_one_still_pending_settles_later() {
    let psp = start_fake_psp(FakePspConfig {
        refund_pending_for: Duration::from_millis(800),
        ..FakePspConfig::paypal()
    })
    .await;
    let paypal = paypal(&psp);

    // An authorization never captured has no capture to refund: failed, nothing posted
    let held = manual(3000, Currency::Jpy, "pm_card_visa");
    let PspOutcome::Authorized {
        provider_payment_id: order_id,
        ..
    } = paypal.create_charge(&held, TIMEOUT).await
    else {
        panic!("not authorized")
    };
    let refund = refund_request(&held, &order_id, 1, 1000, false);
    let before = paypal.transport().calls().len();
    assert_eq!(
        paypal.create_refund(&refund, TIMEOUT).await,
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: "no_capture".into()
        })
    );
    let calls = paypal.transport().calls();
    assert_eq!(
        calls[before..].iter().map(|c| c.method).collect::<Vec<_>>(),
        ["GET"]
    );

    // A declined capture: PayPal refuses to refund it (422 REFUND_NOT_ALLOWED), failed
    let declined = request(3000, Currency::Jpy, "pm_card_visa_chargeDeclined");
    let PspOutcome::Declined {
        provider_payment_id: Some(order_id),
        ..
    } = paypal.create_charge(&declined, TIMEOUT).await
    else {
        panic!("not declined")
    };
    let refund = refund_request(&declined, &order_id, 1, 1000, false);
    assert_eq!(
        paypal.create_refund(&refund, TIMEOUT).await,
        RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: "REFUND_NOT_ALLOWED".into()
        })
    );
    assert!(psp.refunds().is_empty());

    // A refund PayPal holds pending is pending, and its lookup settles it later
    let charge = request(3000, Currency::Jpy, "pm_fake_refund_pending");
    let order_id = approved(&paypal.create_charge(&charge, TIMEOUT).await);
    let refund = refund_request(&charge, &order_id, 1, 3000, false);
    let RefundOutcome::Answered(RefundSettlement::Pending { provider_refund_id }) =
        paypal.create_refund(&refund, TIMEOUT).await
    else {
        panic!("not pending")
    };
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        paypal
            .lookup_refund(&order_id, &refund.refund_id)
            .await
            .expect("lookup"),
        Some(RefundSettlement::Succeeded { provider_refund_id })
    );
    assert!(psp.refunds().iter().all(|r| r.amount == 3000));
}

/// What an endpoint verifying with payonce's PayPal scheme got: per delivery, whether it
/// verified, and the body.
type Received = Arc<Mutex<Vec<(bool, String)>>>;

/// A webhook endpoint verifying every delivery with `scheme` (the certificate fetched as the
/// receiver fetches it).
async fn paypal_receiver(
    scheme: Arc<PayPalWebhooks>,
) -> (String, Received, tokio::task::JoinHandle<()>) {
    let received: Received = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/webhooks/paypal",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let (scheme, kept) = (scheme.clone(), kept.clone());
                async move {
                    let now_s = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                    let verified = scheme.fetch_keys(&headers).await.is_ok()
                        && scheme.verify(&headers, &body, now_s).is_ok();
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
        "http://{}/webhooks/paypal",
        listener.local_addr().expect("local address")
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, received, server)
}

#[tokio::test]
async fn the_faces_webhooks_verify_and_read_in_payonces_paypal_scheme() {
    // GIVEN an endpoint verifying with payonce's PayPal scheme: the fake's webhook id, its
    // certificate fetched from its own origin only
    let psp = paypal_psp().await;
    let scheme = Arc::new(
        PayPalWebhooks::with_origins(
            DEFAULT_PAYPAL_WEBHOOK_ID,
            Arc::new(HttpCertFetch::new(Duration::from_secs(3)).expect("HTTP client")),
            &[psp.base_url()],
            ".paypal.example",
        )
        .expect("the scheme"),
    );
    let (url, received, server) = paypal_receiver(scheme.clone()).await;
    psp.set_webhook_url(Some(url));
    let paypal = paypal(&psp);

    // WHEN a card is declined, another charged and then partly refunded
    let declined = request(3000, Currency::Jpy, "pm_card_visa_chargeDeclined");
    paypal.create_charge(&declined, TIMEOUT).await;
    let charged = request(3005, Currency::Usd, "pm_card_visa");
    let order_id = approved(&paypal.create_charge(&charged, TIMEOUT).await);
    let refund = refund_request(&charged, &order_id, 1, 1000, false);
    let RefundOutcome::Answered(refunded) = paypal.create_refund(&refund, TIMEOUT).await else {
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
    // AND payonce reads each as the adapter saw it
    let events: Vec<_> = deliveries
        .iter()
        .map(|(_, body)| scheme.parse(body.as_bytes()).expect("a PayPal event"))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "PAYMENT.CAPTURE.DECLINED",
            "PAYMENT.CAPTURE.COMPLETED",
            "PAYMENT.CAPTURE.REFUNDED"
        ]
    );
    assert!(events.iter().all(|e| e.event_id.starts_with("WH-")));
    assert_eq!(
        events[0].payment_id.as_deref(),
        Some(declined.payment_id.as_str())
    );
    assert!(
        matches!(&events[0].settlement,
            Some(Settlement::Declined { decline_code, .. }) if decline_code == "DECLINED_BY_RISK_FRAUD_FILTERS"),
        "{:?}",
        events[0].settlement
    );
    assert_eq!(
        (events[1].payment_id.as_deref(), &events[1].settlement),
        (
            Some(charged.payment_id.as_str()),
            &Some(Settlement::Captured {
                provider_payment_id: order_id,
                amount_captured: 3005
            })
        )
    );
    assert_eq!(
        events[1]
            .amount
            .as_ref()
            .map(|a| (a.minor, a.currency.as_str())),
        Some((3005, "usd"))
    );
    let refund_event = events[2].refund.as_ref().expect("a refund event");
    assert_eq!(
        (refund_event.refund_id.as_str(), &refund_event.settlement),
        (refund.refund_id.as_str(), &refunded)
    );
}

/// Serves the certificate a vector names, at any URL, and counts the fetches.
struct Serving {
    pem: String,
    fetched: AtomicUsize,
}

#[async_trait]
impl CertFetch for Serving {
    async fn fetch(&self, _url: &str) -> Result<Vec<u8>, String> {
        self.fetched.fetch_add(1, Ordering::SeqCst);
        Ok(self.pem.clone().into_bytes())
    }
}

/// `shared/testdata/paypal-webhook-signatures.json` (computed independently of payonce), checked
/// not to have drifted from the workspace's shared copy where there is one.
fn vectors() -> Value {
    let vendored = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/testdata/paypal-webhook-signatures.json"
    );
    let text = std::fs::read_to_string(vendored).expect("the vendored vectors");
    let upstream = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/testdata/paypal-webhook-signatures.json"
    );
    if let Ok(original) = std::fs::read_to_string(upstream) {
        assert_eq!(original, text, "the vendored vectors drifted");
    }
    serde_json::from_str(&text).expect("JSON vectors")
}

#[tokio::test]
async fn the_independent_vectors_through_the_real_receiver() {
    let vectors = vectors();
    let cases = vectors["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15);
    for case in cases {
        let name = case["name"].as_str().expect("a name");
        let pem = vectors["certs"][case["cert"].as_str().expect("a cert")]
            .as_str()
            .expect("a PEM");
        // GIVEN the receiver of a deployment on PayPal (PayPal's own certificate hosts), its
        // clock at the vector's now; the test certificates are named under .paypal.example
        let fetch = Arc::new(Serving {
            pem: pem.to_owned(),
            fetched: AtomicUsize::new(0),
        });
        let scheme = PayPalWebhooks::with_origins(
            vectors["webhook_id"].as_str().expect("a webhook id"),
            fetch.clone(),
            &payonce::adapters::psp::paypal_webhook::DEFAULT_CERT_ORIGINS,
            ".paypal.example",
        )
        .expect("the scheme");
        let clock = ManualClock::at_ms(case["now"].as_i64().expect("now") * 1000);
        let queue = MemoryQueue::new(clock.clone(), 262_144);
        let receiver = WebhookReceiver::new(Providers::new().with(scheme), queue.clone(), clock);
        let headers: Vec<(&str, &str)> = [
            ("paypal-transmission-id", "transmission_id"),
            ("paypal-transmission-time", "transmission_time"),
            ("paypal-transmission-sig", "signature"),
            ("paypal-cert-url", "cert_url"),
            ("paypal-auth-algo", "auth_algo"),
        ]
        .into_iter()
        .filter_map(|(header, field)| case[field].as_str().map(|value| (header, value)))
        .collect();
        let body = case["body"].as_str().expect("a body");

        // WHEN the delivery reaches POST /webhooks/paypal
        let reply = Reply::from(
            payonce_webhook::receiver::handle(
                &receiver,
                api_event("POST", "/webhooks/paypal", None, &headers, body),
            )
            .await,
        );

        // THEN a valid one is enqueued (200), every other refused 401 and nothing enqueued
        if case["valid"].as_bool().expect("valid") {
            assert_eq!(reply.status, 200, "{name}: {}", reply.body);
            assert_eq!(queue.len(), 1, "{name}");
        } else {
            assert_eq!(
                (reply.status, reply.problem_type()),
                (401, "/problems/webhook-signature-invalid"),
                "{name}: {}",
                reply.body
            );
            assert!(queue.is_empty(), "{name}");
        }
        // AND a certificate URL off the allow-list was never fetched, nor one for a delivery
        // refused whatever the certificate (another algorithm)
        let off_list = name.starts_with("cert_url_");
        assert_eq!(
            fetch.fetched.load(Ordering::SeqCst),
            usize::from(!off_list && name != "other_algorithm"),
            "{name}"
        );
    }
}
