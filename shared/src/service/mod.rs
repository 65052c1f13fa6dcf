//! Application services: the use cases handlers call, written against the ports only.

pub mod charge;
pub mod orders;
pub mod settle;

pub use charge::{ChargeConfig, ChargeError, ChargeService, CrashPoint, PayAnswer, PayRequest};
pub use orders::{Created, OrderService, OrdersError};
pub use settle::{apply_settlement, settlement_of, Applied};
