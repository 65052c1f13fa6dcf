//! Capturing and canceling a payment: what each asks of the payment, and the one operation a
//! payment admits at a time.
//!
//! An operation is claimed on the payment itself (with the idempotency record of the request
//! that claimed it), so two requests under different keys never both reach the PSP; and it is
//! sent under a PSP key derived from the payment and the claim's number alone
//! ([`PaymentOperation::psp_key`]), so every re-send of one claim, by whichever request or
//! reconcile, is one operation at the PSP. A claim is released only once its request provably
//! did nothing at the PSP (refused, or never sent); the next claim has the next number, so a
//! PSP that stored the refusal under the old key never answers the new one with it.

use super::payment::{Payment, PaymentStatus};
use serde::{Deserialize, Serialize};

/// What is done to a payment after it was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationKind {
    /// Capture an authorized payment (all of it, or part: the rest is released).
    Capture,
    /// Cancel a payment waiting for its customer, or an authorized one: nothing is charged.
    Cancel,
}

impl OperationKind {
    /// The stored and logged name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Capture => "capture",
            Self::Cancel => "cancel",
        }
    }

    /// The kind named `raw`, if any.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "capture" => Some(Self::Capture),
            "cancel" => Some(Self::Cancel),
            _ => None,
        }
    }

    /// The PSP idempotency key of this operation on `payment_id`: `payonce-capture-<id>` or
    /// `payonce-cancel-<id>`, whoever asks and under whichever key.
    pub fn psp_key(self, payment_id: &str) -> String {
        format!("payonce-{}-{payment_id}", self.as_str())
    }
}

/// An operation claimed on a payment: at most one at a time. It stays on the payment once the
/// PSP did it (the payment is then final) or while its outcome is unknown; it goes when the PSP
/// refused it or was never reached, so another may be asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentOperation {
    /// Capture or cancel.
    pub kind: OperationKind,
    /// A capture's amount, minor units (every re-send asks for the same); `None` for a cancel.
    pub amount: Option<i64>,
    /// The key of the idempotency record of the request that claimed it (its text).
    pub record: String,
    /// Its number among the operations claimed on the payment, from 1.
    pub seq: i64,
    /// The payment's status when it was claimed (a cancel claimed while the customer was
    /// asked to act is not sent again once the payment is authorized: that needs staff).
    pub from: PaymentStatus,
}

impl PaymentOperation {
    /// The PSP idempotency key of this claim on `payment_id`: [`OperationKind::psp_key`] for
    /// the first claim, with `-<seq>` after it for later ones.
    pub fn psp_key(&self, payment_id: &str) -> String {
        let base = self.kind.psp_key(payment_id);
        if self.seq <= 1 {
            base
        } else {
            format!("{base}-{}", self.seq)
        }
    }
}

/// Why a payment cannot be captured now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CaptureRefusal {
    /// Only an authorized payment can be captured.
    #[error("the payment is {0}, not authorized")]
    NotAuthorized(&'static str),
    /// Another request's capture or cancel is under way.
    #[error("a {0} of this payment is already under way under another Idempotency-Key")]
    Busy(&'static str),
    /// More than the authorization holds.
    #[error("the capture exceeds the {capturable} that can be captured")]
    ExceedsAuthorized {
        /// What may be captured.
        capturable: i64,
    },
    /// Less than the whole authorization, where the PSP captures only all of it.
    #[error("this payment provider captures the whole authorization: capture all {capturable} or leave amount out")]
    WholeOnly {
        /// What may be captured.
        capturable: i64,
    },
}

/// Why a payment cannot be canceled now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CancelRefusal {
    /// Captured, failed, canceled, or still processing: nothing a cancel can stop.
    #[error(
        "the payment is {0}; only a payment waiting for its customer or authorized can be canceled"
    )]
    NotCancelable(&'static str),
    /// Another request's capture or cancel is under way.
    #[error("a {0} of this payment is already under way under another Idempotency-Key")]
    Busy(&'static str),
    /// An authorized payment is canceled by staff only.
    #[error("canceling an authorized payment needs the staff scope")]
    StaffOnly,
}

impl Payment {
    /// The amount a capture of `asked` (all of it when `None`) takes, if the payment can be
    /// captured now.
    pub fn capture_amount(&self, asked: Option<i64>) -> Result<i64, CaptureRefusal> {
        if self.status != PaymentStatus::Authorized {
            return Err(CaptureRefusal::NotAuthorized(self.status.as_str()));
        }
        if let Some(operation) = &self.operation {
            return Err(CaptureRefusal::Busy(operation.kind.as_str()));
        }
        let capturable = self.progress.amount_capturable;
        match asked.unwrap_or(capturable) {
            amount if (1..=capturable).contains(&amount) => Ok(amount),
            _ => Err(CaptureRefusal::ExceedsAuthorized { capturable }),
        }
    }

    /// Whether the payment can be canceled now, by staff (`staff`) or its owner.
    pub fn cancelable(&self, staff: bool) -> Result<(), CancelRefusal> {
        match self.status {
            PaymentStatus::RequiresAction => {}
            PaymentStatus::Authorized if staff => {}
            PaymentStatus::Authorized => return Err(CancelRefusal::StaffOnly),
            other => return Err(CancelRefusal::NotCancelable(other.as_str())),
        }
        match &self.operation {
            Some(operation) => Err(CancelRefusal::Busy(operation.kind.as_str())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::payment::test_payment;

    fn authorized(capturable: i64) -> Payment {
        let mut payment = test_payment(PaymentStatus::Authorized, None);
        payment.progress.amount_capturable = capturable;
        payment
    }

    #[test]
    fn a_capture_takes_what_is_asked_up_to_the_authorization() {
        let payment = authorized(100);
        assert_eq!(payment.capture_amount(None), Ok(100));
        assert_eq!(payment.capture_amount(Some(40)), Ok(40));
        assert_eq!(payment.capture_amount(Some(100)), Ok(100));
        assert_eq!(
            payment.capture_amount(Some(101)),
            Err(CaptureRefusal::ExceedsAuthorized { capturable: 100 })
        );
    }

    #[test]
    fn only_an_authorized_payment_without_an_operation_is_captured() {
        for status in [
            PaymentStatus::Processing,
            PaymentStatus::RequiresAction,
            PaymentStatus::Succeeded,
            PaymentStatus::Failed,
            PaymentStatus::Canceled,
        ] {
            assert_eq!(
                test_payment(status, None).capture_amount(None),
                Err(CaptureRefusal::NotAuthorized(status.as_str()))
            );
        }
        let mut busy = authorized(100);
        busy.operation = Some(PaymentOperation {
            kind: OperationKind::Cancel,
            amount: None,
            record: "payments.cancel#u#k".into(),
            seq: 1,
            from: PaymentStatus::Authorized,
        });
        assert_eq!(
            busy.capture_amount(Some(1)),
            Err(CaptureRefusal::Busy("cancel"))
        );
        assert_eq!(busy.cancelable(true), Err(CancelRefusal::Busy("cancel")));
    }

    #[test]
    fn the_owner_cancels_an_action_and_staff_an_authorization_too() {
        let waiting = test_payment(PaymentStatus::RequiresAction, None);
        assert_eq!(waiting.cancelable(false), Ok(()));
        assert_eq!(waiting.cancelable(true), Ok(()));
        let held = authorized(100);
        assert_eq!(held.cancelable(false), Err(CancelRefusal::StaffOnly));
        assert_eq!(held.cancelable(true), Ok(()));
        for status in [
            PaymentStatus::Processing,
            PaymentStatus::Succeeded,
            PaymentStatus::Failed,
            PaymentStatus::Canceled,
        ] {
            assert_eq!(
                test_payment(status, None).cancelable(true),
                Err(CancelRefusal::NotCancelable(status.as_str()))
            );
        }
    }

    #[test]
    fn the_psp_keys_name_the_payment_alone() {
        assert_eq!(
            OperationKind::Capture.psp_key("pay_1"),
            "payonce-capture-pay_1"
        );
        assert_eq!(
            OperationKind::Cancel.psp_key("pay_1"),
            "payonce-cancel-pay_1"
        );
        for kind in [OperationKind::Capture, OperationKind::Cancel] {
            assert_eq!(OperationKind::parse(kind.as_str()), Some(kind));
        }
        let claim = |seq| PaymentOperation {
            kind: OperationKind::Capture,
            amount: Some(1),
            record: "payments.capture#u#k".into(),
            seq,
            from: PaymentStatus::Authorized,
        };
        assert_eq!(claim(1).psp_key("pay_1"), "payonce-capture-pay_1");
        assert_eq!(claim(2).psp_key("pay_1"), "payonce-capture-pay_1-2");
    }
}
