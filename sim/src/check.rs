//! The invariants checked after every run, once the system has settled: the PSP model's ledger
//! (what really happened to the customers' money) against our tables and what every shopper
//! was told.

use crate::face;
use crate::faults::FaultyStore;
use payonce::config::PspKind;
use payonce::domain::{
    FailureKind, OrderPaymentState, PaymentStatus, Refund, RefundReason, RefundStatus,
};
use payonce::ports::{ChargeStore, OrderStore, RefundStore};
use payonce::service::PayRequest;
use payonce_fake_psp::{FakeCharge, FakeRefund};
use std::collections::{BTreeMap, BTreeSet};

/// What a shopper was told by one POST /payments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 201, or a replay of it.
    Succeeded(String),
    /// 402 (declined, rejected, refused, abandoned).
    Failed(String),
    /// 202: still processing.
    Pending(String),
    /// 202 `requires_action`: the customer must authenticate at the PSP (the payment, and the
    /// fake's id of the charge, read from `next_action`'s URL: the page is keyed by it).
    Action(String, String),
    /// 201 `authorized`: held for staff to capture (final for the key manager).
    Authorized(String),
    /// 503: the PSP was not reached; nothing was charged.
    Unavailable,
    /// 409 key in use.
    InUse,
    /// 429 over the attempt limits (card testing): nothing was claimed or sent.
    Limited,
    /// 409 another attempt holds the order (processing, waiting for its customer, or
    /// authorized).
    OrderBusy,
    /// 409 the order is paid.
    OrderPaid,
    /// 409 the order moved to this version.
    Stale(i64),
    /// 5xx from the store.
    ServerError(String),
    /// The invocation died (no answer at all).
    Died,
    /// An answer no well-behaved shopper should ever get (422 mismatch, 404 on its own order).
    Wrong(String),
}

impl Answer {
    /// Whether the answer names an attempt (201, 402 or 202).
    pub fn names_attempt(&self) -> bool {
        matches!(
            self,
            Self::Succeeded(_)
                | Self::Failed(_)
                | Self::Pending(_)
                | Self::Action(..)
                | Self::Authorized(_)
        )
    }

    /// The payment the answer names, if it is final.
    fn final_payment(&self) -> Option<(&str, bool)> {
        match self {
            Self::Succeeded(id) => Some((id, true)),
            Self::Failed(id) => Some((id, false)),
            _ => None,
        }
    }
}

/// A capture or cancel one staff member (or a shopper) asked for, and what they were told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationAsked {
    /// `capture` or `cancel`.
    pub kind: payonce::domain::OperationKind,
    /// Who asked.
    pub who: String,
    /// The key.
    pub key: String,
    /// The payment.
    pub payment_id: String,
    /// A capture's amount, if one was asked.
    pub amount: Option<i64>,
}

/// What a capture or cancel was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operated {
    /// 201 captured this much (or 200 canceled, `None`).
    Done(Option<i64>),
    /// 202: the PSP's answer is unknown.
    Pending,
    /// 402 `capture-failed`.
    CaptureFailed,
    /// 409 `payment-not-capturable`, `payment-not-cancelable`, `capture-exceeds-authorized`.
    Refused,
    /// 409 key in use.
    InUse,
    /// 503: nothing was done.
    Unavailable,
    /// 5xx from the store.
    ServerError(String),
    /// The invocation died.
    Died,
    /// Anything else.
    Wrong(String),
}

impl Operated {
    /// Reads an answer.
    pub fn classify(status: u16, json: &serde_json::Value) -> Self {
        let problem = json["type"].as_str().unwrap_or_default();
        let is = |slug: &str| problem.ends_with(&format!("/{slug}"));
        match status {
            201 if json["status"] == "succeeded" => Self::Done(json["amount_captured"].as_i64()),
            200 if json["status"] == "canceled" => Self::Done(None),
            202 => Self::Pending,
            402 if is("capture-failed") => Self::CaptureFailed,
            409 if is("payment-not-capturable")
                || is("payment-not-cancelable")
                || is("capture-exceeds-authorized") =>
            {
                Self::Refused
            }
            409 if is("idempotency-key-in-use") => Self::InUse,
            503 if is("psp-unavailable") => Self::Unavailable,
            500..=599 => Self::ServerError(format!("{status} {problem}")),
            _ => Self::Wrong(format!("{status} {json}")),
        }
    }
}

/// What staff asked one refund key for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefundAsked {
    /// The payment refunded.
    pub payment_id: String,
    /// The amount asked, or everything left.
    pub amount: Option<i64>,
}

/// What staff were told by one POST /payments/{id}/refunds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refunded {
    /// 201 (or a replay of it).
    Succeeded(String),
    /// 402 `refund-failed`.
    Failed(String),
    /// 202: pending.
    Pending(String),
    /// 409 `refund-exceeds-remaining`.
    Exceeds,
    /// 503: the PSP was not reached; nothing was refunded.
    Unavailable,
    /// 409 `refund-not-supported`: the PSP cannot refund through payonce (2C2P); nothing was
    /// claimed or sent.
    NotSupported,
    /// 409 key in use.
    InUse,
    /// 5xx from the store.
    ServerError(String),
    /// The invocation died.
    Died,
    /// Anything else.
    Wrong(String),
}

impl Refunded {
    /// Reads an answer.
    pub fn classify(status: u16, json: &serde_json::Value) -> Self {
        let refund_id = json["refund_id"].as_str().map(str::to_owned);
        let problem = json["type"].as_str().unwrap_or_default();
        let is = |slug: &str| problem.ends_with(&format!("/{slug}"));
        match (status, refund_id) {
            (201, Some(id)) if json["status"] == "succeeded" => Self::Succeeded(id),
            (202, Some(id)) if json["status"] == "pending" => Self::Pending(id),
            (402, Some(id)) if is("refund-failed") => Self::Failed(id),
            (409, _) if is("refund-exceeds-remaining") => Self::Exceeds,
            (409, _) if is("refund-not-supported") => Self::NotSupported,
            (409, _) if is("idempotency-key-in-use") => Self::InUse,
            (503, _) if is("psp-unavailable") => Self::Unavailable,
            (500..=599, _) => Self::ServerError(format!("{status} {problem}")),
            (status, _) => Self::Wrong(format!("{status} {json}")),
        }
    }

    /// Whether the answer names a refund (201, 202 or 402).
    pub fn names_refund(&self) -> bool {
        matches!(
            self,
            Self::Succeeded(_) | Self::Failed(_) | Self::Pending(_)
        )
    }

    fn refund_id(&self) -> Option<&str> {
        match self {
            Self::Succeeded(id) | Self::Failed(id) | Self::Pending(id) => Some(id),
            _ => None,
        }
    }
}

/// Everything one refund key was told, in order.
#[derive(Clone, Debug)]
pub struct RefundHistory {
    /// What it asked (always the same).
    pub asked: RefundAsked,
    /// Every answer, in order.
    pub answers: Vec<Refunded>,
    /// The answer to the look after settling.
    pub settled: Option<Refunded>,
}

/// Everything one key was told, in order.
#[derive(Clone, Debug)]
pub struct KeyHistory {
    /// The request sent with the key (always the same one).
    pub request: PayRequest,
    /// Every answer, in the order they were given.
    pub answers: Vec<Answer>,
    /// The answer to the look after settling.
    pub settled: Option<Answer>,
}

/// What the run observed from the outside.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Every order created.
    pub orders: Vec<String>,
    /// Per (user, key): what it was told.
    pub keys: BTreeMap<(String, String), KeyHistory>,
    /// Per (staff, key): what a refund request was told.
    pub refund_keys: BTreeMap<(String, String), RefundHistory>,
    /// Per (event id, payment id): how often a webhook moved the payment.
    pub applied_events: BTreeMap<(String, String), u32>,
    /// Payment requests sent.
    pub requests: usize,
    /// 503 answers ("nothing was charged") given while the PSP already held a capture for the
    /// key's attempt: (user, key, payment id).
    pub false_unavailable: Vec<(String, String, String)>,
    /// Per (operation, user, key): the id of every request sent with the key, in order.
    pub request_ids: BTreeMap<(&'static str, String, String), Vec<String>>,
    /// Per (operation, user, key): the `instance` of the key's first replayed problem.
    pub replayed_instance: BTreeMap<(&'static str, String, String), String>,
    /// Answers that denied what their own request had written (its attempt or refund
    /// completed, yet answered otherwise).
    pub own_writes_denied: Vec<String>,
    /// Refund keys told 503 ("nothing was refunded"): (staff, key).
    pub refund_unavailable: Vec<(String, String)>,
    /// Problems whose `instance` broke the rule (a fresh one names its own request, a replayed
    /// one the key's original request, the same every time).
    pub wrong_instances: Vec<String>,
    /// Every capture and cancel answered, in order.
    pub operations: Vec<(OperationAsked, Operated)>,
    /// `next_action` pages the PSP did not know (404): a customer sent nowhere.
    pub unknown_pages: Vec<String>,
}

impl Observed {
    /// Notes that request `id` is about to be sent with `key` for `operation` (before it is
    /// sent: an invocation that dies may still have claimed the key).
    pub fn sending(&mut self, operation: &'static str, user: &str, key: &str, id: &str) {
        self.request_ids
            .entry((operation, user.to_owned(), key.to_owned()))
            .or_default()
            .push(id.to_owned());
    }

    /// Checks the `instance` of a problem answered to request `id` with `key`: this request's
    /// id when fresh; when replayed, the id of another request sent with the key (one sent
    /// at the same time may have claimed it first), the same for every replay of it.
    pub fn check_instance(
        &mut self,
        operation: &'static str,
        user: &str,
        key: &str,
        id: &str,
        replayed: bool,
        problem: &serde_json::Value,
    ) {
        let instance = problem["instance"].as_str().unwrap_or_default().to_owned();
        let slot = (operation, user.to_owned(), key.to_owned());
        let wrong = if !replayed {
            (instance != id)
                .then(|| format!("a fresh problem's instance {instance:?} is not its request {id}"))
        } else {
            let earlier = self
                .request_ids
                .get(&slot)
                .is_some_and(|ids| ids.iter().any(|sent| sent != id && *sent == instance));
            let first = self
                .replayed_instance
                .entry(slot)
                .or_insert_with(|| instance.clone());
            if !earlier {
                Some(format!(
                    "a replayed problem's instance {instance:?} is no other request with the key"
                ))
            } else if *first != instance {
                Some(format!(
                    "replayed problems name {first:?}, then {instance:?}"
                ))
            } else {
                None
            }
        };
        if let Some(wrong) = wrong {
            self.wrong_instances.push(format!(
                "invariant 4: {operation} key {user}/{key}: {wrong} ({})",
                problem["type"]
            ));
        }
    }
}

impl Observed {
    /// Records a refund answer to `key`; `settled` marks the look after settling.
    pub fn record_refund(
        &mut self,
        staff: &str,
        key: &str,
        asked: &RefundAsked,
        answer: Refunded,
        settled: bool,
    ) {
        let history = self
            .refund_keys
            .entry((staff.to_owned(), key.to_owned()))
            .or_insert_with(|| RefundHistory {
                asked: asked.clone(),
                answers: Vec::new(),
                settled: None,
            });
        if settled {
            history.settled = Some(answer);
        } else {
            history.answers.push(answer);
        }
    }

    /// Records an answer to `key`; `settled` marks the look after settling.
    pub fn record(
        &mut self,
        user: &str,
        key: &str,
        request: &PayRequest,
        answer: Answer,
        settled: bool,
    ) {
        self.requests += 1;
        let history = self
            .keys
            .entry((user.to_owned(), key.to_owned()))
            .or_insert_with(|| KeyHistory {
                request: request.clone(),
                answers: Vec::new(),
                settled: None,
            });
        if settled {
            history.settled = Some(answer);
        } else {
            history.answers.push(answer);
        }
    }
}

/// What the world looks like once the system has settled, besides our tables.
#[derive(Debug)]
pub struct Settled<'a> {
    /// The PSP the run used.
    pub psp: PspKind,
    /// Whether payonce refunds through it (2C2P: with its maintenance keys).
    pub refunds_through_payonce: bool,
    /// Every charge the PSP model made.
    pub ledger: &'a [FakeCharge],
    /// Every refund the PSP model made.
    pub refunds: &'a [FakeRefund],
    /// The payments reconcile raised `payment-unprovable` for.
    pub unprovable_alarms: BTreeSet<String>,
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Broken invariants.
    pub violations: Vec<String>,
    /// Payments left `processing` for an operator, by design (see the `left_to_operator` check).
    pub left_to_operator: BTreeSet<String>,
}

/// The attempts the liveness invariant (3) exempts: those payonce hands to an operator by design.
///
/// Why: when a create's outcome is unknown (the call connected, then timed out, was cut, or was
/// answered 5xx, 409 or 429) and the PSP never recorded the charge, reconcile finds nothing by
/// lookup and must prove the key unused before it may release the order — else a late charge
/// under the key could capture money for an order payonce already gave up on. Stripe proves it
/// with its fence (a `confirm=false` create under the key), 2C2P by taking the invoice's only
/// payment token; Omise offers no such proof (`Fence::Unprovable`), so reconcile raises the
/// `payment-unprovable` alarm and leaves the attempt `processing` for an operator, and its order
/// held by it. That is the promised behaviour, not a stuck payment.
///
/// Exactly that case, and nothing else: the PSP's adapter has no fence (never Stripe or 2C2P,
/// whose stuck attempts stay violations whatever alarm they raised), reconcile raised the alarm
/// for this very payment, the payment is still `processing`, and the PSP's ledger holds no
/// charge for it at all (a charge it holds, in any state, is one a lookup must find and settle).
fn left_to_operator(
    settled: &Settled<'_>,
    payments: &[payonce::domain::Payment],
    intents_of: &BTreeMap<&str, Vec<&FakeCharge>>,
) -> BTreeSet<String> {
    if face::fence_proves_unused(settled.psp) {
        return BTreeSet::new();
    }
    payments
        .iter()
        .filter(|p| p.status == PaymentStatus::Processing)
        .filter(|p| settled.unprovable_alarms.contains(&p.payment_id))
        .filter(|p| !intents_of.contains_key(p.payment_id.as_str()))
        .map(|p| p.payment_id.clone())
        .collect()
}

/// Checks the five invariants; returns what is broken.
pub async fn check(store: &FaultyStore, observed: &Observed, settled: &Settled<'_>) -> Checked {
    let (ledger, psp_refunds) = (settled.ledger, settled.refunds);
    let mut violations = Vec::new();
    let inner = store.inner();
    let begun = store.begun();
    let ours: BTreeMap<&str, &payonce::domain::Payment> =
        begun.iter().map(|p| (p.payment_id.as_str(), p)).collect();
    // Every refund of ours, by id.
    let mut our_refunds: BTreeMap<String, Refund> = BTreeMap::new();
    for payment in &begun {
        if let Ok(Some(stored)) = inner.get_payment(&payment.payment_id).await {
            for refund in inner.refunds_of(&stored).await.unwrap_or_default() {
                our_refunds.insert(refund.refund_id.clone(), refund);
            }
        }
    }
    let (ledger, psp_refunds) = &twoc2p_view(ledger, psp_refunds, &our_refunds);
    let (ledger, psp_refunds) = (ledger.as_slice(), psp_refunds.as_slice());
    violations.extend(check_refunds(inner, &begun, &our_refunds, psp_refunds, ledger).await);
    violations.extend(check_operations(observed, ledger));
    if !settled.refunds_through_payonce {
        violations.extend(check_no_refunds(observed, &our_refunds, psp_refunds));
    }
    let refunded_as_duplicate = |payment_id: &str| {
        our_refunds.values().any(|r| {
            r.payment_id == payment_id
                && r.reason == Some(RefundReason::Duplicate)
                && r.number == payonce::domain::DUPLICATE_REFUND_NUMBER
        })
    };
    let psp_refunded = |payment_id: &str| -> i64 {
        psp_refunds
            .iter()
            .filter(|r| r.payment_id.as_deref() == Some(payment_id) && r.outcome == "succeeded")
            .map(|r| r.amount)
            .sum()
    };

    // 2. Every PSP charge belongs to exactly one of our payments (one intent per attempt key).
    // Charges are compared by `outcome` (the money, in the same words on every face) and belong
    // to a payment by `payment_id` (Stripe's and Omise's metadata, 2C2P's invoice number).
    let mut intents_of: BTreeMap<&str, Vec<&FakeCharge>> = BTreeMap::new();
    for charge in ledger {
        match &charge.payment_id {
            Some(id) if ours.contains_key(id.as_str()) => {
                intents_of.entry(id.as_str()).or_default().push(charge)
            }
            other => violations.push(format!(
                "invariant 2: PSP intent {} names no payment of ours ({other:?})",
                charge.id
            )),
        }
    }
    for (payment_id, intents) in &intents_of {
        if intents.len() > 1 {
            violations.push(format!(
                "invariant 2: payment {payment_id} has {} PSP intents",
                intents.len()
            ));
        }
    }
    let mut stored_payments = Vec::new();
    for payment in &begun {
        if let Ok(Some(stored)) = inner.get_payment(&payment.payment_id).await {
            stored_payments.push(stored);
        }
    }
    let left_to_operator = left_to_operator(settled, &stored_payments, &intents_of);

    // 2b. A payment that names its PSP payment names the one the PSP holds for it: the intent or
    // charge id on Stripe and Omise, the invoice number on 2C2P (whose `tranRef` some answers
    // lack). Two answers naming it differently would refuse the later one for ever.
    for payment in &stored_payments {
        let (Some(stored_id), Some(intents)) = (
            payment.provider_payment_id.as_deref(),
            intents_of.get(payment.payment_id.as_str()),
        ) else {
            continue;
        };
        let named = |charge: &FakeCharge| match settled.psp {
            PspKind::TwoC2p => charge.invoice_no.clone(),
            _ => Some(charge.id.clone()),
        };
        if !intents
            .iter()
            .any(|c| named(c).as_deref() == Some(stored_id))
        {
            violations.push(format!(
                "invariant 2: payment {} names PSP payment {stored_id:?}, which is none of its charges ({:?})",
                payment.payment_id,
                intents.iter().map(|c| named(c)).collect::<Vec<_>>()
            ));
        }
    }

    // 1, 3. Money: per order, paid iff exactly one capture; per payment, our state is the PSP's.
    for order_id in &observed.orders {
        let Ok(Some(stored)) = inner.get_order(order_id).await else {
            violations.push(format!("order {order_id} is missing"));
            continue;
        };
        // Only a charge's own finish may leave its order stored `processing` under a success:
        // any other path that records one (reconcile's takeover, a webhook) holds no lease that
        // reserved the order, and makes it follow.
        if stored.payment_state == OrderPaymentState::Processing {
            if let Some(holder) = stored.payment_id.as_deref() {
                let succeeded = inner
                    .get_payment(holder)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|p| p.status == PaymentStatus::Succeeded);
                if succeeded && !store.left_by_charge().contains(holder) {
                    violations.push(format!(
                        "invariant 1: order {order_id} is stored processing under {holder}, a success its own charge did not finish"
                    ));
                }
            }
        }
        // As every reader sees it: stored `processing` under the attempt that paid it is paid.
        let Ok(order) = payonce::service::orders::settled(inner, stored).await else {
            violations.push(format!("order {order_id}: its holder is unreadable"));
            continue;
        };
        let payments: Vec<_> = begun.iter().filter(|p| &p.order_id == order_id).collect();
        let captured: Vec<&str> = payments
            .iter()
            .filter(|p| {
                intents_of
                    .get(p.payment_id.as_str())
                    .is_some_and(|intents| intents.iter().any(|i| i.outcome == "succeeded"))
            })
            .map(|p| p.payment_id.as_str())
            .collect();
        // A second capture must be refunded as a duplicate in full (or its automatic refund
        // failed at the PSP, which leaves it to an operator with an alarm).
        let (duplicates, kept): (Vec<&str>, Vec<&str>) =
            captured.iter().partition(|id| refunded_as_duplicate(id));
        // Where the PSP cannot refund, a second capture is marked for an operator instead.
        let (kept, refund_required): (Vec<&str>, Vec<&str>) = kept.into_iter().partition(|id| {
            !stored_payments
                .iter()
                .any(|p| p.payment_id == *id && p.refund_required)
        });
        if !refund_required.is_empty() && settled.refunds_through_payonce {
            violations.push(format!(
                "invariant 1: order {order_id}: {refund_required:?} marked refund-required, though the PSP refunds"
            ));
        }
        for id in &duplicates {
            let payment_amount = ours.get(id).map_or(0, |p| p.amount);
            let dup_failed = our_refunds.values().any(|r| {
                r.payment_id == *id
                    && r.number == payonce::domain::DUPLICATE_REFUND_NUMBER
                    && r.status == RefundStatus::Failed
            });
            if psp_refunded(id) < payment_amount && !dup_failed {
                violations.push(format!(
                    "invariant 1: duplicate capture {id} of order {order_id} is refunded {} of {payment_amount}",
                    psp_refunded(id)
                ));
            }
        }
        let captured = kept;
        if captured.len() > 1 {
            violations.push(format!(
                "invariant 1: order {order_id} was charged {} times: {captured:?}",
                captured.len()
            ));
        }
        match (order.payment_state, captured.as_slice()) {
            (OrderPaymentState::Paid, [one]) if order.payment_id.as_deref() == Some(*one) => {}
            (OrderPaymentState::Unpaid, []) => {}
            // Held by an attempt left to an operator: it stays held until one settles it.
            (OrderPaymentState::Processing, [])
                if order
                    .payment_id
                    .as_ref()
                    .is_some_and(|id| left_to_operator.contains(id)) => {}
            (state, _) => violations.push(format!(
                "invariant 1: order {order_id} is {} (payment {:?}) but the PSP captured {captured:?}",
                state.as_str(),
                order.payment_id
            )),
        }
        for begun_payment in payments {
            let id = begun_payment.payment_id.as_str();
            let Ok(Some(payment)) = inner.get_payment(id).await else {
                violations.push(format!("payment {id} is missing"));
                continue;
            };
            let intent = intents_of.get(id).and_then(|i| i.first());
            let psp = intent.map_or("none", |i| i.outcome.as_str());
            let agrees = match payment.status {
                PaymentStatus::Processing if left_to_operator.contains(id) => continue,
                PaymentStatus::Processing
                | PaymentStatus::RequiresAction
                | PaymentStatus::Authorized => {
                    violations.push(format!(
                        "invariant 3: payment {id} ({}) still {} after settling (PSP: {psp})",
                        payment.payment_method,
                        payment.status.as_str()
                    ));
                    continue;
                }
                // Nothing captured at the PSP, nor can be: the PSP canceled it (or never ran it).
                PaymentStatus::Canceled => matches!(psp, "canceled" | "failed" | "none"),
                // A manual capture's amount is known once settled: refunds are bounded by it.
                PaymentStatus::Succeeded => {
                    psp == "succeeded"
                        && (payment.capture != payonce::domain::CaptureMethod::Manual
                            || payment.progress.amount_captured
                                == intent.and_then(|i| i.amount_captured))
                }
                PaymentStatus::Failed => match payment.failure.as_ref().map(|f| f.kind) {
                    // A decline leaves the charge failed (Stripe: back to
                    // `requires_payment_method` after a failed attempt); PayPal makes no order
                    // for an instrument it declines at the create (422 INSTRUMENT_DECLINED).
                    Some(FailureKind::Declined) => {
                        psp == "failed" || (settled.psp == PspKind::PayPal && psp == "none")
                    }
                    // Proven never run: nothing at the PSP, or its own cancel. On 2C2P also a
                    // challenge the inquiry did not know (`2002`) when the fence asked, whose
                    // page nobody was ever sent to: it lapses, failed, nothing paid. On Square a
                    // payment that failed by itself before the fence canceled by its key (which
                    // voids what is approved and finds nothing else to do): nothing paid.
                    Some(FailureKind::Abandoned) => {
                        matches!(psp, "none" | "canceled")
                            || (matches!(settled.psp, PspKind::TwoC2p | PspKind::Square)
                                && psp == "failed")
                    }
                    _ => psp != "succeeded",
                },
            };
            if !agrees {
                violations.push(format!(
                    "invariant 1: payment {id} is {} ({:?}) but the PSP says {psp}",
                    payment.status.as_str(),
                    payment.failure.as_ref().map(|f| f.kind)
                ));
            }
        }
    }

    // 4. Every shopper's answers agree with the stored state, and replays never contradict.
    for ((user, key), history) in &observed.keys {
        let finals: Vec<(&str, bool)> = history
            .answers
            .iter()
            .chain(history.settled.iter())
            .filter_map(Answer::final_payment)
            .collect();
        if let Some((first_id, _)) = finals.first() {
            if finals.iter().any(|(id, _)| id != first_id) {
                violations.push(format!(
                    "invariant 4: key {user}/{key} named several payments: {finals:?}"
                ));
            }
        }
        if finals.windows(2).any(|w| w[0].1 && !w[1].1) {
            violations.push(format!(
                "invariant 4: key {user}/{key} was told succeeded, then failed"
            ));
        }
        for answer in history.answers.iter().chain(history.settled.iter()) {
            if let Answer::Wrong(what) = answer {
                violations.push(format!("invariant 4: key {user}/{key} was answered {what}"));
            }
        }
        match &history.settled {
            Some(Answer::Succeeded(id) | Answer::Failed(id)) => {
                let stored = inner.get_payment(id).await.ok().flatten();
                let told_success = matches!(history.settled, Some(Answer::Succeeded(_)));
                let is_success = stored
                    .as_ref()
                    .is_some_and(|p| p.status == PaymentStatus::Succeeded);
                if told_success != is_success {
                    violations.push(format!(
                        "invariant 4: key {user}/{key} is answered {:?} but payment {id} is {:?}",
                        history.settled,
                        stored.map(|p| p.status)
                    ));
                }
            }
            Some(Answer::Action(id, _) | Answer::Authorized(id)) => violations.push(format!(
                "invariant 3: key {user}/{key} still answers {:?} for {id} after settling",
                history.settled
            )),
            Some(Answer::Pending(id)) if left_to_operator.contains(id) => {}
            Some(Answer::Pending(id)) => violations.push(format!(
                "invariant 3: key {user}/{key} still answers processing for {id} after settling"
            )),
            Some(other) => violations.push(format!(
                "invariant 4: key {user}/{key} named an attempt, yet after settling it answers {other:?}"
            )),
            None => {}
        }
        // A 503 promised nothing was charged under that attempt.
        if history.answers.last() == Some(&Answer::Unavailable) {
            let attempt = begun
                .iter()
                .find(|p| p.idempotency_pk.ends_with(&format!("#{user}#{key}")));
            if let Some(p) = attempt {
                if intents_of
                    .get(p.payment_id.as_str())
                    .is_some_and(|i| i.iter().any(|c| c.outcome == "succeeded"))
                {
                    violations.push(format!(
                        "invariant 4: key {user}/{key} was told nothing was charged, but payment {} was",
                        p.payment_id
                    ));
                }
            }
        }
    }

    violations.extend(observed.wrong_instances.iter().cloned());
    violations.extend(observed.own_writes_denied.iter().cloned());
    violations.extend(observed.unknown_pages.iter().cloned());

    for (user, key, payment_id) in &observed.false_unavailable {
        violations.push(format!(
            "invariant 4: key {user}/{key} was told nothing was charged while payment {payment_id} was captured"
        ));
    }

    // 4. Refund keys: one refund per key, and the look after settling agrees with the store.
    for ((staff, key), history) in &observed.refund_keys {
        let named: Vec<&str> = history
            .answers
            .iter()
            .chain(history.settled.iter())
            .filter_map(Refunded::refund_id)
            .collect();
        if named.windows(2).any(|w| w[0] != w[1]) {
            violations.push(format!(
                "invariant 4: refund key {staff}/{key} named several refunds: {named:?}"
            ));
        }
        for answer in history.answers.iter().chain(history.settled.iter()) {
            if let Refunded::Wrong(what) = answer {
                violations.push(format!(
                    "invariant 4: refund key {staff}/{key} was answered {what}"
                ));
            }
        }
        match &history.settled {
            Some(Refunded::Pending(id)) => violations.push(format!(
                "invariant 3: refund key {staff}/{key} still answers pending for {id} after settling"
            )),
            Some(answer @ (Refunded::Succeeded(id) | Refunded::Failed(id))) => {
                let stored = our_refunds.get(id.as_str()).map(|r| r.status);
                let agrees = match answer {
                    Refunded::Succeeded(_) => stored == Some(RefundStatus::Succeeded),
                    _ => matches!(stored, Some(RefundStatus::Failed | RefundStatus::Canceled)),
                };
                if !agrees {
                    violations.push(format!(
                        "invariant 4: refund key {staff}/{key} answers {answer:?} but refund {id} is {stored:?}"
                    ));
                }
            }
            Some(other) => violations.push(format!(
                "invariant 4: refund key {staff}/{key} named a refund, yet after settling it answers {other:?}"
            )),
            None => {}
        }
    }

    // 4. A 503 to a refund promised that nothing was refunded under the refund it gave up, for
    // ever: the PSP holds no refund for any refund canceled under that key.
    for (staff, key) in &observed.refund_unavailable {
        let record = format!("#{staff}#{key}");
        for refund in our_refunds.values().filter(|r| {
            r.status == RefundStatus::Canceled
                && r.idempotency_pk
                    .as_deref()
                    .is_some_and(|pk| pk.ends_with(&record))
        }) {
            let held = psp_refunds
                .iter()
                .any(|r| r.refund_id.as_deref() == Some(refund.refund_id.as_str()));
            if held {
                violations.push(format!(
                    "invariant 4: refund key {staff}/{key} was told nothing was refunded, but the PSP holds refund {} of it",
                    refund.refund_id
                ));
            }
        }
    }

    // 5. Each webhook event is marked processed at most once (with its effect, or as changing
    // nothing), and moves a payment at most once.
    for (event_id, times) in store.event_marks() {
        if times > 1 {
            violations.push(format!(
                "invariant 5: event {event_id} was processed {times} times"
            ));
        }
    }
    for ((event_id, payment_id), times) in &observed.applied_events {
        if *times > 1 {
            violations.push(format!(
                "invariant 5: event {event_id} moved payment {payment_id} {times} times"
            ));
        }
    }
    Checked {
        violations,
        left_to_operator,
    }
}

/// The ledger as the invariants read it, on 2C2P: 2C2P's refunds carry none of our ids, so each
/// is ours whose stored `provider_refund_id` is its reference (one that none is stays unnamed,
/// a violation); and a charge voided by a refund of ours (`void-<invoice>`, 2C2P voids before
/// settlement instead of refunding) reads as captured and then refunded whole — only if the
/// model's charge really is canceled, else the refund's claim stays unmatched, a violation.
fn twoc2p_view(
    ledger: &[FakeCharge],
    psp_refunds: &[FakeRefund],
    ours: &BTreeMap<String, Refund>,
) -> (Vec<FakeCharge>, Vec<FakeRefund>) {
    let mut ledger = ledger.to_vec();
    let mut refunds = psp_refunds.to_vec();
    for refund in refunds.iter_mut().filter(|r| r.provider == "2c2p") {
        if refund.refund_id.is_none() {
            refund.refund_id = ours
                .values()
                .find(|o| o.provider_refund_id.as_deref() == Some(refund.id.as_str()))
                .map(|o| o.refund_id.clone());
        }
    }
    for charge in ledger.iter_mut().filter(|c| c.provider == "2c2p") {
        // 2C2P's charges are captured whole when they succeed (manual captures need the
        // maintenance API's settle, which payonce does not send).
        if charge.outcome == "succeeded" && charge.amount_captured.is_none() {
            charge.amount_captured = Some(charge.amount);
        }
        let Some(payment_id) = charge.payment_id.clone() else {
            continue;
        };
        let void = ours.values().find(|o| {
            o.payment_id == payment_id
                && o.status == RefundStatus::Succeeded
                && o.provider_refund_id
                    .as_deref()
                    .is_some_and(|id| id.starts_with("void-"))
        });
        if let (Some(void), "canceled") = (void, charge.outcome.as_str()) {
            charge.outcome = "succeeded".to_owned();
            charge.amount_captured = Some(charge.amount);
            refunds.push(FakeRefund {
                provider: charge.provider.clone(),
                id: void.provider_refund_id.clone().unwrap_or_default(),
                outcome: "succeeded".to_owned(),
                status: "V".to_owned(),
                amount: charge.amount,
                currency: charge.currency.clone(),
                payment_intent: charge.id.clone(),
                charge: None,
                reason: None,
                failure_reason: None,
                metadata: BTreeMap::new(),
                payment_id: Some(payment_id),
                refund_id: Some(void.refund_id.clone()),
                idempotency_key: None,
                created: charge.created,
                invoice_no: charge.invoice_no.clone(),
            });
        }
    }
    (ledger, refunds)
}

/// Where the PSP cannot refund: every refund request is refused `refund-not-supported` before
/// anything is claimed, so no refund of ours exists, none is pending, and the PSP made none.
fn check_no_refunds(
    observed: &Observed,
    ours: &BTreeMap<String, Refund>,
    psp_refunds: &[FakeRefund],
) -> Vec<String> {
    let mut violations = Vec::new();
    for ((staff, key), history) in &observed.refund_keys {
        for answer in history.answers.iter().chain(history.settled.iter()) {
            if *answer != Refunded::NotSupported {
                violations.push(format!(
                    "invariant 4: refund key {staff}/{key} was answered {answer:?} by a PSP without refunds"
                ));
            }
        }
    }
    for (id, refund) in ours {
        violations.push(format!(
            "invariant 1: refund {id} ({}) exists although the PSP cannot refund",
            refund.status.as_str()
        ));
    }
    for refund in psp_refunds {
        violations.push(format!(
            "invariant 2: the PSP made refund {} although payonce cannot refund through it",
            refund.id
        ));
    }
    violations
}

/// Refunds against the PSP's ledger: every PSP refund is one of ours (never a canceled one),
/// our refund states are the PSP's, and each payment's refunded amount is what the PSP refunded.
async fn check_refunds(
    inner: &payonce::adapters::memory::MemoryPaymentStore,
    begun: &[payonce::domain::Payment],
    ours: &BTreeMap<String, Refund>,
    psp_refunds: &[FakeRefund],
    ledger: &[FakeCharge],
) -> Vec<String> {
    let mut violations = Vec::new();
    // 2. Every PSP refund belongs to exactly one refund of ours.
    let mut at_psp: BTreeMap<&str, Vec<&FakeRefund>> = BTreeMap::new();
    for refund in psp_refunds {
        match refund.refund_id.as_deref() {
            Some(id) if ours.contains_key(id) => at_psp.entry(id).or_default().push(refund),
            other => violations.push(format!(
                "invariant 2: PSP refund {} names no refund of ours ({other:?})",
                refund.id
            )),
        }
    }
    for (id, refunds) in &at_psp {
        if refunds.len() > 1 {
            violations.push(format!(
                "invariant 2: refund {id} has {} PSP refunds",
                refunds.len()
            ));
        }
    }
    // 2. No two refunds of ours hold one PSP refund (a PSP whose refunds carry none of our ids
    // is matched by the reference each refund stored).
    let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for refund in ours.values() {
        if let Some(id) = refund.provider_refund_id.as_deref() {
            holders
                .entry(id)
                .or_default()
                .push(refund.refund_id.as_str());
        }
    }
    for (id, refunds) in holders.iter().filter(|(_, refunds)| refunds.len() > 1) {
        violations.push(format!(
            "invariant 2: PSP refund {id} is held by {} refunds of ours: {refunds:?}",
            refunds.len()
        ));
    }
    // 1, 3. Each refund's state is the PSP's (its `outcome`: Omise says `closed` for a refund
    // that succeeded); nothing stays pending.
    for (id, refund) in ours {
        let psp = at_psp
            .get(id.as_str())
            .and_then(|r| r.first())
            .map(|r| r.outcome.as_str());
        let agrees = match refund.status {
            RefundStatus::Pending => {
                violations.push(format!(
                    "invariant 3: refund {id} still pending after settling (PSP: {psp:?})"
                ));
                continue;
            }
            RefundStatus::Succeeded => psp == Some("succeeded"),
            // Failed at the PSP, or refused by it (then it holds none).
            RefundStatus::Failed => matches!(psp, Some("failed") | None),
            RefundStatus::Canceled => psp.is_none(),
        };
        if !agrees {
            violations.push(format!(
                "invariant 1: refund {id} is {} but the PSP says {psp:?}",
                refund.status.as_str()
            ));
        }
    }
    // 1. Per payment: refunded = the PSP's succeeded refunds ≤ the capture; nothing reserved.
    for payment in begun {
        let Ok(Some(stored)) = inner.get_payment(&payment.payment_id).await else {
            continue;
        };
        let psp_refunded: i64 = psp_refunds
            .iter()
            .filter(|r| r.payment_id.as_deref() == Some(payment.payment_id.as_str()))
            .filter(|r| r.outcome == "succeeded")
            .map(|r| r.amount)
            .sum();
        // What the PSP captured of it (the whole amount of an automatic capture).
        let captured: i64 = ledger
            .iter()
            .filter(|c| c.payment_id.as_deref() == Some(payment.payment_id.as_str()))
            .filter_map(|c| c.amount_captured)
            .sum();
        if psp_refunded > captured {
            violations.push(format!(
                "invariant 1: payment {} was refunded {psp_refunded} of the {captured} captured",
                stored.payment_id
            ));
        }
        if stored.amount_refunded != psp_refunded || stored.refund_pending != 0 {
            violations.push(format!(
                "invariant 1: payment {} shows refunded {} and pending {} but the PSP refunded {psp_refunded}",
                stored.payment_id, stored.amount_refunded, stored.refund_pending
            ));
        }
    }
    violations
}

/// Invariant 6, captures and cancels: at the PSP, at most one capture per charge and never more
/// than it authorized, each under the key derived from the payment (a cancel with a key, too;
/// Square takes no key for either, and its fence cancels by the charge's key); and every capture
/// or cancel answered done is what the PSP holds.
fn check_operations(observed: &Observed, ledger: &[FakeCharge]) -> Vec<String> {
    use payonce::domain::OperationKind;
    let mut violations = Vec::new();
    for charge in ledger {
        let Some(payment_id) = charge.payment_id.as_deref() else {
            continue;
        };
        if charge.captures.len() > 1 {
            violations.push(format!(
                "invariant 6: payment {payment_id} was captured {} times at the PSP: {:?}",
                charge.captures.len(),
                charge.captures
            ));
        }
        let captured: i64 = charge.captures.iter().map(|c| c.amount).sum();
        if captured > charge.amount {
            violations.push(format!(
                "invariant 6: payment {payment_id} was captured {captured} of the {} authorized",
                charge.amount
            ));
        }
        let capture_key = OperationKind::Capture.psp_key(payment_id);
        let cancel_key = OperationKind::Cancel.psp_key(payment_id);
        // The key of a claim: the payment's, with `-<n>` for claims after a released one.
        let derived = |key: Option<&str>, base: &str| {
            key.is_some_and(|key| {
                key == base
                    || key
                        .strip_prefix(base)
                        .and_then(|rest| rest.strip_prefix('-'))
                        .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n > 1))
            })
        };
        // Square completes and cancels a payment without a key (each is one state change of
        // it); its fence cancels by the charge's own key.
        let keyless = charge.provider == "square";
        let fence_key = payonce::adapters::psp::square::charge_key(payment_id);
        for capture in &charge.captures {
            if keyless && capture.idempotency_key.is_none() {
                continue;
            }
            if !derived(capture.idempotency_key.as_deref(), &capture_key) {
                violations.push(format!(
                    "invariant 6: payment {payment_id} was captured under {:?}, not {capture_key}",
                    capture.idempotency_key
                ));
            }
        }
        for cancel in &charge.cancels {
            if let Some(key) = &cancel.idempotency_key {
                if !(derived(Some(key), &cancel_key) || keyless && *key == fence_key) {
                    violations.push(format!(
                        "invariant 6: payment {payment_id} was canceled under {key}, not {cancel_key}"
                    ));
                }
            }
        }
    }
    for (asked, answer) in &observed.operations {
        let charge = ledger
            .iter()
            .find(|c| c.payment_id.as_deref() == Some(asked.payment_id.as_str()));
        let agrees = match (asked.kind, answer) {
            (OperationKind::Capture, Operated::Done(amount)) => charge.is_some_and(|c| {
                c.outcome == "succeeded" && amount.is_none_or(|a| c.amount_captured == Some(a))
            }),
            // A cancel answered done: the PSP holds nothing that can still be captured (a
            // charge it canceled, or one that ended failed, such as a buyer's order that lapsed
            // and that payonce then canceled).
            (OperationKind::Cancel, Operated::Done(_)) => {
                charge.is_some_and(|c| c.outcome == "canceled" || c.outcome == "failed")
            }
            (_, Operated::Wrong(_)) => false,
            _ => true,
        };
        if !agrees {
            violations.push(format!(
                "invariant 6: {} {}/{} of {} was answered {answer:?}, but the PSP holds {:?}",
                asked.kind.as_str(),
                asked.who,
                asked.key,
                asked.payment_id,
                charge.map(|c| (&c.outcome, c.amount_captured))
            ));
        }
    }
    violations
}
