//! Webhooks: the receiver verifies the raw body and buffers it in a queue; the
//! processor applies each event exactly once.

use super::complete;
use super::refund::{apply_refund_settlement, RefundApplied};
use super::settle::{apply_event, EventApplied, EventError};
use crate::clock::{duration_ms, SharedClock};
use crate::domain::Settlement;
use crate::ports::{
    ChargeStore, EventMark, InflightScan, OutgoingMessage, QueueError, QueueSend, ReconcileSoon,
    RefundRecordWrite, RefundStore, SignatureError, WebhookScheme,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Largest webhook body accepted, in bytes (1 MiB, the queue's maximum message size).
pub const MAX_WEBHOOK_BYTES: usize = 1024 * 1024;
/// Message attribute naming the provider.
pub const PROVIDER_ATTRIBUTE: &str = "provider";
/// Message attribute carrying the provider's event id.
pub const EVENT_ID_ATTRIBUTE: &str = "event_id";

/// The webhook schemes by provider name.
#[derive(Clone, Default)]
pub struct Providers {
    schemes: HashMap<String, Arc<dyn WebhookScheme>>,
}

impl Providers {
    /// No providers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `scheme` under its provider name.
    pub fn with(mut self, scheme: impl WebhookScheme + 'static) -> Self {
        self.schemes
            .insert(scheme.provider().to_owned(), Arc::new(scheme));
        self
    }

    /// The scheme of `provider`.
    pub fn get(&self, provider: &str) -> Option<&Arc<dyn WebhookScheme>> {
        self.schemes.get(provider)
    }
}

/// Why a webhook delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// No such provider (404).
    #[error("unknown provider")]
    UnknownProvider,
    /// The body is over [`MAX_WEBHOOK_BYTES`] or the queue's limit (413).
    #[error("the webhook body is too large")]
    TooLarge,
    /// The signature is missing or malformed (400) or does not verify (401).
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// The verified body is not an event (400).
    #[error("the body is not a readable event: {0}")]
    Unreadable(String),
    /// The queue is unavailable (5xx, so the PSP retries).
    #[error(transparent)]
    Queue(QueueError),
}

/// The webhook receiver: verify, then enqueue; never applies anything itself.
pub struct WebhookReceiver<Q> {
    providers: Providers,
    queue: Q,
    clock: SharedClock,
}

impl<Q: QueueSend> WebhookReceiver<Q> {
    /// The receiver.
    pub fn new(providers: Providers, queue: Q, clock: SharedClock) -> Self {
        Self {
            providers,
            queue,
            clock,
        }
    }

    /// Verifies `body` for `provider` and enqueues it with the provider and event id as attributes.
    pub async fn receive(
        &self,
        provider: &str,
        headers: &lambda_http::http::HeaderMap,
        body: &[u8],
    ) -> Result<String, ReceiveError> {
        let scheme = self
            .providers
            .get(provider)
            .ok_or(ReceiveError::UnknownProvider)?;
        if body.len() > MAX_WEBHOOK_BYTES {
            return Err(ReceiveError::TooLarge);
        }
        // The raw bytes are verified before anything parses them; a key the request names
        // (PayPal's certificate) is fetched first, from an allowed origin only.
        let verified = match scheme.fetch_keys(headers).await {
            Ok(()) => scheme.verify(headers, body, self.clock.now_s()),
            Err(error) => Err(error),
        };
        verified
            .inspect_err(|error| {
                crate::metrics::count_webhook(crate::metrics::WEBHOOK_SIGNATURE_REJECTED, provider);
                // A header that does not parse or verify: a secret out of step with the PSP, or
                // a forgery. A request with no signature header at all is not worth waking
                // anyone, nor is a key that could not be fetched this time (the PSP retries).
                if !matches!(error, SignatureError::Missing | SignatureError::KeyUnavailable) {
                    tracing::warn!(provider, error = %error, alarm = "webhook-signature", "webhook signature refused");
                }
            })?;
        // A body the PSP signed is never refused for what it says: one that does not read as an
        // event (a future API version, a thin event) is queued as it is, and the processor
        // dead-letters it for an operator. Refusing it would only have the PSP retry for days.
        let (event_id, kind) = match scheme.parse(body) {
            Ok(event) => (event.event_id, event.kind),
            Err(error) => {
                tracing::warn!(provider, error = %error, "a verified webhook does not read as an event; queued as it is, for the dead-letter queue");
                (unparsed_event_id(body), "unparsed".to_owned())
            }
        };
        // An event id the queue would refuse as an attribute is kept in a form it takes.
        let event_id = if crate::ports::queue_accepts(&event_id) {
            event_id
        } else {
            unparsed_event_id(event_id.as_bytes())
        };
        let attributes = BTreeMap::from([
            (PROVIDER_ATTRIBUTE.to_owned(), provider.to_owned()),
            (EVENT_ID_ATTRIBUTE.to_owned(), event_id.clone()),
        ]);
        let as_sent = std::str::from_utf8(body)
            .ok()
            .filter(|text| crate::ports::queue_accepts(text));
        let message = OutgoingMessage {
            body: as_sent.map_or_else(|| parked(body), str::to_owned),
            attributes,
        };
        let mut parked_now = as_sent.is_none();
        let sent = match self.queue.send(&message).await {
            // SQS refuses some characters outright: the body goes escaped instead, which it
            // takes and the processor reads as the same event (sending it again as it is never
            // works).
            Err(QueueError::Refused { .. }) if !parked_now => {
                parked_now = true;
                self.queue
                    .send(&OutgoingMessage {
                        body: parked(body),
                        ..message.clone()
                    })
                    .await
            }
            other => other,
        };
        match sent {
            Ok(id) => {
                if parked_now {
                    tracing::error!(provider, event_id = %event_id, message_id = %id, alarm = "webhook-parked",
                        "a verified webhook the queue cannot take as it is was queued escaped (or hex-encoded)");
                }
                tracing::info!(provider, event_id = %event_id, kind = %kind, message_id = %id, "webhook queued");
                Ok(id)
            }
            Err(QueueError::TooLarge { .. }) => Err(ReceiveError::TooLarge),
            Err(error) => Err(ReceiveError::Queue(error)),
        }
    }
}

/// Tunables of the processor.
#[derive(Debug, Clone)]
pub struct ProcessorConfig {
    /// How long an event id is remembered (30 days, beyond the PSP's 3-day retry window).
    pub dedup_retention: Duration,
    /// A refund's idempotency record retention after a settlement (as the refund path's).
    pub record_retention: Duration,
    /// The PSP mode this deployment runs in (`true`: live), where known: an event from the
    /// other mode is never applied. `None`: not checked.
    pub livemode: Option<bool>,
}

impl ProcessorConfig {
    /// Defaults, with the PSP mode from `PSP_LIVEMODE` (`true` / `false`; unset: not checked).
    pub fn from_env() -> Result<Self, crate::config::ConfigError> {
        let livemode = match std::env::var("PSP_LIVEMODE").ok().as_deref() {
            None | Some("") => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => {
                return Err(crate::config::ConfigError::Env(
                    crate::env::EnvError::Invalid {
                        name: "PSP_LIVEMODE",
                        reason: format!("expected true or false, got {other}"),
                    },
                ))
            }
        };
        Ok(Self {
            livemode,
            ..Self::default()
        })
    }
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self {
            dedup_retention: Duration::from_secs(30 * 24 * 3600),
            record_retention: Duration::from_secs(24 * 3600),
            livemode: None,
        }
    }
}

/// One queued webhook, as the processor sees it.
#[derive(Debug, Clone)]
pub struct QueuedEvent<'a> {
    /// The queue's message id (reported back on failure).
    pub message_id: &'a str,
    /// The provider attribute.
    pub provider: Option<&'a str>,
    /// The raw event.
    pub body: &'a str,
}

/// What processing one queued event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Applied (moved, unchanged or duplicate).
    Applied(EventApplied),
    /// A refund event applied (moved, unchanged or duplicate).
    Refund(RefundApplied),
    /// The charge's refunds changed: this many pending refunds of ours were made due for
    /// reconcile's lookup.
    RefundsDue(usize),
    /// Not ours or not a type payonce applies: acknowledged and logged.
    Ignored(&'static str),
}

/// Why an event must be retried (and, after the queue's maxReceiveCount, dead-lettered).
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// No provider attribute, or an unknown provider.
    #[error("the message names no known provider")]
    UnknownProvider,
    /// The body cannot be read as an event.
    #[error("the event cannot be read: {0}")]
    Unreadable(String),
    /// Applying failed (payment not found yet, store unavailable).
    #[error(transparent)]
    Apply(#[from] EventError),
}

/// The webhook processor: applies queued events exactly once.
pub struct WebhookProcessor<S> {
    store: S,
    providers: Providers,
    config: ProcessorConfig,
    reconcile_soon: Option<Arc<dyn ReconcileSoon>>,
}

impl<S: ChargeStore + RefundStore + InflightScan> WebhookProcessor<S> {
    /// The processor.
    pub fn new(store: S, providers: Providers, config: ProcessorConfig) -> Self {
        Self {
            store,
            providers,
            config,
            reconcile_soon: None,
        }
    }

    /// Asks `requests` to reconcile a payment a webhook says waits for payonce's second step
    /// (see [`super::reconcile_soon`]); without it, the payment waits for reconcile's schedule.
    pub fn with_reconcile_soon(mut self, requests: Arc<dyn ReconcileSoon>) -> Self {
        self.reconcile_soon = Some(requests);
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Processes one event.
    pub async fn process(&self, event: &QueuedEvent<'_>) -> Result<Processed, ProcessError> {
        let provider = event.provider.ok_or(ProcessError::UnknownProvider)?;
        let scheme = self
            .providers
            .get(provider)
            .ok_or(ProcessError::UnknownProvider)?;
        let body = queued_body(event.body).map_err(ProcessError::Unreadable)?;
        // A body that does not read as an event is retried until the queue dead-letters it for
        // an operator (the receiver queued it rather than refuse what the PSP signed).
        let parsed = scheme
            .parse(&body)
            .map_err(|e| ProcessError::Unreadable(e.to_string()))?;
        let mark = EventMark {
            provider: provider.to_owned(),
            event_id: parsed.event_id.clone(),
            expires_at_s: (self.store.now_ms() + duration_ms(self.config.dedup_retention))
                .div_euclid(1000),
        };
        if let (Some(expected), Some(reported)) = (self.config.livemode, parsed.livemode) {
            if expected != reported {
                tracing::error!(provider, event_id = %parsed.event_id, kind = %parsed.kind, livemode = reported,
                    alarm = "webhook-mismatch", "a webhook from the PSP's other mode (live or test); nothing applied");
                return self.ignore(provider, &mark, "other mode").await;
            }
        }
        if let Some(account) = &parsed.account {
            // payonce charges on its own account only (no Connect): an event of a connected
            // account is another business's, however well it is signed.
            tracing::error!(provider, event_id = %parsed.event_id, kind = %parsed.kind, account = %account,
                alarm = "webhook-mismatch", "a webhook for a connected account; nothing applied");
            return self.ignore(provider, &mark, "connected account").await;
        }
        if let Some(refund) = &parsed.refund {
            return self.process_refund(provider, &parsed, refund, &mark).await;
        }
        if parsed.refunds_changed {
            if let Some(payment_id) = parsed.payment_id.as_deref() {
                return self.refunds_due(payment_id).await;
            }
        }
        let (Some(payment_id), Some(settlement)) =
            (parsed.payment_id.as_deref(), parsed.settlement.as_ref())
        else {
            tracing::info!(provider, event_id = %parsed.event_id, kind = %parsed.kind, "webhook ignored: not an attempt of ours, or a type payonce does not apply");
            return Ok(Processed::Ignored("not applicable"));
        };
        let applied = apply_event(
            &self.store,
            payment_id,
            settlement,
            &mark,
            parsed.amount.as_ref(),
        )
        .await?;
        use crate::metrics::{count_webhook, WEBHOOK_APPLIED, WEBHOOK_DUPLICATE};
        use crate::metrics::{WEBHOOK_MISMATCH, WEBHOOK_UNCHANGED};
        match &applied {
            EventApplied::Moved(p) => {
                count_webhook(WEBHOOK_APPLIED, provider);
                tracing::info!(provider, event_id = %parsed.event_id, payment_id, status = p.status.as_str(), "webhook applied")
            }
            EventApplied::Unchanged(p) => {
                count_webhook(WEBHOOK_UNCHANGED, provider);
                tracing::info!(provider, event_id = %parsed.event_id, payment_id, status = p.status.as_str(), "webhook changes nothing")
            }
            EventApplied::Duplicate => {
                count_webhook(WEBHOOK_DUPLICATE, provider);
                tracing::info!(provider, event_id = %parsed.event_id, payment_id, "webhook already processed")
            }
            // Logged with its alarm where it was found.
            EventApplied::Rejected(_) => count_webhook(WEBHOOK_MISMATCH, provider),
        }
        if let EventApplied::Moved(payment) | EventApplied::Unchanged(payment) = &applied {
            self.ask_completion(payment, settlement).await;
        }
        Ok(Processed::Applied(applied))
    }

    /// Asks reconcile to complete `payment` now if `settlement` says the PSP approved it and
    /// waits for payonce's capture, and the payment holds the very PSP id it names. Only a hint:
    /// a request that cannot be sent is logged, and the scheduled run completes the payment.
    async fn ask_completion(&self, payment: &crate::domain::Payment, settlement: &Settlement) {
        let Some(requests) = &self.reconcile_soon else {
            return;
        };
        if !(complete::needs_completion(payment, settlement)
            && complete::completable(payment, settlement).is_some())
        {
            return;
        }
        let payment_id = payment.payment_id.as_str();
        match requests.reconcile_soon(payment_id).await {
            Ok(()) => tracing::info!(
                payment_id,
                "the PSP approved the payment: reconcile asked to complete it now"
            ),
            Err(error) => tracing::warn!(payment_id, error = %error,
                "reconcile could not be asked to complete the payment now; its scheduled run will"),
        }
    }

    /// An event refused before it reaches our books (the alarm already logged): counted as a
    /// mismatch and recorded as processed, so a redelivery is a duplicate and nothing moves.
    async fn ignore(
        &self,
        provider: &str,
        mark: &EventMark,
        why: &'static str,
    ) -> Result<Processed, ProcessError> {
        crate::metrics::count_webhook(crate::metrics::WEBHOOK_MISMATCH, provider);
        self.store
            .record_event(mark)
            .await
            .map_err(EventError::from)?;
        Ok(Processed::Ignored(why))
    }

    /// Applies a refund event exactly once (its dedup record written with its effect).
    async fn process_refund(
        &self,
        provider: &str,
        parsed: &crate::ports::PspEvent,
        refund: &crate::ports::RefundEvent,
        mark: &EventMark,
    ) -> Result<Processed, ProcessError> {
        let event_id = parsed.event_id.as_str();
        let expires_at_s =
            (self.store.now_ms() + duration_ms(self.config.record_retention)).div_euclid(1000);
        let applied = apply_refund_settlement(
            &self.store,
            &refund.refund_id,
            &refund.settlement,
            RefundRecordWrite::Mirror { expires_at_s },
            None,
            Some(mark),
            parsed.amount.as_ref(),
        )
        .await
        .map_err(EventError::from)?;
        use crate::metrics::{count_webhook, WEBHOOK_APPLIED, WEBHOOK_DUPLICATE};
        use crate::metrics::{WEBHOOK_MISMATCH, WEBHOOK_UNCHANGED};
        match &applied {
            RefundApplied::NotFound => {
                // Our id, but no such refund (yet): retry, then dead-letter.
                return Err(EventError::PaymentNotFound(refund.refund_id.clone()).into());
            }
            RefundApplied::Moved(r) => {
                count_webhook(WEBHOOK_APPLIED, provider);
                tracing::info!(provider, event_id, refund_id = %r.refund_id, status = r.status.as_str(), "refund webhook applied")
            }
            RefundApplied::Unchanged(r) => {
                count_webhook(WEBHOOK_UNCHANGED, provider);
                tracing::info!(provider, event_id, refund_id = %r.refund_id, status = r.status.as_str(), "refund webhook changes nothing")
            }
            RefundApplied::Duplicate => {
                count_webhook(WEBHOOK_DUPLICATE, provider);
                tracing::info!(provider, event_id, refund_id = %refund.refund_id, "refund webhook already processed")
            }
            RefundApplied::Rejected(_) => count_webhook(WEBHOOK_MISMATCH, provider),
        }
        Ok(Processed::Refund(applied))
    }

    /// The charge's refunds changed at the PSP: every pending refund of ours on the payment is
    /// made due, so reconcile's next run looks it up (the processor holds no PSP credentials).
    async fn refunds_due(&self, payment_id: &str) -> Result<Processed, ProcessError> {
        let Some(payment) = self
            .store
            .get_payment(payment_id)
            .await
            .map_err(EventError::from)?
        else {
            return Ok(Processed::Ignored("not applicable"));
        };
        let refunds = self
            .store
            .refunds_of(&payment)
            .await
            .map_err(EventError::from)?;
        let mut due = 0;
        for refund in refunds
            .iter()
            .filter(|r| r.status == crate::domain::RefundStatus::Pending)
        {
            self.store
                .defer_check(&refund.refund_id, 0)
                .await
                .map_err(EventError::from)?;
            due += 1;
        }
        Ok(Processed::RefundsDue(due))
    }

    /// Processes a batch; returns the message ids that failed (to be retried by the queue).
    pub async fn process_batch(&self, events: &[QueuedEvent<'_>]) -> Vec<String> {
        let mut failed = Vec::new();
        for event in events {
            let span = tracing::info_span!("webhook", message_id = event.message_id);
            if let Err(error) = self.process(event).instrument(span).await {
                tracing::warn!(error = %error, "webhook processing failed; it will be retried");
                failed.push(event.message_id.to_owned());
            }
        }
        failed
    }
}

/// How a queued body that the queue could not take as it is begins when it is not UTF-8 at
/// all: the rest is its bytes in hex. No PSP's body begins so (they are JSON objects).
pub const PARKED_PREFIX: &str = "payonce-parked:hex:";

/// `body` in a form the queue takes. UTF-8 text (a JSON event) keeps its meaning: each
/// character the queue refuses (U+FFFE, U+FFFF, a control character — which JSON allows only
/// inside strings, and there also as `\uXXXX`) is written as a JSON `\uXXXX` escape, so the
/// body grows by a few bytes and still reads as the same event. Anything else goes as
/// [`PARKED_PREFIX`] and hex.
fn parked(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) => {
            let mut escaped = String::with_capacity(text.len() + 16);
            for c in text.chars() {
                if crate::ports::queue_accepts(c.encode_utf8(&mut [0; 4])) {
                    escaped.push(c);
                } else {
                    escaped.push_str(&format!("\\u{:04x}", u32::from(c)));
                }
            }
            escaped
        }
        Err(_) => format!("{PARKED_PREFIX}{}", hex::encode(body)),
    }
}

/// The body a queued message carries: a hex-parked one read back to its bytes.
pub fn queued_body(message_body: &str) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    match message_body.strip_prefix(PARKED_PREFIX) {
        Some(encoded) => hex::decode(encoded)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| format!("a parked body that is not hex: {e}")),
        None => Ok(std::borrow::Cow::Borrowed(message_body.as_bytes())),
    }
}

/// The dedup id of a verified body that does not read as an event: `unparsed-` and 32 hex
/// digits of its SHA-256, the same for every delivery of it.
fn unparsed_event_id(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("unparsed-{}", hex::encode(&Sha256::digest(body)[..16]))
}
