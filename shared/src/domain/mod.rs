//! The payment domain: money, orders, payments and the one transition function (`settlement`). No AWS
//! types, no wire formats.

pub mod money;
pub mod operation;
pub mod order;
pub mod payment;
pub mod psp;
pub mod refund;
pub mod settlement;

pub use money::{integer, optional_integer, Currency, Integer, MAX_AMOUNT_MINOR};
pub use operation::{CancelRefusal, CaptureRefusal, OperationKind, PaymentOperation};
pub use order::{LineItem, NewOrder, Order, OrderError, OrderPaymentState};
pub use payment::{
    payment_id_for, CancellationReason, CaptureMethod, Failure, FailureKind, NextAction,
    NextActionView, OrderEffect, Payment, PaymentStatus, PaymentView, Progress, ACTION_TIMEOUT,
    CHARGE_RECORD_NEVER_EXPIRES_S,
};
pub use psp::PspKind;
pub use refund::{
    display_status, duplicate_refund_for, is_refund_id, marked_late_duplicate,
    names_another_refund, payment_details, refund_amounts_delta, refund_id_for, refund_key,
    refund_transition, refundable, LateDuplicates, Refund, RefundReason, RefundSettlement,
    RefundStatus, RefundTransition, RefundView, SenderLease, DUPLICATE_REFUND_NUMBER,
};
pub use settlement::{
    completion_leaves_order, names_another_payment, transition, Settlement, Transition,
};
