//! One simulated run: shoppers, webhooks and reconcile against the real services, under the
//! faults of a [`Schedule`]; then the faults stop, the system settles, and the invariants are
//! checked against the PSP model's ledger and our tables.

use crate::alarms::{Alarms, PAYMENT_UNPROVABLE};
use crate::check::{check, Answer, Observed, RefundAsked, Refunded, Settled};
use crate::face;
use crate::faults::{
    invoke, invoke_as, FaultyStore, Finished, Outbox, SimTransport, API_KEY, TWOC2P_MERCHANT_ID,
};
use crate::world::{FaultKind, Schedule, SharedWorld, World};
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore, MemoryQueue};
use payonce::adapters::psp::ConfiguredPsp;
use payonce::clock::{Clock, SharedClock};
use payonce::config::PspKind;
use payonce::domain::{Currency, LineItem, PaymentStatus, RefundStatus};
use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotencyKey};
use payonce::mutations::Mutation;
use payonce::ports::QueueReceive;
use payonce::service::cleanup::CleanupConfig;
use payonce::service::limits::{AttemptLimiter, AttemptLimits};
use payonce::service::reconcile::{ReconcileConfig, Reconciler};
use payonce::service::webhooks::{
    Processed, ProcessorConfig, QueuedEvent, WebhookProcessor, WebhookReceiver, EVENT_ID_ATTRIBUTE,
    MAX_WEBHOOK_BYTES, PROVIDER_ATTRIBUTE,
};
use payonce::service::{
    ChargeConfig, ChargeService, Created, EventApplied, OrderService, PayRequest, RefundConfig,
    RefundService,
};
use payonce_fake_psp::model::{FakeModel, ModelConfig, ModelEvent};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The Lambda timeouts the template sets, which bound every invocation.
const CHARGE_TIMEOUT: Duration = Duration::from_secs(25);
const PROCESSOR_TIMEOUT: Duration = Duration::from_secs(30);
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the processor looks for deliveries that came back after their visibility timeout
/// (a new one wakes it at once).
const POLL_FOR_REDELIVERIES: Duration = Duration::from_secs(60);
/// SQS: a failed delivery becomes visible again after this; dead-lettered after this many.
const VISIBILITY: Duration = Duration::from_secs(180);
const MAX_RECEIVES: u32 = 5;
/// How far back a recent (eventually consistent) read may see: DynamoDB's replicas usually
/// catch up within a second; the simulation allows twice that.
const STALE_WINDOW: Duration = Duration::from_secs(2);
/// How long the system is given to settle once the faults stop (the liveness bound).
pub const SETTLE_FOR: Duration = Duration::from_secs(6 * 3600);

/// What a run came to.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Broken invariants, if any.
    pub violations: Vec<String>,
    /// The trace (compared between two runs of one seed).
    pub trace: Vec<String>,
    /// Payment requests the shoppers sent.
    pub requests: usize,
    /// Charges the PSP made.
    pub psp_charges: usize,
    /// Payments a webhook moved.
    pub webhook_moves: u32,
    /// Attempts left `processing` for an operator, with an alarm, because the PSP never saw
    /// them and cannot prove it (Omise); see [`check`].
    pub left_to_operator: usize,
}

type Psp = ConfiguredPsp<SimTransport>;

/// The system under test, as the shoppers, the webhook pipeline and the scheduler reach it.
struct System {
    world: SharedWorld,
    psp: PspKind,
    store: FaultyStore,
    model: Arc<FakeModel>,
    outbox: Arc<Outbox>,
    /// Rung when the receiver enqueues a webhook, so the processor wakes for it.
    enqueued: tokio::sync::Notify,
    charge: ChargeService<FaultyStore, Psp>,
    refunds: RefundService<FaultyStore, Psp>,
    orders: OrderService<FaultyStore, FaultyStore>,
    reconciler: Reconciler<FaultyStore, Psp>,
    receiver: WebhookReceiver<MemoryQueue>,
    queue: MemoryQueue,
    dead_letters: MemoryQueue,
    processor: WebhookProcessor<FaultyStore>,
    observed: Mutex<Observed>,
    /// Reconcile invocations running now (the template reserves 2).
    reconciles: std::sync::atomic::AtomicU32,
    /// Numbers the shoppers' and staff's requests, whose own writes the checker follows.
    invocations: std::sync::atomic::AtomicU64,
}

/// Runs `schedule` with `mutations` switched on; deterministic for a given input.
pub fn run(schedule: &Schedule, mutations: &[Mutation]) -> Outcome {
    payonce::ids::seed_thread(Some(schedule.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 1));
    fastrand::seed(schedule.seed.wrapping_add(7));
    payonce::mutations::set(mutations);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // The services raise alarms as error logs; the run's thread listens for them.
    let alarms = Alarms::default();
    let listening = tracing::subscriber::set_default(alarms.subscriber());
    let outcome = runtime.block_on(simulate(schedule, &alarms));
    drop(listening);
    payonce::mutations::set(&[]);
    payonce::ids::seed_thread(None);
    outcome
}

async fn simulate(schedule: &Schedule, alarms: &Alarms) -> Outcome {
    let world = World::new(schedule);
    alarms.trace_into(&world);
    let psp = schedule.psp;
    let clock: SharedClock = Arc::new(world.clock().clone());
    let records = MemoryIdempotencyStore::new(clock.clone());
    let payments = MemoryPaymentStore::new(records.clone(), clock.clone()).with_late_duplicates(
        payonce::domain::LateDuplicates::for_refunds(psp.refunds_through_payonce()),
    );
    let stale = world.clone();
    payments.lag_reads(STALE_WINDOW, move || stale.strikes(FaultKind::StaleRead));
    let store = FaultyStore::new(world.clone(), payments);
    let dead_letters = MemoryQueue::new(clock.clone(), MAX_WEBHOOK_BYTES);
    let queue = MemoryQueue::with_dead_letter(
        clock.clone(),
        MAX_WEBHOOK_BYTES,
        MAX_RECEIVES,
        dead_letters.clone(),
    );
    let lag = if schedule.faults.contains(&FaultKind::SearchLag) && world.chance(0.5) {
        world.millis(0, 3_600_000)
    } else {
        Duration::ZERO
    };
    let mut minimum_overrides = BTreeMap::new();
    if world.strikes(FaultKind::PspMinimumMoves) {
        let currency = *world.pick(face::currencies(psp));
        let raised = face::minimum_minor(psp, currency) * 2
            + i64::try_from(world.u64(0..3_000)).unwrap_or(0);
        minimum_overrides.insert(currency.as_str().to_owned(), raised);
    }
    // Omise documents no idempotency for refunds: some runs' Omise ignores the key on them.
    let refund_keys_ignored = psp == PspKind::Omise && world.strikes(FaultKind::RefundKeysIgnored);
    if refund_keys_ignored {
        world.trace("the PSP ignores Idempotency-Key on refunds".to_owned());
    }
    let model = Arc::new(FakeModel::new(
        ModelConfig {
            provider: face::provider(psp),
            omise_honours_refund_keys: !refund_keys_ignored,
            api_key: API_KEY.to_owned(),
            twoc2p_merchant_id: TWOC2P_MERCHANT_ID.to_owned(),
            search_lag_max: lag,
            minimum_overrides,
            ..ModelConfig::default()
        },
        schedule.seed,
    ));
    let outbox = Arc::new(Outbox::default());
    // One adapter per service, as each function builds its own; they share the one network.
    let transport = SimTransport::new(world.clone(), model.clone(), outbox.clone());
    let adapter = || face::adapter(psp, transport.clone());
    let system = Arc::new(System {
        world: world.clone(),
        psp,
        store: store.clone(),
        model,
        outbox,
        enqueued: tokio::sync::Notify::new(),
        // With the attempt limits a deployment runs, counted in the shared embedded records.
        charge: ChargeService::new(store.clone(), adapter(), ChargeConfig::default())
            .with_attempt_limits(AttemptLimiter::new(AttemptLimits::default())),
        refunds: RefundService::new(store.clone(), adapter(), RefundConfig::default()),
        orders: OrderService::new(
            store.clone(),
            Idempotency::new(store.clone(), IdempotencyConfig::default()),
        )
        .for_psp(psp),
        reconciler: Reconciler::new(store.clone(), adapter(), ReconcileConfig::default()),
        receiver: WebhookReceiver::new(face::receiver_providers(psp), queue.clone(), clock.clone()),
        queue,
        dead_letters,
        processor: WebhookProcessor::new(
            store.clone(),
            face::processor_providers(psp),
            ProcessorConfig::default(),
        ),
        observed: Mutex::new(Observed::default()),
        reconciles: std::sync::atomic::AtomicU32::new(0),
        invocations: std::sync::atomic::AtomicU64::new(0),
    });

    let background = [
        tokio::spawn(pump_webhooks(system.clone())),
        // Two batches at once, as the event source mapping runs them.
        tokio::spawn(process_the_queue(system.clone())),
        tokio::spawn(process_the_queue(system.clone())),
        tokio::spawn(reconcile_every_5_minutes(system.clone())),
        tokio::spawn(cleanup_every_6_hours(system.clone())),
        tokio::spawn(jump_the_clock(system.clone())),
    ];
    let shoppers: Vec<_> = (0..schedule.clients)
        .map(|i| tokio::spawn(shopper(system.clone(), i)))
        .collect();
    // Every shopper's steps are bounded, so they are all done long before this; if one is
    // not, something waited for ever.
    let shopping = async {
        for shopper in shoppers {
            let _ = shopper.await;
        }
    };
    let mut stuck = Vec::new();
    if tokio::time::timeout(Duration::from_secs(7 * 24 * 3600), shopping)
        .await
        .is_err()
    {
        stuck.push("liveness: a shopper was still waiting a week after starting".to_owned());
    }

    // Reconcile and the webhooks run under faults for another hour; then the faults stop, the
    // system gets its bound to settle, and every shopper looks once more.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    world.stop_faults();
    world.trace("faults stop".to_owned());
    tokio::time::sleep(SETTLE_FOR).await;
    // Only keys that were told of an attempt: their look is a replay, never a new charge.
    let keys: Vec<_> = lock(&system.observed)
        .keys
        .iter()
        .filter(|(_, history)| history.answers.iter().any(Answer::names_attempt))
        .map(|(key, _)| key.clone())
        .collect();
    for (user, key) in keys {
        let request = lock(&system.observed).keys[&(user.clone(), key.clone())]
            .request
            .clone();
        let answer = pay(&system, &user, &key, &request).await;
        lock(&system.observed).record(&user, &key, &request, answer, true);
    }
    // Likewise every refund key told of a refund.
    let refund_keys: Vec<_> = lock(&system.observed)
        .refund_keys
        .iter()
        .filter(|(_, history)| history.answers.iter().any(Refunded::names_refund))
        .map(|(key, history)| (key.clone(), history.asked.clone()))
        .collect();
    for ((staff, key), asked) in refund_keys {
        let answer = refund(&system, &staff, &key, &asked).await;
        lock(&system.observed).record_refund(&staff, &key, &asked, answer, true);
    }
    for task in background {
        task.abort();
    }

    let observed = lock(&system.observed).clone();
    let ledger = system.model.charges();
    let refunds = system.model.refunds();
    let settled = Settled {
        psp,
        ledger: &ledger,
        refunds: &refunds,
        unprovable_alarms: alarms.payments(PAYMENT_UNPROVABLE),
    };
    let checked = check(&system.store, &observed, &settled).await;
    let mut violations = stuck;
    violations.extend(checked.violations);
    Outcome {
        violations,
        trace: world.trace_lines(),
        requests: observed.requests,
        psp_charges: ledger.len(),
        webhook_moves: observed.applied_events.values().sum(),
        left_to_operator: checked.left_to_operator.len(),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

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
async fn shopper(system: Arc<System>, index: u32) {
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
    };
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
async fn refund(system: &System, staff: &str, key: &str, asked: &RefundAsked) -> Refunded {
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
        payonce_refund::handler::handle(&system.refunds, event),
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
async fn pay(system: &System, user: &str, key: &str, request: &PayRequest) -> Answer {
    let body = serde_json::json!({
        "order_id": request.order_id,
        "order_version": request.order_version,
        "payment_method": request.payment_method,
    });
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
            | (Answer::Pending(id), PaymentStatus::Processing) => *id == payment_id,
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
        (402, Some(id))
            if is("card-declined") || is("payment-method-rejected") || is("payment-failed") =>
        {
            Answer::Failed(id)
        }
        (503, _) if is("psp-unavailable") => Answer::Unavailable,
        (409, _) if is("idempotency-key-in-use") => Answer::InUse,
        (429, _) if is("too-many-attempts") => Answer::Limited,
        (409, _) if is("payment-in-progress") => Answer::OrderBusy,
        (409, _) if is("order-already-paid") => Answer::OrderPaid,
        (409, _) if is("order-version-mismatch") => {
            Answer::Stale(json["current_version"].as_i64().unwrap_or(0))
        }
        (500..=599, _) => Answer::ServerError(format!("{status} {problem}")),
        (status, _) => Answer::Wrong(format!("{status} {json}")),
    }
}

/// Holds a problem answer's `instance` to the rule (see [`Observed::check_instance`]).
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

/// Delivers the PSP's webhooks: each event may be delayed, duplicated (and so reordered) or
/// lost; a delivery the processor fails comes back after the visibility timeout, and is
/// dead-lettered after the queue's maximum receive count. The PSP sends an event a moment after
/// the change that caused it: the sender wakes when a call adds one, and when the model's next
/// time-driven change is due.
async fn pump_webhooks(system: Arc<System>) {
    loop {
        let now_ms = system.world.clock().now_ms();
        let until_next = system
            .model
            .next_transition_ms()
            .map_or(Duration::from_secs(600), |due_ms| {
                Duration::from_millis(u64::try_from(due_ms - now_ms).unwrap_or(0))
            })
            .clamp(Duration::from_millis(1), Duration::from_secs(600));
        // `biased`: an unbiased select picks its first branch at random (tokio's own
        // generator, not the seed's), and whether `added` was polled decides whether a
        // stored wake-up is used now or later: the run would differ from one process to
        // the next.
        tokio::select! {
            biased;
            () = system.outbox.added() => {}
            () = tokio::time::sleep(until_next) => {}
        }
        let now_ms = system.world.clock().now_ms();
        let mut events = system.outbox.take();
        events.extend(system.model.tick(now_ms));
        for event in events {
            let world = &system.world;
            if world.strikes(FaultKind::WebhookLoss) {
                world.trace(format!("webhook lost {}", event.id));
                continue;
            }
            let copies = if world.strikes(FaultKind::WebhookChaos) {
                1 + world.u64(0..3)
            } else {
                1
            };
            for _ in 0..copies {
                let delay = if world.strikes(FaultKind::WebhookChaos) {
                    world.millis(0, 600_000)
                } else {
                    world.millis(0, 2_000)
                };
                tokio::spawn(deliver(system.clone(), event.clone(), delay));
            }
        }
    }
}

/// The PSP delivers one copy of an event to the webhook receiver, signed at delivery time as the
/// PSP signs each attempt (2C2P's body carries its own signature); a refused delivery is
/// retried, as the PSP retries non-2xx.
async fn deliver(system: Arc<System>, event: ModelEvent, delay: Duration) {
    tokio::time::sleep(delay).await;
    for _ in 0..3 {
        let headers = face::signature_headers(
            system.psp,
            system.world.clock().now_s(),
            event.body.as_bytes(),
        );
        match system
            .receiver
            .receive(system.psp.name(), &headers, event.body.as_bytes())
            .await
        {
            Ok(_) => {
                system.enqueued.notify_one();
                return;
            }
            Err(error) => {
                system
                    .world
                    .trace(format!("webhook refused {}: {error}", event.id));
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        }
    }
}

/// The processor's event source mapping: polls the queue, processes each message in an
/// invocation that may die, deletes it once processed. A message that fails comes back after
/// the visibility timeout and goes to the dead-letter queue after its fifth receive.
async fn process_the_queue(system: Arc<System>) {
    let mut more = false;
    loop {
        // The event source mapping long-polls: a message is picked up a moment after it is
        // enqueued; one that comes back after its visibility timeout within the poll interval.
        if !more {
            tokio::select! {
                biased; // as in the pump: the seed, not tokio, decides the order
                () = system.enqueued.notified() => {}
                () = tokio::time::sleep(POLL_FOR_REDELIVERIES) => {}
            }
            tokio::time::sleep(system.world.millis(0, 200)).await;
        }
        let Ok(messages) = system.queue.receive(10, VISIBILITY).await else {
            more = false;
            continue;
        };
        more = messages.len() == 10;
        for message in messages {
            let processed = invoke(
                &system.world,
                PROCESSOR_TIMEOUT,
                system.processor.process(&QueuedEvent {
                    message_id: &message.message_id,
                    provider: message
                        .attributes
                        .get(PROVIDER_ATTRIBUTE)
                        .map(String::as_str),
                    body: &message.body,
                }),
            )
            .await;
            if let Some(Ok(processed)) = processed {
                // A webhook that asks for a check (a charge's refunds changed, a late duplicate
                // to refund) wakes reconcile early.
                let asks_for_a_check = match &processed {
                    Processed::RefundsDue(due) => *due > 0,
                    Processed::Applied(EventApplied::Moved(payment)) => payment.duplicate_refund,
                    _ => false,
                };
                if asks_for_a_check {
                    start_reconcile(&system, "woken by a webhook");
                }
                if let Processed::Applied(EventApplied::Moved(payment)) = processed {
                    let event_id = message
                        .attributes
                        .get(EVENT_ID_ATTRIBUTE)
                        .cloned()
                        .unwrap_or_default();
                    lock(&system.observed).applied(&event_id, &payment.payment_id);
                }
                let _ = system.queue.delete(&message.receipt_handle).await;
            }
        }
        let dead = system.dead_letters.len();
        if dead > 0 && system.world.faults_on() {
            system
                .world
                .trace(format!("{dead} webhooks in the dead-letter queue"));
        }
    }
}

/// The cleanup job: removes expired records TTL has not removed yet (never a live lease).
async fn cleanup_every_6_hours(system: Arc<System>) {
    loop {
        tokio::time::sleep(Duration::from_secs(6 * 3600)).await;
        let records = system.store.inner().records().clone();
        let swept = payonce::service::cleanup::sweep(&records, &CleanupConfig::default()).await;
        if let Ok(report) = swept {
            system.world.trace(format!("cleanup {report:?}"));
        }
    }
}

/// Now and then, time jumps ahead at once: every sleeper wakes late, every timeout fires.
async fn jump_the_clock(system: Arc<System>) {
    while system.world.faults_on() {
        tokio::time::sleep(Duration::from_secs(20)).await;
        if system.world.strikes(FaultKind::ClockJump) {
            let jump = system.world.millis(1_000, 90_000);
            system
                .world
                .trace(format!("clock jumps {} ms", jump.as_millis()));
            tokio::time::advance(jump).await;
        }
    }
}

/// The reconcile schedule: an invocation every 5 minutes, now and then delivered twice (so two
/// runs overlap, as EventBridge's at-least-once delivery and the template's reserved
/// concurrency of 2 allow).
async fn reconcile_every_5_minutes(system: Arc<System>) {
    loop {
        tokio::time::sleep(Duration::from_secs(300)).await;
        start_reconcile(&system, "scheduled");
        if system.world.strikes(FaultKind::ReconcileOverlap) {
            let twice = system.clone();
            let after = system.world.millis(0, 500);
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                start_reconcile(&twice, "delivered twice");
            });
        }
    }
}

/// The reserved concurrency of the reconcile function.
const RECONCILE_CONCURRENCY: u32 = 2;

/// Starts one reconcile invocation, unless its reserved concurrency is used up (Lambda throttles
/// it; the next schedule runs it).
fn start_reconcile(system: &Arc<System>, why: &'static str) {
    use std::sync::atomic::Ordering;
    let running = system.reconciles.fetch_add(1, Ordering::SeqCst);
    if running >= RECONCILE_CONCURRENCY {
        system.reconciles.fetch_sub(1, Ordering::SeqCst);
        system
            .world
            .trace(format!("reconcile ({why}) throttled: {running} running"));
        return;
    }
    let system = system.clone();
    tokio::spawn(async move {
        let ran = invoke(&system.world, RECONCILE_TIMEOUT, system.reconciler.run()).await;
        system.reconciles.fetch_sub(1, Ordering::SeqCst);
        match ran {
            Some(Ok(report)) if report.examined > 0 => system.world.trace(format!(
                "reconcile ({why}) examined {} succeeded {} declined {} abandoned {} pending {} skipped {} errors {}",
                report.examined,
                report.succeeded,
                report.declined,
                report.abandoned,
                report.pending,
                report.skipped,
                report.errors
            )),
            Some(_) => {}
            None => system.world.trace(format!("reconcile ({why}) died")),
        }
    });
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

impl System {
    fn next_invocation(&self) -> u64 {
        1 + self
            .invocations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }
}

impl Observed {
    fn applied(&mut self, event_id: &str, payment_id: &str) {
        *self
            .applied_events
            .entry((event_id.to_owned(), payment_id.to_owned()))
            .or_insert(0) += 1;
    }
}
