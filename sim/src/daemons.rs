//! The background loops of a run: the PSP's webhook deliveries, the queue's processor, the
//! reconcile schedule and its requests, the cleanup job, and the clock jumps. They reach the system through
//! [`System`] only.

use crate::check::Observed;
use crate::face;
use crate::faults::invoke;
use crate::system::{lock, System};
use crate::world::FaultKind;
use payonce::clock::Clock;
use payonce::ports::QueueReceive;
use payonce::service::cleanup::CleanupConfig;
use payonce::service::webhooks::{Processed, QueuedEvent, EVENT_ID_ATTRIBUTE, PROVIDER_ATTRIBUTE};
use payonce::service::EventApplied;
use payonce_fake_psp::model::ModelEvent;
use std::sync::Arc;
use std::time::Duration;

/// The Lambda timeouts the template sets, which bound every invocation.
const PROCESSOR_TIMEOUT: Duration = Duration::from_secs(30);
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the processor looks for deliveries that came back after their visibility timeout
/// (a new one wakes it at once).
const POLL_FOR_REDELIVERIES: Duration = Duration::from_secs(60);
/// SQS: a failed delivery becomes visible again after this.
const VISIBILITY: Duration = Duration::from_secs(180);

/// Delivers the PSP's webhooks: each event may be delayed, duplicated (and so reordered) or
/// lost; a delivery the processor fails comes back after the visibility timeout, and is
/// dead-lettered after the queue's maximum receive count. The PSP sends an event a moment after
/// the change that caused it: the sender wakes when a call adds one, and when the model's next
/// time-driven change is due.
pub(crate) async fn pump_webhooks(system: Arc<System>) {
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
pub(crate) async fn process_the_queue(system: Arc<System>) {
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
pub(crate) async fn cleanup_every_6_hours(system: Arc<System>) {
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
pub(crate) async fn jump_the_clock(system: Arc<System>) {
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
pub(crate) async fn reconcile_every_5_minutes(system: Arc<System>) {
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

/// SQS: a reconcile request that failed is received again after this (6 x reconcile's timeout).
const REQUEST_VISIBILITY: Duration = Duration::from_secs(720);

/// The reconcile function's SQS trigger: a request is picked up a moment after the processor
/// sends it (one per invocation, within the function's reserved concurrency, shared with the
/// schedule), its payment reconciled in an invocation that may die, overlapping whatever else
/// runs; a request that failed or died comes back after the visibility timeout.
pub(crate) async fn reconcile_on_request(system: Arc<System>) {
    loop {
        tokio::select! {
            biased; // as in the pump: the seed, not tokio, decides the order
            () = system.requested.notified() => {}
            () = tokio::time::sleep(POLL_FOR_REDELIVERIES) => {}
        }
        loop {
            tokio::time::sleep(system.world.millis(0, 500)).await;
            let Ok(messages) = system
                .reconcile_requests
                .receive(1, REQUEST_VISIBILITY)
                .await
            else {
                break;
            };
            let Some(message) = messages.into_iter().next() else {
                break;
            };
            // Throttled while both reserved invocations run: the mapping retries shortly.
            while !reserve_reconcile(&system) {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let system = system.clone();
            tokio::spawn(async move {
                let ran = invoke(
                    &system.world,
                    RECONCILE_TIMEOUT,
                    system
                        .reconciler
                        .reconcile_requested([message.body.as_str()]),
                )
                .await;
                system
                    .reconciles
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                match ran {
                    Some(report) if report.errors == 0 => {
                        let _ = system
                            .reconcile_requests
                            .delete(&message.receipt_handle)
                            .await;
                        system.world.trace(format!(
                            "reconcile on request {} succeeded {} declined {} pending {} skipped {} settled {}",
                            message.body,
                            report.succeeded,
                            report.declined,
                            report.pending,
                            report.skipped,
                            report.already_settled
                        ));
                    }
                    Some(_) => system
                        .world
                        .trace(format!("reconcile on request {} failed", message.body)),
                    None => system
                        .world
                        .trace(format!("reconcile on request {} died", message.body)),
                }
            });
        }
    }
}

/// Takes one of the reconcile function's reserved invocations, if one is free.
fn reserve_reconcile(system: &System) -> bool {
    use std::sync::atomic::Ordering;
    let running = system.reconciles.fetch_add(1, Ordering::SeqCst);
    if running >= RECONCILE_CONCURRENCY {
        system.reconciles.fetch_sub(1, Ordering::SeqCst);
        return false;
    }
    true
}

/// The reserved concurrency of the reconcile function.
const RECONCILE_CONCURRENCY: u32 = 2;

/// Starts one reconcile invocation, unless its reserved concurrency is used up (Lambda throttles
/// it; the next schedule runs it).
fn start_reconcile(system: &Arc<System>, why: &'static str) {
    use std::sync::atomic::Ordering;
    if !reserve_reconcile(system) {
        system.world.trace(format!(
            "reconcile ({why}) throttled: {RECONCILE_CONCURRENCY} running"
        ));
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

impl Observed {
    fn applied(&mut self, event_id: &str, payment_id: &str) {
        *self
            .applied_events
            .entry((event_id.to_owned(), payment_id.to_owned()))
            .or_insert(0) += 1;
    }
}
