//! The actors of a run: shoppers who create orders and pay them over a flaky network, and the
//! staff who refund what they paid, each request through a real function's HTTP handler; and
//! how an actor reads an answer. They reach the system through [`System`] only.

use crate::check::{Answer, Operated, OperationAsked, RefundAsked, Refunded};
use crate::face;
use crate::faults::{invoke, invoke_as, Finished};
use crate::system::{lock, System};
use crate::world::World;
use payonce::clock::Clock;
use payonce::config::PspKind;
use payonce::domain::{
    CaptureMethod, Currency, LineItem, OperationKind, PaymentStatus, RefundStatus,
};
use payonce::idempotency::IdempotencyKey;
use payonce::ports::Psp as _;
use payonce::service::{Created, PayRequest};
use std::sync::Arc;
use std::time::Duration;

/// The Lambda timeout the template sets for the charge function, which bounds every request an
/// actor sends.
const CHARGE_TIMEOUT: Duration = Duration::from_secs(25);

/// The tokens shoppers pay with, by weight: mostly cards that work, and every odd path.
const TOKENS: &[(&str, u32)] = &[
    ("pm_card_visa", 40),
    ("pm_card_mastercard", 10),
    ("pm_card_visa_chargeDeclined", 8),
    ("pm_card_chargeDeclinedInsufficientFunds", 4),
    ("pm_fake_lost_response", 6),
    ("pm_fake_slow", 5),
    ("pm_fake_error_before_charge", 5),
    ("pm_fake_processing", 5),
    ("pm_fake_requires_action", 5),
    ("pm_card_nonexistent", 2),
    // Their refunds fail a minute after reading succeeded, or stay pending for a while.
    ("pm_card_refundFail", 3),
    ("pm_fake_refund_pending", 3),
];

/// The origin of the shop's checkout, where the PSP sends a customer back after 3-D Secure.
pub(crate) const CHECKOUT_ORIGIN: &str = "https://shop.example";

/// How a shopper checks out: at once, with a card that asks for 3-D Secure (with or without a
/// page to come back to; every PSP), approving at PayPal (PayPal), or authorized now for staff
/// to capture later (the PSPs that hold an authorization).
fn pick_flow(world: &World, psp: PspKind, captures_later: bool, request: &mut PayRequest) {
    if !world.checkout_flows() {
        return;
    }
    let draw = world.u64(0..100);
    // 3-D Secure on every PSP.
    if draw < 10 {
        request.payment_method = "pm_card_threeDSecure2Required".to_owned();
        if world.chance(0.85) {
            request.return_url = Some(format!("{CHECKOUT_ORIGIN}/checkout/return"));
        }
    } else if draw < 16 && psp == PspKind::PayPal {
        // The buyer approves at PayPal, then payonce captures the approved order.
        request.payment_method = "paypal".to_owned();
        request.return_url = Some(format!("{CHECKOUT_ORIGIN}/checkout/return"));
    } else if draw < 22 && captures_later {
        request.capture = CaptureMethod::Manual;
    }
}

fn pick_token(world: &World) -> String {
    let total: u32 = TOKENS.iter().map(|(_, w)| w).sum();
    let mut draw = u32::try_from(world.u64(0..u64::from(total))).unwrap_or(0);
    for (token, weight) in TOKENS {
        if draw < *weight {
            return (*token).to_owned();
        }
        draw -= weight;
    }
    "pm_card_visa".to_owned()
}

fn items(world: &World, psp: PspKind, currency: Currency) -> Vec<LineItem> {
    let minimum = face::minimum_minor(psp, currency);
    vec![LineItem {
        sku: "SKU-1".into(),
        quantity: i64::try_from(world.u64(1..4)).unwrap_or(1),
        unit_amount: minimum + i64::try_from(world.u64(0..5_000)).unwrap_or(0),
    }]
}

/// One shopper: creates an order and pays it like a person with a flaky network would —
/// double clicks, retries with the same key, new tabs, edits after a decline.
pub(crate) async fn shopper(system: Arc<System>, index: u32) {
    let world = system.world.clone();
    tokio::time::sleep(world.millis(0, 60_000)).await;
    let user = format!("shopper{index}");
    let currency = *world.pick(face::currencies(system.psp));
    let order_key = IdempotencyKey::parse(&format!("order-{index}")).expect("a valid key");
    let lines = items(&world, system.psp, currency);
    let mut order = None;
    for _ in 0..10 {
        let deadline_ms = world.clock().now_ms() + 25_000;
        let created = invoke(
            &world,
            CHARGE_TIMEOUT,
            system.orders.create(
                &user,
                Some(&order_key),
                currency.as_str(),
                lines.clone(),
                deadline_ms,
            ),
        )
        .await;
        if let Some(Ok(Created::Fresh(view) | Created::Replayed(view))) = created {
            order = Some(view);
            break;
        }
        tokio::time::sleep(world.millis(500, 5_000)).await;
    }
    let Some(order) = order else {
        return;
    };
    lock(&system.observed).orders.push(order.order_id.clone());

    let mut keys_used = 0u32;
    let mut new_key = || {
        keys_used += 1;
        format!("pay-{index}-{keys_used}")
    };
    let mut request = PayRequest {
        order_id: order.order_id.clone(),
        order_version: order.version,
        payment_method: pick_token(&world),
        return_url: None,
        capture: CaptureMethod::Automatic,
    };
    pick_flow(
        &world,
        system.psp,
        system.charge.psp().captures_later(),
        &mut request,
    );
    let mut key = new_key();
    let mut earlier: Vec<(String, PayRequest)> = Vec::new();
    for _ in 0..14 {
        // Now and then a double click: the same request twice at once.
        let twin = world.chance(0.15).then(|| {
            let (system, user, key, request) =
                (system.clone(), user.clone(), key.clone(), request.clone());
            tokio::spawn(async move {
                let answer = pay(&system, &user, &key, &request).await;
                lock(&system.observed).record(&user, &key, &request, answer, false);
            })
        });
        let answer = pay(&system, &user, &key, &request).await;
        lock(&system.observed).record(&user, &key, &request, answer.clone(), false);
        if let Some(twin) = twin {
            let _ = twin.await;
        }
        if !react(
            &system,
            &world,
            &user,
            answer,
            &mut request,
            &mut key,
            &mut earlier,
            &mut new_key,
        )
        .await
        {
            break;
        }
    }
}

/// What the shopper does next; false when done.
#[allow(clippy::too_many_arguments)]
async fn react(
    system: &System,
    world: &World,
    user: &str,
    answer: Answer,
    request: &mut PayRequest,
    key: &mut String,
    earlier: &mut Vec<(String, PayRequest)>,
    new_key: &mut impl FnMut() -> String,
) -> bool {
    let mut switch = |request: &mut PayRequest, key: &mut String, next: PayRequest| {
        earlier.push((key.clone(), request.clone()));
        *key = new_key();
        *request = next;
    };
    match answer {
        Answer::Succeeded(payment_id) => {
            // Now and then the shop refunds the payment, in full or in part.
            if world.chance(0.6) {
                let staff = format!("staff-{user}");
                staff_refunds(system, world, &staff, &payment_id).await;
            }
            false
        }
        Answer::OrderPaid => false,
        Answer::Action(payment_id, intent) => {
            customer_action(
                system,
                world,
                user,
                &payment_id,
                &intent,
                request,
                key,
                &mut switch,
            )
            .await
        }
        Answer::Authorized(payment_id) => {
            let staff = format!("staff-{user}");
            staff_operations(system, world, &staff, &payment_id).await;
            false
        }
        Answer::Failed(_) => {
            if !world.chance(0.7) {
                return false;
            }
            let mut next = request.clone();
            next.payment_method = pick_token(world);
            if world.chance(0.4) {
                // Edit the order: a new version, a new snapshot, a new key.
                let currency = match tokio::time::timeout(
                    CHARGE_TIMEOUT,
                    system.orders.get(user, &request.order_id),
                )
                .await
                {
                    Ok(Ok(view)) => view.currency,
                    _ => return true,
                };
                if let Some(Ok(view)) = invoke(
                    world,
                    CHARGE_TIMEOUT,
                    system.orders.revise(
                        user,
                        &request.order_id,
                        Some(request.order_version),
                        items(world, system.psp, currency),
                    ),
                )
                .await
                {
                    next.order_version = view.version;
                }
            }
            switch(request, key, next);
            true
        }
        Answer::Pending(_) => {
            tokio::time::sleep(world.millis(2_000, 90_000)).await;
            if world.chance(0.15) {
                let next = request.clone();
                switch(request, key, next);
            }
            true
        }
        Answer::Unavailable => {
            tokio::time::sleep(world.millis(1_000, 5_000)).await;
            if world.chance(0.4) {
                let next = request.clone();
                switch(request, key, next);
            }
            true
        }
        Answer::OrderBusy => {
            tokio::time::sleep(world.millis(5_000, 120_000)).await;
            if let Some((old_key, old_request)) = earlier.last().cloned() {
                if world.chance(0.5) {
                    *key = old_key;
                    *request = old_request;
                }
            }
            true
        }
        Answer::Stale(current) => {
            let mut next = request.clone();
            next.order_version = current;
            switch(request, key, next);
            true
        }
        Answer::InUse | Answer::ServerError(_) | Answer::Died => {
            tokio::time::sleep(world.millis(1_000, 40_000)).await;
            true
        }
        // Over the attempt limits: a shopper waits, as Retry-After says, at most an hour.
        Answer::Limited => {
            tokio::time::sleep(world.millis(60_000, 3_600_000)).await;
            true
        }
        Answer::Wrong(_) => false,
    }
}

/// The customer at the PSP's 3-D Secure page: completes it (now, or back late, past the
/// hour the action stays open), fails it, cancels the payment from the checkout to use another
/// card, or leaves. After acting they land on the return page, which asks again with the same
/// key; true while the shopper goes on.
#[allow(clippy::too_many_arguments)]
async fn customer_action(
    system: &System,
    world: &World,
    user: &str,
    payment_id: &str,
    intent: &str,
    request: &mut PayRequest,
    key: &mut String,
    switch: &mut impl FnMut(&mut PayRequest, &mut String, PayRequest),
) -> bool {
    let draw = world.u64(0..100);
    let act = |result: &'static str| {
        let form = format!("result={result}");
        let page = system
            .model
            .action_page(intent, Some(form.as_bytes()), world.clock().now_ms());
        world.trace(format!(
            "customer {user} answers {result} on the page of {intent} -> {}",
            page.status
        ));
        if page.status == 404 {
            lock(&system.observed).unknown_pages.push(format!(
                "invariant 3: payment {payment_id} sent its customer to the page of {intent:?}, which the PSP does not know"
            ));
        }
        system.outbox.push(page.events);
    };
    if draw < 55 {
        let wait = if world.chance(0.2) {
            world.millis(3_000_000, 5_400_000)
        } else {
            world.millis(2_000, 300_000)
        };
        tokio::time::sleep(wait).await;
        act("complete");
        true
    } else if draw < 70 {
        tokio::time::sleep(world.millis(2_000, 300_000)).await;
        act("fail");
        true
    } else if draw < 88 && system.psp != PspKind::Stripe {
        // Back at the checkout: the cancel is refused (only Stripe cancels a payment waiting
        // for the customer; on Omise and 2C2P it waits for the PSP's own word), so they leave.
        tokio::time::sleep(world.millis(5_000, 900_000)).await;
        let asked = OperationAsked {
            kind: OperationKind::Cancel,
            who: user.to_owned(),
            key: format!("cancel-{payment_id}"),
            payment_id: payment_id.to_owned(),
            amount: None,
        };
        operate_until_final(system, world, &asked, &[]).await;
        false
    } else if draw < 88 {
        // Back at the checkout: cancel this one, then pay with another card (a new key).
        tokio::time::sleep(world.millis(5_000, 900_000)).await;
        let asked = OperationAsked {
            kind: OperationKind::Cancel,
            who: user.to_owned(),
            key: format!("cancel-{payment_id}"),
            payment_id: payment_id.to_owned(),
            amount: None,
        };
        operate_until_final(system, world, &asked, &[]).await;
        let mut next = request.clone();
        next.payment_method = "pm_card_visa".to_owned();
        next.return_url = None;
        switch(request, key, next);
        true
    } else {
        // Gone: reconcile cancels the action once its hour is up (on Omise and 2C2P, the PSP
        // lapses it).
        false
    }
}

/// Staff act on an authorized payment: capture it (all, or part), two of them at once with
/// two keys, cancel it, cancel and capture at once, or leave it to lapse; a captured one is
/// then refunded now and then.
async fn staff_operations(system: &System, world: &World, staff: &str, payment_id: &str) {
    tokio::time::sleep(world.millis(0, 1_800_000)).await;
    // Omise captures authorizations whole: its staff never ask for part.
    let partial = system.psp == PspKind::Stripe;
    let capture = |who: &str, n: u32, world: &World| OperationAsked {
        kind: OperationKind::Capture,
        who: who.to_owned(),
        key: format!("capture-{payment_id}-{n}"),
        payment_id: payment_id.to_owned(),
        amount: (partial && world.chance(0.4))
            .then(|| 1 + i64::try_from(world.u64(0..2_000)).unwrap_or(0)),
    };
    let cancel = |who: &str| OperationAsked {
        kind: OperationKind::Cancel,
        who: who.to_owned(),
        key: format!("cancel-{payment_id}"),
        payment_id: payment_id.to_owned(),
        amount: None,
    };
    let other = format!("{staff}-b");
    let draw = world.u64(0..100);
    let captured = if draw < 50 {
        operate_until_final(system, world, &capture(staff, 1, world), STAFF_SCOPES).await
    } else if draw < 68 {
        let (first, second) = (capture(staff, 1, world), capture(&other, 2, world));
        let lag = world.millis(0, 2_000);
        let (a, b) = tokio::join!(
            operate_until_final(system, world, &first, STAFF_SCOPES),
            async {
                tokio::time::sleep(lag).await;
                operate_until_final(system, world, &second, STAFF_SCOPES).await
            },
        );
        a || b
    } else if draw < 82 {
        operate_until_final(system, world, &cancel(staff), STAFF_SCOPES).await;
        false
    } else if draw < 90 {
        let (first, second) = (cancel(staff), capture(&other, 1, world));
        let (_, b) = tokio::join!(
            operate_until_final(system, world, &first, STAFF_SCOPES),
            operate_until_final(system, world, &second, STAFF_SCOPES),
        );
        b
    } else {
        // Nobody captures: the authorization lapses at the PSP.
        false
    };
    if captured && world.chance(0.5) {
        staff_refunds(system, world, staff, payment_id).await;
    }
}

/// The scopes of the back office's token.
const STAFF_SCOPES: &[&str] = &["payments:capture", "payments:refund"];

/// Sends one capture or cancel until it gets a final answer (or gives up), retrying its key on
/// 202, 409 in use, 503 and a dead invocation; double-clicks now and then. Whether it captured.
async fn operate_until_final(
    system: &System,
    world: &World,
    asked: &OperationAsked,
    scopes: &[&str],
) -> bool {
    for _ in 0..10 {
        let twin = async {
            if world.chance(0.15) {
                let answer = operate(system, asked, scopes).await;
                lock(&system.observed)
                    .operations
                    .push((asked.clone(), answer));
            }
        };
        let (answer, ()) = tokio::join!(operate(system, asked, scopes), twin);
        lock(&system.observed)
            .operations
            .push((asked.clone(), answer.clone()));
        match answer {
            Operated::Done(_) => return asked.kind == OperationKind::Capture,
            Operated::Pending
            | Operated::InUse
            | Operated::Unavailable
            | Operated::ServerError(_)
            | Operated::Died => tokio::time::sleep(world.millis(1_000, 60_000)).await,
            _ => return false,
        }
    }
    false
}

/// One POST /payments/{id}/capture or /cancel through the refund function's real handler,
/// killed at its deadline.
async fn operate(system: &System, asked: &OperationAsked, scopes: &[&str]) -> Operated {
    let body = match asked.amount {
        Some(amount) => serde_json::json!({ "amount": amount }).to_string(),
        None => String::new(),
    };
    let path = format!("/payments/{}/{}", asked.payment_id, asked.kind.as_str());
    let id = payonce::ids::new_uuid().simple().to_string();
    lock(&system.observed).sending(asked.kind.as_str(), &asked.who, &asked.key, &id);
    let event = api_event_at(&path, &id, &asked.who, &asked.key, &body, scopes);
    let answered = invoke(
        &system.world,
        CHARGE_TIMEOUT,
        payonce_refund::handler::handle(&system.refunds, &system.operations, event),
    )
    .await;
    let answer = match answered {
        None => Operated::Died,
        Some(response) => {
            let status = response.status().as_u16();
            let json: serde_json::Value =
                serde_json::from_slice(response.body().as_ref()).unwrap_or_default();
            check_instance(
                system,
                asked.kind.as_str(),
                &asked.who,
                &asked.key,
                &id,
                &response,
                &json,
            );
            Operated::classify(status, &json)
        }
    };
    system.world.trace(format!(
        "{} {} {} {} -> {answer:?}",
        asked.kind.as_str(),
        asked.who,
        asked.key,
        asked.payment_id
    ));
    if let Operated::ServerError(problem) = &answer {
        not_503(system, asked.kind.as_str(), &asked.who, &asked.key, problem);
    }
    answer
}

/// Staff refund a payment: once, in full or in part, or twice at once with different keys
/// (two people at the back office); each retries its own key like the shoppers do.
async fn staff_refunds(system: &System, world: &World, staff: &str, payment_id: &str) {
    tokio::time::sleep(world.millis(0, 600_000)).await;
    let amount = |world: &World| {
        world
            .chance(0.5)
            .then(|| 1 + i64::try_from(world.u64(0..2_000)).unwrap_or(0))
    };
    let first = RefundAsked {
        payment_id: payment_id.to_owned(),
        amount: amount(world),
    };
    let key = format!("refund-{payment_id}-1");
    if world.chance(0.4) {
        // Two people at the back office refund parts of one payment a moment apart: the first
        // one's webhook makes the second one's refund due for reconcile while it is in flight.
        let first = RefundAsked {
            amount: Some(1 + i64::try_from(world.u64(0..1_000)).unwrap_or(0)),
            ..first
        };
        let second = RefundAsked {
            payment_id: payment_id.to_owned(),
            amount: amount(world),
        };
        let other = format!("refund-{payment_id}-2");
        let other_staff = format!("{staff}-b");
        let lag = world.millis(0, 2_000);
        tokio::join!(
            refund_until_final(system, world, staff, &key, &first),
            async {
                tokio::time::sleep(lag).await;
                refund_until_final(system, world, &other_staff, &other, &second).await
            },
        );
    } else {
        refund_until_final(system, world, staff, &key, &first).await;
    }
}

/// Sends one refund request until it gets a final answer (or gives up), retrying with the
/// same key on 202, 409 in use, 503 and a dead invocation; double-clicks now and then.
async fn refund_until_final(
    system: &System,
    world: &World,
    staff: &str,
    key: &str,
    asked: &RefundAsked,
) {
    for _ in 0..10 {
        let twin = async {
            if world.chance(0.15) {
                let answer = refund(system, staff, key, asked).await;
                lock(&system.observed).record_refund(staff, key, asked, answer, false);
            }
        };
        let (answer, ()) = tokio::join!(refund(system, staff, key, asked), twin);
        lock(&system.observed).record_refund(staff, key, asked, answer.clone(), false);
        match answer {
            Refunded::Pending(_)
            | Refunded::InUse
            | Refunded::Unavailable
            | Refunded::ServerError(_)
            | Refunded::Died => tokio::time::sleep(world.millis(1_000, 60_000)).await,
            _ => return,
        }
    }
}

/// One POST /payments/{id}/refunds through the refund function's real HTTP handler, with a
/// staff token, killed at its deadline.
pub(crate) async fn refund(
    system: &System,
    staff: &str,
    key: &str,
    asked: &RefundAsked,
) -> Refunded {
    let body = match asked.amount {
        Some(amount) => serde_json::json!({ "amount": amount }),
        None => serde_json::json!({}),
    };
    let path = format!("/payments/{}/refunds", asked.payment_id);
    let id = payonce::ids::new_uuid().simple().to_string();
    lock(&system.observed).sending("refund", staff, key, &id);
    let event = api_event_at(
        &path,
        &id,
        staff,
        key,
        &body.to_string(),
        &["payments:refund"],
    );
    let invocation = system.next_invocation();
    let answered = invoke_as(
        &system.world,
        invocation,
        CHARGE_TIMEOUT,
        payonce_refund::handler::handle(&system.refunds, &system.operations, event),
    )
    .await;
    let answer = match answered {
        None => Refunded::Died,
        Some(response) => {
            let status = response.status().as_u16();
            let json: serde_json::Value =
                serde_json::from_slice(response.body().as_ref()).unwrap_or_default();
            check_instance(system, "refund", staff, key, &id, &response, &json);
            Refunded::classify(status, &json)
        }
    };
    system
        .world
        .trace(format!("refund {staff} {key} -> {answer:?}"));
    if answer == Refunded::Unavailable {
        lock(&system.observed)
            .refund_unavailable
            .push((staff.to_owned(), key.to_owned()));
    }
    if let Refunded::ServerError(problem) = &answer {
        not_503(system, "refund", staff, key, problem);
    }
    // A request that completed its refund's record answers what it wrote.
    if let Some(Finished::Refund(refund_id, status)) = system.store.finished_by(invocation) {
        let agrees = match (&answer, status) {
            (Refunded::Died, _) => true,
            (Refunded::ServerError(problem), _) if problem.ends_with("/service-unavailable") => {
                true
            }
            (Refunded::Succeeded(id), RefundStatus::Succeeded)
            | (Refunded::Failed(id), RefundStatus::Failed)
            | (Refunded::Pending(id), RefundStatus::Pending) => *id == refund_id,
            _ => false,
        };
        if !agrees {
            lock(&system.observed).own_writes_denied.push(format!(
                "invariant 4: refund key {staff}/{key}: its request completed refund {refund_id} as {}, yet answered {answer:?}",
                status.as_str()
            ));
        }
    }
    answer
}

/// One POST /payments through the charge function's real HTTP handler (the API Gateway event
/// in, the status and problem+json out), killed at its deadline.
pub(crate) async fn pay(system: &System, user: &str, key: &str, request: &PayRequest) -> Answer {
    let mut body = serde_json::json!({
        "order_id": request.order_id,
        "order_version": request.order_version,
        "payment_method": request.payment_method,
    });
    if let Some(url) = &request.return_url {
        body["return_url"] = serde_json::json!(url);
    }
    if request.capture == CaptureMethod::Manual {
        body["capture"] = serde_json::json!("manual");
    }
    let id = payonce::ids::new_uuid().simple().to_string();
    lock(&system.observed).sending("pay", user, key, &id);
    let event = api_event_at("/payments", &id, user, key, &body.to_string(), &[]);
    let invocation = system.next_invocation();
    let answered = invoke_as(
        &system.world,
        invocation,
        CHARGE_TIMEOUT,
        payonce_charge::handler::handle(&system.charge, event),
    )
    .await;
    let answer = match answered {
        None => Answer::Died,
        Some(response) => {
            let status = response.status().as_u16();
            let json: serde_json::Value =
                serde_json::from_slice(response.body().as_ref()).unwrap_or_default();
            check_instance(system, "pay", user, key, &id, &response, &json);
            classify(status, &json)
        }
    };
    system
        .world
        .trace(format!("pay {user} {key} -> {answer:?}"));
    if let Answer::ServerError(problem) = &answer {
        not_503(system, "pay", user, key, problem);
    }
    // A request that completed its attempt answers what it wrote.
    if let Some(Finished::Payment(payment_id, status)) = system.store.finished_by(invocation) {
        let agrees = match (&answer, status) {
            // Killed after its write, or told the store failed (the SDK gave up after the
            // write applied): it cannot know, and says so.
            (Answer::Died, _) => true,
            (Answer::ServerError(problem), _) if problem.ends_with("/service-unavailable") => true,
            (Answer::Succeeded(id), PaymentStatus::Succeeded)
            | (Answer::Failed(id), PaymentStatus::Failed)
            | (Answer::Pending(id), PaymentStatus::Processing)
            | (Answer::Action(id, _), PaymentStatus::RequiresAction)
            | (Answer::Authorized(id), PaymentStatus::Authorized) => *id == payment_id,
            _ => false,
        };
        if !agrees {
            lock(&system.observed).own_writes_denied.push(format!(
                "invariant 4: key {user}/{key}: its request completed payment {payment_id} as {}, yet answered {answer:?}",
                status.as_str()
            ));
        }
    }
    if answer == Answer::Unavailable {
        // A 503 promises that nothing had been charged under the key's attempt when this request
        // gave the key back (its last write): hold it to that. A charge made after that is a
        // retry's or a double click's, which took the key over as the 503 invites (the key's
        // last answer is held to the stored state at the end).
        let record = format!("#{user}#{key}");
        let attempt = system
            .store
            .begun()
            .into_iter()
            .find(|p| p.idempotency_pk.ends_with(&record));
        if let Some(payment) = attempt {
            let captured = system.model.charges().iter().enumerate().any(|(index, c)| {
                c.outcome == "succeeded"
                    && c.payment_id.as_ref() == Some(&payment.payment_id)
                    && system
                        .world
                        .charged_before_last_write(index, invocation)
                        .unwrap_or(true)
            });
            if captured {
                lock(&system.observed).false_unavailable.push((
                    user.to_owned(),
                    key.to_owned(),
                    payment.payment_id,
                ));
            }
        }
    }
    answer
}

/// What a shopper makes of an answer: the status, the payment it names, the problem `type`.
fn classify(status: u16, json: &serde_json::Value) -> Answer {
    let payment_id = json["payment_id"].as_str().map(str::to_owned);
    let problem = json["type"].as_str().unwrap_or_default();
    let is = |slug: &str| problem.ends_with(&format!("/{slug}"));
    match (status, payment_id) {
        (201, Some(id)) if json["status"] == "succeeded" => Answer::Succeeded(id),
        (202, Some(id)) if json["status"] == "processing" => Answer::Pending(id),
        (202, Some(id)) if json["status"] == "requires_action" => {
            // The fake's page is `/_fake/authenticate/<charge id>` (on 2C2P the charge id is
            // the `tranRef`, while payonce names the payment by its invoice).
            let url = json["next_action"]["url"].as_str().unwrap_or_default();
            let intent = url.rsplit('/').next().unwrap_or_default().to_owned();
            Answer::Action(id, intent)
        }
        (201, Some(id)) if json["status"] == "authorized" => Answer::Authorized(id),
        (402, Some(id))
            if is("card-declined")
                || is("payment-method-rejected")
                || is("payment-failed")
                || is("authentication-required")
                || is("authentication-failed") =>
        {
            Answer::Failed(id)
        }
        (503, _) if is("psp-unavailable") => Answer::Unavailable,
        (409, _) if is("idempotency-key-in-use") => Answer::InUse,
        (429, _) if is("too-many-attempts") => Answer::Limited,
        (409, _) if is("payment-in-progress") || is("order-already-authorized") => {
            Answer::OrderBusy
        }
        (409, _) if is("order-already-paid") => Answer::OrderPaid,
        (409, _) if is("order-version-mismatch") => {
            Answer::Stale(json["current_version"].as_i64().unwrap_or(0))
        }
        (500..=599, _) => Answer::ServerError(format!("{status} {problem}")),
        (status, _) => Answer::Wrong(format!("{status} {json}")),
    }
}

/// Holds a problem answer's `instance` to the rule (see
/// [`Observed::check_instance`](crate::check::Observed::check_instance)).
fn check_instance(
    system: &System,
    operation: &'static str,
    user: &str,
    key: &str,
    id: &str,
    response: &lambda_http::Response<lambda_http::Body>,
    json: &serde_json::Value,
) {
    let is_problem = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "application/problem+json");
    if is_problem {
        let replayed = response.headers().contains_key("idempotent-replayed");
        lock(&system.observed).check_instance(operation, user, key, id, replayed, json);
    }
}

/// The API Gateway (HTTP API, payload 2.0) event of a POST to `path` by `user` holding
/// `scopes`, with the claims the JWT authorizer would have put there, as request `request_id`.
fn api_event_at(
    path: &str,
    request_id: &str,
    user: &str,
    key: &str,
    body: &str,
    scopes: &[&str],
) -> lambda_http::Request {
    let scopes = (!scopes.is_empty()).then_some(scopes);
    let event = serde_json::json!({
        "version": "2.0",
        "routeKey": "POST /payments",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "idempotency-key": key},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "payonce",
            "domainName": "payonce.example.com",
            "domainPrefix": "payonce",
            "http": {"method": "POST", "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": "127.0.0.1", "userAgent": "payonce-sim"},
            "requestId": request_id,
            "routeKey": "POST /payments",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": crate::world::EPOCH_MS,
            "authorizer": {"jwt": {"claims": {"sub": user, "iss": "https://issuer.example.com"}, "scopes": scopes}},
        },
        "body": body,
        "isBase64Encoded": false,
    });
    lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway v2 event")
}

/// A store failing is answered 503 `service-unavailable` (retry with the key), never another
/// 5xx: notes any other.
fn not_503(system: &System, operation: &str, user: &str, key: &str, problem: &str) {
    if !problem.ends_with("/service-unavailable") {
        lock(&system.observed).own_writes_denied.push(format!(
            "invariant 4: {operation} key {user}/{key} was answered {problem}, not 503 service-unavailable"
        ));
    }
}
