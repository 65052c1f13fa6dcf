//! Outcome classes of the Stripe adapter. A call that could not connect proves only that this
//! call did not reach Stripe: once any call under the key got an answer, the outcome is unknown.
//! Validation refusals are final; non-final PaymentIntents are pending, never "not found".

use super::scripted::{
    error, intent, key_in_use, rate_limited, refused_connection, unauthorized, ScriptedTransport,
};
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore};
use payonce::adapters::psp::transport::WireBody;
use payonce::adapters::psp::StripePsp;
use payonce::clock::{Clock, ManualClock};
use payonce::domain::{Currency, LineItem, Order, OrderPaymentState, PaymentStatus};
use payonce::ports::{
    charge_key, ChargeRequest, ChargeStore, Fence, OrderStore, Psp, PspLookup, PspOutcome,
};
use payonce::service::{ChargeConfig, ChargeService};
use payonce_fake_psp::FakePspConfig;
use payonce_tests::stack::{api_event, start_fake_psp, stripe_for, Reply};
use serde_json::json;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The secret key the scripted adapters authenticate with.
const API_KEY: &str = "sk_test_scripted";

fn scripted(
    steps: impl IntoIterator<Item = super::scripted::Step>,
) -> StripePsp<ScriptedTransport> {
    StripePsp::with_transport(ScriptedTransport::new(steps), "stripe", API_KEY, TIMEOUT)
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
        capture: payonce::domain::CaptureMethod::Automatic,
        earlier_may_run: false,
    }
}

/// Every call was the same create under the same key, byte for byte.
fn assert_identical_creates(psp: &StripePsp<ScriptedTransport>, request: &ChargeRequest, n: usize) {
    let calls = psp.transport().calls();
    assert_eq!(calls.len(), n, "{calls:?}");
    for call in &calls {
        assert_eq!(call, &calls[0]);
        assert_eq!(
            (call.method, call.path.as_str()),
            ("POST", "/v1/payment_intents")
        );
        assert_eq!(
            call.header("Idempotency-Key"),
            Some(request.idempotency_key.as_str())
        );
        assert_eq!(
            call.header("Authorization"),
            Some(format!("Bearer {API_KEY}").as_str())
        );
    }
}

#[tokio::test]
async fn key_in_use_then_no_connection_is_unknown_not_not_sent() {
    // GIVEN Stripe answers 409 idempotency_key_in_use (a request with the key is running there),
    // then the retry cannot connect
    let psp = scripted([key_in_use(), refused_connection()]);
    let request = request(3000, Currency::Jpy, "pm_card_visa");

    // WHEN the adapter creates the charge
    let outcome = psp.create_charge(&request, TIMEOUT).await;

    // THEN the outcome is unknown: the running request may charge, so nothing may be released
    assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
    // AND both calls were the same create under the same key
    assert_identical_creates(&psp, &request, 2);
    assert_eq!(psp.transport().left(), 0);
}

#[tokio::test]
async fn key_in_use_then_an_answer_is_that_answer() {
    // The control: once the running request finished, the retry gets its replayed answer.
    let psp = scripted([key_in_use(), intent("pi_replayed", "succeeded")]);
    let request = request(3000, Currency::Jpy, "pm_card_visa");
    assert_eq!(
        psp.create_charge(&request, TIMEOUT).await,
        PspOutcome::Approved {
            provider_payment_id: "pi_replayed".into()
        }
    );
    assert_identical_creates(&psp, &request, 2);
}

#[tokio::test]
async fn rate_limited_then_no_connection_is_unknown() {
    let psp = scripted([rate_limited(), refused_connection()]);
    let request = request(3000, Currency::Jpy, "pm_card_visa");
    let outcome = psp.create_charge(&request, TIMEOUT).await;
    assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
    assert_identical_creates(&psp, &request, 2);
}

#[tokio::test]
async fn credentials_refused_after_key_in_use_is_unknown() {
    // A 401 proves nothing about the key once an earlier call under it got an answer.
    let psp = scripted([key_in_use(), unauthorized()]);
    let request = request(3000, Currency::Jpy, "pm_card_visa");
    let outcome = psp.create_charge(&request, TIMEOUT).await;
    assert!(matches!(outcome, PspOutcome::Unknown { .. }), "{outcome:?}");
    assert_identical_creates(&psp, &request, 2);
}

#[tokio::test]
async fn no_connection_on_the_only_call_is_not_sent() {
    // The control: with no answer ever, the one call that could not connect is not-sent.
    let psp = scripted([refused_connection()]);
    let request = request(3000, Currency::Jpy, "pm_card_visa");
    let outcome = psp.create_charge(&request, TIMEOUT).await;
    assert!(matches!(outcome, PspOutcome::NotSent { .. }), "{outcome:?}");
    assert_identical_creates(&psp, &request, 1);
}

#[tokio::test]
async fn a_validation_refusal_not_about_the_payment_method_is_refused_with_its_code() {
    let psp = scripted([error(
        400,
        "invalid_request_error",
        Some("amount_too_small"),
        Some("amount"),
    )]);
    let request = request(10, Currency::Usd, "pm_card_visa");
    assert_eq!(
        psp.create_charge(&request, TIMEOUT).await,
        PspOutcome::Refused {
            code: "amount_too_small".into()
        }
    );
    assert_identical_creates(&psp, &request, 1);
}

#[tokio::test]
async fn a_charge_that_met_key_in_use_then_no_connection_answers_202_and_keeps_the_order() {
    // GIVEN an unpaid order, and a PSP that answers 409 idempotency_key_in_use and then cannot be
    // reached
    let clock = ManualClock::at_system_time();
    let records = MemoryIdempotencyStore::new(clock.clone());
    let store = MemoryPaymentStore::new(records, clock.clone());
    let now_ms = clock.now_ms();
    let order = Order {
        order_id: format!("ord_{}", uuid::Uuid::new_v4().simple()),
        owner: "alice".into(),
        version: 1,
        currency: Currency::Jpy,
        items: vec![LineItem {
            sku: "A1".into(),
            quantity: 2,
            unit_amount: 1500,
        }],
        amount: 3000,
        payment_state: OrderPaymentState::Unpaid,
        payment_id: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    };
    store.create_order(&order).await.unwrap();
    let charge = ChargeService::new(
        store.clone(),
        scripted([key_in_use(), refused_connection()]),
        ChargeConfig::default(),
    );

    // WHEN alice pays
    let body =
        json!({"order_id": order.order_id, "order_version": 1, "payment_method": "pm_card_visa"});
    let reply = Reply::from(
        payonce_charge::handler::handle(
            &charge,
            api_event(
                "POST",
                "/payments",
                Some("alice"),
                &[("idempotency-key", "key-busy")],
                &body.to_string(),
            ),
        )
        .await,
    );

    // THEN 202 processing, not 503: the order stays reserved by the attempt, which stays
    // processing for webhooks and reconcile
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.json["status"], "processing");
    let payment_id = reply.json["payment_id"].as_str().unwrap();
    let stored = store.get_order(&order.order_id).await.unwrap().unwrap();
    assert_eq!(
        (stored.payment_state, stored.payment_id.as_deref()),
        (OrderPaymentState::Processing, Some(payment_id))
    );
    let payment = store.get_payment(payment_id).await.unwrap().unwrap();
    assert_eq!(payment.status, PaymentStatus::Processing);
    assert_eq!(charge.psp().transport().calls().len(), 2);
}

#[tokio::test]
async fn the_strict_fake_psp_refuses_amounts_outside_the_limits_and_stores_nothing() {
    let psp = start_fake_psp(FakePspConfig::default()).await;
    let stripe = stripe_for(&psp);

    // WHEN a charge of 10 usd cents (Stripe's minimum is 50) and one above eight digits are sent
    let small = stripe
        .create_charge(&request(10, Currency::Usd, "pm_card_visa"), TIMEOUT)
        .await;
    let large = stripe
        .create_charge(
            &request(100_000_000, Currency::Usd, "pm_card_visa"),
            TIMEOUT,
        )
        .await;

    // THEN each is refused with Stripe's code, and the PSP created nothing
    assert_eq!(
        small,
        PspOutcome::Refused {
            code: "amount_too_small".into()
        }
    );
    assert_eq!(
        large,
        PspOutcome::Refused {
            code: "amount_too_large".into()
        }
    );
    assert!(psp.charges().is_empty(), "{:?}", psp.charges());
    assert_eq!(psp.requests_seen(), 2);
}

#[tokio::test]
async fn non_final_intents_are_unknown_on_create_and_pending_on_lookup() {
    // GIVEN a PSP whose processing and requires_action intents stay so for an hour
    let psp = start_fake_psp(FakePspConfig {
        processing_for: Duration::from_secs(3600),
        requires_action_for: Duration::from_secs(3600),
        ..FakePspConfig::default()
    })
    .await;
    let stripe = stripe_for(&psp);
    for (token, status) in [
        ("pm_fake_processing", "processing"),
        ("pm_fake_requires_action", "requires_action"),
    ] {
        let request = request(3000, Currency::Jpy, token);

        // WHEN the charge is created and then looked up
        let created = stripe.create_charge(&request, TIMEOUT).await;
        let looked_up = stripe.lookup(&request.payment_id).await.unwrap();

        // THEN neither is final: unknown, then pending (never "not found")
        assert!(
            matches!(created, PspOutcome::Unknown { .. }),
            "{token}: {created:?}"
        );
        let charge = psp
            .charges()
            .into_iter()
            .find(|c| c.idempotency_key.as_ref() == Some(&request.idempotency_key))
            .unwrap_or_else(|| panic!("{token}: no intent"));
        assert_eq!(
            (charge.status.as_str(), charge.outcome.as_str()),
            (status, "pending")
        );
        assert_eq!(
            looked_up,
            PspLookup::Pending {
                provider_payment_id: charge.id.clone()
            },
            "{token}"
        );
    }
}

#[tokio::test]
async fn a_fence_on_an_unused_key_is_accepted_by_the_strict_fake_psp_and_cancelled() {
    // GIVEN a key the PSP never saw
    let psp = start_fake_psp(FakePspConfig::default()).await;
    let stripe = stripe_for(&psp);
    let request = request(3000, Currency::Jpy, "pm_card_visa");

    // WHEN it is fenced (create without confirming, no confirm-only parameter) and the intent
    // the fence created is cancelled
    let fence = stripe.fence(&request).await.unwrap();
    let Fence::NeverRan {
        provider_payment_id,
    } = fence
    else {
        panic!("expected NeverRan, got {fence:?}")
    };
    stripe.cancel(&provider_payment_id).await.unwrap();

    // THEN the PSP holds one intent under the key, canceled, and a lookup says so
    let charges = psp.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(
        (
            charges[0].id.as_str(),
            charges[0].status.as_str(),
            charges[0].outcome.as_str(),
            charges[0].idempotency_key.as_ref()
        ),
        (
            provider_payment_id.as_str(),
            "canceled",
            "canceled",
            Some(&request.idempotency_key)
        )
    );
    assert_eq!(
        stripe.lookup(&request.payment_id).await.unwrap(),
        PspLookup::Canceled {
            provider_payment_id,
            reason: Some(payonce::domain::CancellationReason::Abandoned),
        }
    );
    // AND the confirmed charge under that key can never run: the key is used
    assert!(
        matches!(
            stripe.create_charge(&request, TIMEOUT).await,
            PspOutcome::Unknown { .. }
        ),
        "a re-send under a fenced key is an idempotency error"
    );
    assert_eq!(psp.succeeded_charges_for(&request.payment_id), 0);
}

#[tokio::test]
async fn a_fence_refused_on_a_parameter_the_original_shared_proves_nothing_was_charged() {
    // GIVEN a fence whose create Stripe refuses on the payment method or the amount, which the
    // original request carried alike
    for (param, on_method) in [("payment_method", true), ("amount", false)] {
        let psp = scripted([error(
            400,
            "invalid_request_error",
            Some("resource_missing"),
            Some(param),
        )]);
        // WHEN the key is fenced
        let fence = psp
            .fence(&request(5_000, Currency::Usd, "pm_card_visa"))
            .await;
        // THEN the refusal is proof: the original was refused the same way
        assert_eq!(
            fence.unwrap(),
            Fence::Refused {
                payment_method: on_method
            },
            "{param}"
        );
        // AND the fence sent no confirm-only parameter
        let WireBody::Form(form) = &psp.transport().calls()[0].body else {
            panic!("the fence sent no form")
        };
        assert!(form.contains(&("confirm".to_owned(), "false".to_owned())));
        assert!(!form.iter().any(|(k, _)| k == "error_on_requires_action"));
    }
}

#[tokio::test]
async fn a_fence_refused_on_its_own_parameter_proves_nothing() {
    // GIVEN a fence refused on a parameter only the fence sends (here `confirm`)
    let psp = scripted([error(
        400,
        "invalid_request_error",
        None,
        Some("error_on_requires_action"),
    )]);
    // WHEN the key is fenced, THEN it is an error, never a proof
    let fence = psp
        .fence(&request(5_000, Currency::Usd, "pm_card_visa"))
        .await;
    assert!(fence.is_err(), "{fence:?}");
}
