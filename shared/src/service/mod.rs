//! Application services: the use cases handlers call, written against the ports only.

pub mod charge;
pub mod cleanup;
pub mod complete;
pub mod limits;
pub mod operations;
pub mod orders;
pub mod reconcile;
pub mod reconcile_soon;
pub mod refund;
pub mod settle;
pub mod webhooks;

#[cfg(feature = "faults")]
pub use charge::CrashPoint;
pub use charge::{ChargeConfig, ChargeError, ChargeService, PayAnswer, PayRequest};
pub use operations::{
    Caller, OperationAnswer, OperationCommand, OperationConfig, OperationError, OperationService,
    CANCEL_SCOPE, CAPTURE_OAUTH_SCOPE, CAPTURE_SCOPE,
};
pub use orders::{Created, OrderService, OrdersError};
pub use refund::{
    RefundAnswer, RefundCommand, RefundConfig, RefundError, RefundService, REFUND_OAUTH_SCOPE,
};
pub use settle::{apply_event, apply_settlement, settlement_of, Applied, EventApplied, EventError};
