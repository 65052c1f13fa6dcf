//! One simulated run: shoppers, webhooks and reconcile against the real services, under the
//! faults of a [`Schedule`]; then the faults stop, the system settles, and the invariants are
//! checked against the PSP model's ledger and our tables.

use crate::actors::{pay, refund, shopper};
use crate::alarms::{Alarms, PAYMENT_UNPROVABLE};
use crate::check::{check, Answer, Observed, Refunded, Settled};
use crate::daemons::{
    cleanup_every_6_hours, jump_the_clock, process_the_queue, pump_webhooks,
    reconcile_every_5_minutes, reconcile_on_request,
};
use crate::face;
use crate::faults::{FaultyStore, Outbox, SimTransport, API_KEY, TWOC2P_MERCHANT_ID};
use crate::system::{lock, SimReconcileSoon, System};
use crate::world::{FaultKind, Schedule, World};
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore, MemoryQueue};
use payonce::clock::SharedClock;
use payonce::config::PspKind;
use payonce::idempotency::{Idempotency, IdempotencyConfig};
use payonce::mutations::Mutation;
use payonce::service::limits::{AttemptLimiter, AttemptLimits};
use payonce::service::reconcile::{ReconcileConfig, Reconciler};
use payonce::service::webhooks::{
    ProcessorConfig, WebhookProcessor, WebhookReceiver, MAX_WEBHOOK_BYTES,
};
use payonce::service::{
    ChargeConfig, ChargeService, OperationConfig, OperationService, OrderService, RefundConfig,
    RefundService,
};
use payonce_fake_psp::model::{FakeModel, ModelConfig};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// SQS: a failed delivery is dead-lettered after this many receives.
const MAX_RECEIVES: u32 = 5;
/// How far back a recent (eventually consistent) read may see: DynamoDB's replicas usually
/// catch up within a second; the simulation allows twice that.
const STALE_WINDOW: Duration = Duration::from_secs(2);
/// How long the system is given to settle once the faults stop (the liveness bound).
pub const SETTLE_FOR: Duration = Duration::from_secs(6 * 3600);

/// How long the PSP model holds an authorization before it lapses: well within a run, and
/// within [`SETTLE_FOR`].
const AUTHORIZATION_LAPSES_AFTER: Duration = Duration::from_secs(2 * 3600);

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
    // A 2C2P deployment refunds through payonce only with the maintenance keys: most runs have
    // them (half of them; some settling each payment later, so refunds meet voids and unsettled refusals).
    let twoc2p_refunds = psp == PspKind::TwoC2p && world.chance(0.5);
    let twoc2p_settle_after = if twoc2p_refunds && world.chance(0.5) {
        world.millis(0, 2 * 3_600_000)
    } else {
        Duration::ZERO
    };
    // Half of those accounts settle manually: every approval is an authorization payonce
    // settles (at once for an automatic capture), and staff capture or void the manual ones.
    let twoc2p_manual = twoc2p_refunds && world.chance(0.5);
    if twoc2p_refunds {
        world.trace(format!(
            "2C2P refunds through the maintenance API, payments settled after {twoc2p_settle_after:?}{}",
            if twoc2p_manual { ", the account settling manually" } else { "" }
        ));
    }
    let refunds_through_payonce = psp.refunds_through_payonce() || twoc2p_refunds;
    let payments = MemoryPaymentStore::new(records.clone(), clock.clone()).with_late_duplicates(
        payonce::domain::LateDuplicates::for_refunds(refunds_through_payonce),
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
    // What 2C2P's inquiry answers while the customer is at the 3-D Secure page is unconfirmed:
    // half the 2C2P runs answer "not found" (no transaction, no tranRef) until it ends.
    let challenge_unregistered = psp == PspKind::TwoC2p && world.chance(0.5);
    if challenge_unregistered {
        world.trace("the PSP's inquiry does not know a payment waiting for 3-D Secure".to_owned());
    }
    let model = Arc::new(FakeModel::new(
        ModelConfig {
            provider: face::provider(psp),
            omise_honours_refund_keys: !refund_keys_ignored,
            twoc2p_challenge_unregistered: challenge_unregistered,
            api_key: API_KEY.to_owned(),
            twoc2p_merchant_id: TWOC2P_MERCHANT_ID.to_owned(),
            search_lag_max: lag,
            minimum_overrides,
            // Authorizations lapse within the run (Stripe's are 7 days), so that some do.
            authorization_expires_after: AUTHORIZATION_LAPSES_AFTER,
            twoc2p_maintenance_keys: twoc2p_refunds
                .then(|| face::twoc2p_maintenance_keys().0.clone()),
            twoc2p_settle_after,
            twoc2p_manual_settlement: twoc2p_manual,
            ..ModelConfig::default()
        },
        schedule.seed,
    ));
    let outbox = Arc::new(Outbox::default());
    // One adapter per service, as each function builds its own; they share the one network.
    let transport = SimTransport::new(world.clone(), model.clone(), outbox.clone());
    let adapter = || face::adapter(psp, transport.clone(), twoc2p_refunds, twoc2p_manual);
    let reconcile_requests = MemoryQueue::new(clock.clone(), 1024);
    let requested = Arc::new(tokio::sync::Notify::new());
    let system = Arc::new(System {
        world: world.clone(),
        psp,
        store: store.clone(),
        model,
        outbox,
        enqueued: tokio::sync::Notify::new(),
        // With the attempt limits a deployment runs, counted in the shared embedded records.
        charge: ChargeService::new(
            store.clone(),
            adapter(),
            ChargeConfig {
                checkout_origins: vec![crate::actors::CHECKOUT_ORIGIN.to_owned()],
                ..ChargeConfig::default()
            },
        )
        .with_attempt_limits(AttemptLimiter::new(AttemptLimits::default())),
        refunds: RefundService::new(store.clone(), adapter(), RefundConfig::default()),
        operations: OperationService::new(store.clone(), adapter(), OperationConfig::default()),
        orders: OrderService::new(
            store.clone(),
            Idempotency::new(store.clone(), IdempotencyConfig::default()),
        )
        .for_psp(psp),
        reconciler: Reconciler::new(store.clone(), adapter(), ReconcileConfig::default()),
        receiver: WebhookReceiver::new(
            face::receiver_providers(psp, twoc2p_manual),
            queue.clone(),
            clock.clone(),
        ),
        queue,
        dead_letters,
        processor: WebhookProcessor::new(
            store.clone(),
            face::processor_providers(psp, twoc2p_manual),
            ProcessorConfig::default(),
        )
        .with_reconcile_soon(Arc::new(SimReconcileSoon {
            queue: reconcile_requests.clone(),
            requested: requested.clone(),
        })),
        reconcile_requests,
        requested,
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
        tokio::spawn(reconcile_on_request(system.clone())),
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
        refunds_through_payonce,
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
