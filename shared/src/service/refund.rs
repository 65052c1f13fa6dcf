//! Refund exactly once: the key, the refund's number and its amount are claimed in one
//! transaction (so refunds with different keys never add up past the captured amount); the PSP
//! is called under `payonce-refund-<payment_id>-<n>`; completion moves the refund, the payment's
//! amounts and the idempotency record together.
//!
//! A refund is given up (canceled, its key freed) without an outcome only when no call under
//! its PSP key can ever have reached the PSP, the rule charges follow. Anything else stays
//! `pending` for webhooks and reconcile.
//!
//! Request budget: a first refund is load + begin + finish (3); a replay is the load alone (1).

use crate::clock::duration_ms;
use crate::domain::{
    refund_transition, refundable, Payment, PaymentStatus, Refund, RefundReason, RefundSettlement,
    RefundStatus, RefundTransition, RefundView,
};
use crate::idempotency::{
    decide, stored_request_id, Claim, Decision, Fingerprint, IdempotencyKey, IdempotencyRecord,
    Lease, LeaseToken, RecordKey, RecordState, StoreError,
};
use crate::mutations::Mutation;
use crate::ports::{
    BeginRefundOutcome, CheckedAmount, EventMark, Psp, RefundOutcome, RefundRecordWrite,
    RefundRequest, RefundSettleOutcome, RefundStore, ResumeOutcome, SenderFence,
};
use std::time::Duration;

/// The idempotency scope of POST /payments/{id}/refunds (stable across refactors).
pub const REFUND_SCOPE: &str = "payments.refund";

/// The OAuth scope a token needs to refund (and to read any user's payment).
pub const REFUND_OAUTH_SCOPE: &str = "payments:refund";

/// How many times one request re-reads the payment after losing a race to another refund
/// (each round, one of the racing refunds wins, so this bounds the refunds racing at once).
const MAX_ROUNDS: u32 = 40;

/// Tunables of the refund path.
#[derive(Debug, Clone)]
pub struct RefundConfig {
    /// Idempotency record retention after the last outcome (≤ the PSP's key retention).
    pub retention: Duration,
    /// Added to the invocation deadline to form the lease.
    pub lease_margin: Duration,
    /// Upper bound of one PSP call.
    pub psp_timeout: Duration,
    /// Time kept back from the deadline for the write after the PSP call.
    pub deadline_reserve: Duration,
    /// No takeover re-sends a refund this long after its creation (the PSP's key retention
    /// minus a margin); past it only reconcile settles it.
    pub takeover_window: Duration,
    /// `Retry-After` given with a 202.
    pub pending_retry_after: Duration,
}

impl Default for RefundConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(24 * 3600),
            lease_margin: Duration::from_secs(5),
            psp_timeout: Duration::from_secs(10),
            deadline_reserve: Duration::from_secs(2),
            takeover_window: Duration::from_secs(23 * 3600),
            pending_retry_after: Duration::from_secs(2),
        }
    }
}

/// A validated refund request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundCommand {
    /// The payment to refund.
    pub payment_id: String,
    /// Minor units; `None`: everything that is neither refunded nor pending.
    pub amount: Option<i64>,
    /// Why, if given.
    pub reason: Option<RefundReason>,
}

/// A successful answer of [`RefundService::refund`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundAnswer {
    /// This request decided the outcome (the view's status says which).
    Fresh(RefundView),
    /// A stored outcome, kept current by webhooks and reconcile.
    Replayed {
        /// The refund as it stands now.
        view: RefundView,
        /// The id of the request that claimed the key, if it had one: a replayed problem's
        /// `instance`.
        request_id: Option<String>,
    },
    /// The PSP could not be reached; nothing was refunded and the key is free: retry with it.
    PspUnavailable {
        /// When to retry.
        retry_after: Duration,
    },
}

/// Why a refund request was refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    /// The key was used for another request.
    #[error("the idempotency key was used with a different request")]
    Mismatch,
    /// Another invocation holds the key.
    #[error("a request with this idempotency key is in progress")]
    KeyInUse {
        /// Until its lease lapses.
        retry_after: Duration,
    },
    /// No such payment.
    #[error("payment not found")]
    PaymentNotFound,
    /// The payment did not succeed (processing or failed).
    #[error("the payment is {0}, not succeeded")]
    NotRefundable(&'static str),
    /// The amount is more than what is neither refunded nor pending.
    #[error("the refund exceeds the {remaining} that remain refundable")]
    ExceedsRemaining {
        /// What remains refundable.
        remaining: i64,
    },
    /// The PSP offers no refund payonce can make (its refunds need an API it does not hold).
    #[error("the payment provider {0} cannot refund from payonce")]
    NotSupported(String),
    /// The stored state is unusable.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for RefundError {
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

/// The refund use case over a store and a PSP.
pub struct RefundService<S, P> {
    store: S,
    psp: P,
    config: RefundConfig,
}

enum Resumed {
    Answer(RefundAnswer),
    Again(Option<IdempotencyRecord>),
}

impl<S: RefundStore, P: Psp> RefundService<S, P> {
    /// The service.
    pub fn new(store: S, psp: P, config: RefundConfig) -> Self {
        Self { store, psp, config }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &RefundConfig {
        &self.config
    }

    /// The fingerprint of a refund request: (payment_id, amount as sent or null, reason or null).
    pub fn fingerprint(command: &RefundCommand) -> Fingerprint {
        Fingerprint::of_value(&serde_json::json!({
            "payment_id": command.payment_id,
            "amount": command.amount,
            "reason": command.reason.map(RefundReason::as_str),
        }))
    }

    fn expires_at_s(&self) -> i64 {
        (self.store.refund_now_ms() + duration_ms(self.config.retention)).div_euclid(1000)
    }

    /// Refunds `command.payment_id` at most once per key, never past what was captured.
    /// `request_id` (the request's `x-request-id`) is kept with a new claim: a later replay of a
    /// stored problem names it as its `instance`.
    pub async fn refund(
        &self,
        user: &str,
        key: &IdempotencyKey,
        command: &RefundCommand,
        deadline_ms: i64,
        request_id: &str,
    ) -> Result<RefundAnswer, RefundError> {
        if !self.psp.supports_refunds() {
            // Answered before anything is claimed or sent: nothing pretends to refund.
            return Err(RefundError::NotSupported(self.psp.name().to_owned()));
        }
        let record_key = RecordKey::new(REFUND_SCOPE, user, key);
        let fingerprint = Self::fingerprint(command);
        let (mut record, mut payment) = self
            .store
            .load_for_refund(&record_key, &command.payment_id)
            .await?;
        let mut key_rechecked = false;
        for round in 0..MAX_ROUNDS {
            if let Some(existing) = record.take() {
                match decide(&existing, &fingerprint, self.store.refund_now_ms()) {
                    Decision::Mismatch => return Err(RefundError::Mismatch),
                    Decision::Replay => {
                        return Ok(RefundAnswer::Replayed {
                            view: stored_view(&existing)?,
                            request_id: existing.request_id,
                        })
                    }
                    Decision::Wait { retry_after } => {
                        return Err(RefundError::KeyInUse { retry_after })
                    }
                    Decision::TakeOver { seen } => {
                        match self
                            .resume(&existing, &seen, payment.as_ref(), deadline_ms)
                            .await?
                        {
                            Resumed::Answer(answer) => return Ok(answer),
                            Resumed::Again(Some(now)) => {
                                record = Some(now);
                                continue;
                            }
                            Resumed::Again(None) => {
                                (record, payment) = self
                                    .store
                                    .load_for_refund(&record_key, &command.payment_id)
                                    .await?;
                                continue;
                            }
                        }
                    }
                }
            }
            let read = payment.as_ref().ok_or(RefundError::PaymentNotFound)?;
            if read.status != PaymentStatus::Succeeded {
                return Err(RefundError::NotRefundable(read.status.as_str()));
            }
            let remaining = refundable(read);
            let amount = command.amount.unwrap_or(remaining);
            if remaining == 0 || amount > remaining {
                if !key_rechecked {
                    // The load reads the record and the payment one after the other, not as of
                    // one instant: a request with this very key may have claimed its refund (and
                    // taken the room) between the two reads. Read again before refusing, so a
                    // duplicate is answered as one (in use, or a replay).
                    key_rechecked = true;
                    (record, payment) = self
                        .store
                        .load_for_refund(&record_key, &command.payment_id)
                        .await?;
                    continue;
                }
                return Err(RefundError::ExceedsRemaining { remaining });
            }
            let now_ms = self.store.refund_now_ms();
            // The request that claims the key sends the refund: it holds the refund's sender
            // lease, the same as the record's.
            let lease = Lease {
                token: LeaseToken::generate(),
                until_ms: deadline_ms + duration_ms(self.config.lease_margin),
            };
            let refund = Refund::new_pending(
                read,
                &(read.refund_count + 1).to_string(),
                amount,
                command.reason,
                Some(record_key.as_str().to_owned()),
                Some((&lease).into()),
                now_ms,
            );
            let claim = Claim {
                key: record_key.clone(),
                fingerprint: fingerprint.clone(),
                attempt_id: refund.refund_id.clone(),
                lease_token: lease.token.clone(),
                lease_until_ms: lease.until_ms,
                expires_at_s: self.expires_at_s(),
                request_id: stored_request_id(request_id),
            };
            match self.store.begin_refund(&claim, read, &refund).await {
                Ok(BeginRefundOutcome::Begun) => {
                    return self.send(refund, read, &lease, deadline_ms).await;
                }
                Ok(BeginRefundOutcome::KeyTaken(existing)) => record = Some(existing),
                Ok(BeginRefundOutcome::PaymentChanged(now)) => {
                    // Another refund (or a settlement) moved the payment's amounts: decide again
                    // on them, after a short jittered pause so racing refunds spread out.
                    payment = now.map(|now| *now);
                    pause(round).await;
                }
                Err(StoreError::Conflict { .. }) => {
                    pause(round).await;
                    (record, payment) = self
                        .store
                        .load_for_refund(&record_key, &command.payment_id)
                        .await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(RefundError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Takes a lapsed refund over: the same refund, hence the same PSP key.
    async fn resume(
        &self,
        record: &IdempotencyRecord,
        seen: &LeaseToken,
        payment: Option<&Payment>,
        deadline_ms: i64,
    ) -> Result<Resumed, RefundError> {
        let mut refund = self
            .store
            .get_refund(&record.attempt_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                key: record.key.to_string(),
                reason: format!("refund {} of the record is missing", record.attempt_id),
            })?;
        let too_late = self.store.refund_now_ms() - refund.created_at_ms
            > duration_ms(self.config.takeover_window);
        if refund.status != RefundStatus::Pending || too_late {
            // Settled meanwhile, or too old to re-send: record it as it is; reconcile moves on.
            return self.complete_as_is(&refund, seen, record).await;
        }
        // The holder of a lapsed lease may have called the PSP before it died (a sender's lease
        // goes back only with a known outcome, and a refund that never reached the PSP is
        // canceled instead).
        refund.psp_maybe_reached = true;
        let lease = Lease {
            token: LeaseToken::generate(),
            until_ms: deadline_ms + duration_ms(self.config.lease_margin),
        };
        let resumed = match self
            .store
            .resume_refund(&record.key, seen, &lease, &refund)
            .await
        {
            Err(StoreError::Conflict { .. }) => return Ok(Resumed::Again(None)),
            other => other?,
        };
        match resumed {
            ResumeOutcome::Resumed => {
                tracing::info!(refund_id = %refund.refund_id, "took over a lapsed refund");
                let payment = payment.ok_or_else(|| StoreError::Corrupt {
                    key: refund.refund_id.clone(),
                    reason: "the refunded payment is missing".into(),
                })?;
                // Read again under the lease now held: reconcile may have stored what the PSP
                // named it since it was read (a PSP that keys no refund by our id must never
                // send a refund it named again), or a webhook settled it.
                let refund = match self.store.get_refund(&refund.refund_id).await? {
                    Some(now) if now.status == RefundStatus::Pending => now,
                    // Settled meanwhile: the record is completed under the lease just taken
                    // (left in progress, it would answer 409 until that lease lapsed).
                    Some(now) => return self.complete_as_is(&now, &lease.token, record).await,
                    None => return Ok(Resumed::Again(None)),
                };
                self.send(refund, payment, &lease, deadline_ms)
                    .await
                    .map(Resumed::Answer)
            }
            ResumeOutcome::KeyMoved(now) => Ok(Resumed::Again(now)),
            ResumeOutcome::OrderChanged(_) => Ok(Resumed::Again(None)),
            // Reconcile is sending it: wait for its word.
            ResumeOutcome::LeaseHeld { until_ms } => Err(RefundError::KeyInUse {
                retry_after: retry_after_ms(until_ms - self.store.refund_now_ms()),
            }),
        }
    }

    /// Completes `record`, held under `lease`, with `refund` as it is stored (settled, or too
    /// old to send again): the client is answered what it became.
    async fn complete_as_is(
        &self,
        refund: &Refund,
        lease: &LeaseToken,
        record: &IdempotencyRecord,
    ) -> Result<Resumed, RefundError> {
        let write = RefundRecordWrite::Complete {
            lease,
            expires_at_s: self.expires_at_s(),
        };
        match self
            .store
            .write_refund(refund, &RefundTransition::Unchanged, write, None, None)
            .await
        {
            Ok(RefundSettleOutcome::Settled(now)) => Ok(Resumed::Answer(RefundAnswer::Replayed {
                view: now.view(),
                request_id: record.request_id.clone(),
            })),
            Ok(RefundSettleOutcome::Moved | RefundSettleOutcome::Duplicate)
            | Err(StoreError::LeaseLost { .. }) => Ok(Resumed::Again(None)),
            Err(error) => Err(error.into()),
        }
    }

    /// Calls the PSP for `refund` under `lease` and records what it said.
    async fn send(
        &self,
        refund: Refund,
        payment: &Payment,
        lease: &Lease,
        deadline_ms: i64,
    ) -> Result<RefundAnswer, RefundError> {
        let left_ms =
            deadline_ms - self.store.refund_now_ms() - duration_ms(self.config.deadline_reserve);
        let timeout = self
            .config
            .psp_timeout
            .min(Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)));
        let outcome = if timeout.is_zero() {
            RefundOutcome::NotSent {
                reason: "no time left before the deadline".into(),
            }
        } else {
            match provider_charge(payment) {
                Ok(charge) => {
                    let request =
                        RefundRequest::for_refund(&refund, &charge, payment.amount_captured());
                    let siblings = StoredSiblings::of(&self.store, &refund);
                    self.psp
                        .create_refund_among(&request, &siblings, timeout)
                        .await
                }
                Err(error) => RefundOutcome::NotSent {
                    reason: format!(
                        "the PSP request could not be built, so nothing was sent: {error}"
                    ),
                },
            }
        };
        // Only a known answer gives the sender lease back: after an unknown one the request may
        // still be running at the PSP, and the lease, kept until it lapses, keeps every other
        // sender away from it meanwhile.
        let mut in_flight = false;
        let settlement = match outcome {
            RefundOutcome::Answered(settlement) => Some(settlement),
            RefundOutcome::Unknown { reason } => {
                tracing::warn!(refund_id = %refund.refund_id, %reason, "refund outcome unknown; it stays pending");
                in_flight = true;
                None
            }
            RefundOutcome::NotSent { reason }
                if refund.psp_maybe_reached
                    && !crate::mutations::active(Mutation::CancelRefundOnAnyNotSent) =>
            {
                tracing::warn!(refund_id = %refund.refund_id, %reason,
                    "the PSP was not reached by this call, but an earlier one may have been; the refund stays pending");
                None
            }
            RefundOutcome::NotSent { reason } => {
                tracing::warn!(refund_id = %refund.refund_id, %reason, "the PSP was not reached; canceling the refund");
                self.store
                    .cancel_unsent_refund(&refund, &lease.token)
                    .await?;
                return Ok(RefundAnswer::PspUnavailable {
                    retry_after: Duration::from_secs(1),
                });
            }
        };
        let write = RefundRecordWrite::Complete {
            lease: &lease.token,
            expires_at_s: self.expires_at_s(),
        };
        let mut current = refund;
        for _ in 0..MAX_ROUNDS {
            let step = settlement
                .as_ref()
                .map_or(RefundTransition::Unchanged, |s| {
                    refund_transition(&current, s)
                });
            let fence = if in_flight {
                SenderFence::in_flight(&lease.token)
            } else {
                SenderFence::done(&lease.token)
            };
            match self
                .store
                .write_refund(&current, &step, write, Some(fence), None)
                .await
            {
                Ok(RefundSettleOutcome::Settled(now)) => {
                    log_late_failure(&current, &now);
                    return Ok(RefundAnswer::Fresh(now.view()));
                }
                // A webhook or reconcile moved it first: decide again on what is stored now.
                Ok(RefundSettleOutcome::Moved | RefundSettleOutcome::Duplicate)
                | Err(StoreError::Conflict { .. }) => {
                    current = self
                        .store
                        .get_refund(&current.refund_id)
                        .await?
                        .ok_or_else(|| StoreError::Corrupt {
                            key: current.refund_id.clone(),
                            reason: "the refund disappeared".into(),
                        })?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(RefundError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }
}

/// A refund's siblings as stored when a PSP asks (a consistent read of the payment, then its
/// refunds): read after the PSP's own list, so that a sibling it lists is seen.
pub(crate) struct StoredSiblings<'a, S> {
    store: &'a S,
    payment_id: String,
    refund_id: String,
}

impl<'a, S: RefundStore> StoredSiblings<'a, S> {
    /// The siblings of `refund` in `store`.
    pub(crate) fn of(store: &'a S, refund: &Refund) -> Self {
        Self {
            store,
            payment_id: refund.payment_id.clone(),
            refund_id: refund.refund_id.clone(),
        }
    }
}

#[async_trait::async_trait]
impl<S: RefundStore> crate::ports::SiblingSource for StoredSiblings<'_, S> {
    async fn siblings(&self) -> Result<crate::ports::SiblingRefunds, String> {
        let payment = self
            .store
            .refunded_payment(&self.payment_id)
            .await
            .map_err(|error| error.to_string())?
            .ok_or_else(|| format!("payment {} is missing", self.payment_id))?;
        let refunds = self
            .store
            .refunds_of(&payment)
            .await
            .map_err(|error| error.to_string())?;
        Ok(crate::ports::SiblingRefunds::of(&self.refund_id, &refunds))
    }
}

/// A refund that had succeeded and then failed at the PSP: the money is back with the shop,
/// which must pay the customer another way; an alarm.
fn log_late_failure(before: &Refund, after: &Refund) {
    if before.status == RefundStatus::Succeeded && after.status == RefundStatus::Failed {
        tracing::error!(refund_id = %after.refund_id, payment_id = %after.payment_id, alarm = "refund-failed-late",
            "a refund that had succeeded failed at the PSP; its amount is refundable again");
    }
}

/// The PSP's id of the charge a succeeded payment holds.
fn provider_charge(payment: &Payment) -> Result<String, StoreError> {
    payment
        .provider_payment_id
        .clone()
        .ok_or_else(|| StoreError::Corrupt {
            key: payment.payment_id.clone(),
            reason: "a succeeded payment without the PSP's id".into(),
        })
}

/// A `Retry-After` for a lease that lapses in `left_ms` (at least a second).
fn retry_after_ms(left_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)).max(Duration::from_secs(1))
}

async fn pause(round: u32) {
    let ceiling = 10 + 5 * u64::from(round.min(10));
    tokio::time::sleep(Duration::from_millis(fastrand::u64(2..ceiling))).await;
}

/// The refund view mirrored on a completed record.
fn stored_view(record: &IdempotencyRecord) -> Result<RefundView, RefundError> {
    match &record.state {
        RecordState::Completed { result } => serde_json::from_str(result).map_err(|e| {
            RefundError::Store(StoreError::Corrupt {
                key: record.key.to_string(),
                reason: format!("stored refund view: {e}"),
            })
        }),
        RecordState::InProgress { .. } => Err(RefundError::KeyInUse {
            retry_after: Duration::from_secs(1),
        }),
    }
}

/// The settlement a PSP's answer to a refund create implies, if it is final or names the
/// PSP's refund (unknown and not-sent imply none).
pub fn refund_settlement_of(outcome: RefundOutcome) -> Option<RefundSettlement> {
    match outcome {
        RefundOutcome::Answered(settlement) => Some(settlement),
        RefundOutcome::NotSent { .. } | RefundOutcome::Unknown { .. } => None,
    }
}

/// What applying a refund settlement came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundApplied {
    /// The refund moved (to the state returned).
    Moved(Box<Refund>),
    /// Nothing to change (already there, or it would move backwards); a webhook's event is
    /// recorded as seen.
    Unchanged(Box<Refund>),
    /// The webhook event was processed before; nothing written.
    Duplicate,
    /// No such refund.
    NotFound,
    /// The event's amount or currency is not the refund's: nothing applied, the event recorded
    /// as processed, an alarm raised.
    Rejected(Box<Refund>),
}

/// Applies `settlement` to refund `refund_id` through [`refund_transition`], exactly once:
/// read, decide, write conditioned on the status read (with the payment's amounts, the record
/// per `record`, and the event's dedup record, in one transaction); on a race, read again.
pub async fn apply_refund_settlement<S: RefundStore + ?Sized>(
    store: &S,
    refund_id: &str,
    settlement: &RefundSettlement,
    record: RefundRecordWrite<'_>,
    fence: Option<SenderFence<'_>>,
    event: Option<&EventMark>,
    reported: Option<&CheckedAmount>,
) -> Result<RefundApplied, StoreError> {
    for _ in 0..MAX_ROUNDS {
        let Some(refund) = store.get_refund(refund_id).await? else {
            return Ok(RefundApplied::NotFound);
        };
        if event.is_some() && crate::domain::names_another_refund(&refund, settlement) {
            tracing::error!(refund_id, stored = ?refund.provider_refund_id, alarm = "webhook-mismatch",
                "a refund event names our refund but another PSP refund than the one it holds; nothing applied");
        }
        if super::settle::amount_mismatch(reported, refund.amount, refund.currency) {
            tracing::error!(refund_id, reported = ?reported, amount = refund.amount,
                currency = refund.currency.as_str(), alarm = "webhook-mismatch",
                "a refund event reports another amount or currency than the refund's; nothing applied");
            // Recorded as processed (if it comes from a webhook), and nothing else.
            if event.is_some() {
                return match store
                    .write_refund(
                        &refund,
                        &RefundTransition::Unchanged,
                        RefundRecordWrite::Keep,
                        fence,
                        event,
                    )
                    .await?
                {
                    RefundSettleOutcome::Duplicate => Ok(RefundApplied::Duplicate),
                    RefundSettleOutcome::Moved => continue,
                    RefundSettleOutcome::Settled(_) => {
                        Ok(RefundApplied::Rejected(Box::new(refund)))
                    }
                };
            }
            return Ok(RefundApplied::Rejected(Box::new(refund)));
        }
        let step = refund_transition(&refund, settlement);
        let completes = matches!(record, RefundRecordWrite::Complete { .. });
        if step == RefundTransition::Unchanged && event.is_none() && !completes && fence.is_none() {
            return Ok(RefundApplied::Unchanged(Box::new(refund)));
        }
        match store
            .write_refund(&refund, &step, record, fence, event)
            .await?
        {
            RefundSettleOutcome::Settled(after) if step == RefundTransition::Unchanged => {
                return Ok(RefundApplied::Unchanged(after))
            }
            RefundSettleOutcome::Settled(after) => {
                log_late_failure(&refund, &after);
                return Ok(RefundApplied::Moved(after));
            }
            RefundSettleOutcome::Duplicate => return Ok(RefundApplied::Duplicate),
            RefundSettleOutcome::Moved => continue,
        }
    }
    Err(StoreError::Conflict {
        item: refund_id.to_owned(),
    })
}
