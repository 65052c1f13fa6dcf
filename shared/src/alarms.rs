//! The alarms a payment's write raises: a log line with its `alarm` and its metric. The domain
//! decides what a write does and emits nothing; a store raises the alarm through this module as
//! it decides to write a late duplicate (`adapters::settling_alone`), before sending it.

use crate::domain::Payment;

/// Raises the alarm of a payment a write marked a late duplicate
/// ([`crate::domain::marked_late_duplicate`]): it succeeded for an order another attempt paid or
/// that moved on, so the customer paid twice. It is refunded automatically (the refund is
/// created with the success), and it raises the `late-duplicate-charge` alarm; where the PSP
/// cannot refund, it is marked refund-required and raises `refund-required`. Raised before the
/// write is sent, so at least once per marking, even when the write's answer is lost.
pub fn late_duplicate(after: &Payment) {
    if after.refund_required {
        tracing::error!(payment_id = %after.payment_id, order_id = %after.order_id,
            amount = after.amount, currency = after.currency.as_str(), alarm = "refund-required",
            "a charge succeeded for an order another attempt paid, or that moved on, and the PSP cannot refund through payonce; an operator must refund it");
        crate::metrics::emit(|emf| {
            emf.count(crate::metrics::LATE_DUPLICATE_REFUND_REQUIRED, 1)
                .property("payment_id", &after.payment_id)
        });
    } else {
        tracing::error!(payment_id = %after.payment_id, order_id = %after.order_id,
            amount = after.amount, currency = after.currency.as_str(), alarm = "late-duplicate-charge",
            "a charge succeeded for an order another attempt paid, or that moved on; refunding it as a duplicate");
        crate::metrics::emit(|emf| {
            emf.count(crate::metrics::LATE_DUPLICATE_REFUNDED, 1)
                .property("payment_id", &after.payment_id)
        });
    }
}
