//! The simulated system as its actors and daemons reach it: the real services wired to the
//! fault layers, the queues and the PSP model, with what the run observes from outside. Built
//! by `run::simulate`; below both the actors and the daemons, so neither imports the other.

use crate::check::Observed;
use crate::faults::{FaultyStore, Outbox, SimTransport};
use crate::world::SharedWorld;
use payonce::adapters::memory::MemoryQueue;
use payonce::adapters::psp::ConfiguredPsp;
use payonce::config::PspKind;
use payonce::ports::{QueueError, ReconcileSoon};
use payonce::service::reconcile::Reconciler;
use payonce::service::reconcile_soon::QueuedRequests;
use payonce::service::webhooks::{WebhookProcessor, WebhookReceiver};
use payonce::service::{ChargeService, OperationService, OrderService, RefundService};
use payonce_fake_psp::model::FakeModel;
use std::sync::{Arc, Mutex, PoisonError};

pub(crate) type Psp = ConfiguredPsp<SimTransport>;

/// The system under test, as the shoppers, the webhook pipeline and the scheduler reach it.
pub(crate) struct System {
    pub(crate) world: SharedWorld,
    pub(crate) psp: PspKind,
    pub(crate) store: FaultyStore,
    pub(crate) model: Arc<FakeModel>,
    pub(crate) outbox: Arc<Outbox>,
    /// Rung when the receiver enqueues a webhook, so the processor wakes for it.
    pub(crate) enqueued: tokio::sync::Notify,
    pub(crate) charge: ChargeService<FaultyStore, Psp>,
    pub(crate) refunds: RefundService<FaultyStore, Psp>,
    pub(crate) operations: OperationService<FaultyStore, Psp>,
    pub(crate) orders: OrderService<FaultyStore, FaultyStore>,
    pub(crate) reconciler: Reconciler<FaultyStore, Psp>,
    pub(crate) receiver: WebhookReceiver<MemoryQueue>,
    pub(crate) queue: MemoryQueue,
    pub(crate) dead_letters: MemoryQueue,
    pub(crate) processor: WebhookProcessor<FaultyStore>,
    /// The processor's requests to reconcile one payment now (the reconcile function's SQS
    /// trigger serves them).
    pub(crate) reconcile_requests: MemoryQueue,
    /// Rung when the processor asks for a payment, so the trigger wakes for it.
    pub(crate) requested: Arc<tokio::sync::Notify>,
    pub(crate) observed: Mutex<Observed>,
    /// Reconcile invocations running now (the template reserves 2).
    pub(crate) reconciles: std::sync::atomic::AtomicU32,
    /// Numbers the shoppers' and staff's requests, whose own writes the checker follows.
    pub(crate) invocations: std::sync::atomic::AtomicU64,
}

/// The processor's requests to reconcile a payment now: put on the request queue, waking its
/// trigger.
pub(crate) struct SimReconcileSoon {
    pub(crate) queue: MemoryQueue,
    pub(crate) requested: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl ReconcileSoon for SimReconcileSoon {
    async fn reconcile_soon(&self, payment_id: &str) -> Result<(), QueueError> {
        QueuedRequests(self.queue.clone())
            .reconcile_soon(payment_id)
            .await?;
        self.requested.notify_one();
        Ok(())
    }
}

/// Locks `mutex`, taking it over even if a task panicked while holding it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl System {
    /// The number of the next request an actor sends (0 is none).
    pub(crate) fn next_invocation(&self) -> u64 {
        1 + self
            .invocations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }
}
