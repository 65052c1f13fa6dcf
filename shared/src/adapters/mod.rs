//! Adapters: the only code that knows a backend's wire format or SDK.

#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod faults;
pub mod memory;
#[cfg(feature = "psp")]
pub mod psp;
#[cfg(feature = "psp")]
pub mod secrets;
#[cfg(feature = "sqs")]
pub mod sqs;

/// A payment's view as a completed charge record answers with it, with an encoding failure as a store error.
#[cfg(feature = "payments")]
pub(crate) fn encode_view(
    payment: &crate::domain::Payment,
) -> Result<String, crate::idempotency::StoreError> {
    payment
        .view_json()
        .map_err(|e| crate::idempotency::StoreError::Backend {
            operation: "encode payment view",
            source: Box::new(e),
        })
}

/// The key of a user's attempt counter in the window `window` (an item of the idempotency table
/// in both stores, forgotten like an expired record).
#[cfg(feature = "payments")]
pub(crate) fn user_counter_key(user: &str, window: i64) -> String {
    format!("limit#user#{user}#{window}")
}

/// Reports a payment about to be written alone because its order is held or paid by another
/// attempt (or moved to another version): the order stays as it is. A success there is a late
/// duplicate charge ([`crate::domain::marked_late_duplicate`]), whose alarm is raised here,
/// before the write is sent: a write that applies but whose answer is lost (its retry then
/// meets the payment already marked, and nothing tells it the mark was its own) has alarmed
/// all the same. A write that fails and is decided again may alarm twice; never zero times.
#[cfg(feature = "payments")]
pub(crate) fn settling_alone(read: &crate::domain::Payment, after: &crate::domain::Payment) {
    if crate::domain::marked_late_duplicate(read, after) {
        crate::alarms::late_duplicate(after);
    } else if after.status != crate::domain::PaymentStatus::Succeeded {
        tracing::warn!(payment_id = %after.payment_id, order_id = %after.order_id,
            status = after.status.as_str(), "the order is held by another attempt; settling the payment alone");
    }
}

/// What a store found writing a payment's transition (both stores decide it alike).
#[cfg(feature = "payments")]
pub(crate) enum TransitionWrite {
    /// Written: the payment as it now is.
    Written(Box<crate::domain::Payment>),
    /// The payment is no longer in the status it was read in: nothing written.
    PaymentMoved,
    /// The webhook event was already applied: nothing written.
    EventSeen,
    /// The lease the write was fenced on is no longer the record's: nothing written.
    RecordRefused,
}

#[cfg(feature = "payments")]
impl TransitionWrite {
    /// The answer of `finish_attempt` for `payment`: a refused lease is `LeaseLost`.
    pub(crate) fn finished(
        self,
        payment: &crate::domain::Payment,
    ) -> Result<crate::ports::SettleOutcome, crate::idempotency::StoreError> {
        use crate::ports::SettleOutcome;
        match self {
            Self::Written(after) => Ok(SettleOutcome::Settled(after)),
            Self::PaymentMoved => Ok(SettleOutcome::Moved),
            Self::RecordRefused => Err(crate::idempotency::StoreError::LeaseLost {
                key: crate::idempotency::RecordKey::from_stored(payment.idempotency_pk.clone()),
            }),
            Self::EventSeen => Ok(SettleOutcome::Duplicate),
        }
    }

    /// The answer of `settle`, which holds no lease: anything refused means read again.
    pub(crate) fn settled(self) -> crate::ports::SettleOutcome {
        use crate::ports::SettleOutcome;
        match self {
            Self::Written(after) => SettleOutcome::Settled(after),
            Self::PaymentMoved | Self::RecordRefused => SettleOutcome::Moved,
            Self::EventSeen => SettleOutcome::Duplicate,
        }
    }
}

/// What a refused take of a refund's sender lease found, from the refund as it is now. A refund
/// that holds exactly the lease asked for was taken by this very request, whose answer was lost
/// and whose retry met its own write.
#[cfg(feature = "payments")]
pub(crate) fn refund_lease_refused(
    now: Option<crate::domain::Refund>,
    asked: &crate::idempotency::Lease,
    now_ms: i64,
) -> crate::ports::RefundLeaseOutcome {
    use crate::domain::RefundStatus;
    use crate::ports::RefundLeaseOutcome;
    match now {
        Some(now)
            if now.lease == Some(asked.into())
                && now.status == RefundStatus::Pending
                && !crate::mutations::active(crate::mutations::Mutation::LostAnswerIsARefusal) =>
        {
            RefundLeaseOutcome::Taken(Box::new(now))
        }
        Some(now) if now.status == RefundStatus::Pending => match &now.lease {
            Some(held) if held.until_ms > now_ms => RefundLeaseOutcome::Held {
                until_ms: held.until_ms,
            },
            _ => RefundLeaseOutcome::Moved(Some(Box::new(now))),
        },
        other => RefundLeaseOutcome::Moved(other.map(Box::new)),
    }
}
