//! Payment attempts and the one transition function every path uses (charge, webhooks,
//! reconcile): forward-only, and decided on the state that was read.

use super::money::Currency;
use serde::{Deserialize, Serialize};

/// Where a payment attempt stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    /// Sent (or about to be sent) to the PSP; outcome not known yet.
    Processing,
    /// The PSP charged the customer.
    Succeeded,
    /// The attempt ended without a charge (see [`Failure`]).
    Failed,
}

impl PaymentStatus {
    /// Stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Processing, Self::Succeeded, Self::Failed]
            .into_iter()
            .find(|s| s.as_str() == raw)
    }
}

/// Why an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The issuer declined the card (PSP-confirmed).
    Declined,
    /// The PSP refused the payment method itself (PSP-confirmed).
    Rejected,
    /// The PSP refused the request for another reason than the payment method (e.g. an amount
    /// below its minimum): PSP-confirmed, nothing charged.
    Refused,
    /// payonce gave the attempt up after proving the PSP never ran it (inferred).
    Abandoned,
}

/// The failure detail of a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Declined, rejected or abandoned.
    pub kind: FailureKind,
    /// The PSP's decline code (`generic_decline`, `insufficient_funds`, ...), for declines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decline_code: Option<String>,
}

/// A payment attempt, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// `pay_` + a hash of the idempotency record's key ([`payment_id_for`]); the PSP key is
    /// derived from it.
    pub payment_id: String,
    /// The order it pays.
    pub order_id: String,
    /// The order version it pays (fixes amount and currency).
    pub order_version: i64,
    /// The paying user.
    pub owner: String,
    /// Minor units, copied from the order version.
    pub amount: i64,
    /// Copied from the order.
    pub currency: Currency,
    /// The PSP token used (never card data).
    pub payment_method: String,
    /// PSP name (`stripe`, `fake`, ...).
    pub provider: String,
    /// The PSP's id for the charge (`pi_...`), once known.
    pub provider_payment_id: Option<String>,
    /// Current status.
    pub status: PaymentStatus,
    /// Failure detail when failed.
    pub failure: Option<Failure>,
    /// The key of the idempotency record that created it (kept on the payment itself).
    pub idempotency_pk: String,
    /// Whether a call under the attempt's PSP key may have reached the PSP. Set when an
    /// invocation takes over a lease that lapsed (its holder may have called the PSP and died);
    /// once set, a call that cannot connect no longer proves nothing was charged, so the order
    /// is never released on it.
    pub psp_maybe_reached: bool,
    /// Sum of the succeeded refunds, minor units.
    pub amount_refunded: i64,
    /// Sum of the pending refunds (reserved: a new refund fits only in what is left).
    pub refund_pending: i64,
    /// How many refunds the refund API has claimed on the payment (the next one is `n + 1`).
    pub refund_count: i64,
    /// Whether the automatic refund of a late duplicate charge was created for it.
    pub duplicate_refund: bool,
    /// A late duplicate charge the PSP cannot refund through payonce: an operator must refund
    /// it (the `refund-required` alarm fired when it was found).
    pub refund_required: bool,
    /// Epoch milliseconds.
    pub created_at_ms: i64,
    /// Epoch milliseconds of the last change.
    pub updated_at_ms: i64,
    /// While processing: when reconcile should next look at the attempt (epoch milliseconds).
    /// Each check that finds it still pending pushes this back, so attempts that stay pending
    /// never starve newer ones.
    pub check_at_ms: i64,
}

/// The payment as the API shows it; also the result of the key's completed record, which a
/// replay answers with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentView {
    /// Id.
    pub payment_id: String,
    /// The order paid.
    pub order_id: String,
    /// processing / succeeded / failed.
    pub status: PaymentStatus,
    /// Minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// PSP name.
    pub provider: String,
    /// The PSP's id, once known.
    pub provider_payment_id: Option<String>,
    /// Failure detail, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// The id of the payment a charge's idempotency key creates: `pay_` and 32 hex digits of the
/// SHA-256 of the record's key (`<scope>#<user>#<key>`, given as its text). A key has one payment for ever, so
/// the charge can read the payment (which holds the key's record) by the key alone, in the
/// same request as the order.
pub fn payment_id_for(record_key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(record_key.as_bytes());
    format!("pay_{}", hex::encode(&digest[..16]))
}

/// The expiry (epoch seconds) of a charge's idempotency record: never. It lives on its payment,
/// which is kept, so a retry with the key replays the payment however late it comes.
pub const CHARGE_RECORD_NEVER_EXPIRES_S: i64 = i64::MAX;

impl Payment {
    /// The payment once `transition` is applied at `now_ms` (what every store writes).
    pub fn after(&self, transition: &Transition, now_ms: i64) -> Payment {
        match transition {
            Transition::Unchanged => self.clone(),
            Transition::Apply {
                status,
                failure,
                provider_payment_id,
            } => Payment {
                status: *status,
                failure: failure.clone(),
                provider_payment_id: provider_payment_id.clone(),
                updated_at_ms: now_ms,
                ..self.clone()
            },
        }
    }

    /// The view as the key's completed record gives it (JSON).
    pub fn view_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(&self.view())
    }

    /// The API representation.
    pub fn view(&self) -> PaymentView {
        PaymentView {
            payment_id: self.payment_id.clone(),
            order_id: self.order_id.clone(),
            status: self.status,
            amount: self.amount,
            currency: self.currency,
            provider: self.provider.clone(),
            provider_payment_id: self.provider_payment_id.clone(),
            failure: self.failure.clone(),
        }
    }
}

/// What a source (the PSP's answer, a webhook, reconcile) learned about an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The PSP charged.
    Succeeded {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// The issuer declined.
    Declined {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
        /// The decline code.
        decline_code: String,
    },
    /// The PSP refused the payment method.
    Rejected,
    /// The PSP refused the request for another reason (validation, e.g. `amount_too_small`).
    Refused,
    /// The PSP provably never ran the attempt; payonce gives it up.
    Abandoned,
}

/// The decision of [`transition`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Move the payment to this status (with this failure and PSP id); the order follows:
    /// paid on success, released on failure.
    Apply {
        /// New status.
        status: PaymentStatus,
        /// Failure detail, if failed.
        failure: Option<Failure>,
        /// The PSP id to record (kept if already known).
        provider_payment_id: Option<String>,
    },
    /// Nothing changes: the payment is already there, or the settlement would move it backwards.
    Unchanged,
}

/// Whether the charge's own completion of `read` with `transition` leaves the order as it is:
/// an attempt that succeeds from `processing` holds its order (it reserved it, under the lease
/// the completion is fenced on, and only a failure of the attempt itself releases it), so the
/// order stays stored `processing` under it and reads as paid ([`crate::domain::Order::settled_by`]).
/// Webhooks and reconcile still write the order.
pub fn completion_leaves_order(read: &Payment, transition: &Transition) -> bool {
    read.status == PaymentStatus::Processing
        && matches!(
            transition,
            Transition::Apply {
                status: PaymentStatus::Succeeded,
                ..
            }
        )
}

/// The one transition function. States only move forward: `processing → succeeded | failed`;
/// a late failure never overrides `succeeded`; a PSP-confirmed success beats any failure
/// (the customer's money moved, which is the truth the books must show), in particular one
/// payonce inferred.
pub fn transition(current: &Payment, settlement: &Settlement) -> Transition {
    let keep_id = |id: Option<&String>| id.cloned().or_else(|| current.provider_payment_id.clone());
    // Word about another PSP payment than the one we hold (another integration on the same
    // account, a Dashboard user) says nothing about ours, however it is signed.
    if names_another_payment(current, settlement) {
        return Transition::Unchanged;
    }
    match (current.status, settlement) {
        (PaymentStatus::Succeeded, _) => Transition::Unchanged,
        (
            _,
            Settlement::Succeeded {
                provider_payment_id,
            },
        ) => Transition::Apply {
            status: PaymentStatus::Succeeded,
            failure: None,
            provider_payment_id: keep_id(Some(provider_payment_id)),
        },
        (PaymentStatus::Failed, _) => Transition::Unchanged,
        (
            PaymentStatus::Processing,
            Settlement::Declined {
                provider_payment_id,
                decline_code,
            },
        ) => Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(Failure {
                kind: FailureKind::Declined,
                decline_code: Some(decline_code.clone()),
            }),
            provider_payment_id: keep_id(provider_payment_id.as_ref()),
        },
        (PaymentStatus::Processing, Settlement::Rejected) => Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(Failure {
                kind: FailureKind::Rejected,
                decline_code: None,
            }),
            provider_payment_id: current.provider_payment_id.clone(),
        },
        (PaymentStatus::Processing, Settlement::Refused) => Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(Failure {
                kind: FailureKind::Refused,
                decline_code: None,
            }),
            provider_payment_id: current.provider_payment_id.clone(),
        },
        (PaymentStatus::Processing, Settlement::Abandoned) => Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(Failure {
                kind: FailureKind::Abandoned,
                decline_code: None,
            }),
            provider_payment_id: current.provider_payment_id.clone(),
        },
    }
}

/// Whether `settlement` names a PSP payment other than the one `payment` holds (once the PSP's
/// id is stored, only word about that very payment may move it).
pub fn names_another_payment(payment: &Payment, settlement: &Settlement) -> bool {
    let named = match settlement {
        Settlement::Succeeded {
            provider_payment_id,
        } => Some(provider_payment_id),
        Settlement::Declined {
            provider_payment_id,
            ..
        } => provider_payment_id.as_ref(),
        Settlement::Rejected | Settlement::Refused | Settlement::Abandoned => None,
    };
    matches!((&payment.provider_payment_id, named), (Some(ours), Some(theirs)) if ours != theirs)
}

/// A payment `pay_1` of 100 JPY on order `ord_1` in `status`, for the domain's unit tests.
#[cfg(test)]
pub(crate) fn test_payment(status: PaymentStatus, failure: Option<FailureKind>) -> Payment {
    Payment {
        payment_id: "pay_1".into(),
        order_id: "ord_1".into(),
        order_version: 1,
        owner: "u".into(),
        amount: 100,
        currency: Currency::Jpy,
        payment_method: "pm_card_visa".into(),
        provider: "stripe".into(),
        provider_payment_id: None,
        status,
        failure: failure.map(|kind| Failure {
            kind,
            decline_code: None,
        }),
        idempotency_pk: "payments.create#u#k".into(),
        psp_maybe_reached: false,
        amount_refunded: 0,
        refund_pending: 0,
        refund_count: 0,
        duplicate_refund: false,
        refund_required: false,
        created_at_ms: 0,
        updated_at_ms: 0,
        check_at_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(status: PaymentStatus, failure: Option<FailureKind>) -> Payment {
        test_payment(status, failure)
    }

    fn succeeded() -> Settlement {
        Settlement::Succeeded {
            provider_payment_id: "pi_1".into(),
        }
    }

    fn declined() -> Settlement {
        Settlement::Declined {
            provider_payment_id: Some("pi_1".into()),
            decline_code: "generic_decline".into(),
        }
    }

    #[test]
    fn processing_moves_to_either_final_state() {
        let p = payment(PaymentStatus::Processing, None);
        assert!(matches!(
            transition(&p, &succeeded()),
            Transition::Apply {
                status: PaymentStatus::Succeeded,
                ..
            }
        ));
        match transition(&p, &declined()) {
            Transition::Apply {
                status: PaymentStatus::Failed,
                failure: Some(f),
                provider_payment_id,
            } => {
                assert_eq!(f.kind, FailureKind::Declined);
                assert_eq!(f.decline_code.as_deref(), Some("generic_decline"));
                assert_eq!(provider_payment_id.as_deref(), Some("pi_1"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            transition(&p, &Settlement::Abandoned),
            Transition::Apply {
                status: PaymentStatus::Failed,
                ..
            }
        ));
    }

    #[test]
    fn nothing_moves_a_success_backwards() {
        let p = payment(PaymentStatus::Succeeded, None);
        for s in [
            succeeded(),
            declined(),
            Settlement::Rejected,
            Settlement::Abandoned,
        ] {
            assert_eq!(transition(&p, &s), Transition::Unchanged, "{s:?}");
        }
    }

    #[test]
    fn a_psp_success_beats_an_inferred_failure_but_failures_do_not_stack() {
        let abandoned = payment(PaymentStatus::Failed, Some(FailureKind::Abandoned));
        assert!(matches!(
            transition(&abandoned, &succeeded()),
            Transition::Apply {
                status: PaymentStatus::Succeeded,
                failure: None,
                ..
            }
        ));
        assert_eq!(transition(&abandoned, &declined()), Transition::Unchanged);
        let declined_payment = payment(PaymentStatus::Failed, Some(FailureKind::Declined));
        assert_eq!(
            transition(&declined_payment, &Settlement::Abandoned),
            Transition::Unchanged
        );
    }

    #[test]
    fn word_about_another_psp_payment_moves_nothing_once_ours_is_known() {
        // GIVEN a declined payment whose PSP payment we hold
        let mut declined_payment = payment(PaymentStatus::Failed, Some(FailureKind::Declined));
        declined_payment.provider_payment_id = Some("pi_1".into());
        // WHEN a signed success names our payment but another PSP payment
        let foreign = Settlement::Succeeded {
            provider_payment_id: "pi_other".into(),
        };
        // THEN nothing moves; the same word about ours would (a success beats a failure only
        // if inferred, so use a processing payment for that)
        assert!(names_another_payment(&declined_payment, &foreign));
        assert_eq!(
            transition(&declined_payment, &foreign),
            Transition::Unchanged
        );
        let mut processing = payment(PaymentStatus::Processing, None);
        processing.provider_payment_id = Some("pi_1".into());
        assert_eq!(transition(&processing, &foreign), Transition::Unchanged);
        assert!(matches!(
            transition(&processing, &succeeded()),
            Transition::Apply {
                status: PaymentStatus::Succeeded,
                ..
            }
        ));
        // AND before any PSP id is stored, the first word names it
        let unknown = payment(PaymentStatus::Processing, None);
        assert!(!names_another_payment(&unknown, &foreign));
    }

    #[test]
    fn only_the_charges_own_success_from_processing_leaves_the_order() {
        let processing = payment(PaymentStatus::Processing, None);
        let failed = payment(PaymentStatus::Failed, Some(FailureKind::Abandoned));
        // A success from processing: the attempt holds its order, which it leaves.
        assert!(completion_leaves_order(
            &processing,
            &transition(&processing, &succeeded())
        ));
        // A success that beats an inferred failure: the order may have moved on, so it follows
        // (or a duplicate refund is made).
        assert!(!completion_leaves_order(
            &failed,
            &transition(&failed, &succeeded())
        ));
        // A decline releases the order; nothing changing writes no order either way.
        assert!(!completion_leaves_order(
            &processing,
            &transition(&processing, &declined())
        ));
        assert!(!completion_leaves_order(
            &processing,
            &Transition::Unchanged
        ));
    }
}
