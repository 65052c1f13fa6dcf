//! Refunds: money going back, and the one refund transition function every path uses (the
//! refund API, webhooks, reconcile). A refund's amount is reserved on its payment while it is
//! pending, so refunds with different keys can never add up past the captured amount.

use super::money::Currency;
use super::payment::{Payment, PaymentStatus};
use serde::{Deserialize, Serialize};

/// The refund number of the automatic refund of a late duplicate charge.
pub const DUPLICATE_REFUND_NUMBER: &str = "dup";

/// A refund that succeeded can still fail later (the bank returns the money), and a lost
/// webhook must not hide that: reconcile keeps looking at a succeeded refund for a while, the
/// first time this long after it succeeded.
pub const WATCH_FIRST_CHECK_MS: i64 = 10 * 60 * 1000;

/// Where a refund stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundStatus {
    /// Claimed (its amount reserved on the payment); the PSP's outcome is not known yet.
    Pending,
    /// The PSP refunded the money.
    Succeeded,
    /// The PSP failed the refund (at once, or later after reading `succeeded`).
    Failed,
    /// Given up without reaching the PSP; its amount is free again.
    Canceled,
}

impl RefundStatus {
    /// Stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Pending, Self::Succeeded, Self::Failed, Self::Canceled]
            .into_iter()
            .find(|s| s.as_str() == raw)
    }
}

/// Why a refund is made (the PSP's vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundReason {
    /// The customer asked.
    RequestedByCustomer,
    /// The customer was charged twice (the automatic refund of a late duplicate uses it).
    Duplicate,
    /// The charge was fraudulent.
    Fraudulent,
}

impl RefundReason {
    /// Stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestedByCustomer => "requested_by_customer",
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::RequestedByCustomer, Self::Duplicate, Self::Fraudulent]
            .into_iter()
            .find(|r| r.as_str() == raw)
    }
}

/// A refund, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refund {
    /// `rfd_<payment hex>_<number>`: derived from the payment and the refund's number.
    pub refund_id: String,
    /// The payment refunded.
    pub payment_id: String,
    /// `1`, `2`, ... in the order refunds were claimed on the payment, or `dup`.
    pub number: String,
    /// Minor units.
    pub amount: i64,
    /// The payment's currency.
    pub currency: Currency,
    /// Why, if given.
    pub reason: Option<RefundReason>,
    /// Current status.
    pub status: RefundStatus,
    /// The PSP's id for the refund (`re_...`), once known.
    pub provider_refund_id: Option<String>,
    /// The PSP's failure reason, when failed.
    pub failure_code: Option<String>,
    /// The idempotency record that created it; none for the automatic refund of a duplicate.
    pub idempotency_pk: Option<String>,
    /// Whether a call under the refund's PSP key may have reached the PSP (see
    /// [`Payment::psp_maybe_reached`]).
    pub psp_maybe_reached: bool,
    /// The sender's lease: whoever may call the PSP under the refund's key holds it (the staff
    /// request that claimed it, the one that took it over, or reconcile), and every write about
    /// the PSP's answer is fenced on it. None while nobody is sending.
    pub lease: Option<SenderLease>,
    /// Epoch milliseconds.
    pub created_at_ms: i64,
    /// Epoch milliseconds of the last change.
    pub updated_at_ms: i64,
    /// While pending, and for a while once succeeded (it may still fail): when reconcile should
    /// next look at it (epoch milliseconds).
    pub check_at_ms: i64,
}

/// The lease of a refund's sender: the token of the lease its holder proves, and when it lapses
/// (epoch milliseconds). The token is the holder's idempotency lease token, kept here as text
/// so the domain depends on nothing outside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderLease {
    /// The holder's lease token.
    pub token: String,
    /// Epoch milliseconds after which another sender may take the refund over.
    pub until_ms: i64,
}

impl SenderLease {
    /// The lease held under `token` until `until_ms`.
    pub fn new(token: &str, until_ms: i64) -> Self {
        Self {
            token: token.to_owned(),
            until_ms,
        }
    }

    /// Whether `token` is this lease's.
    pub fn is(&self, token: &str) -> bool {
        self.token == token
    }
}

/// A refund as the API shows it; also the mirror stored on its idempotency record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundView {
    /// Id.
    pub refund_id: String,
    /// The payment refunded.
    pub payment_id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// pending / succeeded / failed / canceled.
    pub status: RefundStatus,
    /// Why, if given.
    pub reason: Option<RefundReason>,
    /// The PSP's id, once known.
    pub provider_refund_id: Option<String>,
    /// The PSP's failure reason, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
}

/// The id of refund `number` of `payment_id`.
pub fn refund_id_for(payment_id: &str, number: &str) -> String {
    let stem = payment_id.strip_prefix("pay_").unwrap_or(payment_id);
    format!("rfd_{stem}_{number}")
}

/// Whether `id` names a refund (rather than a payment).
pub fn is_refund_id(id: &str) -> bool {
    id.starts_with("rfd_")
}

/// The PSP idempotency key of refund `number` of `payment_id`: `payonce-refund-<payment_id>-<n>`.
pub fn refund_key(payment_id: &str, number: &str) -> String {
    format!("payonce-refund-{payment_id}-{number}")
}

impl RefundStatus {
    /// Whether reconcile still looks at a refund in this status: pending, or succeeded (which
    /// may still fail) until it stops watching it.
    pub fn watched(self) -> bool {
        matches!(self, Self::Pending | Self::Succeeded)
    }
}

impl Refund {
    /// A new pending refund `number` of `payment` (its amount to be reserved when claimed), sent
    /// by the holder of `lease` if any.
    pub fn new_pending(
        payment: &Payment,
        number: &str,
        amount: i64,
        reason: Option<RefundReason>,
        idempotency_pk: Option<String>,
        lease: Option<SenderLease>,
        now_ms: i64,
    ) -> Self {
        Self {
            refund_id: refund_id_for(&payment.payment_id, number),
            payment_id: payment.payment_id.clone(),
            number: number.to_owned(),
            amount,
            currency: payment.currency,
            reason,
            status: RefundStatus::Pending,
            provider_refund_id: None,
            failure_code: None,
            idempotency_pk,
            psp_maybe_reached: false,
            lease,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            check_at_ms: now_ms,
        }
    }

    /// The automatic refund of a late duplicate charge: the full amount, number `dup`, sent by
    /// whoever takes its lease (reconcile).
    pub fn duplicate_of(payment: &Payment, now_ms: i64) -> Self {
        Self::new_pending(
            payment,
            DUPLICATE_REFUND_NUMBER,
            payment.amount_captured(),
            Some(RefundReason::Duplicate),
            None,
            None,
            now_ms,
        )
    }

    /// Whether someone other than the holder of `mine` holds a live sender lease at `now_ms`.
    pub fn lease_held_by_other(&self, mine: Option<&str>, now_ms: i64) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|lease| Some(lease.token.as_str()) != mine && lease.until_ms > now_ms)
    }

    /// The PSP idempotency key of this refund.
    pub fn psp_key(&self) -> String {
        refund_key(&self.payment_id, &self.number)
    }

    /// The refund once `step` is applied at `now_ms`.
    pub fn after(&self, step: &RefundTransition, now_ms: i64) -> Refund {
        match step {
            RefundTransition::Unchanged => self.clone(),
            RefundTransition::Apply {
                status,
                provider_refund_id,
                failure_code,
            } => Refund {
                status: *status,
                provider_refund_id: provider_refund_id.clone(),
                failure_code: failure_code.clone(),
                updated_at_ms: now_ms,
                check_at_ms: if *status == RefundStatus::Succeeded
                    && self.status != RefundStatus::Succeeded
                {
                    now_ms + WATCH_FIRST_CHECK_MS
                } else {
                    self.check_at_ms
                },
                ..self.clone()
            },
        }
    }

    /// The API representation.
    pub fn view(&self) -> RefundView {
        RefundView {
            refund_id: self.refund_id.clone(),
            payment_id: self.payment_id.clone(),
            amount: self.amount,
            currency: self.currency,
            status: self.status,
            reason: self.reason,
            provider_refund_id: self.provider_refund_id.clone(),
            failure_code: self.failure_code.clone(),
        }
    }
}

/// What a source (the PSP's answer, a webhook, reconcile's lookup) learned about a refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefundSettlement {
    /// The PSP holds the refund, not final yet.
    Pending {
        /// The PSP's id.
        provider_refund_id: String,
    },
    /// Refunded.
    Succeeded {
        /// The PSP's id.
        provider_refund_id: String,
    },
    /// The PSP failed (or refused) the refund.
    Failed {
        /// The PSP's id, if it created one.
        provider_refund_id: Option<String>,
        /// Why.
        code: String,
    },
    /// The PSP provably never ran the refund; payonce gives it up.
    Canceled,
}

/// The decision of [`refund_transition`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefundTransition {
    /// Move the refund to this status; its payment's refunded and pending amounts follow.
    Apply {
        /// New status.
        status: RefundStatus,
        /// The PSP id to record (kept if already known).
        provider_refund_id: Option<String>,
        /// The failure reason, if failed.
        failure_code: Option<String>,
    },
    /// Nothing changes.
    Unchanged,
}

/// The one refund transition function: `pending → succeeded | failed | canceled`, and
/// `succeeded → failed` on the PSP's word about that very refund (a refund that reads succeeded
/// can still fail later; a lookup or webhook naming its PSP id says so).
/// Nothing else moves: a late `succeeded` never undoes a failure, nothing leaves `canceled`.
pub fn refund_transition(current: &Refund, settlement: &RefundSettlement) -> RefundTransition {
    let keep_id = |id: Option<&String>| id.cloned().or_else(|| current.provider_refund_id.clone());
    // Word about another PSP refund than the one we hold says nothing about ours.
    if names_another_refund(current, settlement) {
        return RefundTransition::Unchanged;
    }
    match (current.status, settlement) {
        (RefundStatus::Pending, RefundSettlement::Pending { provider_refund_id })
            if current.provider_refund_id.is_none() =>
        {
            RefundTransition::Apply {
                status: RefundStatus::Pending,
                provider_refund_id: Some(provider_refund_id.clone()),
                failure_code: None,
            }
        }
        (RefundStatus::Pending, RefundSettlement::Succeeded { provider_refund_id }) => {
            RefundTransition::Apply {
                status: RefundStatus::Succeeded,
                provider_refund_id: keep_id(Some(provider_refund_id)),
                failure_code: None,
            }
        }
        (
            RefundStatus::Pending,
            RefundSettlement::Failed {
                provider_refund_id,
                code,
            },
        ) => RefundTransition::Apply {
            status: RefundStatus::Failed,
            provider_refund_id: keep_id(provider_refund_id.as_ref()),
            failure_code: Some(code.clone()),
        },
        // A refund that succeeded fails only on the PSP's word about that very refund (a lookup
        // or a webhook naming the PSP's refund id we hold): a refused create names none, and the
        // refusal of a re-send says nothing about the refund that exists.
        (
            RefundStatus::Succeeded,
            RefundSettlement::Failed {
                provider_refund_id,
                code,
            },
        ) if names_this_refund(current, provider_refund_id.as_deref()) => RefundTransition::Apply {
            status: RefundStatus::Failed,
            provider_refund_id: keep_id(provider_refund_id.as_ref()),
            failure_code: Some(code.clone()),
        },
        (RefundStatus::Pending, RefundSettlement::Canceled) => RefundTransition::Apply {
            status: RefundStatus::Canceled,
            provider_refund_id: current.provider_refund_id.clone(),
            failure_code: None,
        },
        _ => RefundTransition::Unchanged,
    }
}

/// Whether `settlement` names a PSP refund other than the one `refund` holds (once the PSP's
/// refund id is stored, only word about that very refund may move it).
pub fn names_another_refund(refund: &Refund, settlement: &RefundSettlement) -> bool {
    let named = match settlement {
        RefundSettlement::Pending { provider_refund_id }
        | RefundSettlement::Succeeded { provider_refund_id } => Some(provider_refund_id),
        RefundSettlement::Failed {
            provider_refund_id, ..
        } => provider_refund_id.as_ref(),
        RefundSettlement::Canceled => None,
    };
    matches!((&refund.provider_refund_id, named), (Some(ours), Some(theirs)) if ours != theirs)
}

/// Whether the PSP's refund id `reported` is the one `refund` holds.
fn names_this_refund(refund: &Refund, reported: Option<&str>) -> bool {
    reported.is_some() && refund.provider_refund_id.as_deref() == reported
}

/// How a refund moving from `from` to `to` changes its payment's (refunded, pending) amounts.
pub fn refund_amounts_delta(from: RefundStatus, to: RefundStatus, amount: i64) -> (i64, i64) {
    use RefundStatus::*;
    match (from, to) {
        (Pending, Succeeded) => (amount, -amount),
        (Pending, Failed | Canceled) => (0, -amount),
        (Succeeded, Failed | Canceled) => (-amount, 0),
        _ => (0, 0),
    }
}

/// What a deployment does with a late duplicate charge: a success its order cannot follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LateDuplicates {
    /// Refund it in full, automatically (reconcile sends the refund).
    #[default]
    Refund,
    /// The PSP offers payonce no refunds: mark the payment `refund_required` for an operator
    /// at once, with its alarm, rather than create a refund that could never be sent.
    MarkRefundRequired,
}

impl LateDuplicates {
    /// The policy for a PSP that can (`true`) or cannot refund through payonce.
    pub fn for_refunds(supported: bool) -> Self {
        if supported {
            Self::Refund
        } else {
            Self::MarkRefundRequired
        }
    }
}

/// For a success that its order cannot follow (the order is paid or held by another attempt,
/// or moved to another version), as `policy` says: marks `after` as carrying the automatic
/// refund of the late duplicate and reserves the full amount, and returns that refund, to be
/// created in the same write; or, where the PSP cannot refund, marks `after` refund-required.
/// `None` for anything else, or if it was done before.
pub fn duplicate_refund_for(
    read: &Payment,
    after: &mut Payment,
    now_ms: i64,
    policy: LateDuplicates,
) -> Option<Refund> {
    let done = read.duplicate_refund || read.refund_required;
    if after.status != PaymentStatus::Succeeded || done || after.duplicate_refund {
        return None;
    }
    match policy {
        // A manual capture whose amount is not known yet cannot be refunded exactly: an
        // operator refunds it (the alarm fires as for a PSP that cannot refund).
        LateDuplicates::Refund if after.amount_captured() == 0 => {
            after.refund_required = true;
            None
        }
        LateDuplicates::Refund => {
            after.duplicate_refund = true;
            after.refund_pending += after.amount_captured();
            Some(Refund::duplicate_of(after, now_ms))
        }
        LateDuplicates::MarkRefundRequired => {
            after.refund_required = true;
            None
        }
    }
}

/// Whether writing `after` over `read` marks it a late duplicate charge ([`duplicate_refund_for`]
/// does, because the order is another attempt's): what raises the alarm.
pub fn marked_late_duplicate(read: &Payment, after: &Payment) -> bool {
    after.status == PaymentStatus::Succeeded
        && ((after.duplicate_refund && !read.duplicate_refund)
            || (after.refund_required && !read.refund_required))
}

/// `GET /payments/{id}`: the payment's view with the status it shows (see [`display_status`]),
/// its refunded and pending amounts, and its refunds.
pub fn payment_details(payment: &Payment, refunds: &[Refund]) -> serde_json::Value {
    let mut details = serde_json::to_value(payment.view()).unwrap_or_default();
    if let Some(fields) = details.as_object_mut() {
        fields.insert("status".into(), display_status(payment).into());
        fields.insert("amount_refunded".into(), payment.amount_refunded.into());
        fields.insert(
            "amount_refund_pending".into(),
            payment.refund_pending.into(),
        );
        let refunds: Vec<serde_json::Value> = refunds
            .iter()
            .map(|r| {
                serde_json::json!({
                    "refund_id": r.refund_id,
                    "amount": r.amount,
                    "status": r.status.as_str(),
                    "reason": r.reason.map(RefundReason::as_str),
                    "provider_refund_id": r.provider_refund_id,
                })
            })
            .collect();
        fields.insert("refunds".into(), refunds.into());
        if payment.refund_required {
            fields.insert("refund_required".into(), true.into());
        }
    }
    details
}

/// What is left to refund on `payment`: captured, less refunded and pending refunds.
pub fn refundable(payment: &Payment) -> i64 {
    if payment.status != PaymentStatus::Succeeded {
        return 0;
    }
    (payment.amount_captured() - payment.amount_refunded - payment.refund_pending).max(0)
}

/// The status a payment shows: `refunded` / `partially_refunded` once money went back,
/// derived from its succeeded refunds (so it may move back if a refund fails later).
pub fn display_status(payment: &Payment) -> &'static str {
    match payment.status {
        PaymentStatus::Succeeded if payment.amount_refunded >= payment.amount_captured() => {
            "refunded"
        }
        PaymentStatus::Succeeded if payment.amount_refunded > 0 => "partially_refunded",
        other => other.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(status: RefundStatus) -> Refund {
        Refund {
            refund_id: "rfd_1_1".into(),
            payment_id: "pay_1".into(),
            number: "1".into(),
            amount: 300,
            currency: Currency::Jpy,
            reason: None,
            status,
            provider_refund_id: None,
            failure_code: None,
            idempotency_pk: None,
            psp_maybe_reached: false,
            lease: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            check_at_ms: 0,
        }
    }

    fn succeeded() -> RefundSettlement {
        RefundSettlement::Succeeded {
            provider_refund_id: "re_1".into(),
        }
    }

    fn failed() -> RefundSettlement {
        RefundSettlement::Failed {
            provider_refund_id: Some("re_1".into()),
            code: "expired_or_canceled_card".into(),
        }
    }

    fn status_after(status: RefundStatus, settlement: &RefundSettlement) -> Option<RefundStatus> {
        let mut current = refund(status);
        if status == RefundStatus::Succeeded {
            current.provider_refund_id = Some("re_1".into());
        }
        match refund_transition(&current, settlement) {
            RefundTransition::Apply { status, .. } => Some(status),
            RefundTransition::Unchanged => None,
        }
    }

    #[test]
    fn pending_moves_to_each_final_state_and_succeeded_only_to_failed() {
        use RefundStatus::*;
        assert_eq!(status_after(Pending, &succeeded()), Some(Succeeded));
        assert_eq!(status_after(Pending, &failed()), Some(Failed));
        assert_eq!(
            status_after(Pending, &RefundSettlement::Canceled),
            Some(Canceled)
        );
        assert_eq!(status_after(Succeeded, &failed()), Some(Failed));
        assert_eq!(status_after(Succeeded, &succeeded()), None);
        assert_eq!(status_after(Succeeded, &RefundSettlement::Canceled), None);
        for settled in [Failed, Canceled] {
            for s in [succeeded(), failed(), RefundSettlement::Canceled] {
                assert_eq!(status_after(settled, &s), None, "{settled:?} {s:?}");
            }
        }
    }

    #[test]
    fn a_succeeded_refund_fails_only_on_word_naming_its_own_psp_refund() {
        let mut succeeded = refund(RefundStatus::Succeeded);
        succeeded.provider_refund_id = Some("re_1".into());
        // A refused create (a re-send the PSP turned down) names no refund: nothing moves.
        let refused = RefundSettlement::Failed {
            provider_refund_id: None,
            code: "charge_already_refunded".into(),
        };
        assert_eq!(
            refund_transition(&succeeded, &refused),
            RefundTransition::Unchanged
        );
        // Word about another PSP refund says nothing about this one.
        let other = RefundSettlement::Failed {
            provider_refund_id: Some("re_2".into()),
            code: "expired_or_canceled_card".into(),
        };
        assert_eq!(
            refund_transition(&succeeded, &other),
            RefundTransition::Unchanged
        );
        // A lookup or webhook naming this very refund moves it.
        assert!(matches!(
            refund_transition(&succeeded, &failed()),
            RefundTransition::Apply {
                status: RefundStatus::Failed,
                ..
            }
        ));
        // A pending refund a create refused fails, whatever it names.
        assert!(matches!(
            refund_transition(&refund(RefundStatus::Pending), &refused),
            RefundTransition::Apply {
                status: RefundStatus::Failed,
                ..
            }
        ));
    }

    #[test]
    fn word_about_another_psp_refund_moves_nothing_once_ours_is_known() {
        let mut pending = refund(RefundStatus::Pending);
        pending.provider_refund_id = Some("re_1".into());
        for other in [
            RefundSettlement::Failed {
                provider_refund_id: Some("re_2".into()),
                code: "expired_or_canceled_card".into(),
            },
            RefundSettlement::Succeeded {
                provider_refund_id: "re_2".into(),
            },
        ] {
            assert!(names_another_refund(&pending, &other));
            assert_eq!(
                refund_transition(&pending, &other),
                RefundTransition::Unchanged,
                "{other:?}"
            );
        }
        assert!(matches!(
            refund_transition(&pending, &succeeded()),
            RefundTransition::Apply {
                status: RefundStatus::Succeeded,
                ..
            }
        ));
    }

    #[test]
    fn a_pending_settlement_only_records_the_psp_id_once() {
        let pending = RefundSettlement::Pending {
            provider_refund_id: "re_9".into(),
        };
        assert!(matches!(
            refund_transition(&refund(RefundStatus::Pending), &pending),
            RefundTransition::Apply {
                status: RefundStatus::Pending,
                ..
            }
        ));
        let mut known = refund(RefundStatus::Pending);
        known.provider_refund_id = Some("re_9".into());
        assert_eq!(
            refund_transition(&known, &pending),
            RefundTransition::Unchanged
        );
    }

    #[test]
    fn amounts_move_between_pending_and_refunded() {
        use RefundStatus::*;
        assert_eq!(refund_amounts_delta(Pending, Succeeded, 5), (5, -5));
        assert_eq!(refund_amounts_delta(Pending, Failed, 5), (0, -5));
        assert_eq!(refund_amounts_delta(Pending, Canceled, 5), (0, -5));
        assert_eq!(refund_amounts_delta(Succeeded, Failed, 5), (-5, 0));
        assert_eq!(refund_amounts_delta(Pending, Pending, 5), (0, 0));
    }

    #[test]
    fn ids_and_keys_derive_from_the_payment_and_number() {
        assert_eq!(refund_id_for("pay_abc", "2"), "rfd_abc_2");
        assert!(is_refund_id("rfd_abc_dup"));
        assert!(!is_refund_id("pay_abc"));
        assert_eq!(refund_key("pay_abc", "dup"), "payonce-refund-pay_abc-dup");
    }
}
