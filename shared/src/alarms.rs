//! The alarms a store write raises while it applies a transition: a log line with its `alarm`
//! and, where an operator must act, its metric. The domain decides what happened; this module
//! only reports it, so the domain depends on no metrics.

use crate::domain::{Payment, PaymentStatus};

/// Logs a payment that settled while its order is held or paid by another attempt (or moved to
/// another version). A success there is a late duplicate charge: the customer paid twice. It is
/// refunded automatically (the refund is created with the success), and it raises the
/// `late-duplicate-charge` alarm; where the PSP cannot refund, it is marked refund-required and
/// raises `refund-required`.
pub fn order_not_following(after: &Payment) {
    if after.status == PaymentStatus::Succeeded && after.refund_required {
        tracing::error!(payment_id = %after.payment_id, order_id = %after.order_id,
            amount = after.amount, currency = after.currency.as_str(), alarm = "refund-required",
            "a charge succeeded for an order another attempt paid, or that moved on, and the PSP cannot refund through payonce; an operator must refund it");
        crate::metrics::emit(|emf| {
            emf.count(crate::metrics::LATE_DUPLICATE_REFUND_REQUIRED, 1)
                .property("payment_id", &after.payment_id)
        });
    } else if after.status == PaymentStatus::Succeeded {
        tracing::error!(payment_id = %after.payment_id, order_id = %after.order_id,
            amount = after.amount, currency = after.currency.as_str(), alarm = "late-duplicate-charge",
            "a charge succeeded for an order another attempt paid, or that moved on; refunding it as a duplicate");
        crate::metrics::emit(|emf| {
            emf.count(crate::metrics::LATE_DUPLICATE_REFUNDED, 1)
                .property("payment_id", &after.payment_id)
        });
    } else {
        tracing::warn!(payment_id = %after.payment_id, order_id = %after.order_id,
            status = after.status.as_str(), "the order is held by another attempt; settling the payment alone");
    }
}
