//! Charge exactly once: the key, the order guard and the attempt are claimed in one
//! transaction; the PSP is called under a key derived from the attempt; completion writes the
//! payment, the order and the idempotency record together.
//!
//! The order is released without an outcome only when no call under the attempt's PSP key can
//! ever have reached the PSP: this call could not connect (or our credentials were refused) and
//! no earlier invocation may have called (the attempt was never taken over from a holder that
//! died). Anything else leaves the attempt `processing` for webhooks and reconcile.
//!
//! Request budget: a first charge is load + begin + finish (3); a replay is the load alone (1).

use super::limits::{AttemptLimiter, Refusal};
use crate::clock::duration_ms;
use crate::domain::{
    transition, CaptureMethod, FailureKind, Order, OrderPaymentState, Payment, PaymentStatus,
    PaymentView, Progress, Settlement, Transition,
};
use crate::idempotency::{
    decide, stored_request_id, Claim, Decision, Fingerprint, IdempotencyKey, IdempotencyRecord,
    Lease, LeaseToken, RecordKey, RecordState, StoreError,
};
use crate::mutations::Mutation;
use crate::ports::{
    BeginOutcome, ChargeRequest, ChargeStore, FinishedBy, Psp, PspOutcome, Read, ResumeOutcome,
    SettleOutcome, EARLIER_CALL_MAY_RUN_FOR,
};
use serde::Serialize;
#[cfg(feature = "faults")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "faults")]
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The idempotency scope of POST /payments (stable across refactors).
pub const PAY_SCOPE: &str = "payments.create";

/// Tunables of the charge path.
#[derive(Debug, Clone)]
pub struct ChargeConfig {
    /// Added to the invocation deadline to form the lease.
    pub lease_margin: Duration,
    /// Upper bound of one PSP call.
    pub psp_timeout: Duration,
    /// Time kept back from the deadline for the write after the PSP call.
    pub deadline_reserve: Duration,
    /// No takeover re-calls the PSP this long after the attempt's creation (the PSP's key
    /// retention minus a margin: Stripe 24 h − 1 h); past it only reconcile settles the attempt.
    pub takeover_window: Duration,
    /// `Retry-After` given with a 202.
    pub processing_retry_after: Duration,
    /// Transaction conflicts retried before answering 409.
    pub conflict_retries: u32,
    /// How long a customer action (3-D Secure) stays open: the `expires_at` of a
    /// `requires_action` payment's next action, past which reconcile cancels it.
    pub action_timeout: Duration,
    /// The checkout origins (`https://shop.example`): a `return_url` must be on one of them.
    /// The deployment's CORS list (`CHECKOUT_ORIGINS`); the sandbox adds its own.
    pub checkout_origins: Vec<String>,
}

impl Default for ChargeConfig {
    fn default() -> Self {
        Self {
            lease_margin: Duration::from_secs(5),
            psp_timeout: Duration::from_secs(10),
            deadline_reserve: Duration::from_secs(2),
            takeover_window: Duration::from_secs(23 * 3600),
            processing_retry_after: Duration::from_secs(2),
            conflict_retries: 3,
            action_timeout: crate::domain::ACTION_TIMEOUT,
            checkout_origins: Vec::new(),
        }
    }
}

/// Where a test can make the invocation die, as a Lambda killed at that point would (only
/// with the `faults` feature; the simulation kills invocations between any two calls instead).
#[cfg(feature = "faults")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After the claim transaction, before the PSP call.
    AfterClaim,
    /// After the PSP answered, before the completion is written.
    AfterPspCall,
    /// At a PSP that only authorizes (Square): after the authorized payment's PSP id is
    /// stored, before it is completed.
    AfterIdStored,
}

#[cfg(feature = "faults")]
#[derive(Debug, Default)]
struct Crashes {
    after_claim: AtomicBool,
    after_psp_call: AtomicBool,
    after_id_stored: AtomicBool,
}

/// A validated POST /payments body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PayRequest {
    /// The order to pay.
    pub order_id: String,
    /// The version the client saw (fixes amount and currency).
    pub order_version: i64,
    /// PSP payment method token.
    pub payment_method: String,
    /// Where the PSP sends the customer back after an action (validated by the caller to be
    /// on one of the deployment's checkout origins).
    pub return_url: Option<String>,
    /// Capture at once (the default) or authorize only.
    pub capture: CaptureMethod,
}

/// A successful answer of [`ChargeService::pay`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayAnswer {
    /// This request decided the outcome (the view's status says which).
    Fresh(PaymentView),
    /// A stored outcome, kept current by webhooks and reconcile.
    Replayed {
        /// The payment as it stands now.
        view: PaymentView,
        /// The id of the request that claimed the key, if it had one: a replayed problem's
        /// `instance`.
        request_id: Option<String>,
    },
    /// The PSP could not be reached; the order is released, retry with the same key.
    PspUnavailable {
        /// When to retry.
        retry_after: Duration,
    },
}

/// Why a payment request was refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ChargeError {
    /// The key was used for another request.
    #[error("the idempotency key was used with a different request")]
    Mismatch,
    /// Another invocation holds the key.
    #[error("a request with this idempotency key is in progress")]
    KeyInUse {
        /// Until its lease lapses.
        retry_after: Duration,
    },
    /// The order does not exist or is not the caller's.
    #[error("order not found")]
    OrderNotFound,
    /// Over the attempt limits (card testing): nothing was claimed or sent.
    #[error("too many payment attempts for this {scope}")]
    TooManyAttempts {
        /// Until the limit's window ends.
        retry_after: Duration,
        /// `user` or `order`.
        scope: &'static str,
    },
    /// The client paid a version that is no longer current.
    #[error("the order is at version {current}")]
    OrderVersionMismatch {
        /// The current version.
        current: i64,
    },
    /// The order is paid.
    #[error("the order is already paid")]
    OrderAlreadyPaid,
    /// Another attempt is processing the order.
    #[error("another payment for this order is in progress")]
    PaymentInProgress,
    /// An authorized (manual-capture) attempt holds the order until it is captured or
    /// canceled.
    #[error("the order is held by an authorized payment")]
    OrderAlreadyAuthorized,
    /// `capture: "manual"` on a PSP that cannot capture later: nothing was claimed.
    #[error("this payment provider cannot capture later")]
    CaptureNotSupported,
    /// The stored state is unusable.
    #[error(transparent)]
    Store(StoreError),
    /// A crash injected by a test.
    #[cfg(feature = "faults")]
    #[error("crash injected at {0:?}")]
    InjectedCrash(CrashPoint),
}

impl From<StoreError> for ChargeError {
    /// A conflict that outlived the store's retries, or a lease lost to another invocation,
    /// means someone else is at work on the key: 409 with `Retry-After`, never a 500.
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Conflict { .. } | StoreError::LeaseLost { .. } => Self::KeyInUse {
                retry_after: Duration::from_secs(1),
            },
            other => Self::Store(other),
        }
    }
}

/// The charge use case over a store and a PSP.
pub struct ChargeService<S, P> {
    store: S,
    psp: P,
    config: ChargeConfig,
    limiter: Option<AttemptLimiter>,
    #[cfg(feature = "faults")]
    crashes: Arc<Crashes>,
}

/// How many times one request re-reads the situation after losing a race.
const MAX_ROUNDS: u32 = 4;

impl<S: ChargeStore, P: Psp> ChargeService<S, P> {
    /// The service.
    pub fn new(store: S, psp: P, config: ChargeConfig) -> Self {
        Self {
            store,
            psp,
            config,
            limiter: None,
            #[cfg(feature = "faults")]
            crashes: Arc::default(),
        }
    }

    /// Limits new attempts per user and per order (see [`super::limits`]).
    pub fn with_attempt_limits(mut self, limiter: AttemptLimiter) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The PSP.
    pub fn psp(&self) -> &P {
        &self.psp
    }

    /// The configuration.
    pub fn config(&self) -> &ChargeConfig {
        &self.config
    }

    /// Arms a crash at `point` for the next request that reaches it (tests only).
    #[cfg(feature = "faults")]
    pub fn inject_crash(&self, point: CrashPoint) {
        match point {
            CrashPoint::AfterClaim => self.crashes.after_claim.store(true, Ordering::SeqCst),
            CrashPoint::AfterPspCall => self.crashes.after_psp_call.store(true, Ordering::SeqCst),
            CrashPoint::AfterIdStored => self.crashes.after_id_stored.store(true, Ordering::SeqCst),
        }
    }

    #[cfg(feature = "faults")]
    fn crash_at(&self, point: CrashPoint) -> Result<(), ChargeError> {
        let armed = match point {
            CrashPoint::AfterClaim => &self.crashes.after_claim,
            CrashPoint::AfterPspCall => &self.crashes.after_psp_call,
            CrashPoint::AfterIdStored => &self.crashes.after_id_stored,
        };
        if armed.swap(false, Ordering::SeqCst) {
            return Err(ChargeError::InjectedCrash(point));
        }
        Ok(())
    }

    /// The fingerprint of a payment request: what the client sent, canonically. The optional
    /// fields count only when given, so a request without them has the fingerprint it always had.
    pub fn fingerprint(request: &PayRequest) -> Fingerprint {
        let mut canonical = serde_json::json!({
            "order_id": request.order_id,
            "order_version": request.order_version,
            "payment_method": request.payment_method,
        });
        if let Some(url) = &request.return_url {
            canonical["return_url"] = url.as_str().into();
        }
        if request.capture != CaptureMethod::Automatic {
            canonical["capture"] = request.capture.as_str().into();
        }
        Fingerprint::of_value(&canonical)
    }

    /// Pays `request.order_id` for `user` at most once per key, and at most one attempt per order.
    /// `request_id` (the request's `x-request-id`) is kept with a new claim: a later replay of a
    /// stored problem names it as its `instance`.
    pub async fn pay(
        &self,
        user: &str,
        key: &IdempotencyKey,
        request: &PayRequest,
        deadline_ms: i64,
        request_id: &str,
    ) -> Result<PayAnswer, ChargeError> {
        let answer = self
            .pay_once(user, key, request, deadline_ms, request_id)
            .await;
        if let Some(metric) = pay_metric(&answer) {
            crate::metrics::count(metric);
        }
        answer
    }

    async fn pay_once(
        &self,
        user: &str,
        key: &IdempotencyKey,
        request: &PayRequest,
        deadline_ms: i64,
        request_id: &str,
    ) -> Result<PayAnswer, ChargeError> {
        if request.capture == CaptureMethod::Manual && !self.psp.captures_later() {
            return Err(ChargeError::CaptureNotSupported);
        }
        let record_key = RecordKey::new(PAY_SCOPE, user, key);
        let fingerprint = Self::fingerprint(request);
        // The first read is a recent one, at half the cost of a consistent one. It may miss the
        // last moment's writes, so only what no later write can change is answered from it: a
        // mismatch (a record's fingerprint is fixed) and a succeeded payment (final). A new
        // attempt it leads to is fenced by the claim's conditions, a takeover by its lease.
        // Anything else is answered from a consistent read, or from what a refused write
        // returned (as it is), which is as good: [`Situation`] keeps how recent each part is.
        let mut now = self
            .situation(&record_key, &request.order_id, Read::Recent)
            .await?;
        let mut conflicts = 0;
        let mut rechecked = false;
        // One round more than a consistent first read needs: the re-read of a recent one.
        for _ in 0..=MAX_ROUNDS {
            if let Some(existing) = now.record.take() {
                match decide(&existing, &fingerprint, self.store.now_ms()) {
                    Decision::Mismatch => return Err(ChargeError::Mismatch),
                    Decision::Replay => {
                        let view = stored_view(&existing)?;
                        if unsure(now.record_read) && !recent_read_answers(view.status) {
                            now = self
                                .situation(&record_key, &request.order_id, Read::Latest)
                                .await?;
                            continue;
                        }
                        return Ok(PayAnswer::Replayed {
                            view,
                            request_id: existing.request_id,
                        });
                    }
                    Decision::Wait { .. } if unsure(now.record_read) => {
                        now = self
                            .situation(&record_key, &request.order_id, Read::Latest)
                            .await?;
                        continue;
                    }
                    Decision::Wait { retry_after } => {
                        return Err(ChargeError::KeyInUse { retry_after })
                    }
                    Decision::TakeOver { seen } => {
                        match self.resume(&existing, &seen, deadline_ms).await? {
                            Resumed::Answer(answer) => return Ok(answer),
                            Resumed::Again(Some(moved)) => {
                                (now.record, now.record_read) = (Some(moved), Read::Latest);
                                continue;
                            }
                            Resumed::Again(None) => {
                                // Gone, or raced: read the key and the order afresh.
                                now = self
                                    .situation(&record_key, &request.order_id, Read::Latest)
                                    .await?;
                                continue;
                            }
                        }
                    }
                }
            }
            let order_now = match payable(now.order.as_ref(), user, request) {
                Ok(order_now) => order_now,
                // A refusal is never answered from a recent read: the order may have been
                // created, edited or released a moment ago.
                Err(_) if unsure(now.order_read) => {
                    now = self
                        .situation(&record_key, &request.order_id, Read::Latest)
                        .await?;
                    continue;
                }
                // The two reads of a load are not one snapshot: a concurrent request with this
                // very key may have claimed it and reserved the order between them. Before
                // refusing on the order's state, look at the key once more.
                Err(
                    ChargeError::PaymentInProgress
                    | ChargeError::OrderAlreadyPaid
                    | ChargeError::OrderAlreadyAuthorized,
                ) if !rechecked => {
                    rechecked = true;
                    now = self
                        .situation(&record_key, &request.order_id, Read::Latest)
                        .await?;
                    continue;
                }
                Err(ChargeError::PaymentInProgress) => {
                    // Stored `processing` also means paid once its attempt succeeded.
                    let seen = self.settled(now.order.take()).await?;
                    return Err(payable(seen.as_ref(), user, request)
                        .err()
                        .unwrap_or(ChargeError::PaymentInProgress));
                }
                Err(refusal) => return Err(refusal),
            };
            // A new attempt: counted against the limits by the claim itself.
            let counts = self.limiter.as_ref().map_or_else(Vec::new, |limiter| {
                limiter.counts(user, &request.order_id, self.store.now_ms())
            });
            let (payment, claim) = self.new_attempt(
                &record_key,
                &fingerprint,
                order_now,
                request,
                deadline_ms,
                request_id,
            );
            match self
                .store
                .begin_attempt(&claim, order_now, &payment, &counts)
                .await
            {
                Ok(BeginOutcome::Begun) => {
                    let lease = Lease {
                        token: claim.lease_token,
                        until_ms: claim.lease_until_ms,
                    };
                    #[cfg(feature = "faults")]
                    self.crash_at(CrashPoint::AfterClaim)?;
                    let answer = self.charge(payment, &lease, deadline_ms, false).await;
                    self.count_decline(user, &request.order_id, &answer).await;
                    return answer;
                }
                Ok(BeginOutcome::KeyTaken(existing)) => {
                    (now.record, now.record_read) = (Some(existing), Read::Latest)
                }
                Ok(BeginOutcome::OrderChanged(order)) => {
                    (now.order, now.order_read) = (order, Read::Latest)
                }
                Ok(BeginOutcome::OverLimit(index)) => {
                    let Refusal { retry_after, scope } = self
                        .limiter
                        .as_ref()
                        .map(|limiter| limiter.refusal(index, self.store.now_ms()))
                        .ok_or_else(|| StoreError::Corrupt {
                            key: claim.key.to_string(),
                            reason: "a counter refused an attempt that counted against none".into(),
                        })?;
                    return Err(ChargeError::TooManyAttempts { retry_after, scope });
                }
                Err(StoreError::Conflict { .. }) if conflicts < self.config.conflict_retries => {
                    conflicts += 1;
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(10..50) << conflicts))
                        .await;
                    now = self
                        .situation(&record_key, &request.order_id, Read::Latest)
                        .await?;
                }
                Err(StoreError::Conflict { .. }) => {
                    return Err(ChargeError::KeyInUse {
                        retry_after: Duration::from_secs(1),
                    })
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(ChargeError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Loads the key's record and the order, as recent as `read` asks.
    async fn situation(
        &self,
        record_key: &RecordKey,
        order_id: &str,
        read: Read,
    ) -> Result<Situation, ChargeError> {
        let (record, order) = self
            .store
            .load_for_charge(record_key, order_id, read)
            .await?;
        Ok(Situation {
            record,
            order,
            record_read: read,
            order_read: read,
        })
    }

    /// Counts a decline the PSP answered against the limits (a failure to count is logged,
    /// never the client's problem).
    async fn count_decline(
        &self,
        user: &str,
        order_id: &str,
        answer: &Result<PayAnswer, ChargeError>,
    ) {
        let Some(limiter) = &self.limiter else {
            return;
        };
        let declined = matches!(answer, Ok(PayAnswer::Fresh(view))
            if view.failure.as_ref().is_some_and(|f| f.kind == FailureKind::Declined));
        if declined {
            if let Err(error) = limiter
                .record_decline(&self.store, user, order_id, self.store.now_ms())
                .await
            {
                tracing::warn!(error = %error, "a decline could not be counted against the limits");
            }
        }
    }

    fn new_attempt(
        &self,
        record_key: &RecordKey,
        fingerprint: &Fingerprint,
        order: &Order,
        request: &PayRequest,
        deadline_ms: i64,
        request_id: &str,
    ) -> (Payment, Claim) {
        let now_ms = self.store.now_ms();
        let payment = Payment {
            payment_id: crate::domain::payment_id_for(record_key.as_str()),
            order_id: order.order_id.clone(),
            order_version: order.version,
            owner: order.owner.clone(),
            amount: order.amount,
            currency: order.currency,
            payment_method: request.payment_method.clone(),
            provider: self.psp.name().to_owned(),
            provider_payment_id: None,
            status: PaymentStatus::Processing,
            failure: None,
            capture: request.capture,
            return_url: request.return_url.clone(),
            progress: Progress::default(),
            operation: None,
            operation_count: 0,
            idempotency_pk: record_key.as_str().to_owned(),
            psp_maybe_reached: false,
            amount_refunded: 0,
            refund_pending: 0,
            refund_count: 0,
            duplicate_refund: false,
            refund_required: false,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            // Reconcile leaves it to its handler and webhooks for its minimum age past this.
            check_at_ms: now_ms,
        };
        let claim = Claim {
            key: record_key.clone(),
            fingerprint: fingerprint.clone(),
            attempt_id: payment.payment_id.clone(),
            lease_token: LeaseToken::generate(),
            lease_until_ms: deadline_ms + duration_ms(self.config.lease_margin),
            expires_at_s: crate::domain::CHARGE_RECORD_NEVER_EXPIRES_S,
            request_id: stored_request_id(request_id),
        };
        (payment, claim)
    }

    /// Takes a lapsed attempt over: the same payment id, hence the same PSP key.
    async fn resume(
        &self,
        record: &IdempotencyRecord,
        seen: &LeaseToken,
        deadline_ms: i64,
    ) -> Result<Resumed, ChargeError> {
        let mut payment = self
            .store
            .get_payment(&record.attempt_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                key: record.key.to_string(),
                reason: format!("payment {} of the record is missing", record.attempt_id),
            })?;
        // A re-send under the key is safe only while the PSP keeps keys (PayPal: 6 hours).
        let window = self.config.takeover_window.min(
            self.psp
                .charge_keys_kept()
                .saturating_sub(Duration::from_secs(3600)),
        );
        let too_late = self.store.now_ms() - payment.created_at_ms > duration_ms(window);
        if payment.status != PaymentStatus::Processing || too_late {
            // Settled meanwhile (webhook, reconcile), or too old to re-send safely: record the
            // state as it is under the lapsed lease; only reconcile moves it further.
            let written = self
                .store
                .finish_attempt(&payment, &Transition::Unchanged, seen, FinishedBy::Charge)
                .await;
            return match written {
                Ok(SettleOutcome::Settled(now)) => Ok(Resumed::Answer(PayAnswer::Replayed {
                    view: now.view(),
                    request_id: record.request_id.clone(),
                })),
                Ok(SettleOutcome::Moved | SettleOutcome::Duplicate)
                | Err(StoreError::LeaseLost { .. }) => Ok(Resumed::Again(None)),
                Err(error) => Err(error.into()),
            };
        }
        // A lease that lapsed (rather than one given back after a call that never connected)
        // belonged to an invocation that may have called the PSP before it died.
        let lapsed_at_ms = record
            .lease()
            .filter(|lease| !lease.was_released())
            .map(|lease| lease.until_ms);
        payment.psp_maybe_reached |= lapsed_at_ms.is_some();
        // One that lapsed lately may have died mid-call, its request still running at the PSP.
        let earlier_may_run = lapsed_at_ms.is_some_and(|at_ms| {
            self.store.now_ms() - at_ms < duration_ms(EARLIER_CALL_MAY_RUN_FOR)
        });
        let lease = Lease {
            token: LeaseToken::generate(),
            until_ms: deadline_ms + duration_ms(self.config.lease_margin),
        };
        let resumed = match self
            .store
            .resume_attempt(&record.key, seen, &lease, &payment)
            .await
        {
            // Raced past the store's retries: read the key again and decide on what it says.
            Err(StoreError::Conflict { .. }) => return Ok(Resumed::Again(None)),
            other => other?,
        };
        match resumed {
            ResumeOutcome::Resumed => {
                tracing::info!(payment_id = %payment.payment_id, "took over a lapsed payment attempt");
                self.charge(payment, &lease, deadline_ms, earlier_may_run)
                    .await
                    .map(Resumed::Answer)
            }
            ResumeOutcome::KeyMoved(now) => Ok(Resumed::Again(now)),
            ResumeOutcome::LeaseHeld { .. } => Err(ChargeError::KeyInUse {
                retry_after: Duration::from_secs(1),
            }),
            ResumeOutcome::OrderChanged(order) => Err(order_conflict(
                self.settled(order).await?.as_ref(),
                &payment,
            )),
        }
    }

    /// Calls the PSP for `payment` under `lease` and records what it said; `earlier_may_run`
    /// when a lapsed holder's call under the same key may still be running at the PSP.
    async fn charge(
        &self,
        payment: Payment,
        lease: &Lease,
        deadline_ms: i64,
        earlier_may_run: bool,
    ) -> Result<PayAnswer, ChargeError> {
        let timeout = self.psp_call_timeout(deadline_ms);
        let outcome = if timeout.is_zero() {
            PspOutcome::NotSent {
                reason: "no time left before the deadline".into(),
            }
        } else {
            let started = Instant::now();
            let outcome = self
                .psp
                .create_charge(
                    &ChargeRequest {
                        earlier_may_run,
                        ..ChargeRequest::for_payment(&payment)
                    },
                    timeout,
                )
                .await;
            crate::metrics::psp_call(self.psp.name(), &outcome, started.elapsed());
            outcome
        };
        #[cfg(feature = "faults")]
        self.crash_at(CrashPoint::AfterPspCall)?;
        let settlement = match outcome {
            outcome @ (PspOutcome::Approved { .. }
            | PspOutcome::ActionRequired { .. }
            | PspOutcome::Authorized { .. }
            | PspOutcome::Pending { .. }
            | PspOutcome::AuthenticationRequired { .. }
            | PspOutcome::Declined { .. }) => {
                let action_expires_at_ms =
                    self.store.now_ms() + duration_ms(self.config.action_timeout);
                super::settle::settlement_of_outcome(outcome, action_expires_at_ms)
            }
            PspOutcome::Rejected { message } => {
                tracing::info!(payment_id = %payment.payment_id, psp_message = %crate::logging::masked(&message), "the PSP rejected the payment method");
                Some(Settlement::Rejected)
            }
            PspOutcome::Refused { code } => {
                tracing::warn!(payment_id = %payment.payment_id, %code, "the PSP refused the request");
                Some(Settlement::Refused)
            }
            PspOutcome::Unknown { reason } => {
                tracing::warn!(payment_id = %payment.payment_id, %reason, "PSP outcome unknown; the attempt stays processing");
                None
            }
            PspOutcome::NotSent { reason }
                if payment.psp_maybe_reached
                    && !crate::mutations::active(Mutation::ReleaseOnAnyNotSent) =>
            {
                tracing::warn!(payment_id = %payment.payment_id, %reason,
                    "the PSP was not reached by this call, but an earlier one may have been; the attempt stays processing");
                None
            }
            PspOutcome::NotSent { reason } => {
                tracing::warn!(payment_id = %payment.payment_id, %reason, "the PSP was not reached; releasing the order");
                let mut conflicts = 0;
                loop {
                    match self.store.release_unsent(&payment, &lease.token).await {
                        Ok(()) => {
                            return Ok(PayAnswer::PspUnavailable {
                                retry_after: Duration::from_secs(1),
                            })
                        }
                        Err(StoreError::Conflict { .. }) if conflicts < MAX_ROUNDS => {
                            conflicts += 1;
                        }
                        Err(error) => return Err(error.into()),
                    }
                }
            }
        };
        // A PSP that only authorized a payment it was asked to capture (Square): its id is
        // stored, then it is completed; without an answer it stays processing for reconcile.
        let (mut current, settlement) = match settlement {
            Some(authorized) if super::complete::needs_completion(&payment, &authorized) => {
                let stored =
                    super::complete::store_authorized(&self.store, payment, &authorized).await?;
                #[cfg(feature = "faults")]
                self.crash_at(CrashPoint::AfterIdStored)?;
                let timeout = self.psp_call_timeout(deadline_ms);
                let completed = match super::complete::completable(&stored, &authorized) {
                    Some(provider_payment_id) if !timeout.is_zero() => {
                        super::complete::complete(&self.psp, &stored, provider_payment_id, timeout)
                            .await
                    }
                    _ => None,
                };
                (stored, completed.or(Some(authorized)))
            }
            other => (payment, other),
        };
        for _ in 0..MAX_ROUNDS {
            let step = settlement
                .as_ref()
                .map_or(Transition::Unchanged, |s| transition(&current, s));
            let written = self
                .store
                .finish_attempt(&current, &step, &lease.token, FinishedBy::Charge)
                .await;
            match written {
                Ok(SettleOutcome::Settled(now)) => return Ok(PayAnswer::Fresh(now.view())),
                // A webhook or reconcile settled it first (or a transaction raced ours past the
                // store's own retries): decide again on what is stored now.
                Ok(SettleOutcome::Moved | SettleOutcome::Duplicate)
                | Err(StoreError::Conflict { .. }) => {
                    current = self
                        .store
                        .get_payment(&current.payment_id)
                        .await?
                        .ok_or_else(|| StoreError::Corrupt {
                            key: current.payment_id.clone(),
                            reason: "the payment disappeared".into(),
                        })?;
                }
                Err(StoreError::LeaseLost { .. }) => {
                    // Another request took the key over: it answers now. The PSP's success
                    // this one heard still moves the payment, so nothing learned is lost.
                    if let Some(settlement) = &settlement {
                        super::settle::keep_money_word(
                            &self.store,
                            &current.payment_id,
                            settlement,
                        )
                        .await?;
                    }
                    return Err(ChargeError::KeyInUse {
                        retry_after: Duration::from_secs(1),
                    });
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(ChargeError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }

    /// How long the next PSP call may take: the PSP timeout, within what is left before
    /// `deadline_ms` less the reserve for the writes after it (zero: no time for a call).
    fn psp_call_timeout(&self, deadline_ms: i64) -> Duration {
        let left_ms = deadline_ms - self.store.now_ms() - duration_ms(self.config.deadline_reserve);
        self.config
            .psp_timeout
            .min(Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)))
    }

    /// `order` as its readers see it ([`Order::settled_by`]): one more read, only for an order
    /// stored `processing`.
    async fn settled(&self, order: Option<Order>) -> Result<Option<Order>, ChargeError> {
        let Some(order) = order else {
            return Ok(None);
        };
        let holder = match order.holder_to_read() {
            Some(payment_id) => self.store.get_payment(payment_id).await?,
            None => None,
        };
        Ok(Some(order.settled_by(holder.as_ref())))
    }

    /// A payment of `user`, or `None` (404) if it does not exist or is someone else's.
    pub async fn get_payment(
        &self,
        user: &str,
        payment_id: &str,
    ) -> Result<Option<PaymentView>, ChargeError> {
        Ok(self
            .store
            .get_payment(payment_id)
            .await?
            .filter(|p| p.owner == user)
            .map(|p| p.view()))
    }
}

enum Resumed {
    Answer(PayAnswer),
    /// The record moved under us: decide again on it (or on nothing, if it is gone).
    Again(Option<IdempotencyRecord>),
}

/// What a charge decides on: the key's record and the order, each with how recent it is (a
/// part that a refused write returned is as good as a consistent read).
struct Situation {
    record: Option<IdempotencyRecord>,
    order: Option<Order>,
    record_read: Read,
    order_read: Read,
}

/// Whether an answer taken from a load made with `read` must be read again, consistently,
/// before it is given (a recent read may miss the last moment's writes).
fn unsure(read: Read) -> bool {
    read == Read::Recent && !crate::mutations::active(Mutation::TrustRecentReads)
}

/// Whether a replay may answer `status` from a recent read. `succeeded` is the top of the
/// order, which nothing moves; `processing` and `requires_action` answer 202 ("not final, ask
/// again"), which stays true of the moment the read saw, whatever came since: the client asks
/// again and meets the move. Every other status is final to the client (`authorized` included,
/// for the key manager), and a final answer is only given from a consistent read.
fn recent_read_answers(status: PaymentStatus) -> bool {
    matches!(
        status,
        PaymentStatus::Succeeded | PaymentStatus::Processing | PaymentStatus::RequiresAction
    )
}

/// The order, if `user` may start paying `request.order_version` of it.
fn payable<'a>(
    order: Option<&'a Order>,
    user: &str,
    request: &PayRequest,
) -> Result<&'a Order, ChargeError> {
    let order = order
        .filter(|o| o.owner == user)
        .ok_or(ChargeError::OrderNotFound)?;
    match order.payment_state {
        OrderPaymentState::Paid => Err(ChargeError::OrderAlreadyPaid),
        OrderPaymentState::Authorized => Err(ChargeError::OrderAlreadyAuthorized),
        OrderPaymentState::Processing => Err(ChargeError::PaymentInProgress),
        OrderPaymentState::Unpaid if order.version != request.order_version => {
            Err(ChargeError::OrderVersionMismatch {
                current: order.version,
            })
        }
        OrderPaymentState::Unpaid => Ok(order),
    }
}

/// Why an order could not be reserved again for `payment`.
fn order_conflict(order: Option<&Order>, payment: &Payment) -> ChargeError {
    match order {
        None => ChargeError::OrderNotFound,
        Some(o) if o.payment_state == OrderPaymentState::Paid => ChargeError::OrderAlreadyPaid,
        Some(o) if o.payment_state == OrderPaymentState::Authorized => {
            ChargeError::OrderAlreadyAuthorized
        }
        Some(o) if o.payment_state == OrderPaymentState::Processing => {
            ChargeError::PaymentInProgress
        }
        Some(o) => ChargeError::OrderVersionMismatch {
            current: o.version.max(payment.order_version),
        },
    }
}

/// The metric counting an answer of [`ChargeService::pay`] (see [`crate::metrics`]).
fn pay_metric(answer: &Result<PayAnswer, ChargeError>) -> Option<&'static str> {
    use crate::metrics::*;
    Some(match answer {
        Ok(PayAnswer::Fresh(view)) => match view.status {
            PaymentStatus::Succeeded | PaymentStatus::Authorized => PAYMENT_SUCCEEDED,
            PaymentStatus::Failed | PaymentStatus::Canceled => PAYMENT_DECLINED,
            PaymentStatus::Processing | PaymentStatus::RequiresAction => PAYMENT_PENDING,
        },
        Ok(PayAnswer::Replayed { .. }) => PAYMENT_REPLAYED,
        Ok(PayAnswer::PspUnavailable { .. }) => PAYMENT_PSP_UNAVAILABLE,
        Err(ChargeError::KeyInUse { .. }) => PAYMENT_IN_USE,
        Err(ChargeError::TooManyAttempts { .. }) => PAYMENT_TOO_MANY_ATTEMPTS,
        Err(ChargeError::Store(_)) => PAYMENT_ERROR,
        Err(
            ChargeError::Mismatch
            | ChargeError::OrderNotFound
            | ChargeError::OrderVersionMismatch { .. }
            | ChargeError::OrderAlreadyPaid
            | ChargeError::PaymentInProgress
            | ChargeError::OrderAlreadyAuthorized
            | ChargeError::CaptureNotSupported,
        ) => PAYMENT_REFUSED,
        #[cfg(feature = "faults")]
        Err(ChargeError::InjectedCrash(_)) => return None,
    })
}

/// The payment view a completed record answers with (the payment as it is when read).
fn stored_view(record: &IdempotencyRecord) -> Result<PaymentView, ChargeError> {
    match &record.state {
        RecordState::Completed { result } => serde_json::from_str(result).map_err(|e| {
            ChargeError::Store(StoreError::Corrupt {
                key: record.key.to_string(),
                reason: format!("stored payment view: {e}"),
            })
        }),
        RecordState::InProgress { .. } => Err(ChargeError::KeyInUse {
            retry_after: Duration::from_secs(1),
        }),
    }
}
