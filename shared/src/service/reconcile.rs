//! Reconcile: the backstop that brings every attempt stuck in `processing` to its
//! true final state when the webhook was lost or the Lambda died between the PSP and the write.
//!
//! Per attempt: re-read consistently; leave it alone while a live lease says a handler is at
//! work; take a lapsed lease over (fenced, as a client retry would); ask the PSP; apply the one
//! transition function. An attempt the PSP provably never ran (its key fenced) and older than
//! the longest possible invocation is failed and its order released — but only while the PSP
//! still remembers the key: past the fence window nothing is proven, an alarm fires and the
//! attempt waits for an operator. Every write is conditioned on the state read, so two
//! overlapping runs settle each attempt once.
//!
//! Each attempt carries the time of its next check; one that stays pending is pushed back
//! (longer the older it is), so a head of attempts that never settle cannot hide newer ones.
//! A run stops before its own deadline.

use super::complete;
use super::refund::{apply_refund_settlement, refund_settlement_of, RefundApplied};
use super::settle::{amount_mismatch, settlement_of, settlement_of_outcome};
use crate::clock::duration_ms;
use crate::domain::RefundTransition;
use crate::domain::{is_refund_id, Refund, RefundSettlement, RefundStatus};
use crate::domain::{
    transition, CancellationReason, Payment, PaymentStatus, Settlement, Transition,
};
use crate::idempotency::{Lease, LeaseToken, RecordKey, RecordState, StoreError, TakeoverOutcome};
use crate::ports::{
    ChargeRequest, ChargeStore, Fence, FinishedBy, InflightScan, OperationStore, OrderStore, Psp,
    PspError, PspLookup, RefundLeaseOutcome, RefundOutcome, RefundRecordWrite, RefundRequest,
    RefundStore, SenderFence, SettleOutcome,
};
use serde::Serialize;
use std::time::Duration;

/// Tunables of reconcile, with defaults for a run every 5 minutes.
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// Attempts younger than this are left to their handler and webhooks.
    pub min_age: Duration,
    /// Older than the longest possible invocation (15 min) plus a margin: an attempt the PSP
    /// never ran may then be failed.
    pub abandon_after: Duration,
    /// A charge the PSP holds but that has not settled after this long is logged as an alarm.
    pub stuck_alarm_after: Duration,
    /// Fencing proves a key unused only while the PSP remembers keys (Stripe: at least 24 h):
    /// no fence after this age from the attempt's creation.
    pub fence_window: Duration,
    /// How far the PSP's search may lag behind its writes (Stripe: up to about an hour). Past
    /// this age a charge under the attempt's key would show in a lookup, so a fence refused by
    /// validation proves that none exists.
    pub search_lag_bound: Duration,
    /// Shortest and longest pause before an attempt found pending is looked at again (the
    /// pause grows with the attempt's age).
    pub recheck_min: Duration,
    /// See [`ReconcileConfig::recheck_min`].
    pub recheck_max: Duration,
    /// A run stops taking new attempts this long after it started (below the function's
    /// timeout).
    pub max_run: Duration,
    /// How long a customer action (3-D Secure) stays open before reconcile cancels it at the
    /// PSP ([`crate::domain::ACTION_TIMEOUT`]).
    pub action_timeout: Duration,
    /// Attempts per page of the in-flight index.
    pub page_size: u32,
    /// Pages per run (bounded work; the next run continues with what is left).
    pub max_pages: u32,
    /// The lease reconcile takes on an attempt (or refund) while it asks the PSP: it bounds
    /// the work on one item, and no PSP call is started that could outlast it.
    pub lease: Duration,
    /// Upper bound of one PSP create re-sent by reconcile.
    pub psp_timeout: Duration,
    /// No PSP call starts with less than this left on reconcile's lease (a lookup, fence or
    /// cancel takes up to the adapter's request timeout), and every call ends this long before
    /// the lease lapses.
    pub call_reserve: Duration,
    /// A refund's idempotency record retention after a settlement.
    pub record_retention: Duration,
    /// How long a succeeded refund is still looked up (it may fail later, and its webhook may
    /// be lost).
    pub refund_watch: Duration,
    /// Longest pause between two looks at a succeeded refund.
    pub refund_watch_recheck_max: Duration,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        Self {
            min_age: Duration::from_secs(120),
            abandon_after: Duration::from_secs(20 * 60),
            stuck_alarm_after: Duration::from_secs(3 * 3600),
            fence_window: Duration::from_secs(23 * 3600),
            search_lag_bound: Duration::from_secs(75 * 60),
            recheck_min: Duration::from_secs(60),
            recheck_max: Duration::from_secs(3600),
            max_run: Duration::from_secs(90),
            action_timeout: crate::domain::ACTION_TIMEOUT,
            page_size: 50,
            max_pages: 10,
            lease: Duration::from_secs(60),
            psp_timeout: Duration::from_secs(10),
            call_reserve: Duration::from_secs(15),
            record_retention: Duration::from_secs(24 * 3600),
            refund_watch: Duration::from_secs(7 * 24 * 3600),
            refund_watch_recheck_max: Duration::from_secs(24 * 3600),
        }
    }
}

impl ReconcileConfig {
    /// Defaults overridden by `RECONCILE_MIN_AGE_MS`, `RECONCILE_ABANDON_AFTER_MS`,
    /// `RECONCILE_PAGE_SIZE`, `RECONCILE_MAX_PAGES`.
    pub fn from_env() -> Result<Self, crate::config::ConfigError> {
        let d = Self::default();
        Ok(Self {
            min_age: crate::config::millis("RECONCILE_MIN_AGE_MS", d.min_age)?,
            abandon_after: crate::config::millis("RECONCILE_ABANDON_AFTER_MS", d.abandon_after)?,
            page_size: crate::config::number("RECONCILE_PAGE_SIZE", d.page_size)?,
            max_pages: crate::config::number("RECONCILE_MAX_PAGES", d.max_pages)?,
            ..d
        })
    }
}

/// What one reconcile run did (returned by the function and logged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Attempts looked at.
    pub examined: u32,
    /// Settled to succeeded by this run.
    pub succeeded: u32,
    /// Settled to failed (declined) by this run.
    pub declined: u32,
    /// Failed and released by this run after fencing the PSP key.
    pub abandoned: u32,
    /// Still processing at the PSP, or too young to abandon.
    pub pending: u32,
    /// Left alone: a handler holds a live lease, or another run moved first.
    pub skipped: u32,
    /// Already settled when re-read (the index lags, or a webhook won).
    pub already_settled: u32,
    /// Pending refunds settled to succeeded by this run.
    pub refunds_succeeded: u32,
    /// Pending refunds settled to failed by this run.
    pub refunds_failed: u32,
    /// Attempts that failed this run (retried next run).
    pub errors: u32,
    /// Where the next page would start, if the run stopped at its bound.
    pub cursor: Option<String>,
    /// Whether the run stopped at its deadline with attempts left.
    pub out_of_time: bool,
}

impl ReconcileReport {
    /// Counts what reconciling one attempt did.
    pub fn tally(&mut self, reconciled: &Result<Reconciled, ReconcileError>) {
        let count = match reconciled {
            Ok(Reconciled::RefundSucceeded) => &mut self.refunds_succeeded,
            Ok(Reconciled::RefundFailed) => &mut self.refunds_failed,
            Ok(Reconciled::Succeeded) => &mut self.succeeded,
            Ok(Reconciled::Declined) => &mut self.declined,
            Ok(Reconciled::Abandoned) => &mut self.abandoned,
            Ok(Reconciled::Pending) => &mut self.pending,
            Ok(Reconciled::Skipped) => &mut self.skipped,
            Ok(Reconciled::AlreadySettled) => &mut self.already_settled,
            Err(_) => &mut self.errors,
        };
        *count += 1;
    }
}

/// What happened to one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// Now succeeded.
    Succeeded,
    /// Now failed (declined).
    Declined,
    /// Failed after proving the PSP never ran it; order released.
    Abandoned,
    /// Left processing.
    Pending,
    /// Someone else holds it or moved it.
    Skipped,
    /// Not processing (or pending) any more.
    AlreadySettled,
    /// A pending refund is now succeeded.
    RefundSucceeded,
    /// A pending refund is now failed.
    RefundFailed,
}

/// Errors of reconciling one attempt.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The PSP failed.
    #[error(transparent)]
    Psp(#[from] PspError),
}

/// How long before an authorization lapses reconcile raises `authorization-expiring`.
const AUTHORIZATION_WARNING_MS: i64 = 24 * 3600 * 1000;

/// How long an authorization lasts when the PSP did not say (card authorizations: 7 days).
const DEFAULT_AUTHORIZATION_MS: i64 = 7 * 24 * 3600 * 1000;

/// Raises `authorization-expiring` for an authorized payment whose authorization lapses within
/// a day (where no word stated the lapse, the card networks' usual 7 days from the
/// authorization stand in for it), or has lapsed without the PSP saying so.
fn warn_if_expiring(payment: &Payment, now_ms: i64) {
    let lapses_ms = payment
        .progress
        .capture_before_ms
        .unwrap_or(payment.updated_at_ms + DEFAULT_AUTHORIZATION_MS);
    if now_ms >= lapses_ms - AUTHORIZATION_WARNING_MS {
        tracing::error!(payment_id = %payment.payment_id, capture_before_ms = lapses_ms, alarm = "authorization-expiring",
            "an authorized payment is not captured and its authorization lapses within a day (or has lapsed without the PSP saying so)");
    }
}

/// Whether what the PSP's lookup found under our payment id is not the amount or currency we
/// charge (alarmed `psp-answer-untrusted`): never booked, in either direction, until an
/// operator has looked.
fn untrusted_amount(payment: &Payment, lookup: &PspLookup) -> bool {
    let untrusted = amount_mismatch(lookup.amount(), payment.amount, payment.currency);
    if untrusted {
        tracing::error!(payment_id = %payment.payment_id, reported = ?lookup.amount(), amount = payment.amount,
            currency = payment.currency.as_str(), alarm = "psp-answer-untrusted",
            "the PSP's lookup reports another amount or currency than the payment's; nothing applied");
    }
    untrusted
}

/// Whether the lookup's `settlement` names another PSP payment than the one `payment` holds
/// (alarmed `psp-answer-untrusted`): nothing is applied.
fn untrusted_payment(payment: &Payment, settlement: &Settlement) -> bool {
    let untrusted = crate::domain::names_another_payment(payment, settlement);
    if untrusted {
        tracing::error!(payment_id = %payment.payment_id, stored = ?payment.provider_payment_id,
            found = ?settlement, alarm = "psp-answer-untrusted",
            "the PSP's lookup found another PSP payment than the one the payment holds; nothing applied");
    }
    untrusted
}

/// The reconcile job.
pub struct Reconciler<S, P> {
    store: S,
    psp: P,
    config: ReconcileConfig,
}

impl<S: ChargeStore + OrderStore + RefundStore + OperationStore + InflightScan, P: Psp>
    Reconciler<S, P>
{
    /// The job over the payments store (attempts, refunds and their records) and the PSP.
    pub fn new(store: S, psp: P, config: ReconcileConfig) -> Self {
        Self { store, psp, config }
    }

    /// One bounded run over the attempts whose check is due, most overdue first, stopping
    /// [`ReconcileConfig::max_run`] after it started.
    pub async fn run(&self) -> Result<ReconcileReport, StoreError> {
        let deadline_ms = self.store.now_ms() + duration_ms(self.config.max_run);
        self.run_until(deadline_ms).await
    }

    /// One bounded run that takes no new attempt after `deadline_ms`.
    pub async fn run_until(&self, deadline_ms: i64) -> Result<ReconcileReport, StoreError> {
        let mut report = ReconcileReport::default();
        // An attempt counts as due once its check time is `min_age` behind now: a new attempt
        // is left to its handler and webhooks that long.
        let due_at_ms = self.store.now_ms() - duration_ms(self.config.min_age);
        let mut cursor = None;
        'pages: for _ in 0..self.config.max_pages {
            let (ids, next) = self
                .store
                .list_inflight(due_at_ms, self.config.page_size, cursor.clone())
                .await?;
            for payment_id in ids {
                if self.store.now_ms() >= deadline_ms {
                    report.out_of_time = true;
                    break 'pages;
                }
                report.examined += 1;
                let reconciled = if is_refund_id(&payment_id) {
                    self.reconcile_refund(&payment_id).await
                } else {
                    self.reconcile_one(&payment_id).await
                };
                report.tally(&reconciled);
                match reconciled {
                    Ok(Reconciled::Pending) => self.recheck_later(&payment_id).await,
                    Err(error) => {
                        tracing::warn!(payment_id, error = %error, "reconcile failed for this attempt; the next run retries");
                        self.recheck_later(&payment_id).await;
                    }
                    Ok(_) => {}
                }
            }
            cursor = next;
            if cursor.is_none() {
                break;
            }
        }
        report.cursor = cursor;
        crate::metrics::emit(|emf| {
            use crate::metrics::*;
            emf.count(
                RECONCILE_SETTLED,
                (report.succeeded + report.declined).into(),
            )
            .count(RECONCILE_FENCED, report.abandoned.into())
            .count(RECONCILE_STILL_PENDING, report.pending.into())
            .count(
                RECONCILE_REFUNDS_SETTLED,
                (report.refunds_succeeded + report.refunds_failed).into(),
            )
            .count(RECONCILE_ERRORS, report.errors.into())
        });
        Ok(report)
    }

    /// How old an attempt may be for a fence, or a re-send of its create, to be relied on:
    /// the configured window, within the time the PSP keeps keys less an hour.
    fn fence_window_ms(&self) -> i64 {
        let kept = self
            .psp
            .charge_keys_kept()
            .saturating_sub(Duration::from_secs(3600));
        duration_ms(self.config.fence_window.min(kept))
    }

    /// Whether `payment` has no PSP id stored on a PSP that moves money only under one
    /// ([`Psp::moves_money_only_under_a_stored_id`]): nothing under its key moved money, nor
    /// ever will.
    fn moved_nothing_without_an_id(&self, payment: &Payment) -> bool {
        payment.provider_payment_id.is_none() && self.psp.moves_money_only_under_a_stored_id()
    }

    /// Whether `payment`'s order is still held by it (stored `processing` under it): an attempt
    /// keeps its order from its claim until it settles, unless it gave it back as never sent.
    async fn holds_its_order(&self, payment: &Payment) -> Result<bool, ReconcileError> {
        Ok(self
            .store
            .get_order(&payment.order_id)
            .await?
            .is_some_and(|order| order.payment_id.as_deref() == Some(payment.payment_id.as_str())))
    }

    /// Reconciles one attempt.
    pub async fn reconcile_one(&self, payment_id: &str) -> Result<Reconciled, ReconcileError> {
        let Some(payment) = self.store.get_payment(payment_id).await? else {
            return Ok(Reconciled::Skipped);
        };
        match payment.status {
            PaymentStatus::Processing => {}
            PaymentStatus::RequiresAction | PaymentStatus::Authorized => {
                return self.reconcile_open(&payment).await
            }
            _ => return Ok(Reconciled::AlreadySettled),
        }
        let budget = self.budget();
        let lease = match self
            .take_lapsed_lease(
                &payment.idempotency_pk,
                &payment.payment_id,
                payment.created_at_ms,
                &budget,
            )
            .await?
        {
            LeaseTaken::HeldByOthers => return Ok(Reconciled::Skipped),
            LeaseTaken::Ours(token) => Some(token),
            LeaseTaken::NoneNeeded => None,
        };
        let age_ms = self.store.now_ms() - payment.created_at_ms;
        // No call is started that could outlast the lease (see [`Budget`]).
        let time_left = || budget.call_timeout(self.store.now_ms(), &self.config);
        if time_left().is_none() {
            return Ok(Reconciled::Pending);
        }
        let lookup = match self.psp.lookup_payment(&payment).await {
            Ok(lookup) => lookup,
            Err(error) => {
                // A look that keeps failing (a token that cannot read, an id the PSP will not
                // answer for) must not hide an attempt stuck past its bound.
                self.still_pending(&payment, age_ms);
                return Err(error.into());
            }
        };
        if untrusted_amount(&payment, &lookup) {
            return Ok(Reconciled::Pending);
        }
        // An action found open was opened when the attempt was created (its answer lost).
        let action_expires_at_ms = payment.created_at_ms + duration_ms(self.config.action_timeout);
        let settlement = match settlement_of(lookup.clone(), action_expires_at_ms) {
            Some(settlement) if untrusted_payment(&payment, &settlement) => {
                return Ok(Reconciled::Pending);
            }
            Some(settlement) => settlement,
            None if matches!(lookup, PspLookup::NotFound)
                && age_ms > self.fence_window_ms()
                && self.moved_nothing_without_an_id(&payment) =>
            {
                // Past the fence window (its fences refused, or their answers lost), yet
                // nothing under the key can ever move money: given up, the order released. A
                // payment the key left approved is canceled by the PSP when its delay lapses.
                tracing::warn!(payment_id, age_ms, "no PSP id stored and past the fence window: nothing under this attempt's key can move money; given up");
                Settlement::Abandoned
            }
            None if matches!(lookup, PspLookup::NotFound) && age_ms > self.fence_window_ms() => {
                // The PSP may have forgotten the key: a fence could create a new charge and
                // "prove" nothing. Only an operator can settle this attempt now.
                tracing::error!(
                    payment_id,
                    age_ms,
                    alarm = "payment-unprovable",
                    "attempt not found at the PSP and too old to fence; needs an operator"
                );
                return Ok(Reconciled::Pending);
            }
            None if matches!(lookup, PspLookup::NotFound)
                && age_ms > duration_ms(self.config.abandon_after) =>
            {
                if time_left().is_none() {
                    return Ok(Reconciled::Pending);
                }
                match self
                    .psp
                    .fence(&ChargeRequest::for_payment(&payment))
                    .await?
                {
                    Fence::NeverRan {
                        provider_payment_id,
                    } => {
                        // Cancelled by the next run if this one has no time left: the intent
                        // cannot be confirmed by anyone meanwhile (its key is ours).
                        if time_left().is_none() {
                            return Ok(Reconciled::Pending);
                        }
                        self.psp.cancel(&provider_payment_id).await?;
                        tracing::info!(payment_id, %provider_payment_id, "the PSP never ran this attempt; its key is fenced");
                        Settlement::Abandoned
                    }
                    Fence::Refused { .. }
                        if age_ms <= duration_ms(self.config.search_lag_bound) =>
                    {
                        // A charge under the key could still be missing from search: wait until
                        // a lookup would have shown it.
                        return Ok(self.still_pending(&payment, age_ms));
                    }
                    Fence::Refused { payment_method } => {
                        tracing::info!(payment_id, payment_method, "the PSP refuses this attempt's request; nothing was charged under its key");
                        if payment_method {
                            Settlement::Rejected
                        } else {
                            Settlement::Refused
                        }
                    }
                    Fence::Resend if !self.holds_its_order(&payment).await? => {
                        // An attempt that gave its order back did so because no call under its
                        // key could have reached the PSP (the not-sent rule): nothing to send
                        // again, and a re-send would charge a customer told nothing was charged.
                        tracing::info!(
                            payment_id,
                            "an attempt released as never sent: given up without a call"
                        );
                        Settlement::Abandoned
                    }
                    Fence::KeyUsed | Fence::Resend => {
                        // The key holds the original request's stored answer, yet no charge
                        // shows (an error answer creates none, or search lags): re-send the
                        // byte-identical request, which the PSP answers from its store and
                        // never runs twice, while the PSP still remembers the key.
                        let Some(timeout) = time_left() else {
                            return Ok(Reconciled::Pending);
                        };
                        let outcome = self
                            .psp
                            .create_charge(&ChargeRequest::for_payment(&payment), timeout)
                            .await;
                        let action_expires_at_ms =
                            self.store.now_ms() + duration_ms(self.config.action_timeout);
                        match settlement_of_outcome(outcome, action_expires_at_ms) {
                            Some(settlement) => settlement,
                            None => return Ok(self.still_pending(&payment, age_ms)),
                        }
                    }
                    Fence::Voided => {
                        tracing::info!(payment_id, "the PSP voided whatever this attempt's key made; nothing under it can move money");
                        Settlement::Abandoned
                    }
                    Fence::InFlight => return Ok(self.still_pending(&payment, age_ms)),
                    Fence::UsedWithoutCharge => {
                        // The lease is ours or none is needed: no invocation that could spend
                        // the key is alive, and the PSP holds no charge under it.
                        tracing::info!(payment_id, "the PSP holds nothing under this attempt's used key, and nothing can be charged under it any more");
                        Settlement::Abandoned
                    }
                    Fence::Unprovable => {
                        tracing::error!(
                            payment_id,
                            age_ms,
                            alarm = "payment-unprovable",
                            "attempt not found at the PSP, which offers no proof that it never ran; needs an operator"
                        );
                        return Ok(Reconciled::Pending);
                    }
                }
            }
            None => return Ok(self.still_pending(&payment, age_ms)),
        };
        // A payment the PSP only authorized though it was to be captured at once (Square):
        // its id stored, it is completed now; without a final answer, it is looked at again.
        let (payment, settlement) = if complete::needs_completion(&payment, &settlement) {
            let stored = complete::store_authorized(&self.store, payment, &settlement).await?;
            let completed = match (complete::completable(&stored, &settlement), time_left()) {
                (Some(provider_payment_id), Some(timeout)) => {
                    complete::complete(&self.psp, &stored, provider_payment_id, timeout).await
                }
                _ => None,
            };
            match completed {
                Some(completed) => (stored, completed),
                None => return Ok(self.still_pending(&stored, age_ms)),
            }
        } else {
            (payment, settlement)
        };
        let step = transition(&payment, &settlement);
        let written = match &lease {
            Some(token) => {
                self.store
                    .finish_attempt(&payment, &step, token, FinishedBy::Reconcile)
                    .await
            }
            None if step == Transition::Unchanged => return Ok(Reconciled::AlreadySettled),
            None => self.store.settle(&payment, &step, None).await,
        };
        match written {
            Ok(SettleOutcome::Settled(after)) => Ok(match (after.status, &settlement) {
                (PaymentStatus::Succeeded, _) => Reconciled::Succeeded,
                (_, Settlement::Abandoned) => Reconciled::Abandoned,
                _ => Reconciled::Declined,
            }),
            Ok(SettleOutcome::Moved | SettleOutcome::Duplicate)
            | Err(StoreError::LeaseLost { .. }) => {
                // Someone else moved it first; the PSP's success still applies over theirs.
                super::settle::keep_money_word(&self.store, &payment.payment_id, &settlement)
                    .await?;
                Ok(Reconciled::Skipped)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// A payment waiting for its customer (`requires_action`) or authorized: the PSP's word
    /// settles it (a success, a decline, a cancel); an action still open past its `expires_at`
    /// is canceled at the PSP, and only a cancel the PSP confirmed releases the order (a PSP
    /// that says the intent succeeded meanwhile wins: the next look finds it). An authorization
    /// a day from lapsing raises `authorization-expiring`; one the PSP let lapse is `canceled`
    /// (`expired`) on its word alone. Anything else is looked at again later.
    async fn reconcile_open(&self, payment: &Payment) -> Result<Reconciled, ReconcileError> {
        let payment_id = payment.payment_id.as_str();
        // A capture or cancel claimed by a request that never came back is sent again first.
        if payment.operation.is_some() {
            let deadline_ms = self.budget().lease_until_ms - duration_ms(self.config.call_reserve);
            match crate::service::operations::resume_claim(
                &self.store,
                &self.psp,
                payment,
                deadline_ms,
            )
            .await
            {
                Ok(Some(PaymentStatus::Succeeded)) => return Ok(Reconciled::Succeeded),
                Ok(Some(PaymentStatus::Canceled)) => return Ok(Reconciled::Abandoned),
                Ok(Some(_)) => return Ok(self.still_open(payment)),
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(payment_id, error = %error, "a claimed operation could not be sent again yet");
                    return Ok(self.still_open(payment));
                }
            }
        }
        let now_ms = self.store.now_ms();
        let lookup = match self.psp.lookup_payment(payment).await {
            Ok(lookup) => lookup,
            Err(error) => {
                // A look that keeps failing must not hide an authorization about to lapse, nor
                // an action held past its bound.
                self.still_open(payment);
                return Err(error.into());
            }
        };
        if untrusted_amount(payment, &lookup) {
            return Ok(Reconciled::Pending);
        }
        let authorized = payment.status == PaymentStatus::Authorized;
        let settlement = match lookup {
            // Why, as the PSP says it; where it does not, an authorization that lapsed or an
            // action never taken.
            PspLookup::Canceled {
                provider_payment_id,
                reason,
            } => Some(Settlement::Canceled {
                provider_payment_id: Some(provider_payment_id),
                reason: reason.unwrap_or(if authorized {
                    CancellationReason::Expired
                } else {
                    CancellationReason::Abandoned
                }),
            }),
            other => settlement_of(
                other,
                payment.created_at_ms + duration_ms(self.config.action_timeout),
            ),
        };
        // Word that moves nothing (the action still open, the authorization still held) is as
        // good as none: the bounds below still apply.
        // A buyer approved an order the PSP waits for us to capture (PayPal): capture it now.
        let settlement = match settlement {
            Some(approved) if complete::needs_completion(payment, &approved) => {
                let budget = self.budget();
                let timeout = budget.call_timeout(self.store.now_ms(), &self.config);
                match (complete::completable(payment, &approved), timeout) {
                    (Some(provider_payment_id), Some(timeout)) => {
                        complete::complete(&self.psp, payment, provider_payment_id, timeout).await
                    }
                    _ => None,
                }
            }
            other => other,
        };
        let settlement = settlement.filter(|s| transition(payment, s) != Transition::Unchanged);
        let settlement = match settlement {
            Some(settlement) => settlement,
            None if authorized => {
                warn_if_expiring(payment, now_ms);
                return Ok(Reconciled::Pending);
            }
            None => {
                let expired = payment
                    .progress
                    .next_action
                    .as_ref()
                    .is_some_and(|action| now_ms >= action.expires_at_ms);
                let (true, Some(provider_payment_id)) =
                    (expired, payment.provider_payment_id.as_deref())
                else {
                    return Ok(Reconciled::Pending);
                };
                // An action the PSP has not confirmed canceled alarms `payment-stuck` past the
                // bound, as any attempt still open at the PSP.
                let stuck = || Ok(self.still_pending(payment, now_ms - payment.created_at_ms));
                // Only a PSP whose cancel of an open action is a real, confirmed one may release
                // the order on it: Stripe's. Omise and 2C2P end an open action themselves (it
                // expires, or lapses into 0004) and say so to the lookup.
                if self.psp.kind() != crate::domain::PspKind::Stripe {
                    return stuck();
                }
                if let Err(error) = self.psp.cancel(provider_payment_id).await {
                    // Not confirmed (it may have succeeded meanwhile): the order stays held and
                    // the next run looks again.
                    tracing::warn!(payment_id, error = %error, "the abandoned action could not be canceled at the PSP yet");
                    return stuck();
                }
                tracing::info!(
                    payment_id,
                    "canceled an action the customer never completed"
                );
                Settlement::Canceled {
                    provider_payment_id: Some(provider_payment_id.to_owned()),
                    reason: CancellationReason::Abandoned,
                }
            }
        };
        if untrusted_payment(payment, &settlement) {
            return Ok(Reconciled::Pending);
        }
        let step = transition(payment, &settlement);
        if step == Transition::Unchanged {
            return Ok(Reconciled::Pending);
        }
        match self.store.settle(payment, &step, None).await {
            Ok(SettleOutcome::Settled(after)) => Ok(match after.status {
                PaymentStatus::Succeeded => Reconciled::Succeeded,
                PaymentStatus::Canceled => Reconciled::Abandoned,
                PaymentStatus::Failed => Reconciled::Declined,
                _ => Reconciled::Pending,
            }),
            Ok(SettleOutcome::Moved | SettleOutcome::Duplicate) => {
                super::settle::keep_money_word(&self.store, &payment.payment_id, &settlement)
                    .await?;
                Ok(Reconciled::Skipped)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Settles one pending refund: the PSP's list of the charge's refunds says what became of
    /// it; one it does not show is re-sent, identical, under its key while the PSP remembers
    /// keys (a refund has no fence: the re-send completes it exactly once). Past that window
    /// it waits for an operator, its amount still reserved.
    ///
    /// Reconcile sends only while it holds the refund's sender lease, taken like any sender's:
    /// never while a staff request holds a live one, and never beside another reconcile run. The
    /// lookup comes after the lease is taken, so what it shows includes whatever an earlier
    /// holder sent; every write after it is fenced on the lease.
    pub async fn reconcile_refund(&self, refund_id: &str) -> Result<Reconciled, ReconcileError> {
        let Some(read) = self.store.get_refund(refund_id).await? else {
            return Ok(Reconciled::Skipped);
        };
        let pending_since_ms = (read.status == RefundStatus::Pending).then_some(read.created_at_ms);
        let reconciled = self.reconcile_read_refund(read).await;
        // Whatever kept it pending (the PSP's word, a failed look, a lease held for ever), a
        // refund pending past its bound is an operator's.
        if let Some(created_at_ms) = pending_since_ms {
            let settled = matches!(
                reconciled,
                Ok(Reconciled::RefundSucceeded
                    | Reconciled::RefundFailed
                    | Reconciled::AlreadySettled)
            );
            let age_ms = self.store.now_ms() - created_at_ms;
            if !settled && age_ms > duration_ms(self.config.stuck_alarm_after) {
                tracing::error!(
                    refund_id,
                    age_ms,
                    alarm = "refund-stuck",
                    "refund still pending past its bound"
                );
            }
        }
        reconciled
    }

    async fn reconcile_read_refund(&self, read: Refund) -> Result<Reconciled, ReconcileError> {
        let refund_id = read.refund_id.clone();
        let refund_id = refund_id.as_str();
        if read.status == RefundStatus::Succeeded {
            if crate::mutations::active(crate::mutations::Mutation::UnwatchedRefunds) {
                self.store.stop_watching(&read).await?;
                return Ok(Reconciled::AlreadySettled);
            }
            return self.watch_refund(&read).await;
        }
        if read.status != RefundStatus::Pending {
            return Ok(Reconciled::AlreadySettled);
        }
        let budget = self.budget();
        let Some((refund, fence)) = self.take_refund_lease(read, &budget).await? else {
            return Ok(Reconciled::Skipped);
        };
        let settled = self
            .settle_refund(&refund, fence.as_ref().map(SenderFence::done), &budget)
            .await;
        if let (Some(token), Ok((Reconciled::Pending, _)) | Err(_)) = (&fence, &settled) {
            // Still pending (or this look failed): keep the key's record as long as the refund
            // it names is pending, so a late retry replays rather than claims afresh; and give
            // the lease back, so a staff retry or the next run need not wait for it to lapse —
            // unless this run's own call may still be running at the PSP.
            let in_flight = matches!(settled, Ok((_, true)));
            let fence = if in_flight {
                SenderFence::in_flight(token)
            } else {
                SenderFence::done(token)
            };
            let expires_at_s =
                (self.store.now_ms() + duration_ms(self.config.record_retention)).div_euclid(1000);
            let handed_back = self
                .store
                .write_refund(
                    &refund,
                    &RefundTransition::Unchanged,
                    RefundRecordWrite::Extend { expires_at_s },
                    Some(fence),
                    None,
                )
                .await;
            if let Err(error) = handed_back {
                tracing::debug!(refund_id, error = %error, "reconcile's refund lease was not handed back; it lapses");
            }
        }
        settled.map(|(reconciled, _)| reconciled)
    }

    /// Takes `read`'s sender lease for this run: the refund as it is then, with the token its
    /// writes are fenced on. `None`: another sender holds it, or it moved.
    async fn take_refund_lease(
        &self,
        read: Refund,
        budget: &Budget,
    ) -> Result<Option<(Refund, Option<LeaseToken>)>, ReconcileError> {
        use crate::mutations::{active, Mutation};
        let now_ms = self.store.refund_now_ms();
        if active(Mutation::ReconcileIgnoresRefundLease) {
            return Ok(Some((read, None)));
        }
        if read.lease_held_by_other(None, now_ms) {
            return Ok(None);
        }
        if active(Mutation::OneReconcileAtATime) && read.lease.is_none() {
            return Ok(Some((read, None)));
        }
        let lease = Lease {
            token: LeaseToken::generate(),
            until_ms: budget.lease_until_ms,
        };
        Ok(match self.store.take_refund_lease(&read, &lease).await? {
            RefundLeaseOutcome::Taken(now) => Some((*now, Some(lease.token))),
            RefundLeaseOutcome::Held { .. } | RefundLeaseOutcome::Moved(_) => None,
        })
    }

    /// Looks `refund` up (held under `fence`) and re-sends it if the PSP does not show it, then
    /// records what the PSP said; with whether a re-send of this run may still be running at
    /// the PSP (its outcome unknown).
    async fn settle_refund(
        &self,
        refund: &Refund,
        fence: Option<SenderFence<'_>>,
        budget: &Budget,
    ) -> Result<(Reconciled, bool), ReconcileError> {
        let refund_id = refund.refund_id.as_str();
        let Some(request) = self.refund_request(refund).await? else {
            return Err(StoreError::Corrupt {
                key: refund.refund_id.clone(),
                reason: "the refunded payment or its PSP id is missing".into(),
            }
            .into());
        };
        let age_ms = self.store.now_ms() - refund.created_at_ms;
        if budget
            .call_timeout(self.store.now_ms(), &self.config)
            .is_none()
        {
            return Ok((Reconciled::Pending, false));
        }
        let siblings = super::refund::StoredSiblings::of(&self.store, refund);
        let settlement = match self.psp.lookup_refund_among(&request, &siblings).await? {
            Some(settlement) => settlement,
            None if age_ms > duration_ms(self.config.fence_window) => {
                tracing::error!(
                    refund_id,
                    age_ms,
                    alarm = "refund-unprovable",
                    "refund not found at the PSP and too old to re-send; needs an operator"
                );
                return Ok((Reconciled::Pending, false));
            }
            None => {
                // Only while the lease surely outlasts the call: a sender whose lease lapsed
                // while its call is in flight could meet another sender at the PSP.
                let Some(timeout) = budget.call_timeout(self.store.now_ms(), &self.config) else {
                    return Ok((Reconciled::Pending, false));
                };
                let outcome = self
                    .psp
                    .create_refund_among(&request, &siblings, timeout)
                    .await;
                let in_flight = matches!(outcome, RefundOutcome::Unknown { .. });
                match refund_settlement_of(outcome) {
                    Some(settlement) => settlement,
                    None => return Ok((Reconciled::Pending, in_flight)),
                }
            }
        };
        let expires_at_s =
            (self.store.now_ms() + duration_ms(self.config.record_retention)).div_euclid(1000);
        let record = RefundRecordWrite::Mirror { expires_at_s };
        // Still pending: the PSP's id for it is kept if it is new (a PSP that keys no refund by
        // our id reads it by that id from then on, and never sends it again).
        let pending = matches!(settlement, RefundSettlement::Pending { .. });
        if pending && refund.provider_refund_id.is_some() {
            return Ok((Reconciled::Pending, false));
        }
        let applied = match apply_refund_settlement(
            &self.store,
            refund_id,
            &settlement,
            record,
            fence,
            None,
            None,
        )
        .await
        {
            Ok(applied) => Some(applied),
            Err(StoreError::LeaseLost { .. }) => None,
            Err(error) => return Err(error.into()),
        };
        let reconciled = match applied {
            _ if pending => Reconciled::Pending,
            Some(RefundApplied::Moved(after)) if after.status == RefundStatus::Succeeded => {
                Reconciled::RefundSucceeded
            }
            Some(RefundApplied::Moved(_)) => Reconciled::RefundFailed,
            Some(
                RefundApplied::Unchanged(_) | RefundApplied::Duplicate | RefundApplied::Rejected(_),
            ) => Reconciled::AlreadySettled,
            Some(RefundApplied::NotFound) | None => Reconciled::Skipped,
        };
        Ok((reconciled, false))
    }

    /// A succeeded refund can still fail: look it up again until the watch ends.
    async fn watch_refund(&self, refund: &Refund) -> Result<Reconciled, ReconcileError> {
        let age_ms = self.store.now_ms() - refund.created_at_ms;
        if age_ms > duration_ms(self.config.refund_watch) {
            self.store.stop_watching(refund).await?;
            return Ok(Reconciled::AlreadySettled);
        }
        let Some(request) = self.refund_request(refund).await? else {
            return Ok(Reconciled::Skipped);
        };
        let siblings = super::refund::StoredSiblings::of(&self.store, refund);
        match self.psp.lookup_refund_among(&request, &siblings).await? {
            Some(failed @ RefundSettlement::Failed { .. }) => {
                let expires_at_s = (self.store.now_ms()
                    + duration_ms(self.config.record_retention))
                .div_euclid(1000);
                let record = RefundRecordWrite::Mirror { expires_at_s };
                match apply_refund_settlement(
                    &self.store,
                    &refund.refund_id,
                    &failed,
                    record,
                    None,
                    None,
                    None,
                )
                .await?
                {
                    RefundApplied::Moved(_) => Ok(Reconciled::RefundFailed),
                    _ => Ok(Reconciled::AlreadySettled),
                }
            }
            _ => Ok(Reconciled::Pending),
        }
    }

    /// The PSP request of `refund`; `None` if the payment or its PSP id is missing.
    async fn refund_request(&self, refund: &Refund) -> Result<Option<RefundRequest>, StoreError> {
        let Some(payment) = self.store.get_payment(&refund.payment_id).await? else {
            return Ok(None);
        };
        let Some(charge) = payment.provider_payment_id.as_deref() else {
            return Ok(None);
        };
        Ok(Some(RefundRequest::for_refund(
            refund,
            charge,
            payment.amount_captured(),
        )))
    }

    /// The budget of the item a run takes up now.
    fn budget(&self) -> Budget {
        Budget {
            lease_until_ms: self.store.now_ms() + duration_ms(self.config.lease),
        }
    }

    /// Pushes the next check of an attempt (or refund) left pending back, by half its age
    /// within the configured bounds.
    async fn recheck_later(&self, payment_id: &str) {
        let (created_at_ms, recheck_max) = if is_refund_id(payment_id) {
            match self.store.get_refund(payment_id).await {
                Ok(Some(refund)) if refund.status == RefundStatus::Succeeded => {
                    (refund.created_at_ms, self.config.refund_watch_recheck_max)
                }
                Ok(Some(refund)) => (refund.created_at_ms, self.config.recheck_max),
                _ => return,
            }
        } else {
            match self.store.get_payment(payment_id).await {
                Ok(Some(payment)) => (payment.created_at_ms, self.config.recheck_max),
                _ => return,
            }
        };
        let now_ms = self.store.now_ms();
        let pause_ms = ((now_ms - created_at_ms) / 2).clamp(
            duration_ms(self.config.recheck_min),
            duration_ms(recheck_max),
        );
        if let Err(error) = self.store.defer_check(payment_id, now_ms + pause_ms).await {
            tracing::warn!(payment_id, error = %error, "could not defer the next check");
        }
    }

    /// A payment waiting for its customer or authorized that this run could not settle: its
    /// bounds still apply (`authorization-expiring`, `payment-stuck`), whatever stopped the run
    /// (a claim sent again without an answer, a look that failed).
    fn still_open(&self, payment: &Payment) -> Reconciled {
        let now_ms = self.store.now_ms();
        if payment.status == PaymentStatus::Authorized {
            warn_if_expiring(payment, now_ms);
            Reconciled::Pending
        } else {
            self.still_pending(payment, now_ms - payment.created_at_ms)
        }
    }

    fn still_pending(&self, payment: &Payment, age_ms: i64) -> Reconciled {
        if age_ms > duration_ms(self.config.stuck_alarm_after) {
            tracing::error!(payment_id = %payment.payment_id, age_ms, alarm = "payment-stuck", "attempt still processing at the PSP");
        }
        Reconciled::Pending
    }

    /// Takes a lapsed lease on the attempt's idempotency record (on its payment), so no client retry re-sends
    /// the charge while reconcile settles it; a live lease means a handler is at work.
    async fn take_lapsed_lease(
        &self,
        idempotency_pk: &str,
        attempt_id: &str,
        created_at_ms: i64,
        budget: &Budget,
    ) -> Result<LeaseTaken, StoreError> {
        let key = RecordKey::from_stored(idempotency_pk.to_owned());
        let Some(record) = self.store.charge_record(&key).await? else {
            return Ok(LeaseTaken::NoneNeeded);
        };
        let RecordState::InProgress { lease } = &record.state else {
            return Ok(LeaseTaken::NoneNeeded);
        };
        if record.attempt_id != attempt_id {
            return Ok(LeaseTaken::NoneNeeded);
        }
        let now_ms = self.store.now_ms();
        if lease.until_ms > now_ms {
            return Ok(LeaseTaken::HeldByOthers);
        }
        // A lease given back after a call that never connected stays given back while reconcile
        // only looks the attempt up: taking it would make it a lapsed lease, and the client's
        // retry would then have to assume an earlier call reached the PSP. Only a fence (past
        // `abandon_after`) needs it held.
        if lease.was_released() && now_ms - created_at_ms <= duration_ms(self.config.abandon_after)
        {
            return Ok(LeaseTaken::NoneNeeded);
        }
        let ours = Lease {
            token: LeaseToken::generate(),
            until_ms: budget.lease_until_ms,
        };
        match self
            .store
            .take_over_charge(&key, &lease.token, &ours)
            .await?
        {
            TakeoverOutcome::TakenOver(_) => Ok(LeaseTaken::Ours(ours.token)),
            TakeoverOutcome::Lost(_) => Ok(LeaseTaken::HeldByOthers),
        }
    }
}

/// What one item of a run may take: reconcile's lease on it lapses at `lease_until_ms`, and no
/// PSP call is started that could outlast it (a holder past its lease could meet another sender
/// at the PSP).
#[derive(Debug, Clone, Copy)]
struct Budget {
    lease_until_ms: i64,
}

impl Budget {
    /// The timeout of a PSP call started at `now_ms`, ending a reserve before the lease lapses;
    /// `None` when less than the reserve is left.
    fn call_timeout(&self, now_ms: i64, config: &ReconcileConfig) -> Option<Duration> {
        let reserve_ms = duration_ms(config.call_reserve);
        let left_ms = self.lease_until_ms - now_ms - reserve_ms;
        if left_ms <= 0 {
            return None;
        }
        let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
        Some(config.psp_timeout.min(left))
    }
}

enum LeaseTaken {
    Ours(LeaseToken),
    HeldByOthers,
    NoneNeeded,
}
