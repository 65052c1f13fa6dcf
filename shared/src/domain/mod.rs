//! The payment domain: money, orders, payments and the one transition function. No AWS
//! types, no wire formats.

pub mod money;
pub mod order;
pub mod payment;

pub use money::{Currency, MAX_AMOUNT_MINOR};
pub use order::{LineItem, NewOrder, Order, OrderError, OrderPaymentState};
pub use payment::{
    log_order_not_following, transition, Failure, FailureKind, Payment, PaymentStatus, PaymentView,
    Settlement, Transition,
};
