//! Capture and cancel exactly once: `POST /payments/{id}/capture` and `/cancel`.
//!
//! The request's key and the operation are claimed together, the operation on the payment
//! itself, so a payment has one capture or cancel at a time whoever asks. The PSP is called
//! under a key derived from the payment and the claim's number alone (`payonce-capture-<id>`,
//! `payonce-cancel-<id>`, then `-2`, … for claims after one the PSP refused), so a re-send of a
//! claim after a lost answer, by a retry with its key or by reconcile, is the same operation at
//! the PSP. What the PSP answers moves the payment through the one transition function; an
//! order is released only when the PSP confirmed a cancel. An answer that is unknown keeps the
//! claim and its record in progress (the record never expires while it is): the retry that
//! takes it over after its lease, or reconcile, sends the same request again, and a webhook or
//! reconcile settles what the PSP did meanwhile.
//!
//! Request budget: a first capture or cancel is load + begin + finish (3) and one PSP call; a
//! replay is the load alone (1).

use crate::clock::duration_ms;
use crate::domain::{
    transition, CancelRefusal, CaptureRefusal, OperationKind, Payment, PaymentOperation,
    PaymentStatus, PaymentView, Settlement, Transition, CHARGE_RECORD_NEVER_EXPIRES_S,
};
use crate::idempotency::{
    decide, stored_request_id, Claim, Decision, Fingerprint, IdempotencyKey, IdempotencyRecord,
    Lease, LeaseToken, RecordKey, RecordState, StoreError,
};
use crate::ports::{
    BeginOperationOutcome, ChargeStore, OperationOutcome, OperationRecordEnd, OperationRequest,
    OperationStore, Psp, ResumeOutcome, SettleOutcome,
};
use std::time::Duration;

/// The idempotency scope of POST /payments/{id}/capture (stable across refactors).
pub const CAPTURE_SCOPE: &str = "payments.capture";

/// The idempotency scope of POST /payments/{id}/cancel (stable across refactors).
pub const CANCEL_SCOPE: &str = "payments.cancel";

/// The OAuth scope a token needs to capture, to cancel an authorized payment, and to cancel
/// another user's.
pub const CAPTURE_OAUTH_SCOPE: &str = "payments:capture";

/// How many times one request re-reads after losing a race.
const MAX_ROUNDS: u32 = 8;

/// Tunables of the capture and cancel path.
#[derive(Debug, Clone)]
pub struct OperationConfig {
    /// Idempotency record retention after the answer (≤ the PSP's key retention, 24 h at
    /// Stripe).
    pub retention: Duration,
    /// Added to the invocation deadline to form the lease.
    pub lease_margin: Duration,
    /// Upper bound of one PSP call.
    pub psp_timeout: Duration,
    /// Time kept back from the deadline for the write after the PSP call.
    pub deadline_reserve: Duration,
}

impl Default for OperationConfig {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(24 * 3600),
            lease_margin: Duration::from_secs(5),
            psp_timeout: Duration::from_secs(10),
            deadline_reserve: Duration::from_secs(2),
        }
    }
}

/// A validated capture or cancel request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationCommand {
    /// Capture or cancel.
    pub kind: OperationKind,
    /// The payment.
    pub payment_id: String,
    /// A capture's amount, minor units; `None`: all that is capturable.
    pub amount: Option<i64>,
}

/// Who asks: a user, and whether their token holds [`CAPTURE_OAUTH_SCOPE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'a> {
    /// The JWT `sub`.
    pub user: &'a str,
    /// Staff may capture, cancel authorizations, and act on any user's payment.
    pub staff: bool,
}

/// A successful answer of [`OperationService::run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationAnswer {
    /// Done (captured, or canceled): the payment as it is now.
    Done {
        /// The payment.
        payment: PaymentView,
        /// Whether the key's stored answer was replayed.
        replayed: bool,
    },
    /// The PSP's answer is not known yet: retry with the same key after `retry_after`.
    Pending {
        /// The payment as it is now.
        payment: PaymentView,
        /// When the key's lease lapses and a retry takes it over.
        retry_after: Duration,
    },
    /// The PSP could not be reached; nothing was done and the key is free: retry with it.
    PspUnavailable {
        /// When to retry.
        retry_after: Duration,
    },
}

/// Why a capture or cancel was refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    /// The key was used for another request.
    #[error("the idempotency key was used with a different request")]
    Mismatch,
    /// Another invocation holds the key.
    #[error("a request with this idempotency key is in progress")]
    KeyInUse {
        /// Until its lease lapses.
        retry_after: Duration,
    },
    /// No such payment (or not the caller's).
    #[error("payment not found")]
    PaymentNotFound,
    /// The payment cannot be captured now.
    #[error(transparent)]
    NotCapturable(CaptureRefusal),
    /// The payment cannot be canceled now.
    #[error(transparent)]
    NotCancelable(CancelRefusal),
    /// The PSP refused the capture (the authorization lapsed or was canceled).
    #[error("the payment provider refused the capture ({code})")]
    CaptureFailed {
        /// The PSP's code, or the payment's status when the PSP said it moved.
        code: String,
    },
    /// The stored state is unusable.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for OperationError {
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

/// What a completed record answers: done, or the refusal it ended with.
const DONE: &str = "done";
const CAPTURE_FAILED: &str = "capture-failed:";
const NOT_CANCELABLE: &str = "not-cancelable:";
const STAFF_ONLY: &str = "staff-only";

/// Captures and cancels payments.
pub struct OperationService<S, P> {
    store: S,
    psp: P,
    config: OperationConfig,
}

impl<S: OperationStore + ChargeStore, P: Psp> OperationService<S, P> {
    /// The service over `store` and `psp`.
    pub fn new(store: S, psp: P, config: OperationConfig) -> Self {
        Self { store, psp, config }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The fingerprint of a command: what the key is bound to.
    pub fn fingerprint(command: &OperationCommand) -> Fingerprint {
        Fingerprint::of_value(&serde_json::json!({
            "payment_id": command.payment_id,
            "amount": command.amount,
        }))
    }

    fn operator(&self) -> Operator<'_, S, P> {
        Operator {
            store: &self.store,
            psp: &self.psp,
            config: &self.config,
        }
    }

    /// Captures or cancels `command.payment_id` once per key, and once per payment whatever the
    /// keys.
    pub async fn run(
        &self,
        caller: Caller<'_>,
        key: &IdempotencyKey,
        command: &OperationCommand,
        deadline_ms: i64,
        request_id: &str,
    ) -> Result<OperationAnswer, OperationError> {
        let scope = match command.kind {
            OperationKind::Capture => CAPTURE_SCOPE,
            OperationKind::Cancel => CANCEL_SCOPE,
        };
        let record_key = RecordKey::new(scope, caller.user, key);
        let fingerprint = Self::fingerprint(command);
        let (mut record, mut payment) = self
            .store
            .load_for_operation(&record_key, &command.payment_id)
            .await?;
        let mut rechecked = false;
        for _ in 0..MAX_ROUNDS {
            if let Some(existing) = record.take() {
                match decide(&existing, &fingerprint, self.store.operation_now_ms()) {
                    Decision::Mismatch => return Err(OperationError::Mismatch),
                    Decision::Replay => {
                        let payment = payment.ok_or_else(|| vanished(&command.payment_id))?;
                        return replay(&existing, &payment);
                    }
                    Decision::Wait { retry_after } => {
                        return Err(OperationError::KeyInUse { retry_after })
                    }
                    Decision::TakeOver { seen } => {
                        let read = payment
                            .as_ref()
                            .ok_or_else(|| vanished(&command.payment_id))?;
                        let lease = self.operator().lease(deadline_ms);
                        match self
                            .store
                            .resume_operation(&record_key, &seen, &lease)
                            .await?
                        {
                            ResumeOutcome::Resumed => {
                                return self
                                    .operator()
                                    .resend(read, &record_key, &lease, deadline_ms, Some(caller))
                                    .await
                            }
                            ResumeOutcome::KeyMoved(_) => {
                                // Another request moved the key: its record and the payment as
                                // they are now (a replay answers with the payment's present).
                                (record, payment) = self
                                    .store
                                    .load_for_operation(&record_key, &command.payment_id)
                                    .await?;
                                continue;
                            }
                            ResumeOutcome::OrderChanged(_) | ResumeOutcome::LeaseHeld { .. } => {
                                return Err(OperationError::KeyInUse {
                                    retry_after: Duration::from_secs(1),
                                })
                            }
                        }
                    }
                }
            }
            let read = payment
                .as_ref()
                .filter(|p| caller.staff || p.owner == caller.user)
                .ok_or(OperationError::PaymentNotFound)?;
            let allowed = match command.kind {
                OperationKind::Capture => read
                    .capture_amount(command.amount)
                    .and_then(|amount| {
                        let capturable = read.progress.amount_capturable;
                        if amount < capturable && !self.psp.captures_partially() {
                            Err(CaptureRefusal::WholeOnly { capturable })
                        } else {
                            Ok(amount)
                        }
                    })
                    .map(Some)
                    .map_err(OperationError::NotCapturable),
                OperationKind::Cancel => read
                    .cancelable(caller.staff)
                    .map(|()| None)
                    .map_err(OperationError::NotCancelable),
            };
            let amount = match allowed {
                Ok(amount) => amount,
                Err(refusal) if !rechecked => {
                    // The load reads the record and the payment one after the other: this very
                    // key may have claimed the operation between the two. Read again before
                    // refusing, so a retry is answered as one (in use, or a replay).
                    let _ = refusal;
                    rechecked = true;
                    (record, payment) = self
                        .store
                        .load_for_operation(&record_key, &command.payment_id)
                        .await?;
                    continue;
                }
                Err(refusal) => return Err(refusal),
            };
            let operation = PaymentOperation {
                kind: command.kind,
                amount,
                record: record_key.as_str().to_owned(),
                seq: read.operation_count + 1,
                from: read.status,
            };
            let lease = self.operator().lease(deadline_ms);
            let claim = Claim {
                key: record_key.clone(),
                fingerprint: fingerprint.clone(),
                attempt_id: read.payment_id.clone(),
                lease_token: lease.token.clone(),
                lease_until_ms: lease.until_ms,
                // In progress it never expires: a retry with the key, or reconcile, must
                // always find the claim it holds; its answer is kept for the retention.
                expires_at_s: CHARGE_RECORD_NEVER_EXPIRES_S,
                request_id: stored_request_id(request_id),
            };
            match self.store.begin_operation(&claim, read, &operation).await {
                Ok(BeginOperationOutcome::Begun) => {
                    let claimed = Payment {
                        operation: Some(operation),
                        ..read.clone()
                    };
                    return self
                        .operator()
                        .send(&claimed, &record_key, &lease, deadline_ms, false)
                        .await;
                }
                // A request with this very key claimed it since the load: read both again, so a
                // replay answers with the payment as it is now, not as this request first read
                // it (found by the simulation: a double click stalled before its claim).
                Ok(BeginOperationOutcome::KeyTaken(_)) => {
                    (record, payment) = self
                        .store
                        .load_for_operation(&record_key, &command.payment_id)
                        .await?;
                    // This very claim, sent again after its answer was lost: it is ours, and
                    // nothing has been sent under it yet.
                    let own = record
                        .as_ref()
                        .and_then(IdempotencyRecord::lease)
                        .is_some_and(|held| held.token == lease.token);
                    if let (true, Some(claimed)) = (own, payment.as_ref()) {
                        return self
                            .operator()
                            .send(claimed, &record_key, &lease, deadline_ms, false)
                            .await;
                    }
                }
                Ok(BeginOperationOutcome::PaymentChanged(now)) => payment = now.map(|p| *p),
                Err(StoreError::Conflict { .. }) => {
                    (record, payment) = self
                        .store
                        .load_for_operation(&record_key, &command.payment_id)
                        .await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(OperationError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }
}

/// What sends a claimed operation and writes its outcome: a request's, or reconcile's.
struct Operator<'a, S, P> {
    store: &'a S,
    psp: &'a P,
    config: &'a OperationConfig,
}

impl<S: OperationStore + ChargeStore, P: Psp> Operator<'_, S, P> {
    fn expires_at_s(&self) -> i64 {
        (self.store.operation_now_ms() + duration_ms(self.config.retention)).div_euclid(1000)
    }

    fn lease(&self, deadline_ms: i64) -> Lease {
        Lease {
            token: LeaseToken::generate(),
            until_ms: deadline_ms + duration_ms(self.config.lease_margin),
        }
    }

    /// A takeover: the operation the lapsed holder claimed, sent again as it was (a call under
    /// its key may have reached the PSP). A payment the PSP's word already settled answers
    /// from itself. A cancel claimed while the customer was asked to act is not sent again
    /// once the payment is authorized, unless staff ask (`caller`; reconcile is not staff):
    /// canceling an authorization is staff's decision, which the claim never was. It ends as
    /// refused, its claim released.
    async fn resend(
        &self,
        payment: &Payment,
        record_key: &RecordKey,
        lease: &Lease,
        deadline_ms: i64,
        caller: Option<Caller<'_>>,
    ) -> Result<OperationAnswer, OperationError> {
        let Some(operation) = payment
            .operation
            .as_ref()
            .filter(|op| op.record == record_key.as_str())
        else {
            return Err(StoreError::Corrupt {
                key: record_key.to_string(),
                reason: "an operation in progress is not claimed on its payment".into(),
            }
            .into());
        };
        let staff = caller.is_some_and(|c| c.staff);
        if operation.kind == OperationKind::Cancel
            && operation.from == PaymentStatus::RequiresAction
            && payment.status == PaymentStatus::Authorized
            && !staff
        {
            let end = OperationRecordEnd::Complete {
                result: STAFF_ONLY.to_owned(),
                expires_at_s: self.expires_at_s(),
            };
            self.end_unchanged(payment, record_key, lease, &end).await?;
            return Err(OperationError::NotCancelable(CancelRefusal::StaffOnly));
        }
        self.send(payment, record_key, lease, deadline_ms, true)
            .await
    }

    /// Sends the operation claimed on `payment` and writes what the PSP said.
    async fn send(
        &self,
        payment: &Payment,
        record_key: &RecordKey,
        lease: &Lease,
        deadline_ms: i64,
        resend: bool,
    ) -> Result<OperationAnswer, OperationError> {
        let operation = payment
            .operation
            .clone()
            .ok_or_else(|| vanished(&payment.payment_id))?;
        let kind = operation.kind;
        if payment.status.is_final() {
            // The PSP's word (a webhook, reconcile) settled it since the holder sent: what it
            // says is the operation's answer.
            return self.finish(payment, None, record_key, lease, kind).await;
        }
        let mut request = OperationRequest::for_operation(payment, &operation)
            .ok_or_else(|| vanished(&payment.payment_id))?;
        if crate::mutations::active(crate::mutations::Mutation::OperationUnderClientKey) {
            request.idempotency_key = format!("payonce-{}-{}", kind.as_str(), record_key.as_str());
        }
        let left_ms =
            deadline_ms - self.store.operation_now_ms() - duration_ms(self.config.deadline_reserve);
        let timeout = self
            .config
            .psp_timeout
            .min(Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)));
        let outcome = if timeout.is_zero() {
            OperationOutcome::NotSent {
                reason: "no time left before the deadline".into(),
            }
        } else {
            self.psp.operate(&request, timeout).await
        };
        let payment_id = payment.payment_id.as_str();
        match outcome {
            OperationOutcome::Answered(settlement) => {
                self.finish(payment, Some(settlement), record_key, lease, kind)
                    .await
            }
            OperationOutcome::Refused { code } => {
                tracing::warn!(payment_id, operation = kind.as_str(), %code, "the PSP refused the operation");
                // A capture's answer names the PSP's code; a cancel's the payment's status.
                let code = match kind {
                    OperationKind::Capture => code,
                    OperationKind::Cancel => payment.status.as_str().to_owned(),
                };
                let end = OperationRecordEnd::Complete {
                    result: refusal_result(kind, &code),
                    expires_at_s: self.expires_at_s(),
                };
                self.end_unchanged(payment, record_key, lease, &end).await?;
                Err(refusal_error(kind, code))
            }
            OperationOutcome::NotSent { reason } if !resend => {
                tracing::warn!(payment_id, operation = kind.as_str(), %reason, "the PSP was not reached; the operation is given up");
                self.end_unchanged(payment, record_key, lease, &OperationRecordEnd::Delete)
                    .await?;
                Ok(OperationAnswer::PspUnavailable {
                    retry_after: Duration::from_secs(1),
                })
            }
            OperationOutcome::Unknown { .. }
                if kind == OperationKind::Cancel
                    && crate::mutations::active(
                        crate::mutations::Mutation::ReleaseOnUnknownCancel,
                    ) =>
            {
                let settlement = Settlement::Canceled {
                    provider_payment_id: payment.provider_payment_id.clone(),
                    reason: crate::domain::CancellationReason::Requested,
                };
                self.finish(payment, Some(settlement), record_key, lease, kind)
                    .await
            }
            OperationOutcome::NotSent { reason } | OperationOutcome::Unknown { reason } => {
                // An earlier call under the key may be running at the PSP: the operation stays
                // claimed, the key leased until the lease lapses, for a retry to send it again.
                tracing::warn!(payment_id, operation = kind.as_str(), %reason, "the operation's outcome is unknown; it stays claimed");
                Ok(OperationAnswer::Pending {
                    payment: payment.view(),
                    retry_after: retry_after(lease.until_ms - self.store.operation_now_ms()),
                })
            }
        }
    }

    /// Writes the PSP's word (or, without one, the payment as it stands) and answers from the
    /// payment it leaves. A payment that moved meanwhile is read again and decided on anew.
    async fn finish(
        &self,
        payment: &Payment,
        settlement: Option<Settlement>,
        record_key: &RecordKey,
        lease: &Lease,
        kind: OperationKind,
    ) -> Result<OperationAnswer, OperationError> {
        let mut current = payment.clone();
        for _ in 0..MAX_ROUNDS {
            let step = settlement
                .as_ref()
                .map_or(Transition::Unchanged, |s| transition(&current, s));
            let after = current.after(&step, self.store.operation_now_ms());
            let (end, answer) = match conclude(kind, &after) {
                Conclusion::Done => (DONE.to_owned(), Ok(())),
                Conclusion::Refused(result, error) => (result, Err(error)),
                Conclusion::Open => {
                    // The PSP's answer left the payment open (it has not done it yet): as with an
                    // unknown outcome, the key stays leased for a retry to send again, and the
                    // PSP's webhook or reconcile brings the rest.
                    return Ok(OperationAnswer::Pending {
                        payment: after.view(),
                        retry_after: retry_after(lease.until_ms - self.store.operation_now_ms()),
                    });
                }
            };
            let end = OperationRecordEnd::Complete {
                result: end,
                expires_at_s: self.expires_at_s(),
            };
            match self
                .store
                .finish_operation(&current, &step, record_key, &lease.token, &end, false)
                .await
            {
                Ok(SettleOutcome::Settled(now)) => {
                    return answer.map(|()| OperationAnswer::Done {
                        payment: now.view(),
                        replayed: false,
                    });
                }
                Ok(SettleOutcome::Moved | SettleOutcome::Duplicate)
                | Err(StoreError::Conflict { .. }) => {
                    let (record, now) = self
                        .store
                        .load_for_operation(record_key, &current.payment_id)
                        .await?;
                    let still_ours = record
                        .as_ref()
                        .and_then(IdempotencyRecord::lease)
                        .is_some_and(|held| held.token == lease.token);
                    if !still_ours {
                        // Another request took the key over (this one outlived its lease): it
                        // answers now. What the PSP told this one still moves the payment (no
                        // lease is needed for the PSP's word), so nothing learned is lost.
                        if let Some(settlement) = &settlement {
                            crate::service::settle::apply_settlement(
                                self.store,
                                &current.payment_id,
                                settlement,
                            )
                            .await?;
                        }
                        return Err(OperationError::KeyInUse {
                            retry_after: Duration::from_secs(1),
                        });
                    }
                    current = now.ok_or_else(|| vanished(&current.payment_id))?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(OperationError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Ends the record without moving the payment, releasing the operation claimed under it.
    async fn end_unchanged(
        &self,
        payment: &Payment,
        record_key: &RecordKey,
        lease: &Lease,
        end: &OperationRecordEnd,
    ) -> Result<(), OperationError> {
        let mut current = payment.clone();
        for _ in 0..MAX_ROUNDS {
            match self
                .store
                .finish_operation(
                    &current,
                    &Transition::Unchanged,
                    record_key,
                    &lease.token,
                    end,
                    true,
                )
                .await
            {
                Ok(SettleOutcome::Settled(_)) => return Ok(()),
                Ok(SettleOutcome::Moved | SettleOutcome::Duplicate)
                | Err(StoreError::Conflict { .. }) => {
                    let (record, now) = self
                        .store
                        .load_for_operation(record_key, &current.payment_id)
                        .await?;
                    let still_ours = record
                        .as_ref()
                        .and_then(IdempotencyRecord::lease)
                        .is_some_and(|held| held.token == lease.token);
                    if !still_ours {
                        return Err(OperationError::KeyInUse {
                            retry_after: Duration::from_secs(1),
                        });
                    }
                    current = now.ok_or_else(|| vanished(&current.payment_id))?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(OperationError::KeyInUse {
            retry_after: Duration::from_secs(1),
        })
    }
}

/// Reconcile's part: a capture or cancel claimed on `payment` whose request is gone (its
/// record's lease lapsed and nobody took it over: the client never came back) is taken over and
/// sent again as it was claimed, under its own PSP key, its outcome written on the claim's
/// record as the request would have. The status the payment is left in, if the claim was
/// taken over; `None` if there was nothing to take over (no claim, or one at work).
pub async fn resume_claim<S: OperationStore + ChargeStore, P: Psp>(
    store: &S,
    psp: &P,
    payment: &Payment,
    deadline_ms: i64,
) -> Result<Option<PaymentStatus>, OperationError> {
    let Some(operation) = &payment.operation else {
        return Ok(None);
    };
    let record_key = RecordKey::from_stored(operation.record.clone());
    let (record, current) = store
        .load_for_operation(&record_key, &payment.payment_id)
        .await?;
    let (Some(record), Some(current)) = (record, current) else {
        return Ok(None);
    };
    let seen = match &record.state {
        RecordState::InProgress { lease } if lease.until_ms <= store.operation_now_ms() => {
            lease.token.clone()
        }
        _ => return Ok(None),
    };
    let config = OperationConfig::default();
    let operator = Operator {
        store,
        psp,
        config: &config,
    };
    let lease = operator.lease(deadline_ms);
    if store.resume_operation(&record_key, &seen, &lease).await? != ResumeOutcome::Resumed {
        return Ok(None);
    }
    tracing::info!(payment_id = %payment.payment_id, operation = operation.kind.as_str(),
        "a claimed operation whose request is gone is sent again");
    let answer = operator
        .resend(&current, &record_key, &lease, deadline_ms, None)
        .await;
    Ok(Some(match answer {
        Ok(OperationAnswer::Done { payment, .. } | OperationAnswer::Pending { payment, .. }) => {
            payment.status
        }
        _ => current.status,
    }))
}

/// What a payment, once the PSP's word is applied, answers an operation with.
enum Conclusion {
    /// Captured (a capture), canceled (a cancel).
    Done,
    /// The record's stored refusal and the error answered.
    Refused(String, OperationError),
    /// Still open: the PSP did not say it was done.
    Open,
}

fn conclude(kind: OperationKind, after: &Payment) -> Conclusion {
    match (kind, after.status) {
        (OperationKind::Capture, PaymentStatus::Succeeded)
        | (OperationKind::Cancel, PaymentStatus::Canceled) => Conclusion::Done,
        (_, status) if status.is_final() => {
            let code = status.as_str();
            Conclusion::Refused(
                refusal_result(kind, code),
                refusal_error(kind, code.to_owned()),
            )
        }
        _ => Conclusion::Open,
    }
}

fn refusal_result(kind: OperationKind, code: &str) -> String {
    match kind {
        OperationKind::Capture => format!("{CAPTURE_FAILED}{code}"),
        OperationKind::Cancel => format!("{NOT_CANCELABLE}{code}"),
    }
}

fn refusal_error(kind: OperationKind, code: String) -> OperationError {
    match kind {
        OperationKind::Capture => OperationError::CaptureFailed { code },
        OperationKind::Cancel => OperationError::NotCancelable(CancelRefusal::NotCancelable(
            PaymentStatus::parse(&code).map_or("refused", PaymentStatus::as_str),
        )),
    }
}

/// A completed record's answer, with the payment as it is now.
fn replay(
    record: &IdempotencyRecord,
    payment: &Payment,
) -> Result<OperationAnswer, OperationError> {
    let RecordState::Completed { result } = &record.state else {
        return Err(vanished(&payment.payment_id));
    };
    if result == STAFF_ONLY {
        return Err(OperationError::NotCancelable(CancelRefusal::StaffOnly));
    }
    if result == DONE {
        return Ok(OperationAnswer::Done {
            payment: payment.view(),
            replayed: true,
        });
    }
    if let Some(code) = result.strip_prefix(CAPTURE_FAILED) {
        return Err(refusal_error(OperationKind::Capture, code.to_owned()));
    }
    if let Some(code) = result.strip_prefix(NOT_CANCELABLE) {
        return Err(refusal_error(OperationKind::Cancel, code.to_owned()));
    }
    Err(OperationError::Store(StoreError::Corrupt {
        key: payment.payment_id.clone(),
        reason: format!("unknown stored answer {result:?}"),
    }))
}

fn vanished(payment_id: &str) -> OperationError {
    OperationError::Store(StoreError::Corrupt {
        key: payment_id.to_owned(),
        reason: "the payment of an operation's record is gone".into(),
    })
}

/// Whole seconds, rounded up, never below one.
fn retry_after(ms: i64) -> Duration {
    Duration::from_secs(u64::try_from((ms + 999) / 1000).unwrap_or(1).max(1))
}
